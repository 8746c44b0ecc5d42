"""Remote read path: a range's frames fetched by replay from a running archive (no shared disk).

Used when a range's location is a `RunningArchive`. The reading itself is the client's replay reader
(`archive.client.replay`: bounded replays, the small ranges of a partition asked for ahead and pipelined on one
control session); this module only maps the tables' `ReadRange` onto the reader's `ReplaySpan` and serves the
`ChunkSource` contract with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from aeron_archive_spark.archive.client.pool import ConnectionPool
from aeron_archive_spark.archive.client.replay import ReplayReader, ReplaySpan
from aeron_archive_spark.archive.storage.frames import FrameScan
from aeron_archive_spark.archive.tables.chunks import CHUNK_LENGTH
from aeron_archive_spark.archive.tables.ranges import ReadRange, RunningArchive


def replay_span(read_range: ReadRange) -> ReplaySpan:
    """What the replay reader is asked to read for `read_range`; a range of a running archive only."""
    location = read_range.location
    if not isinstance(location, RunningArchive):
        raise ValueError(
            f"partition {read_range.index} of recording {read_range.recording_id} reads {location.describe()}, "
            "not a running archive"
        )
    facts = read_range.recording
    return ReplaySpan(
        connection=location.connection,
        recording_id=facts.recording_id,
        session_id=facts.session_id,
        stream_id=facts.stream_id,
        term_length=facts.term_length,
        start=read_range.start,
        end=read_range.end,
        limit=read_range.limit,
        index=read_range.index,
    )


class ReplayChunkSource:
    """`ChunkSource` over replays from a running archive (see the module docstring)."""

    def __init__(
        self, chunk_length: int = CHUNK_LENGTH, stall_timeout_s: float | None = None, pool: ConnectionPool | None = None
    ) -> None:
        """`pool`: where control sessions come from (default: the process-wide `connection_pool()`)."""
        self._reader = ReplayReader(chunk_length, stall_timeout_s, pool)
        # The spans handed to the read-ahead, by range identity (the reader matches spans by identity too); the
        # range is kept with its span so that its id is not reused while the read-ahead runs.
        self._spans: dict[int, tuple[ReadRange, ReplaySpan]] = {}

    def read_ahead(self, ranges: Sequence[ReadRange]) -> None:
        """The ranges about to be read, in order: the small ones of a running archive get their replays asked for
        ahead. Call `close` when done; ranges read in another order, or not at all, are simply read one replay at
        a time."""
        self._spans = {id(r): (r, replay_span(r)) for r in ranges if isinstance(r.location, RunningArchive)}
        self._reader.read_ahead([span for _, span in self._spans.values()])

    def close(self, failed: bool = False) -> None:
        """End the read-ahead, if any: stop its replays still in flight, close its subscription and session."""
        self._spans = {}
        self._reader.close(failed)

    def iter_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int]]:
        for chunk, position, _ in self.iter_scanned_chunks(partition):
            yield chunk, position

    def iter_scanned_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int, FrameScan]]:
        """`(chunk, position, scan)`: `scan` walks exactly `chunk` with `stop_at_padding=False` (the walk that puts
        the recording's session and stream ids back, handed on so the decoder need not walk the chunk again)."""
        held = self._spans.get(id(partition))
        span = held[1] if held is not None and held[0] is partition else replay_span(partition)
        return self._reader.read(span)
