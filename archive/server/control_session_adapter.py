"""Decodes control requests from the control subscriptions and routes them to control sessions.

A malformed, truncated or foreign message is logged and counted as an error, never allowed to take the
conductor down: the archive must survive whatever arrives on a public UDP port.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.codecs import CodecError, load_archive_codec
from aeron_archive_spark.archive.codecs import templates as t

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import HeaderValues, Subscription
    from aeron_archive_spark.archive.server.conductor import ArchiveConductor

log = logging.getLogger(__name__)

FRAGMENT_LIMIT = 10


class ControlSessionAdapter:
    def __init__(self, conductor: ArchiveConductor, subscriptions: list[Subscription]) -> None:
        self._conductor = conductor
        self._subscriptions = subscriptions
        self._codec = load_archive_codec()

    def poll(self) -> int:
        work = 0
        for subscription in self._subscriptions:
            work += subscription.poll(self._on_fragment, FRAGMENT_LIMIT)
        return work

    def _on_fragment(self, data: memoryview, header: HeaderValues) -> None:
        try:
            msg = self._codec.decode(data)
        except CodecError as ex:
            self._conductor.on_protocol_error(
                f"malformed control request ({len(data)} bytes) from session {header.session_id}: {ex}")
            return
        try:
            self.dispatch(msg, header.session_id)
        except Exception as ex:  # a bug in one handler must not stop the conductor
            log.exception("control request %s failed", msg.name)
            self._conductor.on_protocol_error(f"control request {msg.name} failed: {ex}")

    def dispatch(self, msg, image_session_id: int) -> None:
        template_id = msg.template_id
        if template_id == t.AUTH_CONNECT_REQUEST:
            self._conductor.new_control_session(
                correlation_id=msg.correlation_id, response_stream_id=msg.response_stream_id,
                version=msg.version, response_channel=msg.response_channel,
                credentials=bytes(msg.encoded_credentials or b""), client_info=msg.client_info or "",
                image_session_id=image_session_id)
            return
        if template_id == t.CONNECT_REQUEST:  # Aeron <= 1.52 clients may still send the unauthenticated form
            self._conductor.new_control_session(
                correlation_id=msg.correlation_id, response_stream_id=msg.response_stream_id,
                version=msg.version, response_channel=msg.response_channel, credentials=b"", client_info="",
                image_session_id=image_session_id)
            return
        control_session_id = getattr(msg, "control_session_id", None)
        if control_session_id is None:
            self._conductor.on_protocol_error(f"unexpected message {msg.name} on the control stream")
            return
        session = self._conductor.control_session(control_session_id)
        if session is None:
            log.warning("%s for unknown controlSessionId=%d dropped", msg.name, control_session_id)
            return
        session.on_request(msg, image_session_id)
