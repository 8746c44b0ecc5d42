"""The read options of `format("aeron-archive")` and the typed views every reader builds from them.

`RECORDING_OPTIONS` is the immutable table of the rows that say where recordings are (a directory, or a running
archive's connection), which recordings (ids, or channel + stream), what to read (positions, limits) and how to
decode payloads. The rows that apply to writes too (`Mode.ANY`) are shared with the Spark sink, which adds its own
rows to make the connector's one table of every option. `SourceOptions.parse` validates a read's options against
a table (this one by default, the connector's whole table under Spark) into one frozen, picklable value: the
offline `export` tool and the Spark source parse the same way, with the same errors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aeron_archive_spark.archive.client.connection import (
    MESSAGE_TIMEOUT_MS_DEFAULT,
    REPLAY_CHANNEL_DEFAULT,
    REPLAY_STREAM_ID_DEFAULT,
    ConnectionOptions,
    default_replay_channel,
)
from aeron_archive_spark.archive.constants import (
    CONTROL_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_STREAM_ID_DEFAULT,
    CONTROL_STREAM_ID_DEFAULT,
)
from aeron_archive_spark.archive.tables.option_table import (
    Mode,
    OptionError,
    OptionSpec,
    OptionTable,
    ParsedOptions,
    bad_value,
    choice_parser,
    int_parser,
    parse_bool,
    parse_bytes,
    parse_duration_ms,
    parse_id_list,
    parse_int32,
    parse_options,
    parse_string,
)

MAX_BYTES_PER_PARTITION_DEFAULT = 64 * 1024 * 1024
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


def _parse_secret(name: str, raw: str) -> str:
    """The secret exactly as given (whitespace is part of it); errors never echo it."""
    if not raw:
        raise OptionError(f"option {name}: the secret is empty")
    return raw


RECORDING_OPTIONS = OptionTable(
    (
        # where the data is
        OptionSpec(
            "archiveDir",
            parse_string,
            None,
            Mode.READ,
            "archive directory to read segment files from directly (no server; Java-written directories too)",
        ),
        OptionSpec(
            "aeronDir",
            parse_string,
            None,
            Mode.ANY,
            "media driver directory of the running archive's host; also used with archiveDir to tail active "
            "recordings through their rec-pos counters",
            "$AERON_DIR or Aeron's default",
        ),
        OptionSpec(
            "controlChannel",
            parse_string,
            CONTROL_CHANNEL_DEFAULT,
            Mode.ANY,
            "control request channel of the running archive",
        ),
        OptionSpec(
            "controlStreamId",
            parse_int32,
            CONTROL_STREAM_ID_DEFAULT,
            Mode.ANY,
            "control request stream id of the running archive",
        ),
        OptionSpec(
            "controlResponseChannel",
            parse_string,
            CONTROL_RESPONSE_CHANNEL_DEFAULT,
            Mode.ANY,
            "channel the archive answers on (port 0: any free port)",
        ),
        OptionSpec(
            "controlResponseStreamId",
            parse_int32,
            CONTROL_RESPONSE_STREAM_ID_DEFAULT,
            Mode.ANY,
            "stream id the archive answers on",
        ),
        OptionSpec(
            "replayChannel",
            parse_string,
            REPLAY_CHANNEL_DEFAULT,
            Mode.READ,
            "channel executors receive bounded replays on (port 0: any free port); default aeron:ipc when "
            "controlChannel is IPC (the archive shares the media driver)",
        ),
        OptionSpec(
            "replayStreamId",
            parse_int32,
            REPLAY_STREAM_ID_DEFAULT,
            Mode.READ,
            "stream id executors receive bounded replays on (on IPC, left at its default, a partition of small "
            "recordings draws a stream id of its own)",
        ),
        OptionSpec(
            "messageTimeout",
            parse_duration_ms,
            MESSAGE_TIMEOUT_MS_DEFAULT,
            Mode.ANY,
            "how long to wait for the archive to answer (connect, list, positions)",
            "10s",
        ),
        OptionSpec(
            "archiveSecret",
            _parse_secret,
            None,
            Mode.ANY,
            "credentials for an archive served with --secret-file/--secret-env: its read-only secret is enough to "
            "read, writes need the read-write one; redacted by Spark's default spark.redaction.regex",
        ),
        # which recordings
        OptionSpec("recordingId", int_parser(0), None, Mode.ANY, "one recording id"),
        OptionSpec("recordingIds", parse_id_list, None, Mode.READ, "comma-separated recording ids"),
        OptionSpec(
            "channel",
            parse_string,
            None,
            Mode.ANY,
            "with streamId: every recording whose original channel contains this (new ones are picked up)",
        ),
        OptionSpec("streamId", parse_int32, None, Mode.ANY, "stream id of the recordings matched by channel"),
        # what to read
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
        OptionSpec(
            "maxBytesPerPartition",
            parse_bytes,
            MAX_BYTES_PER_PARTITION_DEFAULT,
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
        OptionSpec(
            "failOnDataLoss",
            parse_bool,
            True,
            Mode.READ,
            "fail when a recording was truncated/purged under the checkpoint or a planned batch (false: warn, go on)",
        ),
        # payload decoding
        OptionSpec(
            "sbeSchema", parse_string, None, Mode.ANY, "path of an SBE XML schema: decode payloads into columns"
        ),
        OptionSpec(
            "sbeMessage",
            parse_string,
            None,
            Mode.ANY,
            "SBE message name to decode (default: decided by each message's template id)",
        ),
        OptionSpec(
            "sbe.onError",
            choice_parser("fail", "null"),
            "fail",
            Mode.READ,
            "on an undecodable payload: fail naming recording and position, or null the decoded columns",
        ),
    )
)


def connection_from_parsed(parsed: ParsedOptions) -> ConnectionOptions:
    """The connection options of a parse of rows of `RECORDING_OPTIONS` (defaults where not given)."""
    return ConnectionOptions(
        aeron_dir=parsed.get("aeronDir"),
        control_channel=parsed.get("controlChannel", CONTROL_CHANNEL_DEFAULT),
        control_stream_id=parsed.get("controlStreamId", CONTROL_STREAM_ID_DEFAULT),
        control_response_channel=parsed.get("controlResponseChannel", CONTROL_RESPONSE_CHANNEL_DEFAULT),
        control_response_stream_id=parsed.get("controlResponseStreamId", CONTROL_RESPONSE_STREAM_ID_DEFAULT),
        replay_channel=(
            parsed["replayChannel"]
            if parsed.is_set("replayChannel")
            else default_replay_channel(parsed.get("controlChannel", CONTROL_CHANNEL_DEFAULT))
        ),
        replay_stream_id=parsed.get("replayStreamId", REPLAY_STREAM_ID_DEFAULT),
        message_timeout_ms=parsed.get("messageTimeout", MESSAGE_TIMEOUT_MS_DEFAULT),
        credentials=parsed.get("archiveSecret"),
    )


# ---------------------------------------------------------------------------------------------------------------
# typed views


_CONNECTION_OPTIONS = (
    "controlChannel",
    "controlStreamId",
    "controlResponseChannel",
    "controlResponseStreamId",
    "replayChannel",
    "replayStreamId",
)


@dataclass(frozen=True, slots=True)
class RecordingSelection:
    """Exactly one of: explicit ids (`recordingId`/`recordingIds`) or a subscription (`channel` + `streamId`)."""

    recording_ids: tuple[int, ...] | None = None
    channel: str | None = None
    stream_id: int | None = None

    @property
    def is_subscription(self) -> bool:
        return self.recording_ids is None

    def describe(self) -> str:
        if self.recording_ids is not None:
            return "recordingIds=" + ",".join(map(str, self.recording_ids))
        return f"channel={self.channel} streamId={self.stream_id}"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The validated, typed options of a read (batch or streaming)."""

    archive_dir: str | None
    connection: ConnectionOptions | None
    aeron_dir: str | None
    selection: RecordingSelection
    starting: PositionSpec
    ending: PositionSpec
    max_bytes_per_trigger: int | None
    min_bytes_per_trigger: int | None
    max_trigger_delay_ms: int
    max_bytes_per_partition: int
    open_cost_in_bytes: int
    fail_on_data_loss: bool
    sbe_schema: str | None  # the schema's XML text (see archive.tables.sbe.columns.schema_text)
    sbe_message: str | None
    sbe_on_error: str
    streaming: bool

    @classmethod
    def parse(
        cls, raw: Mapping[str, str], streaming: bool | None, table: OptionTable = RECORDING_OPTIONS
    ) -> SourceOptions:
        """Parse for a batch read (False), a streaming read (True), or either (None: `schema()`).

        `table` is every option the caller knows (the Spark connector passes its table of reads and writes, so a
        write option given to a read is reported as such); it must contain `RECORDING_OPTIONS`' rows.
        """
        mode = Mode.READ if streaming is None else Mode.STREAM_READ if streaming else Mode.BATCH_READ
        parsed = parse_options(raw, mode, table)

        archive_dir = parsed.get("archiveDir")
        remote_given = [name for name in _CONNECTION_OPTIONS if parsed.is_set(name)]
        if archive_dir is not None and remote_given:
            raise OptionError(
                f"options archiveDir and {remote_given[0]} name two locations: give archiveDir to read segment "
                "files directly, or the running archive's connection options, not both"
            )
        if archive_dir is not None and parsed.is_set("archiveSecret"):
            raise OptionError(
                "option archiveSecret has no use with archiveDir: segment files are read directly, without an "
                "archive connection to authenticate; remove archiveSecret, or archiveDir to read through the archive"
            )
        if archive_dir is not None:
            archive_dir = os.path.abspath(os.path.expanduser(archive_dir))
        connection = None if archive_dir is not None else connection_from_parsed(parsed)

        selection = _selection(parsed)
        if parsed.is_set("startingPosition") and parsed["startingPosition"].kind == "json":
            _check_json_ids("startingPosition", parsed["startingPosition"], selection)
        ending = parsed.get("endingPosition", PositionSpec("latest"))
        if ending.kind == "json":
            _check_json_ids("endingPosition", ending, selection)

        max_bytes = parsed.get("maxBytesPerTrigger")
        min_bytes = parsed.get("minBytesPerTrigger")
        if max_bytes is not None and min_bytes is not None and min_bytes > max_bytes:
            raise OptionError(f"option minBytesPerTrigger ({min_bytes}) exceeds maxBytesPerTrigger ({max_bytes})")
        if parsed.is_set("maxTriggerDelay") and min_bytes is None:
            raise OptionError("option maxTriggerDelay only applies together with minBytesPerTrigger")
        sbe_schema = parsed.get("sbeSchema")
        for name in ("sbeMessage", "sbe.onError"):
            if parsed.is_set(name) and sbe_schema is None:
                raise OptionError(f"option {name} needs sbeSchema (the SBE XML schema to decode with)")
        if sbe_schema is not None and not os.path.isfile(sbe_schema):
            raise OptionError(f"option sbeSchema: no such file {sbe_schema!r}")

        if sbe_schema is not None:
            from aeron_archive_spark.archive.tables.sbe.columns import schema_text  # numpy/pyarrow: only when used

            sbe_schema = schema_text(sbe_schema)
        return cls(
            archive_dir=archive_dir,
            connection=connection,
            aeron_dir=parsed.get("aeronDir"),
            selection=selection,
            starting=parsed["startingPosition"],
            ending=ending,
            max_bytes_per_trigger=max_bytes,
            min_bytes_per_trigger=min_bytes,
            max_trigger_delay_ms=parsed.get("maxTriggerDelay", MAX_TRIGGER_DELAY_MS_DEFAULT),
            max_bytes_per_partition=parsed["maxBytesPerPartition"],
            open_cost_in_bytes=(
                parsed["openCostInBytes"]
                if parsed.is_set("openCostInBytes")
                else OPEN_COST_IN_BYTES_DEFAULT
                if archive_dir is None
                else OPEN_COST_IN_BYTES_ARCHIVE_DIR_DEFAULT
            ),
            fail_on_data_loss=parsed["failOnDataLoss"],
            # The XML text, read here on the driver: it travels with the plan, executors need no copy of the file.
            sbe_schema=sbe_schema,
            sbe_message=parsed.get("sbeMessage"),
            sbe_on_error=parsed.get("sbe.onError", "fail"),
            streaming=bool(streaming),
        )

    def describe_location(self) -> str:
        if self.archive_dir is not None:
            return f"archiveDir={self.archive_dir}"
        assert self.connection is not None
        return self.connection.describe()


