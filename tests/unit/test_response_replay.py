"""The client side of replays over response channels (`client.response_replay`): the request publication's channel,
its readiness and its closing, and the client's refusals; with fakes of the Aeron objects (the system tests in
tests/system/test_response_channels.py and test_replication.py run the whole thing on a media driver)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.response_replay import (
    ReplayRequestPublication,
    is_response_channel,
    replay_request_channel,
)
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.native import NativeAeronError


@pytest.mark.parametrize(("channel", "expected"), [
    ("aeron:udp?control-mode=response|control=localhost:9000", True),
    ("aeron:ipc?control-mode=response", True),
    ("aeron:udp?control-mode=dynamic|control=localhost:9000", False),
    ("aeron:udp?endpoint=localhost:0", False),
    ("not a channel", False),
])
def test_a_response_channel_is_one_in_control_mode_response(channel: str, expected: bool) -> None:
    assert is_response_channel(channel) is expected


def test_the_request_channel_is_the_control_channel_naming_the_subscription_as_java_builds_it() -> None:
    control = "aeron:udp?endpoint=archive:8010|session-id=77|term-length=1m|init-term-id=1|term-id=2|term-offset=0"
    channel = ChannelUri.parse(replay_request_channel(control, 4242))
    assert channel.params == {"endpoint": "archive:8010", "term-length": "65536", "response-correlation-id": "4242",
                              "ssc": "false"}


class FakePublication:
    def __init__(self) -> None:
        self.is_connected = False
        self.available_window = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakePending:
    """An add in flight: `answer` is what the next poll gives (None: not yet; an exception: refused)."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.is_done = False
        self.abandoned = False

    def poll(self) -> FakePublication | None:
        answer = self.answer
        if isinstance(answer, Exception):
            self.is_done = True
            raise answer
        if answer is not None:
            self.is_done = True
            if self.abandoned:
                answer.close()
                return None
        return answer

    def abandon(self) -> None:
        self.abandoned = True


class FakeAeron:
    def __init__(self) -> None:
        self.pending = FakePending()
        self.added: list[tuple[str, int]] = []

    def async_add_exclusive_publication(self, channel: str, stream_id: int) -> FakePending:
        self.added.append((channel, stream_id))
        return self.pending


def request_publication(aeron: FakeAeron) -> ReplayRequestPublication:
    return ReplayRequestPublication(aeron, "aeron:ipc", 10, 4242, 1_000_000_000)  # type: ignore[arg-type]


def test_the_request_publication_is_ready_once_added_connected_and_with_a_window() -> None:
    aeron = FakeAeron()
    publication = request_publication(aeron)
    assert aeron.added == [("aeron:ipc?response-correlation-id=4242|term-length=65536|ssc=false", 10)]
    assert publication.poll() is None
    added = aeron.pending.answer = FakePublication()
    assert publication.poll() is None
    added.is_connected = True
    assert publication.poll() is None  # no window yet (the archive's image has not given it a limit)
    added.available_window = 65536
    proxy = publication.poll()
    assert proxy is not None and proxy.publication is added and publication.poll() is proxy
    assert publication.close() is True and added.closed


def test_closing_while_the_add_is_in_flight_settles_once_the_driver_answers() -> None:
    aeron = FakeAeron()
    publication = request_publication(aeron)
    assert publication.close() is False and aeron.pending.abandoned
    assert publication.close() is False
    late = aeron.pending.answer = FakePublication()
    assert publication.close() is True and late.closed


def test_a_refused_add_is_raised_by_poll_and_settles_a_close() -> None:
    aeron = FakeAeron()
    publication = request_publication(aeron)
    aeron.pending.answer = NativeAeronError("unable to find response subscription for response-correlation-id=4242")
    with pytest.raises(NativeAeronError, match="response-correlation-id=4242"):
        publication.poll()
    assert publication.close() is True


def idle_archive() -> AeronArchive:
    """A client whose control session is never used (the refusals come before any request)."""
    poller = SimpleNamespace(subscription=SimpleNamespace(is_connected=True))
    return AeronArchive(SimpleNamespace(), False, SimpleNamespace(), poller, 1, 1_000_000_000,  # type: ignore[arg-type]
                        None)


def test_start_replay_over_a_response_channel_needs_the_subscription_s_registration_id_as_java_s() -> None:
    with pytest.raises(ArchiveError, match="when using startReplay with a response channel, "
                                           "ReplayParams::subscriptionRegistrationId must be set"):
        idle_archive().start_replay(3, 0, -1, "aeron:ipc?control-mode=response", 1001)
