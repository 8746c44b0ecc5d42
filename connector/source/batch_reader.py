"""`spark.read.format("aeron-archive")`: a bounded read of `[startingPosition, endingPosition)` per recording."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.ranges import RecordingFacts
from aeron_archive_spark.archive.tables.recording_source import RecordingSource, stopped_positions
from aeron_archive_spark.connector.options import EARLIEST, LATEST
from aeron_archive_spark.connector.source.partition import plan_partitions
from aeron_archive_spark.connector.source.reader import ReaderBase

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """A recording lost data (truncate/purge) that a position still points at, with failOnDataLoss=true."""


def resolve_start(
    source: RecordingSource,
    descriptor: RecordingDescriptor,
    wanted: int,
    end: int,
    option: str,
    fail_on_data_loss: bool,
) -> int:
    """A starting position: EARLIEST, LATEST or explicit, checked against the recording's current range."""
    rid = descriptor.recording_id
    if wanted == EARLIEST:
        return descriptor.start_position
    if wanted == LATEST:
        return end
    if wanted < descriptor.start_position:
        message = (
            f"{option} {wanted} of recording {rid} is below its start position {descriptor.start_position} "
            "(truncated or purged)"
        )
        if fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to start at the recording's start instead")
        log.warning("%s; starting at %d", message, descriptor.start_position)
        return descriptor.start_position
    if wanted > end:
        raise ValueError(
            f"{option} {wanted} of recording {rid} is past its current end {end} in the {source.describe()}"
        )
    return wanted


class AeronArchiveBatchReader(ReaderBase, DataSourceReader):
    """Plans once on the driver: each selected recording's range, cut into term-aligned pieces, small ones packed."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._setup(options, schema, streaming=False)

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        source = self.source
        try:
            ranges = []
            selected = source.selected()
            for rid, descriptor in selected.items():
                available = source.planning_end(descriptor)
                start = resolve_start(
                    source,
                    descriptor,
                    options.starting.for_recording(rid),
                    available,
                    "startingPosition",
                    options.fail_on_data_loss,
                )
                wanted_end = options.ending.for_recording(rid)
                end = available if wanted_end == LATEST else wanted_end
                if end > available:
                    raise ValueError(
                        f"endingPosition {end} of recording {rid} is past its current end "
                        f"{available} in the {source.describe()}"
                    )
                if end < start:
                    raise ValueError(f"endingPosition {end} of recording {rid} is before its starting position {start}")
                # The last message begun before `end` is read to completion, up to the available end.
                ranges.append((RecordingFacts.of(descriptor), start, end, available))
            if not ranges:
                log.warning(
                    "no recordings match %s in the %s", options.recordings.selection.describe(), source.describe()
                )
            partitions = plan_partitions(
                ranges,
                options.max_bytes_per_partition,
                options.open_cost_in_bytes,
                source.location(),
                stopped_positions(selected.values()),
                source.placements({facts.recording_id: limit for facts, _, _, limit in ranges}),
            )
            log.info(
                "batch read of %s: %d recordings in %d partitions",
                options.recordings.selection.describe(),
                len(ranges),
                len(partitions),
            )
            return partitions
        finally:
            self._close_source()
