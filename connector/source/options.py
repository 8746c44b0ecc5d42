"""The Spark source's typed view of the `format("aeron-archive")` options, parsed from the connector's one table.

What every read of recordings needs (where they are, which, how to decode them) is the engine's `SourceOptions`, which
the offline tools parse too; the rows only a Spark read has (`connector.options.SOURCE_OPTIONS`: positions,
admission control, partitions, data loss) make up the rest of `ReadOptions`. Readers travel to executors pickled, so
the result is frozen and picklable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aeron_archive_spark.archive.tables.option_table import Mode, OptionError, ParsedOptions, parse_options
from aeron_archive_spark.archive.tables.options import RecordingSelection, SourceOptions
from aeron_archive_spark.archive.tables.ranges import SegmentFiles
from aeron_archive_spark.connector.options import (
    MAX_TRIGGER_DELAY_MS_DEFAULT,
    OPEN_COST_IN_BYTES_ARCHIVE_DIR_DEFAULT,
    OPEN_COST_IN_BYTES_DEFAULT,
    OPTIONS,
    PositionSpec,
    TimestampSpec,
)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The validated, typed options of a Spark read (batch or streaming)."""

    recordings: SourceOptions  # where, which, how to decode: what the engine's planner and reads take
    starting: PositionSpec
    ending: PositionSpec
    # by time, over `starting`/`ending` for the recordings they name (Kafka's precedence); None: not by time
    starting_time: TimestampSpec | None
    ending_time: TimestampSpec | None
    starting_time_strategy: str  # "error" | "latest": no message at or after the starting time
    max_bytes_per_trigger: int | None
    min_bytes_per_trigger: int | None
    max_trigger_delay_ms: int
    max_bytes_per_partition: int
    open_cost_in_bytes: int
    fail_on_data_loss: bool

    @classmethod
    def parse(cls, raw: Mapping[str, str], streaming: bool | None) -> ReadOptions:
        """Parse for a batch read (False), a streaming read (True), or either (None: `schema()`), against every
        option of the data source (so a write option given to a read is reported as such)."""
        mode = Mode.READ if streaming is None else Mode.STREAM_READ if streaming else Mode.BATCH_READ
        parsed = parse_options(raw, mode, OPTIONS)
        recordings = SourceOptions.from_parsed(parsed)

        if parsed.is_set("startingPosition") and parsed["startingPosition"].kind == "json":
            _check_json_ids("startingPosition", parsed["startingPosition"], recordings.selection)
        ending = parsed.get("endingPosition", PositionSpec("latest"))
        if ending.kind == "json":
            _check_json_ids("endingPosition", ending, recordings.selection)
        starting_time = _by_time(parsed, "startingTimestamp", "startingPositionByTimestamp", recordings)
        ending_time = _by_time(parsed, "endingTimestamp", "endingPositionByTimestamp", recordings)

        max_bytes = parsed.get("maxBytesPerTrigger")
        min_bytes = parsed.get("minBytesPerTrigger")
        if max_bytes is not None and min_bytes is not None and min_bytes > max_bytes:
            raise OptionError(f"option minBytesPerTrigger ({min_bytes}) exceeds maxBytesPerTrigger ({max_bytes})")
        if parsed.is_set("maxTriggerDelay") and min_bytes is None:
            raise OptionError("option maxTriggerDelay only applies together with minBytesPerTrigger")
        return cls(
            recordings=recordings,
            starting=parsed["startingPosition"],
            ending=ending,
            starting_time=starting_time,
            ending_time=ending_time,
            starting_time_strategy=parsed["startingPositionByTimestampStrategy"],
            max_bytes_per_trigger=max_bytes,
            min_bytes_per_trigger=min_bytes,
            max_trigger_delay_ms=parsed.get("maxTriggerDelay", MAX_TRIGGER_DELAY_MS_DEFAULT),
            max_bytes_per_partition=parsed["maxBytesPerPartition"],
            open_cost_in_bytes=(
                parsed["openCostInBytes"]
                if parsed.is_set("openCostInBytes")
                else OPEN_COST_IN_BYTES_DEFAULT
                if not isinstance(recordings.location, SegmentFiles)
                else OPEN_COST_IN_BYTES_ARCHIVE_DIR_DEFAULT
            ),
            fail_on_data_loss=parsed["failOnDataLoss"],
        )


def _by_time(parsed: ParsedOptions, every: str, per_recording: str, recordings: SourceOptions) -> TimestampSpec | None:
    """Kafka's precedence: `every` (one time for all recordings) over `per_recording` (JSON by recording id)."""
    if parsed.is_set(every):
        spec: TimestampSpec = parsed[every]
        return spec
    if parsed.is_set(per_recording):
        spec = parsed[per_recording]
        _check_json_ids(per_recording, spec.per_recording_ms, recordings.selection)
        return spec
    return None


def _check_json_ids(name: str, spec: PositionSpec | Mapping[int, int], selection: RecordingSelection) -> None:
    if selection.recording_ids is None:
        return
    named = spec.positions if isinstance(spec, PositionSpec) else spec
    extra = sorted(set(named) - set(selection.recording_ids))
    if extra:
        raise OptionError(
            f"option {name} names recording {extra[0]}, which is not among the selected {selection.describe()}"
        )
