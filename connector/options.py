"""Every option of `format("aeron-archive")`, parsed and validated up front from one declarative table.

Spark hands a data source its options as a case-insensitive dict of strings with lowercased keys, and a mistake
(a typo'd name, `maxBytesPerTrigger=10MB!`) would otherwise surface as a late, cryptic failure on an executor.
So each reader/writer parses all of its options when it is created: an unknown option, a value that does not
parse, an option the mode does not accept, or a contradictory combination raises `OptionError` naming the option
(and the value).

The table (`OPTIONS`) is generic: a row gives the canonical camelCase name, a parser, a default, the modes that
accept it and a one-line meaning. The sink adds its rows to `OPTIONS` (or calls `register_option` from its own
module before parsing) and builds its typed view from `parse_options(raw, Mode.STREAM_WRITE)`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Flag, auto
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.constants import (
    CONTROL_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_STREAM_ID_DEFAULT,
    CONTROL_STREAM_ID_DEFAULT,
)

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive

# Keys Spark itself puts into the options (`load(path)` / `save(path)`); never reported as unknown.
SPARK_KEYS = frozenset({"path"})

REPLAY_CHANNEL_DEFAULT = "aeron:udp?endpoint=localhost:0"
REPLAY_STREAM_ID_DEFAULT = 0x5EE7
MAX_BYTES_PER_PARTITION_DEFAULT = 64 * 1024 * 1024

# Per-recording values in a position JSON with Kafka's meaning: -2 earliest, -1 latest.
EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    """An option is unknown, malformed, not accepted in this mode, or contradicts another option."""


class Mode(Flag):
    BATCH_READ = auto()
    STREAM_READ = auto()
    BATCH_WRITE = auto()
    STREAM_WRITE = auto()
    READ = BATCH_READ | STREAM_READ
    WRITE = BATCH_WRITE | STREAM_WRITE
    ANY = READ | WRITE


_MODE_WORDS = {
    Mode.BATCH_READ: "batch reads (spark.read)",
    Mode.STREAM_READ: "streaming reads (spark.readStream)",
    Mode.READ: "reads",
    Mode.BATCH_WRITE: "batch writes (df.write)",
    Mode.STREAM_WRITE: "streaming writes (df.writeStream)",
    Mode.WRITE: "writes",
}


# ---------------------------------------------------------------------------------------------------------------
# value parsers: (option name, raw string) -> value; they raise OptionError naming both


def _bad(name: str, raw: str, expected: str) -> OptionError:
    return OptionError(f"option {name}: expected {expected}, got {raw!r}")


def parse_string(name: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise _bad(name, raw, "a non-empty string")
    return value


def parse_int(name: str, raw: str, minimum: int | None = None, maximum: int | None = None) -> int:
    text = raw.strip()
    try:
        value = int(text, 0) if text.lower().startswith(("0x", "-0x")) else int(text)
    except ValueError:
        raise _bad(name, raw, "an integer") from None
    if minimum is not None and value < minimum:
        raise _bad(name, raw, f"an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise _bad(name, raw, f"an integer <= {maximum}")
    return value


def int_parser(minimum: int | None = None, maximum: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        return parse_int(name, raw, minimum, maximum)

    return parse


def parse_int32(name: str, raw: str) -> int:
    return parse_int(name, raw, -(2**31), 2**31 - 1)


def parse_bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise _bad(name, raw, "true or false")


_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_bytes(name: str, raw: str) -> int:
    """A positive byte count: `1048576`, `64k`, `16m`, `1g` (binary multiples, as Spark's byte strings)."""
    match = _SIZE.match(raw)
    if match is None or (match.group(3) and match.group(3).lower() == "ib" and not match.group(2)):
        raise _bad(name, raw, "a byte size such as 1048576, 64k, 16m or 1g")
    value = int(match.group(1)) << _SIZE_SHIFT[match.group(2).lower()]
    if value <= 0:
        raise _bad(name, raw, "a positive byte size")
    return value


_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, "": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, raw: str) -> int:
    """A duration in milliseconds: `15m`, `30s`, `250ms`, `1h`; a bare number is milliseconds (Spark's rule)."""
    match = _DURATION.match(raw)
    if match is None:
        raise _bad(name, raw, "a duration such as 250ms, 30s, 15m or 1h")
    return int(float(match.group(1)) * _DURATION_MS[(match.group(2) or "").lower()])


