"""Record checksums (`io.aeron.archive.checksum`): CRC-32 and CRC-32C over each DATA frame's payload.

With record checksums on, the recorder replaces each DATA frame's session id with the CRC of
`[frame + 32, frame + align(frameLength, 32))` (payload plus alignment padding) before writing it, and replay
recomputes it before rewriting the session id. The values are Java ints, so they are kept as signed int32 here
to compare equal with what a Java archive stored.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import crc32c as _crc32c
import numpy as np

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HEADER_LENGTH,
    SESSION_ID_FIELD_OFFSET,
    FrameScan,
    align,
    buffer_length,
    scan_frames,
    to_int32,
)


@runtime_checkable
class Checksum(Protocol):
    """`io.aeron.archive.checksum.Checksum`: a 32-bit checksum of `length` bytes at `offset` of `buffer`."""

    name: str

    def compute(self, buffer: Any, offset: int, length: int) -> int: ...


def _byte_range(buffer: Any, offset: int, length: int) -> memoryview:
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if offset < 0 or length < 0 or offset + length > view.nbytes:
        raise ValueError(f"checksum range [{offset}, {offset + length}) outside a buffer of {view.nbytes} bytes")
    return view[offset : offset + length]


class Crc32:
    """CRC-32 (zlib polynomial), what `io.aeron.archive.checksum.Crc32` computes."""

    name = "CRC-32"

    def compute(self, buffer: Any, offset: int, length: int) -> int:
        return to_int32(zlib.crc32(_byte_range(buffer, offset, length)))

    def __repr__(self) -> str:
        return "Crc32()"


class Crc32c:
    """CRC-32C (Castagnoli), what `io.aeron.archive.checksum.Crc32c` computes; hardware-accelerated when possible."""

    name = "CRC-32C"

    def compute(self, buffer: Any, offset: int, length: int) -> int:
        return to_int32(_crc32c.crc32c(_byte_range(buffer, offset, length)))

    def __repr__(self) -> str:
        return "Crc32c()"


_CRC32_NAMES = frozenset({"CRC-32", "io.aeron.archive.checksum.Crc32", "org.agrona.checksum.Crc32"})
_CRC32C_NAMES = frozenset({"CRC-32C", "io.aeron.archive.checksum.Crc32c", "org.agrona.checksum.Crc32c"})


def checksum_for_name(name: str) -> Checksum:
    """The checksum for an `aeron.archive.record.checksum` / `replay.checksum` value.

    Accepts the names a Java archive accepts for its built-in implementations (the short names case-insensitively),
    so the same configuration string works for both archives.
    """
    key = name.strip()
    if key in _CRC32_NAMES or key.upper() in ("CRC-32", "CRC32"):
        return Crc32()
    if key in _CRC32C_NAMES or key.upper() in ("CRC-32C", "CRC32C"):
        return Crc32c()
    raise ValueError(
        f"unsupported checksum {name!r}: expected CRC-32 / io.aeron.archive.checksum.Crc32 or "
        "CRC-32C / io.aeron.archive.checksum.Crc32c"
    )


def frame_checksum(checksum: Checksum, buf: Any, frame_offset: int, frame_length: int) -> int:
    """Checksum of one frame's payload plus alignment padding, as stored in its session-id field."""
    aligned = align(frame_length, FRAME_ALIGNMENT)
    return checksum.compute(buf, frame_offset + HEADER_LENGTH, aligned - HEADER_LENGTH)


def apply_record_checksums(block: Any, checksum: Checksum, length: int | None = None) -> int:
    """Store each DATA frame's checksum in its session-id field, in place; returns the number of frames done.

    `block` must be writable (bytearray, writable memoryview or numpy array) and hold whole frames from offset 0,
    as the blocks handed to the recorder do.
    """
    end = buffer_length(block) if length is None else length
    scan = scan_frames(block, 0, end)
    offsets = scan.data_offsets()
    if offsets.size == 0:
        return 0
    data_lengths = scan.lengths[scan.types == HDR_TYPE_DATA]
    compute = checksum.compute
    values = np.fromiter(
        (
            compute(block, off + HEADER_LENGTH, align(ln, FRAME_ALIGNMENT) - HEADER_LENGTH)
            for off, ln in zip(offsets.tolist(), data_lengths.tolist(), strict=True)
        ),
        dtype=np.int32,
        count=offsets.size,
    )
    residue = int(offsets[0]) & 3
    size = buffer_length(block)
    words = np.ndarray(((size - residue) >> 2,), dtype="<i4", buffer=block, offset=residue)
    words[((offsets - residue) >> 2) + (SESSION_ID_FIELD_OFFSET >> 2)] = values
    return int(offsets.size)


@dataclass(frozen=True, slots=True)
class ChecksumMismatch:
    position: int
    frame_offset: int
    recorded: int
    computed: int

    @property
    def message(self) -> str:
        return (
            f"CRC checksum mismatch at position={self.position}: recorded checksum={self.recorded}, "
            f"computed checksum={self.computed}"
        )


def find_checksum_mismatch(
    buf: Any, scan: FrameScan, checksum: Checksum, base_position: int
) -> ChecksumMismatch | None:
    """The first DATA frame of `scan` whose stored checksum differs, or None; `base_position` is buffer offset 0's."""
    offsets = scan.data_offsets()
    if offsets.size == 0:
        return None
    lengths = scan.lengths[scan.types == HDR_TYPE_DATA].tolist()
    recorded = scan.session_ids()[scan.types == HDR_TYPE_DATA].tolist()
    compute = checksum.compute
    for off, ln, stored in zip(offsets.tolist(), lengths, recorded, strict=True):
        computed = compute(buf, off + HEADER_LENGTH, align(ln, FRAME_ALIGNMENT) - HEADER_LENGTH)
        if computed != stored:
            return ChecksumMismatch(base_position + off, off, stored, computed)
    return None


def first_checksum_mismatch(buf: Any, scan: FrameScan, checksum: Checksum) -> int:
    """Buffer offset of the first DATA frame of `scan` whose stored checksum is wrong, or -1."""
    mismatch = find_checksum_mismatch(buf, scan, checksum, 0)
    return -1 if mismatch is None else mismatch.frame_offset


def verify_record_checksums(buf: Any, scan: FrameScan, checksum: Checksum, base_position: int) -> None:
    """Raise ArchiveError (GENERIC, as Aeron's replay does) naming the position of the first mismatching frame."""
    mismatch = find_checksum_mismatch(buf, scan, checksum, base_position)
    if mismatch is not None:
        raise ArchiveError(mismatch.message, ErrorCode.GENERIC)
