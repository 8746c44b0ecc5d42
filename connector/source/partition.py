"""The picklable unit of work a source read runs on an executor.

`read()` runs in an executor's Python worker on the pickled planning reader, which has no archive connection and no
catalog, so a partition carries every descriptor fact and location option its read needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from aeron_archive_spark.connector.options import ConnectionOptions


@dataclass(frozen=True, slots=True)
class RecordingFacts:
    """The descriptor facts a read needs: segment/term arithmetic, and the sessionId/streamId row columns.

    `session_id` is the descriptor's session id, not the per-frame one: replay rewrites frame session ids and
    recordings made with record checksums keep a CRC there on disk, so the descriptor value is the only one both
    read paths can report identically.
    """

    recording_id: int
    start_position: int
    term_length: int
    segment_length: int
    initial_term_id: int
    session_id: int
    stream_id: int
    mtu_length: int


@dataclass(frozen=True)
class AeronArchivePartition(InputPartition):
    """Messages of one recording that BEGIN in `[start, end)`.

    Reading starts at `start` (the batch's start offset, a message boundary, or a term boundary inside the range,
    which may fall inside a fragmented message: leading continuation fragments are skipped) and runs past `end`
    only to finish the last message begun before `end`; it never reaches `limit` (the batch's end offset for the
    recording, always a message boundary). Exactly one of `archive_dir` / `connection` is set.
    """

    index: int
    recording: RecordingFacts
    start: int
    end: int
    limit: int
    archive_dir: str | None
    connection: ConnectionOptions | None

    @property
    def recording_id(self) -> int:
        return self.recording.recording_id
