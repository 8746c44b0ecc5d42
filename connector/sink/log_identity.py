"""Which log belongs to which sink: the sink's identity, its key, and the alias and stream id of its log recording.

A sink finds its log by the `alias` of the log's channel, `aeron-archive-spark-sink:<key>` (`.<generation>` added
for a compacted log's later generations) on stream `SINK_LOG_STREAM_ID`, with `<key>` a digest of what identifies
the sink across restarts and hosts (`sink_identity`): the query's checkpointLocation for a stream, the target for
a batch write. Pure: no archive here (finding the recordings is `log_store`'s).
"""

from __future__ import annotations

import hashlib

from aeron_archive_spark.archive.channel import ChannelUri, strip_channel
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.connector.sink.errors import SinkError

# The stream id of every sink log ("aeron" in ASCII): a reader matching the target's channel and stream id
# never matches a log, whose channel alias also names it.
SINK_LOG_STREAM_ID = 0x6165_726F
ALIAS_PREFIX = "aeron-archive-spark-sink:"
KEY_LENGTH = 24


def sink_identity(
    streaming: bool,
    checkpoint_location: str | None,
    recording_id: int | None,
    channel: str | None,
    stream_id: int | None,
) -> str:
    """What identifies a sink across restarts and hosts, as text shown to operators.

    A stream: its checkpointLocation (a restart on another host gives the same location: Spark's checkpoint is
    the query's identity). A batch write: its target (the recording, or channel and stream), so every write to
    the same target shares one log and one batch map, and a write repairs what a crashed one left.
    """
    if streaming:
        if not checkpoint_location:
            raise SinkError("a streaming aeron-archive sink needs the query's checkpointLocation")
        return f"checkpoint {checkpoint_location.rstrip('/')}"
    if recording_id is not None:
        return f"recording {recording_id}"
    assert channel is not None and stream_id is not None
    return f"channel {strip_channel(channel)} stream {stream_id}"


def sink_key(identity: str) -> str:
    """A fixed-length digest of the identity: never a prefix of another key, and no path in the alias."""
    return hashlib.sha256(identity.encode()).hexdigest()[:KEY_LENGTH]


def log_alias(key: str, generation: int = 0) -> str:
    """The alias of generation `generation` of a sink's log (the first keeps the plain alias of earlier versions)."""
    return ALIAS_PREFIX + key + (f".{generation}" if generation else "")


def log_id_of(descriptor: RecordingDescriptor) -> tuple[str, int] | None:
    """(key, generation) in a log recording's channel alias, or None if it is not a sink log."""
    try:
        alias = ChannelUri.parse(descriptor.stripped_channel).get("alias") or ""
    except Exception:
        return None
    if not alias.startswith(ALIAS_PREFIX):
        return None
    key, _, generation = alias[len(ALIAS_PREFIX) :].partition(".")
    if len(key) != KEY_LENGTH:
        return None
    try:
        return key, int(generation) if generation else 0
    except ValueError:
        return None
