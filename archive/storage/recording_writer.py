"""RecordingWriter: appends the blocks an Image's block poll yields to a recording's segment files.

Mirrors `io.aeron.archive.RecordingWriter`. A block is either a run of whole DATA frames inside one term or a
single PAD frame; for a PAD block only its 32-byte header is written, while the position advances by the whole pad
(the rest of the pre-sized, sparse segment file already reads as zeros). Segment files are created at their full
length and named after the stream position of their first byte; the writer rolls over to the next file as soon as
a segment is full, which always happens at a term boundary because segments hold whole terms.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, NoReturn

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.checksums import Checksum, apply_record_checksums
from aeron_archive_spark.archive.storage.frames import HDR_TYPE_PAD, HEADER_LENGTH, buffer_length, frame_type_at
from aeron_archive_spark.archive.storage.segments import fsync_directory, segment_file_base_position, segment_file_name
from aeron_archive_spark.archive.storage.time_index import TimeIndexWriter

log = logging.getLogger(__name__)

_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class RecordingWriter:
    """Writes one recording's blocks at its current position; not thread-safe (owned by one recorder thread)."""

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        recording_id: int,
        start_position: int,
        join_position: int,
        term_length: int,
        segment_length: int,
        *,
        file_sync_level: int = 0,
        catalog_file_sync_level: int = 0,
        checksum: Checksum | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        time_index: TimeIndexWriter | None = None,
    ) -> None:
        """`start_position` is the recording's ORIGINAL start: segment bases are aligned to its term base, which
        is what lets an extend (join at the old stop position) reopen the right file at the right offset.
        `time_index`, when given, samples when each block was written into the segments' `.tix` files."""
        if segment_length % term_length != 0:
            raise ValueError(f"segment length {segment_length} is not a multiple of term length {term_length}")
        if join_position < start_position or join_position & 31:
            raise ValueError(f"invalid join position {join_position} for start position {start_position}")
        self._archive_dir = os.fspath(archive_dir)
        self._recording_id = recording_id
        self._segment_length = segment_length
        self._file_sync_level = file_sync_level
        self._dir_sync = catalog_file_sync_level > 0 or file_sync_level > 0
        self._checksum = checksum
        self._clock_ns = clock_ns
        self._start_position = start_position
        self._segment_base = segment_file_base_position(start_position, join_position, term_length, segment_length)
        self._segment_offset = join_position - self._segment_base
        self._fd = -1
        self._path = ""
        self._checksum_buffer = bytearray()
        self._time_index = time_index
        self._closed = False
        self.total_write_bytes = 0
        self.total_write_time_ns = 0
        self.max_write_time_ns = 0

    @property
    def recording_id(self) -> int:
        return self._recording_id

    @property
    def position(self) -> int:
        return self._segment_base + self._segment_offset

    @property
    def segment_base_position(self) -> int:
        return self._segment_base

    @property
    def segment_offset(self) -> int:
        return self._segment_offset

    @property
    def segment_file(self) -> str:
        """Path of the segment file being written ("" before init)."""
        return self._path

    @property
    def is_closed(self) -> bool:
        return self._closed

    def init(self) -> None:
        """Open (or create) the segment file for the join position; the next write lands at the join position."""
        self._open_segment(create_only=False)
        if self._time_index is not None:
            self._time_index.open(self._segment_base, self.position, self._segment_length, self._start_position)

    def on_block(self, block: Any, length: int | None = None) -> None:
        """Write `block[:length]` at the current position and advance by `length`.

        Raises ArchiveError (STORAGE_SPACE when the disk is full, else GENERIC) naming the file and position; the
        writer is closed afterwards, as the recording cannot continue.
        """
        if self._fd < 0:
            raise ArchiveError(f"recording writer not initialised or closed: recordingId={self._recording_id}")
        if length is None:
            length = buffer_length(block)
        if length <= 0:
            return
        if self._segment_offset + length > self._segment_length:
            self.close()
            raise ArchiveError(
                f"block of {length} bytes at position={self.position} crosses the end of segment {self._path}"
            )

        view = memoryview(block)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        is_padding = frame_type_at(view, 0) == HDR_TYPE_PAD
        if is_padding:
            data = view[:HEADER_LENGTH]
        elif self._checksum is not None:
            if len(self._checksum_buffer) < length:
                self._checksum_buffer = bytearray(length)
            scratch = memoryview(self._checksum_buffer)[:length]
            scratch[:] = view[:length]
            apply_record_checksums(scratch, self._checksum, length)
            data = scratch
        else:
            data = view[:length]

        if self._time_index is not None:
            self._time_index.on_block(self.position)
        start_ns = self._clock_ns()
        try:
            self._write_fully(data, self._segment_offset)
            if self._file_sync_level > 1:
                os.fsync(self._fd)
            elif self._file_sync_level == 1:
                os.fdatasync(self._fd)
        except OSError as ex:
            self._fail(ex, len(data))
        elapsed = self._clock_ns() - start_ns
        self.total_write_bytes += len(data)
        self.total_write_time_ns += elapsed
        if elapsed > self.max_write_time_ns:
            self.max_write_time_ns = elapsed

        self._segment_offset += length
        if self._segment_offset >= self._segment_length:
            self._roll_over()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            fd, self._fd = self._fd, -1
            if fd >= 0:
                os.close(fd)
            if self._time_index is not None:
                self._time_index.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RecordingWriter(recordingId={self._recording_id}, position={self.position}, file={self._path!r})"

    def _write_fully(self, data: memoryview, offset: int) -> None:
        written = 0
        total = len(data)
        while written < total:
            written += os.pwrite(self._fd, data[written:], offset + written)

    def _roll_over(self) -> None:
        os.close(self._fd)
        self._fd = -1
        self._segment_base += self._segment_length
        self._segment_offset = 0
        self._open_segment(create_only=True)
        if self._time_index is not None:
            self._time_index.roll(self._segment_base)

    def _open_segment(self, create_only: bool) -> None:
        path = os.path.join(self._archive_dir, segment_file_name(self._recording_id, self._segment_base))
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if create_only else 0)
        try:
            created = create_only or not os.path.exists(path)
            fd = os.open(path, flags, 0o644)
        except FileExistsError as ex:
            self.close()
            raise ArchiveError(f"segment file already exists: {path}") from ex
        except OSError as ex:
            self._path = path
            self._fail(ex, 0)
        try:
            if os.fstat(fd).st_size != self._segment_length:
                os.ftruncate(fd, self._segment_length)  # sparse: unwritten bytes read as zeros
            if created and self._dir_sync:
                fsync_directory(self._archive_dir)
        except OSError as ex:
            os.close(fd)
            self._path = path
            self._fail(ex, 0)
        self._fd = fd
        self._path = path
        log.debug("recording %d: opened segment %s at offset %d", self._recording_id, path, self._segment_offset)

    def _fail(self, ex: OSError, write_length: int) -> NoReturn:
        """Close and raise, classifying like `RecordingWriter.checkErrorType` (no space, or less than the write)."""
        position = self.position
        path = self._path
        self.close()
        no_space = ex.errno in _NO_SPACE_ERRNOS
        if not no_space and write_length > 0:
            try:
                stats = os.statvfs(self._archive_dir)
                no_space = stats.f_bavail * stats.f_frsize < write_length
            except OSError:
                pass
        code = ErrorCode.STORAGE_SPACE if no_space else ErrorCode.GENERIC
        raise ArchiveError(
            f"{type(ex).__name__} - {ex.strerror or ex} (file={path}, position={position}, "
            f"recordingId={self._recording_id})",
            code,
        ) from ex
