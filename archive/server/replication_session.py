"""Replicating a recording from another archive (Java's or ours) into this one: `ReplicationSession`.

As in Java's `ReplicationSession`, one session per replication runs on the conductor thread, one state at a time,
never waiting: it connects to the source archive (`AsyncConnect`), lists the source recording, creates the
destination recording from the source's descriptor (or extends one that exists), subscribes to a replay of the source
recording as an extension of that destination recording, asks the source archive for the replay and follows its
image until the source's stop (SYNC), the requested stop position, or the end of the replay; with a live destination
it then catches up with the live stream and merges onto it (MERGE), and the destination goes on recording it. Over a
response channel (`control-mode=response` in the replication channel) the replay is asked for with a replay token
(REPLAY_TOKEN) on a publication of the session's own naming the recording subscription (GET_ARCHIVE_PROXY), so the
source's replay answers a connection the destination opened (`client.response_replay`).
Beyond Java, a source that answers the time index (this project's archive) also dates the replica: once the replica
holds the replicated range (its recording stopped, or merged onto the live stream) the session asks the source for
its samples over that range, a few segments at a time, and rewrites the replica's `.tix` files with them a file per
duty cycle (COPY_TIME_INDEX, before REPLICATE_END; `storage.time_index_copy.TimeIndexCopy`, which the conductor
bounds to what no recorder writes); a Java source is never asked, and the replica keeps its own times.
Every state change resets the action clock; a state that makes no progress for the action timeout fails the
replication. `docs/control-protocol.md` ("Replication") has Java's behaviour in full, which this follows: states,
checks, signals, error texts (prefixed as Java's; ours add where the failure happened: the source archive, recording
and position).

What the session needs from the conductor is `ReplicationHost`; from the source archive, a connected
`AeronArchive` used asynchronously (`send`, `poll_responses`), as Java's session uses the source's `ArchiveProxy` and
response pollers. Time comes in as `now_ns`; tests drive every state with fakes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.aeron_archive import replay_request
from aeron_archive_spark.archive.client.response_poller import DescriptorMessage
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import NULL_POSITION, ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.exceptions import ArchiveDisconnectedError, ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.frames import to_int32
from aeron_archive_spark.archive.storage.time_index_search import SAMPLE_DTYPE

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
    from aeron_archive_spark.archive.client.archive_proxy import ArchiveProxy
    from aeron_archive_spark.archive.client.async_connect import Connected
    from aeron_archive_spark.archive.descriptor import RecordingDescriptor
    from aeron_archive_spark.archive.storage.time_index_copy import TimeIndexCopy

log = logging.getLogger(__name__)

NULL_VALUE = -1
# With nothing awaited, the source's control stream is polled this often for errors (Java: 100 ms).
SOURCE_POLL_INTERVAL_NS = 100_000_000
# A live merge adds the live destination once the replay is this close to the source's recorded position (the
# smaller of a quarter term and this), and removes the replay once caught up (Java's ReplicationSession values).
LIVE_ADD_MAX_WINDOW = 32 * 1024 * 1024
REPLAY_REMOVE_THRESHOLD = 0
RETRY_ATTEMPTS = 3


class ReplicationState(Enum):
    CONNECT = "CONNECT"
    REPLICATE_DESCRIPTOR = "REPLICATE_DESCRIPTOR"
    SRC_RECORDING_POSITION = "SRC_RECORDING_POSITION"
    EXTEND = "EXTEND"
    REPLAY_TOKEN = "REPLAY_TOKEN"
    GET_ARCHIVE_PROXY = "GET_ARCHIVE_PROXY"
    REPLAY = "REPLAY"
    AWAIT_IMAGE = "AWAIT_IMAGE"
    REPLICATE = "REPLICATE"
    CATCHUP = "CATCHUP"
    ATTEMPT_LIVE_JOIN = "ATTEMPT_LIVE_JOIN"
    COPY_TIME_INDEX = "COPY_TIME_INDEX"  # ours: the source's times onto the replicated range
    DONE = "DONE"


@dataclass(frozen=True, slots=True)
class ReplicationRequest:
    """A replicate request of any of its three forms, as Java's `ControlSessionAdapter` maps them onto one call:
    fields a form or an older version of ReplicateRequest2 lacks take Java's defaults (-1, empty)."""

    correlation_id: int
    src_recording_id: int
    dst_recording_id: int
    stop_position: int
    channel_tag_id: int
    subscription_tag_id: int
    src_control_stream_id: int
    src_control_channel: str
    live_destination: str
    replication_channel: str
    file_io_max_length: int
    replication_session_id: int
    encoded_credentials: bytes
    src_response_channel: str

    @classmethod
    def of(cls, msg: m.ReplicateRequest | m.TaggedReplicateRequest | m.ReplicateRequest2) -> ReplicationRequest:
        if isinstance(msg, m.ReplicateRequest2):
            version = msg.header.version
            return cls(
                correlation_id=msg.correlation_id,
                src_recording_id=msg.src_recording_id,
                dst_recording_id=msg.dst_recording_id,
                stop_position=msg.stop_position,
                channel_tag_id=msg.channel_tag_id,
                subscription_tag_id=msg.subscription_tag_id,
                src_control_stream_id=msg.src_control_stream_id,
                src_control_channel=msg.src_control_channel,
                live_destination=msg.live_destination,
                replication_channel=msg.replication_channel,
                file_io_max_length=msg.file_io_max_length if version >= 7 else NULL_VALUE,
                replication_session_id=msg.replication_session_id if version >= 8 else NULL_VALUE,
                encoded_credentials=bytes(msg.encoded_credentials) if version >= 8 else b"",
                src_response_channel=msg.src_response_channel if version >= 10 else "",
            )
        tags = (
            (msg.channel_tag_id, msg.subscription_tag_id)
            if isinstance(msg, m.TaggedReplicateRequest)
            else (NULL_VALUE, NULL_VALUE)
        )
        return cls(
            correlation_id=msg.correlation_id,
            src_recording_id=msg.src_recording_id,
            dst_recording_id=msg.dst_recording_id,
            stop_position=NULL_POSITION,
            channel_tag_id=tags[0],
            subscription_tag_id=tags[1],
            src_control_stream_id=msg.src_control_stream_id,
            src_control_channel=msg.src_control_channel,
            live_destination=msg.live_destination,
            replication_channel="",
            file_io_max_length=NULL_VALUE,
            replication_session_id=NULL_VALUE,
            encoded_credentials=b"",
            src_response_channel="",
        )


