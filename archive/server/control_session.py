"""One client's control session: handshake, authentication, liveness, request dispatch and response queueing.

States follow Aeron's `ControlSession`: INIT → CONNECTING → CONNECTED → (CHALLENGED →) AUTHENTICATED → ACTIVE →
DONE, or REJECTED → DONE. All of it runs on the conductor thread, which is the only thread that offers on the
response publication; other threads reach a session through the conductor's task queue.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from enum import Enum
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.channel import ChannelError, ChannelUri
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import (
    CONTROL_MTU_LENGTH_DEFAULT,
    CONTROL_RESEND_INTERVAL_NS,
    CONTROL_TERM_LENGTH_DEFAULT,
    PROTOCOL_MAJOR_VERSION,
    ControlResponseCode,
    RecordingSignal,
)
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.authenticator import AuthDecision, Authenticator
from aeron_archive_spark.archive.server.control_response_proxy import ControlResponseProxy

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import ExclusivePublication
    from aeron_archive_spark.archive.server.conductor import ArchiveConductor

log = logging.getLogger(__name__)


class ControlSessionState(Enum):
    INIT = 0
    CONNECTING = 1
    CONNECTED = 2
    CHALLENGED = 3
    AUTHENTICATED = 4
    ACTIVE = 5
    REJECTED = 6
    DONE = 7


def response_channel_for(client_channel: str) -> str:
    """The client's response channel plus control-stream defaults the client did not set (as Aeron does)."""
    uri = ChannelUri.parse(client_channel)
    extra: dict[str, Any] = {}
    if "term-length" not in uri.params:
        extra["term_length"] = CONTROL_TERM_LENGTH_DEFAULT
    if "sparse" not in uri.params:
        extra["sparse"] = True
    if "mtu" not in uri.params and uri.is_udp:
        extra["mtu"] = CONTROL_MTU_LENGTH_DEFAULT
    return str(uri.with_params(**extra))


