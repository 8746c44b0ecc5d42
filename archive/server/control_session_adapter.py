"""Decodes control requests from the control subscriptions and routes them to control sessions.

A malformed, truncated or foreign message is counted as an error and logged rate-limited by the host (one line
per kind of fault per interval, without a traceback each), never allowed to take the conductor down: the archive
must survive whatever arrives on a public UDP port, and a flood of garbage must not flood the log. Requests for
a session that does not exist or from another image are counted too, as Java's adapter reports them to its
error handler.

A well-formed request whose handler raises is answered, not only counted: the session sends one GENERIC error
naming the request (`ControlSession.fail_request`), so no client waits for a response that will never come.

As in Aeron's `ControlSessionAdapter`, each request has its own handler: the control session's `on_*` method that
takes that request's class (`codecs.messages`, generated from the schema). The adapter dispatches on the decoded
message's class and hands the request object on, so every field a session or the conductor reads is typed. What
the adapter needs from the conductor is `ControlSessionHost`, not the conductor class.

Authorisation is checked here, as in Java's `ControlSessionAdapter.getControlSession`: every request of a known
session from its own image, except CloseSessionRequest and ChallengeResponse, is first put to the
`AuthorisationService` with the session's principal; a refused one never reaches the session's handler and is
answered with an UNAUTHORISED_ACTION error naming it, so a new handler cannot forget the check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aeron_archive_spark.archive.codecs import CodecError, Message, load_archive_codec
from aeron_archive_spark.archive.codecs import messages as m
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

# A control session's handler of one request class; each `on_*` method types its request exactly (the table below
# pairs it with that class, which mypy cannot check across a dict, so a test does).
RequestHandler = Callable[[ControlSession, Any], None]

HANDLERS: dict[type[Message], RequestHandler] = {
    m.ChallengeResponse: ControlSession.on_challenge_response,
    m.CloseSessionRequest: ControlSession.on_close_session,
    m.KeepAliveRequest: ControlSession.on_keep_alive,
    m.StartRecordingRequest: ControlSession.on_start_recording,
    m.StartRecordingRequest2: ControlSession.on_start_recording,
    m.StopRecordingRequest: ControlSession.on_stop_recording,
    m.StopRecordingSubscriptionRequest: ControlSession.on_stop_recording_subscription,
    m.StopRecordingByIdentityRequest: ControlSession.on_stop_recording_by_identity,
    m.ExtendRecordingRequest: ControlSession.on_extend_recording,
    m.ExtendRecordingRequest2: ControlSession.on_extend_recording,
    m.ReplayRequest: ControlSession.on_start_replay,
    m.BoundedReplayRequest: ControlSession.on_start_replay,
    m.StopReplayRequest: ControlSession.on_stop_replay,
    m.StopAllReplaysRequest: ControlSession.on_stop_all_replays,
    m.ListRecordingsRequest: ControlSession.on_list_recordings,
    m.ListRecordingsForUriRequest: ControlSession.on_list_recordings_for_uri,
    m.ListRecordingRequest: ControlSession.on_list_recording,
    m.ListRecordingSubscriptionsRequest: ControlSession.on_list_recording_subscriptions,
    m.RecordingPositionRequest: ControlSession.on_get_recording_position,
    m.StopPositionRequest: ControlSession.on_get_stop_position,
    m.StartPositionRequest: ControlSession.on_get_start_position,
    m.MaxRecordedPositionRequest: ControlSession.on_get_max_recorded_position,
    m.FindLastMatchingRecordingRequest: ControlSession.on_find_last_matching_recording,
    m.TruncateRecordingRequest: ControlSession.on_truncate_recording,
    m.PurgeRecordingRequest: ControlSession.on_purge_recording,
    m.ArchiveIdRequest: ControlSession.on_archive_id,
    m.ReplicateRequest: ControlSession.on_replicate,
    m.TaggedReplicateRequest: ControlSession.on_replicate,
    m.ReplicateRequest2: ControlSession.on_replicate,
    m.StopReplicationRequest: ControlSession.on_stop_replication,
}


@dataclass(frozen=True, slots=True)
class _Connect:
    """A connect whose answer must wait for its image's correlation id (a response-mode client)."""

    msg: m.AuthConnectRequest | m.ConnectRequest
    image_session_id: int


def _image_correlation_id(subscription: Subscription, connect: _Connect) -> int:
    """The correlation id of the image a connect came from (-1 if it is gone): a response-mode client's response
    publication answers that image (Java: `image.correlationId()`)."""
    image = subscription.image_by_session_id(connect.image_session_id)
    if image is None:
        return -1
    try:
        return int(image.correlation_id)
    finally:
        image.close()


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
        image_correlation_id: int = -1,
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
        self._response_mode_connects: list[_Connect] = []

    def poll(self) -> int:
        work = 0
        for subscription in self._subscriptions:
            work += subscription.poll(self._on_fragment, FRAGMENT_LIMIT)
            if self._response_mode_connects:
                # Looked up once the poll is over: the subscription is not usable from inside its own callback.
                connects, self._response_mode_connects = self._response_mode_connects, []
                for connect in connects:
                    self._connect(connect.msg, connect.image_session_id, _image_correlation_id(subscription, connect))
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

    def _connect(
        self, msg: m.AuthConnectRequest | m.ConnectRequest, image_session_id: int, image_correlation_id: int
    ) -> None:
        if isinstance(msg, m.AuthConnectRequest):
            self._host.new_control_session(
                correlation_id=msg.correlation_id,
                response_stream_id=msg.response_stream_id,
                version=msg.version,
                response_channel=msg.response_channel,
                credentials=bytes(msg.encoded_credentials),
                client_info=msg.client_info,
                image_session_id=image_session_id,
                image_correlation_id=image_correlation_id,
            )
            return
        self._host.new_control_session(
            correlation_id=msg.correlation_id,
            response_stream_id=msg.response_stream_id,
            version=msg.version,
            response_channel=msg.response_channel,
            credentials=b"",
            client_info="",
            image_session_id=image_session_id,
            image_correlation_id=image_correlation_id,
        )

    def dispatch(self, msg: Message, image_session_id: int) -> None:
        # Aeron <= 1.52 clients may still send the unauthenticated ConnectRequest.
        if isinstance(msg, m.AuthConnectRequest | m.ConnectRequest):
            if "control-mode=response" in msg.response_channel:
                self._response_mode_connects.append(_Connect(msg, image_session_id))
            else:
                self._connect(msg, image_session_id, -1)
            return
        template_id = msg.template_id
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
        handler = HANDLERS.get(type(msg))
        if handler is None:
            session.on_unsupported_request(correlation_id, msg.name, template_id)
            return
        session.begin_request(correlation_id)
        try:
            handler(session, msg)
        except Exception as ex:
            session.fail_request(correlation_id, msg.name, ex)
            raise
