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

A replay over a response channel (`control-mode=response` in its replay channel, and a replay token) comes on a
publication of the requester's own, not from its control session's image: as Java's
`setupSessionAndChannelForReplay`, it is accepted from any image, handed to the control session the token names
(no image check, no authorisation: the token request had both), and its replay channel gets
`response-correlation-id=<that image's correlation id>`, so the replay publication answers that publication. An
unknown or expired token is counted, as Java's, and (beyond Java, which leaves the client to time out) answered with
an error naming it on the control session the request names, if there is one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aeron_archive_spark.archive.channel import ChannelError, ChannelUri
from aeron_archive_spark.archive.codecs import CodecError, Message, load_archive_codec
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
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
KIND_TOKEN = "replay token refused"

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
    m.DetachSegmentsRequest: ControlSession.on_detach_segments,
    m.DeleteDetachedSegmentsRequest: ControlSession.on_delete_detached_segments,
    m.PurgeSegmentsRequest: ControlSession.on_purge_segments,
    m.AttachSegmentsRequest: ControlSession.on_attach_segments,
    m.MigrateSegmentsRequest: ControlSession.on_migrate_segments,
    m.ArchiveIdRequest: ControlSession.on_archive_id,
    m.ReplicateRequest: ControlSession.on_replicate,
    m.TaggedReplicateRequest: ControlSession.on_replicate,
    m.ReplicateRequest2: ControlSession.on_replicate,
    m.StopReplicationRequest: ControlSession.on_stop_replication,
    m.ReplayTokenRequest: ControlSession.on_replay_token_request,
    m.PositionAtTimeRequest: ControlSession.on_position_at_time,  # ours, beyond Aeron's schema
    m.TimeIndexRequest: ControlSession.on_time_index,  # ours, beyond Aeron's schema
    m.TimeIndexesRequest: ControlSession.on_time_indexes,  # ours, beyond Aeron's schema
}

# The first version of the schema whose replay requests carry a replay token (Java's REPLAY_TOKEN_VERSION).
REPLAY_TOKEN_VERSION = 10
FILE_IO_MAX_LENGTH_VERSION = 7
NULL_TOKEN = -1
ReplayMessage = m.ReplayRequest | m.BoundedReplayRequest


@dataclass(frozen=True, slots=True)
class _AwaitingImage:
    """A request whose handling needs its image's correlation id (a response-mode connect, a token replay): it is
    looked up once the subscription's poll is over."""

    msg: m.AuthConnectRequest | m.ConnectRequest | ReplayMessage
    image_session_id: int


def _image_correlation_id(subscription: Subscription, image_session_id: int) -> int:
    """The correlation id of the image a request came from (-1 if it is gone): a response publication answers that
    image (Java: `image.correlationId()`)."""
    image = subscription.image_by_session_id(image_session_id)
    if image is None:
        return -1
    try:
        return int(image.correlation_id)
    finally:
        image.close()


def replay_token_of(msg: ReplayMessage) -> int:
    """The request's replay token: -1 from a sender older than version 10 (Java maps it so)."""
    return msg.replay_token if msg.header.version >= REPLAY_TOKEN_VERSION else NULL_TOKEN


def is_token_replay(msg: ReplayMessage) -> bool:
    """A replay asked for over a response channel with a token (Java: `hasControlModeResponse()` and a token)."""
    if replay_token_of(msg) == NULL_TOKEN:
        return False
    try:
        return ChannelUri.parse(msg.replay_channel).get("control-mode") == "response"
    except ChannelError:
        return False  # the ordinary path answers the bad channel


def with_replay_channel(msg: ReplayMessage, replay_channel: str) -> ReplayMessage:
    """The same request with another replay channel (the version-dependent fields already as Java reads them)."""
    fields = msg.as_dict()
    fields["replay_channel"] = replay_channel
    fields["replay_token"] = replay_token_of(msg)
    if msg.header.version < FILE_IO_MAX_LENGTH_VERSION:
        fields["file_io_max_length"] = -1
    return type(msg).of(**fields)


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

    def token_replay_session(self, replay_token: int, recording_id: int) -> ControlSession:
        """The control session a replay token was given to, for `recording_id`; raises `ArchiveError` naming the
        token if it is unknown, expired or for another recording."""

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
        self._awaiting_image: list[_AwaitingImage] = []

    def poll(self) -> int:
        work = 0
        for subscription in self._subscriptions:
            work += subscription.poll(self._on_fragment, FRAGMENT_LIMIT)
            if self._awaiting_image:
                # Looked up once the poll is over: the subscription is not usable from inside its own callback.
                awaiting, self._awaiting_image = self._awaiting_image, []
                for request in awaiting:
                    image_correlation_id = _image_correlation_id(subscription, request.image_session_id)
                    self.dispatch_with_image(request.msg, request.image_session_id, image_correlation_id)
        return work

    def dispatch_with_image(
        self,
        msg: m.AuthConnectRequest | m.ConnectRequest | ReplayMessage,
        image_session_id: int,
        image_correlation_id: int,
    ) -> None:
        """Handle a request that waited for its image's correlation id (-1: the image is gone)."""
        try:
            if isinstance(msg, m.ReplayRequest | m.BoundedReplayRequest):
                self._token_replay(msg, image_session_id, image_correlation_id)
            else:
                self._connect(msg, image_session_id, image_correlation_id)
        except Exception as ex:  # a bug in one handler must not stop the conductor
            self._host.on_protocol_error(f"control request {msg.name} failed: {ex}", KIND_FAILED, ex)

    def _token_replay(self, msg: ReplayMessage, image_session_id: int, image_correlation_id: int) -> None:
        token = replay_token_of(msg)
        try:
            session = self._host.token_replay_session(token, msg.recording_id)
            if image_correlation_id == -1:
                raise ArchiveError(
                    f"{msg.name} with replayToken={token} for recordingId={msg.recording_id}: the image it came from "
                    f"(session {image_session_id}) is gone, so no replay publication can answer it",
                    ErrorCode.GENERIC,
                )
        except ArchiveError as ex:
            self._host.on_protocol_error(f"{msg.name} (correlationId={msg.correlation_id}): {ex.message}", KIND_TOKEN)
            requester = self._host.control_session(msg.control_session_id)
            if requester is not None:
                requester.on_refused_request(msg.correlation_id, msg.name, ex)
            return
        channel = ChannelUri.parse(msg.replay_channel).with_params(response_correlation_id=image_correlation_id)
        self._handle(session, with_replay_channel(msg, str(channel)))

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
                self._awaiting_image.append(_AwaitingImage(msg, image_session_id))
            else:
                self._connect(msg, image_session_id, -1)
            return
        if isinstance(msg, m.ReplayRequest | m.BoundedReplayRequest) and is_token_replay(msg):
            self._awaiting_image.append(_AwaitingImage(msg, image_session_id))
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
        self._handle(session, msg)

    def _handle(self, session: ControlSession, msg: Message) -> None:
        """Hand a request to its handler; a handler that raises answers the request (`fail_request`)."""
        correlation_id = getattr(msg, "correlation_id", -1)
        handler = HANDLERS.get(type(msg))
        if handler is None:
            session.on_unsupported_request(correlation_id, msg.name, msg.template_id)
            return
        session.begin_request(correlation_id)
        try:
            handler(session, msg)
        except Exception as ex:
            session.fail_request(correlation_id, msg.name, ex)
            raise
