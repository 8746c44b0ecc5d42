"""The 16-field recording descriptor, as stored in the catalog and sent to clients."""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass
from typing import Any

from aeron_archive_spark.archive.constants import NULL_POSITION

# The RecordingDescriptor body (SBE template 22): its 80-byte block, then three ASCII var fields with u32 lengths.
# The catalog stores entries in this layout and the archive sends them as they are (after the message header).
DESCRIPTOR_BLOCK = struct.Struct("<qqqqqqqiiiiii")
DESCRIPTOR_BLOCK_LENGTH = DESCRIPTOR_BLOCK.size
_U32 = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class RecordingDescriptor:
    control_session_id: int
    correlation_id: int
    recording_id: int
    start_timestamp: int
    stop_timestamp: int
    start_position: int
    stop_position: int
    initial_term_id: int
    segment_file_length: int
    term_buffer_length: int
    mtu_length: int
    session_id: int
    stream_id: int
    stripped_channel: str
    original_channel: str
    source_identity: str

    @property
    def is_active(self) -> bool:
        """True while recording: Aeron marks an active recording with stopPosition == NULL_POSITION."""
        return self.stop_position == NULL_POSITION

    def to_json_dict(self) -> dict[str, Any]:
        """Keyed by Aeron's camelCase field names (`aeron-archive list --json`)."""
        return {_camel(k): v for k, v in asdict(self).items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


class DescriptorDecodeError(ValueError):
    """A descriptor body shorter than its block or var fields claim (corrupt entry or truncated message)."""


def descriptor_from_body(
    buffer: Any, body: int, end: int, block_length: int = DESCRIPTOR_BLOCK_LENGTH
) -> RecordingDescriptor:
    """Decode the RecordingDescriptor body at `body` (nothing past `end` belongs to it) in one pass.

    `block_length` is the sender's (a newer schema may append block fields: the var fields start after them).
    Listing a channel's recordings decodes one of these per recording, on every stream trigger, on both the
    archive (catalog) and the client: this is the generic codec's decode without its general machinery.
    """
    if block_length < DESCRIPTOR_BLOCK_LENGTH or body + block_length > end:
        raise DescriptorDecodeError(
            f"descriptor block of {block_length} bytes at offset {body} does not fit in {end - body} bytes"
        )
    values: list[Any] = list(DESCRIPTOR_BLOCK.unpack_from(buffer, body))
    cursor = body + block_length
    for _ in range(3):
        if cursor + 4 > end:
            raise DescriptorDecodeError(f"descriptor var field length at offset {cursor} is past the end {end}")
        (length,) = _U32.unpack_from(buffer, cursor)
        cursor += 4
        if cursor + length > end:
            raise DescriptorDecodeError(
                f"descriptor var field of {length} bytes at offset {cursor} is past the end {end}"
            )
        values.append(str(buffer[cursor : cursor + length], "ascii", "replace"))
        cursor += length
    descriptor = _new_descriptor(RecordingDescriptor)
    for set_field, value in zip(_FIELD_SETTERS, values, strict=True):
        set_field(descriptor, value)
    return descriptor


# A frozen dataclass's __init__ sets each field through object.__setattr__; the slots' own setters do the same
# for about two thirds of the cost (fields in declaration order, which is the wire order).
_new_descriptor = object.__new__
_FIELD_SETTERS = tuple(getattr(RecordingDescriptor, name).__set__ for name in RecordingDescriptor.__slots__)
assert RecordingDescriptor.__slots__ == tuple(f for f in RecordingDescriptor.__dataclass_fields__)
