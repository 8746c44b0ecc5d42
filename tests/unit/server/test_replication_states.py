"""`ReplicationSession` state by state, with fakes for the conductor, the source archive and the recording
subscription: what it asks the source, what it signals, and how it fails."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from aeron_archive_spark.archive.client.response_poller import DescriptorMessage
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.replication_session import (
    ReplicationRequest,
    ReplicationSession,
    ReplicationState,
)

S = RecordingSignal
SRC_SESSION = 900
REPLICATION_ID = 55
TIMEOUT_NS = 1_000_000_000
SRC = RecordingDescriptor(
    control_session_id=SRC_SESSION, correlation_id=0, recording_id=3, start_timestamp=11, stop_timestamp=12,
    start_position=0, stop_position=8192, initial_term_id=5, segment_file_length=131072, term_buffer_length=65536,
    mtu_length=1408, session_id=77, stream_id=1001, stripped_channel="aeron:ipc", original_channel="aeron:ipc",
    source_identity="aeron:ipc")


class Source:
    """The source archive's client: requests kept, responses queued by the test."""

    control_session_id = SRC_SESSION
    answers_time_index = False  # a Java archive, unless a test says otherwise

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.arriving: list[list[Any]] = []
        self.closed = False

    def send(self, build: Any, via: Any = None) -> int:
        assert via is None, "no response channel in these tests"
        correlation_id = 100 + len(self.sent)
        self.sent.append(build({"control_session_id": SRC_SESSION, "correlation_id": correlation_id}))
        return correlation_id

    def poll_responses(self) -> list[Any]:
        return self.arriving.pop(0) if self.arriving else []

    def close(self) -> None:
        self.closed = True

    def answer(self, code: ControlResponseCode = ControlResponseCode.OK, relevant_id: int = 0,
               message: str = "") -> None:
        self.arriving.append([SimpleNamespace(template_id=t.CONTROL_RESPONSE, control_session_id=SRC_SESSION,
                                              correlation_id=100 + len(self.sent) - 1, code=code,
                                              relevant_id=relevant_id, error_message=message)])


class Connect:
    def __init__(self, polls: int = 1, error: ArchiveError | None = None) -> None:
        self.polls, self.error, self.closed = polls, error, False

    def poll(self) -> Any:
        if self.error is not None:
            raise self.error
        self.polls -= 1
        return "connected" if self.polls <= 0 else None

    def close(self) -> None:
        self.closed = True


class Image:
    def __init__(self) -> None:
        self.position, self.is_closed, self.is_end_of_stream = 0, False, False
        self.session_id, self.join_position, self.closed = 7, 0, False

    def close(self) -> None:
        self.closed = True


class Subscription:
    registration_id = 4242

    def __init__(self) -> None:
        self.is_closed = False
        self.resolved: str | None = "127.0.0.1:40001"
        self.image: Image | None = None

    def resolved_endpoint(self) -> str | None:
        return self.resolved

    def image_by_session_id(self, session_id: int) -> Image | None:
        return self.image


class Host:
    def __init__(self) -> None:
        self.signals: list[tuple[int, int, int, int, RecordingSignal]] = []
        self.errors: list[tuple[int, int, str]] = []
        self.calls: list[tuple[Any, ...]] = []
        self.subscription = Subscription()
        self.recorded = 0

    def new_replica(self, descriptor: RecordingDescriptor) -> int:
        self.calls.append(("new_replica", descriptor.recording_id))
        return 9

    def replace_replica(self, recording_id: int, descriptor: RecordingDescriptor) -> None:
        self.calls.append(("replace_replica", recording_id))

    def stop_position(self, recording_id: int) -> int:
        return 0

    def recorded_position(self, recording_id: int) -> int:
        return self.recorded

    def extend_replica(self, replication_id: int, control_session_id: int, recording_id: int, stream_id: int,
                       channel: str) -> Subscription:
        self.calls.append(("extend_replica", recording_id, stream_id, channel))
        return self.subscription

    def stop_replica_subscription(self, subscription_id: int) -> None:
        self.calls.append(("stop_replica_subscription", subscription_id))

    def signal(self, control_session_id: int, correlation_id: int, recording_id: int, subscription_id: int,
               position: int, signal: RecordingSignal) -> None:
        assert correlation_id == REPLICATION_ID
        self.signals.append((recording_id, subscription_id, position, 0, signal))

    def send_error(self, control_session_id: int, correlation_id: int, error_code: int, message: str) -> None:
        assert correlation_id == REPLICATION_ID
        self.errors.append((correlation_id, error_code, message))

    def on_replication_error(self, message: str, error: BaseException) -> None:
        self.calls.append(("counted", message))


def request(**fields: Any) -> ReplicationRequest:
    base: dict[str, Any] = dict(
        correlation_id=1, src_recording_id=SRC.recording_id, dst_recording_id=-1, stop_position=-1, channel_tag_id=-1,
        subscription_tag_id=-1, src_control_stream_id=10, src_control_channel="aeron:udp?endpoint=src:8010",
        live_destination="", replication_channel="", file_io_max_length=-1, replication_session_id=-1,
        encoded_credentials=b"", src_response_channel="")
    base.update(fields)
    return ReplicationRequest(**base)


