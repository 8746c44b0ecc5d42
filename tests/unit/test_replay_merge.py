"""`ReplayMerge` state by state with a fake subscription, image, archive and clock: Java's states, requests, windows
and timeouts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.replay_merge import (
    LIVE_ADD_MAX_WINDOW,
    MERGE_PROGRESS_TIMEOUT_DEFAULT_MS,
    ReplayMerge,
    ReplayMergeState,
    ReplayMergeTimeoutError,
)
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import NULL_POSITION, ControlResponseCode
from aeron_archive_spark.archive.exceptions import ArchiveError

S = ReplayMergeState
SESSION = 77
REPLAY_SESSION = (5 << 32) | 1234  # the archive's replay session id: the image's session id is its low 32 bits
LIVE = "aeron:udp?endpoint=localhost:40457|control=localhost:40456"


class Pending:
    def poll(self) -> bool:
        return True


class FakeImage:
    def __init__(self) -> None:
        self.position = 0
        self.term_buffer_length = 64 * 1024
        self.active_transport_count = 1
        self.is_closed = False

    def poll(self, handler: Any, limit: int) -> int:
        return 0


class FakeSubscription:
    channel = "aeron:udp?control-mode=manual"
    stream_id = 1001

    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []
        self.endpoint: str | None = None
        self.image: FakeImage | None = None
        self.is_connected = False

    def async_add_destination(self, uri: str) -> Pending:
        self.changes.append(("add", uri))
        return Pending()

    def async_remove_destination(self, uri: str) -> Pending:
        self.changes.append(("remove", uri))
        return Pending()

    def resolved_endpoint(self) -> str | None:
        return self.endpoint

    def image_by_session_id(self, session_id: int) -> FakeImage | None:
        assert session_id == 1234
        return self.image


class FakeArchive:
    control_session_id = SESSION

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.responses: list[Any] = []
        self.next_id = 100

    def send(self, build: Any) -> int:
        self.next_id += 1
        self.sent.append(build({"control_session_id": SESSION, "correlation_id": self.next_id}))
        return self.next_id

    def poll_responses(self) -> list[Any]:
        out, self.responses = self.responses, []
        return out

    def answer(self, value: int, code: int = ControlResponseCode.OK, message: str = "") -> None:
        self.responses.append(
            SimpleNamespace(
                template_id=t.CONTROL_RESPONSE,
                control_session_id=SESSION,
                correlation_id=self.next_id,
                code=code,
                relevant_id=value,
                error_message=message,
            )
        )


class Rig:
    def __init__(self, replay_destination: str = "aeron:udp?endpoint=localhost:0") -> None:
        self.now = 1_000
        self.subscription = FakeSubscription()
        self.archive = FakeArchive()
        self.merge = ReplayMerge(
            self.subscription,
            self.archive,
            "aeron:udp?session-id=1234",  # type: ignore[arg-type]
            replay_destination,
            LIVE,
            42,
            0,
            clock_ms=lambda: self.now,
        )

    def work(self, ms: int = 1) -> int:
        self.now += ms
        return self.merge.do_work()

    def to_replay(self) -> None:
        self.subscription.endpoint = "127.0.0.1:39001"
        self.work()
        self.work()  # asks the recorded position
        self.archive.answer(8192)
        self.work()
        assert self.merge.state is S.REPLAY

    def to_catchup(self) -> FakeImage:
        self.to_replay()
        self.work()
        self.archive.answer(REPLAY_SESSION)
        self.work()
        assert self.merge.state is S.CATCHUP
        image = self.subscription.image = FakeImage()
        self.subscription.is_connected = True
        return image


def test_a_wildcard_replay_destination_is_resolved_from_the_subscription_first():
    rig = Rig()
    assert rig.subscription.changes == [("add", "aeron:udp?endpoint=localhost:0")]
    assert rig.merge.state is S.RESOLVE_REPLAY_PORT
    assert rig.work() == 0 and rig.merge.state is S.RESOLVE_REPLAY_PORT
    rig.subscription.endpoint = "127.0.0.1:39001"
    assert rig.work() == 1 and rig.merge.state is S.GET_RECORDING_POSITION
    uri = ChannelUri.parse(rig.merge.replay_channel)
    assert (uri.get("endpoint"), uri.get("linger"), uri.get("eos"), uri.get("session-id")) == (
        "127.0.0.1:39001",
        "0",
        "false",
        "1234",
    )


def test_a_fixed_replay_destination_is_used_as_the_replay_endpoint_at_once():
    rig = Rig("aeron:udp?endpoint=localhost:40458")
    assert rig.merge.state is S.GET_RECORDING_POSITION
    assert ChannelUri.parse(rig.merge.replay_channel).get("endpoint") == "localhost:40458"


def test_the_recorded_position_is_asked_with_backoff_until_known_then_the_replay_is_unbounded_from_the_start():
    rig = Rig()
    rig.subscription.endpoint = "127.0.0.1:39001"
    rig.work()
    rig.work()
    assert (
        type(rig.archive.sent[-1]).__name__ == "MaxRecordedPositionRequest" and rig.archive.sent[-1].recording_id == 42
    )
    rig.archive.answer(NULL_POSITION)  # not known yet: ask again, after the backoff
    rig.work()
    assert rig.merge.state is S.GET_RECORDING_POSITION and len(rig.archive.sent) == 1
    rig.work(1)
    assert len(rig.archive.sent) == 1  # backoff (16 ms by now) not over
    rig.work(20)
    assert len(rig.archive.sent) == 2
    rig.archive.answer(8192)
    rig.work()
    assert rig.merge.state is S.REPLAY and rig.merge.next_target_position == 8192
    rig.work()
    replay = rig.archive.sent[-1]
    assert type(replay).__name__ == "ReplayRequest"
    assert (replay.recording_id, replay.position, replay.length, replay.replay_stream_id) == (
        42,
        0,
        (1 << 63) - 1,
        1001,
    )
    rig.archive.answer(REPLAY_SESSION)
    rig.work()
    assert rig.merge.state is S.CATCHUP and rig.merge.is_replay_active and rig.merge.replay_session_id == REPLAY_SESSION


def test_catchup_then_live_join_then_merge_in_javas_order():
    rig = Rig()
    image = rig.to_catchup()
    rig.work()
    assert rig.merge.image is image and rig.merge.state is S.CATCHUP
    image.position = 8192  # the recorded position when asked
    rig.work()
    assert rig.merge.state is S.ATTEMPT_LIVE_JOIN
    rig.work(600)
    rig.archive.answer(8192 + 16 * 1024)  # a quarter term ahead: within the window, add the live destination
    rig.work()
    assert rig.merge.is_live_added and ("add", LIVE) in rig.subscription.changes and rig.merge.state is S.CATCHUP
    image.position = 8192 + 16 * 1024
    rig.work()
    assert rig.merge.state is S.ATTEMPT_LIVE_JOIN
    rig.work(600)
    rig.archive.answer(8192 + 16 * 1024)
    rig.work()  # caught up, but only one transport so far: not yet
    assert rig.merge.state is S.CATCHUP
    image.active_transport_count = 2
    rig.work()
    rig.work(600)
    rig.archive.answer(8192 + 16 * 1024)
    rig.work()
    assert rig.merge.is_merged and not rig.merge.is_replay_active
    assert rig.subscription.changes[-1] == ("remove", "aeron:udp?endpoint=localhost:0")
    assert type(rig.archive.sent[-1]).__name__ == "StopReplayRequest"
    assert rig.archive.sent[-1].replay_session_id == REPLAY_SESSION
    rig.merge.close()
    assert rig.subscription.changes[-1] == ("remove", "aeron:udp?endpoint=localhost:0")  # not removed twice
    assert rig.merge.state is S.CLOSED


def test_the_live_destination_waits_until_the_replay_is_within_a_quarter_term():
    rig = Rig()
    image = rig.to_catchup()
    image.position = 8192
    rig.work()
    rig.work()
    rig.work(600)
    rig.archive.answer(8192 + 16 * 1024 + 32)  # just beyond a quarter of the 64 KiB term
    rig.work()
    assert not rig.merge.is_live_added and rig.merge.state is S.CATCHUP
    assert min(image.term_buffer_length >> 2, LIVE_ADD_MAX_WINDOW) == 16 * 1024


def test_no_progress_for_the_timeout_fails_the_merge():
    rig = Rig()
    rig.work()
    with pytest.raises(ReplayMergeTimeoutError, match="no progress: state=RESOLVE_REPLAY_PORT"):
        rig.work(MERGE_PROGRESS_TIMEOUT_DEFAULT_MS + 1)
    assert rig.merge.has_failed


def test_an_error_from_the_archive_fails_the_merge():
    rig = Rig()
    rig.to_replay()
    rig.work()
    rig.archive.answer(5, ControlResponseCode.ERROR, "unknown recording id: 42")
    with pytest.raises(ArchiveError, match="unknown recording id: 42"):
        rig.work()
    assert rig.merge.has_failed


def test_closing_before_the_merge_removes_the_replay_destination_and_stops_the_replay():
    rig = Rig()
    rig.to_catchup()
    rig.merge.close()
    assert rig.subscription.changes[-1] == ("remove", "aeron:udp?endpoint=localhost:0")
    assert type(rig.archive.sent[-1]).__name__ == "StopReplayRequest"
    assert rig.merge.state is S.CLOSED
