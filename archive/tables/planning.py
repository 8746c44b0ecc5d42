"""Cutting recordings' position ranges into `ReadRange`s: the planning both the Spark source and `export` use.

Pure functions of their arguments: Spark re-plans a replayed micro-batch from the checkpointed offsets alone, so
the same ranges must always give the same pieces.
"""

from __future__ import annotations

from collections.abc import Iterable

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts


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
    archive_dir: str | None,
    connection: ConnectionOptions | None,
) -> list[ReadRange]:
    """ReadRanges for `(facts, start, end, limit)` ranges, in recording id then position order, indexed from 0."""
    planned: list[ReadRange] = []
    for facts, start, end, limit in ranges:
        for piece_start, piece_end in split_range(start, end, facts.term_length, max_bytes_per_range):
            planned.append(ReadRange(len(planned), facts, piece_start, piece_end, limit, archive_dir, connection))
    return planned
