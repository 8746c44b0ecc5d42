"""`ReplicationSession` state by state, with fakes only: the conductor (`ReplicationHost`), the connect to the source
archive and its client, the replica's recording subscription and the replay image.

Each test drives one session with increasing `now_ns` and checks its state, what it asked the source archive (the
request objects the fake source client built), the signals and errors it sent through the host and which host calls
it made, following Java 1.53's `ReplicationSession` as `docs/control-protocol.md` ("Replication") describes it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.response_poller import DescriptorMessage
from aeron_archive_spark.archive.codecs import CODEC, templates
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.constants import ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveDisconnectedError, ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.replication_session import (
    LIVE_ADD_MAX_WINDOW,
    SOURCE_POLL_INTERVAL_NS,
    ReplicationRequest,
    ReplicationSession,
    ReplicationState,
)

S = RecordingSignal
State = ReplicationState
MS = 1_000_000
TIMEOUT_NS = 1_000_000_000
START_NS = 5_000 * MS

REPLICATION_ID = 55
CONTROL_SESSION_ID = 31  # the requester's control session
SRC_SESSION = 900  # our control session on the source archive
SRC_CONTROL_CHANNEL = "aeron:udp?endpoint=src-host:8010"
SRC_CONTROL_STREAM = 10
NEW_REPLICA_ID = 9  # what the host's catalog gives a new replica
SUBSCRIPTION_ID = 4242  # the replica's recording subscription
BOUND_PORT = 40123  # where the driver binds a wildcard endpoint
REPLICATION_CHANNEL = "aeron:udp?endpoint=localhost:0"
FIXED_CHANNEL = "aeron:udp?endpoint=localhost:40456"
LIVE_DESTINATION = "aeron:udp?control=src-host:9000|control-mode=dynamic"
SRC = RecordingDescriptor(
    control_session_id=SRC_SESSION, correlation_id=0, recording_id=3, start_timestamp=11, stop_timestamp=12,
    start_position=4096, stop_position=69632, initial_term_id=5, segment_file_length=131072,
    term_buffer_length=65536, mtu_length=1408, session_id=77, stream_id=1001, stripped_channel="aeron:ipc",
    original_channel="aeron:ipc", source_identity="aeron:ipc")
SRC_LIVE = replace(SRC, stop_position=-1)
# The source's replay session id: the replay publication's session id (the replay channel's session-id, i.e. the
# source recording's) in the low 32 bits, as a source archive makes it.
REPLAY_SESSION_ID = (3 << 32) | SRC.session_id


def params(channel: str) -> dict[str, str]:
    return ChannelUri.parse(channel).params


# ---- fakes ------------------------------------------------------------------------------------------------------


class PendingChange:
    """A destination being added or removed: applied at the first poll, or refused with `error`."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.polls = 0

    def poll(self) -> bool:
        self.polls += 1
        if self.error is not None:
            raise self.error
        return True


@dataclass
class FakeImage:
    session_id: int = SRC.session_id
    position: int = SRC.start_position
    join_position: int = SRC.start_position
    term_buffer_length: int = SRC.term_buffer_length
    active_transport_count: int = 1
    is_closed: bool = False
    is_end_of_stream: bool = False
    closed_by_session: bool = False

    def close(self) -> None:
        self.closed_by_session = True


class FakeSubscription:
    """The replica's recording subscription. Its endpoint resolves as the native client's does: the first address
    the driver bound, the channel's endpoint or, for a multi-destination subscription (no endpoint in its channel),
    its first destination's, with a wildcard port bound to `BOUND_PORT`; None while `bound` is False."""

    registration_id = SUBSCRIPTION_ID

    def __init__(self) -> None:
        self.channel = ""
        self.is_closed = False
        self.bound = True
        self.images: dict[int, FakeImage] = {}
        self.asked_sessions: list[int] = []
        self.added: list[str] = []
        self.removed: list[str] = []
        self.refuse_changes: Exception | None = None

    def resolved_endpoint(self) -> str | None:
        uri = ChannelUri.parse(self.added[0] if self.added else self.channel)
        if not self.bound or uri.is_ipc:
            return None
        endpoint = uri.get("endpoint")
        if endpoint is None:  # a response channel: bound to any interface, on a port of its own
            return f"0.0.0.0:{BOUND_PORT}"
        port = endpoint.rpartition(":")[2]
        return f"127.0.0.1:{BOUND_PORT if port == '0' else port}"

    def image_by_session_id(self, session_id: int) -> FakeImage | None:
        self.asked_sessions.append(session_id)
        return self.images.get(session_id)

    def async_add_destination(self, uri: str) -> PendingChange:
        self.added.append(uri)
        return PendingChange(self.refuse_changes)

    def async_remove_destination(self, uri: str) -> PendingChange:
        self.removed.append(uri)
        return PendingChange(self.refuse_changes)


class FakeHost:
    """The conductor as a replication sees it: a catalog of stop positions, the calls made, signals and errors."""

    def __init__(self) -> None:
        self.stops: dict[int, int] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.signals: list[tuple[int, int, int, int, RecordingSignal]] = []
        self.errors: list[tuple[int, int, str]] = []
        self.counted: list[tuple[str, BaseException]] = []
        self.subscription = FakeSubscription()
        self.extend_error: ArchiveError | None = None
        self.recorded = 0
        self.settling: list[Any] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args_of(self, name: str) -> tuple[Any, ...]:
        (args,) = [args for called, args in self.calls if called == name]
        return args

    def new_replica(self, descriptor: RecordingDescriptor) -> int:
        self.calls.append(("new_replica", (descriptor,)))
        self.stops[NEW_REPLICA_ID] = descriptor.start_position
        return NEW_REPLICA_ID

    def replace_replica(self, recording_id: int, descriptor: RecordingDescriptor) -> None:
        self.calls.append(("replace_replica", (recording_id, descriptor)))
        self.stops[recording_id] = descriptor.start_position

    def stop_position(self, recording_id: int) -> int:
        return self.stops[recording_id]

    def recorded_position(self, recording_id: int) -> int:
        return self.recorded

    def extend_replica(self, replication_id: int, control_session_id: int, recording_id: int, stream_id: int,
                       channel: str) -> FakeSubscription:
        self.calls.append(("extend_replica", (replication_id, control_session_id, recording_id, stream_id, channel)))
        if self.extend_error is not None:
            raise self.extend_error
        self.subscription.channel = channel
        return self.subscription

    def stop_replica_subscription(self, subscription_id: int) -> None:
        self.calls.append(("stop_replica_subscription", (subscription_id,)))

    def signal(self, control_session_id: int, correlation_id: int, recording_id: int, subscription_id: int,
               position: int, signal: RecordingSignal) -> None:
        assert control_session_id == CONTROL_SESSION_ID
        self.signals.append((correlation_id, recording_id, subscription_id, position, signal))

    def send_error(self, control_session_id: int, correlation_id: int, error_code: int, message: str) -> None:
        assert control_session_id == CONTROL_SESSION_ID
        self.errors.append((correlation_id, error_code, message))

    def on_replication_error(self, message: str, error: BaseException) -> None:
        self.counted.append((message, error))

    def settle_later(self, settle: Any) -> None:
        self.settling.append(settle)

    def signal_names(self) -> list[RecordingSignal]:
        return [s[4] for s in self.signals]


CONNECTED = object()  # what a connect's poll hands back once connected
REQUEST_PROXY = object()  # the proxy of a response-channel replay's request publication


