"""Placing a time in a recording that has no time index, by a time its messages carry (`timestampField`).

A recording made by Java's archive (or by ours with the index off) knows only its start and stop timestamps. Its
messages often carry their own time, though: an exchange's `transactTime`, a feed's sending time. With `sbeSchema`
and `timestampField` naming that decoded column, a time resolves to the first message carrying the field whose value
is at or after it.

What it assumes: the field never decreases along the recording's positions (messages without the field, such as
heartbeats, are stepped over). An exchange's sequenced feed is so per channel. It is checked where it is looked at:
a binary search over the recording's terms reads the first dated message of a term per probe (a replay or a segment
read from a term boundary), then the messages from the last term before the time up to the answer are decoded in
order; a decrease met there fails with an error naming the recording, the positions and the values, because the
window would otherwise be wrong. The reads of the window itself check it too (`check_field_order`).

The cost: about log2(terms) short reads and one or two terms decoded, on the planning side.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aeron_archive_spark.archive.tables.decode import RangeDecoder
from aeron_archive_spark.archive.tables.payload import PayloadDecoder, field_column_name
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts
from aeron_archive_spark.archive.tables.schema import row_schema

if TYPE_CHECKING:
    from aeron_archive_spark.archive.descriptor import RecordingDescriptor
    from aeron_archive_spark.archive.tables.chunks import ChunkSource
    from aeron_archive_spark.archive.tables.ranges import ReadLocation


class FieldOrderError(ValueError):
    """The time field decreased along a recording: reads by time cannot place a window in it."""


def field_times_ns(batch: pa.RecordBatch, column: str, unit_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions, times in ns) of the batch's rows that carry the field, in row order (a timestamp column by its
    own unit, an integer one by `unit_ns`)."""
    values = batch.column(column)
    present = pc.is_valid(values)
    if pa.types.is_timestamp(values.type):
        unit_ns = _TIMESTAMP_UNIT_NS[values.type.unit]
    kept = values.filter(present).cast(pa.int64())
    positions = batch.column("position").filter(present).to_numpy(zero_copy_only=False).astype(np.int64)
    return positions, kept.to_numpy(zero_copy_only=False).astype(np.int64) * unit_ns


_TIMESTAMP_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def check_field_order(
    recording_id: int, positions: np.ndarray, times: np.ndarray, previous: tuple[int, int] | None
) -> tuple[int, int] | None:
    """Raise `FieldOrderError` at the first decrease of `times` (`previous`: the last (position, time) seen before
    them); returns the new last (position, time)."""
    if len(times) == 0:
        return previous
    if previous is not None:
        positions = np.concatenate(([previous[0]], positions))
        times = np.concatenate(([previous[1]], times))
    at = np.flatnonzero(np.diff(times) < 0)
    if at.size:
        i = int(at[0])
        raise FieldOrderError(
            f"recording {recording_id}: timestampField decreases from {int(times[i])} ns at position "
            f"{int(positions[i])} to {int(times[i + 1])} ns at position {int(positions[i + 1])}; reads by time "
            "assume it never decreases along the recording: read it by position and filter on the field instead"
        )
    return int(positions[-1]), int(times[-1])


class FieldTimeSeek:
    """Finds where a time begins in one recording by its messages' time field (see the module docstring)."""

    def __init__(
        self,
        descriptor: RecordingDescriptor,
        end: int,
        chunks: ChunkSource,
        location: ReadLocation,
        decoder: PayloadDecoder,
        field: str,
        unit_ns: int,
    ) -> None:
        self._facts = RecordingFacts.of(descriptor)
        self._start = descriptor.start_position
        self._end = end
        self._chunks = chunks
        self._location = location
        self._decoder = decoder
        self._schema = row_schema(decoder)
        self._column = field_column_name(decoder, field)
        self._unit_ns = unit_ns

    def position_at_or_after(self, time_ns: int) -> int | None:
        """The position of the first message whose field is >= `time_ns`, None when none below the end is."""
        if self._end <= self._start:
            return None
        term = self._facts.term_length
        first_term = self._start // term
        last_term = (self._end - 1) // term
        # The smallest term whose first dated message (at or after the term's start) is at or after the time.
        low, high = first_term, last_term + 1
        while low < high:
            middle = (low + high) // 2
            found = self._first_dated(max(self._start, middle * term))
            if found is None or found[1] >= time_ns:
                high = middle
            else:
                low = middle + 1
        scan_from = max(self._start, (low - 1) * term) if low > first_term else self._start
        return self._scan(scan_from, time_ns)

    def _batches(self, start: int) -> Iterator[pa.RecordBatch]:
        read_range = ReadRange(0, self._facts, start, self._end, self._end, self._location)
        scanned = getattr(self._chunks, "iter_scanned_chunks", None)
        chunks = scanned(read_range) if scanned is not None else self._chunks.iter_chunks(read_range)
        return RangeDecoder(read_range, self._schema, self._decoder).batches(chunks)

    def _first_dated(self, start: int) -> tuple[int, int] | None:
        batches = self._batches(start)
        try:
            for batch in batches:
                positions, times = field_times_ns(batch, self._column, self._unit_ns)
                if len(times):
                    return int(positions[0]), int(times[0])
            return None
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _scan(self, start: int, time_ns: int) -> int | None:
        batches = self._batches(start)
        last: tuple[int, int] | None = None
        try:
            for batch in batches:
                positions, times = field_times_ns(batch, self._column, self._unit_ns)
                last = check_field_order(self._facts.recording_id, positions, times, last)
                at = np.flatnonzero(times >= time_ns)
                if at.size:
                    return int(positions[int(at[0])])
            return None
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()


class FieldOrderCheck:
    """Checks, batch after batch, that each recording's time field never decreases (the reads of a window placed
    by `timestampField`: a decrease means the window's edges were placed on a wrong assumption)."""

    def __init__(self, column: str, unit_ns: int) -> None:
        self._column = column
        self._unit_ns = unit_ns
        self._last: dict[int, tuple[int, int] | None] = {}

    def check(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        ids = batch.column("recordingId").to_numpy(zero_copy_only=False)
        for rid in np.unique(ids).tolist():
            rows = batch if len(ids) == 0 or ids[0] == ids[-1] == rid else batch.filter(pa.array(ids == rid))
            positions, times = field_times_ns(rows, self._column, self._unit_ns)
            self._last[rid] = check_field_order(rid, positions, times, self._last.get(rid))
        return batch
