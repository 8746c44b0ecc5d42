"""Chunks of recorded frames -> Arrow record batches of whole messages, one row per message.

The hot path (unfragmented messages, the vast majority) has no Python loop per message: `scan_frames` gives the
frame columns, the fixed columns are numpy arrays, and the `value` column is built as an Arrow `binary_view` over
the chunk itself (16-byte views computed with numpy: length + 4-byte prefix + offset, or the payload inlined when
it is <= 12 bytes) and then cast to `binary`, which copies the payloads in C. Measured on 4 MiB chunks this is
~7-12 GB/s for 64 B..1 KiB payloads, against ~0.3 GB/s for a numpy byte mask or gather index. A chunk of a few
messages (a small recording: one batch per recording) pays fixed costs instead, kept down: a handful of values are
joined rather than cast, and columns are built from their buffers rather than through `pa.array`'s inference; read
with other small ranges (`read_ranges`), its rows stay numpy columns (`DecodedRows`) until the merged batch is built.

Fragmented messages (rare) are reassembled with a Python loop over their fragments only. A partition owns the
messages that BEGIN in `[start, end)`: leading continuation fragments (the partition starts at a term boundary
inside a message) are skipped, and the last message begun before `end` is read to completion past `end`.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.frames import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    HEADER_STRUCT,
    RESERVED_VALUE_OFFSET,
    UNFRAGMENTED,
    FrameScan,
    ScanStop,
    align,
    compute_term_id_from_position,
    frame_type_at,
    position_bits_to_shift,
    scan_frames,
)
from aeron_archive_spark.archive.storage.time_index import TimeIndex
from aeron_archive_spark.archive.tables.chunks import ChunkSource
from aeron_archive_spark.archive.tables.payload import PayloadDecoder
from aeron_archive_spark.archive.tables.ranges import ReadRange
from aeron_archive_spark.archive.tables.schema import FIXED_FIELDS

log = logging.getLogger(__name__)

_BYTE_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)
_INLINE = 12  # Arrow binary_view keeps values of <= 12 bytes inside the view itself
# Up to this many values, `binary_column` joins their bytes in Python: cheaper than casting a view (measured: 4
# values 9 us against 30 us; even at 32).
_JOIN_MAX_VALUES = 16
_BINARY = pa.binary()
_RESERVED = struct.Struct("<q")
_INT64 = pa.int64()
_INT32 = pa.int32()
_FIXED_SCHEMA = pa.schema(FIXED_FIELDS)
_TIMESTAMP = _FIXED_SCHEMA.field("timestamp").type

# Batches smaller than this (tiny replay chunks) are merged before being handed to Spark, whose per-batch cost
# would otherwise dominate.
MIN_BATCH_BYTES = 1024 * 1024


def timestamp_column(times: TimeIndex | None, positions: np.ndarray) -> pa.Array:
    """The `timestamp` column of messages at `positions`: when the archive recorded each (µs since the epoch, UTC),
    null where the time index does not date it."""
    if times is None or times.is_empty:
        return pa.nulls(int(positions.size), _TIMESTAMP)
    return _timestamps_of(times.times_at(np.ascontiguousarray(positions, dtype=np.int64)))


def _timestamps_of(ns: np.ndarray) -> pa.Array:
    """Epoch ns (-1: unknown) as the `timestamp` column (µs, null where unknown)."""
    micros = ns // 1000
    if ns.size and int(ns.min()) < 0:
        return pa.array(micros, type=_TIMESTAMP, mask=ns < 0)
    return pa.Array.from_buffers(_TIMESTAMP, int(ns.size), [None, pa.py_buffer(micros)])


def binary_column(chunk: np.ndarray, starts: np.ndarray, lengths: np.ndarray, stride: int = 0) -> pa.Array:
    """`binary` array of `chunk[starts[i] : starts[i] + lengths[i]]`, built without a Python loop (up to
    `_JOIN_MAX_VALUES` values, joined by `_joined_binary`: a loop over a handful costs less than the cast).

    `starts` must be 4-byte aligned (payloads start 32 bytes into 32-byte-aligned frames), and every start but a
    zero-length value's lies inside `chunk`. `stride` > 0 says the values are all of one length and `stride` bytes
    apart (frames of one fixed length, `FrameScan.stride`): they are then copied out as the rows of one strided
    2-D view, 1.3-1.5x faster than the view-and-cast at 1 KiB and 2.5-6x at 32 bytes or less.
    """
    n = int(starts.size)
    if n == 0:
        return pa.array([], pa.binary())
    if n <= _JOIN_MAX_VALUES:
        return _joined_binary(chunk, starts, lengths)
    if stride > 0:
        return _strided_binary(chunk, int(starts[0]), int(lengths[0]), n, stride)
    size = int(chunk.size)
    words = chunk[: size & ~3].view(np.uint32) if size >= 4 else np.zeros(1, np.uint32)
    plen = lengths.astype(np.int32, copy=False)
    word_index = starts >> 2
    last = words.size - 1
    views = np.empty((n, 4), dtype=np.uint32)
    views[:, 0] = plen.view(np.uint32)
    first = words[np.minimum(word_index, last)]
    short = plen <= _INLINE
    n_short = int(np.count_nonzero(short))
    if n_short == 0:
        views[:, 1] = first
        views[:, 2] = 0  # data buffer index
        views[:, 3] = starts.astype(np.uint32)
    else:
        inline1 = first & _BYTE_MASKS[np.clip(plen, 0, 4)]
        inline2 = words[np.minimum(word_index + 1, last)] & _BYTE_MASKS[np.clip(plen - 4, 0, 4)]
        inline3 = words[np.minimum(word_index + 2, last)] & _BYTE_MASKS[np.clip(plen - 8, 0, 4)]
        if n_short == n:
            views[:, 1] = inline1
            views[:, 2] = inline2
            views[:, 3] = inline3
        else:
            views[:, 1] = np.where(short, inline1, first)
            views[:, 2] = np.where(short, inline2, 0)
            views[:, 3] = np.where(short, inline3, starts.astype(np.uint32))
    array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(chunk)])
    return array.cast(pa.binary())


def _strided_binary(chunk: np.ndarray, start: int, length: int, n: int, stride: int) -> pa.Array:
    """`n` values of `length` bytes from `start`, `stride` bytes apart: one copy of a strided 2-D view's rows."""
    # The copy goes into a buffer of Arrow's memory pool, as the cast's output would: the pool reuses freed memory,
    # where a fresh numpy array of a few MiB per chunk would be fresh pages, faulted in one by one.
    data = pa.allocate_buffer(n * length)
    if length:
        rows = np.ndarray((n, length), dtype=np.uint8, buffer=chunk, offset=start, strides=(stride, 1))
        np.copyto(np.frombuffer(data, dtype=np.uint8).reshape(n, length), rows)
    offsets = np.arange(0, (n + 1) * length, length, dtype=np.int32) if length else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(_BINARY, n, [None, pa.py_buffer(offsets), data])


