"""Encodes and sends control requests (Aeron's `ArchiveProxy`), retrying back pressure a bounded number of times."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.codecs import Message, load_archive_codec
from aeron_archive_spark.archive.exceptions import ArchiveError, ArchiveTimeoutError
from aeron_archive_spark.archive.native import MAX_POSITION_EXCEEDED, NOT_CONNECTED, PUBLICATION_CLOSED

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import ExclusivePublication


class ArchiveProxy:
    def __init__(
        self, publication: ExclusivePublication, retry_attempts: int = 3, message_timeout_ns: int = 10_000_000_000
    ) -> None:
        self.publication = publication
        self._codec = load_archive_codec()
        self._retry_attempts = retry_attempts
        self._timeout_ns = message_timeout_ns

    def send(self, request: Message) -> None:
        """Offer one request (built with its class's `of`); back pressure is retried until the message timeout."""
        self.send_bytes(self._codec.encode_message(request), request.name)

    def send_bytes(self, message: bytes, what: str = "request") -> None:
        deadline = time.monotonic_ns() + self._timeout_ns
        attempts = self._retry_attempts
        while True:
            result = self.publication.offer(message)
            if result > 0:
                return
            if result in (PUBLICATION_CLOSED, MAX_POSITION_EXCEEDED):
                raise ArchiveError(f"cannot send {what}: control request publication is closed")
            if result == NOT_CONNECTED:
                attempts -= 1
                if attempts <= 0:
                    raise ArchiveError(f"cannot send {what}: control request publication is not connected")
            if time.monotonic_ns() > deadline:
                raise ArchiveTimeoutError(f"cannot send {what}: back-pressured for the whole message timeout")
            time.sleep(0.0005)
