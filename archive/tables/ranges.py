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


@dataclass(frozen=True, slots=True)
class ArchiveReplicas:
    """Several running archives holding copies of the same recordings (`controlChannels`): the first names them.

    Recording ids differ between archives. The first archive listed is the *reference*: its recording ids are the
    ones the selection (`recordingId(s)`), positions, offsets, checkpoints and the `recordingId` column use, and a
    recording's copies on the others are found by what copies share (`archive.client.mirror.copy_key`). Planning
    places each recording's ranges on the archives that hold them (`Replicas`); the planner itself and executors
    fail over from one to the next.
    """

    archives: tuple[RunningArchive, ...]

    @property
    def reference(self) -> RunningArchive:
        return self.archives[0]

    def describe(self) -> str:
        return "archives at controlChannels=" + ";".join(a.connection.control_channel for a in self.archives)


@dataclass(frozen=True, slots=True)
class Copy:
    """One archive's copy of a recording: where it is, and its recording id there."""

    archive: RunningArchive
    recording_id: int


@dataclass(frozen=True, slots=True)
class Replicas:
    """The copies a range may be read from, each holding at least up to the range's limit, in the planner's order of
    preference. A range reads from one and goes on from the position it reached on the next when one fails (the
    copies are byte-identical); ranges of different indexes start on different copies, which spreads a read."""

    copies: tuple[Copy, ...]

    def order_for(self, index: int) -> tuple[Copy, ...]:
        """The copies in the order the range of planned index `index` tries them: rotated by the index."""
        if len(self.copies) <= 1:
            return self.copies
        shift = index % len(self.copies)
        return self.copies[shift:] + self.copies[:shift]

    def describe(self) -> str:
        return "copies at " + ", ".join(
            f"recording {c.recording_id} of controlChannel={c.archive.connection.control_channel}" for c in self.copies
        )


# Where a read finds its recordings: segment files, one running archive, or copies on several (`archive.tables.read`
# maps each to its chunk source and to where its current descriptors come from).
ReadLocation = SegmentFiles | RunningArchive | Replicas

# Where a read's options say the recordings are (`SourceOptions.location`); replicas become `Replicas` per range.
SourceLocation = SegmentFiles | RunningArchive | ArchiveReplicas


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
