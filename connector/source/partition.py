"""The Spark face of a planned read: an `InputPartition` carrying the `ReadRange`s one task reads.

`read()` runs in an executor's Python worker on the pickled planning reader, which has no archive connection and no
catalog, so each range carries every descriptor fact and location option its read needs (see
`archive.tables.ranges`). A partition holds one range of a large recording, or many small ranges packed together
(`archive.tables.planning.pack_ranges`, Spark's rule for small files), read in order by one task. Spark requires
partitions to be `InputPartition`s; everything else about them is Spark-free and shared with the offline tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql.datasource import InputPartition

from aeron_archive_spark.archive.tables.planning import pack_ranges, plan_ranges
from aeron_archive_spark.archive.tables.ranges import ReadLocation, ReadRange, RecordingFacts


class AeronArchivePartition(InputPartition):
    """`ReadRange`s as one Spark task reads them, in order (`value` is the tuple of ranges, as `InputPartition`
    keeps it)."""

    def __init__(self, read_ranges: Iterable[ReadRange]) -> None:
        super().__init__(tuple(read_ranges))

    @property
    def read_ranges(self) -> tuple[ReadRange, ...]:
        ranges: tuple[ReadRange, ...] = self.value
        return ranges

    @property
    def read_range(self) -> ReadRange:
        """The partition's only range (a partition of one recording's piece)."""
        (only,) = self.read_ranges
        return only

    def __repr__(self) -> str:
        ranges = self.read_ranges
        if len(ranges) == 1:
            r = ranges[0]
            return f"AeronArchivePartition({r.index}: recording {r.recording_id} [{r.start}, {r.end}) limit {r.limit})"
        ids = sorted({r.recording_id for r in ranges})
        return (
            f"AeronArchivePartition({len(ranges)} ranges of {len(ids)} recordings {ids[0]}..{ids[-1]}, "
            f"{sum(r.size for r in ranges)} bytes)"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AeronArchivePartition) and other.read_ranges == self.read_ranges

    def __hash__(self) -> int:
        return hash(self.read_ranges)


def plan_partitions(
    ranges: Iterable[tuple[RecordingFacts, int, int, int]],
    max_bytes_per_partition: int,
    open_cost_in_bytes: int,
    location: ReadLocation,
    stops: Mapping[int, int] | None = None,
    placements: Mapping[int, ReadLocation] | None = None,
) -> list[AeronArchivePartition]:
    """Partitions for `(facts, start, end, limit)` ranges: each cut at term boundaries into pieces of at most
    `max_bytes_per_partition`, then small pieces packed together up to that size, each weighing its bytes plus
    `open_cost_in_bytes`. `stops`, `placements`: see `plan_ranges`."""
    planned = plan_ranges(ranges, max_bytes_per_partition, location, stops, placements)
    return [
        AeronArchivePartition(packed) for packed in pack_ranges(planned, max_bytes_per_partition, open_cost_in_bytes)
    ]
