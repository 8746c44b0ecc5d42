"""Every option of `format("aeron-archive")`: one immutable table, the engine's read rows, the source's and the sink's.

The engine's rows (`archive.tables.options.RECORDING_OPTIONS`: where recordings are, which ones, how to decode) are
shared with the Spark-free tools; the rows only a Spark read has (`SOURCE_OPTIONS`: positions, admission control,
partitions, data loss; the source's typed view of them is `connector.source.options`) and those only the sink has
(`SINK_OPTIONS`; its typed view is `connector.sink.options`) are here. Readers and writers parse against this whole
table, so an option of another mode is reported as such ("applies to writes only"), never as unknown, and an
unknown one is told every option of its mode. README.md's option tables are checked against it
(`tests/unit/test_readme_options.py`), and so is the data source's class docstring.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aeron_archive_spark.archive.tables.option_table import (
    Mode,
    OptionError,
    OptionSpec,
    OptionTable,
    bad_value,
    choice_parser,
    parse_bool,
    parse_bytes,
    parse_duration_ms,
    parse_timestamp_ms,
)
from aeron_archive_spark.archive.tables.options import RECORDING_OPTIONS
from aeron_archive_spark.archive.tables.planning import MAX_BYTES_PER_RANGE_DEFAULT

# What starting the read of one range costs, in bytes one could read meanwhile (Spark's openCostInBytes): a bounded
# replay through an archive (a control request, a publication and an image: ~2 ms measured on the 2-core machine of
# tests/benchmarks/bench_replay_setup.py, while a replay reads ~150 MB/s there), or a segment file read and decoded
# (~0.1 ms, at ~1 GB/s). On 1,000 small recordings through an archive (bench_many_recordings), open costs of 4m /
# 1m / 256k gave 63 / 16 / 4 tasks and 5.1 / 4.2 / 3.2 s; with archiveDir, 256k / 128k gave 4 / 2 tasks and
# 2.6x / 2.1x the time of one recording.
OPEN_COST_IN_BYTES_DEFAULT = 256 * 1024
OPEN_COST_IN_BYTES_ARCHIVE_DIR_DEFAULT = 128 * 1024
MAX_TRIGGER_DELAY_MS_DEFAULT = 15 * 60_000

# Per-recording values in a position JSON with Kafka's meaning: -2 earliest, -1 latest.
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class PositionSpec:
    """`earliest`, `latest`, or per-recording positions (`{"7": 4096, "8": -2}`; -2 earliest, -1 latest)."""

    kind: str  # "earliest" | "latest" | "json"
    positions: Mapping[int, int] = field(default_factory=dict)
    missing: int = EARLIEST  # for "json": what recordings the JSON does not name get

    def for_recording(self, recording_id: int) -> int:
        """EARLIEST, LATEST or an explicit position for one recording."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return self.positions.get(recording_id, self.missing)


