"""The archive catalog (`archive.catalog`), byte-compatible with Aeron Archive's version 3 layout.

Layout (all little-endian), as `io.aeron.archive.Catalog` writes it:

    offset 0   CatalogHeader (32 B): version int32 (3.1.0 = 196864), length int32 (32), nextRecordingId int64,
               alignment int32 (64)
    offset 32  entries, each = RecordingDescriptorHeader (32 B: length int32 = bytes after this header including
               padding, state int32, checksum int32) + RecordingDescriptor (80-byte block + strippedChannel,
               originalChannel, sourceIdentity as uint32 length + ASCII), zero-padded to a multiple of `alignment`.
               The first entry whose length is <= 0 ends the list.

Catalogs written before Aeron 1.32 have `alignment == 0` and fixed 1 KiB entries starting at offset 1024; they are
readable here (read-only) so `list`/`describe` work on old archive directories, but writing needs Aeron's
migration first.

The file is memory-mapped and grows by 1.5x on demand. Opening a catalog for writing also recovers recordings
left active by a crash (stopPosition == -1) from the end of their last segment file (`Catalog.refreshCatalog`).
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType

from aeron_archive_spark.archive.constants import (
    CATALOG_CAPACITY_DEFAULT,
    CATALOG_FILE_NAME,
    NULL_POSITION,
    NULL_TIMESTAMP,
    NULL_VALUE,
    RecordingState,
)
from aeron_archive_spark.archive.descriptor import (
    DESCRIPTOR_BLOCK,
    DESCRIPTOR_BLOCK_LENGTH,
    DescriptorDecodeError,
    RecordingDescriptor,
    descriptor_from_body,
)
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.checksums import Checksum
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    PAGE_SIZE,
    ScanStop,
    align,
    frame_length_at,
    frame_session_id_at,
    frame_type_at,
    is_power_of_two,
    scan_frames,
    to_int32,
)
from aeron_archive_spark.archive.storage.segments import (
    SegmentFile,
    fsync_directory,
    highest_segment_file,
    index_segment_files,
)

log = logging.getLogger(__name__)


def compose_semantic_version(major: int, minor: int, patch: int) -> int:
    return (major << 16) | (minor << 8) | patch


def semantic_version_major(version: int) -> int:
    return (version >> 16) & 0xFF


def semantic_version_string(version: int) -> str:
    return f"{(version >> 16) & 0xFF}.{(version >> 8) & 0xFF}.{version & 0xFF}"


CATALOG_MAJOR_VERSION = 3
CATALOG_VERSION = compose_semantic_version(3, 1, 0)  # ArchiveMarkFile.SEMANTIC_VERSION = 196864

CATALOG_HEADER_LENGTH = 32
CATALOG_VERSION_OFFSET = 0
CATALOG_LENGTH_OFFSET = 4
CATALOG_NEXT_RECORDING_ID_OFFSET = 8
CATALOG_ALIGNMENT_OFFSET = 16

DESCRIPTOR_HEADER_LENGTH = 32
DESCRIPTOR_LENGTH_OFFSET = 0
DESCRIPTOR_STATE_OFFSET = 4
DESCRIPTOR_CHECKSUM_OFFSET = 8

# RecordingDescriptor body (SBE template 22, block length DESCRIPTOR_BLOCK_LENGTH = 80), relative to entry offset + 32.
CONTROL_SESSION_ID_OFFSET = 0
CORRELATION_ID_OFFSET = 8
RECORDING_ID_OFFSET = 16
START_TIMESTAMP_OFFSET = 24
STOP_TIMESTAMP_OFFSET = 32
START_POSITION_OFFSET = 40
STOP_POSITION_OFFSET = 48
INITIAL_TERM_ID_OFFSET = 56
SEGMENT_FILE_LENGTH_OFFSET = 60
TERM_BUFFER_LENGTH_OFFSET = 64
MTU_LENGTH_OFFSET = 68
SESSION_ID_OFFSET = 72
STREAM_ID_OFFSET = 76
VAR_DATA_OFFSET = 80

DEFAULT_ALIGNMENT = 64  # CACHE_LINE_LENGTH
LEGACY_RECORD_LENGTH = 1024  # Catalog.DEFAULT_RECORD_LENGTH: entry size and first-entry offset of pre-3.0 catalogs
MIN_CAPACITY = CATALOG_HEADER_LENGTH
MAX_CAPACITY = 2**31 - 1
RECOVERY_CHUNK_LENGTH = 1024 * 1024

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_CATALOG_HEADER = struct.Struct("<iiqi")


def _legacy_for_writing(path: str, archive_dir: str | os.PathLike[str], version: int) -> ArchiveError:
    return ArchiveError(
        f"catalog {path} uses the legacy fixed 1 KiB entry layout (version {semantic_version_string(version)}); "
        f"migrate it to version {semantic_version_string(CATALOG_VERSION)} with `aeron-archive migrate --dir "
        f"{os.fspath(archive_dir)}` (Aeron's `ArchiveTool <dir> migrate`) before opening it for writing (it can be "
        "read as is)"
    )


def refuse_unwritable_catalog(archive_dir: str | os.PathLike[str]) -> None:
    """Raise what opening the directory's catalog for writing would, for a catalog no archive of this version may
    write (the legacy layout, another major version), reading only its header: what an archive checks before it
    touches anything of the directory (its mark file included), so such a directory is left byte for byte."""
    path = catalog_path(archive_dir)
    try:
        with open(path, "rb") as f:
            header = f.read(_CATALOG_HEADER.size)
    except FileNotFoundError:
        return
    if len(header) < _CATALOG_HEADER.size:
        return  # a torn catalog: the writable open reports it
    version, _, _, alignment = _CATALOG_HEADER.unpack_from(header, 0)
    major = semantic_version_major(version)
    if alignment == 0 and major <= CATALOG_MAJOR_VERSION:
        raise _legacy_for_writing(path, archive_dir, version)
    if major != CATALOG_MAJOR_VERSION:
        raise ArchiveError(
            f"incompatible catalog file version {semantic_version_string(version)}, archive software is "
            f"{semantic_version_string(CATALOG_VERSION)}: {path}"
        )


def catalog_path(archive_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(archive_dir), CATALOG_FILE_NAME)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ascii(value: str) -> bytes:
    # Java's US_ASCII encoder replaces unmappable characters with '?', keeping one byte per char.
    return value.encode("ascii", errors="replace")


def descriptor_frame_length(
    stripped_channel: bytes, original_channel: bytes, source_identity: bytes, alignment: int
) -> int:
    """Aligned entry size (`Catalog.recordingDescriptorFrameLength`)."""
    body = 7 * 8 + 6 * 4 + 4 + len(stripped_channel) + 4 + len(original_channel) + 4 + len(source_identity)
    return align(DESCRIPTOR_HEADER_LENGTH + body, alignment)


class CatalogIndex:
    """Recording id -> entry offset for VALID entries only, kept sorted by id (`CatalogIndex`)."""

    __slots__ = ("_ids", "_offsets")

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._offsets: dict[int, int] = {}

    def add(self, recording_id: int, offset: int) -> None:
        """Append an id; ids must strictly increase, as new recordings and a well-formed catalog guarantee."""
        if self._ids and recording_id <= self._ids[-1]:
            raise ValueError(f"recording id {recording_id} is not greater than the last indexed {self._ids[-1]}")
        self._ids.append(recording_id)
        self._offsets[recording_id] = offset

    def insert(self, recording_id: int, offset: int) -> None:
        """Index an id at its sorted place (a recording being marked VALID again)."""
        if recording_id in self._offsets:
            raise ValueError(f"recording id {recording_id} is already indexed")
        bisect.insort(self._ids, recording_id)
        self._offsets[recording_id] = offset

    def move(self, recording_id: int, offset: int) -> None:
        """An indexed entry's new offset (entries after one that grew move right)."""
        if recording_id not in self._offsets:
            raise ValueError(f"recording id {recording_id} is not indexed")
        self._offsets[recording_id] = offset

    def remove(self, recording_id: int) -> int | None:
        offset = self._offsets.pop(recording_id, None)
        if offset is not None:
            del self._ids[bisect.bisect_left(self._ids, recording_id)]
        return offset

    def offset(self, recording_id: int) -> int | None:
        return self._offsets.get(recording_id)

    def ids_from(self, from_id: int = 0) -> list[int]:
        return self._ids[bisect.bisect_left(self._ids, from_id) :]

    def ids_descending(self) -> Iterator[int]:
        return reversed(self._ids.copy())

    @property
    def last_id(self) -> int:
        return self._ids[-1] if self._ids else NULL_VALUE

    def __contains__(self, recording_id: object) -> bool:
        return recording_id in self._offsets

    def __len__(self) -> int:
        return len(self._ids)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One raw catalog entry, whatever its state (for describe-all and verify)."""

    offset: int
    frame_length: int
    state: int
    checksum: int
    descriptor: RecordingDescriptor


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """Where the frames in a segment file end (`Catalog.recoverStopOffset`)."""

    stop_offset: int  # file offset just past the last frame
    last_frame_offset: int  # -1 when the file holds no frame after the scan start
    last_frame_length: int  # aligned length of that frame, 0 when there is none
    torn: bool  # the last frame runs past the end of the file, or straddles a page and could not be shown complete
    file_limit: int = -1  # min(segmentLength, file size): where the scan had to stop
    zero_page_offset: int = -1  # offset in the torn frame of its first all-zero page (page-straddle case), or -1

    def torn_detail(self) -> str:
        """What was found about a torn last frame, for the operator: where it is and how much of it is there."""
        if not self.torn:
            return ""
        present = max(0, self.file_limit - self.last_frame_offset)
        if self.last_frame_offset + self.last_frame_length > self.file_limit:
            return (
                f"the frame at file offset {self.last_frame_offset} is {self.last_frame_length} bytes long (aligned) "
                f"but the file ends after {present} of them"
            )
        return (
            f"the frame at file offset {self.last_frame_offset} is {self.last_frame_length} bytes long (aligned) "
            f"and its page at file offset {self.last_frame_offset + self.zero_page_offset} is all zeros, so at "
            f"most {self.zero_page_offset} of its bytes were written"
        )

    @property
    def straddles_page(self) -> bool:
        return self.last_frame_length > 0 and fragment_straddles_page_boundary(
            self.last_frame_offset, self.last_frame_length
        )


@dataclass(frozen=True, slots=True)
class RecoveredRecording:
    """A recording found active at open and closed off by crash recovery."""

    recording_id: int
    stop_position: int
    segment_file: str | None


def fragment_straddles_page_boundary(fragment_offset: int, fragment_length: int) -> bool:
    return fragment_offset // PAGE_SIZE != (fragment_offset + fragment_length - 1) // PAGE_SIZE


def _read_fully(fd: int, buffer: memoryview, offset: int) -> int:
    done = 0
    while done < len(buffer):
        n = os.preadv(fd, [buffer[done:]], offset + done)
        if n <= 0:
            break
        done += n
    return done


def is_valid_last_frame(frame: bytes | bytearray | memoryview, frame_offset: int, checksum: Checksum | None) -> bool:
    """Whether a page-straddling last frame is complete (`Catalog.isValidFragment`).

    `frame` holds the frame's aligned length as read from the file at `frame_offset` (zeros past the end of the
    file). It is valid if the record checksum in its session-id field matches, or if every page after the
    straddle point holds a non-zero byte. A PAD frame is accepted on its header alone: only its 32-byte header is
    ever written, so its zero tail proves nothing (Java would reject such a file and ask for ArchiveTool verify).
    """
    length = len(frame)
    if length < HEADER_LENGTH:
        return False
    frame_type = frame_type_at(frame, 0)
    if frame_type == HDR_TYPE_PAD and frame_length_at(frame, 0) > 0:
        return True
    if (
        checksum is not None
        and frame_type == HDR_TYPE_DATA
        and checksum.compute(frame, HEADER_LENGTH, length - HEADER_LENGTH) == frame_session_id_at(frame, 0)
    ):
        return True
    return first_zero_page(frame, frame_offset) < 0


def first_zero_page(frame: bytes | bytearray | memoryview, frame_offset: int) -> int:
    """Offset in `frame` of the first page after its page-straddle point that holds only zeros, or -1.

    A page-straddling frame whose later page is all zeros was most likely cut by a crash before that page reached
    the disk; the offset tells an operator how much of the frame is there.
    """
    length = len(frame)
    page = (frame_offset // PAGE_SIZE + 1) * PAGE_SIZE - frame_offset
    while page < length:
        chunk = bytes(frame[page : min(page + PAGE_SIZE, length)])
        if chunk.count(0) == len(chunk):
            return page
        page += PAGE_SIZE
    return -1


def find_segment_end(
    path: str,
    file_offset: int,
    segment_length: int,
    checksum: Checksum | None = None,
    chunk_length: int = RECOVERY_CHUNK_LENGTH,
) -> SegmentEnd:
    """Walk the frames of a segment file from `file_offset` to the first frame length <= 0.

    Steps by `align(frameLength, 32)` (PAD frames included) through chunks of at most `chunk_length` bytes, up to
    `min(segmentLength, fileSize)`, then checks whether the last frame could be a torn write (§3.4).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        limit = min(segment_length, os.fstat(fd).st_size)
        chunk = bytearray(chunk_length)
        view = memoryview(chunk)
        next_offset = file_offset
        last_offset = -1
        last_length = 0
        while next_offset < limit:
            want = min(chunk_length, limit - next_offset)
            got = _read_fully(fd, view[:want], next_offset)
            if got < want:  # the file shrank under us: what is not there is not data
                limit = next_offset + got
            scan = scan_frames(chunk, 0, got, stop_at_padding=False)
            if scan.count:
                last_offset = next_offset + int(scan.offsets[-1])
                last_length = align(int(scan.lengths[-1]), FRAME_ALIGNMENT)
            next_offset += scan.stop_offset
            if scan.stop_reason is ScanStop.ZERO_LENGTH:
                break
            if scan.stop_reason is ScanStop.INCOMPLETE:
                if scan.stop_frame_length <= 0:
                    break
                # The frame runs past this chunk: step over it as Java does and read on from its end.
                last_offset = next_offset
                last_length = align(scan.stop_frame_length, FRAME_ALIGNMENT)
                next_offset += last_length
        del view

        torn = False
        zero_page = -1
        if last_length > 0 and last_offset + last_length > limit:
            torn = True  # runs past the end of the segment or file: cannot be a complete frame
        elif last_length > 0 and fragment_straddles_page_boundary(last_offset, last_length):
            header = bytearray(HEADER_LENGTH)
            _read_fully(fd, memoryview(header), last_offset)
            if frame_type_at(header, 0) != HDR_TYPE_PAD:  # a PAD is valid on its header alone
                frame = bytearray(last_length)
                _read_fully(fd, memoryview(frame), last_offset)
                torn = not is_valid_last_frame(frame, last_offset, checksum)
                if torn:
                    zero_page = first_zero_page(frame, last_offset)
        return SegmentEnd(next_offset, last_offset, last_length, torn, limit, zero_page)
    finally:
        os.close(fd)