class FakeRequestPublication:
    """A response-channel replay's request publication (`ReplayRequestPublication`): the add and the connection
    come when the test says (`ready`); `close` is settled unless `unsettled_closes` says how many times not."""

    def __init__(self, response_subscription_id: int) -> None:
        self.response_subscription_id = response_subscription_id
        self.channel = f"aeron:udp?endpoint=src-host:8010|response-correlation-id={response_subscription_id}"
        self.ready = False
        self.polls = 0
        self.unsettled_closes = 0
        self.closes = 0

    def poll(self) -> object | None:
        self.polls += 1
        return REQUEST_PROXY if self.ready else None

    def close(self) -> bool:
        self.closes += 1
        if self.unsettled_closes > 0:
            self.unsettled_closes -= 1
            return False
        return True


class FakeConnect:
    """`AsyncConnect`: None for `polls_before_connected` polls, then connected; or raises `error`."""

    def __init__(self, polls_before_connected: int = 1, error: ArchiveError | None = None) -> None:
        self.polls_before_connected = polls_before_connected
        self.error = error
        self.polls = 0
        self.closed = False

    def poll(self) -> object | None:
        self.polls += 1
        if self.error is not None:
            raise self.error
        return CONNECTED if self.polls > self.polls_before_connected else None

    def close(self) -> None:
        self.closed = True


class FakeSource:
    """The connected source archive's client: requests built with correlation ids from 100 on, responses queued by
    the test and handed over all at once by the next poll."""

    control_session_id = SRC_SESSION
    answers_time_index = False  # a Java archive, unless a test says otherwise

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.sent_via: list[Any] = []  # the proxy each request went on (None: the control session's)
        self.request_publications: list[FakeRequestPublication] = []
        self.arriving: list[Any] = []
        self.polls = 0
        self.disconnected = False
        self.closed = False

    def send(self, build: Any, via: Any = None) -> int:
        assert not self.closed, "a request sent on a closed source client"
        correlation_id = 100 + len(self.sent)
        self.sent.append(build({"control_session_id": SRC_SESSION, "correlation_id": correlation_id}))
        self.sent_via.append(via)
        return correlation_id

    def replay_request_publication(self, response_subscription_id: int) -> FakeRequestPublication:
        assert not self.closed
        publication = FakeRequestPublication(response_subscription_id)
        self.request_publications.append(publication)
        return publication

    def poll_responses(self) -> list[Any]:
        self.polls += 1
        if self.disconnected:
            raise ArchiveDisconnectedError("the archive's control response image went away")
        out, self.arriving = self.arriving, []
        return out

    def close(self) -> None:
        self.closed = True

    # what the test looks at, and what it makes the source answer

    @property
    def last_correlation_id(self) -> int:
        return 100 + len(self.sent) - 1

    def names(self) -> list[str]:
        return [type(request).__name__ for request in self.sent]

    def last(self, name: str) -> Any:
        return [request for request in self.sent if type(request).__name__ == name][-1]

    def respond(self, code: ControlResponseCode = ControlResponseCode.OK, relevant_id: int = 0,
                message: str = "", correlation_id: int | None = None, session: int = SRC_SESSION) -> None:
        self.arriving.append(SimpleNamespace(
            template_id=templates.CONTROL_RESPONSE, control_session_id=session,
            correlation_id=self.last_correlation_id if correlation_id is None else correlation_id, code=code,
            relevant_id=relevant_id, error_message=message))

    def describe(self, descriptor: RecordingDescriptor) -> None:
        self.arriving.append(DescriptorMessage(SRC_SESSION, self.last_correlation_id, descriptor))


def replication_request(**fields: Any) -> ReplicationRequest:
    """A ReplicationRequest with Java's defaults (-1, empty) for whatever `fields` does not set."""
    values: dict[str, Any] = dict(
        correlation_id=1, src_recording_id=SRC.recording_id, dst_recording_id=-1, stop_position=-1,
        channel_tag_id=-1, subscription_tag_id=-1, src_control_stream_id=SRC_CONTROL_STREAM,
        src_control_channel=SRC_CONTROL_CHANNEL, live_destination="", replication_channel="",
        file_io_max_length=-1, replication_session_id=-1, encoded_credentials=b"", src_response_channel="")
    values.update(fields)
    return ReplicationRequest(**values)


class Rig:
    """One session over fresh fakes; `dst` is the destination recording's descriptor when the request names one."""

    live_position = 200_000  # the live source's recorded position, for the live cases

    def __init__(self, *, dst: RecordingDescriptor | None = None, connect: FakeConnect | None = None,
                 replication_channel: str = REPLICATION_CHANNEL, **request_fields: Any) -> None:
        self.host = FakeHost()
        self.source = FakeSource()
        self.connect = connect or FakeConnect()
        self.connects_started = 0
        self.now = START_NS
        if dst is not None:
            request_fields.setdefault("dst_recording_id", dst.recording_id)
            self.host.stops[dst.recording_id] = dst.stop_position
        self.session = ReplicationSession(
            replication_id=REPLICATION_ID, control_session_id=CONTROL_SESSION_ID,
            request=replication_request(**request_fields), replication_channel=replication_channel,
            dst_descriptor=dst, host=self.host, connect=self._start_connect, wrap=self._wrap,
            action_timeout_ns=TIMEOUT_NS, now_ns=self.now)

    def _start_connect(self) -> FakeConnect:
        self.connects_started += 1
        return self.connect

    def _wrap(self, connected: object) -> FakeSource:
        assert connected is CONNECTED
        return self.source

    @property
    def state(self) -> ReplicationState:
        return self.session.state

    @property
    def subscription(self) -> FakeSubscription:
        return self.host.subscription

    def work(self, advance_ns: int = MS) -> int:
        self.now += advance_ns
        return self.session.do_work(self.now)

    def error_texts(self) -> list[str]:
        return [text for _, _, text in self.host.errors]

    # ---- driving the session to a state ----

    def to_descriptor_requested(self) -> None:
        """CONNECT -> REPLICATE_DESCRIPTOR, ListRecording sent."""
        while self.state is State.CONNECT:
            self.work()
        assert self.state is State.REPLICATE_DESCRIPTOR
        self.work()
        assert self.source.names()[-1] == "ListRecordingRequest"

    def to_described(self, descriptor: RecordingDescriptor = SRC) -> None:
        """The source's descriptor answered (the state then depends on the case)."""
        self.to_descriptor_requested()
        self.source.describe(descriptor)
        self.work()

    def to_replay_requested(self, descriptor: RecordingDescriptor = SRC) -> Any:
        """... EXTEND -> REPLAY, the ReplayRequest sent; returns it."""
        self.to_described(descriptor)
        if self.state is State.SRC_RECORDING_POSITION:
            self.work()
            self.source.respond(relevant_id=self.live_position)
            self.work()
        assert self.state is State.EXTEND
        self.work()
        assert self.state is State.REPLAY
        self.work()
        return self.source.last("ReplayRequest")

    def to_image(self, descriptor: RecordingDescriptor = SRC) -> FakeImage:
        """... the replay acknowledged, its image found: REPLICATE (CATCHUP when live)."""
        self.to_replay_requested(descriptor)
        self.source.respond(relevant_id=REPLAY_SESSION_ID)
        self.work()
        assert self.state is State.AWAIT_IMAGE
        image = self.subscription.images[SRC.session_id] = FakeImage()
        self.work()
        return image

    def to_replicating(self, descriptor: RecordingDescriptor = SRC) -> FakeImage:
        image = self.to_image(descriptor)
        assert self.state is State.REPLICATE
        return image