def parse_id_list(name: str, raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise _bad(name, raw, "a comma-separated list of recording ids")
    ids = tuple(parse_int(name, p, 0) for p in parts)
    if len(set(ids)) != len(ids):
        raise _bad(name, raw, "recording ids without duplicates")
    return ids


def choice_parser(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        text = raw.strip().lower()
        if text not in choices:
            raise _bad(name, raw, " or ".join(choices))
        return text

    return parse


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
            raise _bad(name, raw, expected) from None
        if not isinstance(data, dict) or not data:
            raise _bad(name, raw, expected)
        positions: dict[int, int] = {}
        for key, value in data.items():
            try:
                recording_id = int(key)
            except ValueError:
                raise OptionError(f"option {name}: key {key!r} is not a recording id in {raw!r}") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option {name}: position of recording {key} is not an integer: {value!r}")
            if value < 0 and value not in (LATEST, EARLIEST) or (value == EARLIEST and not allow_earliest):
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


# ---------------------------------------------------------------------------------------------------------------
# the table


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One row of the option table. `default` is used as is (not parsed) when the option is absent."""

    name: str
    parse: Callable[[str, str], Any]
    default: Any
    modes: Mode
    doc: str
    default_doc: str | None = None  # how the default reads in docs when it is computed or None


OPTIONS: dict[str, OptionSpec] = {}


def register_option(spec: OptionSpec) -> None:
    """Add a row (the sink calls this for its own options); re-registering the same name replaces the row."""
    OPTIONS[spec.name.lower()] = spec


for _spec in (
    # where the data is
    OptionSpec("archiveDir", parse_string, None, Mode.READ,
               "archive directory to read segment files from directly (no server; Java-written directories too)"),
    OptionSpec("aeronDir", parse_string, None, Mode.ANY,
               "media driver directory of the running archive's host; also used with archiveDir to tail active "
               "recordings through their rec-pos counters", "$AERON_DIR or Aeron's default"),
    OptionSpec("controlChannel", parse_string, CONTROL_CHANNEL_DEFAULT, Mode.ANY,
               "control request channel of the running archive"),
    OptionSpec("controlStreamId", parse_int32, CONTROL_STREAM_ID_DEFAULT, Mode.ANY,
               "control request stream id of the running archive"),
    OptionSpec("controlResponseChannel", parse_string, CONTROL_RESPONSE_CHANNEL_DEFAULT, Mode.ANY,
               "channel the archive answers on (port 0: any free port)"),
    OptionSpec("controlResponseStreamId", parse_int32, CONTROL_RESPONSE_STREAM_ID_DEFAULT, Mode.ANY,
               "stream id the archive answers on"),
    OptionSpec("replayChannel", parse_string, REPLAY_CHANNEL_DEFAULT, Mode.READ,
               "channel executors receive bounded replays on (port 0: any free port)"),
    OptionSpec("replayStreamId", parse_int32, REPLAY_STREAM_ID_DEFAULT, Mode.READ,
               "stream id executors receive bounded replays on"),
    OptionSpec("messageTimeout", parse_duration_ms, 10_000, Mode.ANY,
               "how long to wait for the archive to answer (connect, list, positions)", "10s"),
    # which recordings
    OptionSpec("recordingId", int_parser(0), None, Mode.ANY, "one recording id"),
    OptionSpec("recordingIds", parse_id_list, None, Mode.READ, "comma-separated recording ids"),
    OptionSpec("channel", parse_string, None, Mode.ANY,
               "with streamId: every recording whose original channel contains this (new ones are picked up)"),
    OptionSpec("streamId", parse_int32, None, Mode.ANY, "stream id of the recordings matched by channel"),
    # what to read
    OptionSpec("startingPosition", _position_parser(True, EARLIEST), PositionSpec("earliest"), Mode.READ,
               'earliest, latest, or {"<recordingId>": position} (-2 earliest, -1 latest; others: earliest); '
               "a restarted query resumes from its checkpoint instead", "earliest"),
    OptionSpec("endingPosition", _position_parser(False, LATEST), PositionSpec("latest", missing=LATEST), Mode.BATCH_READ,
               'batch reads: latest (the end at planning time) or {"<recordingId>": position} (others: latest)',
               "latest"),
    OptionSpec("maxBytesPerTrigger", parse_bytes, None, Mode.STREAM_READ,
               "upper bound of recorded bytes per micro-batch, shared fairly across recordings (cut at message "
               "boundaries; at least one message per recording)"),
    OptionSpec("minBytesPerTrigger", parse_bytes, None, Mode.STREAM_READ,
               "skip triggers until this many new bytes are available or maxTriggerDelay has passed"),
    OptionSpec("maxTriggerDelay", parse_duration_ms, 15 * 60_000, Mode.STREAM_READ,
               "longest wait for minBytesPerTrigger before a batch runs anyway", "15m"),
    OptionSpec("maxBytesPerPartition", parse_bytes, MAX_BYTES_PER_PARTITION_DEFAULT, Mode.READ,
               "split a recording's range into Spark partitions of at most this many bytes (whole terms, at least "
               "one)", "64m"),
    OptionSpec("failOnDataLoss", parse_bool, True, Mode.READ,
               "fail when a recording was truncated/purged past the checkpoint (false: warn and skip ahead)"),
    # payload decoding
    OptionSpec("sbeSchema", parse_string, None, Mode.ANY, "path of an SBE XML schema: decode payloads into columns"),
    OptionSpec("sbeMessage", parse_string, None, Mode.ANY,
               "SBE message name to decode (default: decided by each message's template id)"),
    OptionSpec("sbe.onError", choice_parser("fail", "null"), "fail", Mode.READ,
               "on an undecodable payload: fail naming recording and position, or null the decoded columns"),
):
    register_option(_spec)


@dataclass(frozen=True)
class ParsedOptions:
    """Parsed values by canonical name; `given` holds the names the user set explicitly."""

    values: Mapping[str, Any]
    given: frozenset[str]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def is_set(self, name: str) -> bool:
        return name in self.given


_EXTENSIONS = ("aeron_archive_spark.connector.sink.options",)  # modules that register rows of their own


def _load_extensions() -> None:
    """Import the modules that add rows, so an option of another mode is reported as such, not as unknown."""
    import importlib

    for name in _EXTENSIONS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def parse_options(raw: Mapping[str, str] | Iterable[tuple[str, str]], mode: Mode) -> ParsedOptions:
    """Parse every option for `mode`; raises OptionError on the first unknown/misplaced/malformed one."""
    _load_extensions()
    items = list(raw.items()) if isinstance(raw, Mapping) else list(raw)
    values: dict[str, Any] = {}
    given: set[str] = set()
    for key, value in items:
        lower = str(key).lower()
        if lower in SPARK_KEYS:
            continue
        spec = OPTIONS.get(lower)
        if spec is None:
            known = sorted(s.name for s in OPTIONS.values() if s.modes & mode)
            close = difflib.get_close_matches(lower, [name.lower() for name in known], n=1, cutoff=0.6)
            hint = f" (did you mean {OPTIONS[close[0]].name}?)" if close else ""
            raise OptionError(f"unknown option {key!r} for format(\"aeron-archive\"){hint}; known options: "
                              + ", ".join(known))
        if not spec.modes & mode:
            applies = _MODE_WORDS.get(spec.modes, "other modes")
            raise OptionError(f"option {spec.name} applies to {applies} only, not to {_MODE_WORDS.get(mode, mode)}")
        if value is None:
            raise OptionError(f"option {spec.name}: expected a value, got None")
        values[spec.name] = spec.parse(spec.name, str(value))
        given.add(spec.name)
    for spec in OPTIONS.values():
        if spec.modes & mode and spec.name not in values:
            values[spec.name] = spec.default
    return ParsedOptions(values, frozenset(given))


def options_table(mode: Mode = Mode.ANY) -> list[tuple[str, str, str]]:
    """(name, default, meaning) rows, for docs and error messages."""
    rows = []
    for spec in OPTIONS.values():
        if spec.modes & mode:
            default = spec.default_doc if spec.default_doc is not None else (
                "" if spec.default is None else str(spec.default).lower() if isinstance(spec.default, bool)
                else str(spec.default))
            rows.append((spec.name, default, spec.doc))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# typed views


_CONNECTION_OPTIONS = ("controlChannel", "controlStreamId", "controlResponseChannel", "controlResponseStreamId",
                       "replayChannel", "replayStreamId")


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How to reach a running archive; picklable, so executors receive it inside partitions."""

    aeron_dir: str | None = None
    control_channel: str = CONTROL_CHANNEL_DEFAULT
    control_stream_id: int = CONTROL_STREAM_ID_DEFAULT
    control_response_channel: str = CONTROL_RESPONSE_CHANNEL_DEFAULT
    control_response_stream_id: int = CONTROL_RESPONSE_STREAM_ID_DEFAULT
    replay_channel: str = REPLAY_CHANNEL_DEFAULT
    replay_stream_id: int = REPLAY_STREAM_ID_DEFAULT
    message_timeout_ms: int = 10_000

    @classmethod
    def from_parsed(cls, parsed: ParsedOptions) -> ConnectionOptions:
        return cls(
            aeron_dir=parsed.get("aeronDir"),
            control_channel=parsed.get("controlChannel", CONTROL_CHANNEL_DEFAULT),
            control_stream_id=parsed.get("controlStreamId", CONTROL_STREAM_ID_DEFAULT),
            control_response_channel=parsed.get("controlResponseChannel", CONTROL_RESPONSE_CHANNEL_DEFAULT),
            control_response_stream_id=parsed.get("controlResponseStreamId", CONTROL_RESPONSE_STREAM_ID_DEFAULT),
            replay_channel=parsed.get("replayChannel", REPLAY_CHANNEL_DEFAULT),
            replay_stream_id=parsed.get("replayStreamId", REPLAY_STREAM_ID_DEFAULT),
            message_timeout_ms=parsed.get("messageTimeout", 10_000),
        )

    def resolved_aeron_dir(self) -> str:
        """`aeronDir`, else $AERON_DIR, else Aeron's default directory for this user."""
        if self.aeron_dir:
            return self.aeron_dir
        from aeron_archive_spark.archive.client.aeron_archive import default_aeron_dir

        return default_aeron_dir()

    def describe(self) -> str:
        return (f"archive on controlChannel={self.control_channel} controlStreamId={self.control_stream_id} "
                f"(aeronDir={self.resolved_aeron_dir()})")

    def connect(self, client_name: str = "aeron-archive-spark") -> AeronArchive:
        """An AeronArchive client; errors name the control channel, stream and media driver directory."""
        from aeron_archive_spark.archive.client.aeron_archive import AeronArchive

        aeron_dir = self.resolved_aeron_dir()
        if not os.path.isdir(aeron_dir):
            raise OptionError(
                f"no media driver at aeronDir={aeron_dir}: start one there, set aeronDir (or $AERON_DIR), "
                "or read segment files directly with archiveDir"
            )
        try:
            return AeronArchive.connect(
                aeron_dir,
                self.control_channel,
                self.control_stream_id,
                self.control_response_channel,
                self.control_response_stream_id,
                message_timeout_s=self.message_timeout_ms / 1000.0,
                client_name=client_name,
            )
        except Exception as ex:
            raise ConnectionError(f"cannot reach the {self.describe()}: {ex}") from ex


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
    fail_on_data_loss: bool
    sbe_schema: str | None
    sbe_message: str | None
    sbe_on_error: str
    streaming: bool

    @classmethod
    def parse(cls, raw: Mapping[str, str], streaming: bool | None) -> SourceOptions:
        """Parse for a batch read (False), a streaming read (True), or either (None: `schema()`)."""
        mode = Mode.READ if streaming is None else Mode.STREAM_READ if streaming else Mode.BATCH_READ
        parsed = parse_options(raw, mode)

        archive_dir = parsed.get("archiveDir")
        remote_given = [name for name in _CONNECTION_OPTIONS if parsed.is_set(name)]
        if archive_dir is not None and remote_given:
            raise OptionError(
                f"options archiveDir and {remote_given[0]} name two locations: give archiveDir to read segment "
                "files directly, or the running archive's connection options, not both"
            )
        if archive_dir is not None:
            archive_dir = os.path.abspath(os.path.expanduser(archive_dir))
        connection = None if archive_dir is not None else ConnectionOptions.from_parsed(parsed)

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

        return cls(
            archive_dir=archive_dir,
            connection=connection,
            aeron_dir=parsed.get("aeronDir"),
            selection=selection,
            starting=parsed["startingPosition"],
            ending=ending,
            max_bytes_per_trigger=max_bytes,
            min_bytes_per_trigger=min_bytes,
            max_trigger_delay_ms=parsed.get("maxTriggerDelay", 15 * 60_000),
            max_bytes_per_partition=parsed["maxBytesPerPartition"],
            fail_on_data_loss=parsed["failOnDataLoss"],
            sbe_schema=None if sbe_schema is None else os.path.abspath(sbe_schema),
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
            f"option {name} names recording {extra[0]}, which is not among the selected "
            f"{selection.describe()}"
        )