class ReplicaSubscription(Protocol):
    """The destination's recording subscription, as the session watches it."""

    @property
    def registration_id(self) -> int: ...

    @property
    def is_closed(self) -> bool: ...

    def resolved_endpoint(self) -> str | None:
        """The first address the media driver bound for it (`host:port`; a multi-destination subscription's first
        destination's), None until bound (Java's `Subscription.resolvedEndpoint()`)."""

    def image_by_session_id(self, session_id: int) -> Any: ...

    def async_add_destination(self, uri: str) -> PendingChange: ...

    def async_remove_destination(self, uri: str) -> PendingChange: ...


class PendingChange(Protocol):
    """A destination being added or removed (`native.PendingDestination`)."""

    def poll(self) -> bool:
        """True once applied; raises if the media driver refused it."""


class ReplicationHost(Protocol):
    """What a replication needs from the conductor that owns it."""

    def new_replica(self, descriptor: RecordingDescriptor) -> int:
        """Add the destination recording: every field the source's, stopped at its start (returns its id)."""

    def replace_replica(self, recording_id: int, descriptor: RecordingDescriptor) -> None:
        """An empty destination recording takes on the source's descriptor (its id kept)."""

    def stop_position(self, recording_id: int) -> int: ...

    def recorded_position(self, recording_id: int) -> int:
        """What a recording holds: its live position while recorded, else its stop position."""

    def extend_replica(
        self, replication_id: int, control_session_id: int, recording_id: int, stream_id: int, channel: str
    ) -> ReplicaSubscription:
        """Subscribe (REMOTE, auto-stop) to record the replay as an extension of `recording_id`; raises
        `ArchiveError` as an ExtendRecordingRequest would be refused."""

    def stop_replica_subscription(self, subscription_id: int) -> None:
        """Stop the recording subscription (its recording stops at what it has written)."""

    def signal(
        self,
        control_session_id: int,
        correlation_id: int,
        recording_id: int,
        subscription_id: int,
        position: int,
        signal: RecordingSignal,
    ) -> None: ...

    def send_error(self, control_session_id: int, correlation_id: int, error_code: int, message: str) -> None: ...

    def on_replication_error(self, message: str, error: BaseException) -> None:
        """Count (and log) a replication that failed."""

    def settle_later(self, settle: Callable[[], bool]) -> None:
        """Call `settle` each duty cycle until it answers True (a publication whose add the media driver has yet
        to answer, closed once it comes)."""

    def keeps_time_index(self) -> bool:
        """Whether this archive keeps a time index (off: a replica gets none, not even its source's)."""

    def time_index_copy(self, recording_id: int, from_position: int, to_position: int) -> TimeIndexCopy:
        """The copy that dates the replica's positions `[from, to)` by the source's samples, in bounded steps,
        rewriting its `.tix` files but never one a recorder may append to (its limits read on this thread before
        each file). Raises (`ArchiveError`, `OSError`) if it cannot begin."""


class RequestPublication(Protocol):
    """The publication a replay over a response channel is asked for on
    (`client.response_replay.ReplayRequestPublication`)."""

    @property
    def channel(self) -> str: ...

    def poll(self) -> ArchiveProxy | None:
        """The proxy to send the replay request with, once connected with room to send."""

    def close(self) -> bool:
        """True once settled (else call again later)."""


class SourceConnect(Protocol):
    """An asynchronous connect to the source archive (`client.async_connect.AsyncConnect`)."""

    def poll(self) -> Connected | None: ...

    def close(self) -> None: ...