def replicate_signal(recording_id: int = NEW_REPLICA_ID) -> tuple[int, int, int, int, RecordingSignal]:
    return (REPLICATION_ID, recording_id, -1, SRC.start_position, S.REPLICATE)


def end_signal(recording_id: int = NEW_REPLICA_ID) -> tuple[int, int, int, int, RecordingSignal]:
    return (REPLICATION_ID, recording_id, -1, -1, S.REPLICATE_END)


# ---- a stopped source into a new replica ------------------------------------------------------------------------


def test_the_connect_starts_at_the_first_step_and_is_polled_until_connected():
    rig = Rig(connect=FakeConnect(polls_before_connected=3))
    assert rig.state is State.CONNECT and rig.connects_started == 0
    rig.work()
    assert rig.connects_started == 1 and rig.connect.polls == 0
    for _ in range(3):
        rig.work()
        assert rig.state is State.CONNECT
    rig.work()
    assert rig.state is State.REPLICATE_DESCRIPTOR
    assert (rig.connects_started, rig.connect.polls, rig.source.sent) == (1, 4, [])
    assert rig.session.src is rig.source


def test_the_source_recording_is_listed_once_and_awaited():
    rig = Rig()
    rig.to_descriptor_requested()
    listing = rig.source.last("ListRecordingRequest")
    assert (listing.control_session_id, listing.correlation_id, listing.recording_id) == (SRC_SESSION, 100, 3)
    for _ in range(5):
        rig.work()
    assert rig.state is State.REPLICATE_DESCRIPTOR and rig.source.names() == ["ListRecordingRequest"]


def test_the_source_descriptor_makes_a_new_replica_and_signals_replicate_at_the_source_start():
    rig = Rig()
    rig.to_described()
    assert rig.state is State.EXTEND
    assert rig.host.calls == [("new_replica", (SRC,))]
    assert rig.host.signals == [replicate_signal()]
    assert rig.session.dst_recording_id == NEW_REPLICA_ID and rig.session.replay_position == SRC.start_position


def test_a_descriptor_answering_another_request_is_not_taken():
    rig = Rig()
    rig.to_descriptor_requested()
    rig.source.arriving.append(DescriptorMessage(SRC_SESSION, 99, SRC))
    rig.work()
    assert rig.state is State.REPLICATE_DESCRIPTOR and rig.host.calls == []


def test_extend_subscribes_to_the_replication_channel_without_rejoin_and_with_the_source_session_id():
    rig = Rig()
    rig.to_described()
    rig.work()
    assert rig.state is State.REPLAY
    replication_id, control_session_id, recording_id, stream_id, channel = rig.host.args_of("extend_replica")
    assert (replication_id, control_session_id, recording_id, stream_id) == (
        REPLICATION_ID, CONTROL_SESSION_ID, NEW_REPLICA_ID, SRC.stream_id)
    assert channel.startswith("aeron:udp?")
    assert params(channel) == {"endpoint": "localhost:0", "rejoin": "false", "session-id": "77"}
    assert rig.subscription.added == []  # not a multi-destination subscription


def test_the_replay_is_not_asked_for_while_the_replica_s_endpoint_is_unresolved():
    rig = Rig()
    rig.to_described()
    rig.subscription.bound = False
    rig.work()  # EXTEND
    for _ in range(3):
        rig.work()
    assert rig.state is State.REPLAY and "ReplayRequest" not in rig.source.names()
    rig.subscription.bound = True
    rig.work()
    assert rig.source.names() == ["ListRecordingRequest", "ReplayRequest"]


def test_the_replay_asks_for_the_whole_recording_on_the_bound_port_with_the_replay_session_id():
    rig = Rig()
    replay = rig.to_replay_requested()
    assert type(replay).__name__ == "ReplayRequest"
    assert (replay.control_session_id, replay.recording_id, replay.position, replay.length, replay.replay_stream_id,
            replay.file_io_max_length) == (SRC_SESSION, SRC.recording_id, SRC.start_position, -1, SRC.stream_id, -1)
    assert replay.replay_channel.startswith("aeron:udp?")
    assert params(replay.replay_channel) == {"endpoint": f"localhost:{BOUND_PORT}", "session-id": "77"}
    rig.work()
    assert rig.state is State.REPLAY and rig.source.names().count("ReplayRequest") == 1


def test_a_replication_channel_with_a_fixed_port_is_replayed_to_as_it_is():
    rig = Rig(replication_channel=FIXED_CHANNEL)
    replay = rig.to_replay_requested()
    assert params(replay.replay_channel) == {"endpoint": "localhost:40456", "session-id": "77"}


def test_a_given_replication_session_id_is_the_session_of_the_replica_and_the_replay():
    rig = Rig(replication_session_id=5150)
    replay = rig.to_replay_requested()
    assert params(rig.host.args_of("extend_replica")[4])["session-id"] == "5150"
    assert params(replay.replay_channel)["session-id"] == "5150"


def test_a_file_io_max_length_of_at_least_the_mtu_goes_to_the_replay():
    rig = Rig(file_io_max_length=SRC.mtu_length)
    assert rig.to_replay_requested().file_io_max_length == SRC.mtu_length


def test_the_replay_s_ok_gives_the_replay_session_whose_image_is_awaited():
    rig = Rig()
    rig.to_replay_requested()
    rig.source.respond(relevant_id=REPLAY_SESSION_ID, correlation_id=rig.source.last_correlation_id - 1)
    rig.work()
    assert rig.state is State.REPLAY  # an OK to another request is not the answer
    rig.source.respond(relevant_id=REPLAY_SESSION_ID)
    rig.work()
    assert rig.state is State.AWAIT_IMAGE and rig.session.src_replay_session_id == REPLAY_SESSION_ID
    rig.work()
    assert rig.state is State.AWAIT_IMAGE
    assert rig.subscription.asked_sessions == [SRC.session_id]  # the low 32 bits of the replay session id
    image = rig.subscription.images[SRC.session_id] = FakeImage()
    rig.work()
    assert rig.state is State.REPLICATE and rig.session.image is image


def test_a_stopped_source_is_replicated_until_the_image_reaches_its_stop_then_syncs():
    rig = Rig()
    image = rig.to_replicating()
    image.position = SRC.stop_position - 32
    rig.work()
    assert rig.state is State.REPLICATE
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.DONE and rig.session.is_done()
    assert rig.host.signals == [replicate_signal(), (REPLICATION_ID, NEW_REPLICA_ID, SUBSCRIPTION_ID,
                                                     SRC.stop_position, S.SYNC)]
    assert rig.host.errors == [] and rig.host.counted == []


def test_closing_a_synced_replication_stops_recording_closes_the_source_and_ends_without_stopping_the_replay():
    rig = Rig()
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    sent = len(rig.source.sent)
    rig.session.close()
    assert rig.host.calls[-1] == ("stop_replica_subscription", (SUBSCRIPTION_ID,))
    assert len(rig.source.sent) == sent and "StopReplayRequest" not in rig.source.names()  # the replay ended
    assert rig.source.closed and image.closed_by_session
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END]
    assert rig.host.signals[-1] == end_signal()


# ---- a bound ------------------------------------------------------------------------------------------------------