class ControlSession:
    def __init__(self, conductor: ArchiveConductor, control_session_id: int, correlation_id: int,
                 response_stream_id: int, response_channel: str, client_version: int, credentials: bytes,
                 client_info: str, image_session_id: int, authenticator: Authenticator,
                 connect_timeout_ns: int, liveness_interval_ns: int) -> None:
        self.conductor = conductor
        self.control_session_id = control_session_id
        self.correlation_id = correlation_id
        self.response_stream_id = response_stream_id
        self.response_channel = response_channel
        self.client_version = client_version
        self.client_info = client_info
        self.image_session_id = image_session_id
        self._credentials = credentials
        self._authenticator = authenticator
        self._connect_timeout_ns = connect_timeout_ns
        self._liveness_interval_ns = liveness_interval_ns
        self.state = ControlSessionState.INIT
        self.publication: ExclusivePublication | None = None
        self._proxy = ControlResponseProxy()
        self._pending: deque[bytes] = deque()
        now = time.monotonic_ns()
        self._deadline_ns = now + connect_timeout_ns
        self._resend_deadline_ns = 0
        self._last_sent_ns = now
        self._next_ping_ns = 0
        self.active_listing: Any = None
        self.counter: Any = None  # the per-client `control-session` counter (type 113), owned by the conductor
        self.abort_reason = ""
        self._handlers = self._build_handlers()

    # -- lifecycle -----------------------------------------------------------------------------------------
    @property
    def session_id(self) -> int:
        return self.control_session_id

    def is_done(self) -> bool:
        return self.state is ControlSessionState.DONE

    def abort(self, reason: str = "") -> None:
        if self.state is not ControlSessionState.DONE:
            self.abort_reason = reason or "aborted"
            log.info("control session %d aborted: %s", self.control_session_id, self.abort_reason)
            self._set_state(ControlSessionState.DONE)

    def close(self) -> None:
        if self.active_listing is not None:
            self.active_listing.abort("control session closed")
            self.active_listing = None
        if self.publication is not None:
            self.publication.close()
            self.publication = None
        self.state = ControlSessionState.DONE

    def _set_state(self, state: ControlSessionState) -> None:
        if state is not self.state:
            log.debug("control session %d: %s -> %s", self.control_session_id, self.state.name, state.name)
            self.state = state

    def do_work(self) -> int:
        now = time.monotonic_ns()
        state = self.state
        if state is ControlSessionState.INIT:
            return self._do_init(now)
        if state is ControlSessionState.CONNECTING:
            return self._do_connecting(now)
        if state in (ControlSessionState.CONNECTED, ControlSessionState.CHALLENGED,
                     ControlSessionState.AUTHENTICATED, ControlSessionState.REJECTED):
            if now > self._deadline_ns:
                self.abort(f"not active within connectTimeoutMs={self._connect_timeout_ns // 1_000_000}")
                return 1
            if state is ControlSessionState.CONNECTED:
                return self._do_connected(now)
            if state is ControlSessionState.AUTHENTICATED:
                return self._resend(now, lambda: self._proxy.control_response(
                    self.control_session_id, self.correlation_id, self.control_session_id, ControlResponseCode.OK))
            if state is ControlSessionState.REJECTED:
                return self._resend(now, lambda: self._proxy.control_response(
                    self.control_session_id, self.correlation_id, ErrorCode.AUTHENTICATION_REJECTED,
                    ControlResponseCode.ERROR, "authentication rejected"))
            return 0
        if state is ControlSessionState.ACTIVE:
            return self._do_active(now)
        return 0

    def _do_init(self, now: int) -> int:
        try:
            channel = response_channel_for(self.response_channel)
            self.publication = self.conductor.aeron.add_exclusive_publication(channel, self.response_stream_id)
        except Exception as ex:
            log.warning("control session %d: cannot add response publication %s stream %d: %s",
                        self.control_session_id, self.response_channel, self.response_stream_id, ex)
            self.abort(f"failed to add response publication: {ex}")
            return 1
        self._set_state(ControlSessionState.CONNECTING)
        return 1

    def _do_connecting(self, now: int) -> int:
        assert self.publication is not None
        if self.publication.is_connected:
            self._set_state(ControlSessionState.CONNECTED)
            return 1
        if now > self._deadline_ns:
            self.abort("response publication not connected within connectTimeout")
            return 1
        return 0

    def _do_connected(self, now: int) -> int:
        if now < self._resend_deadline_ns:
            return 0
        self._resend_deadline_ns = now + CONTROL_RESEND_INTERVAL_NS
        if (self.client_version >> 16) != PROTOCOL_MAJOR_VERSION:
            major, minor, patch = self.client_version >> 16, (self.client_version >> 8) & 0xFF, self.client_version & 0xFF
            self._offer(self._proxy.control_response(
                self.control_session_id, self.correlation_id, ErrorCode.GENERIC, ControlResponseCode.ERROR,
                f"invalid client version {major}.{minor}.{patch}, archive is {PROTOCOL_MAJOR_VERSION}.x"))
            self.abort("invalid client version")
            return 1
        result = self._authenticator.on_connect(self.control_session_id, self._credentials, time.time_ns() // 1_000_000)
        self._apply_auth(result.decision, result.encoded_challenge)
        return 1

    def _apply_auth(self, decision: AuthDecision, challenge: bytes) -> None:
        if decision is AuthDecision.AUTHENTICATED:
            self._set_state(ControlSessionState.AUTHENTICATED)
            self._resend_deadline_ns = 0
        elif decision is AuthDecision.CHALLENGE:
            self._offer(self._proxy.challenge(self.control_session_id, self.correlation_id, challenge))
            self._set_state(ControlSessionState.CHALLENGED)
        elif decision is AuthDecision.REJECTED:
            self._set_state(ControlSessionState.REJECTED)
            self._resend_deadline_ns = 0

    def _resend(self, now: int, encode) -> int:
        if now < self._resend_deadline_ns:
            return 0
        self._resend_deadline_ns = now + CONTROL_RESEND_INTERVAL_NS
        self._offer(encode())
        return 1

    def _do_active(self, now: int) -> int:
        assert self.publication is not None
        work = 0
        if not self.publication.is_connected:
            self.abort("response publication not connected")
            return 1
        while self._pending:
            if self._try_offer(self._pending[0]):
                self._pending.popleft()
                work += 1
            else:
                break
        if self._pending and now - self._last_sent_ns > self._connect_timeout_ns:
            self.abort(f"failed to send response for more than connectTimeoutMs={self._connect_timeout_ns // 1_000_000}")
            return 1
        if now >= self._next_ping_ns:
            self._next_ping_ns = now + self._liveness_interval_ns
            self.send(self._proxy.ping(self.control_session_id))
            work += 1
        return work

    # -- sending ---------------------------------------------------------------------------------------------
    def _try_offer(self, message: bytes) -> bool:
        if self.publication is None:
            return False
        result = self.publication.offer(message)
        if result > 0:
            self._last_sent_ns = time.monotonic_ns()
            return True
        return False

    def _offer(self, message: bytes) -> None:
        """Best effort (handshake messages are resent on a timer)."""
        self._try_offer(message)

    def send(self, message: bytes) -> None:
        """Send in order; queue behind earlier unsent responses or on back pressure."""
        if self.state is ControlSessionState.DONE:
            return
        if self._pending or not self._try_offer(message):
            self._pending.append(message)

    def send_ok(self, correlation_id: int, relevant_id: int = 0) -> None:
        self.send(self._proxy.control_response(self.control_session_id, correlation_id, relevant_id,
                                               ControlResponseCode.OK))

    def send_error(self, correlation_id: int, error_code: int, message: str) -> None:
        log.info("control session %d: correlationId=%d error %s: %s", self.control_session_id, correlation_id,
                 ErrorCode.name_of(error_code), message)
        self.send(self._proxy.control_response(self.control_session_id, correlation_id, error_code,
                                               ControlResponseCode.ERROR, message))

    def send_response_code(self, correlation_id: int, relevant_id: int, code: ControlResponseCode,
                           message: str = "") -> None:
        self.send(self._proxy.control_response(self.control_session_id, correlation_id, relevant_id, code, message))

    def send_descriptor(self, correlation_id: int, catalog_bytes: bytes, throttle: bool = True) -> bool:
        """Listing sessions stop sending while responses are queued, so a slow client throttles the listing."""
        if throttle and self._pending:
            return False
        self.send(self._proxy.recording_descriptor(self.control_session_id, correlation_id, catalog_bytes))
        return True

    def send_subscription_descriptor(self, correlation_id: int, subscription_id: int, stream_id: int,
                                     stripped_channel: str) -> None:
        self.send(self._proxy.recording_subscription_descriptor(
            self.control_session_id, correlation_id, subscription_id, stream_id, stripped_channel))
        return True

    def send_signal(self, correlation_id: int, recording_id: int, subscription_id: int, position: int,
                    signal: RecordingSignal) -> None:
        self.send(self._proxy.recording_signal(self.control_session_id, correlation_id, recording_id,
                                               subscription_id, position, signal))

    # -- requests ----------------------------------------------------------------------------------------------
    def on_request(self, msg: Any, image_session_id: int) -> None:
        if image_session_id != self.image_session_id:
            log.warning("control session %d: request from image session %d dropped (connected on %d)",
                        self.control_session_id, image_session_id, self.image_session_id)
            return
        if self.state is ControlSessionState.DONE:
            return
        if msg.template_id == t.CHALLENGE_RESPONSE:
            if self.state is ControlSessionState.CHALLENGED:
                result = self._authenticator.on_challenge_response(
                    self.control_session_id, msg.encoded_credentials, time.time_ns() // 1_000_000)
                self._apply_auth(result.decision, result.encoded_challenge)
            return
        if self.state is ControlSessionState.AUTHENTICATED:
            self._set_state(ControlSessionState.ACTIVE)
            self._next_ping_ns = time.monotonic_ns() + self._liveness_interval_ns
        if self.state is not ControlSessionState.ACTIVE:
            log.warning("control session %d: %s in state %s ignored", self.control_session_id, msg.name,
                        self.state.name)
            return
        if msg.template_id == t.CLOSE_SESSION_REQUEST:
            self.abort("session closed")
            return
        if msg.template_id == t.KEEP_ALIVE_REQUEST:
            return
        handler = self._handlers.get(msg.template_id)
        correlation_id = getattr(msg, "correlation_id", -1)
        if handler is None:
            self.send_error(correlation_id, ErrorCode.GENERIC,
                            f"request {msg.name} (templateId={msg.template_id}) is not supported by this archive")
            return
        try:
            handler(msg)
        except ArchiveError as ex:
            self.send_error(correlation_id, ex.error_code, ex.message)
        except ChannelError as ex:
            self.send_error(correlation_id, ErrorCode.GENERIC, str(ex))

    def _build_handlers(self) -> dict[int, Any]:
        c = self.conductor
        return {
            t.START_RECORDING_REQUEST: lambda m: c.start_recording(
                self, m.correlation_id, m.stream_id, m.source_location, False, m.channel),
            t.START_RECORDING_REQUEST2: lambda m: c.start_recording(
                self, m.correlation_id, m.stream_id, m.source_location, m.auto_stop == 1, m.channel),
            t.STOP_RECORDING_REQUEST: lambda m: c.stop_recording(self, m.correlation_id, m.stream_id, m.channel),
            t.STOP_RECORDING_SUBSCRIPTION_REQUEST: lambda m: c.stop_recording_subscription(
                self, m.correlation_id, m.subscription_id),
            t.STOP_RECORDING_BY_IDENTITY_REQUEST: lambda m: c.stop_recording_by_identity(
                self, m.correlation_id, m.recording_id),
            t.EXTEND_RECORDING_REQUEST: lambda m: c.extend_recording(
                self, m.correlation_id, m.recording_id, m.stream_id, m.source_location, False, m.channel),
            t.EXTEND_RECORDING_REQUEST2: lambda m: c.extend_recording(
                self, m.correlation_id, m.recording_id, m.stream_id, m.source_location, m.auto_stop == 1,
                m.channel),
            t.REPLAY_REQUEST: lambda m: c.start_replay(
                self, m.correlation_id, m.recording_id, m.position, m.length, m.replay_stream_id,
                m.replay_channel, -1, m.file_io_max_length),
            t.BOUNDED_REPLAY_REQUEST: lambda m: c.start_replay(
                self, m.correlation_id, m.recording_id, m.position, m.length, m.replay_stream_id,
                m.replay_channel, m.limit_counter_id, m.file_io_max_length),
            t.STOP_REPLAY_REQUEST: lambda m: c.stop_replay(self, m.correlation_id, m.replay_session_id),
            t.STOP_ALL_REPLAYS_REQUEST: lambda m: c.stop_all_replays(self, m.correlation_id, m.recording_id),
            t.LIST_RECORDINGS_REQUEST: lambda m: c.list_recordings(
                self, m.correlation_id, m.from_recording_id, m.record_count),
            t.LIST_RECORDINGS_FOR_URI_REQUEST: lambda m: c.list_recordings_for_uri(
                self, m.correlation_id, m.from_recording_id, m.record_count, m.stream_id, m.channel),
            t.LIST_RECORDING_REQUEST: lambda m: c.list_recording(self, m.correlation_id, m.recording_id),
            t.LIST_RECORDING_SUBSCRIPTIONS_REQUEST: lambda m: c.list_recording_subscriptions(
                self, m.correlation_id, m.pseudo_index, m.subscription_count, m.apply_stream_id == 1,
                m.stream_id, m.channel),
            t.RECORDING_POSITION_REQUEST: lambda m: c.get_recording_position(self, m.correlation_id, m.recording_id),
            t.STOP_POSITION_REQUEST: lambda m: c.get_stop_position(self, m.correlation_id, m.recording_id),
            t.START_POSITION_REQUEST: lambda m: c.get_start_position(self, m.correlation_id, m.recording_id),
            t.MAX_RECORDED_POSITION_REQUEST: lambda m: c.get_max_recorded_position(
                self, m.correlation_id, m.recording_id),
            t.FIND_LAST_MATCHING_RECORDING_REQUEST: lambda m: c.find_last_matching_recording(
                self, m.correlation_id, m.min_recording_id, m.session_id, m.stream_id, m.channel),
            t.TRUNCATE_RECORDING_REQUEST: lambda m: c.truncate_recording(
                self, m.correlation_id, m.recording_id, m.position),
            t.PURGE_RECORDING_REQUEST: lambda m: c.purge_recording(self, m.correlation_id, m.recording_id),
            t.ARCHIVE_ID_REQUEST: lambda m: self.send_ok(m.correlation_id, c.archive_id),
        }
