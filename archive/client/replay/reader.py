"""The replay reader: spans of recordings read through a running archive as chunks of frames, in order.

What a read through the archive needs from the client, in one place: a `ReplayReader` reads each `ReplaySpan`
with bounded replays (`fetch`), and the small spans of a partition with their replays asked for ahead
(`read_ahead`), pipelined on one control session whose answers are matched by correlation id (`responses`).
Callers (the table reader, the sink's log) only say what to read; connections come from the process's pool.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from aeron_archive_spark.archive.client.pool import ConnectionPool, connection_pool
from aeron_archive_spark.archive.client.replay.fetch import ReplayFetch
from aeron_archive_spark.archive.client.replay.read_ahead import ReplayReadAhead
from aeron_archive_spark.archive.client.replay.span import ReplaySpan
from aeron_archive_spark.archive.storage.frames import FrameScan


class ReplayReader:
    """Reads `ReplaySpan`s through their archive (see the module docstring). One reader thread.

    `read(span)` yields `(chunk, position, scan)`:
    - `chunk` holds whole frames exactly as recorded (the recording's session and stream ids put back; the one
      difference from the segment files is a CRC some recordings keep in the session id field), starting at
      `span.start` and never reaching `span.limit`; chunks follow each other without gap or overlap. The last frame
      of a chunk may be a PAD cut after its header; the next chunk starts where that PAD ends.
    - `scan` is the frame walk of exactly `chunk` (`stop_at_padding=False`), handed on so a decoder need not walk
      it again.
    - A chunk is valid until the next one is asked for (the buffer is reused); at most `chunk_length` bytes (plus
      a PAD header).
    - Stop iterating at any time: the replay is stopped and the subscription closed. Errors raise
      `ReplayFetchError` naming the recording, the position, the replay channel and the archive.
    """

    def __init__(
        self, chunk_length: int, stall_timeout_s: float | None = None, pool: ConnectionPool | None = None
    ) -> None:
        """`stall_timeout_s`: how long a replay may send nothing (default: the connection's message timeout);
        `pool`: where control sessions come from (default: the process-wide `connection_pool()`)."""
        self._chunk_length = chunk_length
        self._stall_timeout_s = stall_timeout_s
        self._pool = pool
        self._ahead: ReplayReadAhead | None = None

    @property
    def pool(self) -> ConnectionPool:
        return self._pool if self._pool is not None else connection_pool()

    def read_ahead(self, spans: Sequence[ReplaySpan]) -> None:
        """The spans about to be read, in order: the small ones get their replays asked for ahead. Call `close`
        when done; spans read in another order, or not at all, are simply read one replay at a time (their
        replays asked for ahead are stopped). The spans are matched by identity: pass these very objects to
        `read`."""
        self.close()
        ahead = ReplayReadAhead(spans, self.pool)
        if len(ahead) > 1:
            self._ahead = ahead

    def close(self, failed: bool = False) -> None:
        """End the read-ahead, if any: stop its replays still in flight, close its subscription and session."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close(failed)

    def read(self, span: ReplaySpan) -> Generator[tuple[memoryview, int, FrameScan]]:
        """The span's frames as `(chunk, position, scan)` (see the class docstring)."""
        if span.start >= span.limit:
            return
        ahead = self._ahead if self._ahead is not None and self._ahead.holds(span) else None
        fetch = ReplayFetch(span, self._chunk_length, self._stall_timeout_s, self.pool, ahead)
        failed = True
        try:
            yield from fetch.chunks()
            failed = False
        except GeneratorExit:  # the caller stopped early (it had the message it needed): not a failure
            failed = False
            raise
        finally:
            fetch.close(failed)
            if failed and ahead is not None:
                self.close(failed=True)  # its session's state is unknown now: the read-ahead ends with it
