"""Whole messages read through the replay reader: fragments joined, padding skipped.

For callers that want a recording's messages as bytes rather than as frames or table rows (the Spark sink's log
of commits reads its records this way). Only DATA frames carry messages; a message fragmented over several frames
is joined from its BEGIN fragment to its END fragment, as Aeron's `FragmentAssembler` does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from aeron_archive_spark.archive.client.replay.reader import ReplayReader
from aeron_archive_spark.archive.client.replay.span import ReplaySpan
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.frames import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HEADER_LENGTH,
    ScanStop,
    align,
)

_FRAME_LENGTH = struct.Struct("<i")


def read_messages(reader: ReplayReader, span: ReplaySpan) -> Iterator[tuple[int, bytes]]:
    """`(position, payload)` of every message that begins in `[span.start, span.end)`, in order; `position` is
    where its first frame starts. Fragments before the first BEGIN (the span starts inside a message) are skipped.

    A message still open where the data ends, or data that ends before `span.end`, raises `ArchiveError` naming the
    recording and the position: the recording was truncated or purged while it was read.
    """
    pending: list[bytes] | None = None
    pending_position = 0
    next_position = span.start
    chunks = reader.read(span)
    try:
        for chunk, position, scan in chunks:
            offsets, lengths, types, flags = (a.tolist() for a in (scan.offsets, scan.lengths, scan.types, scan.flags))
            for offset, length, kind, flag in zip(offsets, lengths, types, flags, strict=True):
                frame_position = position + offset
                if kind != HDR_TYPE_DATA:
                    continue
                if pending is None and frame_position >= span.end:
                    return
                if flag & BEGIN_FRAG_FLAG:
                    pending, pending_position = [], frame_position
                if pending is not None:
                    pending.append(bytes(chunk[offset + HEADER_LENGTH : offset + length]))
                    if flag & END_FRAG_FLAG:
                        yield pending_position, b"".join(pending)
                        pending = None
            next_position = position + scan.stop_offset
            if scan.stop_reason is ScanStop.INCOMPLETE and len(chunk) - scan.stop_offset >= HEADER_LENGTH:
                # A PAD cut after its header: the next chunk starts where it ends.
                pad_length = _FRAME_LENGTH.unpack_from(chunk, scan.stop_offset)[0]
                next_position += align(pad_length, FRAME_ALIGNMENT)
    finally:
        chunks.close()
    where = f"recording {span.recording_id} ({span.describe()})"
    if pending is not None:
        raise ArchiveError(
            f"{where}: the message beginning at position {pending_position} is incomplete at position {next_position}"
        )
    if next_position < span.end:
        raise ArchiveError(f"{where}: data ends at position {next_position}, before the end {span.end}")
