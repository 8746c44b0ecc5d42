"""Decodes control requests from the control subscriptions and routes them to control sessions.

A malformed, truncated or foreign message is counted as an error and logged rate-limited by the host (one line
per kind of fault per interval, without a traceback each), never allowed to take the conductor down: the archive
must survive whatever arrives on a public UDP port, and a flood of garbage must not flood the log. Requests for
a session that does not exist or from another image are counted too, as Java's adapter reports them to its
error handler.

A well-formed request whose handler raises is answered, not only counted: the session sends one GENERIC error
naming the request (`ControlSession.fail_request`), so no client waits for a response that will never come.

As in Aeron's `ControlSessionAdapter`, each request template has its own small handler here that reads the
decoded fields once and calls the control session's typed `on_*` method; the codec builds message classes from
the schema at run time, so this module is the one place that reads fields off a decoded message. What the
adapter needs from the conductor is `ControlSessionHost`, not the conductor class.

Authorisation is checked here, as in Java's `ControlSessionAdapter.getControlSession`: every request of a known
session from its own image, except CloseSessionRequest and ChallengeResponse, is first put to the
`AuthorisationService` with the session's principal; a refused one never reaches the session's handler and is
answered with an UNAUTHORISED_ACTION error naming it, so a new handler cannot forget the check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aeron_archive_spark.archive.codecs import CodecError, load_archive_codec
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.server.authorisation import ALLOW_ALL, AuthorisationService
from aeron_archive_spark.archive.server.control_session import ControlSession

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import HeaderValues, Subscription

log = logging.getLogger(__name__)

FRAGMENT_LIMIT = 10

# Kinds of fault, each rate-limited on its own in the log (fixed strings: never text from the wire).
KIND_MALFORMED = "malformed control message"
KIND_UNEXPECTED = "unexpected message on the control stream"
KIND_UNKNOWN_SESSION = "request for an unknown control session"
KIND_WRONG_IMAGE = "request from another image"
KIND_UNAUTHORISED = "unauthorised request"
KIND_FAILED = "control request failed"

# Requests Java's adapter hands to the session without asking the authorisation service: closing one's own
# session, and answering a challenge (the session is not authenticated yet, so it has no principal).
_UNCHECKED = frozenset({t.CLOSE_SESSION_REQUEST, t.CHALLENGE_RESPONSE})

# A decoded control request: a `codecs.Message` whose fields the schema defines at run time (hence `Any`).
DecodedRequest = Any
RequestHandler = Callable[[ControlSession, DecodedRequest], None]


class ControlSessionHost(Protocol):
    """What the adapter needs from the conductor: create a session, find one, and count protocol errors."""

    def new_control_session(
        self,
        *,
        correlation_id: int,
        response_stream_id: int,
        version: int,
        response_channel: str,
        credentials: bytes,
        client_info: str,
        image_session_id: int,
    ) -> None: ...

    def control_session(self, control_session_id: int) -> ControlSession | None: ...

    def on_protocol_error(self, message: str, kind: str = KIND_MALFORMED, error: BaseException | None = None) -> None:
        """Count one fault and log it rate-limited per `kind` (a fixed string); `error` adds its traceback."""


class ControlSessionAdapter:
    def __init__(
        self,
        host: ControlSessionHost,
        subscriptions: list[Subscription],
        authorisation_service: AuthorisationService = ALLOW_ALL,
    ) -> None:
        self._host = host
        self._subscriptions = subscriptions
        self._authorisation = authorisation_service
        self._codec = load_archive_codec()
        self._handlers: dict[int, RequestHandler] = {
            t.CHALLENGE_RESPONSE: self._challenge_response,
            t.CLOSE_SESSION_REQUEST: self._close_session,
            t.KEEP_ALIVE_REQUEST: self._keep_alive,
            t.START_RECORDING_REQUEST: self._start_recording,
            t.START_RECORDING_REQUEST2: self._start_recording2,
            t.STOP_RECORDING_REQUEST: self._stop_recording,
            t.STOP_RECORDING_SUBSCRIPTION_REQUEST: self._stop_recording_subscription,
            t.STOP_RECORDING_BY_IDENTITY_REQUEST: self._stop_recording_by_identity,
            t.EXTEND_RECORDING_REQUEST: self._extend_recording,
            t.EXTEND_RECORDING_REQUEST2: self._extend_recording2,
            t.REPLAY_REQUEST: self._replay,
            t.BOUNDED_REPLAY_REQUEST: self._bounded_replay,
            t.STOP_REPLAY_REQUEST: self._stop_replay,
            t.STOP_ALL_REPLAYS_REQUEST: self._stop_all_replays,
            t.LIST_RECORDINGS_REQUEST: self._list_recordings,
            t.LIST_RECORDINGS_FOR_URI_REQUEST: self._list_recordings_for_uri,
            t.LIST_RECORDING_REQUEST: self._list_recording,
            t.LIST_RECORDING_SUBSCRIPTIONS_REQUEST: self._list_recording_subscriptions,
            t.RECORDING_POSITION_REQUEST: self._recording_position,
            t.STOP_POSITION_REQUEST: self._stop_position,
            t.START_POSITION_REQUEST: self._start_position,
            t.MAX_RECORDED_POSITION_REQUEST: self._max_recorded_position,
            t.FIND_LAST_MATCHING_RECORDING_REQUEST: self._find_last_matching_recording,
            t.TRUNCATE_RECORDING_REQUEST: self._truncate_recording,
            t.PURGE_RECORDING_REQUEST: self._purge_recording,
            t.ARCHIVE_ID_REQUEST: self._archive_id,
        }

    def poll(self) -> int:
        work = 0
        for subscription in self._subscriptions:
            work += subscription.poll(self._on_fragment, FRAGMENT_LIMIT)
        return work

    def _on_fragment(self, data: memoryview, header: HeaderValues) -> None:
        try:
            msg = self._codec.decode(data)
        except CodecError as ex:
            self._host.on_protocol_error(
                f"malformed control request ({len(data)} bytes) from session {header.session_id}: {ex}",
                KIND_MALFORMED,
            )
            return
        try:
            self.dispatch(msg, header.session_id)
        except Exception as ex:  # a bug in one handler must not stop the conductor
            self._host.on_protocol_error(f"control request {msg.name} failed: {ex}", KIND_FAILED, ex)

    def dispatch(self, msg: DecodedRequest, image_session_id: int) -> None:
        template_id = msg.template_id
        if template_id == t.AUTH_CONNECT_REQUEST:
            self._host.new_control_session(
                correlation_id=msg.correlation_id,
                response_stream_id=msg.response_stream_id,
                version=msg.version,
                response_channel=msg.response_channel,
                credentials=bytes(msg.encoded_credentials or b""),
                client_info=msg.client_info or "",
                image_session_id=image_session_id,
            )
            return
        if template_id == t.CONNECT_REQUEST:  # Aeron <= 1.52 clients may still send the unauthenticated form
            self._host.new_control_session(
                correlation_id=msg.correlation_id,
                response_stream_id=msg.response_stream_id,
                version=msg.version,
                response_channel=msg.response_channel,
                credentials=b"",
                client_info="",
                image_session_id=image_session_id,
            )
            return
        control_session_id = getattr(msg, "control_session_id", None)
        if control_session_id is None:
            self._host.on_protocol_error(f"unexpected message {msg.name} on the control stream", KIND_UNEXPECTED)
            return
        session = self._host.control_session(control_session_id)
        if session is None:
            self._host.on_protocol_error(
                f"{msg.name} for unknown controlSessionId={control_session_id} dropped", KIND_UNKNOWN_SESSION
            )
            return
        if image_session_id != session.image_session_id:
            self._host.on_protocol_error(
                f"control session {control_session_id}: {msg.name} from image session {image_session_id} dropped "
                f"(connected on {session.image_session_id})",
                KIND_WRONG_IMAGE,
            )
            return
        correlation_id = getattr(msg, "correlation_id", -1)
        if template_id not in _UNCHECKED and not self._authorisation.is_authorised(
            t.SCHEMA_ID, template_id, None, session.encoded_principal
        ):
            self._host.on_protocol_error(
                f"unauthorised archive action {msg.name} (templateId={template_id}) "
                f"controlSessionId={control_session_id} image session {image_session_id}",
                KIND_UNAUTHORISED,
            )
            session.on_unauthorised_request(correlation_id, msg.name, template_id)
            return
        handler = self._handlers.get(template_id)
        if handler is None:
            session.on_unsupported_request(correlation_id, msg.name, template_id)
            return
        session.begin_request(correlation_id)
        try:
            handler(session, msg)
        except Exception as ex:
            session.fail_request(correlation_id, msg.name, ex)
            raise

    # -- one handler per request template: read the fields, call the typed session method ------------------
    @staticmethod
    def _challenge_response(session: ControlSession, m: DecodedRequest) -> None:
        session.on_challenge_response(m.correlation_id, bytes(m.encoded_credentials or b""))

    @staticmethod
    def _close_session(session: ControlSession, m: DecodedRequest) -> None:
        session.on_close_session()

    @staticmethod
    def _keep_alive(session: ControlSession, m: DecodedRequest) -> None:
        session.on_keep_alive(m.correlation_id)

    @staticmethod
    def _start_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_start_recording(m.correlation_id, m.stream_id, m.source_location, False, m.channel)

    @staticmethod
    def _start_recording2(session: ControlSession, m: DecodedRequest) -> None:
        session.on_start_recording(m.correlation_id, m.stream_id, m.source_location, m.auto_stop == 1, m.channel)

    @staticmethod
    def _stop_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_stop_recording(m.correlation_id, m.stream_id, m.channel)

    @staticmethod
    def _stop_recording_subscription(session: ControlSession, m: DecodedRequest) -> None:
        session.on_stop_recording_subscription(m.correlation_id, m.subscription_id)

    @staticmethod
    def _stop_recording_by_identity(session: ControlSession, m: DecodedRequest) -> None:
        session.on_stop_recording_by_identity(m.correlation_id, m.recording_id)

    @staticmethod
    def _extend_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_extend_recording(m.correlation_id, m.recording_id, m.stream_id, m.source_location, False, m.channel)

    @staticmethod
    def _extend_recording2(session: ControlSession, m: DecodedRequest) -> None:
        session.on_extend_recording(
            m.correlation_id, m.recording_id, m.stream_id, m.source_location, m.auto_stop == 1, m.channel
        )

    @staticmethod
    def _replay(session: ControlSession, m: DecodedRequest) -> None:
        session.on_start_replay(
            m.correlation_id,
            m.recording_id,
            m.position,
            m.length,
            m.replay_stream_id,
            m.replay_channel,
            m.file_io_max_length,
        )

    @staticmethod
    def _bounded_replay(session: ControlSession, m: DecodedRequest) -> None:
        session.on_start_bounded_replay(
            m.correlation_id,
            m.recording_id,
            m.position,
            m.length,
            m.limit_counter_id,
            m.replay_stream_id,
            m.replay_channel,
            m.file_io_max_length,
        )

    @staticmethod
    def _stop_replay(session: ControlSession, m: DecodedRequest) -> None:
        session.on_stop_replay(m.correlation_id, m.replay_session_id)

    @staticmethod
    def _stop_all_replays(session: ControlSession, m: DecodedRequest) -> None:
        session.on_stop_all_replays(m.correlation_id, m.recording_id)

    @staticmethod
    def _list_recordings(session: ControlSession, m: DecodedRequest) -> None:
        session.on_list_recordings(m.correlation_id, m.from_recording_id, m.record_count)

    @staticmethod
    def _list_recordings_for_uri(session: ControlSession, m: DecodedRequest) -> None:
        session.on_list_recordings_for_uri(
            m.correlation_id, m.from_recording_id, m.record_count, m.stream_id, m.channel
        )

    @staticmethod
    def _list_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_list_recording(m.correlation_id, m.recording_id)

    @staticmethod
    def _list_recording_subscriptions(session: ControlSession, m: DecodedRequest) -> None:
        session.on_list_recording_subscriptions(
            m.correlation_id, m.pseudo_index, m.subscription_count, m.apply_stream_id == 1, m.stream_id, m.channel
        )

    @staticmethod
    def _recording_position(session: ControlSession, m: DecodedRequest) -> None:
        session.on_get_recording_position(m.correlation_id, m.recording_id)

    @staticmethod
    def _stop_position(session: ControlSession, m: DecodedRequest) -> None:
        session.on_get_stop_position(m.correlation_id, m.recording_id)

    @staticmethod
    def _start_position(session: ControlSession, m: DecodedRequest) -> None:
        session.on_get_start_position(m.correlation_id, m.recording_id)

    @staticmethod
    def _max_recorded_position(session: ControlSession, m: DecodedRequest) -> None:
        session.on_get_max_recorded_position(m.correlation_id, m.recording_id)

    @staticmethod
    def _find_last_matching_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_find_last_matching_recording(
            m.correlation_id, m.min_recording_id, m.session_id, m.stream_id, m.channel
        )

    @staticmethod
    def _truncate_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_truncate_recording(m.correlation_id, m.recording_id, m.position)

    @staticmethod
    def _purge_recording(session: ControlSession, m: DecodedRequest) -> None:
        session.on_purge_recording(m.correlation_id, m.recording_id)

    @staticmethod
    def _archive_id(session: ControlSession, m: DecodedRequest) -> None:
        session.on_archive_id(m.correlation_id)
