"""The unit of work of a read: one recording's messages that begin in `[start, end)`, and the facts it needs.

A `ReadRange` is planned where the catalog or the archive is reachable (the Spark driver, the export tool) and
read wherever it lands (an executor with no catalog and no archive connection of its own), so it carries every
descriptor fact and location option its read needs, and it pickles.
"""

from __future__ import annotations

from dataclasses import dataclass

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.descriptor import RecordingDescriptor


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

    @classmethod
    def of(cls, descriptor: RecordingDescriptor) -> RecordingFacts:
        return cls(
            recording_id=descriptor.recording_id,
            start_position=descriptor.start_position,
            term_length=descriptor.term_buffer_length,
            segment_length=descriptor.segment_file_length,
            initial_term_id=descriptor.initial_term_id,
            session_id=descriptor.session_id,
            stream_id=descriptor.stream_id,
            mtu_length=descriptor.mtu_length,
        )


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """Recordings read straight from an archive directory's segment files (`archiveDir`): no server needed."""

    archive_dir: str

    def describe(self) -> str:
        return f"archive directory {self.archive_dir} (archiveDir)"


@dataclass(frozen=True, slots=True)
class RunningArchive:
    """Recordings replayed through a running archive's control protocol: executors need no shared disk."""

    connection: ConnectionOptions

    def describe(self) -> str:
        c = self.connection
        return f"archive at controlChannel={c.control_channel} controlStreamId={c.control_stream_id}"


# Where a read finds its recordings: one of the two, never both (`archive.tables.read` maps each to its chunk
# source and to where its current descriptors come from).
ReadLocation = SegmentFiles | RunningArchive


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Messages of one recording that BEGIN in `[start, end)`.

    Reading starts at `start` (the batch's start offset, a message boundary, or a term boundary inside the range,
    which may fall inside a fragmented message: leading continuation fragments are skipped) and runs past `end`
    only to finish the last message begun before `end`; it never reaches `limit` (the batch's end offset for the
    recording, a message boundary, or the stop position of a stopped recording). `location` says where the
    recording is read from.

    `ends_at_stop`: `limit` is the stop position of a recording that was stopped when the range was planned. A
    stop is always a frame boundary, but a message may still be open there (a fragmented message cut short by a
    crash, or by a truncation): no range can ever complete it (an extension starts a new message at the stop), so
    the reader drops it with a warning instead of failing. This lets planning use a stopped recording's stop
    position as it is, with no look at its last frames.
    """

    index: int
    recording: RecordingFacts
    start: int
    end: int
    limit: int
    location: ReadLocation
    ends_at_stop: bool = False

    @property
    def recording_id(self) -> int:
        return self.recording.recording_id

    def surviving(self, start_position: int, stop_position: int | None) -> ReadRange | None:
        """What still exists of this range once the recording spans `[start_position, stop_position)`, or None.

        For reads that go on after a truncation or purge (failOnDataLoss=false): a purge moves the start up (the
        decoder skips continuation fragments there, as at any term boundary), a truncation moves the stop, and so
        the limit, down: the limit must never pass what is recorded. `stop_position` None: an active recording,
        which cannot have been truncated. A limit lowered to the stop ends at the stop (`ends_at_stop`): a
        message a truncation left open there is dropped by the reader, with a warning.
        """
        start = max(self.start, start_position)
        limit = self.limit if stop_position is None else min(self.limit, stop_position)
        end = min(self.end, limit)
        if start >= end:
            return None
        if (start, end, limit) == (self.start, self.end, self.limit):
            return self
        ends_at_stop = self.ends_at_stop or limit == stop_position
        return ReadRange(self.index, self.recording, start, end, limit, self.location, ends_at_stop)

    @property
    def size(self) -> int:
        """Bytes the range owns (`end - start`): what packing weighs it by."""
        return self.end - self.start