class Rig:
    def __init__(self, connect: Connect | None = None, dst: RecordingDescriptor | None = None, **fields: Any) -> None:
        self.host, self.source, self.now = Host(), Source(), 0
        self.connect = connect or Connect()
        self.session = ReplicationSession(
            replication_id=REPLICATION_ID, control_session_id=1, request=request(**fields),
            replication_channel="aeron:udp?endpoint=localhost:0", dst_descriptor=dst, host=self.host,
            connect=lambda: self.connect, wrap=lambda _connected: self.source, action_timeout_ns=TIMEOUT_NS,
            now_ns=0)

    def work(self, advance_ns: int = 1) -> int:
        self.now += advance_ns
        return self.session.do_work(self.now)

    @property
    def state(self) -> ReplicationState:
        return self.session.state

    def to_descriptor_asked(self) -> None:
        self.work()  # starts the connect
        self.work()  # connected
        assert self.state is ReplicationState.REPLICATE_DESCRIPTOR
        self.work()  # ListRecording sent
        assert self.source.sent[-1].name == "ListRecordingRequest"
        assert self.source.sent[-1].recording_id == SRC.recording_id

    def describe(self, descriptor: RecordingDescriptor = SRC) -> None:
        self.source.arriving.append([DescriptorMessage(SRC_SESSION, 100 + len(self.source.sent) - 1, descriptor)])
        self.work()

    def to_replicating(self) -> Image:
        self.to_descriptor_asked()
        self.describe()
        self.work()  # EXTEND
        self.work()  # ReplayRequest sent
        self.source.answer(relevant_id=(3 << 32) | 7)
        self.work()
        image = self.host.subscription.image = Image()
        self.work()
        assert self.state is ReplicationState.REPLICATE
        return image


def test_a_stopped_source_is_replicated_into_a_new_replica_with_java_s_signals() -> None:
    rig = Rig()
    image = rig.to_replicating()
    assert rig.host.calls[:2] == [("new_replica", SRC.recording_id),
                                  ("extend_replica", 9, 1001,
                                   "aeron:udp?endpoint=localhost:0|rejoin=false|session-id=77")]
    replay = rig.source.sent[-1]
    assert (replay.name, replay.recording_id, replay.position, replay.length, replay.replay_stream_id) == (
        "ReplayRequest", SRC.recording_id, 0, -1, 1001)
    assert replay.replay_channel == "aeron:udp?endpoint=localhost:40001|session-id=77"
    image.position = 4096
    rig.work()
    assert rig.state is ReplicationState.REPLICATE
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is ReplicationState.DONE
    rig.session.close()
    # EXTEND and STOP come from the recording itself (the conductor), not from the session.
    assert [s[4] for s in rig.host.signals] == [S.REPLICATE, S.SYNC, S.REPLICATE_END]
    assert rig.host.signals[0][1:3] == (-1, 0) and rig.host.signals[1][1:3] == (4242, 8192)
    assert rig.host.signals[2][1:3] == (-1, -1)
    assert ("stop_replica_subscription", 4242) in rig.host.calls
    assert not any(r.name == "StopReplayRequest" for r in rig.source.sent)  # the replay ended by itself
    assert rig.source.closed and image.closed and rig.host.errors == []


def test_the_replay_is_not_asked_for_until_the_replica_s_port_is_bound() -> None:
    rig = Rig()
    rig.to_descriptor_asked()
    rig.describe()
    rig.host.subscription.resolved = None
    rig.work()  # EXTEND
    sent = len(rig.source.sent)
    rig.work()
    assert len(rig.source.sent) == sent and rig.state is ReplicationState.REPLAY
    rig.work(TIMEOUT_NS)
    assert rig.state is ReplicationState.DONE
    assert rig.host.errors[0][2].startswith("failed to resolve subscription endpoint")


def test_a_bound_ends_the_replication_without_sync_and_a_given_replica_is_extended_from_its_stop() -> None:
    rig = Rig(dst=replace(SRC, recording_id=9, stop_position=2048), dst_recording_id=9, stop_position=6144)
    image = rig.to_replicating()
    assert not any(c[0] == "new_replica" for c in rig.host.calls)
    replay = [r for r in rig.source.sent if r.name == "ReplayRequest"][-1]
    assert (replay.position, replay.length) == (2048, 6144 - 2048)
    image.position = 6144
    rig.work()
    assert rig.state is ReplicationState.DONE
    assert [s[4] for s in rig.host.signals] == []  # no REPLICATE (existing replica), no SYNC (bounded)


def test_an_unknown_source_recording_fails_with_java_s_text() -> None:
    rig = Rig()
    rig.to_descriptor_asked()
    rig.source.answer(ControlResponseCode.RECORDING_UNKNOWN, relevant_id=3)
    rig.work()
    assert rig.state is ReplicationState.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.UNKNOWN_RECORDING, "unknown src recording id 3")]