def test_a_bound_asks_for_the_replay_length_up_to_it():
    rig = Rig(stop_position=SRC.start_position + 8192)
    assert rig.to_replay_requested().length == 8192


def test_a_bound_before_the_source_s_stop_ends_the_replication_without_sync():
    bound = SRC.start_position + 8192
    rig = Rig(stop_position=bound)
    image = rig.to_replicating()
    image.position = bound - 32
    rig.work()
    assert rig.state is State.REPLICATE
    image.position = bound
    rig.work()
    assert rig.state is State.DONE and rig.host.errors == []
    rig.session.close()
    assert rig.host.signal_names() == [S.REPLICATE, S.REPLICATE_END]
    assert "StopReplayRequest" not in rig.source.names()  # a bounded replay ends by itself
    assert ("stop_replica_subscription", (SUBSCRIPTION_ID,)) in rig.host.calls


def test_a_bound_at_the_source_s_stop_syncs():
    rig = Rig(stop_position=SRC.stop_position)
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.DONE and rig.host.signal_names() == [S.REPLICATE, S.SYNC]


# ---- a given destination recording ------------------------------------------------------------------------------


def test_a_non_empty_destination_is_extended_from_its_stop_without_replicate_or_a_new_descriptor():
    dst = replace(SRC, recording_id=12, start_position=SRC.start_position, stop_position=20480)
    rig = Rig(dst=dst)
    image = rig.to_replicating()
    assert "new_replica" not in rig.host.names() and "replace_replica" not in rig.host.names()
    assert rig.host.args_of("extend_replica")[2] == 12
    replay = rig.source.last("ReplayRequest")
    assert (replay.position, replay.length) == (20480, -1)
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.DONE
    assert rig.host.signals == [(REPLICATION_ID, 12, SUBSCRIPTION_ID, SRC.stop_position, S.SYNC)]


def test_a_non_empty_destination_with_a_bound_replays_the_length_from_its_stop():
    dst = replace(SRC, recording_id=12, stop_position=20480)
    rig = Rig(dst=dst, stop_position=32768)
    replay = rig.to_replay_requested()
    assert (replay.position, replay.length) == (20480, 32768 - 20480)


def test_an_empty_destination_takes_on_the_source_s_descriptor_and_replays_from_the_source_start():
    dst = replace(SRC, recording_id=12, start_position=0, stop_position=0, mtu_length=4096, stream_id=7)
    rig = Rig(dst=dst)
    replay = rig.to_replay_requested()
    assert rig.host.calls[0] == ("replace_replica", (12, SRC))
    assert "new_replica" not in rig.host.names()
    assert rig.host.signals == []  # no REPLICATE for an existing recording
    assert (replay.position, replay.replay_stream_id) == (SRC.start_position, SRC.stream_id)
    assert rig.host.args_of("extend_replica")[2:4] == (12, SRC.stream_id)


def test_a_destination_already_at_the_source_s_stop_syncs_at_once_without_extending():
    dst = replace(SRC, recording_id=12)
    rig = Rig(dst=dst)
    rig.to_described()
    assert rig.state is State.DONE
    assert rig.host.signals == [(REPLICATION_ID, 12, -1, SRC.stop_position, S.SYNC)]
    rig.work()
    assert "extend_replica" not in rig.host.names() and rig.source.names() == ["ListRecordingRequest"]
    rig.session.close()
    assert "stop_replica_subscription" not in rig.host.names()
    assert rig.host.signals[-1] == end_signal(12) and rig.source.closed
    assert rig.host.errors == []


def test_an_empty_source_is_replicated_as_a_new_replica_already_in_sync():
    empty = replace(SRC, stop_position=SRC.start_position)
    rig = Rig()
    rig.to_described(empty)
    assert rig.state is State.DONE
    assert rig.host.signals == [replicate_signal(), (REPLICATION_ID, NEW_REPLICA_ID, -1, SRC.start_position, S.SYNC)]
    assert "extend_replica" not in rig.host.names()


# ---- failures -----------------------------------------------------------------------------------------------------


def test_an_unknown_source_recording_fails_with_java_s_text():
    rig = Rig(src_recording_id=404)
    rig.to_descriptor_requested()
    rig.source.respond(ControlResponseCode.RECORDING_UNKNOWN, relevant_id=404, correlation_id=99)
    rig.work()
    assert rig.state is State.REPLICATE_DESCRIPTOR  # not the answer to the listing
    rig.source.respond(ControlResponseCode.RECORDING_UNKNOWN, relevant_id=404)
    rig.work()
    assert rig.state is State.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.UNKNOWN_RECORDING, "unknown src recording id 404")]
    assert rig.host.calls == [] and rig.host.counted == []
    rig.session.close()
    assert rig.host.signals == [end_signal(-1)]


def test_a_file_io_max_length_below_the_mtu_is_refused_with_java_s_text():
    rig = Rig(file_io_max_length=1024)
    rig.to_described()
    assert rig.state is State.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.GENERIC,
                                "Replication fileIoMaxLength (1024) is less than than the recording mtuLength (1408)")]
    assert rig.host.calls == [] and rig.host.signals == []


def test_a_failed_connect_is_a_replication_connection_failure():
    rig = Rig(connect=FakeConnect(error=ArchiveError("Archive connect timeout: step=1", ErrorCode.GENERIC)))
    rig.work()  # the connect starts
    rig.work()  # its poll fails
    assert rig.state is State.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.REPLICATION_CONNECTION_FAILURE,
                                "Replication connection failed=Archive connect timeout: step=1")]
    rig.session.close()
    assert rig.host.signals == [end_signal(-1)]
    assert rig.host.calls == [] and rig.source.sent == []


def test_a_replication_stopped_while_connecting_closes_the_connect():
    rig = Rig(connect=FakeConnect(polls_before_connected=10))
    rig.work()
    rig.work()
    rig.session.abort("stop replication")
    assert rig.state is State.DONE and rig.session.done_reason == "stop replication"
    rig.session.close()
    assert rig.connect.closed
    assert rig.host.signals == [end_signal(-1)] and rig.host.errors == []


def test_no_descriptor_within_the_action_timeout_fails_naming_the_source():
    rig = Rig()
    rig.to_descriptor_requested()  # asked at `now`
    rig.work(TIMEOUT_NS - 1)
    assert rig.state is State.REPLICATE_DESCRIPTOR and rig.host.errors == []
    rig.work(1)
    assert rig.state is State.DONE
    ((correlation_id, code, text),) = rig.host.errors
    assert (correlation_id, code) == (REPLICATION_ID, ErrorCode.GENERIC)
    assert text == (
        f"failed to fetch remote recording descriptor (replication {REPLICATION_ID} of recording 3 from the archive "
        f"at {SRC_CONTROL_CHANNEL} stream {SRC_CONTROL_STREAM} into recording -1, at position -1, in state "
        "REPLICATE_DESCRIPTOR)")
    ((counted, error),) = rig.host.counted
    assert counted == text and isinstance(error, ArchiveError)


def _to_unresolved_replay(rig: Rig) -> None:
    rig.to_described()
    rig.subscription.bound = False
    rig.work()


def _to_unanswered_replay(rig: Rig) -> None:
    rig.to_replay_requested()


def _to_awaited_image(rig: Rig) -> None:
    rig.to_replay_requested()
    rig.source.respond(relevant_id=REPLAY_SESSION_ID)
    rig.work()