def compute_stop_position(
    segment: SegmentFile | None,
    start_position: int,
    term_length: int,
    segment_length: int,
    checksum: Checksum | None = None,
) -> tuple[int, SegmentEnd | None]:
    """Recovered stop position of a recording whose last segment file is `segment` (`Catalog.computeStopPosition`)."""
    if segment is None:
        return start_position, None
    start_term_offset = start_position & (term_length - 1)
    start_term_base = start_position - start_term_offset
    file_offset = start_term_offset if segment.base_position == start_term_base else 0
    end = find_segment_end(segment.path, file_offset, segment_length, checksum)
    return max(segment.base_position + end.stop_offset, start_position), end


def torn_write_message(path: str, recording_id: int, position: int, archive_dir: str, detail: str = "") -> str:
    """Aeron's startup error for a torn last frame (its wording kept), with what was found when known."""
    found = f": {detail}" if detail else ""
    return (
        f"Found potentially incomplete last fragment straddling page boundary in file: {path} "
        f"(recordingId={recording_id}, position={position}{found}). "
        f"Run `aeron-archive verify --dir {archive_dir} --fix` to truncate it"
    )


class Catalog:
    """Memory-mapped `archive.catalog`; every method is safe to call from several threads."""

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        *,
        writable: bool = True,
        capacity: int = CATALOG_CAPACITY_DEFAULT,
        file_sync_level: int = 0,
        catalog_file_sync_level: int = 0,
        checksum: Checksum | None = None,
        clock_ms: Callable[[], int] | None = None,
        recover: bool = True,
    ) -> None:
        """Open (or, when writable, create) the catalog of `archive_dir`.

        Catalog writes are synced at `max(file_sync_level, catalog_file_sync_level)` (0 none, 1 data, 2 data and
        metadata): Aeron requires the catalog level to be at least the file level, and taking the maximum keeps
        that guarantee even for callers that did not validate it. `recover=False` skips crash recovery, for the
        offline verify tool that must open a catalog recovery would refuse.
        """
        if not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
            raise ValueError(
                f"invalid catalog capacity: expected value in [{MIN_CAPACITY}, {MAX_CAPACITY}], got {capacity}"
            )
        self._archive_dir = os.fspath(archive_dir)
        self._path = catalog_path(self._archive_dir)
        self._writable = writable
        self._sync_level = max(file_sync_level, catalog_file_sync_level)
        self._checksum = checksum
        self._clock_ms = clock_ms if clock_ms is not None else _now_ms
        self._lock = threading.RLock()
        self._index = CatalogIndex()
        self._fd = -1
        self._mm: mmap.mmap | None = None
        self._capacity = 0
        self._legacy = False
        self._alignment = DEFAULT_ALIGNMENT
        self._first_offset = CATALOG_HEADER_LENGTH
        self._next_offset = CATALOG_HEADER_LENGTH
        self._next_recording_id = 0
        self._version = CATALOG_VERSION
        self.recovered: list[RecoveredRecording] = []
        try:
            self._open(capacity)
            if writable and recover:
                self.recovered = self._recover()
        except BaseException:
            self._release(sync=False)
            raise

    # ------------------------------------------------------------------------------------------------------------
    # opening

    def _open(self, requested_capacity: int) -> None:
        if self._writable:
            os.makedirs(self._archive_dir, exist_ok=True)
            existed = os.path.exists(self._path) and os.path.getsize(self._path) > 0
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            size = os.fstat(self._fd).st_size
            if existed:
                # Validate the header before the file is grown or mapped for writing: a catalog this archive must
                # not write (legacy 1 KiB layout, other major version) is refused with every byte left as it was.
                header = os.pread(self._fd, CATALOG_HEADER_LENGTH, 0)
                if len(header) < CATALOG_HEADER_LENGTH:
                    raise ArchiveError(f"catalog file too small ({size} bytes): {self._path}")
                self._read_header(header)
            self._capacity = max(size, requested_capacity) if existed else requested_capacity
            if size < self._capacity:
                os.ftruncate(self._fd, self._capacity)
            self._mm = mmap.mmap(self._fd, self._capacity, access=mmap.ACCESS_WRITE)
        else:
            try:
                self._fd = os.open(self._path, os.O_RDONLY)
            except FileNotFoundError as ex:
                raise ArchiveError(f"catalog not found: {self._path}") from ex
            size = os.fstat(self._fd).st_size
            if size < CATALOG_HEADER_LENGTH:
                raise ArchiveError(f"catalog file too small ({size} bytes): {self._path}")
            existed = True
            self._capacity = size
            self._mm = mmap.mmap(self._fd, size, access=mmap.ACCESS_READ)

        if not existed:
            self._version = CATALOG_VERSION
            self._alignment = DEFAULT_ALIGNMENT
            _CATALOG_HEADER.pack_into(self._mm, 0, CATALOG_VERSION, CATALOG_HEADER_LENGTH, 0, DEFAULT_ALIGNMENT)
            self._sync()
            if self._sync_level > 0:
                fsync_directory(self._archive_dir)
            log.info("created catalog %s (capacity %d)", self._path, self._capacity)
        else:
            self._read_header()
        self._build_index()

    def _read_header(self, header: bytes | None = None) -> None:
        buf = header if header is not None else self._require_map()
        version, _, next_recording_id, alignment = _CATALOG_HEADER.unpack_from(buf, 0)
        self._version = version
        major = semantic_version_major(version)
        if alignment == 0 and major <= CATALOG_MAJOR_VERSION:
            if self._writable:
                raise _legacy_for_writing(self._path, self._archive_dir, version)
            self._legacy = True
            self._alignment = LEGACY_RECORD_LENGTH
            self._first_offset = LEGACY_RECORD_LENGTH
            self._next_recording_id = 0  # derived from the entries, as Java does for old catalogs
            return
        if major != CATALOG_MAJOR_VERSION:
            raise ArchiveError(
                f"incompatible catalog file version {semantic_version_string(version)}, archive software is "
                f"{semantic_version_string(CATALOG_VERSION)}: {self._path}"
            )
        if alignment < FRAME_ALIGNMENT or not is_power_of_two(alignment):
            raise ArchiveError(f"invalid catalog alignment {alignment}: {self._path}")
        self._alignment = alignment
        self._first_offset = CATALOG_HEADER_LENGTH
        self._next_recording_id = next_recording_id

    def _build_index(self) -> None:
        mm = self._require_map()
        offset = self._first_offset
        last_id = NULL_VALUE
        while offset + DESCRIPTOR_HEADER_LENGTH <= self._capacity:
            (length,) = _I32.unpack_from(mm, offset)
            if length <= 0:
                break
            frame_length = align(length + DESCRIPTOR_HEADER_LENGTH, self._alignment)
            if length < DESCRIPTOR_BLOCK_LENGTH or offset + frame_length > self._capacity:
                raise ArchiveError(f"corrupt catalog entry at offset {offset} (length {length}): {self._path}")
            (state,) = _I32.unpack_from(mm, offset + DESCRIPTOR_STATE_OFFSET)
            (recording_id,) = _I64.unpack_from(mm, offset + DESCRIPTOR_HEADER_LENGTH + RECORDING_ID_OFFSET)
            if state == RecordingState.VALID:
                try:
                    self._index.add(recording_id, offset)
                except ValueError as ex:
                    raise ArchiveError(f"corrupt catalog {self._path}: {ex}") from ex
            last_id = recording_id
            offset += frame_length
        self._next_offset = offset

        if self._next_recording_id == 0:
            self._next_recording_id = last_id + 1
        elif self._writable and self._next_recording_id < last_id + 1:
            raise ArchiveError(
                f"invalid nextRecordingId: expected value greater or equal to {last_id + 1}, "
                f"was {self._next_recording_id}: {self._path}"
            )

    def _recover(self) -> list[RecoveredRecording]:
        """Close off recordings a crash left active (stopPosition == -1), from the end of their last segment."""
        mm = self._require_map()
        segments_by_id: dict[int, list[SegmentFile]] | None = None
        recovered: list[RecoveredRecording] = []
        for offset in self._entry_offsets():
            body = offset + DESCRIPTOR_HEADER_LENGTH
            (state,) = _I32.unpack_from(mm, offset + DESCRIPTOR_STATE_OFFSET)
            (stop_position,) = _I64.unpack_from(mm, body + STOP_POSITION_OFFSET)
            if state != RecordingState.VALID or stop_position != NULL_POSITION:
                continue
            if segments_by_id is None:
                segments_by_id = index_segment_files(self._archive_dir)
            block = DESCRIPTOR_BLOCK.unpack_from(mm, body)
            recording_id, start_position = block[2], block[5]
            segment_length, term_length = block[8], block[9]
            segment = highest_segment_file(segments_by_id.get(recording_id, []))
            stop, end = compute_stop_position(segment, start_position, term_length, segment_length, self._checksum)
            if end is not None and end.torn and segment is not None:
                raise ArchiveError(
                    torn_write_message(
                        segment.path,
                        recording_id,
                        segment.base_position + end.last_frame_offset,
                        self._archive_dir,
                        end.torn_detail(),
                    )
                )
            _I64.pack_into(mm, body + STOP_TIMESTAMP_OFFSET, self._clock_ms())
            _I64.pack_into(mm, body + STOP_POSITION_OFFSET, stop)
            self._update_checksum(offset)
            recovered.append(RecoveredRecording(recording_id, stop, segment.name if segment else None))
            log.warning(
                "recovered recording %d left active by a crash: stopPosition=%d (startPosition=%d, last segment %s)",
                recording_id,
                stop,
                start_position,
                segment.name if segment else "none",
            )
        if recovered:
            self._sync()
        return recovered

    # ------------------------------------------------------------------------------------------------------------
    # properties

    @property
    def path(self) -> str:
        return self._path

    @property
    def archive_dir(self) -> str:
        return self._archive_dir

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def is_legacy(self) -> bool:
        return self._legacy

    @property
    def version(self) -> int:
        return self._version

    @property
    def alignment(self) -> int:
        return self._alignment

    @property
    def capacity(self) -> int:
        with self._lock:
            return self._capacity

    @property
    def next_recording_id(self) -> int:
        with self._lock:
            return self._next_recording_id

    @property
    def checksum(self) -> Checksum | None:
        return self._checksum

    @property
    def is_closed(self) -> bool:
        return self._mm is None

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    # ------------------------------------------------------------------------------------------------------------
    # writes

    def add_new_recording(
        self,
        start_position: int,
        start_timestamp: int,
        initial_term_id: int,
        segment_file_length: int,
        term_buffer_length: int,
        mtu_length: int,
        session_id: int,
        stream_id: int,
        stripped_channel: str,
        original_channel: str,
        source_identity: str,
        *,
        stop_position: int = NULL_POSITION,
        stop_timestamp: int = NULL_TIMESTAMP,
    ) -> int:
        """Append a VALID entry and return its recording id (the header's nextRecordingId, then incremented)."""
        stripped = _ascii(stripped_channel)
        original = _ascii(original_channel)
        source = _ascii(source_identity)
        with self._lock:
            mm = self._require_writable()
            frame_length = descriptor_frame_length(stripped, original, source, self._alignment)
            if self._next_offset + frame_length > self._capacity:
                self._grow(frame_length)
                mm = self._require_writable()
            offset = self._next_offset
            recording_id = self._next_recording_id
            mm[offset : offset + frame_length] = bytes(frame_length)
            self._write_descriptor(
                offset,
                frame_length - DESCRIPTOR_HEADER_LENGTH,
                (
                    recording_id,
                    start_timestamp,
                    stop_timestamp,
                    start_position,
                    stop_position,
                    initial_term_id,
                    segment_file_length,
                    term_buffer_length,
                    mtu_length,
                    session_id,
                    stream_id,
                ),
                (stripped, original, source),
            )
            _I64.pack_into(mm, CATALOG_NEXT_RECORDING_ID_OFFSET, recording_id + 1)
            self._sync()

            self._next_recording_id = recording_id + 1
            self._next_offset = offset + frame_length
            self._index.add(recording_id, offset)
            return recording_id

    def replace_recording(
        self,
        recording_id: int,
        start_position: int,
        stop_position: int,
        start_timestamp: int,
        stop_timestamp: int,
        initial_term_id: int,
        segment_file_length: int,
        term_buffer_length: int,
        mtu_length: int,
        session_id: int,
        stream_id: int,
        stripped_channel: str,
        original_channel: str,
        source_identity: str,
    ) -> None:
        """Rewrite every field of a recording's entry, its id kept (Java's `Catalog.replaceRecording`: a replication
        into an empty destination takes on the source's descriptor). An entry that grows moves the entries after it
        to the right; one that shrinks keeps its frame, zeroed past the new fields. Its checksum covers the length
        it keeps (Java's covers only the new fields' length there, which its own verify then reports as a
        mismatch: the zeros after them change a CRC)."""
        stripped = _ascii(stripped_channel)
        original = _ascii(original_channel)
        source = _ascii(source_identity)
        with self._lock:
            offset = self._offset_of(recording_id)
            old_frame = self._frame_length_at(offset)
            new_frame = descriptor_frame_length(stripped, original, source, self._alignment)
            if new_frame > old_frame:
                shift = new_frame - old_frame
                end = self._next_offset
                if end + shift > self._capacity:
                    self._grow(shift)
                mm = self._require_writable()
                mm.move(offset + new_frame, offset + old_frame, end - (offset + old_frame))
                self._next_offset = end + shift
                for later in self._index.ids_from(recording_id + 1):
                    moved = self._index.offset(later)
                    if moved is not None and moved > offset:
                        self._index.move(later, moved + shift)
                frame = new_frame
            else:
                frame = old_frame
            mm = self._require_writable()
            mm[offset + DESCRIPTOR_HEADER_LENGTH : offset + frame] = bytes(frame - DESCRIPTOR_HEADER_LENGTH)
            self._write_descriptor(
                offset,
                frame - DESCRIPTOR_HEADER_LENGTH,
                (
                    recording_id,
                    start_timestamp,
                    stop_timestamp,
                    start_position,
                    stop_position,
                    initial_term_id,
                    segment_file_length,
                    term_buffer_length,
                    mtu_length,
                    session_id,
                    stream_id,
                ),
                (stripped, original, source),
            )
            self._sync()

    def _write_descriptor(
        self,
        offset: int,
        length: int,
        fixed: tuple[int, int, int, int, int, int, int, int, int, int, int],
        var: tuple[bytes, bytes, bytes],
    ) -> None:
        """Write an entry's body (the fixed fields from recordingId on, then the three var fields), its checksum
        over `length` body bytes, VALID, and last its length, which makes it visible."""
        mm = self._require_writable()
        body = offset + DESCRIPTOR_HEADER_LENGTH
        recording_id, start_ts, stop_ts, start, stop, initial_term_id, segment, term, mtu, session, stream = fixed
        DESCRIPTOR_BLOCK.pack_into(
            mm,
            body,
            0,
            0,
            recording_id,
            start_ts,
            stop_ts,
            start,
            stop,
            to_int32(initial_term_id),
            segment,
            term,
            mtu,
            to_int32(session),
            to_int32(stream),
        )
        cursor = body + VAR_DATA_OFFSET
        for value in var:
            _U32.pack_into(mm, cursor, len(value))
            mm[cursor + 4 : cursor + 4 + len(value)] = value
            cursor += 4 + len(value)
        checksum_value = self._compute_checksum(offset, length)
        _I32.pack_into(mm, offset + DESCRIPTOR_CHECKSUM_OFFSET, checksum_value)
        _I32.pack_into(mm, offset + DESCRIPTOR_STATE_OFFSET, RecordingState.VALID)
        _I32.pack_into(mm, offset + DESCRIPTOR_LENGTH_OFFSET, length)

    def recording_stopped(self, recording_id: int, stop_position: int, stop_timestamp: int) -> None:
        with self._lock:
            mm = self._require_writable()
            offset = self._offset_of(recording_id)
            body = offset + DESCRIPTOR_HEADER_LENGTH
            _I64.pack_into(mm, body + STOP_TIMESTAMP_OFFSET, stop_timestamp)
            _I64.pack_into(mm, body + STOP_POSITION_OFFSET, stop_position)
            self._update_checksum(offset)
            self._sync()

    def extend_recording(
        self, recording_id: int, control_session_id: int, correlation_id: int, session_id: int
    ) -> None:
        """Mark a stopped recording active again for an extend (stop position and timestamp back to -1)."""
        with self._lock:
            mm = self._require_writable()
            offset = self._offset_of(recording_id)
            body = offset + DESCRIPTOR_HEADER_LENGTH
            _I64.pack_into(mm, body + CONTROL_SESSION_ID_OFFSET, control_session_id)
            _I64.pack_into(mm, body + CORRELATION_ID_OFFSET, correlation_id)
            _I64.pack_into(mm, body + STOP_TIMESTAMP_OFFSET, NULL_TIMESTAMP)
            _I32.pack_into(mm, body + SESSION_ID_OFFSET, to_int32(session_id))
            _I64.pack_into(mm, body + STOP_POSITION_OFFSET, NULL_POSITION)
            self._update_checksum(offset)
            self._sync()

    def update_start_position(self, recording_id: int, position: int) -> None:
        self._write_long(recording_id, START_POSITION_OFFSET, position)

    def update_stop_position(self, recording_id: int, position: int) -> None:
        self._write_long(recording_id, STOP_POSITION_OFFSET, position)

    def _write_long(self, recording_id: int, field_offset: int, value: int) -> None:
        with self._lock:
            mm = self._require_writable()
            offset = self._offset_of(recording_id)
            _I64.pack_into(mm, offset + DESCRIPTOR_HEADER_LENGTH + field_offset, value)
            self._update_checksum(offset)
            self._sync()

    def change_state(self, recording_id: int, state: RecordingState | int) -> bool:
        """Write an entry's state; only VALID entries stay indexed (visible to every request).

        Returns False if no entry has that id (or, for a non-VALID target state, no VALID one: as in Java,
        invalidating works on indexed recordings; marking VALID again searches the whole catalog).
        """
        new_state = RecordingState(state)
        with self._lock:
            mm = self._require_writable()
            offset = self._index.offset(recording_id)
            if offset is None:
                if new_state != RecordingState.VALID:
                    return False
                offset = self._find_entry_offset(recording_id)
                if offset is None:
                    return False
                self._index.insert(recording_id, offset)
            elif new_state != RecordingState.VALID:
                self._index.remove(recording_id)
            _I32.pack_into(mm, offset + DESCRIPTOR_STATE_OFFSET, new_state)
            self._sync()
            return True

    def refresh_checksum(self, offset: int) -> None:
        """Recompute the descriptor checksum of the entry at `offset`, whatever its state (ArchiveTool's
        `checksum` verb stamps every entry with the catalog's checksum); nothing without a checksum."""
        with self._lock:
            self._require_writable()
            if not self._first_offset <= offset < self._next_offset:
                raise ValueError(f"no catalog entry at offset {offset}: {self._path}")
            self._update_checksum(offset)
            self._sync()

    # ------------------------------------------------------------------------------------------------------------
    # reads

    def has_recording(self, recording_id: int) -> bool:
        with self._lock:
            return recording_id in self._index

    def find(self, recording_id: int) -> RecordingDescriptor | None:
        with self._lock:
            offset = self._index.offset(recording_id)
            return None if offset is None else self._decode(offset)

    def find_cached(
        self, recording_id: int, cache: dict[int, tuple[bytes, RecordingDescriptor]]
    ) -> RecordingDescriptor | None:
        """`find`, reusing the descriptor `cache` holds for identical entry bytes (and caching a new decode).

        A stream lists the same recordings on every trigger, from a catalog opened afresh each time: comparing an
        entry's ~200 bytes costs a small part of decoding them.
        """
        with self._lock:
            offset = self._index.offset(recording_id)
            if offset is None:
                return None
            raw = self._require_map()[offset + DESCRIPTOR_HEADER_LENGTH : offset + self._frame_length_at(offset)]
            hit = cache.get(recording_id)
            if hit is not None and hit[0] == raw:
                return hit[1]
            descriptor = self._decode(offset)
            cache[recording_id] = (raw, descriptor)
            return descriptor

    def get(self, recording_id: int) -> RecordingDescriptor:
        """Like `find`, but an unknown id raises ArchiveError UNKNOWN_RECORDING (the server's reply)."""
        with self._lock:
            return self._decode(self._offset_of(recording_id))

    def start_position(self, recording_id: int) -> int:
        return self._read_long(recording_id, START_POSITION_OFFSET)

    def stop_position(self, recording_id: int) -> int:
        return self._read_long(recording_id, STOP_POSITION_OFFSET)

    def _read_long(self, recording_id: int, field_offset: int) -> int:
        with self._lock:
            mm = self._require_map()
            value: int = _I64.unpack_from(mm, self._offset_of(recording_id) + DESCRIPTOR_HEADER_LENGTH + field_offset)[
                0
            ]
            return value

    def descriptor_wire_bytes(self, recording_id: int) -> bytes:
        """Raw entry bytes from `recordingId` to the end of the aligned frame, as Aeron sends a descriptor.

        The server writes the 8-byte SBE header and the live controlSessionId/correlationId first, then these
        bytes, so the message carries the entry's trailing padding exactly like Java's `sendDescriptor`.
        """
        with self._lock:
            mm = self._require_map()
            offset = self._offset_of(recording_id)
            frame_length = self._frame_length_at(offset)
            return bytes(mm[offset + DESCRIPTOR_HEADER_LENGTH + RECORDING_ID_OFFSET : offset + frame_length])

    def matches_uri(self, recording_id: int, stream_id: int, channel_fragment: bytes) -> bool:
        """Aeron's ListRecordingsForUri test, read from the entry's bytes: the stream id equals `stream_id` and the
        original channel contains `channel_fragment` (ASCII); False for an id that is not VALID.

        A listing asks this of every entry it scans, so it decodes nothing: Java's `ListRecordingsForUriSession`
        also compares the raw bytes.
        """
        with self._lock:
            offset = self._index.offset(recording_id)
            if offset is None:
                return False
            mm = self._require_map()
            if _I32.unpack_from(mm, offset + DESCRIPTOR_HEADER_LENGTH + STREAM_ID_OFFSET)[0] != to_int32(stream_id):
                return False
            start, end = self._original_channel_span(offset)
            return mm.find(channel_fragment, start, end) >= 0

    def recording_ids(self, from_id: int = 0) -> Iterator[int]:
        """VALID recording ids >= from_id in ascending order (a snapshot, so the catalog may change meanwhile)."""
        with self._lock:
            ids = self._index.ids_from(from_id)
        return iter(ids)

    def descriptors(self, from_id: int = 0) -> Iterator[RecordingDescriptor]:
        for recording_id in self.recording_ids(from_id):
            descriptor = self.find(recording_id)
            if descriptor is not None:
                yield descriptor

    def entries(self) -> Iterator[CatalogEntry]:
        """Every entry in file order, whatever its state."""
        with self._lock:
            offsets = list(self._entry_offsets())
        for offset in offsets:
            with self._lock:
                mm = self._require_map()
                (state,) = _I32.unpack_from(mm, offset + DESCRIPTOR_STATE_OFFSET)
                (checksum_value,) = _I32.unpack_from(mm, offset + DESCRIPTOR_CHECKSUM_OFFSET)
                entry = CatalogEntry(offset, self._frame_length_at(offset), state, checksum_value, self._decode(offset))
            yield entry

    def find_last_matching(self, min_recording_id: int, channel_fragment: str, stream_id: int, session_id: int) -> int:
        """Highest VALID id >= min_recording_id with this session and stream whose originalChannel contains the
        fragment (`Catalog.findLast`), or -1."""
        if min_recording_id < 0:
            return NULL_VALUE
        fragment = _ascii(channel_fragment)
        with self._lock:
            mm = self._require_map()
            for recording_id in self._index.ids_descending():
                if recording_id < min_recording_id:
                    break
                offset = self._index.offset(recording_id)
                assert offset is not None
                body = offset + DESCRIPTOR_HEADER_LENGTH
                (frame_session_id,) = _I32.unpack_from(mm, body + SESSION_ID_OFFSET)
                (frame_stream_id,) = _I32.unpack_from(mm, body + STREAM_ID_OFFSET)
                if frame_session_id != to_int32(session_id) or frame_stream_id != to_int32(stream_id):
                    continue
                if not fragment:
                    return recording_id
                start, end = self._original_channel_span(offset)
                if mm.find(fragment, start, end) >= 0:
                    return recording_id
        return NULL_VALUE

    def entry_checksum_ok(self, recording_id: int) -> bool:
        """Whether the stored descriptor checksum matches (True when no checksum is configured)."""
        with self._lock:
            mm = self._require_map()
            offset = self._offset_of(recording_id)
            if self._checksum is None:
                return True
            (length,) = _I32.unpack_from(mm, offset + DESCRIPTOR_LENGTH_OFFSET)
            (stored,) = _I32.unpack_from(mm, offset + DESCRIPTOR_CHECKSUM_OFFSET)
            return bool(self._compute_checksum(offset, length) == stored)

    # ------------------------------------------------------------------------------------------------------------
    # lifecycle

    def close(self) -> None:
        """Unmap and close; a writable catalog is always fsynced (data and metadata) first, as Aeron does."""
        with self._lock:
            self._release(sync=True)

    def _release(self, sync: bool) -> None:
        mm, fd = self._mm, self._fd
        self._mm, self._fd = None, -1
        try:
            if mm is not None:
                if sync and self._writable:
                    mm.flush()
                mm.close()
            if fd >= 0 and sync and self._writable:
                os.fsync(fd)
        finally:
            if fd >= 0:
                os.close(fd)

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Catalog(path={self._path!r}, writable={self._writable}, capacity={self._capacity}, "
            f"alignment={self._alignment}, nextRecordingId={self._next_recording_id}, entries={len(self._index)})"
        )

    # ------------------------------------------------------------------------------------------------------------
    # internals

    def _require_map(self) -> mmap.mmap:
        if self._mm is None:
            raise ArchiveError(f"catalog is closed: {self._path}")
        return self._mm

    def _require_writable(self) -> mmap.mmap:
        mm = self._require_map()
        if not self._writable:
            raise ArchiveError(f"catalog is open read-only: {self._path}")
        return mm

    def _offset_of(self, recording_id: int) -> int:
        offset = self._index.offset(recording_id)
        if offset is None:
            raise ArchiveError(f"unknown recording id: {recording_id}", ErrorCode.UNKNOWN_RECORDING)
        return offset

    def _frame_length_at(self, offset: int) -> int:
        (length,) = _I32.unpack_from(self._require_map(), offset + DESCRIPTOR_LENGTH_OFFSET)
        return align(length + DESCRIPTOR_HEADER_LENGTH, self._alignment)

    def _entry_offsets(self) -> Iterator[int]:
        offset = self._first_offset
        while offset < self._next_offset:
            yield offset
            offset += self._frame_length_at(offset)

    def _find_entry_offset(self, recording_id: int) -> int | None:
        mm = self._require_map()
        for offset in self._entry_offsets():
            (entry_id,) = _I64.unpack_from(mm, offset + DESCRIPTOR_HEADER_LENGTH + RECORDING_ID_OFFSET)
            if entry_id == recording_id:
                return offset
        return None

    def _original_channel_span(self, offset: int) -> tuple[int, int]:
        """Where the entry's original channel (its second var field) lies in the map."""
        mm = self._require_map()
        frame_end = offset + self._frame_length_at(offset)
        cursor = offset + DESCRIPTOR_HEADER_LENGTH + VAR_DATA_OFFSET
        for field in range(2):  # the stripped channel, then the original channel
            if cursor + 4 > frame_end:
                raise ArchiveError(f"corrupt catalog entry at offset {offset}: {self._path}")
            (length,) = _U32.unpack_from(mm, cursor)
            if cursor + 4 + length > frame_end:
                raise ArchiveError(f"corrupt catalog entry at offset {offset}: {self._path}")
            if field == 1:
                return cursor + 4, cursor + 4 + length
            cursor += 4 + length
        raise AssertionError("unreachable")

    def _decode(self, offset: int) -> RecordingDescriptor:
        try:
            return descriptor_from_body(
                self._require_map(), offset + DESCRIPTOR_HEADER_LENGTH, offset + self._frame_length_at(offset)
            )
        except DescriptorDecodeError as ex:
            raise ArchiveError(f"corrupt catalog entry at offset {offset}: {self._path} ({ex})") from ex

    def _compute_checksum(self, offset: int, length: int) -> int:
        if self._checksum is None:
            return 0
        return self._checksum.compute(self._require_map(), offset + DESCRIPTOR_HEADER_LENGTH, length)

    def _update_checksum(self, offset: int) -> None:
        if self._checksum is not None:
            mm = self._require_map()
            (length,) = _I32.unpack_from(mm, offset + DESCRIPTOR_LENGTH_OFFSET)
            _I32.pack_into(mm, offset + DESCRIPTOR_CHECKSUM_OFFSET, self._compute_checksum(offset, length))

    def _sync(self) -> None:
        if self._sync_level > 0 and self._mm is not None and self._writable:
            self._mm.flush()
            if self._sync_level > 1:
                os.fsync(self._fd)

    def _grow(self, frame_length: int) -> None:
        """Remap at `cap + cap/2` (repeatedly) until the new entry fits (`Catalog.growCatalog`)."""
        old_capacity = self._capacity
        target = self._next_offset + frame_length
        if target > MAX_CAPACITY:
            if old_capacity == MAX_CAPACITY:
                raise ArchiveError(f"catalog is full, max capacity reached: {MAX_CAPACITY}")
            raise ArchiveError(
                f"recording is too big: total recording length is {frame_length} bytes, available space is "
                f"{MAX_CAPACITY - self._next_offset} bytes"
            )
        new_capacity = old_capacity
        while new_capacity < target:
            new_capacity = min(new_capacity + (new_capacity >> 1), MAX_CAPACITY)
        mm = self._require_writable()
        mm.flush()
        mm.close()
        self._mm = None
        os.ftruncate(self._fd, new_capacity)
        self._mm = mmap.mmap(self._fd, new_capacity, access=mmap.ACCESS_WRITE)
        self._capacity = new_capacity
        log.info("catalog %s resized from %d to %d bytes", self._path, old_capacity, new_capacity)