def _joined_binary(chunk: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """`binary_column` for a few values: their bytes joined in Python, cheaper than the view-and-cast path's fixed
    cost (a compute-kernel dispatch) for a handful of values (a small recording's few messages)."""
    n = int(starts.size)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    np.cumsum(lengths, out=offsets[1:])
    data = _joined_values(chunk, starts, lengths)
    return pa.Array.from_buffers(_BINARY, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _joined_values(chunk: Any, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The bytes of a few values of `chunk`, one after the other (a copy: nothing points into `chunk` after)."""
    view = memoryview(chunk)
    return b"".join([view[s : s + length] for s, length in zip(starts.tolist(), lengths.tolist(), strict=True)])


def _int_array(values: np.ndarray, dtype: type[np.integer], arrow_type: pa.DataType) -> pa.Array:
    """`pa.array(values)` for an integer column without nulls, without its type inference (a fixed cost that
    dominates small batches): zero-copy when `values` is already contiguous `dtype`."""
    values = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(arrow_type, int(values.size), [None, pa.py_buffer(values)])


class DecodedRows:
    """A few rows of the fixed columns not yet made Arrow arrays: a small range's messages (`RangeDecoder` with
    `defer_small`), to be built into one record batch with their neighbours' by `merge_decoded`.

    A partition of many small recordings decodes a handful of messages per range; building six Arrow arrays and a
    record batch for each range, then merging those batches, cost more than decoding them (~0.15 of ~0.3 ms per
    range in-process). Held as lists of ints and joined bytes, they are concatenated and built once per merged
    batch.
    """

    __slots__ = (
        "data",
        "lengths",
        "nbytes",
        "num_rows",
        "positions",
        "recording_id",
        "reserved",
        "session_id",
        "stream_id",
        "times",
    )

    def __init__(
        self,
        recording_id: int,
        session_id: int,
        stream_id: int,
        positions: list[int],
        reserved: list[int],
        lengths: list[int],
        data: bytes,
        times: TimeIndex | None = None,
    ) -> None:
        self.recording_id, self.session_id, self.stream_id = recording_id, session_id, stream_id
        self.positions, self.reserved, self.lengths, self.data = positions, reserved, lengths, data
        self.times = times  # the recording's time index, which dates the rows when they are built
        self.num_rows = len(positions)
        # What the built columns will hold: four 8-byte and two 4-byte values, a 4-byte offset and the value, a row.
        self.nbytes = self.num_rows * 44 + len(data)


def _rows_batch(rows: list[DecodedRows]) -> pa.RecordBatch:
    """One record batch of the fixed columns (`FIXED_FIELDS`) of `rows`, in order."""
    counts = np.fromiter((r.num_rows for r in rows), dtype=np.int64, count=len(rows))
    n = int(counts.sum())
    ids = np.repeat(np.fromiter((r.recording_id for r in rows), dtype=np.int64, count=len(rows)), counts)
    sessions = np.repeat(np.fromiter((r.session_id for r in rows), dtype=np.int32, count=len(rows)), counts)
    streams = np.repeat(np.fromiter((r.stream_id for r in rows), dtype=np.int32, count=len(rows)), counts)
    positions = np.fromiter(chain.from_iterable(r.positions for r in rows), dtype=np.int64, count=n)
    reserved = np.fromiter(chain.from_iterable(r.reserved for r in rows), dtype=np.int64, count=n)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    np.cumsum(np.fromiter(chain.from_iterable(r.lengths for r in rows), dtype=np.int32, count=n), out=offsets[1:])
    values = pa.Array.from_buffers(
        _BINARY, n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join([r.data for r in rows]))]
    )
    columns = [
        _int_array(ids, np.int64, _INT64),
        _int_array(positions, np.int64, _INT64),
        _int_array(sessions, np.int32, _INT32),
        _int_array(streams, np.int32, _INT32),
        _int_array(reserved, np.int64, _INT64),
        values,
        _rows_timestamps(rows, positions),
    ]
    return pa.RecordBatch.from_arrays(columns, names=_FIXED_SCHEMA.names)


def _rows_timestamps(rows: list[DecodedRows], positions: np.ndarray) -> pa.Array:
    """The `timestamp` column of `rows` (of several recordings, each dated by its own time index): one array built
    once, not one per recording concatenated (a partition of many small recordings merges hundreds)."""
    if len(rows) == 1 or all(r.times is rows[0].times for r in rows):
        return timestamp_column(rows[0].times, positions)
    ns = np.full(int(positions.size), -1, dtype=np.int64)
    at = 0
    for r in rows:
        if r.times is not None and not r.times.is_empty:
            ns[at : at + r.num_rows] = r.times.times_at(positions[at : at + r.num_rows])
        at += r.num_rows
    return _timestamps_of(ns)


def merge_decoded(items: list[pa.RecordBatch | DecodedRows]) -> pa.RecordBatch:
    """One record batch of `items` in order: runs of `DecodedRows` built at once, then everything concatenated."""
    batches: list[pa.RecordBatch] = []
    run: list[DecodedRows] = []
    for item in items:
        if isinstance(item, DecodedRows):
            run.append(item)
            continue
        if run:
            batches.append(_rows_batch(run))
            run = []
        batches.append(item)
    if run:
        batches.append(_rows_batch(run))
    return _merge(batches)


class _Pending:
    """A fragmented message being reassembled (its fragments may span chunks)."""

    __slots__ = ("parts", "position", "reserved_value")

    def __init__(self, position: int, reserved_value: int, first: bytes) -> None:
        self.position = position
        self.reserved_value = reserved_value
        self.parts = [first]


class RangeDecoder:
    """Turns one partition's chunks into record batches of exactly `schema`."""

    def __init__(
        self,
        partition: ReadRange,
        schema: pa.Schema,
        payload: PayloadDecoder | None = None,
        min_batch_bytes: int = MIN_BATCH_BYTES,
        defer_small: bool = False,
        times: TimeIndex | None = None,
    ) -> None:
        """`defer_small`: `items()` may give a few whole messages of the fixed columns as `DecodedRows` (see there),
        for a caller that merges them with other ranges' (`read_ranges`); `batches()` never does. `times`: the
        recording's time index over the partition, which dates the rows (None: `timestamp` is null)."""
        self._p = partition
        self._times = times
        facts = partition.recording
        self._rid = facts.recording_id
        self._session_id = facts.session_id
        self._stream_id = facts.stream_id
        self._term_length = facts.term_length
        self._bits = position_bits_to_shift(facts.term_length)
        self._initial_term_id = facts.initial_term_id
        self._schema = schema
        # `from_arrays(names=...)` costs half of `from_arrays(schema=...)` (a small recording's batch pays it per
        # range) and gives the same schema when that is exactly the fixed columns, built here of their types.
        self._names = schema.names if payload is None and schema.equals(_FIXED_SCHEMA, check_metadata=True) else None
        self._defer = defer_small and self._names is not None
        self._payload = payload
        self._min_batch_bytes = min_batch_bytes
        self._pending: _Pending | None = None
        self._seen_begin = False
        self._done = False
        self._next_position = partition.start
        self.rows = 0
        self.skipped_leading_fragments = 0

    # ------------------------------------------------------------------------------------------------------------

    def batches(
        self, chunks: Iterable[tuple[memoryview, int] | tuple[memoryview, int, FrameScan]]
    ) -> Iterator[pa.RecordBatch]:
        """Batches from `(chunk, position)` items, or `(chunk, position, scan)` when the source walked them."""
        for item in self.items(chunks):
            if isinstance(item, DecodedRows):  # only with `defer_small`
                item = _rows_batch([item])
            yield item

    def items(
        self, chunks: Iterable[tuple[memoryview, int] | tuple[memoryview, int, FrameScan]]
    ) -> Iterator[pa.RecordBatch | DecodedRows]:
        """`batches()`, but with `defer_small` a few whole messages may come as `DecodedRows`, in their place."""
        held: list[pa.RecordBatch] = []
        held_bytes = 0
        iterator = iter(chunks)
        try:
            for item in iterator:
                batch = self._chunk(*item)
                if isinstance(batch, DecodedRows):
                    self.rows += batch.num_rows
                    if held:
                        yield _merge(held)
                        held, held_bytes = [], 0
                    yield batch
                elif batch is not None and batch.num_rows:
                    self.rows += batch.num_rows
                    size = batch.get_total_buffer_size()  # `nbytes` walks the buffers' used ranges: slow
                    if size >= self._min_batch_bytes:  # big enough alone: never copied into a merge
                        if held:
                            yield _merge(held)
                            held, held_bytes = [], 0
                        yield batch
                    else:
                        held.append(batch)
                        held_bytes += size
                        if held_bytes >= self._min_batch_bytes:
                            yield _merge(held)
                            held, held_bytes = [], 0
                if self._done:
                    break
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        if held:
            yield _merge(held)
        self._finish()

    # ------------------------------------------------------------------------------------------------------------

    def _error(self, message: str) -> ArchiveError:
        p = self._p
        return ArchiveError(
            f"recording {self._rid}: {message} (partition {p.index} [{p.start}, {p.end}), limit {p.limit})"
        )

    def _finish(self) -> None:
        if self._pending is not None:
            raise self._error(
                f"the message beginning at position {self._pending.position} is incomplete at position "
                f"{self._next_position}; was the recording truncated while being read?"
            )
        if not self._done and self._next_position < self._p.end:
            raise self._error(
                f"data ends at position {self._next_position}, before the partition end {self._p.end}; was the "
                "recording truncated or purged while being read?"
            )

    def _check_header(self, chunk: memoryview, position: int) -> None:
        if len(chunk) < HEADER_LENGTH:
            return
        term_offset = position & (self._term_length - 1)
        term_id = compute_term_id_from_position(position, self._bits, self._initial_term_id)
        _, _, _, _, frame_term_offset, _, frame_stream_id, frame_term_id, _ = HEADER_STRUCT.unpack_from(chunk, 0)
        if frame_term_offset != term_offset or frame_term_id != term_id or frame_stream_id != self._stream_id:
            raise self._error(
                f"position {position} is not the start of a frame (header has termOffset={frame_term_offset} "
                f"termId={frame_term_id} streamId={frame_stream_id}, expected termOffset={term_offset} "
                f"termId={term_id} streamId={self._stream_id})"
            )

    def _chunk(
        self, chunk: memoryview, position: int, scan: FrameScan | None = None
    ) -> pa.RecordBatch | DecodedRows | None:
        if position < self._next_position:
            raise self._error(f"chunk at position {position} overlaps data already read up to {self._next_position}")
        if position > self._next_position and not self._gap_is_padding(position):
            raise self._error(f"gap in the data from position {self._next_position} to {position}")
        self._check_header(chunk, position)
        size = len(chunk)
        if scan is None:
            scan = scan_frames(chunk, 0, size, stop_at_padding=False)
        chunk_end = position + scan.stop_offset
        if scan.stop_offset >= size or scan.stop_reason is ScanStop.END:
            pass  # whole frames up to the end of the chunk (a given scan may have looked past it)
        elif (
            scan.stop_reason is ScanStop.INCOMPLETE
            and size - scan.stop_offset >= HEADER_LENGTH
            and frame_type_at(chunk, scan.stop_offset) == HDR_TYPE_PAD
        ):
            chunk_end += align(scan.stop_frame_length, FRAME_ALIGNMENT)  # a PAD frame cut after its header
        else:
            raise self._error(f"no complete frame at position {position + scan.stop_offset}")
        self._next_position = chunk_end
        if scan.count == 0:
            self._done = self._pending is None and chunk_end >= self._p.end
            return None
        if self._defer and self._pending is None and scan.frame_lists is not None:
            rows = self._small_rows(chunk, position, scan.frame_lists)
            if rows is not None:
                if not self._done and chunk_end >= self._p.end:
                    self._done = True
                return rows

        offsets = scan.offsets
        lengths = scan.lengths
        flags = scan.flags
        reserved = scan.reserved_values()
        data = scan.types == HDR_TYPE_DATA
        if not data.all():
            offsets, lengths, flags, reserved = offsets[data], lengths[data], flags[data], reserved[data]
        count = int(offsets.size)
        positions = offsets + position

        # Cut before the first message that begins at or after the partition end.
        cut = count
        k = int(np.searchsorted(positions, self._p.end, side="left"))
        if k < count:
            begins = np.flatnonzero(flags[k:] & BEGIN_FRAG_FLAG)
            if begins.size:
                cut = k + int(begins[0])
                self._done = True

        whole = (flags[:cut] & UNFRAGMENTED) == UNFRAGMENTED
        if self._pending is None and bool(whole.all()):
            if cut:
                self._seen_begin = True
            batch: pa.RecordBatch | DecodedRows | None
            if self._defer and 0 < cut <= _JOIN_MAX_VALUES:
                batch = self._rows(chunk, positions[:cut], offsets[:cut], lengths[:cut], reserved[:cut])
            else:
                stride = scan.stride if count == scan.count else 0  # no PAD dropped: still one fixed stride
                batch = self._build(
                    chunk, positions[:cut], offsets[:cut], lengths[:cut], reserved[:cut], None, stride=stride
                )
        else:
            batch = self._build_mixed(
                chunk, positions[:cut], offsets[:cut], lengths[:cut], flags[:cut], reserved[:cut], whole
            )
        if not self._done and self._pending is None and chunk_end >= self._p.end:
            self._done = True
        return batch

    def _gap_is_padding(self, position: int) -> bool:
        """Chunks may omit the rest of a PAD frame, which always runs to the end of its term."""
        term_offset = self._next_position & (self._term_length - 1)
        return term_offset != 0 and position == self._next_position - term_offset + self._term_length

    def _build_mixed(
        self,
        chunk: memoryview,
        positions: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        flags: np.ndarray,
        reserved: np.ndarray,
        whole: np.ndarray,
    ) -> pa.RecordBatch | None:
        unfragmented = np.flatnonzero(whole)
        first_whole = int(unfragmented[0]) if unfragmented.size else len(whole)
        completed: list[tuple[int, int, bytes]] = []
        open_ranges: list[tuple[int, int]] = []
        open_from = 0 if self._pending is not None else -1
        leading = not self._seen_begin
        for i in np.flatnonzero(~whole).tolist():
            frame_flags = int(flags[i])
            offset = int(offsets[i])
            payload = bytes(chunk[offset + HEADER_LENGTH : offset + int(lengths[i])])
            if frame_flags & BEGIN_FRAG_FLAG:
                if self._pending is not None:
                    raise self._error(
                        f"a message begins at position {int(positions[i])} while the one beginning at "
                        f"{self._pending.position} is unfinished"
                    )
                self._pending = _Pending(int(positions[i]), int(reserved[i]), payload)
                self._seen_begin = True
                leading = False
                open_from = i
                continue
            if self._pending is None:
                if leading and i < first_whole:
                    self.skipped_leading_fragments += 1
                    continue
                raise self._error(
                    f"the fragment at position {int(positions[i])} continues a message whose first fragment is missing"
                )
            self._pending.parts.append(payload)
            if frame_flags & END_FRAG_FLAG:
                pending = self._pending
                completed.append((pending.position, pending.reserved_value, b"".join(pending.parts)))
                self._pending = None
                open_ranges.append((open_from, i))
                open_from = -1
        if self._pending is not None:
            open_ranges.append((open_from, len(whole)))
        if unfragmented.size:
            self._seen_begin = True
            for a, b in open_ranges:
                lo = int(np.searchsorted(unfragmented, a, side="right"))
                if lo < unfragmented.size and unfragmented[lo] < b:
                    raise self._error(
                        f"an unfragmented message at position {int(positions[unfragmented[lo]])} lies inside a "
                        "fragmented one"
                    )

        if not completed:
            if not unfragmented.size:
                return None
            return self._build(
                chunk,
                positions[unfragmented],
                offsets[unfragmented],
                lengths[unfragmented],
                reserved[unfragmented],
                None,
            )
        frag_positions = np.array([c[0] for c in completed], dtype=np.int64)
        frag_reserved = np.array([c[1] for c in completed], dtype=np.int64)
        frag_values = pa.array([c[2] for c in completed], type=pa.binary())
        all_positions = np.concatenate([positions[unfragmented], frag_positions])
        all_reserved = np.concatenate([reserved[unfragmented], frag_reserved])
        chunk_u8 = np.frombuffer(chunk, dtype=np.uint8)
        values = pa.concat_arrays(
            [
                binary_column(chunk_u8, offsets[unfragmented] + HEADER_LENGTH, lengths[unfragmented] - HEADER_LENGTH),
                frag_values,
            ]
        )
        order = np.argsort(all_positions, kind="stable")
        return self._build(chunk, all_positions[order], None, None, all_reserved[order], values.take(order))

    def _rows(
        self, chunk: memoryview, positions: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, reserved: np.ndarray
    ) -> DecodedRows:
        """`_build`'s columns for a few whole messages, left as lists and bytes copied out of `chunk`."""
        value_lengths = lengths.astype(np.int32) - HEADER_LENGTH
        data = _joined_values(chunk, offsets + HEADER_LENGTH, value_lengths)
        return DecodedRows(
            self._rid,
            self._session_id,
            self._stream_id,
            positions.tolist(),  # copies: nothing here may still point into the chunk once it is reused
            reserved.tolist(),
            value_lengths.tolist(),
            data,
            self._times,
        )

    def _small_rows(
        self, chunk: memoryview, position: int, frame_lists: tuple[list[int], list[int], list[int], list[int]]
    ) -> DecodedRows | None:
        """`_chunk`'s answer for a short scan of whole messages, in plain Python; None for anything else (the
        general path then decides, so both give the same rows). Sets no state unless it answers.

        A small recording is a handful of frames: the general path's two dozen numpy and Arrow operations, a few
        microseconds each whatever their size, were most of its cost (four frames scanned and decoded: 122 us by
        the general path, 56 with this one).
        """
        offsets, lengths, types, flags = frame_lists
        end = self._p.end
        unpack_reserved = _RESERVED.unpack_from
        positions: list[int] = []
        reserved: list[int] = []
        value_lengths: list[int] = []
        parts: list[memoryview] = []
        done = False
        for offset, length, frame_type, frame_flags in zip(offsets, lengths, types, flags, strict=True):
            if frame_type != HDR_TYPE_DATA:
                continue
            frame_position = position + offset
            if frame_position >= end and frame_flags & BEGIN_FRAG_FLAG:
                done = True  # the first message beginning at or past the range end: not ours
                break
            if frame_flags & UNFRAGMENTED != UNFRAGMENTED or len(positions) == _JOIN_MAX_VALUES:
                return None
            positions.append(frame_position)
            reserved.append(unpack_reserved(chunk, offset + RESERVED_VALUE_OFFSET)[0])
            value_lengths.append(length - HEADER_LENGTH)
            parts.append(chunk[offset + HEADER_LENGTH : offset + length])
        if not positions:
            return None
        self._seen_begin = True
        if done:
            self._done = True
        return DecodedRows(
            self._rid,
            self._session_id,
            self._stream_id,
            positions,
            reserved,
            value_lengths,
            b"".join(parts),
            self._times,
        )

    def _build(
        self,
        chunk: memoryview,
        positions: np.ndarray,
        offsets: np.ndarray | None,
        lengths: np.ndarray | None,
        reserved: np.ndarray,
        values: pa.Array | None,
        stride: int = 0,
    ) -> pa.RecordBatch:
        n = int(positions.size)
        if values is None:
            assert offsets is not None and lengths is not None
            values = binary_column(
                np.frombuffer(chunk, dtype=np.uint8),
                offsets + HEADER_LENGTH,
                lengths.astype(np.int32) - HEADER_LENGTH,
                stride,
            )
        positions = positions.astype(np.int64, copy=False)
        columns: list[pa.Array] = [
            _int_array(np.full(n, self._rid, dtype=np.int64), np.int64, _INT64),
            _int_array(positions, np.int64, _INT64),
            _int_array(np.full(n, self._session_id, dtype=np.int32), np.int32, _INT32),
            _int_array(np.full(n, self._stream_id, dtype=np.int32), np.int32, _INT32),
            _int_array(reserved, np.int64, _INT64),
            values,
            timestamp_column(self._times, positions),
        ]
        if self._payload is not None:
            extra = self._payload.decode(values, positions, self._rid)
            for field, array in zip(list(self._schema)[len(columns) :], extra, strict=True):
                columns.append(array if array.type == field.type else array.cast(field.type))
        if self._names is not None:
            return pa.RecordBatch.from_arrays(columns, names=self._names)
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _merge(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches)
    return pa.RecordBatch.from_arrays([column.combine_chunks() for column in table.columns], schema=table.schema)


def decode_range(
    partition: ReadRange,
    source: ChunkSource,
    schema: pa.Schema,
    payload: PayloadDecoder | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the messages `partition` owns, read through `source`."""
    scanned = getattr(source, "iter_scanned_chunks", None)
    chunks = scanned(partition) if scanned is not None else source.iter_chunks(partition)
    decoder = RangeDecoder(partition, schema, payload)
    yield from decoder.batches(chunks)
    log.debug(
        "recording %d partition %d [%d, %d): %d rows, %d leading fragments skipped",
        partition.recording_id,
        partition.index,
        partition.start,
        partition.end,
        decoder.rows,
        decoder.skipped_leading_fragments,
    )