@pytest.mark.parametrize(("drive", "state", "text"), [
    pytest.param(_to_unresolved_replay, State.REPLAY,
                 f"failed to resolve subscription endpoint: channel={REPLICATION_CHANNEL} (", id="endpoint"),
    pytest.param(_to_unanswered_replay, State.REPLAY,
                 f"failed get acknowledgement of replay request to: {REPLICATION_CHANNEL} (", id="replay"),
    pytest.param(_to_awaited_image, State.AWAIT_IMAGE,
                 f"failed get replay image for sessionId=77 on channel={REPLICATION_CHANNEL} (", id="image"),
    # Java waits in these two (response channels only) without a deadline: a source that never answers would hold
    # the replication and its replica for ever, so ours gives up after the action timeout, as in every other state.
    pytest.param(lambda rig: to_token_requested(rig), State.REPLAY_TOKEN, "failed to get a replay token (",
                 id="token"),
    pytest.param(lambda rig: to_archive_proxy(rig), State.GET_ARCHIVE_PROXY,
                 "failed to connect the replay request publication: channel=aeron:udp?endpoint=src-host:8010|"
                 f"response-correlation-id={SUBSCRIPTION_ID} (", id="proxy"),
])
def test_a_state_without_progress_for_the_action_timeout_fails(drive, state, text):
    response_mode = state in (State.REPLAY_TOKEN, State.GET_ARCHIVE_PROXY)
    rig = Rig(replication_channel=RESPONSE_CHANNEL) if response_mode else Rig()
    drive(rig)
    assert rig.state is state
    rig.work(TIMEOUT_NS - 2 * MS)
    assert rig.state is state and rig.host.errors == []
    rig.work(2 * MS)
    assert rig.state is State.DONE
    ((_, code, message),) = rig.host.errors
    assert code == ErrorCode.GENERIC and message.startswith(text)
    assert f"into recording {NEW_REPLICA_ID}, at position {SRC.start_position}, in state {state.value})" in message
    assert len(rig.host.counted) == 1


def test_an_error_answer_to_the_listing_fails_with_the_source_s_message():
    rig = Rig()
    rig.to_descriptor_requested()
    rig.source.respond(ControlResponseCode.ERROR, ErrorCode.UNAUTHORISED_ACTION, "not allowed")
    rig.work()
    assert rig.state is State.DONE
    ((_, code, text),) = rig.host.errors
    assert code == ErrorCode.GENERIC
    assert text.startswith("response for correlationId=100, error: not allowed (replication 55 of recording 3")


def test_an_error_answer_to_the_replay_fails_the_replication():
    rig = Rig()
    rig.to_replay_requested()
    rig.source.respond(ControlResponseCode.ERROR, ErrorCode.MAX_REPLAYS, "max concurrent replays reached")
    rig.work()
    assert rig.state is State.DONE
    ((_, code, text),) = rig.host.errors
    assert code == ErrorCode.GENERIC  # the source's code is not kept (as Java)
    assert text.startswith("max concurrent replays reached (replication 55 of recording 3 from the archive at "
                           f"{SRC_CONTROL_CHANNEL} stream {SRC_CONTROL_STREAM} into recording {NEW_REPLICA_ID}")
    assert text.endswith("in state REPLAY)")
    assert len(rig.host.counted) == 1
    rig.session.close()
    assert "StopReplayRequest" not in rig.source.names()  # no replay was started
    assert rig.host.signal_names() == [S.REPLICATE, S.REPLICATE_END]
    assert ("stop_replica_subscription", (SUBSCRIPTION_ID,)) in rig.host.calls


def test_an_error_for_the_session_about_another_request_also_fails_it():
    rig = Rig()
    rig.to_replay_requested()
    rig.source.respond(ControlResponseCode.ERROR, 0, "something else broke", correlation_id=7)
    rig.work()
    assert rig.state is State.DONE and rig.error_texts()[0].startswith("something else broke (")


def test_an_error_for_another_control_session_is_ignored():
    rig = Rig()
    rig.to_replay_requested()
    rig.source.respond(ControlResponseCode.ERROR, 0, "not ours", session=SRC_SESSION + 1)
    rig.work()
    assert rig.state is State.REPLAY and rig.host.errors == []


def test_an_error_from_the_source_while_replicating_is_found_by_the_periodic_poll():
    rig = Rig()
    image = rig.to_replicating()
    image.position = 8192
    rig.work(SOURCE_POLL_INTERVAL_NS)  # nothing came: polled
    rig.source.respond(ControlResponseCode.ERROR, ErrorCode.GENERIC, "recording 3 was truncated",
                       correlation_id=12345)
    polls = rig.source.polls
    rig.work(SOURCE_POLL_INTERVAL_NS // 2)
    assert rig.state is State.REPLICATE and rig.source.polls == polls  # not yet time to poll again
    rig.work(SOURCE_POLL_INTERVAL_NS // 2)
    assert rig.state is State.DONE
    (text,) = rig.error_texts()
    assert text.startswith("recording 3 was truncated (") and "at position 8192, in state REPLICATE)" in text


def test_losing_the_source_while_replicating_fails_as_not_connected():
    rig = Rig()
    rig.to_replicating()
    rig.source.disconnected = True
    rig.work(SOURCE_POLL_INTERVAL_NS)
    assert rig.state is State.DONE
    assert rig.error_texts()[0].startswith("not connected (replication 55")


def test_a_refused_extension_fails_with_the_conductor_s_error_and_nothing_to_stop():
    rig = Rig()
    rig.to_described()
    rig.host.extend_error = ArchiveError("max concurrent recordings reached at 8", ErrorCode.MAX_RECORDINGS)
    rig.work()
    assert rig.state is State.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.MAX_RECORDINGS, "max concurrent recordings reached at 8")]
    rig.session.close()
    assert "stop_replica_subscription" not in rig.host.names()
    assert rig.host.signal_names() == [S.REPLICATE, S.REPLICATE_END]


def test_a_destination_the_media_driver_refuses_fails_the_replication():
    rig = Rig(channel_tag_id=5, subscription_tag_id=6, replication_channel=FIXED_CHANNEL)
    rig.to_described()
    rig.subscription.refuse_changes = ArchiveError("invalid destination")
    rig.work()
    assert rig.state is State.DONE
    assert rig.error_texts()[0].startswith("invalid destination (replication 55")


# ---- the recording subscription closing under the session --------------------------------------------------------


def test_a_replica_that_stopped_at_the_source_s_stop_between_two_steps_still_syncs():
    rig = Rig()
    image = rig.to_replicating()
    image.position = SRC.stop_position - 1024  # what the session saw last
    rig.work()
    rig.host.recorded = SRC.stop_position
    rig.subscription.is_closed = True
    rig.work()
    assert rig.state is State.DONE and rig.host.errors == []
    assert rig.host.signals[-1] == (REPLICATION_ID, NEW_REPLICA_ID, SUBSCRIPTION_ID, SRC.stop_position, S.SYNC)
    rig.session.close()
    assert "StopReplayRequest" not in rig.source.names()
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END]


def test_a_replica_that_stopped_short_of_the_source_s_stop_ends_without_sync_and_says_where():
    rig = Rig()
    rig.to_replicating()
    rig.host.recorded = 8192
    rig.subscription.is_closed = True
    rig.work()
    assert rig.state is State.DONE
    assert S.SYNC not in rig.host.signal_names()
    # Java ends silently here; ours tells the requester how far the (valid) replica got.
    (text,) = rig.error_texts()
    assert text.startswith("the replay from the source ended at position 8192, before the source's stop position "
                           f"{SRC.stop_position}; the replica holds the recording up to there, valid (")
    rig.session.close()
    assert "StopReplayRequest" not in rig.source.names()  # the replay is gone


