"""The read options every reader of recordings has, Spark or not, and the typed view built from them.

`RECORDING_OPTIONS` is the immutable table of the rows that say where recordings are (a directory, or a running
archive's connection), which recordings (ids, or channel + stream) and how to decode payloads: what the offline
`export` tool, the planner (`recording_source`) and the reads (`read`, `payload`) use. The rows that apply to writes
too (`Mode.ANY`) are shared with the Spark sink. Spark's own read options (positions, triggers, partitions, data
loss) are rows of the connector's table (`connector.options`), which adds them and the sink's to these.
`SourceOptions.parse` validates a Spark-free tool's options against this table into one frozen, picklable value;
the Spark source parses against the connector's whole table and builds the same value with `from_parsed`, so both
read the same way, with the same errors.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from aeron_archive_spark.archive.channel import ChannelError, validate_mtu
from aeron_archive_spark.archive.client.connection import (
    MESSAGE_TIMEOUT_MS_DEFAULT,
    REPLAY_CHANNEL_DEFAULT,
    REPLAY_MTU_DEFAULT,
    REPLAY_STREAM_ID_DEFAULT,
    ConnectionOptions,
    default_replay_channel,
    with_replay_mtu,
)
from aeron_archive_spark.archive.client.response_replay import response_channel_toward
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
    choice_parser,
    int_parser,
    parse_bool,
    parse_duration_ms,
    parse_id_list,
    parse_int,
    parse_int32,
    parse_options,
    parse_string,
)
from aeron_archive_spark.archive.tables.ranges import ArchiveReplicas, RunningArchive, SegmentFiles, SourceLocation


def _parse_secret(name: str, raw: str) -> str:
    """The secret exactly as given (whitespace is part of it); errors never echo it."""
    if not raw:
        raise OptionError(f"option {name}: the secret is empty")
    return raw


def _parse_replay_mtu(name: str, raw: str) -> int | None:
    """Bytes per replay datagram, or None for 'recording' (the recording's own MTU, as Java's archive replays)."""
    if raw.strip().lower() == "recording":
        return None
    value = parse_int(name, raw)
    try:
        return validate_mtu(value, name)
    except ChannelError as ex:
        raise OptionError(f"option {ex}") from None


def _parse_channel_list(name: str, raw: str) -> tuple[str, ...]:
    """Control channels separated by ';' (Aeron URIs never hold one), each once."""
    channels = tuple(part.strip() for part in raw.split(";") if part.strip())
    if not channels:
        raise OptionError(f"option {name}: no control channel in {raw!r}")
    for channel in channels:
        if not channel.startswith("aeron:"):
            raise OptionError(f"option {name}: {channel!r} is not an Aeron channel (aeron:udp?... or aeron:ipc)")
    repeated = sorted({c for c in channels if channels.count(c) > 1})
    if repeated:
        raise OptionError(f"option {name}: {repeated[0]} is listed twice")
    return channels


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
            "controlChannels",
            _parse_channel_list,
            None,
            Mode.READ,
            "control request channels of several archives holding copies of the recordings, separated by ';': "
            "the first one's recording ids name the recordings; reads spread over the copies and fail over",
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
            "replayMtu",
            _parse_replay_mtu,
            REPLAY_MTU_DEFAULT,
            Mode.READ,
            "datagram size replays over UDP are asked for (a multiple of 32, at most 65504): several recorded "
            "frames per datagram, the frames themselves unchanged; 'recording' keeps the recording's MTU. Our "
            "archive honours it, Java's replays at the recording's MTU; an mtu in replayChannel takes precedence",
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
            "responseChannels",
            parse_bool,
            False,
            Mode.READ,
            "true: control responses and replays come back over response channels (control-mode=response), on "
            "connections the reading process opens, so executors and the driver need no inbound port (the archive's "
            "response control port must be reachable instead); needs a UDP controlChannel and an archive with "
            "response channels (ours, Java's from 1.46)",
        ),
        OptionSpec(
            "responseControlPort",
            int_parser(1, 65535),
            None,
            Mode.READ,
            "with responseChannels: the UDP port on the archive's host its response and replay publications bind "
            "and the readers' status messages go to (must be free there and reachable from every Spark host)",
            "controlChannel's port + 1",
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
        OptionSpec(
            "timestampField",
            parse_string,
            None,
            Mode.READ,
            "with sbeSchema: a decoded column holding each message's own time (e.g. transactTime): reads by time "
            "place recordings without a time index (Java's, or recorded with it off) by it, assuming it never "
            "decreases along the recording (checked: a decrease met fails the read, naming where)",
        ),
        OptionSpec(
            "timestampFieldUnit",
            choice_parser("ns", "us", "ms", "s"),
            "ns",
            Mode.READ,
            "what one unit of timestampField is: ns (SBE's UTCTimestamp, CME's transactTime), us, ms or s",
            "ns",
        ),
    )
)

TIMESTAMP_FIELD_UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def connection_from_parsed(parsed: ParsedOptions) -> ConnectionOptions:
    """The connection options of a parse of rows of `RECORDING_OPTIONS` (defaults where not given)."""
    options = ConnectionOptions(
        aeron_dir=parsed.get("aeronDir"),
        control_channel=parsed.get("controlChannel", CONTROL_CHANNEL_DEFAULT),
        control_stream_id=parsed.get("controlStreamId", CONTROL_STREAM_ID_DEFAULT),
        control_response_channel=parsed.get("controlResponseChannel", CONTROL_RESPONSE_CHANNEL_DEFAULT),
        control_response_stream_id=parsed.get("controlResponseStreamId", CONTROL_RESPONSE_STREAM_ID_DEFAULT),
        replay_channel=with_replay_mtu(
            (
                parsed["replayChannel"]
                if parsed.is_set("replayChannel")
                else default_replay_channel(parsed.get("controlChannel", CONTROL_CHANNEL_DEFAULT))
            ),
            parsed.get("replayMtu", REPLAY_MTU_DEFAULT),
        ),
        replay_stream_id=parsed.get("replayStreamId", REPLAY_STREAM_ID_DEFAULT),
        message_timeout_ms=parsed.get("messageTimeout", MESSAGE_TIMEOUT_MS_DEFAULT),
        credentials=parsed.get("archiveSecret"),
    )
    return _response_mode(parsed, options)


def _response_mode(parsed: ParsedOptions, options: ConnectionOptions) -> ConnectionOptions:
    """`options` with response channels toward its archive when `responseChannels` is true (else unchanged): the
    control response channel and the replay channel both `control-mode=response|control=<archive host>:<port>`
    (`client.response_replay.response_channel_toward`), so nothing is sent to a port of the reading host first."""
    if not parsed.get("responseChannels", False):
        if parsed.is_set("responseControlPort"):
            raise OptionError("option responseControlPort only applies with responseChannels=true")
        return options
    for name in ("controlResponseChannel", "replayChannel"):
        if parsed.is_set(name):
            raise OptionError(
                f"options responseChannels=true and {name} both choose the channel the archive answers on: "
                f"responseChannels makes its own (control-mode=response toward the archive's host); remove {name}, "
                "or give response channels yourself in controlResponseChannel and replayChannel without it"
            )
    try:
        channel = response_channel_toward(options.control_channel, parsed.get("responseControlPort"))
    except ValueError as ex:
        raise OptionError(
            f"option responseChannels=true cannot work with controlChannel={options.control_channel}: {ex} (over "
            "IPC the archive shares this host's media driver and no port is involved: leave responseChannels off)"
        ) from None
    replay = with_replay_mtu(channel, parsed.get("replayMtu", REPLAY_MTU_DEFAULT))
    return replace(options, control_response_channel=channel, replay_channel=replay)


# ---------------------------------------------------------------------------------------------------------------
# typed views


_CONNECTION_OPTIONS = (
    "controlChannel",
    "controlChannels",
    "controlStreamId",
    "controlResponseChannel",
    "controlResponseStreamId",
    "replayChannel",
    "replayMtu",
    "replayStreamId",
    "responseChannels",
    "responseControlPort",
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
    """The validated, typed options every read of recordings needs: where they are, which, how to decode them."""

    location: SourceLocation  # archiveDir's segment files, the running archive, or archives holding copies
    aeron_dir: str | None
    selection: RecordingSelection
    sbe_schema: str | None  # the schema's XML text (see archive.tables.sbe.columns.schema_text)
    sbe_message: str | None
    sbe_on_error: str
    timestamp_field: str | None = None  # a decoded column giving each message's time (reads by time, no index)
    timestamp_field_unit_ns: int = 1

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Parse a Spark-free tool's read options against `RECORDING_OPTIONS`."""
        return cls.from_parsed(parse_options(raw, Mode.READ, RECORDING_OPTIONS))

    @classmethod
    def from_parsed(cls, parsed: ParsedOptions) -> SourceOptions:
        """The view of a parse against a table that holds `RECORDING_OPTIONS`' rows (the Spark connector's holds
        more); checks the combinations of these rows."""
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
        location: SourceLocation
        if archive_dir is not None:
            location = SegmentFiles(os.path.abspath(os.path.expanduser(archive_dir)))
        elif parsed.is_set("controlChannels"):
            location = _replicas(parsed)
        else:
            location = RunningArchive(connection_from_parsed(parsed))

        selection = _selection(parsed)
        sbe_schema = parsed.get("sbeSchema")
        for name in ("sbeMessage", "sbe.onError", "timestampField", "timestampFieldUnit"):
            if parsed.is_set(name) and sbe_schema is None:
                raise OptionError(f"option {name} needs sbeSchema (the SBE XML schema to decode with)")
        if sbe_schema is not None and not os.path.isfile(sbe_schema):
            raise OptionError(f"option sbeSchema: no such file {sbe_schema!r}")

        if sbe_schema is not None:
            from aeron_archive_spark.archive.tables.sbe.columns import schema_text  # numpy/pyarrow: only when used

            sbe_schema = schema_text(sbe_schema)
        return cls(
            location=location,
            aeron_dir=parsed.get("aeronDir"),
            selection=selection,
            # The XML text, read here on the driver: it travels with the plan, executors need no copy of the file.
            sbe_schema=sbe_schema,
            sbe_message=parsed.get("sbeMessage"),
            sbe_on_error=parsed.get("sbe.onError", "fail"),
            timestamp_field=parsed.get("timestampField"),
            timestamp_field_unit_ns=TIMESTAMP_FIELD_UNITS_NS[parsed.get("timestampFieldUnit", "ns")],
        )

    def describe_location(self) -> str:
        if isinstance(self.location, SegmentFiles):
            return f"archiveDir={self.location.archive_dir}"
        if isinstance(self.location, ArchiveReplicas):
            return self.location.describe()
        return self.location.connection.describe()


def _replicas(parsed: ParsedOptions) -> ArchiveReplicas:
    """The archives `controlChannels` lists, each with the other connection options (its replay channel's default
    follows its own control channel, as `controlChannel`'s does)."""
    if parsed.is_set("controlChannel"):
        raise OptionError(
            "options controlChannel and controlChannels both name archives: list every archive in controlChannels "
            "(the first one's recording ids name the recordings), or give controlChannel alone"
        )
    base = connection_from_parsed(parsed)
    archives = []
    for channel in parsed["controlChannels"]:
        replay = (
            base.replay_channel
            if parsed.is_set("replayChannel")
            else with_replay_mtu(default_replay_channel(channel), parsed.get("replayMtu", REPLAY_MTU_DEFAULT))
        )
        archive = replace(base, control_channel=channel, replay_channel=replay)
        archives.append(RunningArchive(_response_mode(parsed, archive)))
    return ArchiveReplicas(tuple(archives))


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
