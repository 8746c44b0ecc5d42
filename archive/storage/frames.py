"""Aeron data frame header layout, position arithmetic and bulk frame walking.

Segment files hold the verbatim bytes of the recorded terms, so everything in storage (writer, reader, catalog
recovery, verify, truncate) needs to walk Aeron frames. Walking a 1 MiB buffer of small frames one Python
iteration per frame costs ~13 ms; `scan_frames` walks the chain with numpy instead, in three tiers:

- fixed-size frames (a common case) are confirmed with one strided comparison;
- otherwise every 32-byte slot's frame length gives a "next slot" pointer, slots that cannot start a followable
  frame (payload bytes, mostly) are dropped, and pointer doubling over the rest enumerates the chain reachable from
  the first slot in O(log n) vectorised gathers;
- ranges of a few slots use a plain loop, which is cheaper than numpy's fixed costs there.

All header fields are little-endian (`DataHeaderFlyweight` / `HeaderFlyweight`).
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

# Header field offsets (io.aeron.protocol.DataHeaderFlyweight).
FRAME_LENGTH_FIELD_OFFSET = 0
VERSION_FIELD_OFFSET = 4
FLAGS_FIELD_OFFSET = 5
TYPE_FIELD_OFFSET = 6
TERM_OFFSET_FIELD_OFFSET = 8
SESSION_ID_FIELD_OFFSET = 12
STREAM_ID_FIELD_OFFSET = 16
TERM_ID_FIELD_OFFSET = 20
RESERVED_VALUE_OFFSET = 24
DATA_OFFSET = 32

HEADER_LENGTH = 32
FRAME_ALIGNMENT = 32
CURRENT_VERSION = 0

HDR_TYPE_PAD = 0x00
HDR_TYPE_DATA = 0x01

BEGIN_FRAG_FLAG = 0x80
END_FRAG_FLAG = 0x40
UNFRAGMENTED = BEGIN_FRAG_FLAG | END_FRAG_FLAG
EOS_FLAG = 0x20
REVOKED_FLAG = 0x10

TERM_MIN_LENGTH = 64 * 1024
TERM_MAX_LENGTH = 1024 * 1024 * 1024
MAX_MESSAGE_LENGTH = 16 * 1024 * 1024
PAGE_SIZE = 4096

_INT32_MASK = 0xFFFF_FFFF
_INT64_MASK = 0xFFFF_FFFF_FFFF_FFFF

# The (length, version, flags, type, termOffset, sessionId, streamId, termId, reservedValue) header struct.
HEADER_STRUCT = struct.Struct("<iBBHiiiiq")
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_UINT16 = struct.Struct("<H")
_SESSION_AND_STREAM = struct.Struct("<ii")  # adjacent in the header: session id, then stream id

# Below this many 32-byte slots a plain loop beats the fixed cost of the numpy path (measured: ~40 us setup).
_SMALL_SCAN_SLOTS = 48


def to_int32(value: int) -> int:
    """Wrap a Python int to a signed 32-bit value, as a Java `int` cast does."""
    value &= _INT32_MASK
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def align(value: int, alignment: int) -> int:
    """Round `value` up to a multiple of `alignment` (a power of two)."""
    return (value + alignment - 1) & -alignment


def is_power_of_two(value: int) -> bool:
    return value > 0 and (value & (value - 1)) == 0


def position_bits_to_shift(term_length: int) -> int:
    """log2(term_length); Aeron only accepts power-of-two terms in [64 KiB, 1 GiB]."""
    if not is_power_of_two(term_length) or not TERM_MIN_LENGTH <= term_length <= TERM_MAX_LENGTH:
        raise ValueError(f"term length must be a power of 2 in [{TERM_MIN_LENGTH}, {TERM_MAX_LENGTH}]: {term_length}")
    return term_length.bit_length() - 1


def compute_position(term_id: int, term_offset: int, position_bits_shift: int, initial_term_id: int) -> int:
    """Stream position of `term_offset` in `term_id`.

    The term count is computed in 32-bit arithmetic before widening (as Java does), so a term id that wrapped past
    Integer.MAX_VALUE still yields the right, increasing position.
    """
    term_count = to_int32(term_id - initial_term_id)
    return (term_count << position_bits_shift) + term_offset


def compute_term_id_from_position(position: int, position_bits_shift: int, initial_term_id: int) -> int:
    """Term id holding `position`: `(int)((position >>> shift) + initialTermId)`, wrapping like Java."""
    return to_int32(((position & _INT64_MASK) >> position_bits_shift) + initial_term_id)


def compute_term_offset(position: int, term_length: int) -> int:
    return position & (term_length - 1)


def header_matches(buf: Any, offset: int, term_offset: int, term_id: int, stream_id: int) -> bool:
    """True if the header at `offset` carries the expected term offset, term id and stream id.

    This is `ReplaySession.isInvalidHeader` inverted; the session id is deliberately not compared because
    recordings made with record checksums keep a CRC there.
    """
    _, _, _, _, frame_term_offset, _, frame_stream_id, frame_term_id, _ = HEADER_STRUCT.unpack_from(buf, offset)
    return bool(frame_term_offset == term_offset and frame_term_id == term_id and frame_stream_id == stream_id)


def buffer_length(buf: Any) -> int:
    """Length in bytes of any buffer-protocol object (bytes, bytearray, memoryview, mmap, numpy array)."""
    with memoryview(buf) as view:
        return view.nbytes


class ScanStop(Enum):
    """Why `scan_frames` stopped walking the frame chain."""

    END = "end"  # the chain consumed the range exactly
    ZERO_LENGTH = "zero_length"  # frame length <= 0: not written yet, or the end of valid data
    PADDING = "padding"  # a PAD frame starts at stop_offset (only when stop_at_padding=True)
    INCOMPLETE = "incomplete"  # the frame at stop_offset does not lie wholly inside the range


class _PaddingStop:
    """`pad_offset` and `pad_length` of a scan from where and why it stopped (shared by the scan classes)."""

    __slots__ = ()
    stop_offset: int
    stop_reason: ScanStop
    stop_frame_length: int

    @property
    def pad_offset(self) -> int:
        """Offset of the PAD frame that ended the scan, or -1."""
        return self.stop_offset if self.stop_reason is ScanStop.PADDING else -1

    @property
    def pad_length(self) -> int:
        """Frame length of the PAD frame that ended the scan, or 0."""
        return self.stop_frame_length if self.stop_reason is ScanStop.PADDING else 0


@dataclass(frozen=True, slots=True, eq=False)
class FrameScan(_PaddingStop):
    """The chain of frames found from `start`; arrays are parallel, offsets are absolute buffer offsets.

    Only a plain reference to the scanned buffer is kept (no exported buffer view), so scanning an mmap does not
    stop it from being closed; the column accessors build their numpy view on demand.
    """

    buffer: Any = field(repr=False)
    start: int
    end: int
    offsets: np.ndarray
    lengths: np.ndarray
    types: np.ndarray
    flags: np.ndarray
    stop_offset: int
    stop_reason: ScanStop
    stop_frame_length: int = 0
    # > 0 when the frames are known to lie exactly `stride` bytes apart (one fixed frame length): bulk operations
    # can then use strided views instead of gathers and scatters. 0 when unknown or mixed.
    stride: int = 0
    # A short scan's frames as the Python lists the walk built (offsets, lengths, types, flags; equal to the
    # arrays), or None. A small recording's handful of frames is decoded from them with plain Python, where
    # numpy's fixed cost per operation would be most of the work (see `archive.tables.decode`).
    frame_lists: tuple[list[int], list[int], list[int], list[int]] | None = None

    @property
    def count(self) -> int:
        return int(self.offsets.size)

    def __len__(self) -> int:
        return int(self.offsets.size)

    @property
    def bytes_consumed(self) -> int:
        """Bytes from `start` to the end of the last chained frame (aligned)."""
        return self.stop_offset - self.start

    @property
    def aligned_lengths(self) -> np.ndarray:
        return (self.lengths.astype(np.int64) + (FRAME_ALIGNMENT - 1)) & -FRAME_ALIGNMENT

    def end_of(self, count: int) -> int:
        """Bytes from `start` to the aligned end of the first `count` frames (0 for none)."""
        if count <= 0:
            return 0
        last = count - 1
        return int(self.offsets[last]) + align(int(self.lengths[last]), FRAME_ALIGNMENT) - self.start

    def count_starting_before(self, limit: int) -> int:
        """How many frames start less than `limit` bytes after `start`.

        Replay caps a batch at `replayLimit - replayPosition` this way: a frame that starts before the limit is
        sent whole, as Aeron's replay does.
        """
        return int(np.searchsorted(self.offsets, self.start + limit, side="left"))

    def head(self, count: int) -> FrameScan:
        """The scan of only the first `count` frames, i.e. of the range `[start, start + end_of(count))`."""
        if count >= self.count:
            return self
        count = max(count, 0)
        end = self.start + self.end_of(count)
        return FrameScan(
            self.buffer,
            self.start,
            end,
            self.offsets[:count],
            self.lengths[:count],
            self.types[:count],
            self.flags[:count],
            end,
            ScanStop.END,
            0,
            self.stride,
        )

    def data_offsets(self) -> np.ndarray:
        """Offsets of the DATA frames in the chain (other types are only chained with stop_at_padding=False)."""
        result: np.ndarray = self.offsets[self.types == HDR_TYPE_DATA]
        return result

    def other_frames(self, count: int) -> list[tuple[int, int, int]]:
        """(offset, length, type) of the frames among the first `count` that are not DATA (PADs, when chained)."""
        if count <= 0:
            return []
        if self.frame_lists is not None:
            offsets, lengths, types, _ = self.frame_lists
            return [
                (offsets[i], lengths[i], types[i]) for i in range(min(count, len(types))) if types[i] != HDR_TYPE_DATA
            ]
        others = np.flatnonzero(self.types[:count] != HDR_TYPE_DATA)
        if others.size == 0:
            return []
        return list(
            zip(self.offsets[others].tolist(), self.lengths[others].tolist(), self.types[others].tolist(), strict=True)
        )

    def _column(self, field_offset: int, dtype: str) -> np.ndarray:
        if self.offsets.size == 0:
            return np.empty(0, dtype=dtype)
        if self.stride > 0:  # frames a fixed stride apart: a strided copy, not a gather
            view = np.ndarray(
                (self.offsets.size,),
                dtype=dtype,
                buffer=self.buffer,
                offset=int(self.offsets[0]) + field_offset,
                strides=(self.stride,),
            )
            return view.copy()
        slots = (self.offsets - self.start) >> 5
        count = int(slots[-1]) + 1
        view = np.ndarray((count,), dtype=dtype, buffer=self.buffer, offset=self.start + field_offset, strides=(32,))
        column: np.ndarray = view[slots]
        return column

    def term_offsets(self) -> np.ndarray:
        return self._column(TERM_OFFSET_FIELD_OFFSET, "<i4")

    def session_ids(self) -> np.ndarray:
        return self._column(SESSION_ID_FIELD_OFFSET, "<i4")

    def stream_ids(self) -> np.ndarray:
        return self._column(STREAM_ID_FIELD_OFFSET, "<i4")

    def term_ids(self) -> np.ndarray:
        return self._column(TERM_ID_FIELD_OFFSET, "<i4")

    def reserved_values(self) -> np.ndarray:
        return self._column(RESERVED_VALUE_OFFSET, "<i8")

    def versions(self) -> np.ndarray:
        return self._column(VERSION_FIELD_OFFSET, "u1")


def scan_frames(buf: Any, start: int = 0, end: int | None = None, *, stop_at_padding: bool = True) -> FrameScan:
    """Walk the frame chain starting at `start` and stopping inside `[start, end)`.

    The walk follows `align(frameLength, 32)` from frame to frame and stops at the first frame with a length
    <= 0, at a PAD frame (unless `stop_at_padding` is False, in which case PAD frames are chained like any other;
    crash recovery and verify need that), or at a frame that does not lie wholly inside the range. Frames must start
    on 32-byte slots relative to `start`, as they do in terms and segment files.
    """
    size = buffer_length(buf)
    if end is None:
        end = size
    if not 0 <= start <= end <= size:
        raise ValueError(f"invalid scan range [{start}, {end}) for a buffer of {size} bytes")

    if (end - start) >> 5 <= _SMALL_SCAN_SLOTS:
        offsets, lengths, types, flags, stop_offset, reason, stop_length = _scan_loop(buf, start, end, stop_at_padding)
        return FrameScan(
            buf,
            start,
            end,
            np.array(offsets, dtype=np.int64),
            np.array(lengths, dtype=np.int32),
            np.array(types, dtype=np.uint16),
            np.array(flags, dtype=np.uint8),
            stop_offset,
            reason,
            stop_length,
            frame_lists=(offsets, lengths, types, flags),
        )
    return _scan_windows(buf, start, end, stop_at_padding)


@dataclass(frozen=True, slots=True, eq=False)
class HeadedScan(_PaddingStop):
    """The frame chain of `scan_frames_with_head`: a first frame known from a word held apart, then `rest` in place.

    It answers what a replay batch needs from a `FrameScan` (count, end, cap, padding, header rewrite) without
    joining the first frame's columns to the rest's: at 32-byte messages a batch holds ~32k frames, and copying
    four columns of that size per batch cost more than the copy the direct read saves.
    """

    start: int
    first_length: int  # the first frame's length (also when it stopped the chain: 0 or less, a PAD, incomplete)
    first_type: int
    first_flags: int
    rest: FrameScan | None  # the chain from the second frame on; None when it stopped at the first frame
    stop_offset: int
    stop_reason: ScanStop
    stop_frame_length: int

    @property
    def count(self) -> int:
        return 0 if self.rest is None else 1 + self.rest.count

    @property
    def stride(self) -> int:
        """The fixed distance between frames when known (as `FrameScan.stride`), else 0."""
        if self.rest is None:
            return 0
        aligned = align(self.first_length, FRAME_ALIGNMENT)
        return aligned if self.rest.count == 0 or self.rest.stride == aligned else 0

    def _column(self, first: int, column: np.ndarray, dtype: Any) -> np.ndarray:
        if self.rest is None:
            return np.empty(0, dtype=dtype)
        return np.concatenate((np.array([first], dtype=dtype), column.astype(dtype, copy=False)))

    @property
    def offsets(self) -> np.ndarray:
        return self._column(self.start, self.rest.offsets if self.rest else np.empty(0), np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return self._column(self.first_length, self.rest.lengths if self.rest else np.empty(0), np.int32)

    @property
    def types(self) -> np.ndarray:
        return self._column(self.first_type, self.rest.types if self.rest else np.empty(0), np.uint16)

    @property
    def flags(self) -> np.ndarray:
        return self._column(self.first_flags, self.rest.flags if self.rest else np.empty(0), np.uint8)

    def count_starting_before(self, limit: int) -> int:
        """How many frames start less than `limit` bytes after `start` (see `FrameScan.count_starting_before`)."""
        if self.rest is None or limit <= 0:
            return 0
        return 1 + self.rest.count_starting_before(self.start + limit - self.rest.start)

    def end_of(self, count: int) -> int:
        """Bytes from `start` to the aligned end of the first `count` frames (0 for none)."""
        if count <= 0 or self.rest is None:
            return 0
        return self.rest.start - self.start + self.rest.end_of(count - 1)

    def other_frames(self, count: int) -> list[tuple[int, int, int]]:
        """(offset, length, type) of the frames among the first `count` that are not DATA (PADs, when chained)."""
        if count <= 0 or self.rest is None:
            return []
        first = [(self.start, self.first_length, self.first_type)] if self.first_type != HDR_TYPE_DATA else []
        return first + self.rest.other_frames(count - 1)

    def rewrite_session_and_stream(self, buf: Any, count: int, session_id: int, stream_id: int) -> None:
        """Set the session and stream id of the first `count` frames in `buf` (the first frame's are in place too:
        only its first word was held apart)."""
        if count <= 0 or self.rest is None:
            return
        words = np.ndarray((2,), dtype="<i4", buffer=buf, offset=self.start + SESSION_ID_FIELD_OFFSET)
        words[0] = to_int32(session_id)
        words[1] = to_int32(stream_id)
        if count > 1:
            rewrite_scan_session_and_stream(buf, self.rest.head(count - 1), session_id, stream_id)


def scan_frames_with_head(
    buf: Any, first_word: int, start: int, end: int, *, stop_at_padding: bool = True
) -> HeadedScan | UniformHeadedScan:
    """`scan_frames(buf, start, end)` for a range whose first frame's first 8 bytes are held apart as `first_word`.

    A replay reads a block straight into a term at the publication's tail but diverts that word (length, version,
    flags, type), so that the frame stays invisible to readers of the term until the whole block is published; the
    term holds zeros in its place. The first frame is taken from the word, the chain from the second frame on from
    the buffer. Stops at padding unless `stop_at_padding` is False, as `scan_frames`. A chain of one fixed frame
    (every header's first word equal to the held one) comes back as a `UniformHeadedScan`, which answers the same
    questions.
    """
    size = buffer_length(buf)
    if not 0 <= start <= end <= size:
        raise ValueError(f"invalid scan range [{start}, {end}) for a buffer of {size} bytes")
    length = to_int32(first_word & _INT32_MASK)
    frame_flags = (first_word >> 40) & 0xFF
    frame_type = (first_word >> 48) & 0xFFFF
    reason: ScanStop | None = None
    if end - start < HEADER_LENGTH:
        if end - start < 4:
            reason, length = ScanStop.INCOMPLETE, 0
        else:
            reason = ScanStop.ZERO_LENGTH if length <= 0 else ScanStop.INCOMPLETE
    elif length <= 0:
        reason = ScanStop.ZERO_LENGTH
    elif stop_at_padding and frame_type == HDR_TYPE_PAD:
        reason = ScanStop.PADDING
    elif start + align(length, FRAME_ALIGNMENT) > end:
        reason = ScanStop.INCOMPLETE
    if reason is not None:
        return HeadedScan(start, length, frame_type, frame_flags, None, start, reason, length)
    uniform = _uniform_headed_scan(buf, first_word, start, end, length, frame_type, frame_flags, stop_at_padding)
    if uniform is not None:
        return uniform
    rest = scan_frames(buf, start + align(length, FRAME_ALIGNMENT), end, stop_at_padding=stop_at_padding)
    return HeadedScan(
        start, length, frame_type, frame_flags, rest, rest.stop_offset, rest.stop_reason, rest.stop_frame_length
    )


def _uniform_headed_scan(
    buf: Any,
    first_word: int,
    start: int,
    end: int,
    length: int,
    frame_type: int,
    frame_flags: int,
    stop_at_padding: bool = True,
) -> UniformHeadedScan | None:
    """The scan of `[start, end)` when every frame after the first repeats the held first word, else None.

    One strided 64-bit compare over the whole range confirms it; what is left after the last whole stride (less
    than one frame) is walked as `scan_frames` walks a window's tail. A frame of another length there, or any other
    word, leaves the range to the general scan.
    """
    stride = align(length, FRAME_ALIGNMENT)
    rest_start = start + stride
    capacity = (end - rest_start) // stride
    if capacity < _UNIFORM_PROBE:
        return None
    words = np.ndarray((capacity,), dtype="<i8", buffer=buf, offset=rest_start, strides=(stride,))
    if not bool((words == first_word).all()):
        return None
    tail = rest_start + capacity * stride
    stop_offset, reason, stop_length = tail, ScanStop.END, 0
    if tail < end:
        found, _, _, _, stop_offset, reason, stop_length = _scan_loop(buf, tail, end, stop_at_padding)
        if found:
            return None
    return UniformHeadedScan(start, length, frame_type, frame_flags, 1 + capacity, stop_offset, reason, stop_length)


@dataclass(frozen=True, slots=True, eq=False)
class UniformHeadedScan(_PaddingStop):
    """A `HeadedScan` whose frames all share one first word: one length, type and flags, `stride` bytes apart.

    Fixed-size unfragmented messages are the usual replay batch. Its answers are arithmetic and its header rewrite
    is two strided stores, so a batch costs a handful of numpy calls whatever its size: the general scan's fixed
    cost (~0.1 ms a batch, mostly numpy call overheads) was a fifth of the replayer's CPU at 1 KiB messages.
    """

    start: int
    first_length: int
    first_type: int
    first_flags: int
    count: int  # >= 1: the first frame and the chain after it
    stop_offset: int
    stop_reason: ScanStop
    stop_frame_length: int

    @property
    def stride(self) -> int:
        return align(self.first_length, FRAME_ALIGNMENT)

    @property
    def offsets(self) -> np.ndarray:
        return np.arange(self.start, self.start + self.count * self.stride, self.stride, dtype=np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.full(self.count, self.first_length, dtype=np.int32)

    @property
    def types(self) -> np.ndarray:
        return np.full(self.count, self.first_type, dtype=np.uint16)

    @property
    def flags(self) -> np.ndarray:
        return np.full(self.count, self.first_flags, dtype=np.uint8)

    def count_starting_before(self, limit: int) -> int:
        """How many frames start less than `limit` bytes after `start` (see `FrameScan.count_starting_before`)."""
        if limit <= 0:
            return 0
        stride = self.stride
        return min(self.count, (limit + stride - 1) // stride)

    def end_of(self, count: int) -> int:
        """Bytes from `start` to the aligned end of the first `count` frames (0 for none)."""
        return max(0, min(count, self.count)) * self.stride

    def other_frames(self, count: int) -> list[tuple[int, int, int]]:
        """(offset, length, type) of the frames among the first `count` that are not DATA: all or none of them."""
        count = min(count, self.count)
        if count <= 0 or self.first_type == HDR_TYPE_DATA:
            return []
        stride = self.stride
        return [(self.start + i * stride, self.first_length, self.first_type) for i in range(count)]

    def rewrite_session_and_stream(self, buf: Any, count: int, session_id: int, stream_id: int) -> None:
        """Set the session and stream id of the first `count` frames in `buf` (two strided stores)."""
        count = min(count, self.count)
        if count > 0:
            _rewrite_strided(buf, self.start, count, self.stride, session_id, stream_id)


_Parts = tuple[list[int], list[int], list[int], list[int], int, ScanStop, int]


def _scan_loop(buf: Any, start: int, end: int, stop_at_padding: bool, max_frames: int = -1) -> _Parts:
    offsets: list[int] = []
    lengths: list[int] = []
    types: list[int] = []
    flags: list[int] = []
    offset = start
    reason = ScanStop.END
    stop_length = 0
    unpack = HEADER_STRUCT.unpack_from
    while offset < end and max_frames != 0:
        if end - offset < HEADER_LENGTH:
            reason, stop_length = _classify_short_tail(buf, offset, end)
            break
        length, _, frame_flags, frame_type, *_ = unpack(buf, offset)
        if length <= 0:
            reason = ScanStop.ZERO_LENGTH
            stop_length = length
            break
        if stop_at_padding and frame_type == HDR_TYPE_PAD:
            reason = ScanStop.PADDING
            stop_length = length
            break
        aligned = align(length, FRAME_ALIGNMENT)
        if offset + aligned > end:
            reason = ScanStop.INCOMPLETE
            stop_length = length
            break
        offsets.append(offset)
        lengths.append(length)
        types.append(frame_type)
        flags.append(frame_flags)
        offset += aligned
        max_frames -= 1
    return offsets, lengths, types, flags, offset, reason, stop_length


def _classify_short_tail(buf: Any, offset: int, end: int) -> tuple[ScanStop, int]:
    """Fewer than 32 bytes remain: a frame cannot fit, but a readable zero length still means "no more data"."""
    if end - offset >= 4:
        (length,) = _INT32.unpack_from(buf, offset)
        if length <= 0:
            return ScanStop.ZERO_LENGTH, length
        return ScanStop.INCOMPLETE, length
    return ScanStop.INCOMPLETE, 0


# The vectorised walk works on windows of at most this many slots (1 MiB), so its per-thread scratch space stays
# small (~3.5 MiB) and is reused: fresh numpy temporaries of this size cost more in page faults than the walk.
_WINDOW_SLOTS = 32 * 1024
_WINDOW_BYTES = _WINDOW_SLOTS * FRAME_ALIGNMENT
_LENGTH_CLAMP = 1 << 30


class _Workspace:
    """Preallocated scratch arrays for `_scan_window`, one set per thread."""

    def __init__(self) -> None:
        slots = _WINDOW_SLOTS + 1
        max_levels = _WINDOW_SLOTS.bit_length() + 2
        self.index = np.arange(slots, dtype=np.int32)
        self.lengths = np.empty(slots, dtype=np.int32)
        self.step = np.empty(slots, dtype=np.int32)
        self.target = np.empty(slots, dtype=np.int32)
        self.rank = np.empty(slots, dtype=np.int32)
        self.live = np.empty(slots, dtype=bool)
        self.flag = np.empty(slots, dtype=bool)
        self.levels = np.empty((max_levels, slots), dtype=np.int32)
        self.frontier_a = np.empty(4 * slots, dtype=np.int32)
        self.frontier_b = np.empty(4 * slots, dtype=np.int32)
        self.gathered = np.empty(2 * slots, dtype=np.int32)


_workspaces = threading.local()


def _workspace() -> _Workspace:
    ws = getattr(_workspaces, "ws", None)
    if ws is None:
        ws = _workspaces.ws = _Workspace()
    return ws


def _scan_windows(buf: Any, start: int, end: int, stop_at_padding: bool) -> FrameScan:
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    offset = start
    reason, stop_length = ScanStop.END, 0
    uniform_stride = 0  # the stride of parts[0] when it came from _uniform_prefix (kept if later parts are empty)
    while offset < end:
        if end - offset < HEADER_LENGTH:
            reason, stop_length = _classify_short_tail(buf, offset, end)
            break
        window_end = min(end, offset + _WINDOW_BYTES)
        uniform = _uniform_prefix(buf, offset, window_end, stop_at_padding, end)
        if uniform is not None:
            if not parts:
                uniform_stride = align(int(uniform[1][0]), FRAME_ALIGNMENT)
            parts.append(uniform[:4])
            offset = uniform[4]
            if window_end - offset < HEADER_LENGTH:
                continue
        if (window_end - offset) >> 5 <= _SMALL_SCAN_SLOTS:
            # What a uniform run leaves of its window is usually less than a frame (the window's end cuts the next
            # one): walked frame by frame, as scan_frames walks a small range. The vectorised walk's fixed cost is
            # ~0.1 ms, as much as the uniform scan of the whole 1 MiB window before it.
            o, ln, ty, fl, offset, reason, stop_length = _scan_loop(buf, offset, window_end, stop_at_padding)
            if o:
                parts.append(
                    (np.array(o, np.int64), np.array(ln, np.int32), np.array(ty, np.uint16), np.array(fl, np.uint8))
                )
        else:
            offsets, lengths, types, flags, offset, reason, stop_length = _scan_window(
                buf, offset, window_end, stop_at_padding
            )
            parts.append((offsets, lengths, types, flags))
        if window_end == end or reason not in (ScanStop.END, ScanStop.INCOMPLETE):
            break
        if reason is ScanStop.INCOMPLETE:
            aligned = align(stop_length, FRAME_ALIGNMENT)
            if offset + aligned > end:
                break  # genuinely incomplete within the caller's range
            if aligned > _WINDOW_BYTES:
                # A frame bigger than a window (a long PAD when chaining padding): take it as it stands.
                o, ln, ty, fl, _, _, _ = _scan_loop(buf, offset, end, stop_at_padding, max_frames=1)
                parts.append(
                    (np.array(o, np.int64), np.array(ln, np.int32), np.array(ty, np.uint16), np.array(fl, np.uint8))
                )
                offset += aligned
        reason, stop_length = ScanStop.END, 0

    if len(parts) == 1:
        offsets, lengths_out, types_out, flags_out = parts[0]
    elif not parts:
        offsets = np.empty(0, np.int64)
        lengths_out, types_out, flags_out = np.empty(0, np.int32), np.empty(0, np.uint16), np.empty(0, np.uint8)
    else:
        offsets = np.concatenate([p[0] for p in parts])
        lengths_out = np.concatenate([p[1] for p in parts])
        types_out = np.concatenate([p[2] for p in parts])
        flags_out = np.concatenate([p[3] for p in parts])
    stride = uniform_stride if all(part[0].size == 0 for part in parts[1:]) else 0
    return FrameScan(buf, start, end, offsets, lengths_out, types_out, flags_out, offset, reason, stop_length, stride)


_UNIFORM_PROBE = 8


def _uniform_prefix(
    buf: Any, start: int, end: int, stop_at_padding: bool, extend_to: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int] | None:
    """Frames of one fixed length from `start`, checked with a single strided comparison.

    Fixed-size messages are common (market data, benchmarks); their chain is an arithmetic progression, so it can
    be confirmed in O(frames) without pointer doubling. Returns None unless at least a probe's worth of frames
    match, so mixed-size data pays only for the short probe. When the whole of `[start, end)` repeats one header
    word, the run is followed on towards `extend_to` (in doubling steps, so a run that stops soon costs little):
    one window's limit would otherwise cut a long uniform range into windows whose tails need walking and whose
    columns need joining, ~0.1 ms each in numpy call overheads.
    """
    if end - start < HEADER_LENGTH * _UNIFORM_PROBE:
        return None
    (first_length,) = _INT32.unpack_from(buf, start)
    if first_length <= 0:
        return None
    stride = align(first_length, FRAME_ALIGNMENT)
    capacity = (end - start) // stride
    if capacity < _UNIFORM_PROBE:
        return None
    lengths_view = np.ndarray((capacity,), dtype="<i4", buffer=buf, offset=start, strides=(stride,))
    matches = lengths_view[:_UNIFORM_PROBE] == first_length
    if stop_at_padding:
        types_view = np.ndarray(
            (capacity,), dtype="<u2", buffer=buf, offset=start + TYPE_FIELD_OFFSET, strides=(stride,)
        )
        matches &= types_view[:_UNIFORM_PROBE] != HDR_TYPE_PAD
    if not matches.all():
        return None
    # The first 8 header bytes are length, version, flags and type: when they are the same in every frame (fixed-size
    # unfragmented messages, the usual case), one strided 64-bit compare confirms the whole window and the columns
    # are constants; no strided gathers.
    (first_word,) = _INT64.unpack_from(buf, start)
    words_view = np.ndarray((capacity,), dtype="<i8", buffer=buf, offset=start, strides=(stride,))
    if bool((words_view == first_word).all()):
        if extend_to > end:
            capacity = _uniform_run(buf, start, stride, first_word, capacity, (extend_to - start) // stride)
        return (
            np.arange(start, start + capacity * stride, stride, dtype=np.int64),
            np.full(capacity, first_length, dtype=np.int32),
            np.full(capacity, (first_word >> 48) & 0xFFFF, dtype=np.uint16),
            np.full(capacity, (first_word >> 40) & 0xFF, dtype=np.uint8),
            start + capacity * stride,
        )
    matches = lengths_view == first_length
    if stop_at_padding:
        matches &= types_view != HDR_TYPE_PAD
    count = capacity if matches.all() else int(np.argmin(matches))
    types_all = np.ndarray((count,), dtype="<u2", buffer=buf, offset=start + TYPE_FIELD_OFFSET, strides=(stride,))
    flags_all = np.ndarray((count,), dtype="u1", buffer=buf, offset=start + FLAGS_FIELD_OFFSET, strides=(stride,))
    offsets = np.arange(start, start + count * stride, stride, dtype=np.int64)
    return (
        offsets,
        np.full(count, first_length, dtype=np.int32),
        types_all.astype(np.uint16),
        flags_all.copy(),
        start + count * stride,
    )


def _uniform_run(buf: Any, start: int, stride: int, word: int, count: int, limit: int) -> int:
    """How many frames from `start`, `stride` apart, begin with `word`: `count` known so, at most `limit`."""
    step = count
    while count < limit:
        n = min(step, limit - count)
        matches = np.ndarray((n,), dtype="<i8", buffer=buf, offset=start + count * stride, strides=(stride,)) == word
        if not bool(matches.all()):
            return count + int(np.argmin(matches))
        count += n
        step *= 2
    return count


def _scan_window(
    buf: Any, start: int, end: int, stop_at_padding: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, ScanStop, int]:
    ws = _workspace()
    n = (end - start) >> 5
    lengths_view = np.ndarray((n,), dtype="<i4", buffer=buf, offset=start, strides=(32,))
    types_view = np.ndarray((n,), dtype="<u2", buffer=buf, offset=start + TYPE_FIELD_OFFSET, strides=(32,))

    # A slot is "live" if a frame there could be followed: positive length, wholly inside the window and (unless
    # padding is chained) not PAD. Its successor is the slot align(length, 32) further on.
    lengths = ws.lengths[:n]
    np.minimum(lengths_view, _LENGTH_CLAMP, out=lengths)  # garbage lengths near 2**31 must not overflow int32
    step = ws.step[:n]
    np.add(lengths, FRAME_ALIGNMENT - 1, out=step)
    np.right_shift(step, 5, out=step)
    target = ws.target[:n]
    np.add(step, ws.index[:n], out=target)
    live = ws.live[: n + 1]
    flag = ws.flag[:n]
    np.greater(lengths, 0, out=live[:n])
    np.less_equal(target, n, out=flag)
    live[:n] &= flag
    if stop_at_padding:
        np.not_equal(types_view, HDR_TYPE_PAD, out=flag)
        live[:n] &= flag
    live[n] = False

    if not live[0]:
        last_slot = 0
        offsets = np.empty(0, dtype=np.int64)
        slots = offsets
    else:
        # Compact the graph to the live slots (payload bytes mostly read as dead slots): node j is the j-th live
        # slot and node m is one shared terminal for every edge that leaves the live set.
        live_slots = np.flatnonzero(live[:n])
        m = live_slots.size
        rank = ws.rank[: n + 1]
        np.cumsum(live, out=rank)
        live_targets = target[live_slots]
        jump = ws.levels[0, : m + 1]
        np.subtract(rank[live_targets], 1, out=jump[:m])
        jump[:m][~live[live_targets]] = m
        jump[m] = m

        # Pointer doubling: levels[k][j] = node reached from j after 2**k frames. Stop once the walk from node 0
        # has reached the terminal, so the level count is log2 of the chain length rather than of the window.
        level = 0
        current = jump
        while int(current[0]) != m:
            following = ws.levels[level + 1, : m + 1]
            np.take(current, current, out=following, mode="clip")
            current = following
            level += 1

        # Expand from the top level down, interleaving so the frontier stays in walk order: after level k it holds
        # the nodes of frames 0, 2**k, 2*2**k, ... followed by copies of the terminal.
        frontier, merged, gathered = ws.frontier_a, ws.frontier_b, ws.gathered
        frontier[0] = 0
        count = 1
        for k in range(level, -1, -1):
            np.take(ws.levels[k, : m + 1], frontier[:count], out=gathered[:count], mode="clip")
            merged[0 : 2 * count : 2] = frontier[:count]
            merged[1 : 2 * count : 2] = gathered[:count]
            frontier, merged = merged, frontier
            count *= 2
        ordered = frontier[:count]
        chain_length = int(np.searchsorted(ordered, m))  # live node ids increase along the walk
        slots = live_slots[ordered[:chain_length]]
        last_slot = int(live_targets[int(ordered[chain_length - 1])])
        offsets = np.empty(chain_length, dtype=np.int64)
        np.left_shift(slots, 5, out=offsets)
        offsets += start

    stop_offset = start + (last_slot << 5)
    stop_length = 0
    if last_slot == n:
        if stop_offset == end:
            reason = ScanStop.END
        else:
            reason, stop_length = _classify_short_tail(buf, stop_offset, end)
    else:
        stop_length = int(lengths_view[last_slot])
        if stop_length <= 0:
            reason = ScanStop.ZERO_LENGTH
        elif stop_at_padding and int(types_view[last_slot]) == HDR_TYPE_PAD:
            reason = ScanStop.PADDING
        else:
            reason = ScanStop.INCOMPLETE

    flags_view = np.ndarray((n,), dtype="u1", buffer=buf, offset=start + FLAGS_FIELD_OFFSET, strides=(32,))
    return (
        offsets,
        lengths[slots],
        types_view[slots].astype(np.uint16),
        flags_view[slots],
        stop_offset,
        reason,
        stop_length,
    )


def rewrite_session_and_stream(buf: Any, frame_offsets: Any, session_id: int, stream_id: int) -> None:
    """Overwrite the session id and stream id of the frames at `frame_offsets`, in one numpy scatter.

    Replay needs this for every frame it offers (the replay publication has its own session id and stream id).
    """
    offsets = np.asarray(frame_offsets, dtype=np.intp)
    if offsets.size == 0:
        return
    size = buffer_length(buf)
    residue = int(offsets[0]) & 3
    if np.any((offsets & 3) != residue):
        raise ValueError("frame offsets must share the same 4-byte alignment")
    if int(offsets.min()) < 0 or int(offsets.max()) + HEADER_LENGTH > size:
        raise ValueError("frame offset out of range of the buffer")
    words = np.ndarray(((size - residue) >> 2,), dtype="<i4", buffer=buf, offset=residue)
    base = (offsets - residue) >> 2
    words[base + (SESSION_ID_FIELD_OFFSET >> 2)] = to_int32(session_id)
    words[base + (STREAM_ID_FIELD_OFFSET >> 2)] = to_int32(stream_id)


def rewrite_scan_session_and_stream(buf: Any, scan: FrameScan, session_id: int, stream_id: int) -> None:
    """`rewrite_session_and_stream` for every frame of `scan` (PADs included: a replayed PAD carries the replay's ids,
    as the one Java's `appendPadding` writes does).

    Frames a fixed stride apart (`scan.stride`) are rewritten through two strided views, several times faster than
    the scatter of the general case, which handles the rest.
    """
    count = scan.count
    stride = scan.stride
    if count == 0:
        return
    if scan.frame_lists is not None:  # a short scan's handful of frames: numpy's fixed costs would dominate
        offsets = scan.frame_lists[0]
        if offsets[0] < 0 or offsets[-1] + HEADER_LENGTH > buffer_length(buf):
            raise ValueError("frame offset out of range of the buffer")
        pack = _SESSION_AND_STREAM.pack_into
        session, stream = to_int32(session_id), to_int32(stream_id)
        for offset in offsets:
            pack(buf, offset + SESSION_ID_FIELD_OFFSET, session, stream)
        return
    if stride <= 0:
        rewrite_session_and_stream(buf, scan.offsets, session_id, stream_id)
        return
    _rewrite_strided(buf, int(scan.offsets[0]), count, stride, session_id, stream_id)


def _rewrite_strided(buf: Any, first: int, count: int, stride: int, session_id: int, stream_id: int) -> None:
    """Session and stream ids of `count` frames `stride` apart from `first`: two strided stores.

    (One unaligned 64-bit store over both fields measured slower at 64-byte frames: 86 against 53 us a MiB.)
    """
    if first < 0 or first + (count - 1) * stride + HEADER_LENGTH > buffer_length(buf):
        raise ValueError("frame offset out of range of the buffer")
    for field_offset, value in ((SESSION_ID_FIELD_OFFSET, session_id), (STREAM_ID_FIELD_OFFSET, stream_id)):
        column = np.ndarray((count,), dtype="<i4", buffer=buf, offset=first + field_offset, strides=(stride,))
        column[...] = to_int32(value)


# The longest frame a publication writes: one MTU, at most a UDP datagram's payload (Aeron's MAX_UDP_PAYLOAD_LENGTH).
MAX_FRAME_LENGTH = 65504


def pad_body_is_clear(buf: Any, offset: int, frame_length: int, end: int) -> bool:
    """Whether the bytes after the header of the PAD frame at `offset`, as far as `end`, are all zero.

    Why this tells damage from padding: a recorder (Java's `RecordingWriter`, and ours) writes only a PAD's 32-byte
    header, into segment files that read as zeros everywhere else (created at their full length; truncation
    re-extends them with zeros), so every PAD an archive records, wherever it lies in its term, has a zero body. A
    DATA frame whose type field was hit keeps its payload. Only the first `MAX_FRAME_LENGTH` bytes can hold a
    payload (no frame is longer), so a long PAD's body is not read further. A damaged frame whose payload is all
    zeros cannot be told apart: it is padding, as Java's replay would treat it.
    """
    body_start = offset + HEADER_LENGTH
    body_end = min(offset + align(frame_length, FRAME_ALIGNMENT), end, offset + MAX_FRAME_LENGTH)
    if body_end <= body_start:
        return True
    body = np.frombuffer(buf, dtype=np.uint8, count=body_end - body_start, offset=body_start)
    return not bool(body.any())


def frame_type_at(buf: Any, offset: int) -> int:
    value: int = _UINT16.unpack_from(buf, offset + TYPE_FIELD_OFFSET)[0]
    return value


def frame_length_at(buf: Any, offset: int) -> int:
    value: int = _INT32.unpack_from(buf, offset + FRAME_LENGTH_FIELD_OFFSET)[0]
    return value


def frame_session_id_at(buf: Any, offset: int) -> int:
    value: int = _INT32.unpack_from(buf, offset + SESSION_ID_FIELD_OFFSET)[0]
    return value