def test_the_recording_subscription_closing_before_the_image_ends_the_replication_silently():
    rig = Rig()
    rig.to_replay_requested()
    rig.source.respond(relevant_id=REPLAY_SESSION_ID)
    rig.work()
    assert rig.state is State.AWAIT_IMAGE
    rig.subscription.is_closed = True
    rig.work()
    assert rig.state is State.DONE and rig.session.done_reason == "recording subscription closed"
    assert rig.host.errors == [] and rig.host.signal_names() == [S.REPLICATE]


def test_the_conductor_stopping_the_replica_settles_the_session_once():
    rig = Rig()
    rig.to_replicating()
    rig.session.on_replica_stopped(SRC.stop_position)
    rig.session.on_replica_stopped(SRC.stop_position)
    assert rig.state is State.DONE
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC]


# ---- a live source without a live destination --------------------------------------------------------------------


def test_a_live_source_is_followed_until_its_replay_ends_without_sync():
    rig = Rig()
    image = rig.to_replicating(SRC_LIVE)
    assert rig.host.names()[:2] == ["new_replica", "extend_replica"]
    image.position = 1 << 20
    rig.work()
    assert rig.state is State.REPLICATE
    image.is_end_of_stream = True  # the source recording stopped
    rig.work()
    assert rig.state is State.DONE and rig.host.errors == []
    rig.session.close()
    assert rig.host.signal_names() == [S.REPLICATE, S.REPLICATE_END]
    assert "StopReplayRequest" not in rig.source.names()


def test_a_live_source_dying_reported_by_the_replica_stopping_first_is_an_error_not_a_clean_end():
    """The recorder (its own thread) may stop the replica before this session sees the image close: how the image
    ended still decides; without an end of stream the source went away and the requester is told."""
    rig = Rig()
    image = rig.to_replicating(SRC_LIVE)
    image.position = 8192
    image.is_closed = True  # timed out: the source was killed
    rig.session.on_replica_stopped(8192)
    assert rig.state is State.DONE
    assert len(rig.host.errors) == 1 and "ended at position 8192" in rig.host.errors[0][2]
    clean = Rig()
    image = clean.to_replicating(SRC_LIVE)
    image.position, image.is_closed, image.is_end_of_stream = 8192, True, True  # the source's recording stopped
    clean.session.on_replica_stopped(8192)
    assert clean.state is State.DONE and clean.host.errors == []


def test_a_live_source_s_replay_image_going_without_end_of_stream_is_reported():
    rig = Rig()
    image = rig.to_replicating(SRC_LIVE)
    image.position = 8192
    image.is_closed = True
    rig.work()
    assert rig.state is State.DONE
    (text,) = rig.error_texts()
    assert text.startswith("the replay from the source ended at position 8192, before the source recording's end")
    assert S.SYNC not in rig.host.signal_names()


# ---- stopping a replication ---------------------------------------------------------------------------------------


def test_a_replication_stopped_mid_way_stops_the_source_s_replay_and_the_recording():
    rig = Rig()
    image = rig.to_replicating()
    image.position = 16384
    rig.work()
    rig.session.abort("stop replication")
    assert rig.state is State.DONE and rig.session.done_reason == "stop replication"
    rig.work()  # nothing more happens once done
    assert rig.source.names()[-1] == "ReplayRequest"
    rig.session.close()
    stop = rig.source.last("StopReplayRequest")
    assert (stop.control_session_id, stop.replay_session_id) == (SRC_SESSION, REPLAY_SESSION_ID)
    assert rig.host.calls[-1] == ("stop_replica_subscription", (SUBSCRIPTION_ID,))
    assert rig.source.closed and image.closed_by_session
    assert rig.host.signals == [replicate_signal(), end_signal()]
    assert rig.host.errors == []


# ---- tagged ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("channel_tag", "subscription_tag", "tags"), [
    (5, 6, "5,6"),
    (5, -1, f"5,{REPLICATION_ID}"),
    (-1, 6, f"{REPLICATION_ID},6"),
])
def test_a_tagged_replication_records_through_a_multi_destination_subscription(channel_tag, subscription_tag, tags):
    rig = Rig(channel_tag_id=channel_tag, subscription_tag_id=subscription_tag, replication_channel=FIXED_CHANNEL)
    replay = rig.to_replay_requested()
    channel = rig.host.args_of("extend_replica")[4]
    assert params(channel) == {"rejoin": "false", "session-id": "77", "tags": tags, "control-mode": "manual"}
    assert rig.subscription.added == ["aeron:udp?endpoint=localhost:40456"]
    assert params(replay.replay_channel) == {"endpoint": "localhost:40456", "session-id": "77"}


# ---- live ---------------------------------------------------------------------------------------------------------


def live_rig(**fields: Any) -> Rig:
    fields.setdefault("replication_channel", FIXED_CHANNEL)
    return Rig(live_destination=LIVE_DESTINATION, **fields)


def test_a_live_destination_asks_for_the_source_s_recording_position_before_extending():
    rig = live_rig()
    rig.to_described(SRC_LIVE)
    assert rig.state is State.SRC_RECORDING_POSITION and rig.host.signals == [replicate_signal()]
    rig.work()
    request = rig.source.last("RecordingPositionRequest")
    assert (request.control_session_id, request.recording_id) == (SRC_SESSION, SRC.recording_id)
    rig.work()
    assert rig.state is State.SRC_RECORDING_POSITION
    rig.source.respond(relevant_id=200_000)
    rig.work()
    assert rig.state is State.EXTEND and rig.session.src_recording_position == 200_000


def test_a_live_source_that_is_not_recording_cannot_be_merged():
    rig = live_rig()
    rig.to_described(SRC_LIVE)
    rig.work()
    rig.source.respond(relevant_id=-1)
    rig.work()
    assert rig.state is State.DONE
    assert rig.error_texts()[0].startswith("cannot live merge without active source recording (")


def test_a_live_destination_with_a_stopped_source_is_refused():
    rig = live_rig()
    rig.to_described(SRC)
    assert rig.state is State.DONE
    assert rig.host.errors == [(REPLICATION_ID, ErrorCode.GENERIC, "cannot live merge without active source recording")]
    assert "extend_replica" not in rig.host.names()


def test_a_live_replica_records_through_a_tagged_multi_destination_subscription_and_a_replay_without_eos():
    rig = live_rig(replication_session_id=5150)  # ignored with a live destination
    replay = rig.to_replay_requested(SRC_LIVE)
    channel = rig.host.args_of("extend_replica")[4]
    assert params(channel) == {"rejoin": "false", "session-id": "77", "tags": f"{REPLICATION_ID},{REPLICATION_ID}",
                               "control-mode": "manual"}
    assert rig.subscription.added == ["aeron:udp?endpoint=localhost:40456"]
    assert params(replay.replay_channel) == {"endpoint": "localhost:40456", "session-id": "77", "linger": "0",
                                             "eos": "false"}
    assert (replay.position, replay.length) == (SRC.start_position, -1)


