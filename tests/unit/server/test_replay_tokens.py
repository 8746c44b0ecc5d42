"""Replays over response channels at the archive: the replay-token map (Java 1.53's `generateReplayToken`,
`getReplaySession`, `removeReplayTokensForSession`, `checkReplayTokens`) and how the adapter routes a replay request
that carries a token (`setupSessionAndChannelForReplay`): from any image, to the token's control session, with the
replay channel answering that image."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.codecs import CODEC, messages
from aeron_archive_spark.archive.constants import ControlResponseCode
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.control_session import ControlSession
from aeron_archive_spark.archive.server.control_session_adapter import (
    KIND_TOKEN,
    KIND_WRONG_IMAGE,
    ControlSessionAdapter,
)
from aeron_archive_spark.archive.server.replay_tokens import ReplayTokens
from tests.unit.server.fakes import FakeConductor, active_control_session

MS = 1_000_000
LIFETIME_NS = 5_000 * MS
NOW = 1_000_000 * MS


# ---- the token map --------------------------------------------------------------------------------------------


class Repeating(random.Random):
    """Draws -1 (never a token), then a value twice (a token in use must not be given again), then others."""

    def __init__(self, values: list[int]) -> None:
        super().__init__()
        self.values = values

    def randint(self, a: int, b: int) -> int:
        assert (a, b) == (-(1 << 63), (1 << 63) - 1)
        return self.values.pop(0)


def test_a_token_is_never_minus_one_nor_one_in_use():
    tokens = ReplayTokens(LIFETIME_NS, Repeating([-1, 42, 42, -1, 43]))
    assert tokens.generate(7, 3, NOW) == 42
    assert tokens.generate(7, 3, NOW) == 43
    assert len(tokens) == 2


def test_a_token_names_its_session_for_its_recording_only_within_its_life_and_any_number_of_times():
    tokens = ReplayTokens(LIFETIME_NS)
    token = tokens.generate(7, 3, NOW)
    assert tokens.control_session_id(token, 3, NOW) == 7
    assert tokens.control_session_id(token, 3, NOW + LIFETIME_NS - 1) == 7  # reusable
    assert tokens.control_session_id(token, 4, NOW) is None
    assert tokens.control_session_id(token, 3, NOW + LIFETIME_NS) is None
    assert tokens.control_session_id(token + 1, 3, NOW) is None


def test_tokens_expire_and_go_with_their_control_session():
    tokens = ReplayTokens(LIFETIME_NS)
    early = tokens.generate(7, 3, NOW)
    later = tokens.generate(7, 4, NOW + 10 * MS)
    other = tokens.generate(8, 3, NOW + 10 * MS)
    tokens.expire(NOW + LIFETIME_NS)
    assert len(tokens) == 2 and tokens.control_session_id(early, 3, NOW) is None
    tokens.remove_session(7)
    assert len(tokens) == 1 and tokens.control_session_id(later, 4, NOW) is None
    assert tokens.control_session_id(other, 3, NOW + 20 * MS) == 8


def test_a_refused_token_is_described_in_java_s_words_and_why():
    tokens = ReplayTokens(LIFETIME_NS)
    token = tokens.generate(7, 3, NOW)
    prefix = f"Unknown session or token timeout for replayToken={token}: "
    assert tokens.describe_refusal(token, 4, NOW) == (
        prefix + "the token was issued for recordingId=3, not recordingId=4")
    assert tokens.describe_refusal(token, 3, NOW + LIFETIME_NS + 250 * MS) == prefix + "the token expired 250 ms ago"
    assert tokens.describe_refusal(99, 3, NOW) == (
        "Unknown session or token timeout for replayToken=99: no such token (never issued, expired or its control "
        "session closed)")


# ---- the adapter routing a replay with a token --------------------------------------------------------------------

CONTROL_SESSION_ID = 31
CONTROL_IMAGE = 5  # the image the control session connected on
REQUEST_IMAGE = 6  # the requester's own publication, opened for the replay
REQUEST_IMAGE_CORRELATION_ID = 987_654
TOKEN = 1234567890123
REPLAY_CHANNEL = "aeron:udp?control-mode=response|control=localhost:40999"


@dataclass
class Header:
    session_id: int


class FakeImage:
    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeControlSubscription:
    """The archive's control subscription: delivers what the test queued, knows its images' correlation ids."""

    def __init__(self) -> None:
        self.queued: list[tuple[bytes, int]] = []
        self.images: dict[int, int] = {REQUEST_IMAGE: REQUEST_IMAGE_CORRELATION_ID}
        self.in_poll = False

    def poll(self, handler: Any, limit: int) -> int:
        self.in_poll = True
        try:
            delivered, self.queued = self.queued[:limit], self.queued[limit:]
            for data, session_id in delivered:
                handler(memoryview(data), Header(session_id))
            return len(delivered)
        finally:
            self.in_poll = False

    def image_by_session_id(self, session_id: int) -> FakeImage | None:
        assert not self.in_poll, "a subscription cannot be used from inside its own poll"
        correlation_id = self.images.get(session_id)
        return None if correlation_id is None else FakeImage(correlation_id)


class FakeHost:
    def __init__(self, tokens: ReplayTokens) -> None:
        self.tokens = tokens
        self.sessions: dict[int, ControlSession] = {}
        self.protocol_errors: list[tuple[str, str]] = []

    def new_control_session(self, **kwargs: Any) -> None:
        raise AssertionError("no connects here")

    def control_session(self, control_session_id: int) -> ControlSession | None:
        return self.sessions.get(control_session_id)

    def token_replay_session(self, replay_token: int, recording_id: int) -> ControlSession:
        control_session_id = self.tokens.control_session_id(replay_token, recording_id, NOW)
        if control_session_id is None:
            raise ArchiveError(self.tokens.describe_refusal(replay_token, recording_id, NOW), ErrorCode.GENERIC)
        return self.sessions[control_session_id]

    def on_protocol_error(self, message: str, kind: str = "", error: BaseException | None = None) -> None:
        self.protocol_errors.append((kind, message))


@dataclass
class Rig:
    adapter: ControlSessionAdapter
    host: FakeHost
    conductor: FakeConductor
    session: ControlSession
    subscription: FakeControlSubscription
    token: int

    def send(self, name: str, image_session_id: int = REQUEST_IMAGE, version: int | None = None,
             **fields: Any) -> None:
        data = bytearray(CODEC.encode(name, **fields))
        if version is not None:  # an older sender: the header's version field (offset 6)
            data[6:8] = version.to_bytes(2, "little")
        self.subscription.queued.append((bytes(data), image_session_id))
        self.adapter.poll()

    def replay(self, name: str = "ReplayRequest", **fields: Any) -> None:
        values: dict[str, Any] = dict(
            control_session_id=CONTROL_SESSION_ID, correlation_id=77, recording_id=3, position=0, length=4096,
            replay_stream_id=1001, file_io_max_length=-1, replay_token=self.token, replay_channel=REPLAY_CHANNEL)
        if name == "BoundedReplayRequest":
            values["limit_counter_id"] = 12
        values.update(fields)
        self.send(name, **values)


@pytest.fixture
def rig() -> Rig:
    tokens = ReplayTokens(LIFETIME_NS)
    host = FakeHost(tokens)
    conductor = FakeConductor()
    session = active_control_session(conductor, CONTROL_SESSION_ID, CONTROL_IMAGE)
    host.sessions[CONTROL_SESSION_ID] = session
    subscription = FakeControlSubscription()
    adapter = ControlSessionAdapter(host, [subscription])  # type: ignore[list-item]
    return Rig(adapter, host, conductor, session, subscription, tokens.generate(CONTROL_SESSION_ID, 3, NOW))


@pytest.mark.parametrize("name", ["ReplayRequest", "BoundedReplayRequest"])
def test_a_replay_with_a_token_from_another_image_goes_to_the_token_s_session_answering_that_image(rig, name):
    rig.replay(name)
    [(called, (session, request))] = rig.conductor.calls
    assert (called, session) == ("start_replay", rig.session)
    assert type(request) is getattr(messages, name)
    channel = ChannelUri.parse(request.replay_channel)
    assert channel.params == {"control-mode": "response", "control": "localhost:40999",
                              "response-correlation-id": str(REQUEST_IMAGE_CORRELATION_ID)}
    assert (request.correlation_id, request.recording_id, request.length, request.replay_token) == (
        77, 3, 4096, rig.token)
    assert rig.host.protocol_errors == []


def test_the_response_correlation_id_a_client_put_in_the_channel_is_replaced(rig):
    rig.replay(replay_channel=REPLAY_CHANNEL + "|response-correlation-id=1")
    [(_, (_, request))] = rig.conductor.calls
    assert ChannelUri.parse(request.replay_channel).get("response-correlation-id") == str(
        REQUEST_IMAGE_CORRELATION_ID)


@pytest.mark.parametrize(("fields", "why"), [
    pytest.param({"replay_token": TOKEN}, "no such token", id="unknown"),
    pytest.param({"recording_id": 4}, "the token was issued for recordingId=3, not recordingId=4", id="recording"),
])
def test_a_refused_token_is_counted_and_the_session_the_request_names_is_told_why(rig, fields, why):
    rig.replay(**fields)
    assert rig.conductor.calls == []
    ((kind, message),) = rig.host.protocol_errors
    assert kind == KIND_TOKEN and "Unknown session or token timeout for replayToken=" in message
    (error,) = rig.conductor.publication.messages()
    assert (error.correlation_id, error.code, error.relevant_id) == (77, ControlResponseCode.ERROR,
                                                                     ErrorCode.GENERIC)
    assert error.error_message.startswith(
        f"Unknown session or token timeout for replayToken={fields.get('replay_token', rig.token)}: {why}")


def test_a_refused_token_naming_no_known_session_is_only_counted(rig):
    rig.replay(replay_token=TOKEN, control_session_id=CONTROL_SESSION_ID + 1)
    assert [kind for kind, _ in rig.host.protocol_errors] == [KIND_TOKEN]
    assert rig.conductor.publication.offered == [] and rig.conductor.calls == []


def test_a_token_replay_from_an_image_that_is_gone_is_refused_naming_it(rig):
    del rig.subscription.images[REQUEST_IMAGE]  # the requester closed its publication before the archive looked
    rig.replay(correlation_id=79)
    assert rig.conductor.calls == []
    (error,) = rig.conductor.publication.messages()
    assert (error.correlation_id, error.code) == (79, ControlResponseCode.ERROR)
    assert f"the image it came from (session {REQUEST_IMAGE}) is gone" in error.error_message


@pytest.mark.parametrize("fields", [
    pytest.param({"replay_token": -1}, id="no-token"),
    pytest.param({"replay_channel": "aeron:udp?endpoint=localhost:40999"}, id="not-a-response-channel"),
    pytest.param({"replay_channel": "not a channel"}, id="bad-channel"),
])
def test_without_both_a_token_and_a_response_channel_a_replay_is_an_ordinary_request_of_its_own_image(rig, fields):
    rig.replay(**fields)  # from the requester's other publication: not the session's image
    assert rig.conductor.calls == []
    assert [kind for kind, _ in rig.host.protocol_errors] == [KIND_WRONG_IMAGE]
    rig.replay(image_session_id=CONTROL_IMAGE, correlation_id=80, **fields)  # from the session's own image
    [(called, (session, request))] = rig.conductor.calls
    assert (called, session, request.correlation_id) == ("start_replay", rig.session, 80)
    assert "response-correlation-id" not in request.replay_channel


def test_a_sender_older_than_version_10_has_no_token(rig):
    """Java reads the token only from version 10 on; an older request is an ordinary one, whatever the bytes."""
    rig.send("ReplayRequest", version=9, control_session_id=CONTROL_SESSION_ID, correlation_id=81, recording_id=3,
             position=0, length=4096, replay_stream_id=1001, file_io_max_length=-1, replay_token=rig.token,
             replay_channel=REPLAY_CHANNEL)
    assert rig.conductor.calls == []
    assert [kind for kind, _ in rig.host.protocol_errors] == [KIND_WRONG_IMAGE]


def test_a_replay_token_request_reaches_the_conductor(rig):
    rig.send("ReplayTokenRequest", image_session_id=CONTROL_IMAGE, control_session_id=CONTROL_SESSION_ID,
             correlation_id=82, recording_id=3)
    [(called, (session, request))] = rig.conductor.calls
    assert (called, session, request.correlation_id, request.recording_id) == ("replay_token", rig.session, 82, 3)
