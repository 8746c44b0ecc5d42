"""RecordingReader: the one reader of a recording's segment files, for replay, tools and the Spark connector.

Reads never cross a term boundary (and so never a segment boundary), exactly like `ReplaySession.readRecording`:
a replay offers whole terms' worth of frames with `offerBlock`, which must not span terms, and the position of
every byte read is then simply `position + offset`.

Two ways to read: `read_into` copies into the caller's buffer (`pread`; a replay reads straight into its term),
and `view` hands out a read-only view of a mapping of the file (32 MiB windows, sequential read-ahead advised),
so a reader that copies the bytes anyway (the Spark source, into Arrow) copies them once, not twice. A mapping
lives exactly as long as views of it do (no explicit unmap that could race with the consumer), and a window
bounds the address space a reader uses. For a small read (a few KiB in all, `small=True`) `view` uses `pread`
instead: there a mapping's fixed cost (mmap, madvise, the page fault, munmap) is what counts, not the copy.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from aeron_archive_spark.archive.constants import FILE_IO_MAX_LENGTH_DEFAULT, NULL_POSITION
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HEADER_LENGTH,
    ScanStop,
    align,
    compute_term_id_from_position,
    header_matches,
    position_bits_to_shift,
    scan_frames,
)
from aeron_archive_spark.archive.storage.segments import segment_file_base_position, segment_file_name

log = logging.getLogger(__name__)

# `view` maps windows of this size (a multiple of the mmap granularity): mapping per read costs more in mmap/munmap
# and page-table work than it saves; a window bounds the address space a reader uses.
VIEW_WINDOW = 32 * 1024 * 1024
_SEQUENTIAL = getattr(mmap, "MADV_SEQUENTIAL", None)


class RecordingReader:
    """Reads one recording; keeps the current segment file open and swaps it when a read moves to another."""

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        recording_id: int,
        start_position: int,
        term_length: int,
        segment_length: int,
        initial_term_id: int,
        stream_id: int,
        *,
        stop_position: int = NULL_POSITION,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._archive_dir = os.fspath(archive_dir)
        self._recording_id = recording_id
        self._start_position = start_position
        self._term_length = term_length
        self._segment_length = segment_length
        self._initial_term_id = initial_term_id
        self._stream_id = stream_id
        self._position_bits = position_bits_to_shift(term_length)
        self.stop_position = stop_position
        self._clock_ns = clock_ns
        self._fd = -1
        self._segment_base = NULL_POSITION
        self._segment_size = -1  # the open segment file's size as last seen by `view` (-1: not looked at)
        self._map: mmap.mmap | None = None
        self._map_start = 0
        self._closed = False
        self.total_read_bytes = 0
        self.total_read_time_ns = 0
        self.max_read_time_ns = 0

    @classmethod
    def for_descriptor(cls, archive_dir: str | os.PathLike[str], descriptor: RecordingDescriptor) -> RecordingReader:
        return cls(
            archive_dir,
            descriptor.recording_id,
            descriptor.start_position,
            descriptor.term_buffer_length,
            descriptor.segment_file_length,
            descriptor.initial_term_id,
            descriptor.stream_id,
            stop_position=descriptor.stop_position,
        )

    @property
    def recording_id(self) -> int:
        return self._recording_id

    @property
    def start_position(self) -> int:
        return self._start_position

    @property
    def term_length(self) -> int:
        return self._term_length

    def segment_base_position(self, position: int) -> int:
        return segment_file_base_position(self._start_position, position, self._term_length, self._segment_length)

    def segment_file_path(self, position: int) -> str:
        return os.path.join(
            self._archive_dir, segment_file_name(self._recording_id, self.segment_base_position(position))
        )

    def segment_exists(self, position: int) -> bool:
        """Replay INIT waits for this: a live recording may not have created the file yet."""
        return os.path.exists(self.segment_file_path(position))

    def read_into(
        self, buffer: Any, position: int, max_length: int, limit_position: int | None = None, head: Any = None
    ) -> int:
        """Read up to `max_length` bytes at `position` into `buffer`; returns the byte count (0 at the limit).

        The read stops at the end of the term, at `len(buffer)` and at the limit: `limit_position` when given (a
        live recording's rec-pos, a bounded replay's counter), else the reader's `stop_position`; with neither it
        is bounded by the term alone.

        It also stops at the end of the segment file, returning fewer bytes than those limits allow (0 at or past it):
        segment files are created at their full length, so a shorter one was cut, and its missing bytes are not
        data. They are never made up as zeros, which would turn a torn last frame into a message with a zeroed
        tail. A caller that needs whole frames treats a frame running past the count it got as torn.

        `head` (a writable buffer of a few bytes) takes the first `len(head)` bytes read instead of `buffer`, whose
        first `len(head)` bytes are left as they are: a replay reads into a term this way, keeping the first frame's
        length word zero there until the block is published.
        """
        self._check_position(position)
        limit = self.stop_position if limit_position is None else limit_position
        view = memoryview(buffer)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        length = min(max_length, len(view), self._term_length - (position & (self._term_length - 1)))
        if limit != NULL_POSITION:
            length = min(length, limit - position)
        if length <= 0:
            return 0

        fd = self._segment_fd(position)
        file_offset = position - self._segment_base
        start_ns = self._clock_ns()
        done = 0
        split = 0 if head is None else min(len(memoryview(head)), length)
        try:
            while done < length:
                vectors = [memoryview(head)[done:split], view[split:length]] if done < split else [view[done:length]]
                n = os.preadv(fd, vectors, file_offset + done)
                if n <= 0:
                    break
                done += n
        except OSError as ex:
            raise ArchiveError(
                f"failed to read recording {self._recording_id} at position={position}: {ex.strerror or ex}"
            ) from ex
        elapsed = self._clock_ns() - start_ns
        self.total_read_bytes += done
        self.total_read_time_ns += elapsed
        if elapsed > self.max_read_time_ns:
            self.max_read_time_ns = elapsed
        return done

    def view(self, position: int, end: int, *, small: bool = False) -> memoryview:
        """The recorded bytes `[position, end)`, inside one segment file, as a read-only view (see the module doc).

        `small`: copy them with one `pread` instead of mapping. A file shorter than `end` needs (cut, or truncated
        meanwhile) is an error naming the recording, the file and both sizes; a live recording's file is looked at
        again before that, as it may have grown.
        """
        fd = self._segment_fd(position)
        offset = position - self._segment_base
        length = end - position
        if small:
            data = os.pread(fd, length, offset)
            if len(data) < length:
                self._segment_size = os.fstat(fd).st_size
                raise self._file_too_short(position, end, offset + length)
            return memoryview(data)
        if offset + length > self._segment_size:
            self._segment_size = os.fstat(fd).st_size
            if offset + length > self._segment_size:
                raise self._file_too_short(position, end, offset + length)
        mapped = self._map
        if mapped is None or offset < self._map_start or offset + length > self._map_start + len(mapped):
            self._map = None  # unmapped once the consumer drops its last view of it
            map_start = offset - offset % VIEW_WINDOW
            map_length = min(self._segment_size, max(map_start + VIEW_WINDOW, offset + length)) - map_start
            mapped = self._map = mmap.mmap(fd, map_length, prot=mmap.PROT_READ, offset=map_start)
            self._map_start = map_start
            if _SEQUENTIAL is not None:
                mapped.madvise(_SEQUENTIAL)
        start = offset - self._map_start
        return memoryview(mapped)[start : start + length]

    def _file_too_short(self, position: int, end: int, needed: int) -> ArchiveError:
        return ArchiveError(
            f"recording {self._recording_id}: segment file {self.segment_file_path(position)} holds "
            f"{self._segment_size} bytes, position {end} needs {needed}; the recording may have been truncated"
        )

    def validate_frame_at(self, position: int, stop_position: int | None = None) -> None:
        """Check a replay start position points at a frame header (ReplaySession INIT, step 3).

        Only done when `position > startPosition` and `position != stopPosition`; the frame's termOffset, termId
        and streamId must match those computed for `position`. The session id is not checked, as it holds a CRC
        when the recording was made with record checksums.
        """
        stop = self.stop_position if stop_position is None else stop_position
        if position <= self._start_position or position == stop:
            return
        self._check_position(position)
        header = bytearray(HEADER_LENGTH)
        fd = self._segment_fd(position)
        read = os.preadv(fd, [header], position - self._segment_base)
        term_offset = position & (self._term_length - 1)
        term_id = compute_term_id_from_position(position, self._position_bits, self._initial_term_id)
        if read != HEADER_LENGTH or not header_matches(header, 0, term_offset, term_id, self._stream_id):
            raise ArchiveError(
                f"replayPosition={position} does not point to a valid frame, recordingId={self._recording_id}",
                ErrorCode.INVALID_POSITION,
            )

    def iter_chunks(
        self,
        from_position: int | None = None,
        to_position: int | None = None,
        chunk_length: int = FILE_IO_MAX_LENGTH_DEFAULT,
        *,
        reuse_buffer: bool = False,
    ) -> Iterator[tuple[int, memoryview]]:
        """Yield `(position, chunk)` pairs of whole frames covering `[from_position, to_position)`.

        Each chunk stays inside one term and holds only complete frames, except that a PAD frame may be cut short
        after its header (its length still tells the consumer it runs to the end of the term; the next chunk
        starts there). With `reuse_buffer` a chunk is only valid until the next one is produced. A segment file
        that ends before `to_position` (cut, or torn in its last frame) raises ArchiveError naming the recording,
        the position and the file, after the chunks of the complete frames before it.
        """
        position = self._start_position if from_position is None else from_position
        end = self.stop_position if to_position is None else to_position
        if end == NULL_POSITION:
            raise ValueError("to_position is required for a recording that is still active")
        if chunk_length < FRAME_ALIGNMENT:
            raise ValueError(f"chunk_length too small: {chunk_length}")
        shared = bytearray(chunk_length) if reuse_buffer else None
        while position < end:
            buffer = shared if shared is not None else bytearray(min(chunk_length, end - position))
            wanted = min(chunk_length, len(buffer), self._term_length - (position & (self._term_length - 1)))
            wanted = min(wanted, end - position)
            n = self.read_into(buffer, position, chunk_length, end)
            if n == 0:
                raise self._file_ends(position, end)
            view = memoryview(buffer)[:n]
            scan = scan_frames(view, 0, n)
            if scan.stop_reason is ScanStop.END:
                consumed = n
                yield position, view
            elif scan.stop_reason is ScanStop.PADDING:
                pad_end = scan.pad_offset + align(scan.pad_length, FRAME_ALIGNMENT)
                yield position, view[: min(n, pad_end)]
                consumed = pad_end
            elif scan.stop_reason is ScanStop.INCOMPLETE and scan.stop_offset > 0:
                consumed = scan.stop_offset
                yield position, view[:consumed]
            elif scan.stop_reason is ScanStop.INCOMPLETE and n < wanted:
                raise self._file_ends(position, end, scan.stop_frame_length, n)
            elif scan.stop_reason is ScanStop.INCOMPLETE:
                needed = align(scan.stop_frame_length, FRAME_ALIGNMENT)
                if position + needed > end:
                    raise ArchiveError(
                        f"frame of {scan.stop_frame_length} bytes at position={position} runs past "
                        f"position={end}, recordingId={self._recording_id}"
                    )
                raise ValueError(f"chunk_length {chunk_length} is smaller than the frame at position={position}")
            else:
                raise ArchiveError(
                    f"unexpected end of recording at position={position + scan.stop_offset}, "
                    f"recordingId={self._recording_id}"
                )
            position = min(end, position + consumed)

    def _file_ends(self, position: int, end: int, frame_length: int = 0, present: int = 0) -> ArchiveError:
        """The error for a segment file that ends before the data the recording says it holds."""
        path = self.segment_file_path(position)
        try:
            size = f"{os.path.getsize(path)} bytes"
        except OSError:
            size = "size unknown"
        if frame_length > 0:
            what = (
                f"frame at position={position} with frameLength={frame_length} is torn: only {present} of its "
                f"{align(frame_length, FRAME_ALIGNMENT)} bytes are in segment file {path} ({size})"
            )
        elif present > 0:
            what = f"frame at position={position} is torn: only {present} bytes of its header are in {path} ({size})"
        else:
            what = f"segment file {path} ({size}) ends at position={position}"
        return ArchiveError(f"{what}, before position={end}, recordingId={self._recording_id}")

    def close(self) -> None:
        self._closed = True
        self._close_segment()

    def __enter__(self) -> RecordingReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"RecordingReader(recordingId={self._recording_id}, start={self._start_position}, "
            f"stop={self.stop_position}, segmentBase={self._segment_base})"
        )

    def _check_position(self, position: int) -> None:
        if self._closed:
            raise ArchiveError(f"recording reader closed: recordingId={self._recording_id}")
        if position & (FRAME_ALIGNMENT - 1):
            raise ArchiveError(f"position={position} is not a multiple of FRAME_ALIGNMENT ({FRAME_ALIGNMENT})")
        if position < self._start_position:
            raise ArchiveError(
                f"position={position} is before the recording start position={self._start_position}",
                ErrorCode.INVALID_POSITION,
            )

    def _segment_fd(self, position: int) -> int:
        base = self.segment_base_position(position)
        if base != self._segment_base or self._fd < 0:
            self._close_segment()
            path = os.path.join(self._archive_dir, segment_file_name(self._recording_id, base))
            try:
                self._fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError as ex:
                raise ArchiveError(
                    f"recording segment not found: {path} (recording {self._recording_id}, position {position}: "
                    "purged or deleted?)"
                ) from ex
            self._segment_base = base
            log.debug("recording %d: reading segment %s", self._recording_id, path)
        return self._fd

    def _close_segment(self) -> None:
        fd, self._fd = self._fd, -1
        self._segment_base = NULL_POSITION
        self._segment_size = -1
        self._map = None  # mappings stay valid until their last view goes
        if fd >= 0:
            os.close(fd)
