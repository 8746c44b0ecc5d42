"""Where a read range's bytes come from: the `ChunkSource` protocol and the disk implementation.

Two implementations yield the same bytes, one for each kind of `range.location`: `DiskChunkSource` (here) reads
`SegmentFiles` (`archiveDir`), and `archive.tables.replay_chunks.ReplayChunkSource` has the client's replay reader
(`archive.client.replay`) replay `[range.start, range.limit)` through a `RunningArchive` (no shared disk);
`archive.tables.read.open_chunk_source` chooses. The message decoder (`aeron_archive_spark.archive.tables.decode`)
sees only chunks, so both paths give identical rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    FrameScan,
    ScanStop,
    align,
    frame_type_at,
    scan_frames,
)
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.tables.ranges import ReadRange, SegmentFiles

log = logging.getLogger(__name__)

# Target size of one chunk. Big enough to amortise per-chunk numpy/Arrow fixed costs, small enough that a task's
# memory stays a few MiB (measured sweet spot; see tests/benchmarks/bench_spark_source.py).
CHUNK_LENGTH = 4 * 1024 * 1024


@runtime_checkable
class ChunkSource(Protocol):
    """Yields the recorded frames of a read range, in order.

    Everything a read needs comes from the range (`ReadRange`, called `partition` below: under Spark it is one);
    connections come from the process's `archive.client.pool`, never from the chunk source itself.

    Contract of `iter_chunks(partition)`, yielding `(chunk, position)`:
    - `chunk` holds whole Aeron frames exactly as recorded (header + payload, 32-byte aligned) and `position` is
      the stream position of its first byte. The first chunk starts at `partition.start`.
    - Positions only increase. The next chunk starts where the previous one's last frame ends (by its aligned
      frame length). A chunk's last frame may be a PAD cut after its header, wherever it lies in its term (the
      next chunk starts where the PAD ends); a PAD that runs to the end of its term may also be left out entirely.
    - No byte at or past `partition.limit` is ever yielded; iteration ends there (the limit is a message boundary).
      The caller usually stops earlier (once the message begun before `partition.end` is complete) and then
      closes the generator: release resources (files, replays, subscriptions) in a `finally`.
    - A chunk is only valid until the next one is requested (buffers may be reused); at most about
      `CHUNK_LENGTH` bytes each, so memory stays bounded whatever the partition size.
    - Errors raise with a message naming the recording id and the position (and the archive for remote reads).
    """

    def iter_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int]]: ...


class DiskChunkSource:
    """Reads segment files directly (`archiveDir`): no server, works on a Java Aeron Archive directory too.

    Chunks are `RecordingReader.view`s: views of read-only mappings of the segment file, so payload bytes are copied
    once (into the Arrow `value` column), not twice; a read of a few KiB in all (a small recording) is a `pread`
    instead. A segment file shorter than the recorded range (damaged, or truncated meanwhile) is an error.

    Besides the protocol's `iter_chunks`, `iter_scanned_chunks` also yields the `FrameScan` of each chunk: finding
    where the whole frames of a read end needs a frame walk anyway, and handing it on spares the decoder a second
    walk of every byte.
    """

    def __init__(self, chunk_length: int = CHUNK_LENGTH) -> None:
        self._chunk_length = chunk_length

    def iter_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int]]:
        for chunk, position, _ in self.iter_scanned_chunks(partition):
            yield chunk, position

    def iter_scanned_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int, FrameScan]]:
        """`(chunk, position, scan)`: `scan` walks exactly `chunk` with `stop_at_padding=False`."""
        location = partition.location
        if not isinstance(location, SegmentFiles):
            raise ValueError(
                f"partition {partition.index} of recording {partition.recording_id} reads {location.describe()}, "
                "not segment files"
            )
        facts = partition.recording
        term_length = facts.term_length
        position = partition.start
        limit = partition.limit
        small = limit - position <= _SMALL_READ
        reader = RecordingReader(
            location.archive_dir,
            facts.recording_id,
            facts.start_position,
            term_length,
            facts.segment_length,
            facts.initial_term_id,
            facts.stream_id,
        )
        try:
            while position < limit:
                term_end = position - (position & (term_length - 1)) + term_length
                view = reader.view(position, min(limit, term_end, position + self._chunk_length), small=small)
                n = len(view)
                scan = scan_frames(view, 0, n, stop_at_padding=False)
                if scan.stop_reason is ScanStop.END:
                    yield view, position, scan
                    position += n
                elif scan.stop_reason is ScanStop.INCOMPLETE and scan.stop_offset > 0:
                    # A frame runs past this chunk: yield the whole frames; the next chunk starts at that frame.
                    yield view[: scan.stop_offset], position, scan
                    position += scan.stop_offset
                elif (
                    scan.stop_reason is ScanStop.INCOMPLETE
                    and n >= HEADER_LENGTH
                    and frame_type_at(view, 0) == HDR_TYPE_PAD
                ):
                    # A PAD frame running to the term end past the limit: its header is all there is to give.
                    yield view[:HEADER_LENGTH], position, scan
                    position += align(scan.stop_frame_length, FRAME_ALIGNMENT)
                else:
                    raise ArchiveError(
                        f"recording {facts.recording_id}: no complete frame at position "
                        f"{position + scan.stop_offset} (reading [{partition.start}, {limit}) from "
                        f"{location.archive_dir}); the recording may have been truncated or its segment files "
                        "damaged"
                    )
                del view, scan
        finally:
            reader.close()


# A read of at most this many bytes in all is a `pread`, not a mapping (see `RecordingReader.view`).
_SMALL_READ = 64 * 1024
