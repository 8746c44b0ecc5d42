"""One client's control session: handshake, authentication, liveness, request dispatch and response queueing.

States follow Aeron's `ControlSession`: INIT → CONNECTING → CONNECTED → (CHALLENGED →) AUTHENTICATED → ACTIVE →
DONE, or REJECTED → DONE. All of it runs on the conductor thread, which is the only thread that offers on the
response publication; other threads reach a session through the conductor's task queue.

Requests arrive already decoded, one typed `on_*` method per request template (Aeron's `ControlSession.onXxx`),
and go to the conductor through `ConductorPort`, never through the conductor class itself. Time comes in through
`do_work(now_ns)`; between duty cycles (a request, a response sent from a conductor task) the session uses the
time of its last cycle, as Aeron's cached clocks do.

Every well-formed request gets exactly one answer: a refusal the conductor raises (`ArchiveError`, a bad
channel) becomes an error response here, and any other failure is turned into a GENERIC error naming the
request by `fail_request`, which the adapter calls (as Java's conductor answers `ex.getMessage()`); the session
remembers whether the request in hand was already answered so a failure after the answer is not answered twice.
What a client can repeat at will (refused requests, requests in the wrong state) is logged rate-limited.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.channel import ChannelError, ChannelUri
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.constants import (
    ARCHIVE_FEATURES,
    CONTROL_MTU_LENGTH_DEFAULT,
    CONTROL_RESEND_INTERVAL_NS,
    CONTROL_TERM_LENGTH_DEFAULT,
    PROTOCOL_MAJOR_VERSION,
    ControlResponseCode,
    RecordingSignal,
)
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.authenticator import AuthDecision, Authenticator, AuthResult
from aeron_archive_spark.archive.server.conductor_port import ConductorPort, ResponsePublication
from aeron_archive_spark.archive.server.control_response_proxy import ControlResponseProxy
from aeron_archive_spark.archive.server.rate_limited_log import RateLimitedLog
from aeron_archive_spark.archive.server.session import Session

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import Counter

log = logging.getLogger(__name__)
# Lines a client can cause at will (errors it provokes, requests in the wrong state, bad response channels).
fault_log = RateLimitedLog(log)


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
    def __init__(
        self,
        conductor: ConductorPort,
        control_session_id: int,
        correlation_id: int,
        response_stream_id: int,
        response_channel: str,
        client_version: int,
        credentials: bytes,
        client_info: str,
        image_session_id: int,
        authenticator: Authenticator,
        connect_timeout_ns: int,
        liveness_interval_ns: int,
        *,
        now_ns: int,
        epoch_clock: Callable[[], int],
    ) -> None:
        """`now_ns` is the conductor's time for this duty cycle; `epoch_clock` (ms) is what the authenticator sees."""
        self._conductor = conductor
        self.control_session_id = control_session_id
        self.correlation_id = correlation_id
        self.response_stream_id = response_stream_id
        self.response_channel = response_channel
        self.client_version = client_version
        self.client_info = client_info
        self.image_session_id = image_session_id
        self._credentials = credentials
        self._authenticator = authenticator
        self.encoded_principal = b""  # who the authenticator says the client is; the authorisation service's input
        self._connect_timeout_ns = connect_timeout_ns
        self._liveness_interval_ns = liveness_interval_ns
        self._epoch_clock = epoch_clock
        self.state = ControlSessionState.INIT
        self.publication: ResponsePublication | None = None
        self._proxy = ControlResponseProxy()
        self._pending: deque[bytes] = deque()
        self._now_ns = now_ns
        self._deadline_ns = now_ns + connect_timeout_ns
        self._resend_deadline_ns = 0
        self._last_sent_ns = now_ns
        self._next_ping_ns = 0
        self.active_listing: Session | None = None
        self.counter: Counter | None = None  # the per-client `control-session` counter (type 113), conductor-owned
        self.abort_reason = ""
        # The request being handled (`begin_request`) and whether a ControlResponse has answered it yet.
        self._request_correlation_id: int | None = None
        self._request_answered = False

    # -- lifecycle -----------------------------------------------------------------------------------------
    @property
    def session_id(self) -> int:
        return self.control_session_id

    @property
    def pending_responses(self) -> int:
        """Responses queued behind back pressure, not yet offered successfully."""
        return len(self._pending)

    def is_done(self) -> bool:
        return self.state is ControlSessionState.DONE

    def abort(self, reason: str = "") -> None:
        if self.state is not ControlSessionState.DONE:
            self.abort_reason = reason or "aborted"
            fault_log.info(
                "control session aborted", "control session %d aborted: %s", self.control_session_id, self.abort_reason
            )
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

    def do_work(self, now_ns: int) -> int:
        self._now_ns = now = now_ns
        state = self.state
        if state is ControlSessionState.INIT:
            return self._do_init()
        if state is ControlSessionState.CONNECTING:
            return self._do_connecting(now)
        if state in (
            ControlSessionState.CONNECTED,
            ControlSessionState.CHALLENGED,
            ControlSessionState.AUTHENTICATED,
            ControlSessionState.REJECTED,
        ):
            if now > self._deadline_ns:
                self.abort(f"not active within connectTimeoutMs={self._connect_timeout_ns // 1_000_000}")
                return 1
            if state is ControlSessionState.CONNECTED:
                return self._do_connected(now)
            if state is ControlSessionState.AUTHENTICATED:
                return self._resend(
                    now,
                    lambda: self._proxy.control_response(
                        self.control_session_id,
                        self.correlation_id,
                        self.control_session_id,
                        ControlResponseCode.OK,
                        ARCHIVE_FEATURES,
                    ),
                )
            if state is ControlSessionState.REJECTED:
                return self._resend(
                    now,
                    lambda: self._proxy.control_response(
                        self.control_session_id,
                        self.correlation_id,
                        ErrorCode.AUTHENTICATION_REJECTED,
                        ControlResponseCode.ERROR,
                        "authentication rejected",
                    ),
                )
            return 0
        if state is ControlSessionState.ACTIVE:
            return self._do_active(now)
        return 0

    def _do_init(self) -> int:
        try:
            channel = response_channel_for(self.response_channel)
            self.publication = self._conductor.add_response_publication(channel, self.response_stream_id)
        except Exception as ex:  # a bad client channel ends this session, never the conductor
            fault_log.warning(
                "cannot add response publication",
                "control session %d: cannot add response publication %s stream %d: %s",
                self.control_session_id,
                self.response_channel,
                self.response_stream_id,
                ex,
            )
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
            version = self.client_version
            major, minor, patch = version >> 16, (version >> 8) & 0xFF, version & 0xFF
            self._offer(
                self._proxy.control_response(
                    self.control_session_id,
                    self.correlation_id,
                    ErrorCode.GENERIC,
                    ControlResponseCode.ERROR,
                    f"invalid client version {major}.{minor}.{patch}, archive is {PROTOCOL_MAJOR_VERSION}.x",
                )
            )
            self.abort("invalid client version")
            return 1
        result = self._authenticator.on_connect(self.control_session_id, self._credentials, self._epoch_clock())
        if result.decision is not AuthDecision.PENDING:
            self._credentials = b""  # not kept once decided (a PENDING authenticator is asked again next cycle)
        self._apply_auth(result)
        return 1

    def _apply_auth(self, result: AuthResult) -> None:
        decision = result.decision
        if decision is AuthDecision.AUTHENTICATED:
            self.encoded_principal = result.encoded_principal
            self._set_state(ControlSessionState.AUTHENTICATED)
            self._resend_deadline_ns = 0
        elif decision is AuthDecision.CHALLENGE:
            self._offer(self._proxy.challenge(self.control_session_id, self.correlation_id, result.encoded_challenge))
            self._set_state(ControlSessionState.CHALLENGED)
        elif decision is AuthDecision.REJECTED:
            self._set_state(ControlSessionState.REJECTED)
            self._resend_deadline_ns = 0

    def _resend(self, now: int, encode: Callable[[], bytes]) -> int:
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
            self.abort(
                f"failed to send response for more than connectTimeoutMs={self._connect_timeout_ns // 1_000_000}"
            )
            return 1
        if now >= self._next_ping_ns:
            self._next_ping_ns = now + self._liveness_interval_ns
            self.send(self._proxy.ping(self.control_session_id))
            work += 1
        return work

    # -- sending ---------------------------------------------------------------------------------------------
    def _try_offer(self, message: bytes) -> bool:
        """True once `message` is gone: offered, or refused for good by the publication (then dropped and logged,
        since offering it again would fail the same way and hold up every later response)."""
        if self.publication is None:
            return False
        try:
            result = self.publication.offer(message)
        except Exception as ex:
            fault_log.warning(
                "response cannot be sent",
                "control session %d: response of %d bytes dropped, the publication refuses it: %s",
                self.control_session_id,
                len(message),
                ex,
            )
            return True
        if result > 0:
            self._last_sent_ns = self._now_ns
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

    def _answering(self, correlation_id: int) -> None:
        if correlation_id == self._request_correlation_id:
            self._request_answered = True

    def send_ok(self, correlation_id: int, relevant_id: int = 0) -> None:
        self._answering(correlation_id)
        self.send(
            self._proxy.control_response(self.control_session_id, correlation_id, relevant_id, ControlResponseCode.OK)
        )

    def send_error(self, correlation_id: int, error_code: int, message: str) -> None:
        self._answering(correlation_id)
        fault_log.info(
            "error response",
            "control session %d: correlationId=%d error %s: %s",
            self.control_session_id,
            correlation_id,
            ErrorCode.name_of(error_code),
            message,
        )
        self.send(
            self._proxy.control_response(
                self.control_session_id, correlation_id, error_code, ControlResponseCode.ERROR, message
            )
        )

    def send_response_code(
        self, correlation_id: int, relevant_id: int, code: ControlResponseCode, message: str = ""
    ) -> None:
        self._answering(correlation_id)
        self.send(self._proxy.control_response(self.control_session_id, correlation_id, relevant_id, code, message))

    def send_descriptor(self, correlation_id: int, catalog_bytes: bytes, throttle: bool = True) -> bool:
        """Listing sessions stop sending while responses are queued, so a slow client throttles the listing."""
        if throttle and self._pending:
            return False
        self.send(self._proxy.recording_descriptor(self.control_session_id, correlation_id, catalog_bytes))
        return True

    def send_subscription_descriptor(
        self, correlation_id: int, subscription_id: int, stream_id: int, stripped_channel: str
    ) -> bool:
        """Never refused: a descriptor that meets back pressure is queued behind the earlier responses."""
        self.send(
            self._proxy.recording_subscription_descriptor(
                self.control_session_id, correlation_id, subscription_id, stream_id, stripped_channel
            )
        )
        return True

    def send_signal(
        self, correlation_id: int, recording_id: int, subscription_id: int, position: int, signal: RecordingSignal
    ) -> None:
        self.send(
            self._proxy.recording_signal(
                self.control_session_id, correlation_id, recording_id, subscription_id, position, signal
            )
        )

    def send_time_index_samples(self, correlation_id: int, recording_id: int, interval_ns: int, samples: bytes) -> bool:
        """Throttled as `send_descriptor`: a long answer waits for a slow client instead of queueing all of it."""
        if self._pending:
            return False
        self.send(
            self._proxy.time_index_samples(self.control_session_id, correlation_id, recording_id, interval_ns, samples)
        )
        return True

    # -- requests ----------------------------------------------------------------------------------------------
    def _activate(self, request: str) -> bool:
        """Aeron's `attemptToActivate`: True when `request` may run now.

        The first request after authentication makes the session ACTIVE (and starts the pings); a request in any
        other state, or after DONE, is dropped.
        """
        if self.state is ControlSessionState.DONE:
            return False
        if self.state is ControlSessionState.AUTHENTICATED:
            self._set_state(ControlSessionState.ACTIVE)
            self._next_ping_ns = self._now_ns + self._liveness_interval_ns
        if self.state is not ControlSessionState.ACTIVE:
            fault_log.warning(
                "request in wrong state",
                "control session %d: %s in state %s ignored",
                self.control_session_id,
                request,
                self.state.name,
            )
            return False
        return True

    def begin_request(self, correlation_id: int) -> None:
        """The adapter is about to hand this session the request `correlation_id` (see `fail_request`)."""
        self._request_correlation_id = correlation_id
        self._request_answered = False

    def fail_request(self, correlation_id: int, request: str, error: BaseException) -> bool:
        """Answer a request whose handling raised something other than a refusal; True if an error was sent.

        Java's conductor catches such exceptions (a channel the media driver rejects, a counter id it cannot
        read) and answers GENERIC with the exception's message; without this the client would wait for a
        response until its timeout. Nothing is sent if the request was already answered, or was never taken on
        (the session is not ACTIVE), so each request gets at most one response.
        """
        answered = self._request_answered and correlation_id == self._request_correlation_id
        self._request_correlation_id = None
        self._request_answered = False
        if answered or self.state is not ControlSessionState.ACTIVE:
            return False
        self.send_error(correlation_id, ErrorCode.GENERIC, f"{request} failed: {error}")
        return True

    @contextmanager
    def _answering_errors(self, correlation_id: int) -> Iterator[None]:
        """A request the conductor refuses becomes an error response naming the reason, never an exception."""
        try:
            yield
        except ArchiveError as ex:
            self.send_error(correlation_id, ex.error_code, ex.message)
        except ChannelError as ex:
            self.send_error(correlation_id, ErrorCode.GENERIC, str(ex))

    def on_challenge_response(self, request: m.ChallengeResponse) -> None:
        if self.state is ControlSessionState.CHALLENGED:
            result = self._authenticator.on_challenge_response(
                self.control_session_id, bytes(request.encoded_credentials), self._epoch_clock()
            )
            self._apply_auth(result)

    def on_close_session(self, request: m.CloseSessionRequest) -> None:
        if self._activate(request.name):
            self.abort("session closed")

    def on_keep_alive(self, request: m.KeepAliveRequest) -> None:
        self._activate(request.name)

    def on_unsupported_request(self, correlation_id: int, name: str, template_id: int) -> None:
        if self._activate(name):
            self.send_error(
                correlation_id,
                ErrorCode.GENERIC,
                f"request {name} (templateId={template_id}) is not supported by this archive",
            )

    def on_unauthorised_request(self, correlation_id: int, name: str, template_id: int) -> None:
        """The authorisation service refused `name` for this session's principal: an UNAUTHORISED_ACTION error
        naming the request (Java answers "unauthorised action"), and nothing reaches the conductor."""
        if self._activate(name):
            self.send_error(
                correlation_id,
                ErrorCode.UNAUTHORISED_ACTION,
                f"unauthorised action: {name} (templateId={template_id}) is not allowed for this client",
            )

    def on_refused_request(self, correlation_id: int, name: str, refusal: ArchiveError) -> None:
        """A request that named this session was refused before reaching it (a replay with a token no session
        holds): an error naming why, if the session is active."""
        if self.state is ControlSessionState.ACTIVE:
            self.send_error(correlation_id, refusal.error_code, refusal.message)

    def _serve(self, name: str, correlation_id: int, serve: Callable[[], None]) -> None:
        """Hand a request to the conductor once the session may run it; its refusal becomes an error response."""
        if self._activate(name):
            with self._answering_errors(correlation_id):
                serve()

    def on_start_recording(self, request: m.StartRecordingRequest | m.StartRecordingRequest2) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.start_recording(self, request))

    def on_stop_recording(self, request: m.StopRecordingRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.stop_recording(self, request))

    def on_stop_recording_subscription(self, request: m.StopRecordingSubscriptionRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.stop_recording_subscription(self, request)
        )

    def on_stop_recording_by_identity(self, request: m.StopRecordingByIdentityRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.stop_recording_by_identity(self, request)
        )

    def on_extend_recording(self, request: m.ExtendRecordingRequest | m.ExtendRecordingRequest2) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.extend_recording(self, request))

    def on_start_replay(self, request: m.ReplayRequest | m.BoundedReplayRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.start_replay(self, request))

    def on_stop_replay(self, request: m.StopReplayRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.stop_replay(self, request))

    def on_stop_all_replays(self, request: m.StopAllReplaysRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.stop_all_replays(self, request))

    def on_list_recordings(self, request: m.ListRecordingsRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.list_recordings(self, request))

    def on_list_recordings_for_uri(self, request: m.ListRecordingsForUriRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.list_recordings_for_uri(self, request)
        )

    def on_list_recording(self, request: m.ListRecordingRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.list_recording(self, request))

    def on_list_recording_subscriptions(self, request: m.ListRecordingSubscriptionsRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.list_recording_subscriptions(self, request)
        )

    def on_get_recording_position(self, request: m.RecordingPositionRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.get_recording_position(self, request))

    def on_get_stop_position(self, request: m.StopPositionRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.get_stop_position(self, request))

    def on_get_start_position(self, request: m.StartPositionRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.get_start_position(self, request))

    def on_get_max_recorded_position(self, request: m.MaxRecordedPositionRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.get_max_recorded_position(self, request)
        )

    def on_find_last_matching_recording(self, request: m.FindLastMatchingRecordingRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.find_last_matching_recording(self, request)
        )

    def on_truncate_recording(self, request: m.TruncateRecordingRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.truncate_recording(self, request))

    def on_purge_recording(self, request: m.PurgeRecordingRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.purge_recording(self, request))

    def on_detach_segments(self, request: m.DetachSegmentsRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.detach_segments(self, request))

    def on_delete_detached_segments(self, request: m.DeleteDetachedSegmentsRequest) -> None:
        self._serve(
            request.name, request.correlation_id, lambda: self._conductor.delete_detached_segments(self, request)
        )

    def on_purge_segments(self, request: m.PurgeSegmentsRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.purge_segments(self, request))

    def on_attach_segments(self, request: m.AttachSegmentsRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.attach_segments(self, request))

    def on_migrate_segments(self, request: m.MigrateSegmentsRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.migrate_segments(self, request))

    def on_replicate(self, request: m.ReplicateRequest | m.TaggedReplicateRequest | m.ReplicateRequest2) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.replicate(self, request))

    def on_stop_replication(self, request: m.StopReplicationRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.stop_replication(self, request))

    def on_replay_token_request(self, request: m.ReplayTokenRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.replay_token(self, request))

    def on_position_at_time(self, request: m.PositionAtTimeRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.position_at_time(self, request))

    def on_time_index(self, request: m.TimeIndexRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.time_index(self, request))

    def on_time_indexes(self, request: m.TimeIndexesRequest) -> None:
        self._serve(request.name, request.correlation_id, lambda: self._conductor.time_indexes(self, request))

    def on_archive_id(self, request: m.ArchiveIdRequest) -> None:
        if self._activate(request.name):
            self.send_ok(request.correlation_id, self._conductor.archive_id)
