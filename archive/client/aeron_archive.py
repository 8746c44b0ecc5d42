"""The archive client, mirroring Java's `AeronArchive` in snake_case.

Every synchronous call sends one request with a fresh correlation id and polls the response stream until the
matching ControlResponse (or descriptors) arrive, within the message timeout. Recording signals that arrive
meanwhile go to `recording_signal_consumer`; an ERROR raises `ArchiveError` with Aeron's error code.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from aeron_archive_spark.archive.channel import (
    ChannelUri,
    add_session_id,
    initial_position_params,
)
from aeron_archive_spark.archive.client.archive_proxy import ArchiveProxy
from aeron_archive_spark.archive.client.async_connect import AsyncConnect, Connected
from aeron_archive_spark.archive.client.connection import default_aeron_dir
from aeron_archive_spark.archive.client.replication_params import ReplicationParams
from aeron_archive_spark.archive.client.response_poller import DescriptorMessage, ResponsePoller
from aeron_archive_spark.archive.client.response_replay import ReplayRequestPublication, is_response_channel
from aeron_archive_spark.archive.codecs import Message
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import (
    CONTROL_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_STREAM_ID_DEFAULT,
    CONTROL_STREAM_ID_DEFAULT,
    MESSAGE_TIMEOUT_NS_DEFAULT,
    NULL_COUNTER_ID,
    NULL_POSITION,
    REPLAY_ALL_AND_FOLLOW,
    TIME_INDEX_FEATURE,
    ControlResponseCode,
    RecordingSignal,
    SourceLocation,
)
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import (
    ArchiveDisconnectedError,
    ArchiveError,
    ArchiveTimeoutError,
    ErrorCode,
)
from aeron_archive_spark.archive.native import (
    AeronClient,
    ExclusivePublication,
    Publication,
    Subscription,
)
from aeron_archive_spark.archive.storage.segments import segment_file_base_position
from aeron_archive_spark.archive.storage.time_index import NO_INDEX_INTERVAL, RANGE_DTYPE, TimeIndex

__all__ = ["AeronArchive", "DescriptorMessage", "RecordingSignalEvent", "RequestIds"]

log = logging.getLogger(__name__)

# A TimeIndexSamples message's samples: (timeNs, position) int64 pairs, little-endian, as a `.tix` file holds them.
TIME_INDEX_SAMPLE_DTYPE = np.dtype([("time_ns", "<i8"), ("position", "<i8")])
# TimeIndexesRequest: (recordingId, fromPosition, toPosition) triples, at most this many a request (6 KiB, within
# the 8 KiB max message of a 64 KiB request term); an empty TimeIndexSamples closes each range's answer, with
# intervalNs NO_INDEX_INTERVAL where the archive cannot date it.
MAX_TIME_INDEX_RANGES = 256

# Waiting for a control response: empty polls that only yield the CPU before the 0.1 ms sleeps begin.
RESPONSE_WAIT_YIELDS = 10
NULL_VALUE = -1


class RequestIds(TypedDict):
    """What the client puts in every request of a control session: its id and a new correlation id."""

    control_session_id: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class RecordingSignalEvent:
    control_session_id: int
    correlation_id: int
    recording_id: int
    subscription_id: int
    position: int
    signal: RecordingSignal


@dataclass(frozen=True, slots=True)
class RecordingSubscriptionDescriptor:
    control_session_id: int
    correlation_id: int
    subscription_id: int
    stream_id: int
    stripped_channel: str


class AeronArchive:
    """A connected archive client. Create with `AeronArchive.connect(...)`; also a context manager."""

    def __init__(
        self,
        aeron: AeronClient,
        owns_aeron: bool,
        proxy: ArchiveProxy,
        poller: ResponsePoller,
        control_session_id: int,
        message_timeout_ns: int,
        recording_signal_consumer: Callable[[RecordingSignalEvent], None] | None,
        archive_id: int = NULL_POSITION,
        control_request_channel: str = CONTROL_CHANNEL_DEFAULT,
        control_request_stream_id: int = CONTROL_STREAM_ID_DEFAULT,
        features: frozenset[str] = frozenset(),
    ) -> None:
        self.aeron = aeron
        # What the archive answers beyond Aeron's protocol (this project's archive says so when it accepts the
        # connect; Java's says nothing): a request it would leave unanswered fails at once instead of timing out.
        self.features = features
        self.control_request_channel = control_request_channel
        self.control_request_stream_id = control_request_stream_id
        self._owns_aeron = owns_aeron
        self._proxy = proxy
        self._poller = poller
        self._subscription = poller.subscription
        self.control_session_id = control_session_id
        self._timeout_ns = message_timeout_ns
        self.recording_signal_consumer = recording_signal_consumer
        self._lock = threading.RLock()
        self._archive_id = archive_id
        self._closed = False
        # Reassembled messages not yet consumed by the current request (e.g. signals while listing).
        self._inbox: list[Any] = []

    @classmethod
    def of(
        cls, connected: Connected, recording_signal_consumer: Callable[[RecordingSignalEvent], None] | None = None
    ) -> AeronArchive:
        """The client of a session an `AsyncConnect` finished."""
        return cls(
            connected.aeron,
            connected.owns_aeron,
            connected.proxy,
            connected.poller,
            connected.control_session_id,
            connected.message_timeout_ns,
            recording_signal_consumer,
            connected.archive_id,
            connected.control_request_channel,
            connected.control_request_stream_id,
            connected.features,
        )

    # -- connect / close -----------------------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        aeron_dir: str | None = None,
        control_request_channel: str = CONTROL_CHANNEL_DEFAULT,
        control_request_stream_id: int = CONTROL_STREAM_ID_DEFAULT,
        control_response_channel: str = CONTROL_RESPONSE_CHANNEL_DEFAULT,
        control_response_stream_id: int = CONTROL_RESPONSE_STREAM_ID_DEFAULT,
        *,
        aeron: AeronClient | None = None,
        message_timeout_s: float = MESSAGE_TIMEOUT_NS_DEFAULT / 1e9,
        client_name: str = "aeron-archive-py-client",
        credentials: bytes | str | None = None,
        on_challenge: Callable[[bytes], bytes] | None = None,
        recording_signal_consumer: Callable[[RecordingSignalEvent], None] | None = None,
    ) -> AeronArchive:
        """Connect to an archive: AuthConnectRequest handshake, then ArchiveIdRequest (as the Java client).

        `aeron_dir` names the media driver to use (default: $AERON_DIR or Aeron's default); pass `aeron` to
        share an existing client instead. `credentials` (a str is sent UTF-8 encoded) travel in the
        AuthConnectRequest's encodedCredentials; an archive that rejects them raises `ArchiveError` with
        AUTHENTICATION_REJECTED naming its control channel. If the archive challenges, `on_challenge(challenge)`
        returns the answer; without it the connect is refused with a clear error.
        """
        encoded_credentials = credentials.encode() if isinstance(credentials, str) else bytes(credentials or b"")
        owns = aeron is None
        client = aeron if aeron is not None else AeronClient(aeron_dir or default_aeron_dir(), client_name=client_name)
        try:
            connect = AsyncConnect(
                client,
                control_request_channel,
                control_request_stream_id,
                control_response_channel,
                control_response_stream_id,
                owns_aeron=owns,
                message_timeout_ns=int(message_timeout_s * 1e9),
                client_name=client_name,
                credentials=encoded_credentials,
                on_challenge=on_challenge,
            )
        except BaseException:
            if owns:
                client.close()
            raise
        polls = 0
        try:
            while True:
                connected = connect.poll()
                if connected is not None:
                    return cls.of(connected, recording_signal_consumer)
                # Each step is answered within a millisecond or so: yield first, then sleep briefly.
                polls += 1
                time.sleep(0 if polls <= RESPONSE_WAIT_YIELDS else 0.0002)
        except BaseException:
            connect.close()  # what it added, and an owned client (already done if `poll` raised)
            raise

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._proxy.send(m.CloseSessionRequest.of(control_session_id=self.control_session_id))
            except ArchiveError as ex:
                log.debug("close session request not sent: %s", ex)
            self._subscription.close()
            self._proxy.publication.close()
            if self._owns_aeron:
                self.aeron.close()

    def __enter__(self) -> AeronArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- polling -------------------------------------------------------------------------------------------
    def _poll_messages(self) -> list[Any]:
        """Drain what arrived; signals go to the consumer, everything else is returned in order."""
        received = self._poller.poll()
        out = []
        for msg in self._inbox + received:
            if msg.template_id == t.RECORDING_SIGNAL_EVENT:
                self._dispatch_signal(msg)
            elif msg.template_id != t.PING:
                out.append(msg)
        self._inbox = []
        return out

    def _dispatch_signal(self, msg: Any) -> None:
        event = RecordingSignalEvent(
            msg.control_session_id,
            msg.correlation_id,
            msg.recording_id,
            msg.subscription_id,
            msg.position,
            RecordingSignal(msg.signal),
        )
        if self.recording_signal_consumer is not None:
            self.recording_signal_consumer(event)
        else:
            log.debug("recording signal %s", event)

    def _check_open(self) -> None:
        if self._closed:
            raise ArchiveError("client is closed")
        if not self._subscription.is_connected:
            raise ArchiveDisconnectedError("archive is disconnected: control response stream has no connected image")

    def _request(
        self, build: Callable[[RequestIds], Message], via: ArchiveProxy | None = None, correlation_id: int | None = None
    ) -> tuple[int, str]:
        """Send the request `build` makes of this session's id and a new correlation id (or `correlation_id`) on
        the session's publication (or `via`); the caller holds the lock. Returns the correlation id and the
        request's name (for errors)."""
        self._check_open()
        ids: RequestIds = {
            "control_session_id": self.control_session_id,
            "correlation_id": self.aeron.next_correlation_id() if correlation_id is None else correlation_id,
        }
        request = build(ids)
        (via or self._proxy).send(request)
        return ids["correlation_id"], request.name

    def _await_response(self, correlation_id: int, what: str) -> Any:
        deadline = time.monotonic_ns() + self._timeout_ns
        empty_polls = 0
        while True:
            messages = self._poll_messages()
            for i, msg in enumerate(messages):
                if (
                    msg.template_id == t.CONTROL_RESPONSE
                    and msg.correlation_id == correlation_id
                    and msg.control_session_id == self.control_session_id
                ):
                    self._inbox = messages[i + 1 :] + self._inbox
                    if msg.code == ControlResponseCode.ERROR:
                        raise ArchiveError(msg.error_message, msg.relevant_id, correlation_id)
                    return msg
            if time.monotonic_ns() > deadline:
                raise ArchiveTimeoutError(
                    f"no response to {what} within the message timeout", ErrorCode.GENERIC, correlation_id
                )
            if not messages:
                # The archive answers most requests within ~0.1 ms: yield the first few times, then sleep.
                empty_polls += 1
                time.sleep(0 if empty_polls <= RESPONSE_WAIT_YIELDS else 0.0001)

    def _request_ok(self, build: Callable[[RequestIds], Message]) -> int:
        """Send a request (see `_request`) and return the relevant id of its OK; an ERROR raises."""
        with self._lock:
            correlation_id, name = self._request(build)
            relevant_id: int = self._await_response(correlation_id, name).relevant_id  # an int64
            return relevant_id

    # -- asynchronous use --------------------------------------------------------------------------------------
    def send(self, build: Callable[[RequestIds], Message], via: ArchiveProxy | None = None) -> int:
        """Send a request without waiting for its answer; returns its correlation id (Java's asynchronous use of
        `archiveProxy()`). Its responses come from `poll_responses`: the synchronous calls drop answers they did
        not ask for, so a session is used one way at a time (`client.replay.responses` is the asynchronous way).
        `via`: another publication to the archive to send it on (a response-channel replay's request publication,
        `replay_request_publication`); the answer still comes on this session."""
        with self._lock:
            correlation_id, _ = self._request(build, via)
            return correlation_id

    def poll_responses(self) -> list[Any]:
        """Poll the control response stream once (Java's `controlResponsePoller().poll()`): the responses and
        descriptors that arrived, in order. Recording signals go to the consumer and pings are dropped, as in
        every poll."""
        with self._lock:
            self._check_open()
            return self._poll_messages()

    # -- recording -----------------------------------------------------------------------------------------
    def start_recording(
        self,
        channel: str,
        stream_id: int,
        source_location: SourceLocation = SourceLocation.LOCAL,
        auto_stop: bool = False,
    ) -> int:
        """Start recording every image of (channel, stream_id); returns the archive's subscription id."""
        location = int(source_location)
        if auto_stop:
            return self._request_ok(
                lambda ids: m.StartRecordingRequest2.of(
                    **ids, stream_id=stream_id, source_location=location, auto_stop=1, channel=channel
                )
            )
        return self._request_ok(
            lambda ids: m.StartRecordingRequest.of(
                **ids, stream_id=stream_id, source_location=location, channel=channel
            )
        )

    def extend_recording(
        self,
        recording_id: int,
        channel: str,
        stream_id: int,
        source_location: SourceLocation = SourceLocation.LOCAL,
        auto_stop: bool = False,
    ) -> int:
        """Extend a stopped recording; the publisher must start at its stop position (see `extend_channel`)."""
        location = int(source_location)
        if auto_stop:
            return self._request_ok(
                lambda ids: m.ExtendRecordingRequest2.of(
                    **ids,
                    recording_id=recording_id,
                    stream_id=stream_id,
                    source_location=location,
                    auto_stop=1,
                    channel=channel,
                )
            )
        return self._request_ok(
            lambda ids: m.ExtendRecordingRequest.of(
                **ids, recording_id=recording_id, stream_id=stream_id, source_location=location, channel=channel
            )
        )

    def stop_recording(self, channel: str, stream_id: int) -> None:
        self._request_ok(lambda ids: m.StopRecordingRequest.of(**ids, stream_id=stream_id, channel=channel))

    def try_stop_recording(self, channel: str, stream_id: int) -> bool:
        try:
            self.stop_recording(channel, stream_id)
            return True
        except ArchiveError as ex:
            if ex.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION:
                return False
            raise

    def stop_recording_subscription(self, subscription_id: int) -> None:
        self._request_ok(lambda ids: m.StopRecordingSubscriptionRequest.of(**ids, subscription_id=subscription_id))

    def try_stop_recording_subscription(self, subscription_id: int) -> bool:
        try:
            self.stop_recording_subscription(subscription_id)
            return True
        except ArchiveError as ex:
            if ex.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION:
                return False
            raise

    def try_stop_recording_by_identity(self, recording_id: int) -> bool:
        return self._request_ok(lambda ids: m.StopRecordingByIdentityRequest.of(**ids, recording_id=recording_id)) != 0

    def add_recorded_publication(self, channel: str, stream_id: int) -> Publication:
        publication = self.aeron.add_publication(channel, stream_id)
        self.start_recording(add_session_id(channel, publication.session_id), stream_id, SourceLocation.LOCAL)
        return publication

    def add_recorded_exclusive_publication(self, channel: str, stream_id: int) -> ExclusivePublication:
        publication = self.aeron.add_exclusive_publication(channel, stream_id)
        self.start_recording(add_session_id(channel, publication.session_id), stream_id, SourceLocation.LOCAL)
        return publication

    # -- replay --------------------------------------------------------------------------------------------
    def start_replay(
        self,
        recording_id: int,
        position: int,
        length: int,
        replay_channel: str,
        replay_stream_id: int,
        file_io_max_length: int = -1,
        *,
        subscription_registration_id: int = NULL_VALUE,
    ) -> int:
        """Returns the replaySessionId; its low 32 bits are the replay image's session id.

        A response channel (`control-mode=response`, see `client.response_replay`) needs the registration id of
        the caller's subscription on it (`subscription_registration_id`); the replay is then asked for over a
        publication of its own, and what is returned is the request's correlation id (as Java's `startReplay`)."""

        def build(ids: RequestIds, token: int = NULL_VALUE) -> m.ReplayRequest:
            channel, stream_id = replay_channel, replay_stream_id
            return replay_request(ids, recording_id, position, length, channel, stream_id, file_io_max_length, token)

        if is_response_channel(replay_channel):
            return self._start_replay_via_response_channel(recording_id, subscription_registration_id, build)
        return self._request_ok(build)

    def start_bounded_replay(
        self,
        recording_id: int,
        position: int,
        length: int,
        limit_counter_id: int,
        replay_channel: str,
        replay_stream_id: int,
        file_io_max_length: int = -1,
        *,
        subscription_registration_id: int = NULL_VALUE,
    ) -> int:
        """A replay that stops at the limit counter's value (see `start_replay` for response channels)."""

        def build(ids: RequestIds, token: int = NULL_VALUE) -> m.BoundedReplayRequest:
            return m.BoundedReplayRequest.of(
                **ids,
                recording_id=recording_id,
                position=position,
                length=length,
                limit_counter_id=limit_counter_id,
                replay_stream_id=replay_stream_id,
                file_io_max_length=file_io_max_length,
                replay_token=token,
                replay_channel=replay_channel,
            )

        if is_response_channel(replay_channel):
            return self._start_replay_via_response_channel(recording_id, subscription_registration_id, build)
        return self._request_ok(build)

    def replay(
        self,
        recording_id: int,
        replay_channel: str,
        replay_stream_id: int,
        position: int = NULL_POSITION,
        length: int = REPLAY_ALL_AND_FOLLOW,
        limit_counter_id: int = NULL_COUNTER_ID,
        file_io_max_length: int = -1,
    ) -> Subscription:
        """Start a replay and return a subscription to exactly that replay (session-id filtered).

        Over a response channel (`control-mode=response`, e.g. `aeron:udp?control-mode=response|control=host:port`,
        as Java's `replay` does it through `replayViaResponseChannel`) the replay comes back on a connection this
        client opens, so the archive needs no address of this host; the subscription is returned connected."""
        if is_response_channel(replay_channel):
            return self._replay_via_response_channel(
                recording_id,
                replay_channel,
                replay_stream_id,
                lambda subscription_id: self._start_replay_or_bounded(
                    recording_id,
                    replay_channel,
                    replay_stream_id,
                    position,
                    length,
                    limit_counter_id,
                    file_io_max_length,
                    subscription_id,
                ),
            )
        replay_session_id = self._start_replay_or_bounded(
            recording_id, replay_channel, replay_stream_id, position, length, limit_counter_id, file_io_max_length
        )
        session_id = replay_session_id & 0xFFFFFFFF
        if session_id >= 1 << 31:
            session_id -= 1 << 32
        return self.aeron.add_subscription(add_session_id(replay_channel, session_id), replay_stream_id)

    def _replay_via_response_channel(
        self, recording_id: int, replay_channel: str, replay_stream_id: int, start: Callable[[int], int]
    ) -> Subscription:
        """Java's `replayViaResponseChannel`: the subscription on the response channel, the replay asked for naming
        it (`start(its registration id)`, see `client.response_replay`), the subscription once connected to the
        replay; it comes back on a connection this client opened, so the archive needs no address of this host."""
        with self._lock:
            subscription = self.aeron.add_subscription(replay_channel, replay_stream_id)
            try:
                start(subscription.registration_id)
                deadline = time.monotonic_ns() + self._timeout_ns
                while not subscription.is_connected:
                    if time.monotonic_ns() > deadline:
                        raise ArchiveTimeoutError(
                            f"the replay of recording {recording_id} did not arrive on {replay_channel} stream "
                            f"{replay_stream_id} within the message timeout"
                        )
                    time.sleep(0.0001)
            except BaseException:
                subscription.close()
                raise
            return subscription

    def _start_replay_or_bounded(
        self,
        recording_id: int,
        replay_channel: str,
        replay_stream_id: int,
        position: int,
        length: int,
        limit_counter_id: int,
        file_io_max_length: int,
        subscription_registration_id: int = NULL_VALUE,
    ) -> int:
        """`start_bounded_replay` with a limit counter, else `start_replay`."""
        channel, stream_id, io_length = replay_channel, replay_stream_id, file_io_max_length
        sub = subscription_registration_id
        if limit_counter_id != NULL_COUNTER_ID:
            limit = limit_counter_id
            return self.start_bounded_replay(
                recording_id, position, length, limit, channel, stream_id, io_length, subscription_registration_id=sub
            )
        return self.start_replay(
            recording_id, position, length, channel, stream_id, io_length, subscription_registration_id=sub
        )

    def request_replay_token(self, recording_id: int) -> int:
        """A replay token for `recording_id` (ReplayTokenRequest): valid for the archive's connect timeout, with this
        session only; what a replay over a response channel is asked for with."""
        return self._request_ok(lambda ids: m.ReplayTokenRequest.of(**ids, recording_id=recording_id))

    def replay_request_publication(self, response_subscription_id: int) -> ReplayRequestPublication:
        """Start adding the publication a response-channel replay is asked for on, for the response subscription
        `response_subscription_id` (poll it; send the request `via` its proxy)."""
        return ReplayRequestPublication(
            self.aeron,
            self.control_request_channel,
            self.control_request_stream_id,
            response_subscription_id,
            self._timeout_ns,
        )

    def _start_replay_via_response_channel(
        self, recording_id: int, subscription_registration_id: int, build: Callable[[RequestIds, int], Message]
    ) -> int:
        """Java's `startReplayViaResponseChannel`: a token, the request publication naming the subscription, the
        replay request on it with the token (and the token request's correlation id); returns that id once OK."""
        if subscription_registration_id == NULL_VALUE:
            raise ArchiveError(
                "when using startReplay with a response channel, ReplayParams::subscriptionRegistrationId must be set"
            )
        with self._lock:
            correlation_id, name = self._request(lambda ids: m.ReplayTokenRequest.of(**ids, recording_id=recording_id))
            token = int(self._await_response(correlation_id, name).relevant_id)
            publication = self.replay_request_publication(subscription_registration_id)
            try:
                deadline = time.monotonic_ns() + self._timeout_ns
                while (proxy := publication.poll()) is None:
                    if time.monotonic_ns() > deadline:
                        raise ArchiveTimeoutError(
                            f"timed out wait for replay publication to connect: {publication.channel} stream "
                            f"{publication.stream_id}"
                        )
                    time.sleep(0.0001)
                _, name = self._request(lambda ids: build(ids, token), proxy, correlation_id)
                self._await_response(correlation_id, name)
                return correlation_id
            finally:
                while not publication.close():
                    time.sleep(0.001)

    def stop_replay(self, replay_session_id: int) -> None:
        self._request_ok(lambda ids: m.StopReplayRequest.of(**ids, replay_session_id=replay_session_id))

    def stop_all_replays(self, recording_id: int = NULL_POSITION) -> None:
        self._request_ok(lambda ids: m.StopAllReplaysRequest.of(**ids, recording_id=recording_id))

    # -- replication ---------------------------------------------------------------------------------------
    def replicate(
        self,
        src_recording_id: int,
        src_control_stream_id: int,
        src_control_channel: str,
        params: ReplicationParams | None = None,
    ) -> int:
        """Ask this archive to replicate recording `src_recording_id` of the archive at `src_control_channel` /
        `src_control_stream_id`; returns the replication id. Its progress comes as recording signals (REPLICATE,
        EXTEND, SYNC, MERGE, REPLICATE_END, STOP, with the replication id as correlation id) and a failure as an
        error response with the replication id, which `poll_for_recording_signals` raises."""
        p = params if params is not None else ReplicationParams()
        p.check()
        return self._request_ok(
            lambda ids: m.ReplicateRequest2.of(
                **ids,
                src_recording_id=src_recording_id,
                dst_recording_id=p.dst_recording_id,
                stop_position=p.stop_position,
                channel_tag_id=p.channel_tag_id,
                subscription_tag_id=p.subscription_tag_id,
                src_control_stream_id=src_control_stream_id,
                src_control_channel=src_control_channel,
                live_destination=p.live_destination or "",
                replication_channel=p.replication_channel or "",
                file_io_max_length=p.file_io_max_length,
                replication_session_id=p.replication_session_id,
                encoded_credentials=p.encoded_credentials,
                src_response_channel=p.src_response_channel or "",
            )
        )

    def tagged_replicate(
        self,
        src_recording_id: int,
        dst_recording_id: int,
        channel_tag_id: int,
        subscription_tag_id: int,
        src_control_stream_id: int,
        src_control_channel: str,
        live_destination: str | None = None,
        stop_position: int = NULL_POSITION,
        replication_channel: str | None = None,
    ) -> int:
        """`replicate` with the recording subscription tagged, so another subscription can join it (Java's
        `taggedReplicate`)."""
        return self.replicate(
            src_recording_id,
            src_control_stream_id,
            src_control_channel,
            ReplicationParams(
                stop_position=stop_position,
                dst_recording_id=dst_recording_id,
                live_destination=live_destination,
                replication_channel=replication_channel,
                channel_tag_id=channel_tag_id,
                subscription_tag_id=subscription_tag_id,
            ),
        )

    def stop_replication(self, replication_id: int) -> None:
        self._request_ok(lambda ids: m.StopReplicationRequest.of(**ids, replication_id=replication_id))

    def try_stop_replication(self, replication_id: int) -> bool:
        """False if the replication is unknown (it ended already)."""
        try:
            self.stop_replication(replication_id)
            return True
        except ArchiveError as ex:
            if ex.error_code == ErrorCode.UNKNOWN_REPLICATION:
                return False
            raise

    # -- queries -------------------------------------------------------------------------------------------
    def _collect_descriptors(
        self,
        build: Callable[[RequestIds], Message],
        count: int,
        consumer: Callable[[RecordingDescriptor], None] | None,
    ) -> list[RecordingDescriptor]:
        with self._lock:
            correlation_id, message_name = self._request(build)
            out: list[RecordingDescriptor] = []
            deadline = time.monotonic_ns() + self._timeout_ns
            while True:
                messages = self._poll_messages()
                for i, msg in enumerate(messages):
                    if getattr(msg, "correlation_id", None) != correlation_id:
                        continue
                    if msg.template_id == t.RECORDING_DESCRIPTOR:
                        descriptor = descriptor_from_message(msg)
                        out.append(descriptor)
                        if consumer is not None:
                            consumer(descriptor)
                        deadline = time.monotonic_ns() + self._timeout_ns
                        if len(out) >= count:
                            self._inbox = messages[i + 1 :] + self._inbox
                            return out
                    elif msg.template_id == t.CONTROL_RESPONSE:
                        if msg.code == ControlResponseCode.RECORDING_UNKNOWN:
                            self._inbox = messages[i + 1 :] + self._inbox
                            return out
                        if msg.code == ControlResponseCode.ERROR:
                            raise ArchiveError(msg.error_message, msg.relevant_id, correlation_id)
                if time.monotonic_ns() > deadline:
                    raise ArchiveTimeoutError(
                        f"no response to {message_name} within the message timeout", ErrorCode.GENERIC, correlation_id
                    )
                if not messages:
                    time.sleep(0.0001)

    def list_recordings(
        self,
        from_recording_id: int = 0,
        record_count: int = 2**31 - 1,
        consumer: Callable[[RecordingDescriptor], None] | None = None,
    ) -> list[RecordingDescriptor]:
        return self._collect_descriptors(
            lambda ids: m.ListRecordingsRequest.of(
                **ids, from_recording_id=from_recording_id, record_count=record_count
            ),
            record_count,
            consumer,
        )

    def list_recordings_for_uri(
        self,
        from_recording_id: int,
        record_count: int,
        channel_fragment: str,
        stream_id: int,
        consumer: Callable[[RecordingDescriptor], None] | None = None,
    ) -> list[RecordingDescriptor]:
        return self._collect_descriptors(
            lambda ids: m.ListRecordingsForUriRequest.of(
                **ids,
                from_recording_id=from_recording_id,
                record_count=record_count,
                stream_id=stream_id,
                channel=channel_fragment,
            ),
            record_count,
            consumer,
        )

    def list_recording(self, recording_id: int) -> RecordingDescriptor | None:
        found = self._collect_descriptors(
            lambda ids: m.ListRecordingRequest.of(**ids, recording_id=recording_id), 1, None
        )
        return found[0] if found else None

    def list_recording_subscriptions(
        self, pseudo_index: int, subscription_count: int, channel_fragment: str, stream_id: int, apply_stream_id: bool
    ) -> list[RecordingSubscriptionDescriptor]:
        with self._lock:
            correlation_id, _ = self._request(
                lambda ids: m.ListRecordingSubscriptionsRequest.of(
                    **ids,
                    pseudo_index=pseudo_index,
                    subscription_count=subscription_count,
                    apply_stream_id=1 if apply_stream_id else 0,
                    stream_id=stream_id,
                    channel=channel_fragment,
                )
            )
            out: list[RecordingSubscriptionDescriptor] = []
            deadline = time.monotonic_ns() + self._timeout_ns
            while len(out) < subscription_count:
                messages = self._poll_messages()
                for msg in messages:
                    if getattr(msg, "correlation_id", None) != correlation_id:
                        continue
                    if msg.template_id == t.RECORDING_SUBSCRIPTION_DESCRIPTOR:
                        out.append(
                            RecordingSubscriptionDescriptor(
                                msg.control_session_id,
                                msg.correlation_id,
                                msg.subscription_id,
                                msg.stream_id,
                                msg.stripped_channel,
                            )
                        )
                    elif msg.template_id == t.CONTROL_RESPONSE:
                        if msg.code == ControlResponseCode.ERROR:
                            raise ArchiveError(msg.error_message, msg.relevant_id, correlation_id)
                        return out
                if time.monotonic_ns() > deadline:
                    raise ArchiveTimeoutError(
                        "no response to ListRecordingSubscriptionsRequest", ErrorCode.GENERIC, correlation_id
                    )
                if not messages:
                    time.sleep(0.0001)
            return out

    def get_start_position(self, recording_id: int) -> int:
        return self._request_ok(lambda ids: m.StartPositionRequest.of(**ids, recording_id=recording_id))

    def get_stop_position(self, recording_id: int) -> int:
        """-1 while the recording is active."""
        return self._request_ok(lambda ids: m.StopPositionRequest.of(**ids, recording_id=recording_id))

    def get_recording_position(self, recording_id: int) -> int:
        """The live position of an active recording, or -1 if it is not active."""
        return self._request_ok(lambda ids: m.RecordingPositionRequest.of(**ids, recording_id=recording_id))

    def get_max_recorded_position(self, recording_id: int) -> int:
        return self._request_ok(lambda ids: m.MaxRecordedPositionRequest.of(**ids, recording_id=recording_id))

    def find_last_matching_recording(
        self, min_recording_id: int, channel_fragment: str, stream_id: int, session_id: int
    ) -> int:
        return self._request_ok(
            lambda ids: m.FindLastMatchingRecordingRequest.of(
                **ids,
                min_recording_id=min_recording_id,
                session_id=session_id,
                stream_id=stream_id,
                channel=channel_fragment,
            )
        )

    def truncate_recording(self, recording_id: int, position: int) -> int:
        """Returns the number of segment files queued for deletion; a DELETE signal follows."""
        return self._request_ok(
            lambda ids: m.TruncateRecordingRequest.of(**ids, recording_id=recording_id, position=position)
        )

    def purge_recording(self, recording_id: int) -> int:
        return self._request_ok(lambda ids: m.PurgeRecordingRequest.of(**ids, recording_id=recording_id))

    # -- the time index (this project's requests, beyond Aeron's schema: Java's archive does not answer them) ------
    @property
    def answers_time_index(self) -> bool:
        """Whether the archive answers `position_at_time` and `time_index` (this project's archive does; Java's
        archive ignores requests it does not know, so asking it would only wait out the message timeout)."""
        return TIME_INDEX_FEATURE in self.features

    def _require_time_index(self) -> None:
        if not self.answers_time_index:
            raise ArchiveError(
                f"the archive at {self.control_request_channel} stream {self.control_request_stream_id} does not "
                "answer time index requests (an Aeron Java archive, or an older one of this project): it keeps no "
                "time index",
                ErrorCode.GENERIC,
            )

    def position_at_time(self, recording_id: int, timestamp_ns: int) -> int:
        """The first position of the recording whose recorded time is at or after `timestamp_ns` (epoch ns), or
        NULL_POSITION (-1) when every recorded time is earlier (`TimeIndex.position_at_or_after` on the archive's
        index, within the recording's start and recorded position). Raises `ArchiveError` for an unknown recording
        (UNKNOWN_RECORDING), one without a time index, or a time before its index began (the message says which)."""
        self._require_time_index()
        return self._request_ok(
            lambda ids: m.PositionAtTimeRequest.of(**ids, recording_id=recording_id, timestamp_ns=timestamp_ns)
        )

    def time_index(self, recording_id: int, from_position: int, to_position: int = NULL_POSITION) -> TimeIndex:
        """The samples that date the recording's positions `[from_position, to_position)` (`to_position` -1: up to
        its recorded position), as `read_time_index` gives them from the archive's disk: the governing sample of
        `from_position` moved to it, then the later ones. The answer comes in as many TimeIndexSamples messages
        as it needs, then an OK with their count; the message timeout runs from the last one received."""
        self._require_time_index()
        with self._lock:
            correlation_id, name = self._request(
                lambda ids: m.TimeIndexRequest.of(
                    **ids, recording_id=recording_id, from_position=from_position, to_position=to_position
                )
            )
            chunks: list[npt.NDArray[np.void]] = []
            interval_ns = 0

            def on_samples(msg: Any) -> None:
                nonlocal interval_ns
                chunks.append(np.frombuffer(msg.samples, dtype=TIME_INDEX_SAMPLE_DTYPE))
                interval_ns = max(interval_ns, msg.interval_ns)

            count = self._await_samples(correlation_id, name, on_samples)
            return _time_index_of(recording_id, chunks, interval_ns, count, correlation_id)

    def time_indexes(self, ranges: Sequence[tuple[int, int, int]]) -> list[TimeIndex | None]:
        """`time_index` of each (recording id, from, to) range, in one round trip per `MAX_TIME_INDEX_RANGES`
        (TimeIndexesRequest): what dates a read of many small recordings without a request each. None for a range
        the archive cannot date (an unknown recording, or one without a time index): the others still are."""
        self._require_time_index()
        found: list[TimeIndex | None] = []
        for first in range(0, len(ranges), MAX_TIME_INDEX_RANGES):
            found.extend(self._time_indexes(ranges[first : first + MAX_TIME_INDEX_RANGES]))
        return found

    def _time_indexes(self, ranges: Sequence[tuple[int, int, int]]) -> list[TimeIndex | None]:
        packed = np.array([tuple(r) for r in ranges], dtype=RANGE_DTYPE).tobytes()
        with self._lock:
            correlation_id, name = self._request(lambda ids: m.TimeIndexesRequest.of(**ids, ranges=packed))
            answers: list[TimeIndex | None] = []
            chunks: list[npt.NDArray[np.void]] = []

            def on_samples(msg: Any) -> None:
                if len(answers) >= len(ranges):
                    raise ArchiveError(f"{name}: more ranges answered than asked", ErrorCode.GENERIC, correlation_id)
                if msg.samples:
                    chunks.append(np.frombuffer(msg.samples, dtype=TIME_INDEX_SAMPLE_DTYPE))
                    return
                rid = ranges[len(answers)][0]
                if msg.recording_id != rid:
                    raise ArchiveError(
                        f"{name}: range {len(answers)} answered for recording {msg.recording_id}, asked for {rid}",
                        ErrorCode.GENERIC,
                        correlation_id,
                    )
                if msg.interval_ns == NO_INDEX_INTERVAL:
                    answers.append(None)
                else:
                    count = sum(len(c) for c in chunks)
                    answers.append(_time_index_of(rid, chunks, msg.interval_ns, count, correlation_id))
                chunks.clear()

            count = self._await_samples(correlation_id, name, on_samples)
            if count != len(ranges) or len(answers) != len(ranges):
                raise ArchiveError(
                    f"{name}: {len(answers)} of {len(ranges)} ranges answered (the archive counted {count})",
                    ErrorCode.GENERIC,
                    correlation_id,
                )
            return answers

    def _await_samples(self, correlation_id: int, name: str, on_samples: Callable[[Any], None]) -> int:
        """Hand each TimeIndexSamples of the request to `on_samples` until its OK (the OK's relevantId returned) or
        ERROR (raised); the message timeout runs from the last message received."""
        deadline = time.monotonic_ns() + self._timeout_ns
        while True:
            messages = self._poll_messages()
            for i, msg in enumerate(messages):
                if (
                    getattr(msg, "correlation_id", None) != correlation_id
                    or msg.control_session_id != self.control_session_id
                ):
                    continue
                if msg.template_id == t.TIME_INDEX_SAMPLES:
                    on_samples(msg)
                    deadline = time.monotonic_ns() + self._timeout_ns
                elif msg.template_id == t.CONTROL_RESPONSE:
                    self._inbox = messages[i + 1 :] + self._inbox
                    if msg.code == ControlResponseCode.ERROR:
                        raise ArchiveError(msg.error_message, msg.relevant_id, correlation_id)
                    return int(msg.relevant_id)
            if time.monotonic_ns() > deadline:
                raise ArchiveTimeoutError(
                    f"no response to {name} within the message timeout", ErrorCode.GENERIC, correlation_id
                )
            if not messages:
                time.sleep(0.0001)

    # -- segment management (Java's detachSegments ... migrateSegments) ----------------------------------------
    def detach_segments(self, recording_id: int, new_start_position: int) -> None:
        """Move the recording's start up to `new_start_position`, the first byte of a segment after the current
        start's (see `segment_file_base_position`); the files before it stay on disk until deleted or attached
        again. Segments being recorded or replayed cannot be detached."""
        self._request_ok(
            lambda ids: m.DetachSegmentsRequest.of(
                **ids, recording_id=recording_id, new_start_position=new_start_position
            )
        )

    def delete_detached_segments(self, recording_id: int) -> int:
        """Delete the segment files detached from the recording's start; returns how many (a DELETE signal
        follows once they are gone)."""
        return self._request_ok(lambda ids: m.DeleteDetachedSegmentsRequest.of(**ids, recording_id=recording_id))

    def purge_segments(self, recording_id: int, new_start_position: int) -> int:
        """Detach and delete the segments before `new_start_position` (as `detach_segments`); returns how many
        files are deleted (a DELETE signal follows once they are gone)."""
        return self._request_ok(
            lambda ids: m.PurgeSegmentsRequest.of(
                **ids, recording_id=recording_id, new_start_position=new_start_position
            )
        )

    def attach_segments(self, recording_id: int) -> int:
        """Attach the detached segment files that join the recording's start again; returns how many."""
        return self._request_ok(lambda ids: m.AttachSegmentsRequest.of(**ids, recording_id=recording_id))

    def migrate_segments(self, src_recording_id: int, dst_recording_id: int) -> int:
        """Move the segments of the stopped recording `src_recording_id` onto the start or the end of
        `dst_recording_id` (same stream, term, segment and MTU lengths, joining on a segment boundary); the source
        is left empty at its start. Returns how many segment files moved; a DELETE signal follows for the source."""
        return self._request_ok(
            lambda ids: m.MigrateSegmentsRequest.of(
                **ids, src_recording_id=src_recording_id, dst_recording_id=dst_recording_id
            )
        )

    @staticmethod
    def segment_file_base_position(
        start_position: int, position: int, term_buffer_length: int, segment_length: int
    ) -> int:
        """Base position of the segment holding `position` in a recording starting at `start_position` (Java's
        `AeronArchive.segmentFileBasePosition`): where `detach_segments` and `purge_segments` may cut."""
        return segment_file_base_position(start_position, position, term_buffer_length, segment_length)

    def archive_id(self) -> int:
        return self._archive_id

    def poll_for_recording_signals(self) -> int:
        """Poll the response stream once; returns how many recording signals were dispatched."""
        with self._lock:
            self._check_open()
            count = 0
            consumer = self.recording_signal_consumer

            def counting(event: RecordingSignalEvent) -> None:
                nonlocal count
                count += 1
                if consumer is not None:
                    consumer(event)

            self.recording_signal_consumer = counting
            try:
                for msg in self._poll_messages():
                    if (
                        msg.template_id == t.CONTROL_RESPONSE
                        and msg.code == ControlResponseCode.ERROR
                        and msg.control_session_id == self.control_session_id
                    ):
                        raise ArchiveError(msg.error_message, msg.relevant_id, msg.correlation_id)
            finally:
                self.recording_signal_consumer = consumer
            return count

    # -- helpers -------------------------------------------------------------------------------------------
    @staticmethod
    def extend_channel(channel: str, descriptor: RecordingDescriptor, same_session_id: bool = False) -> str:
        """The publication channel that makes a new image pass the archive's extend checks.

        The archive checks join position, initial term id, term length and MTU. Reusing the old session id is
        optional: the driver refuses it while the previous publication with that id still lingers.

        Add the publication first and pass `extend_recording` this channel with its `session-id`
        (`channel.add_session_id`): a subscription without one also links to a just-closed publication still
        draining on the stream, whose image joins at its old position and is refused (INVALID_EXTENSION).
        """
        params: dict[str, int] = initial_position_params(
            descriptor.stop_position, descriptor.initial_term_id, descriptor.term_buffer_length
        )
        params["mtu"] = descriptor.mtu_length
        if same_session_id:
            params["session-id"] = descriptor.session_id
        return str(ChannelUri.parse(channel).with_params(**{k.replace("-", "_"): v for k, v in params.items()}))


def replay_request(
    ids: RequestIds,
    recording_id: int,
    position: int,
    length: int,
    replay_channel: str,
    replay_stream_id: int,
    file_io_max_length: int,
    replay_token: int = NULL_VALUE,
) -> m.ReplayRequest:
    """A ReplayRequest (a replay token only over a response channel); what synchronous and asynchronous callers
    (`client.replay.responses`, the archive's replication) send alike."""
    return m.ReplayRequest.of(
        **ids,
        recording_id=recording_id,
        position=position,
        length=length,
        replay_stream_id=replay_stream_id,
        file_io_max_length=file_io_max_length,
        replay_token=replay_token,
        replay_channel=replay_channel,
    )


def _time_index_of(
    recording_id: int, chunks: list[npt.NDArray[np.void]], interval_ns: int, count: int, correlation_id: int
) -> TimeIndex:
    """The `TimeIndex` of a TimeIndex answer's samples; the OK's count must match what arrived (a message lost on
    the way would otherwise date rows by the wrong sample)."""
    samples = np.concatenate(chunks) if chunks else np.empty(0, dtype=TIME_INDEX_SAMPLE_DTYPE)
    if len(samples) != count:
        raise ArchiveError(
            f"time index of recording {recording_id}: {len(samples)} samples received, the archive sent {count}",
            ErrorCode.GENERIC,
            correlation_id,
        )
    times = np.ascontiguousarray(samples["time_ns"], dtype=np.int64)
    positions = np.ascontiguousarray(samples["position"], dtype=np.int64)
    return TimeIndex(recording_id, times, positions, interval_ns)


def descriptor_from_message(msg: Any) -> RecordingDescriptor:
    if isinstance(msg, DescriptorMessage):
        return msg.descriptor
    return RecordingDescriptor(
        control_session_id=msg.control_session_id,
        correlation_id=msg.correlation_id,
        recording_id=msg.recording_id,
        start_timestamp=msg.start_timestamp,
        stop_timestamp=msg.stop_timestamp,
        start_position=msg.start_position,
        stop_position=msg.stop_position,
        initial_term_id=msg.initial_term_id,
        segment_file_length=msg.segment_file_length,
        term_buffer_length=msg.term_buffer_length,
        mtu_length=msg.mtu_length,
        session_id=msg.session_id,
        stream_id=msg.stream_id,
        stripped_channel=msg.stripped_channel,
        original_channel=msg.original_channel,
        source_identity=msg.source_identity,
    )