def test_a_file_io_max_length_below_the_mtu_is_refused_as_java_words_it() -> None:
    rig = Rig(file_io_max_length=1024)
    rig.to_descriptor_asked()
    rig.describe()
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.GENERIC,
                                "Replication fileIoMaxLength (1024) is less than than the recording mtuLength (1408)")]


def test_a_connect_failure_is_a_replication_connection_failure() -> None:
    rig = Rig(Connect(error=ArchiveError("no archive on control channel x", ErrorCode.GENERIC)))
    rig.work()
    rig.work()
    assert rig.state is ReplicationState.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.REPLICATION_CONNECTION_FAILURE,
                                "Replication connection failed=no archive on control channel x")]


def test_no_descriptor_within_the_action_timeout_fails_naming_where() -> None:
    rig = Rig()
    rig.to_descriptor_asked()
    rig.work(TIMEOUT_NS // 2)
    assert rig.state is ReplicationState.REPLICATE_DESCRIPTOR
    rig.work(TIMEOUT_NS)
    (error,) = rig.host.errors
    assert error[2].startswith("failed to fetch remote recording descriptor (replication 55 of recording 3 from the "
                               "archive at aeron:udp?endpoint=src:8010 stream 10")
    assert any(c[0] == "counted" for c in rig.host.calls)


def test_an_error_from_the_source_fails_the_replication() -> None:
    rig = Rig()
    rig.to_descriptor_asked()
    rig.describe()
    rig.work()
    rig.work()  # ReplayRequest sent
    rig.source.answer(ControlResponseCode.ERROR, ErrorCode.MAX_REPLAYS, "max concurrent replays reached")
    rig.work()
    assert rig.state is ReplicationState.DONE
    assert rig.host.errors[0][2].startswith("max concurrent replays reached (replication 55")


def test_a_replica_that_stopped_recording_between_two_steps_still_syncs_if_it_holds_the_source_s_stop() -> None:
    rig = Rig()
    rig.to_replicating()
    rig.host.recorded = SRC.stop_position
    rig.host.subscription.is_closed = True
    rig.work()
    assert rig.state is ReplicationState.DONE and rig.host.signals[-1][4] is S.SYNC and rig.host.errors == []
    other = Rig()
    other.to_replicating()
    other.host.recorded = 4096
    other.host.subscription.is_closed = True
    other.work()
    assert other.state is ReplicationState.DONE
    assert "ended at position 4096, before the source's stop position 8192" in other.host.errors[0][2]


def test_a_stopped_replication_stops_the_source_s_replay_and_the_recording() -> None:
    rig = Rig()
    rig.to_replicating()
    rig.session.abort("stop replication")
    assert rig.session.is_done()
    rig.session.close()
    stop = rig.source.sent[-1]
    assert stop.name == "StopReplayRequest" and stop.replay_session_id == (3 << 32) | 7
    assert ("stop_replica_subscription", 4242) in rig.host.calls
    assert rig.host.signals[-1][4] is S.REPLICATE_END


def test_a_live_destination_with_a_stopped_source_is_refused() -> None:
    rig = Rig(live_destination="aeron:udp?control=localhost:9000|control-mode=dynamic")
    rig.to_descriptor_asked()
    rig.describe()
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.GENERIC,
                                "cannot live merge without active source recording")]


@pytest.mark.parametrize("cls", ["ReplicateRequest", "TaggedReplicateRequest"])
def test_older_request_forms_take_java_s_defaults(cls: str) -> None:
    from aeron_archive_spark.archive.codecs import messages as m

    fields: dict[str, Any] = dict(control_session_id=1, correlation_id=2, src_recording_id=3, dst_recording_id=-1,
                                  src_control_stream_id=10, src_control_channel="aeron:ipc", live_destination="")
    if cls == "TaggedReplicateRequest":
        fields.update(channel_tag_id=5, subscription_tag_id=6)
    r = ReplicationRequest.of(getattr(m, cls).of(**fields))
    assert (r.stop_position, r.file_io_max_length, r.replication_session_id, r.replication_channel) == (-1, -1, -1, "")
    assert (r.channel_tag_id, r.subscription_tag_id) == ((5, 6) if cls == "TaggedReplicateRequest" else (-1, -1))


def test_the_conductor_closing_the_replica_settles_the_session_first() -> None:
    rig = Rig()
    rig.to_replicating()
    rig.session.on_replica_stopped(SRC.stop_position)  # before the recording's STOP goes out
    assert rig.state is ReplicationState.DONE and rig.host.signals[-1][4] is S.SYNC
    rig.session.on_replica_stopped(SRC.stop_position)  # once only
    assert [s[4] for s in rig.host.signals].count(S.SYNC) == 1
    early = Rig()
    early.to_replicating()
    early.session.on_replica_stopped(1024)
    assert early.state is ReplicationState.DONE
    assert "ended at position 1024, before the source's stop position 8192" in early.host.errors[0][2]
