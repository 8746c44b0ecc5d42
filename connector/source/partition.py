"""The Spark face of a planned read: an `InputPartition` carrying one `ReadRange`.

`read()` runs in an executor's Python worker on the pickled planning reader, which has no archive connection and no
catalog, so the range carries every descriptor fact and location option its read needs (see
`archive.tables.ranges`). Spark requires partitions to be `InputPartition`s; everything else about them is
Spark-free and shared with the offline tools.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql.datasource import InputPartition

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.tables.planning import plan_ranges
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts


class AeronArchivePartition(InputPartition):
    """One `ReadRange` as Spark schedules it (`value` is the range, as `InputPartition` keeps it)."""

    def __init__(self, read_range: ReadRange) -> None:
        super().__init__(read_range)

    @property
    def read_range(self) -> ReadRange:
        range_: ReadRange = self.value
        return range_

    def __repr__(self) -> str:
        r = self.read_range
        return f"AeronArchivePartition({r.index}: recording {r.recording_id} [{r.start}, {r.end}) limit {r.limit})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AeronArchivePartition) and other.read_range == self.read_range

    def __hash__(self) -> int:
        return hash(self.read_range)


def plan_partitions(
    ranges: Iterable[tuple[RecordingFacts, int, int, int]],
    max_bytes_per_partition: int,
    archive_dir: str | None,
    connection: ConnectionOptions | None,
) -> list[AeronArchivePartition]:
    """Partitions for `(facts, start, end, limit)` ranges, in recording id then position order."""
    return [AeronArchivePartition(r) for r in plan_ranges(ranges, max_bytes_per_partition, archive_dir, connection)]
