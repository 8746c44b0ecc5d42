"""Offsets and partition planning shared by the batch and streaming readers.

Offsets are `{"<recordingId>": position}` with keys in ascending numeric id order: Spark compares offsets by their
`json.dumps` text (a batch with no new data is detected by equality), so the same positions must always serialize
identically.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aeron_archive_spark.connector.options import ConnectionOptions
from aeron_archive_spark.connector.source.partition import AeronArchivePartition, RecordingFacts


class OffsetError(ValueError):
    """A checkpointed or computed offset is not of the `{"<recordingId>": position}` form."""


def to_offset(positions: Mapping[int, int]) -> dict[str, int]:
    """The JSON-able offset, keys in ascending recording id order."""
    return {str(rid): int(positions[rid]) for rid in sorted(positions)}


def from_offset(offset: Mapping[str, Any] | None, what: str = "offset") -> dict[int, int]:
    if offset is None:
        return {}
    positions: dict[int, int] = {}
    for key, value in offset.items():
        try:
            rid = int(key)
        except (TypeError, ValueError):
            raise OffsetError(f"{what} {dict(offset)!r}: key {key!r} is not a recording id") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise OffsetError(f"{what} {dict(offset)!r}: position of recording {key} is not an integer")
        positions[rid] = value
    return positions


def split_range(start: int, end: int, term_length: int, max_bytes: int) -> list[tuple[int, int]]:
    """Cut `[start, end)` at term boundaries into pieces of at most `max_bytes` (at least one whole term each).

    A pure function of its arguments: Spark re-plans a replayed micro-batch from the checkpointed offsets alone.
    """
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


def plan_partitions(
    ranges: Iterable[tuple[RecordingFacts, int, int, int]],
    max_bytes_per_partition: int,
    archive_dir: str | None,
    connection: ConnectionOptions | None,
) -> list[AeronArchivePartition]:
    """Partitions for `(facts, start, end, limit)` ranges, in recording id then position order."""
    partitions: list[AeronArchivePartition] = []
    for facts, start, end, limit in ranges:
        for piece_start, piece_end in split_range(start, end, facts.term_length, max_bytes_per_partition):
            partitions.append(
                AeronArchivePartition(len(partitions), facts, piece_start, piece_end, limit, archive_dir, connection)
            )
    return partitions
