"""Connecting to an archive step by step without blocking: Java's `AeronArchive.AsyncConnect`.

`AeronArchive.connect` drives it to the end, waiting between steps; an agent that must never block (the archive's
conductor replicating from another archive) calls `poll` once per duty cycle instead. The steps are Java's: add the
request publication and the response subscription, resolve a wildcard response port, wait for the publication to
connect, send AuthConnect, await the archive's answer (answering a challenge if a callback is given), ask for the
archive id, await it. The whole connect must finish within the message timeout. What it gives is a `Connected`
session, which `AeronArchive` wraps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.channel import ChannelUri, add_session_id
from aeron_archive_spark.archive.client.archive_proxy import ArchiveProxy
from aeron_archive_spark.archive.client.response_poller import ResponsePoller
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import (
    CONTROL_MTU_LENGTH_DEFAULT,
    CONTROL_TERM_LENGTH_DEFAULT,
    FEATURES_PREFIX,
    NULL_POSITION,
    PROTOCOL_SEMANTIC_VERSION,
    ControlResponseCode,
)
from aeron_archive_spark.archive.exceptions import ArchiveError, ArchiveTimeoutError, ErrorCode

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import AeronClient, ExclusivePublication, Subscription

log = logging.getLogger(__name__)

CLIENT_VERSION_TEXT = "0.1.0"


class ConnectStep(IntEnum):
    """Where a connect is (Java's `AsyncConnect.State`, our names)."""

    ADD_PUBLICATION = 0
    RESOLVE_RESPONSE_PORT = 1
    AWAIT_PUBLICATION_CONNECTED = 2
    SEND_CONNECT_REQUEST = 3
    AWAIT_CONNECT_RESPONSE = 4
    SEND_ARCHIVE_ID_REQUEST = 5
    AWAIT_ARCHIVE_ID_RESPONSE = 6
    DONE = 7


def control_channel_with_defaults(channel: str) -> str:
    """A control channel with the term length (64 KiB), MTU (1408) and sparse log buffers that Java's
    `AeronArchive.Context` gives the request and response channels where they set none.

    Without them a control stream gets the driver's defaults: on IPC a 64 MiB term, i.e. a 192 MiB log buffer per
    connection, allocated and touched up front by a driver whose log buffers are not sparse (Java's media driver,
    or the archive's own embedded one) for a stream that carries a few hundred bytes a request.
    """
    uri = ChannelUri.parse(channel)
    extra: dict[str, Any] = {}
    if uri.get("term-length") is None:
        extra["term_length"] = CONTROL_TERM_LENGTH_DEFAULT
    if uri.get("mtu") is None:
        extra["mtu"] = CONTROL_MTU_LENGTH_DEFAULT
    if uri.get("sparse") is None:
        extra["sparse"] = True
    return str(uri.with_params(**extra)) if extra else channel


def archive_features(connect_message: str) -> frozenset[str]:
    """The extensions an archive says it answers, from the text of its OK to the connect (`features=a,b`; see
    `constants.ARCHIVE_FEATURES`). Java's archive sends none (an empty text, which Java's client
    never reads on an OK), so a client asks it nothing it would leave unanswered."""
    text = connect_message.strip()
    if not text.startswith(FEATURES_PREFIX):
        return frozenset()
    return frozenset(part.strip() for part in text[len(FEATURES_PREFIX) :].split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class Connected:
    """What a finished connect hands over: the request publication (in its proxy), the response subscription (in
    its poller), the archive's answers, and whether the Aeron client is the session's own."""

    aeron: AeronClient
    owns_aeron: bool
    proxy: ArchiveProxy
    poller: ResponsePoller
    control_session_id: int
    archive_id: int
    message_timeout_ns: int
    control_request_channel: str  # as given (a response-channel replay is asked for on a publication to it)
    control_request_stream_id: int
    features: frozenset[str] = frozenset()  # what this project's archive answers beyond Aeron's protocol


class AsyncConnect:
    """One connect to an archive, advanced by `poll` (see the module docstring). Owns what it added until `poll`
    hands it over as `Connected`; `close` releases it if the connect is given up or failed."""

    def __init__(
        self,
        aeron: AeronClient,
        control_request_channel: str,
        control_request_stream_id: int,
        control_response_channel: str,
        control_response_stream_id: int,
        *,
        owns_aeron: bool = False,
        message_timeout_ns: int,
        client_name: str,
        credentials: bytes = b"",
        on_challenge: Callable[[bytes], bytes] | None = None,
        nano_clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.aeron = aeron
        self._owns_aeron = owns_aeron
        self.request_channel = control_request_channel
        self.request_stream_id = control_request_stream_id
        self.response_channel = control_response_channel
        self.response_stream_id = control_response_stream_id
        self._timeout_ns = message_timeout_ns
        self._client_name = client_name
        self._credentials = credentials
        self._on_challenge = on_challenge
        self._clock = nano_clock
        self._deadline_ns = nano_clock() + message_timeout_ns
        self.where = f"archive at {control_request_channel} stream {control_request_stream_id}"
        self.step = ConnectStep.ADD_PUBLICATION
        self._publication: ExclusivePublication | None = None
        self._subscription: Subscription | None = None
        self._proxy: ArchiveProxy | None = None
        self._poller: ResponsePoller | None = None
        self._correlation_id = NULL_POSITION
        self._control_session_id = NULL_POSITION
        self._features: frozenset[str] = frozenset()
        self._closed = False

    # ---- stepping ---------------------------------------------------------------------------------------------

    def poll(self) -> Connected | None:
        """Advance the connect as far as it goes without waiting: the connected session once done, else None.
        Raises `ArchiveError` (AUTHENTICATION_REJECTED, or the archive's refusal) or `ArchiveTimeoutError` (no
        progress within the message timeout); what was added is closed then."""
        try:
            return self._advance()
        except BaseException:
            self.close()
            raise

    def _advance(self) -> Connected | None:
        if self.step is ConnectStep.ADD_PUBLICATION:
            self._add()
        if self.step is ConnectStep.RESOLVE_RESPONSE_PORT:
            assert self._subscription is not None
            resolved = self._subscription.try_resolve_channel_endpoint_port()
            if resolved is None:
                self._check_deadline("could not resolve the response channel port of " + self.response_channel)
                return None
            self.response_channel = resolved
            self.step = ConnectStep.AWAIT_PUBLICATION_CONNECTED
        if self.step is ConnectStep.AWAIT_PUBLICATION_CONNECTED:
            assert self._publication is not None
            if not self._publication.is_connected:
                self._check_deadline(
                    f"no archive on control channel {self.request_channel} stream {self.request_stream_id} (aeron "
                    f"dir {self.aeron.aeron_dir}): request publication not connected within "
                    f"{self._timeout_ns / 1e9:.1f}s"
                )
                return None
            self.step = ConnectStep.SEND_CONNECT_REQUEST
        if self.step is ConnectStep.SEND_CONNECT_REQUEST:
            self._send_connect()
        if self.step is ConnectStep.AWAIT_CONNECT_RESPONSE:
            if not self._await_connect():
                self._check_deadline(f"no connect response from the {self.where} within the message timeout")
                return None
            self.step = ConnectStep.SEND_ARCHIVE_ID_REQUEST
        proxy, poller = self._proxy, self._poller
        assert proxy is not None and poller is not None
        if self.step is ConnectStep.SEND_ARCHIVE_ID_REQUEST:
            self._correlation_id = self.aeron.next_correlation_id()
            proxy.send(
                m.ArchiveIdRequest.of(control_session_id=self._control_session_id, correlation_id=self._correlation_id)
            )
            self.step = ConnectStep.AWAIT_ARCHIVE_ID_RESPONSE
        for msg in poller.poll():
            if msg.template_id == t.CONTROL_RESPONSE and msg.correlation_id == self._correlation_id:
                if msg.code == ControlResponseCode.ERROR:
                    raise ArchiveError(msg.error_message, msg.relevant_id, self._correlation_id)
                self.step = ConnectStep.DONE
                connected = Connected(
                    self.aeron,
                    self._owns_aeron,
                    proxy,
                    poller,
                    self._control_session_id,
                    msg.relevant_id,
                    self._timeout_ns,
                    self.request_channel,
                    self.request_stream_id,
                    self._features,
                )
                self._publication = self._subscription = self._proxy = self._poller = None  # the session's now
                return connected
        self._check_deadline("no response to ArchiveIdRequest within the message timeout")
        return None

    def _check_deadline(self, timeout_message: str) -> None:
        """Not done this step: fail with `timeout_message` once the connect's time is up."""
        if self._clock() > self._deadline_ns:
            raise ArchiveTimeoutError(timeout_message, ErrorCode.GENERIC, self._correlation_id)

    def _add(self) -> None:
        if ChannelUri.parse(self.response_channel).get("control-mode") == "response":
            # Response mode (Java 1.53's `AsyncConnect`): the response subscription first, then the request
            # publication naming it (`response-correlation-id`); the archive's response publication then answers
            # this publication's image, wherever this client is, with no port of its own opened for it.
            self.response_channel = control_channel_with_defaults(self.response_channel)
            self._subscription = self.aeron.add_subscription(self.response_channel, self.response_stream_id)
            request = ChannelUri.parse(control_channel_with_defaults(self.request_channel)).with_params(
                response_correlation_id=self._subscription.registration_id
            )
            self._publication = self.aeron.add_exclusive_publication(str(request), self.request_stream_id)
        else:
            self._publication = self.aeron.add_exclusive_publication(
                control_channel_with_defaults(self.request_channel), self.request_stream_id
            )
            self.response_channel = add_session_id(
                control_channel_with_defaults(self.response_channel), self._publication.session_id
            )
            self._subscription = self.aeron.add_subscription(self.response_channel, self.response_stream_id)
        self._proxy = ArchiveProxy(self._publication, message_timeout_ns=self._timeout_ns)
        self._poller = ResponsePoller(self._subscription)
        uri = ChannelUri.parse(self.response_channel)
        wildcard = uri.is_udp and (uri.get("endpoint") or "").endswith(":0")
        self.step = ConnectStep.RESOLVE_RESPONSE_PORT if wildcard else ConnectStep.AWAIT_PUBLICATION_CONNECTED

    def _send_connect(self) -> None:
        assert self._proxy is not None
        self._correlation_id = self.aeron.next_correlation_id()
        self._proxy.send(
            m.AuthConnectRequest.of(
                correlation_id=self._correlation_id,
                response_stream_id=self.response_stream_id,
                version=PROTOCOL_SEMANTIC_VERSION,
                response_channel=self.response_channel,
                encoded_credentials=self._credentials,
                client_info=f"name={self._client_name} version={CLIENT_VERSION_TEXT} commit=python",
            )
        )
        self.step = ConnectStep.AWAIT_CONNECT_RESPONSE

    def _await_connect(self) -> bool:
        """True once the archive accepted the connect (its control session id kept)."""
        assert self._proxy is not None and self._poller is not None
        correlation_id = self._correlation_id
        for msg in self._poller.poll():
            if msg.template_id == t.CONTROL_RESPONSE and msg.correlation_id == correlation_id:
                if msg.code == ControlResponseCode.OK:
                    self._control_session_id = msg.relevant_id  # ControlResponse.relevantId, an int64
                    self._features = archive_features(msg.error_message)
                    return True
                if msg.relevant_id == ErrorCode.AUTHENTICATION_REJECTED:
                    hint = "" if self._credentials else "; no credentials were given, and this archive requires them"
                    raise ArchiveError(
                        f"{self.where} rejected the credentials ({msg.error_message}){hint}",
                        ErrorCode.AUTHENTICATION_REJECTED,
                        correlation_id,
                    )
                raise ArchiveError(
                    f"connect to {self.where} failed: {msg.error_message}", msg.relevant_id, correlation_id
                )
            if msg.template_id == t.CHALLENGE and msg.correlation_id == correlation_id:
                if self._on_challenge is None:
                    raise ArchiveError(
                        f"{self.where} sent an authentication challenge, which this client cannot answer "
                        "without an on_challenge callback",
                        ErrorCode.AUTHENTICATION_REJECTED,
                        correlation_id,
                    )
                self._proxy.send(
                    m.ChallengeResponse.of(
                        control_session_id=msg.control_session_id,
                        correlation_id=correlation_id,
                        encoded_credentials=self._on_challenge(bytes(msg.encoded_challenge)),
                    )
                )
        return False

    # ---- giving up --------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release what a connect that did not finish added (a session the archive accepted is closed with it).
        Idempotent; nothing to do once the connect is done (all of it is the connected session's)."""
        if self.step is ConnectStep.DONE or self._closed:
            return
        self._closed = True
        publication, self._publication = self._publication, None
        subscription, self._subscription = self._subscription, None
        proxy, self._proxy = self._proxy, None
        self._poller = None
        if proxy is not None and self._control_session_id != NULL_POSITION:
            try:
                proxy.send(m.CloseSessionRequest.of(control_session_id=self._control_session_id))
            except ArchiveError as ex:
                log.debug("close session request not sent: %s", ex)
        if subscription is not None:
            subscription.close()
        if publication is not None:
            publication.close()
        if self._owns_aeron:
            self.aeron.close()
