"""Reading an archive's control response stream: Java's `ControlResponsePoller` and `RecordingDescriptorPoller`.

One poll drains up to `FRAGMENT_LIMIT` messages and decodes them; a RecordingDescriptor is decoded in one pass
straight into a `RecordingDescriptor` (`DescriptorMessage`). The connect (`async_connect`) and the connected
client (`aeron_archive.AeronArchive`) read through it alike; what a message means is theirs to say.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.codecs import CodecError, load_archive_codec
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.descriptor import (
    DESCRIPTOR_BLOCK_LENGTH,
    DescriptorDecodeError,
    RecordingDescriptor,
    descriptor_from_body,
)

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import Subscription

log = logging.getLogger(__name__)

FRAGMENT_LIMIT = 10
_SBE_HEADER_LENGTH = 8
_DESCRIPTOR_HEAD = struct.Struct("<HHHHqq")  # SBE header, then RecordingDescriptor's controlSessionId, correlationId


class DescriptorMessage:
    """A RecordingDescriptor response, decoded in one pass into the `RecordingDescriptor` it carries.

    Listing a channel's recordings brings one per recording (a stream lists them on every trigger), and the
    generic codec's message plus a copy into a `RecordingDescriptor` cost about twice as much.
    """

    __slots__ = ("control_session_id", "correlation_id", "descriptor")
    template_id = t.RECORDING_DESCRIPTOR

    def __init__(self, control_session_id: int, correlation_id: int, descriptor: RecordingDescriptor) -> None:
        self.control_session_id = control_session_id
        self.correlation_id = correlation_id
        self.descriptor = descriptor

    def __repr__(self) -> str:
        return f"DescriptorMessage({self.descriptor!r})"


class ResponsePoller:
    """Decodes what arrives on one control response subscription (see the module docstring)."""

    def __init__(self, subscription: Subscription, fragment_limit: int = FRAGMENT_LIMIT) -> None:
        self.subscription = subscription
        self._fragment_limit = fragment_limit
        self._codec = load_archive_codec()

    def decode(self, data: memoryview) -> Any:
        """A response message; a RecordingDescriptor straight into a `DescriptorMessage`."""
        if len(data) >= _DESCRIPTOR_HEAD.size:
            block_length, template_id, schema_id, _version, control_session_id, correlation_id = (
                _DESCRIPTOR_HEAD.unpack_from(data)
            )
            if (
                template_id == t.RECORDING_DESCRIPTOR
                and schema_id == self._codec.schema_id
                and block_length >= DESCRIPTOR_BLOCK_LENGTH  # else an older sender's: the codec handles those
            ):
                try:
                    descriptor = descriptor_from_body(data, _SBE_HEADER_LENGTH, len(data), block_length)
                except DescriptorDecodeError as ex:
                    raise CodecError(f"RecordingDescriptor: {ex}") from ex
                return DescriptorMessage(control_session_id, correlation_id, descriptor)
        return self._codec.decode(data)

    def poll(self) -> list[Any]:
        """The messages that arrived (up to the fragment limit), in order; undecodable ones are logged and
        dropped."""
        received: list[Any] = []

        def on_fragment(data: memoryview, header: Any) -> None:
            try:
                received.append(self.decode(data))
            except CodecError as ex:
                log.warning("undecodable message on the control response stream: %s", ex)

        self.subscription.poll(on_fragment, self._fragment_limit, with_header=False)
        return received