def _to_live_join(rig: Rig) -> FakeImage:
    image = rig.to_image(SRC_LIVE)
    assert rig.state is State.CATCHUP
    image.position = rig.live_position - 1
    rig.work()
    assert rig.state is State.CATCHUP
    image.position = rig.live_position
    rig.work()
    assert rig.state is State.ATTEMPT_LIVE_JOIN
    return image


def _answer_position(rig: Rig, position: int) -> None:
    rig.work()  # RecordingPositionRequest sent
    assert rig.source.names()[-1] == "RecordingPositionRequest"
    rig.source.respond(relevant_id=position)
    rig.work()


def test_a_live_replication_adds_the_live_destination_then_merges_once_both_transports_are_connected():
    rig = live_rig()
    image = _to_live_join(rig)
    window = SRC.term_buffer_length // 4
    _answer_position(rig, image.position + window + 1)
    assert rig.subscription.added == [FIXED_CHANNEL]  # too far behind: only the replay destination
    _answer_position(rig, image.position + window)
    assert rig.subscription.added == [FIXED_CHANNEL, LIVE_DESTINATION]
    image.position += window
    _answer_position(rig, image.position)
    assert rig.state is State.ATTEMPT_LIVE_JOIN and rig.subscription.removed == []  # one transport only
    image.active_transport_count = 2
    _answer_position(rig, image.position + 32)
    assert rig.state is State.ATTEMPT_LIVE_JOIN  # not caught up
    image.position += 32
    _answer_position(rig, image.position)
    assert rig.state is State.DONE
    assert rig.subscription.removed == [FIXED_CHANNEL]
    assert rig.subscription.added == [FIXED_CHANNEL, LIVE_DESTINATION]
    assert rig.host.signals == [replicate_signal(), (REPLICATION_ID, NEW_REPLICA_ID, -1, image.position, S.MERGE)]
    assert rig.host.errors == []


def test_closing_a_merged_replication_leaves_the_replica_recording_the_live_stream():
    rig = live_rig()
    image = _to_live_join(rig)
    _answer_position(rig, image.position)
    image.active_transport_count = 2
    _answer_position(rig, image.position)
    assert rig.state is State.DONE
    rig.session.close()
    assert "stop_replica_subscription" not in rig.host.names()
    assert rig.source.last("StopReplayRequest").replay_session_id == REPLAY_SESSION_ID
    assert rig.host.signal_names() == [S.REPLICATE, S.MERGE, S.REPLICATE_END]
    assert rig.source.closed


@pytest.mark.parametrize(("term_length", "window"), [(65536, 16384), (1 << 30, LIVE_ADD_MAX_WINDOW)])
def test_the_live_destination_is_added_within_a_quarter_term_at_most_32_mib(term_length, window):
    rig = live_rig()
    image = _to_live_join(rig)
    image.term_buffer_length = term_length
    _answer_position(rig, image.position + window + 1)
    assert LIVE_DESTINATION not in rig.subscription.added
    _answer_position(rig, image.position + window)
    assert LIVE_DESTINATION in rig.subscription.added


def test_a_live_source_that_stops_recording_before_the_merge_fails_it():
    rig = live_rig()
    _to_live_join(rig)
    _answer_position(rig, -1)
    assert rig.state is State.DONE
    assert rig.error_texts()[0].startswith("cannot live merge without active source recording (")


def test_the_replay_image_closing_while_catching_up_fails_the_merge():
    rig = live_rig()
    image = rig.to_image(SRC_LIVE)
    image.is_closed = True
    rig.work()
    assert rig.state is State.DONE
    assert rig.error_texts()[0].startswith("replication image closed unexpectedly (")


def test_the_live_join_gives_up_after_three_unanswered_position_requests():
    rig = live_rig()
    _to_live_join(rig)
    rig.work()  # the first request
    for _ in range(2):
        rig.work(TIMEOUT_NS)  # unanswered: asked again
        assert rig.state is State.ATTEMPT_LIVE_JOIN
        rig.work()
    rig.work(TIMEOUT_NS)
    assert rig.state is State.DONE
    assert rig.source.names().count("RecordingPositionRequest") == 1 + 3
    assert rig.error_texts()[0].startswith("failed to get recording position (")


def test_a_live_replication_over_a_wildcard_port_replays_to_the_bound_port():
    rig = live_rig(replication_channel=REPLICATION_CHANNEL)
    replay = rig.to_replay_requested(SRC_LIVE)
    assert rig.subscription.added == [REPLICATION_CHANNEL]  # the replay destination binds an ephemeral port
    assert params(replay.replay_channel)["endpoint"] == f"localhost:{BOUND_PORT}"


def test_a_live_replication_waits_for_its_replay_destination_to_be_bound():
    rig = live_rig(replication_channel=REPLICATION_CHANNEL)
    rig.subscription.bound = False
    rig.to_described(SRC_LIVE)
    rig.work()
    rig.source.respond(relevant_id=rig.live_position)
    for _ in range(4):
        rig.work()
    assert rig.state is State.REPLAY and "ReplayRequest" not in rig.source.names()
    rig.subscription.bound = True
    rig.work()
    assert params(rig.source.last("ReplayRequest").replay_channel)["endpoint"] == f"localhost:{BOUND_PORT}"


# ---- over response channels: REPLAY_TOKEN, GET_ARCHIVE_PROXY ----------------------------------------------------

RESPONSE_CHANNEL = "aeron:udp?control-mode=response|control=localhost:40789"
TOKEN = -5_000_000_000_123  # a token is any int64 but -1


def response_rig(**fields: Any) -> Rig:
    fields.setdefault("replication_channel", RESPONSE_CHANNEL)
    return Rig(**fields)


def to_token_requested(rig: Rig, descriptor: RecordingDescriptor = SRC) -> Any:
    """... EXTEND -> REPLAY_TOKEN, the ReplayTokenRequest sent; returns it."""
    rig.to_described(descriptor)
    rig.work()
    assert rig.state is State.REPLAY_TOKEN
    rig.work()
    return rig.source.last("ReplayTokenRequest")


def to_archive_proxy(rig: Rig) -> FakeRequestPublication:
    """... the token given -> GET_ARCHIVE_PROXY, the request publication being added; returns it."""
    to_token_requested(rig)
    rig.source.respond(relevant_id=TOKEN)
    rig.work()
    assert rig.state is State.GET_ARCHIVE_PROXY
    rig.work()
    (publication,) = rig.source.request_publications
    return publication


def to_response_replay_requested(rig: Rig) -> Any:
    """... the request publication ready -> REPLAY, the ReplayRequest sent on it; returns it."""
    publication = to_archive_proxy(rig)
    publication.ready = True
    rig.work()
    assert rig.state is State.REPLAY
    rig.work()
    return rig.source.last("ReplayRequest")


def test_a_response_replication_channel_records_without_a_session_filter_and_asks_for_a_replay_token():
    rig = response_rig()
    token_request = to_token_requested(rig)
    (_, _, _, _, channel) = rig.host.args_of("extend_replica")
    assert params(channel) == {"control-mode": "response", "control": "localhost:40789", "rejoin": "false"}
    assert (token_request.control_session_id, token_request.recording_id) == (SRC_SESSION, SRC.recording_id)
    assert rig.source.sent_via[-1] is None  # on the control session
    for _ in range(5):
        rig.work()
    assert rig.state is State.REPLAY_TOKEN and rig.source.names().count("ReplayTokenRequest") == 1
    rig.source.respond(relevant_id=TOKEN)
    rig.work()
    assert rig.state is State.GET_ARCHIVE_PROXY and rig.session.replay_token == TOKEN


