"""What one replay read is asked for: a recording's bytes `[start, limit)`, read to finish what begins before `end`.

A `ReplaySpan` is the client's own description of a bounded read, free of how it was planned (a Spark partition,
an export range, a sink log's tail), so the replay reader depends on nothing above the client.
"""

from __future__ import annotations

from dataclasses import dataclass

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.connection import ConnectionOptions

# Replayed beyond the span's end up front, so a modest fragmented message ending past `end` needs no second
# replay; small next to a partition, and never past `limit`.
SLACK = 64 * 1024


@dataclass(frozen=True, slots=True)
class ReplaySpan:
    """Replay `[start, limit)` of recording `recording_id` through the archive at `connection`.

    The caller usually stops reading soon after `end` (once the message begun before it is whole); `limit` is a
    message boundary nothing is read past. `session_id` and `stream_id` are the recording's: replay rewrites them
    in every frame, and the reader puts them back so chunks equal the segment files. `index` only names the span
    in errors (a Spark partition's index).
    """

    connection: ConnectionOptions
    recording_id: int
    session_id: int
    stream_id: int
    term_length: int
    start: int
    end: int
    limit: int
    index: int = 0

    def first_replay_limit(self) -> int:
        """Where the span's first replay ends: `SLACK` past its end (at least one frame past its start), capped at
        its limit. The read-ahead and the reader ask for exactly this."""
        return min(self.limit, max(self.end, self.start + 32) + SLACK)

    def describe(self) -> str:
        return f"partition [{self.start}, {self.end}) limit {self.limit}"


def has_wildcard_port(channel: str) -> bool:
    """A UDP channel whose endpoint port is 0: the driver binds a port of its own, one reader's alone."""
    uri = ChannelUri.parse(channel)
    return uri.is_udp and (uri.get("endpoint") or "").endswith(":0")