def _position_parser(allow_earliest: bool, missing: int) -> Callable[[str, str], PositionSpec]:
    words = ("earliest", "latest") if allow_earliest else ("latest",)

    def parse(name: str, raw: str) -> PositionSpec:
        text = raw.strip()
        if text.lower() in words:
            return PositionSpec(text.lower())
        expected = (" or ".join(words)) + ' or JSON such as {"<recordingId>": <position>}'
        try:
            data = json.loads(text)
        except ValueError:
            raise bad_value(name, raw, expected) from None
        if not isinstance(data, dict) or not data:
            raise bad_value(name, raw, expected)
        positions: dict[int, int] = {}
        for key, value in data.items():
            try:
                recording_id = int(key)
            except ValueError:
                raise OptionError(f"option {name}: key {key!r} is not a recording id in {raw!r}") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option {name}: position of recording {key} is not an integer: {value!r}")
            if (value < 0 and value not in (LATEST, EARLIEST)) or (value == EARLIEST and not allow_earliest):
                raise OptionError(
                    f"option {name}: position of recording {key} must be >= 0"
                    + (", -2 (earliest) or -1 (latest)" if allow_earliest else " or -1 (latest)")
                    + f", got {value}"
                )
            if value >= 0 and value % 32:
                raise OptionError(
                    f"option {name}: position {value} of recording {key} is not a frame boundary (multiple of 32)"
                )
            positions[recording_id] = value
        return PositionSpec("json", positions, missing)

    return parse


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Where reads start or end by time (Kafka's `startingTimestamp` / `startingOffsetsByTimestamp`): one time for
    every recording, or per-recording times; ms since the epoch, resolved to positions through the time index."""

    every_ms: int | None = None  # startingTimestamp / endingTimestamp
    per_recording_ms: Mapping[int, int] = field(default_factory=dict)  # ...PositionByTimestamp

    def for_recording(self, recording_id: int) -> int | None:
        """The time (ms) a recording's read starts/ends at, None when it is not chosen by time."""
        if self.every_ms is not None:
            return self.every_ms
        return self.per_recording_ms.get(recording_id)


def _parse_timestamp(name: str, raw: str) -> TimestampSpec:
    return TimestampSpec(every_ms=parse_timestamp_ms(name, raw))


def _parse_timestamps_json(name: str, raw: str) -> TimestampSpec:
    expected = 'JSON such as {"<recordingId>": <ms since the epoch>}'
    try:
        data = json.loads(raw)
    except ValueError:
        raise bad_value(name, raw, expected) from None
    if not isinstance(data, dict) or not data:
        raise bad_value(name, raw, expected)
    times: dict[int, int] = {}
    for key, value in data.items():
        try:
            recording_id = int(key)
        except ValueError:
            raise OptionError(f"option {name}: key {key!r} is not a recording id in {raw!r}") from None
        times[recording_id] = parse_timestamp_ms(f"{name} (recording {key})", value)
    return TimestampSpec(per_recording_ms=times)


SOURCE_OPTIONS = OptionTable(
    (
        # where each recording's read starts and ends
        OptionSpec(
            "startingPosition",
            _position_parser(True, EARLIEST),
            PositionSpec("earliest"),
            Mode.READ,
            'earliest, latest, or {"<recordingId>": position} (-2 earliest, -1 latest; others: earliest); '
            "a restarted query resumes from its checkpoint instead",
            "earliest",
        ),
        OptionSpec(
            "endingPosition",
            _position_parser(False, LATEST),
            PositionSpec("latest", missing=LATEST),
            Mode.BATCH_READ,
            'batch reads: latest (the end at planning time) or {"<recordingId>": position} (others: latest)',
            "latest",
        ),
        # ... or by the time the archive recorded the messages (its time index), with Kafka's precedence: a
        # *Timestamp option wins over *PositionByTimestamp, which wins over *Position
        OptionSpec(
            "startingTimestamp",
            _parse_timestamp,
            None,
            Mode.READ,
            "start each recording at its first message recorded at or after this time (ms since the epoch, or "
            "ISO-8601 with a zone); over startingPositionByTimestamp and startingPosition",
        ),
        OptionSpec(
            "startingPositionByTimestamp",
            _parse_timestamps_json,
            None,
            Mode.READ,
            '{"<recordingId>": time}: startingTimestamp per recording (others: startingPosition)',
        ),
        OptionSpec(
            "startingPositionByTimestampStrategy",
            choice_parser("error", "latest"),
            "error",
            Mode.READ,
            "when a recording has no message at or after the starting time: error, or latest (its end)",
            "error",
        ),
        OptionSpec(
            "endingTimestamp",
            _parse_timestamp,
            None,
            Mode.BATCH_READ,
            "batch reads: end each recording before its first message recorded at or after this time (none: "
            "latest); over endingPositionByTimestamp and endingPosition",
        ),
        OptionSpec(
            "endingPositionByTimestamp",
            _parse_timestamps_json,
            None,
            Mode.BATCH_READ,
            '{"<recordingId>": time}: endingTimestamp per recording (others: endingPosition)',
        ),
        # admission control: how much a micro-batch reads, and when
        OptionSpec(
            "maxBytesPerTrigger",
            parse_bytes,
            None,
            Mode.STREAM_READ,
            "upper bound of recorded bytes per micro-batch, shared fairly across recordings (cut at message "
            "boundaries; at least one message per recording)",
        ),
        OptionSpec(
            "minBytesPerTrigger",
            parse_bytes,
            None,
            Mode.STREAM_READ,
            "skip triggers until this many new bytes are available or maxTriggerDelay has passed",
        ),
        OptionSpec(
            "maxTriggerDelay",
            parse_duration_ms,
            MAX_TRIGGER_DELAY_MS_DEFAULT,
            Mode.STREAM_READ,
            "longest wait for minBytesPerTrigger before a batch runs anyway",
            "15m",
        ),
        # how a read is cut into Spark tasks
        OptionSpec(
            "maxBytesPerPartition",
            parse_bytes,
            MAX_BYTES_PER_RANGE_DEFAULT,
            Mode.READ,
            "split a recording's range into Spark partitions of at most this many bytes (whole terms, at least one)",
            "64m",
        ),
        OptionSpec(
            "openCostInBytes",
            parse_bytes,
            None,
            Mode.READ,
            "what starting to read a recording costs, in bytes, when packing small recordings into one partition "
            "(as spark.sql.files.openCostInBytes)",
            "256k (128k with archiveDir)",
        ),
        # recordings truncated or purged under a query
        OptionSpec(
            "failOnDataLoss",
            parse_bool,
            True,
            Mode.READ,
            "fail when a recording was truncated/purged under the checkpoint or a planned batch (false: warn, go on)",
        ),
    )
)

SINK_OPTIONS = OptionTable(
    (
        OptionSpec(
            "sourceLocation",
            choice_parser("local", "remote"),
            None,
            Mode.WRITE,
            "where the archive finds the sink's publication: local (same media driver, spy for UDP) or remote",
            "local if the archive is on this host (IPC or loopback control channel), else remote",
        ),
        OptionSpec(
            "taskResultCompression",
            choice_parser("lz4", "zstd", "none"),
            "lz4",
            Mode.WRITE,
            "how executors compress the rows they hand to the driver in Spark's task results (Arrow IPC buffer "
            "compression); the recording is never compressed",
            "lz4",
        ),
        OptionSpec(
            "publishTimeout",
            parse_duration_ms,
            30_000,
            Mode.WRITE,
            "fail a commit when the archive makes no progress (back pressure, recorder, signals) this long",
            "30s",
        ),
    )
)

# Options of earlier versions, refused in every mode (a read given one too) with what replaced them.
REMOVED_OPTIONS = {
    "sinkStateDir": (
        "option sinkStateDir was removed: the sink keeps its exactly-once state in the archive itself (a sink "
        "log recording found by the query's checkpointLocation, or by the target of a batch write), so nothing "
        "has to be shared between hosts; remove the option (see docs/cluster.md)"
    ),
    "stagingLocation": (
        "option stagingLocation was removed: executors hand their rows to the driver in Spark's commit "
        "messages, so no staging directory is shared between executors and the driver; remove the option"
    ),
}

OPTIONS: OptionTable = (RECORDING_OPTIONS + SOURCE_OPTIONS + SINK_OPTIONS).with_removed(REMOVED_OPTIONS)


def options_table(mode: Mode = Mode.ANY) -> list[tuple[str, str, str]]:
    """(name, default, meaning) rows of every option that applies to `mode`, for docs and error messages."""
    return OPTIONS.rows(mode)
