"""`spark.read.format("aeron-archive")`: a bounded read of `[startingPosition, endingPosition)` per recording."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.ranges import RecordingFacts
from aeron_archive_spark.archive.tables.recording_source import RecordingSource, stopped_positions
from aeron_archive_spark.connector.options import EARLIEST, LATEST
from aeron_archive_spark.connector.source.options import ReadOptions
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


def _when(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec='milliseconds')} ({ms} ms)"


def starting_position(source: RecordingSource, descriptor: RecordingDescriptor, options: ReadOptions, end: int) -> int:
    """Where a new read of a recording starts: by time (startingTimestamp, startingPositionByTimestamp) where given
    for it, else by position (startingPosition)."""
    rid = descriptor.recording_id
    at_ms = options.starting_time.for_recording(rid) if options.starting_time is not None else None
    if at_ms is None:
        return resolve_start(
            source, descriptor, options.starting.for_recording(rid), end, "startingPosition", options.fail_on_data_loss
        )
    position = source.position_at_time(descriptor, at_ms * 1_000_000, end)
    if position is not None:
        return position
    if options.starting_time_strategy == "latest":
        log.info("recording %d has no message recorded at or after %s: starting at its end %d", rid, _when(at_ms), end)
        return end
    raise ValueError(
        f"recording {rid} has no message recorded at or after {_when(at_ms)} up to position {end} in the "
        f"{source.describe()}; set startingPositionByTimestampStrategy=latest to start at its end instead"
    )


def ending_position(
    source: RecordingSource, descriptor: RecordingDescriptor, options: ReadOptions, start: int, available: int
) -> int:
    """Where a batch read of a recording ends: before its first message recorded at or after the ending time
    (endingTimestamp, endingPositionByTimestamp; none: the available end), else at endingPosition."""
    rid = descriptor.recording_id
    at_ms = options.ending_time.for_recording(rid) if options.ending_time is not None else None
    if at_ms is not None:
        position = source.position_at_time(descriptor, at_ms * 1_000_000, available)
        return available if position is None else max(position, start)
    wanted_end = options.ending.for_recording(rid)
    end = available if wanted_end == LATEST else wanted_end
    if end > available:
        raise ValueError(
            f"endingPosition {end} of recording {rid} is past its current end {available} in the {source.describe()}"
        )
    if end < start:
        raise ValueError(f"endingPosition {end} of recording {rid} is before its starting position {start}")
    return end


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
            for descriptor in selected.values():
                available = source.planning_end(descriptor)
                start = starting_position(source, descriptor, options, available)
                end = ending_position(source, descriptor, options, start, available)
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
