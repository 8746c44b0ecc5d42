"""The sink's typed view of the `format("aeron-archive")` options, parsed from the shared table.

Connection and target options (`aeronDir`, `controlChannel`, ..., `recordingId`, `channel`, `streamId`,
`sbeSchema`, `sbeMessage`) are rows of `archive.tables.options.RECORDING_OPTIONS`, shared with the source; the
rows only the sink has are `connector.options.SINK_OPTIONS`, and `connector.options.OPTIONS`, the table parsed
against here, holds both. Spark builds a stream writer per micro-batch (and again for commit), so parsing does no
I/O; the result is frozen and picklable because the writer travels to executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.tables.option_table import (
    Mode,
    OptionError,
    parse_options,
)
from aeron_archive_spark.archive.tables.options import connection_from_parsed
from aeron_archive_spark.connector.options import OPTIONS

# Spark adds the query's checkpointLocation to a streaming sink's options; it is not a user option of ours.
CHECKPOINT_KEY = "checkpointlocation"


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Validated sink options."""

    connection: ConnectionOptions
    recording_id: int | None
    channel: str | None
    stream_id: int | None
    source_location: str
    checkpoint_location: str | None  # as Spark passed it (any URI scheme): the streaming sink's identity
    publish_timeout_s: float
    sbe_schema: str | None
    sbe_message: str | None
    task_result_compression: str | None = "lz4"  # Arrow IPC codec of the commit messages; None: uncompressed

    def target_text(self) -> str:
        """The target as the user wrote it, for error messages."""
        if self.recording_id is not None:
            return f"recordingId={self.recording_id}"
        return f"channel={self.channel} streamId={self.stream_id}"


def parse_sink_options(options: Mapping[str, Any], streaming: bool) -> SinkOptions:
    """Validate Spark's options for `writeStream` (streaming) or `write`; errors name the option."""
    raw = {str(k): str(v) for k, v in dict(options).items() if v is not None}
    checkpoint = next((v for k, v in raw.items() if k.lower() == CHECKPOINT_KEY), None)
    parsed = parse_options(
        {k: v for k, v in raw.items() if k.lower() != CHECKPOINT_KEY},
        Mode.STREAM_WRITE if streaming else Mode.BATCH_WRITE,
        OPTIONS,
    )

    recording_id = parsed.get("recordingId")
    channel = parsed.get("channel")
    stream_id = parsed.get("streamId")
    if recording_id is not None and (channel is not None or stream_id is not None):
        raise OptionError(
            "give either option recordingId (extend that recording) or options channel and streamId "
            "(a new recording), not both"
        )
    if recording_id is None:
        if channel is None and stream_id is None:
            raise OptionError(
                "the aeron-archive sink needs a target: option recordingId, or options channel and streamId"
            )
        if channel is None:
            raise OptionError("option streamId needs option channel (or give recordingId instead)")
        if stream_id is None:
            raise OptionError("option channel needs option streamId (or give recordingId instead)")
        from aeron_archive_spark.archive.channel import ChannelError, ChannelUri

        try:
            ChannelUri.parse(channel)
        except ChannelError as ex:
            raise OptionError(f"option channel: {ex}") from None

    if streaming and not checkpoint:
        raise OptionError(
            "the aeron-archive sink needs the query's checkpointLocation (option checkpointLocation or "
            "spark.sql.streaming.checkpointLocation): it identifies the sink's exactly-once state in the archive"
        )

    if parsed.get("sbeMessage") is not None and parsed.get("sbeSchema") is None:
        raise OptionError("option sbeMessage needs option sbeSchema (the SBE XML schema to encode with)")

    connection = connection_from_parsed(parsed)
    return SinkOptions(
        connection=connection,
        recording_id=recording_id,
        channel=channel,
        stream_id=stream_id,
        source_location=parsed["sourceLocation"] or _default_source_location(connection.control_channel),
        checkpoint_location=checkpoint if streaming else None,
        publish_timeout_s=parsed["publishTimeout"] / 1000.0,
        # The XML text, read on the driver: executors encode with it and need no copy of the file.
        sbe_schema=None if parsed.get("sbeSchema") is None else _schema_text(parsed["sbeSchema"]),
        sbe_message=parsed.get("sbeMessage"),
        task_result_compression=None if parsed["taskResultCompression"] == "none" else parsed["taskResultCompression"],
    )


def _schema_text(path: str) -> str:
    from aeron_archive_spark.archive.tables.sbe.columns import schema_text  # numpy/pyarrow: only when used

    return schema_text(path)


def _default_source_location(control_channel: str) -> str:
    """`local` when the archive runs on this host (it can spy our publication), else `remote` (a cluster)."""
    from aeron_archive_spark.archive.client.host import archive_is_remote

    return "remote" if archive_is_remote(control_channel) else "local"