def _selection(parsed: ParsedOptions) -> RecordingSelection:
    chosen = [name for name in ("recordingId", "recordingIds", "channel") if parsed.is_set(name)]
    if len(chosen) != 1:
        what = "none" if not chosen else " and ".join(chosen)
        raise OptionError(
            "give exactly one of the options recordingId, recordingIds, or channel (+ streamId) to choose the "
            f"recordings to read; got {what}"
        )
    if chosen[0] == "channel":
        if not parsed.is_set("streamId"):
            raise OptionError("option channel needs streamId (the stream id of the recordings to read)")
        return RecordingSelection(channel=parsed["channel"], stream_id=parsed["streamId"])
    if parsed.is_set("streamId"):
        raise OptionError(f"option streamId only applies together with channel, not with {chosen[0]}")
    ids = (parsed["recordingId"],) if chosen[0] == "recordingId" else parsed["recordingIds"]
    return RecordingSelection(recording_ids=tuple(ids))


def _check_json_ids(name: str, spec: PositionSpec, selection: RecordingSelection) -> None:
    if selection.recording_ids is None:
        return
    extra = sorted(set(spec.positions) - set(selection.recording_ids))
    if extra:
        raise OptionError(
            f"option {name} names recording {extra[0]}, which is not among the selected {selection.describe()}"
        )
