"""Encodes what the archive sends on a control session's response publication (Aeron's `ControlResponseProxy`)."""

from __future__ import annotations

import struct

from aeron_archive_spark.archive.codecs import load_archive_codec
from aeron_archive_spark.archive.codecs.templates import (
    MESSAGE_HEADER_LENGTH,
    RECORDING_DESCRIPTOR,
    SCHEMA_ID,
    SCHEMA_VERSION,
)
from aeron_archive_spark.archive.constants import PROTOCOL_SEMANTIC_VERSION, ControlResponseCode, RecordingSignal

_DESCRIPTOR_HEAD = struct.Struct("<HHHHqq")
RECORDING_DESCRIPTOR_BLOCK_LENGTH = 80
# Longest error text sent: well inside the smallest response term's max message length (64 KiB / 8), so an
# error quoting a huge request field can always be offered.
MAX_ERROR_MESSAGE_LENGTH = 2048
_ELLIPSIS = "..."


def ascii_text(text: str, max_length: int | None = None) -> str:
    """`text` as the schema's US-ASCII varchar can carry it: other characters become '?' (as Java's
    `putStringWithoutLengthAscii` writes them), and at most `max_length` characters, the cut marked by "...".

    Error messages quote what the client sent, which may hold any byte; an encoder that refused them would leave
    the request unanswered.
    """
    if not text.isascii():
        text = text.encode("ascii", "replace").decode("ascii")
    if max_length is not None and len(text) > max_length:
        text = text[: max(0, max_length - len(_ELLIPSIS))] + _ELLIPSIS
    return text


class ControlResponseProxy:
    """Stateless encoders; the control session owns the publication and the retry queue."""

    def __init__(self) -> None:
        self._codec = load_archive_codec()

    def control_response(
        self,
        control_session_id: int,
        correlation_id: int,
        relevant_id: int,
        code: ControlResponseCode,
        error_message: str = "",
    ) -> bytes:
        return self._codec.encode(
            "ControlResponse",
            control_session_id=control_session_id,
            correlation_id=correlation_id,
            relevant_id=relevant_id,
            code=int(code),
            version=PROTOCOL_SEMANTIC_VERSION,
            error_message=ascii_text(error_message, MAX_ERROR_MESSAGE_LENGTH),
        )

    def recording_descriptor(self, control_session_id: int, correlation_id: int, catalog_bytes: bytes) -> bytes:
        """Header + live ids + the raw catalog bytes from `recordingId` to the end of the aligned entry (§4.4)."""
        return (
            _DESCRIPTOR_HEAD.pack(
                RECORDING_DESCRIPTOR_BLOCK_LENGTH,
                RECORDING_DESCRIPTOR,
                SCHEMA_ID,
                SCHEMA_VERSION,
                control_session_id,
                correlation_id,
            )
            + catalog_bytes
        )

    def recording_signal(
        self,
        control_session_id: int,
        correlation_id: int,
        recording_id: int,
        subscription_id: int,
        position: int,
        signal: RecordingSignal,
    ) -> bytes:
        return self._codec.encode(
            "RecordingSignalEvent",
            control_session_id=control_session_id,
            correlation_id=correlation_id,
            recording_id=recording_id,
            subscription_id=subscription_id,
            position=position,
            signal=int(signal),
        )

    def recording_subscription_descriptor(
        self, control_session_id: int, correlation_id: int, subscription_id: int, stream_id: int, stripped_channel: str
    ) -> bytes:
        return self._codec.encode(
            "RecordingSubscriptionDescriptor",
            control_session_id=control_session_id,
            correlation_id=correlation_id,
            subscription_id=subscription_id,
            stream_id=stream_id,
            stripped_channel=ascii_text(stripped_channel),
        )

    def time_index_samples(
        self, control_session_id: int, correlation_id: int, recording_id: int, interval_ns: int, samples: bytes
    ) -> bytes:
        """Our TimeIndexSamples (template 1003): `samples` are (timeNs, position) int64 pairs, as `.tix` files hold
        them."""
        return self._codec.encode(
            "TimeIndexSamples",
            control_session_id=control_session_id,
            correlation_id=correlation_id,
            recording_id=recording_id,
            interval_ns=interval_ns,
            samples=samples,
        )

    def challenge(self, control_session_id: int, correlation_id: int, encoded_challenge: bytes) -> bytes:
        return self._codec.encode(
            "Challenge",
            control_session_id=control_session_id,
            correlation_id=correlation_id,
            version=PROTOCOL_SEMANTIC_VERSION,
            encoded_challenge=encoded_challenge,
        )

    def ping(self, control_session_id: int) -> bytes:
        return self._codec.encode("Ping", control_session_id=control_session_id)


assert MESSAGE_HEADER_LENGTH == 8