def test_with_a_token_a_publication_naming_the_recording_subscription_is_awaited_until_it_can_send():
    rig = response_rig()
    publication = to_archive_proxy(rig)
    assert publication.response_subscription_id == SUBSCRIPTION_ID
    for _ in range(5):
        rig.work()
    assert rig.state is State.GET_ARCHIVE_PROXY and publication.polls == 5
    assert "ReplayRequest" not in rig.source.names()
    publication.ready = True
    rig.work()
    assert rig.state is State.REPLAY


def test_the_replay_is_asked_for_on_that_publication_with_the_token_and_the_recording_subscription_named():
    rig = response_rig()
    replay = to_response_replay_requested(rig)
    assert rig.source.sent_via[-1] is REQUEST_PROXY
    assert (replay.control_session_id, replay.recording_id, replay.position, replay.length) == (
        SRC_SESSION, SRC.recording_id, SRC.start_position, -1)
    assert (replay.replay_token, replay.replay_stream_id) == (TOKEN, SRC.stream_id)
    # No session id (the source's response publication has its own): the source puts its request image's
    # correlation id where the subscription is named.
    assert params(replay.replay_channel) == {
        "control-mode": "response", "control": "localhost:40789", "response-correlation-id": str(SUBSCRIPTION_ID)}


def test_a_response_replication_replicates_and_syncs_then_closes_its_request_publication():
    rig = response_rig()
    to_response_replay_requested(rig)
    rig.source.respond(relevant_id=REPLAY_SESSION_ID)  # the OK comes on the control session
    rig.work()
    assert rig.state is State.AWAIT_IMAGE
    image = rig.subscription.images[SRC.session_id] = FakeImage()
    rig.work()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.DONE and rig.host.signal_names() == [S.REPLICATE, S.SYNC]
    (publication,) = rig.source.request_publications
    assert publication.closes == 0  # kept until the session closes, as Java's
    rig.session.close()
    assert publication.closes == 1 and rig.host.settling == []
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END]


def test_an_ipc_response_channel_needs_no_bound_address():
    rig = response_rig(replication_channel="aeron:ipc?control-mode=response")
    replay = to_response_replay_requested(rig)
    assert params(replay.replay_channel) == {"control-mode": "response",
                                             "response-correlation-id": str(SUBSCRIPTION_ID)}


def test_a_request_publication_still_being_added_when_the_replication_ends_is_left_to_the_host_to_settle():
    rig = response_rig()
    publication = to_archive_proxy(rig)
    publication.unsettled_closes = 1
    rig.session.abort("stop replication")
    rig.session.close()
    (settle,) = rig.host.settling
    assert publication.closes == 1
    assert settle() is True and publication.closes == 2


def test_an_error_answer_to_the_token_request_fails_with_the_source_s_message():
    rig = response_rig()
    to_token_requested(rig)
    rig.source.respond(ControlResponseCode.ERROR, ErrorCode.GENERIC, "no token for you")
    rig.work()
    assert rig.state is State.DONE
    assert rig.error_texts()[0].startswith("no token for you (replication ")


# ---- the request's three forms ------------------------------------------------------------------------------------

OLD_FORM_FIELDS: dict[str, Any] = dict(
    control_session_id=1, correlation_id=2, src_recording_id=3, dst_recording_id=4, src_control_stream_id=10,
    src_control_channel=SRC_CONTROL_CHANNEL, live_destination=LIVE_DESTINATION)


def test_a_replicate_request_takes_java_s_defaults_for_what_it_lacks():
    request = ReplicationRequest.of(m.ReplicateRequest.of(**OLD_FORM_FIELDS))
    assert request == replication_request(
        correlation_id=2, src_recording_id=3, dst_recording_id=4, live_destination=LIVE_DESTINATION)


def test_a_tagged_replicate_request_keeps_its_tags_and_takes_java_s_defaults_for_the_rest():
    request = ReplicationRequest.of(m.TaggedReplicateRequest.of(**OLD_FORM_FIELDS, channel_tag_id=5,
                                                                subscription_tag_id=6))
    assert request == replication_request(
        correlation_id=2, src_recording_id=3, dst_recording_id=4, live_destination=LIVE_DESTINATION,
        channel_tag_id=5, subscription_tag_id=6)


REQUEST2_FIELDS: dict[str, Any] = dict(
    OLD_FORM_FIELDS, stop_position=8192, channel_tag_id=5, subscription_tag_id=6, file_io_max_length=65536,
    replication_session_id=77, replication_channel=FIXED_CHANNEL, encoded_credentials=b"user:pass",
    src_response_channel="aeron:udp?endpoint=localhost:0")


def test_a_replicate_request2_is_taken_whole():
    request = ReplicationRequest.of(m.ReplicateRequest2.of(**REQUEST2_FIELDS))
    assert request == ReplicationRequest(**{k: v for k, v in REQUEST2_FIELDS.items() if k != "control_session_id"})


def older_replicate_request2(version: int) -> m.ReplicateRequest2:
    """A ReplicateRequest2 as a client of schema `version` sends it: the block and var fields of that version only
    (fileIoMaxLength since 7, replicationSessionId and credentials since 8, srcResponseChannel since 10)."""
    block_length = 60 if version < 7 else 64 if version < 8 else 68
    full = CODEC.encode_message(m.ReplicateRequest2.of(**REQUEST2_FIELDS))
    header = struct.pack("<HHHH", block_length, m.ReplicateRequest2.TEMPLATE_ID, 101, version)
    var_fields: list[bytes] = [REQUEST2_FIELDS[name].encode() for name in
                               ("src_control_channel", "live_destination", "replication_channel")]
    if version >= 8:
        var_fields.append(REQUEST2_FIELDS["encoded_credentials"])
    if version >= 10:
        var_fields.append(REQUEST2_FIELDS["src_response_channel"].encode())
    body = full[8 : 8 + block_length] + b"".join(struct.pack("<I", len(v)) + v for v in var_fields)
    decoded = CODEC.decode(header + body)
    assert isinstance(decoded, m.ReplicateRequest2) and decoded.header.version == version
    return decoded


@pytest.mark.parametrize(("version", "file_io", "session_id", "credentials", "response_channel"), [
    (6, -1, -1, b"", ""),
    (7, 65536, -1, b"", ""),
    (8, 65536, 77, b"user:pass", ""),
    (10, 65536, 77, b"user:pass", "aeron:udp?endpoint=localhost:0"),
])
def test_an_older_replicate_request2_takes_java_s_defaults_for_fields_newer_than_its_version(
        version, file_io, session_id, credentials, response_channel):
    request = ReplicationRequest.of(older_replicate_request2(version))
    assert (request.file_io_max_length, request.replication_session_id, request.encoded_credentials,
            request.src_response_channel) == (file_io, session_id, credentials, response_channel)
    assert (request.stop_position, request.channel_tag_id, request.subscription_tag_id,
            request.replication_channel) == (8192, 5, 6, FIXED_CHANNEL)


# ---- the session contract -----------------------------------------------------------------------------------------


def test_the_session_is_known_by_its_replication_id_and_defaults_its_tags_to_it():
    rig = Rig()
    assert rig.session.session_id == REPLICATION_ID and not rig.session.is_done()
    assert (rig.session.is_tagged, rig.session.channel_tag_id, rig.session.subscription_tag_id) == (
        False, REPLICATION_ID, REPLICATION_ID)