class ReplicationSession:
    """One replication (see the module docstring); driven by the conductor's `do_work`."""

    def __init__(
        self,
        *,
        replication_id: int,
        control_session_id: int,
        request: ReplicationRequest,
        replication_channel: str,
        dst_descriptor: RecordingDescriptor | None,
        host: ReplicationHost,
        connect: Callable[[], SourceConnect],
        wrap: Callable[[Connected], AeronArchive],
        action_timeout_ns: int,
        now_ns: int,
    ) -> None:
        """`dst_descriptor`: the destination recording when the request names one; `connect` starts the connect to
        the source; `wrap` makes the connected session a client (`AeronArchive.of`)."""
        self.replication_id = replication_id
        self.control_session_id = control_session_id
        self.request = request
        self.replication_channel = replication_channel
        self._replication_uri = ChannelUri.parse(replication_channel)
        # A response channel (`control-mode=response`): the replay is asked for with a token, over a publication of
        # the session's own that names the recording subscription (REPLAY_TOKEN, GET_ARCHIVE_PROXY).
        self.is_response_channel = self._replication_uri.get("control-mode") == "response"
        self._host = host
        self._connect_factory = connect
        self._wrap = wrap
        self._timeout_ns = action_timeout_ns
        self.src_recording_id = request.src_recording_id
        self.dst_recording_id = request.dst_recording_id
        self.dst_stop_position = request.stop_position
        self.live_destination = request.live_destination or None
        self.is_tagged = request.channel_tag_id != NULL_VALUE or request.subscription_tag_id != NULL_VALUE
        self.channel_tag_id = replication_id if request.channel_tag_id == NULL_VALUE else request.channel_tag_id
        self.subscription_tag_id = (
            replication_id if request.subscription_tag_id == NULL_VALUE else request.subscription_tag_id
        )
        self.replay_position = NULL_POSITION
        self.replay_stream_id = 0
        self.replay_session_id = 0
        self.src_stop_position = NULL_POSITION
        self.src_recording_position = NULL_POSITION
        self.src_replay_session_id = NULL_VALUE
        self.position = NULL_POSITION  # how far the replica got, once it records
        self.dst_is_empty = False
        if dst_descriptor is not None:
            self.replay_position = dst_descriptor.stop_position
            self.replay_stream_id = dst_descriptor.stream_id
            self.dst_is_empty = dst_descriptor.start_position == dst_descriptor.stop_position
        self.state = ReplicationState.CONNECT
        self.done_reason = ""
        self._connect: SourceConnect | None = None
        self.src: AeronArchive | None = None
        self.replay_token = NULL_VALUE
        self._request_publication: RequestPublication | None = None
        self._request_proxy: ArchiveProxy | None = None
        self.subscription: ReplicaSubscription | None = None
        self.image: Any = None
        self._replay_destination: str | None = None
        self._destination_changes: list[PendingChange] = []
        self._live_added = False
        self._retries = RETRY_ATTEMPTS
        self._active_correlation_id = NULL_VALUE
        self._action_started_ns = now_ns
        self._next_source_poll_ns = now_ns
        self._now_ns = now_ns
        # COPY_TIME_INDEX: the range to date by the source (`to` unknown until the replica's recording stops), the
        # copy writing it step by step; what the conductor holds back until REPLICATE_END (the replica's STOP).
        self._index_to = NULL_POSITION
        self._index_copy: TimeIndexCopy | None = None
        self._after_close: list[Callable[[], None]] = []

    # ---- the Session contract ---------------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self.replication_id

    def is_done(self) -> bool:
        return self.state is ReplicationState.DONE

    def abort(self, reason: str = "") -> None:
        self._set_state(ReplicationState.DONE, reason or "abort")

    def do_work(self, now_ns: int) -> int:
        self._now_ns = now_ns
        try:
            if self.subscription is not None and self.subscription.is_closed:
                self._on_subscription_closed(self._host.recorded_position(self.dst_recording_id))
                return 1
            work = self._step()
            self._poll_destination_changes()
            if self.state is not ReplicationState.COPY_TIME_INDEX:
                self._poll_source_errors()
            return work
        except Exception as ex:
            self._fail(ex)
            return 1

    def call_after_close(self, action: Callable[[], None]) -> None:
        """Run `action` once the session has closed (after its REPLICATE_END): the conductor holds the replica's
        STOP here while the session copies the source's time index, so the signals keep Java's order."""
        self._after_close.append(action)

    def on_replica_stopped(self, position: int) -> None:
        """The conductor closes the replica's recording at `position` (our recorder, on its own thread, may end it
        between two of this session's steps): the session settles first (SYNC, or the error saying the replay ended
        early), so the signals keep Java's order, the recording's STOP last."""
        if self.state is ReplicationState.DONE:
            return
        try:
            self._on_subscription_closed(position)
        except Exception as ex:
            self._fail(ex)

    def _fail(self, ex: Exception) -> None:
        message = self._describe_failure(ex)
        self._set_state(ReplicationState.DONE, message)
        self._error(ErrorCode.GENERIC, message)
        self._host.on_replication_error(message, ex)

    def close(self) -> None:
        """Stop recording (if the session still holds the subscription), stop the source's replay, close the
        connection to the source; then REPLICATE_END (the recording's STOP follows from the recorder)."""
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            self._host.stop_replica_subscription(subscription.registration_id)
        self._close_index_copy()  # stopped mid-copy (StopReplication, the archive closing): the rest keeps its times
        src = self.src
        if src is not None and self.src_replay_session_id != NULL_VALUE:
            replay_session_id, self.src_replay_session_id = self.src_replay_session_id, NULL_VALUE
            try:
                src.send(lambda ids: m.StopReplayRequest.of(**ids, replay_session_id=replay_session_id))
            except Exception as ex:
                self._host.on_replication_error(f"replication {self.replication_id}: stop replay failed: {ex}", ex)
        image, self.image = self.image, None
        if image is not None:
            image.close()
        request_publication, self._request_publication, self._request_proxy = self._request_publication, None, None
        if request_publication is not None and not request_publication.close():
            self._host.settle_later(request_publication.close)
        connect, self._connect = self._connect, None
        if connect is not None:
            connect.close()
        self.src = None
        if src is not None:
            try:
                src.close()
            except Exception as ex:
                log.debug("replication %d: closing the source session: %s", self.replication_id, ex)
        self._signal(NULL_POSITION, RecordingSignal.REPLICATE_END)
        after_close, self._after_close = self._after_close, []
        for action in after_close:
            action()

    # ---- states -----------------------------------------------------------------------------------------------

    def _step(self) -> int:
        state = self.state
        if state is ReplicationState.CONNECT:
            return self._do_connect()
        if state is ReplicationState.REPLICATE_DESCRIPTOR:
            return self._do_replicate_descriptor()
        if state is ReplicationState.SRC_RECORDING_POSITION:
            return self._do_src_recording_position()
        if state is ReplicationState.EXTEND:
            return self._do_extend()
        if state is ReplicationState.REPLAY_TOKEN:
            return self._do_replay_token()
        if state is ReplicationState.GET_ARCHIVE_PROXY:
            return self._do_get_archive_proxy()
        if state is ReplicationState.REPLAY:
            return self._do_replay()
        if state is ReplicationState.AWAIT_IMAGE:
            return self._do_await_image()
        if state is ReplicationState.REPLICATE:
            return self._do_replicate()
        if state is ReplicationState.CATCHUP:
            return self._do_catchup()
        if state is ReplicationState.ATTEMPT_LIVE_JOIN:
            return self._do_attempt_live_join()
        if state is ReplicationState.COPY_TIME_INDEX:
            return self._do_copy_time_index()
        return 0

    def _do_connect(self) -> int:
        if self._connect is None:
            self._connect = self._connect_factory()
            return 1
        try:
            connected = self._connect.poll()
        except ArchiveError as ex:
            self._connect = None  # a failed connect closed what it added
            message = f"Replication connection failed={ex.message}"
            self._set_state(ReplicationState.DONE, message)
            self._error(ErrorCode.REPLICATION_CONNECTION_FAILURE, message)
            return 1
        if connected is None:
            return 0
        self._connect = None
        self.src = self._wrap(connected)
        self._set_state(ReplicationState.REPLICATE_DESCRIPTOR, "connected to the archive")
        return 1

    def _do_replicate_descriptor(self) -> int:
        src = self._source()
        if self._active_correlation_id == NULL_VALUE:
            src_id = self.src_recording_id
            self._track(src.send(lambda ids: m.ListRecordingRequest.of(**ids, recording_id=src_id)))
            return 1
        work = 0
        for msg in src.poll_responses():
            work += 1
            if isinstance(msg, DescriptorMessage) and msg.correlation_id == self._active_correlation_id:
                self._on_recording_descriptor(msg.descriptor)
                return work
            if self._is_response(msg):
                if msg.code == ControlResponseCode.ERROR:
                    raise ArchiveError(
                        f"response for correlationId={msg.correlation_id}, error: {msg.error_message}",
                        msg.relevant_id,
                    )
                if (
                    msg.correlation_id == self._active_correlation_id
                    and msg.code == ControlResponseCode.RECORDING_UNKNOWN
                ):
                    message = f"unknown src recording id {self.src_recording_id}"
                    self._set_state(ReplicationState.DONE, message)
                    self._error(ErrorCode.UNKNOWN_RECORDING, message)
                    return work
        if work == 0:
            self._check_timeout("failed to fetch remote recording descriptor")
        return work

    def _on_recording_descriptor(self, d: RecordingDescriptor) -> None:
        self.src_stop_position = d.stop_position
        self.replay_stream_id = d.stream_id
        use_given = self.live_destination is None and self.request.replication_session_id != NULL_VALUE
        self.replay_session_id = self.request.replication_session_id if use_given else d.session_id
        file_io = self.request.file_io_max_length
        if file_io != NULL_VALUE and file_io < d.mtu_length:
            message = (
                f"Replication fileIoMaxLength ({file_io}) is less than than the recording mtuLength ({d.mtu_length})"
            )
            self._set_state(ReplicationState.DONE, message)
            self._error(ErrorCode.GENERIC, message)
            return
        if self.dst_recording_id == NULL_VALUE:
            self.replay_position = d.start_position
            self.dst_recording_id = self._host.new_replica(d)
            self._signal(d.start_position, RecordingSignal.REPLICATE)
        elif self.dst_is_empty:
            self.replay_position = d.start_position
            self._host.replace_replica(self.dst_recording_id, d)
        next_state, reason = ReplicationState.EXTEND, ""
        if self.live_destination is not None:
            if d.stop_position != NULL_POSITION:
                message = "cannot live merge without active source recording"
                self._set_state(ReplicationState.DONE, message)
                self._error(ErrorCode.GENERIC, message)
                return
            next_state, reason = ReplicationState.SRC_RECORDING_POSITION, f"liveDestination={self.live_destination}"
        if d.start_position == d.stop_position or d.stop_position == self._host.stop_position(self.dst_recording_id):
            self._signal(d.stop_position, RecordingSignal.SYNC)
            next_state, reason = ReplicationState.DONE, "in sync"
        self._set_state(next_state, reason)

    def _do_src_recording_position(self) -> int:
        answer = self._ask_source(m.RecordingPositionRequest, "failed to get recording position")
        if answer is None:
            return 0
        if answer == NULL_POSITION:
            raise ArchiveError("cannot live merge without active source recording")
        self.src_recording_position = answer
        self._set_state(ReplicationState.EXTEND, "")
        return 1

    def _do_extend(self) -> int:
        is_mds = self.is_tagged or self.live_destination is not None
        uri = ChannelUri.parse(self.replication_channel)
        endpoint = uri.get("endpoint")
        params: dict[str, Any] = {"rejoin": "false"}
        if not self.is_response_channel:  # a response subscription takes the session its publication answers with
            params["session_id"] = self.replay_session_id
        channel = uri.with_params(**params)
        if is_mds:
            channel = channel.with_params(
                endpoint=None, tags=f"{self.channel_tag_id},{self.subscription_tag_id}", control_mode="manual"
            )
        try:
            subscription = self._host.extend_replica(
                self.replication_id,
                self.control_session_id,
                self.dst_recording_id,
                self.replay_stream_id,
                str(channel),
            )
        except ArchiveError as ex:
            self._set_state(ReplicationState.DONE, ex.message)
            self._error(ex.error_code, ex.message)
            return 1
        self.subscription = subscription
        if is_mds:
            self._replay_destination = destination_uri(self.replication_channel, endpoint)
            self._destination_changes.append(subscription.async_add_destination(self._replay_destination))
            self._set_state(ReplicationState.REPLAY, f"replay destination added: {self._replay_destination}")
        else:
            # Java passes through REPLAY_TOKEN and GET_ARCHIVE_PROXY, a duty cycle each, when they have nothing to do.
            next_state = ReplicationState.REPLAY_TOKEN if self.is_response_channel else ReplicationState.REPLAY
            self._set_state(next_state, "replay destination added")
        return 1

    def _do_replay_token(self) -> int:
        """Over a response channel: a replay token for the source recording, from the source's control session."""
        answer = self._ask_source(m.ReplayTokenRequest, "failed to get a replay token")
        if answer is None:
            return 0
        self.replay_token = answer
        self._set_state(ReplicationState.GET_ARCHIVE_PROXY, f"replayToken={answer}")
        return 1

    def _do_get_archive_proxy(self) -> int:
        """With a token: a publication to the source's control channel naming the recording subscription, on which
        the replay is asked for, so that the source's replay publication answers it."""
        subscription = self.subscription
        assert subscription is not None
        if self._request_publication is None:
            self._request_publication = self._source().replay_request_publication(subscription.registration_id)
            return 1
        proxy = self._request_publication.poll()
        if proxy is None:
            self._check_timeout(
                f"failed to connect the replay request publication: channel={self._request_publication.channel}"
            )
            return 0
        self._request_proxy = proxy
        self._set_state(ReplicationState.REPLAY, "ArchiveProxy created")
        return 1

    def _do_replay(self) -> int:
        src = self._source()
        subscription = self.subscription
        assert subscription is not None
        if self._active_correlation_id == NULL_VALUE:
            # As Java, the replay is asked for once the driver has bound the subscription (for a multi-destination
            # one, its replay destination), and to the port it bound. IPC binds nothing: it goes ahead at once.
            resolved = subscription.resolved_endpoint() if self._replication_uri.is_udp else None
            if resolved is None and self._replication_uri.is_udp:
                self._check_timeout(f"failed to resolve subscription endpoint: channel={self.replication_channel}")
                return 0
            channel = self._replay_channel(resolved)
            length = (
                NULL_VALUE if self.dst_stop_position == NULL_POSITION else self.dst_stop_position - self.replay_position
            )
            src_id, position, stream_id = self.src_recording_id, self.replay_position, self.replay_stream_id
            file_io, token = self.request.file_io_max_length, self.replay_token
            self._track(
                src.send(
                    lambda ids: replay_request(ids, src_id, position, length, channel, stream_id, file_io, token),
                    via=self._request_proxy,
                )
            )
            return 1
        answer = self._poll_answer()
        if answer is None:
            self._check_timeout(f"failed get acknowledgement of replay request to: {self.replication_channel}")
            return 0
        self.src_replay_session_id = answer
        self._set_state(ReplicationState.AWAIT_IMAGE, f"srcReplaySessionId={answer}")
        return 1

    def _replay_channel(self, resolved: str | None) -> str:
        """The replay channel the source sends to: the replication channel with the port the destination's
        subscription bound (`resolved`, `host:port`) in place of a wildcard one, the replay's session id, and for a
        live merge no linger and no end of stream. Never an `mtu`: an archive of ours would honour it (a larger
        replay MTU, `channel.replay_mtu_length`), and the replica, which records the replay's image, would then
        describe itself with the replay's MTU instead of its source's."""
        uri = self._replication_uri
        if resolved is not None and uri.get("endpoint") is not None:
            uri = uri.with_endpoint_wildcard_port_replaced(resolved)
        params: dict[str, Any] = (
            # The source puts the request image's correlation id here; Java sends the subscription's.
            {"response_correlation_id": self.subscription.registration_id}
            if self.is_response_channel and self.subscription is not None
            else {"session_id": self.replay_session_id}
        )
        params["mtu"] = None
        if self.live_destination is not None:
            params.update(linger=0, eos="false")
        return str(uri.with_params(**params))

    def _do_await_image(self) -> int:
        subscription = self.subscription
        assert subscription is not None
        image = subscription.image_by_session_id(to_int32(self.src_replay_session_id))
        if image is None:
            self._check_timeout(
                f"failed get replay image for sessionId={to_int32(self.src_replay_session_id)} "
                f"on channel={self.replication_channel}"
            )
            return 0
        self.image = image
        next_state = ReplicationState.REPLICATE if self.live_destination is None else ReplicationState.CATCHUP
        self._set_state(next_state, f"image.sessionId={image.session_id}, image.joinPosition={image.join_position}")
        return 1

    def _do_replicate(self) -> int:
        image = self.image
        position = self.position = image.position
        closed, end_of_stream = image.is_closed, image.is_end_of_stream
        synced = self.src_stop_position != NULL_POSITION and position >= self.src_stop_position
        bounded = self.dst_stop_position != NULL_POSITION and position >= self.dst_stop_position
        if not (synced or bounded or end_of_stream or closed):
            return 0
        if not (synced or bounded):
            self._check_replay_ended_well(position, end_of_stream)
        if synced:
            self._signal(position, RecordingSignal.SYNC)
        log.info(
            "replication %d of recording %d into %d done at position %d (%s)",
            self.replication_id,
            self.src_recording_id,
            self.dst_recording_id,
            position,
            "synced" if synced else "bounded" if bounded else "replay ended",
        )
        self.src_replay_session_id = NULL_VALUE
        if self._copies_time_index():
            # The replica must stop before its files are rewritten: stop it now (the recorder has written all the
            # image gave it), and copy once the conductor says it stopped.
            subscription = self.subscription
            assert subscription is not None
            self._host.stop_replica_subscription(subscription.registration_id)
            self._set_state(ReplicationState.COPY_TIME_INDEX, "awaiting the replica's stop")
            return 1
        self._set_state(ReplicationState.DONE, "sync" if synced else "done")
        return 1

    def _on_subscription_closed(self, position: int) -> None:
        """The destination stopped recording at `position` (the replay ended and auto-stop closed the subscription,
        or the recording failed). Our recorder runs on its own thread, so that can happen between two of this
        session's steps, after the last frames came: a replica that holds the source's stop is still SYNC."""
        if self.state is ReplicationState.COPY_TIME_INDEX:
            if self._index_to == NULL_POSITION:
                self._on_replica_holds(position)
            return
        if self.state is ReplicationState.REPLICATE:
            self.position = position
            if self.src_stop_position != NULL_POSITION and position >= self.src_stop_position:
                self._signal(position, RecordingSignal.SYNC)
                self.src_replay_session_id = NULL_VALUE
            elif self.dst_stop_position == NULL_POSITION or position < self.dst_stop_position:
                # The image tells how the replay ended: an end of stream (a live source's recording stopped), or
                # none (the source went away: killed, or its link cut, and the image timed out).
                end_of_stream = self.image.is_end_of_stream if self.image is not None else True
                self._check_replay_ended_well(position, end_of_stream)
            if self._copies_time_index():
                self._set_state(ReplicationState.COPY_TIME_INDEX, "recording subscription closed")
                self._on_replica_holds(position)
                return
        self._set_state(ReplicationState.DONE, "recording subscription closed")

    def _check_replay_ended_well(self, position: int, end_of_stream: bool) -> None:
        """The replay ended before the source's stop and the bound. A live source's replay ends so when its recording
        stops (end of stream), as Java's does, silently; anything else means the source went away (Java is silent
        here too): the replica is valid up to `position`, and the requester is told so."""
        if self.src_stop_position == NULL_POSITION and end_of_stream:
            return
        expected = (
            f"the source's stop position {self.src_stop_position}"
            if self.src_stop_position != NULL_POSITION
            else "the source recording's end"
        )
        self.src_replay_session_id = NULL_VALUE  # nothing to stop: it is gone
        raise ArchiveError(
            f"the replay from the source ended at position {position}, before {expected}; the replica holds the "
            "recording up to there, valid"
        )

    def _do_catchup(self) -> int:
        image = self.image
        if image.position >= self.src_recording_position:
            self._set_state(ReplicationState.ATTEMPT_LIVE_JOIN, f"caught up with {self.src_recording_position}")
            return 1
        if image.is_closed:
            raise ArchiveError("replication image closed unexpectedly")
        return 0

    def _do_attempt_live_join(self) -> int:
        image = self.image
        src = self._source()
        if self._active_correlation_id == NULL_VALUE:
            src_id = self.src_recording_id
            self._track(src.send(lambda ids: m.RecordingPositionRequest.of(**ids, recording_id=src_id)))
            return 1
        answer = self._poll_answer()
        if answer is None:
            if image.is_closed:
                raise ArchiveError("replication image closed unexpectedly")
            if self._now_ns - self._action_started_ns >= self._timeout_ns:
                self._retries -= 1
                if self._retries == 0:
                    raise ArchiveError("failed to get recording position")
                self._track(NULL_VALUE)
            return 0
        self._track(NULL_VALUE)
        self._retries = RETRY_ATTEMPTS
        if answer == NULL_POSITION:
            raise ArchiveError("cannot live merge without active source recording")
        self.src_recording_position = answer
        position = image.position
        subscription = self.subscription
        assert subscription is not None and self.live_destination is not None
        window = min(image.term_buffer_length >> 2, LIVE_ADD_MAX_WINDOW)
        if not self._live_added and answer - position <= window:
            self._destination_changes.append(subscription.async_add_destination(self.live_destination))
            self._live_added = True
        elif self._live_added and answer - position <= REPLAY_REMOVE_THRESHOLD and image.active_transport_count >= 2:
            assert self._replay_destination is not None
            self._destination_changes.append(subscription.async_remove_destination(self._replay_destination))
            self._replay_destination = None
            self.subscription = None  # the recording goes on with the live stream: no longer this session's
            self._signal(position, RecordingSignal.MERGE)
            if self._copies_time_index():
                # What the replay brought dates by the source; what comes live keeps the replica's own times (the
                # conductor leaves alone the segment the recorder still writes).
                self._set_state(ReplicationState.COPY_TIME_INDEX, "merge")
                self._on_replica_holds(position)
                return 1
            self._set_state(ReplicationState.DONE, "merge")
        return 1

    # ---- the source's time index onto the replica (ours, beyond Java) -----------------------------------------

    def _copies_time_index(self) -> bool:
        """Whether to date the replica by the source: only a source that said at connect that it answers the time
        index (Java's archive ignores the request, so it is never asked), and only if this archive keeps one."""
        src = self.src
        return src is not None and src.answers_time_index and self._host.keeps_time_index()

    def _on_replica_holds(self, position: int) -> None:
        """The replica holds `[replay_position, position)` and its recorder no longer writes it (stopped), or only
        past it (merged): the copy may begin."""
        self._index_to = position
        self._action_started_ns = self._now_ns
        self.subscription = None  # stopped, or recording the live stream: nothing of it is this session's now
        if position <= self.replay_position:
            self._set_state(ReplicationState.DONE, "nothing replicated to date")

    def _do_copy_time_index(self) -> int:
        """Ask the source for its samples over the replicated range step by step, rewriting the replica's files
        as each step's answer completes. Anything that goes wrong (the source gone, no index there, samples that
        cannot date the range) only leaves the replica its own times over what was not yet rewritten, still valid
        and never going back: logged, never reported as the replication's error (the recording was replicated)."""
        if self._index_to == NULL_POSITION:
            if self._now_ns - self._action_started_ns >= self._timeout_ns:
                self._keep_own_times("the replica's recording did not stop within the action timeout")
                return 1
            return 0
        try:
            return self._copy_time_index_step()
        except Exception as ex:
            self._keep_own_times(ex.message if isinstance(ex, ArchiveError) else str(ex))
            return 1

    def _copy_time_index_step(self) -> int:
        """One duty cycle of the copy: ask the source for the next step's samples when the copy can take them,
        spool what arrived, and let the copy write (at most one file renamed per cycle: the conductor's other
        sessions wait for nothing longer than one small file's fsync)."""
        copy = self._index_copy
        if copy is None:
            copy = self._index_copy = self._host.time_index_copy(
                self.dst_recording_id, self.replay_position, self._index_to
            )
        src = self._source()
        work = 0
        if self._active_correlation_id != NULL_VALUE:
            work += self._poll_time_index(copy)
        if self._active_correlation_id == NULL_VALUE:  # nothing awaited: the next step, if the copy can take it
            request = copy.next_request()
            if request is not None:
                src_id, (low, high) = self.src_recording_id, request
                self._track(
                    src.send(
                        lambda ids: m.TimeIndexRequest.of(
                            **ids, recording_id=src_id, from_position=low, to_position=high
                        )
                    )
                )
                work += 1
        work += copy.do_work()
        if copy.is_done:
            log.info(
                "replication %d: recording %d dated by the source's time index over [%d, %d) (%d samples, %d files)",
                self.replication_id,
                self.dst_recording_id,
                copy.low,
                copy.high,
                copy.samples_written,
                copy.files_written,
            )
            self._close_index_copy()
            self._set_state(ReplicationState.DONE, "time index copied")
        return work

    def _poll_time_index(self, copy: TimeIndexCopy) -> int:
        """The answer to the step asked for: its samples spooled by the copy, its OK ending the step."""
        src = self._source()
        work = 0
        for msg in src.poll_responses():
            work += 1
            if msg.control_session_id != src.control_session_id:
                continue
            if msg.template_id == t.TIME_INDEX_SAMPLES and msg.correlation_id == self._active_correlation_id:
                copy.on_samples(np.frombuffer(msg.samples, dtype=SAMPLE_DTYPE), int(msg.interval_ns))
                self._action_started_ns = self._now_ns  # the timeout runs from the last message, as the client's
            elif msg.template_id == t.CONTROL_RESPONSE and msg.correlation_id == self._active_correlation_id:
                if msg.code == ControlResponseCode.ERROR:  # only this request's: a late one for another is not
                    raise ArchiveError(f"the source answered: {msg.error_message}", msg.relevant_id)
                copy.on_step_end(int(msg.relevant_id))
                self._track(NULL_VALUE)
        if work == 0 and self._active_correlation_id != NULL_VALUE:
            self._check_timeout("no answer from the source to the time index request")
        return work

    def _keep_own_times(self, reason: str) -> None:
        copy = self._index_copy
        low = copy.dated_to if copy is not None else self.replay_position
        log.warning(
            "replication %d: recording %d keeps its own times over [%d, %d), not the source's: %s",
            self.replication_id,
            self.dst_recording_id,
            low,
            self._index_to,
            reason,
        )
        self._close_index_copy()
        self._set_state(ReplicationState.DONE, "time index not copied")

    def _close_index_copy(self) -> None:
        """Remove the file half-written and the spools (a file already renamed stays: whole, dated by the source)."""
        copy, self._index_copy = self._index_copy, None
        if copy is not None:
            try:
                copy.close()
            except OSError as ex:
                log.warning("replication %d: closing the time index copy: %s", self.replication_id, ex)

    # ---- talking to the source --------------------------------------------------------------------------------

    def _source(self) -> AeronArchive:
        assert self.src is not None
        return self.src

    def _is_response(self, msg: Any) -> bool:
        return bool(
            msg.template_id == t.CONTROL_RESPONSE
            and self.src is not None
            and msg.control_session_id == self.src.control_session_id
        )

    def _poll_answer(self) -> int | None:
        """The relevant id of the OK to the active request, if it came; any ERROR of the session raises (Java's
        `hasResponse`)."""
        answer = None
        for msg in self._source().poll_responses():
            if not self._is_response(msg):
                continue
            if msg.code == ControlResponseCode.ERROR:
                raise ArchiveError(str(msg.error_message), msg.relevant_id)
            if msg.correlation_id == self._active_correlation_id and msg.code == ControlResponseCode.OK:
                answer = int(msg.relevant_id)
        return answer

    def _ask_source(
        self, request: type[m.RecordingPositionRequest | m.ReplayTokenRequest], timeout_message: str
    ) -> int | None:
        """Ask the source `request` about its recording (the first call), then its answer once it came (None
        before; `timeout_message` fails the replication after the action timeout)."""
        src = self._source()
        if self._active_correlation_id == NULL_VALUE:
            src_id = self.src_recording_id
            self._track(src.send(lambda ids: request.of(**ids, recording_id=src_id)))
            return None
        answer = self._poll_answer()
        if answer is None:
            self._check_timeout(timeout_message)
        return answer

    def _poll_destination_changes(self) -> None:
        """Destinations being added or removed: a refusal by the media driver fails the replication."""
        if self._destination_changes:
            self._destination_changes = [change for change in self._destination_changes if not change.poll()]

    def _poll_source_errors(self) -> None:
        """With nothing awaited, poll the source's control stream now and then: an error, or the source gone,
        fails the replication (Java's `pollSourceArchiveEvents`)."""
        src = self.src
        if src is None or self.state is ReplicationState.DONE or self._active_correlation_id != NULL_VALUE:
            return
        if self._now_ns < self._next_source_poll_ns:
            return
        self._next_source_poll_ns = self._now_ns + SOURCE_POLL_INTERVAL_NS
        try:
            messages = src.poll_responses()
        except ArchiveDisconnectedError as ex:
            raise ArchiveError("not connected") from ex
        for msg in messages:
            if self._is_response(msg) and msg.code == ControlResponseCode.ERROR:
                raise ArchiveError(str(msg.error_message), msg.relevant_id)

    # ---- bookkeeping ------------------------------------------------------------------------------------------

    def _track(self, correlation_id: int) -> None:
        self._active_correlation_id = correlation_id
        self._action_started_ns = self._now_ns

    def _check_timeout(self, message: str) -> None:
        if self._now_ns - self._action_started_ns >= self._timeout_ns:
            raise ArchiveError(message, ErrorCode.GENERIC)

    def _set_state(self, state: ReplicationState, reason: str) -> None:
        log.debug("replication %d: %s -> %s (%s)", self.replication_id, self.state.value, state.value, reason or "-")
        if state is ReplicationState.DONE and not self.done_reason:
            self.done_reason = reason
        self.state = state
        self._active_correlation_id = NULL_VALUE
        self._action_started_ns = self._now_ns

    def _signal(self, position: int, signal: RecordingSignal) -> None:
        subscription_id = self.subscription.registration_id if self.subscription is not None else NULL_VALUE
        self._host.signal(
            self.control_session_id, self.replication_id, self.dst_recording_id, subscription_id, position, signal
        )

    def _error(self, code: int, message: str) -> None:
        self._host.send_error(self.control_session_id, self.replication_id, code, message)

    def _describe_failure(self, ex: Exception) -> str:
        """Java's text first; then where: the source archive, its recording, the position reached."""
        text = ex.message if isinstance(ex, ArchiveError) else str(ex)
        if self.image is not None and not self.image.is_closed:
            self.position = self.image.position
        position = self.position if self.position != NULL_POSITION else self.replay_position
        return (
            f"{text} (replication {self.replication_id} of recording {self.src_recording_id} from the archive at "
            f"{self.request.src_control_channel} stream {self.request.src_control_stream_id} into recording "
            f"{self.dst_recording_id}, at position {position}, in state {self.state.value})"
        )


def destination_uri(channel: str, endpoint: str | None) -> str:
    """A destination of a multi-destination subscription for `channel`'s media and `endpoint` (Java's
    `ChannelUri.createDestinationUri`: the media, the endpoint, and an interface if the channel names one)."""
    uri = ChannelUri.parse(channel)
    out = f"aeron:{uri.media}"
    params = []
    if endpoint is not None:
        params.append(f"endpoint={endpoint}")
    interface = uri.get("interface")
    if interface is not None:
        params.append(f"interface={interface}")
    return out + ("?" + "|".join(params) if params else "")
