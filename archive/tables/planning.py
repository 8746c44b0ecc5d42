"""Cutting recordings' position ranges into `ReadRange`s, and packing small ones together.

`plan_ranges` is the planning both the Spark source and `export` use; `pack_ranges` groups ranges into Spark
partitions the way Spark's file sources pack small files.

Pure functions of their arguments: Spark re-plans a replayed micro-batch from the checkpointed offsets alone, so
the same ranges must always give the same pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aeron_archive_spark.archive.tables.ranges import ReadLocation, ReadRange, RecordingFacts

# How many bytes of a recording one range covers at most unless told otherwise: `export`'s ranges, and the default
# of the Spark source's maxBytesPerPartition.
MAX_BYTES_PER_RANGE_DEFAULT = 64 * 1024 * 1024


def split_range(start: int, end: int, term_length: int, max_bytes: int) -> list[tuple[int, int]]:
    """Cut `[start, end)` at term boundaries into pieces of at most `max_bytes` (at least one whole term each)."""
    if end <= start:
        return []
    terms = max(1, max_bytes // term_length)
    step = terms * term_length
    pieces = []
    term_base = start - (start & (term_length - 1))
    piece_start = start
    boundary = term_base + step
    while boundary < end:
        pieces.append((piece_start, boundary))
        piece_start = boundary
        boundary += step
    pieces.append((piece_start, end))
    return pieces


def plan_ranges(
    ranges: Iterable[tuple[RecordingFacts, int, int, int]],
    max_bytes_per_range: int,
    location: ReadLocation,
    stops: Mapping[int, int] | None = None,
    placements: Mapping[int, ReadLocation] | None = None,
) -> list[ReadRange]:
    """ReadRanges for `(facts, start, end, limit)` ranges, in recording id then position order, indexed from 0.

    `stops`: recording id -> stop position, for the recordings that were stopped when planned; a range whose limit
    is its recording's stop is marked `ends_at_stop` (the reader drops a message left open there). `placements`:
    recording id -> where its ranges are read, for the recordings read elsewhere than `location` (copies on
    several archives, `RecordingSource.placements`).
    """
    planned: list[ReadRange] = []
    stopped = stops or {}
    placed = placements or {}
    for facts, start, end, limit in ranges:
        ends_at_stop = stopped.get(facts.recording_id) == limit
        at = placed.get(facts.recording_id, location)
        for piece_start, piece_end in split_range(start, end, facts.term_length, max_bytes_per_range):
            planned.append(ReadRange(len(planned), facts, piece_start, piece_end, limit, at, ends_at_stop))
    return planned


def pack_ranges(ranges: Sequence[ReadRange], max_bytes: int, open_cost: int) -> list[list[ReadRange]]:
    """Group ranges into partitions as Spark's file sources pack files (`FilePartition.getFilePartitions`).

    Each range weighs its bytes plus `open_cost` (what starting a read costs: opening a segment file, or setting
    up a replay, like `spark.sql.files.openCostInBytes`). Ranges are taken largest first and added to the current
    partition until the next one would take it over `max_bytes` (next fit); a range is never split here (that is
    `split_range`'s job), so a range of `max_bytes` fills a partition alone. Pure: the same ranges always give the
    same partitions. Within a partition the ranges are in their planned order (recording id, then position), and
    partitions are ordered by their first range, so a partition reads its recordings in ascending id order and
    one recording's pieces in position order.
    """
    order = sorted(ranges, key=lambda r: (-r.size, r.index))
    bins: list[list[ReadRange]] = []
    current: list[ReadRange] = []
    current_size = 0
    for read_range in order:
        if current and current_size + read_range.size > max_bytes:
            bins.append(current)
            current, current_size = [], 0
        current.append(read_range)
        current_size += read_range.size + open_cost
    if current:
        bins.append(current)
    for packed in bins:
        packed.sort(key=lambda r: r.index)
    bins.sort(key=lambda packed: packed[0].index)
    return bins
