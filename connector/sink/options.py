"""The sink's typed view of the `format("aeron-archive")` options, parsed from the shared table.

Connection and target options (`aeronDir`, `controlChannel`, ..., `recordingId`, `channel`, `streamId`,
`sbeSchema`, `sbeMessage`) are rows of `archive.tables.options.RECORDING_OPTIONS`, shared with the source; the
rows only the sink has are `connector.options.SINK_OPTIONS`, and `connector.options.OPTIONS`, the table parsed
against here, holds both. Spark builds a stream writer per micro-batch (and again for commit), so parsing does no
I/O; the result is frozen and picklable because the writer travels to executors.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.tables.option_table import (
    Mode,
    OptionError,
    parse_options,
)
from aeron_archive_spark.archive.tables.options import connection_from_parsed
from aeron_archive_spark.connector.options import OPTIONS, STATE_SUBDIR

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
    state_dir: str | None
    staging_dir: str
    checkpoint_location: str | None
    publish_timeout_s: float
    sbe_schema: str | None
    sbe_message: str | None

    def target_text(self) -> str:
        """The target as the user wrote it, for error messages."""
        if self.recording_id is not None:
            return f"recordingId={self.recording_id}"
        return f"channel={self.channel} streamId={self.stream_id}"


def local_path(location: str, option: str) -> str:
    """A POSIX path from a plain path or a `file:` URI; other schemes cannot be fsynced/renamed atomically here."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    if parsed.scheme == "" or len(parsed.scheme) == 1:
        return os.path.abspath(os.path.expanduser(location))
    raise OptionError(
        f"option {option}={location!r} uses scheme {parsed.scheme!r}: the aeron-archive sink keeps its state and "
        "staged data on a local or shared POSIX filesystem; set sinkStateDir (and stagingLocation) to such a path"
    )


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

    checkpoint_path = (
        local_path(checkpoint, "checkpointLocation")
        if checkpoint and urlparse(checkpoint).scheme in ("", "file")
        else None
    )
    if parsed.get("sinkStateDir"):
        state_dir: str | None = local_path(parsed["sinkStateDir"], "sinkStateDir")
    elif streaming:
        if checkpoint is None:
            raise OptionError(
                "the aeron-archive sink needs option sinkStateDir, or the query's checkpointLocation "
                "(its state then lives in <checkpointLocation>/" + STATE_SUBDIR + ")"
            )
        state_dir = os.path.join(local_path(checkpoint, "checkpointLocation"), STATE_SUBDIR)
    else:
        state_dir = None
    if parsed.get("stagingLocation"):
        staging_dir = local_path(parsed["stagingLocation"], "stagingLocation")
    elif state_dir is not None:
        staging_dir = os.path.join(state_dir, "staging")
    else:
        staging_dir = os.path.join(tempfile.gettempdir(), "aeron-archive-sink-staging")

    if parsed.get("sbeMessage") is not None and parsed.get("sbeSchema") is None:
        raise OptionError("option sbeMessage needs option sbeSchema (the SBE XML schema to encode with)")

    return SinkOptions(
        connection=connection_from_parsed(parsed),
        recording_id=recording_id,
        channel=channel,
        stream_id=stream_id,
        source_location=parsed["sourceLocation"],
        state_dir=state_dir,
        staging_dir=staging_dir,
        checkpoint_location=checkpoint_path,
        publish_timeout_s=parsed["publishTimeout"] / 1000.0,
        sbe_schema=parsed.get("sbeSchema"),
        sbe_message=parsed.get("sbeMessage"),
    )
