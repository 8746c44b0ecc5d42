"""Segment files: naming, base-position arithmetic, listing, deletion and the file side of truncate.

A recording is stored in files named `<recordingId>-<segmentBasePosition>.rec`, each pre-sized to the
recording's segment length. Segment bases are aligned to the term base of the recording's start position, not to
multiples of the segment length, so all arithmetic goes through `segment_file_base_position` (Aeron's
`AeronArchive.segmentFileBasePosition`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from aeron_archive_spark.archive.constants import DELETE_SUFFIX, NULL_POSITION, RECORDING_SEGMENT_SUFFIX
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage import time_index
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HEADER_LENGTH,
    HEADER_STRUCT,
    compute_term_id_from_position,
    header_matches,
    position_bits_to_shift,
)

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^([0-9]+)-(-?[0-9]+)\.rec$")
_FRAME_LENGTH = struct.Struct("<i")


def segment_file_name(recording_id: int, base_position: int) -> str:
    return f"{recording_id}-{base_position}{RECORDING_SEGMENT_SUFFIX}"


def segment_file_base_position(start_position: int, position: int, term_length: int, segment_length: int) -> int:
    """Base position of the segment holding `position` (segments are aligned to the start's term base)."""
    start_term_base = start_position - (start_position & (term_length - 1))
    delta = position - start_term_base
    return start_term_base + (delta - (delta & (segment_length - 1)))


def parse_segment_file_name(name: str) -> tuple[int, int] | None:
    """(recording id, base position) of a `<id>-<base>.rec` name, or None if it is not one.

    Follows `Catalog.parseSegmentFileRecordingId/Position`: the id is the text before the first dash (a dash at
    index 0 is invalid) and the position is the text between the dash and `.rec`. A negative position parses (as
    in Java) so that callers can reject it loudly rather than silently skip the file.
    """
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def delete_pending_name(name: str) -> str:
    """Name a segment file is given while its deletion is pending (`<name>.del`)."""
    return name if name.endswith(DELETE_SUFFIX) else name + DELETE_SUFFIX


def is_delete_pending(name: str) -> bool:
    return name.endswith(RECORDING_SEGMENT_SUFFIX + DELETE_SUFFIX)


@dataclass(frozen=True, slots=True)
class SegmentFile:
    recording_id: int
    base_position: int
    name: str
    path: str


def segment_files(archive_dir: str | os.PathLike[str], recording_id: int | None = None) -> list[SegmentFile]:
    """The `.rec` files of one recording (or of all), parsed and sorted by (recording id, base position).

    Names that do not parse are skipped, as `Catalog.indexSegmentFiles` skips them.
    """
    directory = os.fspath(archive_dir)
    result: list[SegmentFile] = []
    prefix = None if recording_id is None else f"{recording_id}-"
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return result
    for name in names:
        if prefix is not None and not name.startswith(prefix):
            continue
        parsed = parse_segment_file_name(name)
        if parsed is None:
            continue
        result.append(SegmentFile(parsed[0], parsed[1], name, os.path.join(directory, name)))
    result.sort(key=lambda f: (f.recording_id, f.base_position))
    return result


def list_segment_files(archive_dir: str | os.PathLike[str], recording_id: int | None = None) -> list[str]:
    """Names of the `.rec` files of one recording (or of all), sorted by (recording id, base position)."""
    return [f.name for f in segment_files(archive_dir, recording_id)]


def index_segment_files(archive_dir: str | os.PathLike[str]) -> dict[int, list[SegmentFile]]:
    """All `.rec` files grouped by recording id, each list sorted by base position (one directory listing)."""
    index: dict[int, list[SegmentFile]] = {}
    for segment in segment_files(archive_dir):
        index.setdefault(segment.recording_id, []).append(segment)
    return index


def highest_segment_file(segments: list[SegmentFile]) -> SegmentFile | None:
    """The file with the highest base position; a negative base is corruption (`findSegmentFileWithHighestPosition`)."""
    best: SegmentFile | None = None
    for segment in segments:
        if segment.base_position < 0:
            raise ArchiveError(f"negative position encoded in the file name: {segment.name}")
        if best is None or segment.base_position > best.base_position:
            best = segment
    return best


def recording_file_names(archive_dir: str | os.PathLike[str], recording_id: int) -> list[str]:
    """Every file of the recording, including ones pending deletion (`<name>.del`): what purge deletes."""
    prefix = f"{recording_id}-"
    try:
        names = os.listdir(os.fspath(archive_dir))
    except FileNotFoundError:
        return []
    selected = [
        n for n in names if n.startswith(prefix) and (n.endswith(RECORDING_SEGMENT_SUFFIX) or n.endswith(DELETE_SUFFIX))
    ]
    return sorted(selected)


def mark_for_deletion(archive_dir: str | os.PathLike[str], name: str) -> str:
    """Rename a segment file to `<name>.del` so nothing picks it up as data before it is deleted."""
    directory = os.fspath(archive_dir)
    target = delete_pending_name(name)
    os.replace(os.path.join(directory, name), os.path.join(directory, target))
    return target


def delete_segment_file(archive_dir: str | os.PathLike[str], name: str) -> bool:
    """Delete a segment file, falling back to its `.del` name as `DeleteSegmentsSession` does.

    Returns True if a file was removed. A file that is already gone is not an error (a previous attempt, or a
    rename to `.del` in between, may have dealt with it); a file that exists but cannot be removed raises.
    """
    directory = os.fspath(archive_dir)
    path = os.path.join(directory, name)
    time_index.remove_companion(directory, name)
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        pass
    except OSError as ex:
        raise ArchiveError(f"unable to delete segment file: {path}: {ex.strerror}") from ex
    if name.endswith(DELETE_SUFFIX):
        return False
    renamed = path + DELETE_SUFFIX
    try:
        os.remove(renamed)
        return True
    except FileNotFoundError:
        return False
    except OSError as ex:
        raise ArchiveError(f"unable to delete segment file: {renamed}: {ex.strerror}") from ex


def fsync_directory(archive_dir: str | os.PathLike[str]) -> None:
    """Make file creations/deletions in the directory durable (Aeron's `archiveDirChannel.force`)."""
    fd = os.open(os.fspath(archive_dir), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as ex:
        if ex.errno not in (errno.EINVAL, errno.EBADF):  # some file systems cannot fsync a directory
            raise
    finally:
        os.close(fd)


def erase_segment_tail(path: str, segment_offset: int, segment_length: int) -> None:
    """Cut a segment file at `segment_offset`, then write one zero byte at `segmentLength - 1`.

    The file keeps its full length (attach and replay expect whole segments) while everything from the cut on
    reads as zeros, i.e. as "not yet written".
    """
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, segment_offset)
        if os.pwrite(fd, b"\x00", segment_length - 1) != 1:
            raise ArchiveError(f"failed to write single byte to restore the segment file length: {path}")
    finally:
        os.close(fd)


class RecordingExtent(Protocol):
    """The descriptor fields segment arithmetic needs (RecordingDescriptor satisfies it)."""

    @property
    def recording_id(self) -> int: ...
    @property
    def start_position(self) -> int: ...
    @property
    def stop_position(self) -> int: ...
    @property
    def initial_term_id(self) -> int: ...
    @property
    def segment_file_length(self) -> int: ...
    @property
    def term_buffer_length(self) -> int: ...
    @property
    def stream_id(self) -> int: ...


def truncate_segment_files(
    archive_dir: str | os.PathLike[str], descriptor: RecordingExtent, position: int
) -> list[str]:
    """Do the file part of `truncateRecording(id, position)` and return the file names left to delete.

    Mirrors `ArchiveConductor.truncateRecording`: truncating to the start deletes every file of the recording
    (including `.del` ones); a position inside a segment must point at a data header (termOffset, termId and
    streamId checked), and that file is cut there and re-extended to its full length; a position on a segment
    boundary deletes that segment; every later segment up to the old stop position is deleted. The caller updates
    the catalog stop position and runs the deletions (after replays of the recording have stopped).
    """
    stop_position = descriptor.stop_position
    start_position = descriptor.start_position
    if stop_position == NULL_POSITION:
        raise ArchiveError("cannot truncate active recording", ErrorCode.ACTIVE_RECORDING)
    if position < start_position or position > stop_position or position & (FRAME_ALIGNMENT - 1):
        raise ArchiveError(
            f"invalid position {position}: start={start_position} stop={stop_position} alignment={FRAME_ALIGNMENT}",
            ErrorCode.INVALID_POSITION,
        )

    recording_id = descriptor.recording_id
    if position == start_position:
        return recording_file_names(archive_dir, recording_id)

    directory = os.fspath(archive_dir)
    term_length = descriptor.term_buffer_length
    segment_length = descriptor.segment_file_length
    segment_base = segment_file_base_position(start_position, position, term_length, segment_length)
    segment_offset = position - segment_base
    files: list[str] = []

    if segment_offset > 0:
        if position != stop_position:
            path = os.path.join(directory, segment_file_name(recording_id, segment_base))
            _check_data_header(path, descriptor, position, segment_offset)
            erase_segment_tail(path, segment_offset, segment_length)
            time_index.cut_time_index(directory, recording_id, segment_base, position)
            log.info("recording %d: segment %s cut at offset %d", recording_id, path, segment_offset)
    else:
        files.append(segment_file_name(recording_id, segment_base))

    base = segment_base + segment_length
    while base <= stop_position:
        files.append(segment_file_name(recording_id, base))
        base += segment_length
    return files


def _check_data_header(path: str, descriptor: RecordingExtent, position: int, segment_offset: int) -> None:
    term_length = descriptor.term_buffer_length
    term_id = compute_term_id_from_position(position, position_bits_to_shift(term_length), descriptor.initial_term_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as ex:
        raise ArchiveError(f"recording segment not found: {path}") from ex
    try:
        header = os.pread(fd, HEADER_LENGTH, segment_offset)
    finally:
        os.close(fd)
    if len(header) != HEADER_LENGTH or not header_matches(
        header, 0, position & (term_length - 1), term_id, descriptor.stream_id
    ):
        raise ArchiveError(f"{position} position not aligned to a data header", ErrorCode.INVALID_POSITION)


# -- segment management (Java's `ArchiveConductor` detach/delete/purge/attach/migrate, their file side) ----------------


def detached_segment_files(
    recording_id: int, previous_start: int, start_position: int, term_length: int, segment_length: int
) -> list[str]:
    """Names of the segment files before the segment of `start_position`, from the one of `previous_start` up, in
    position order (Java's `findDetachedSegments`): what a purge or a delete of detached segments removes."""
    first = segment_file_base_position(previous_start, previous_start, term_length, segment_length)
    start_segment = segment_file_base_position(start_position, start_position, term_length, segment_length)
    return [segment_file_name(recording_id, base) for base in range(first, start_segment, segment_length)]


def lowest_segment_file_position(archive_dir: str | os.PathLike[str], recording_id: int) -> int | None:
    """The lowest base position named by a file of the recording (`.rec` or `.rec.del`), None without one: where
    Java's `deleteDetachedSegments` starts looking for detached segments. Names whose position does not parse are
    skipped."""
    positions = [named_position(recording_id, name) for name in recording_file_names(archive_dir, recording_id)]
    return min((p for p in positions if p is not None), default=None)


def named_position(recording_id: int, name: str) -> int | None:
    """The position a file of the recording is named after (`<id>-<position>.rec[.del]`, up to the first dot, as
    Java parses it), None if it does not parse."""
    try:
        return int(name[len(f"{recording_id}-") : name.index(".")])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class AttachableSegment:
    """A segment file found before a recording's start that `AttachSegments` takes back: its recording data
    starts at `base_position + term_offset` (0 for a whole segment, else the recording's original start)."""

    base_position: int
    term_offset: int


def find_attachable_segments(
    archive_dir: str | os.PathLike[str], descriptor: RecordingExtent
) -> Iterator[AttachableSegment]:
    """The detached segment files that join the recording's start, walking back one segment at a time (Java's
    `attachSegments`): it stops at the first missing file, or after a segment whose data starts mid-term (the
    recording's first). A file of the wrong length, or whose first frame names another term or stream, raises
    `ArchiveError` (GENERIC) with Java's text; the segments yielded before it stay attachable."""
    segment_length = descriptor.segment_file_length
    term_length = descriptor.term_buffer_length
    bits = position_bits_to_shift(term_length)
    position = descriptor.start_position - segment_length
    while position >= 0:
        path = os.path.join(os.fspath(archive_dir), segment_file_name(descriptor.recording_id, position))
        try:
            file_length = os.stat(path).st_size
        except FileNotFoundError:
            return
        if file_length != segment_length:
            raise ArchiveError(f"fileLength={file_length} not equal to segmentLength={segment_length}")
        term_id = compute_term_id_from_position(position, bits, descriptor.initial_term_id)
        term_offset = _first_frame_offset(path, term_length, term_id, descriptor.stream_id)
        yield AttachableSegment(position, term_offset)
        if term_offset != 0:
            return
        position -= segment_length


def _first_frame_offset(path: str, term_length: int, term_id: int, stream_id: int) -> int:
    """Offset of the first frame in the segment's first term, checked against `term_id` and `stream_id` (Java's
    `findTermOffsetForStart`: the leading zeros of a recording that starts mid-term are skipped)."""
    with open(path, "rb") as file:
        first_term = file.read(term_length)
    view = memoryview(first_term)
    offset = 0
    while offset + HEADER_LENGTH <= len(view):
        if _FRAME_LENGTH.unpack_from(view, offset)[0] > 0:
            break
        offset += FRAME_ALIGNMENT
    if offset + HEADER_LENGTH > len(view) or offset >= term_length:
        raise ArchiveError(f"fragment not found in first term of segment {path}")
    header = HEADER_STRUCT.unpack_from(view, offset)
    actual_term_id, actual_stream_id = header[7], header[6]
    if actual_term_id != term_id:
        raise ArchiveError(f"term id does not match: actual={actual_term_id} expected={term_id}")
    if actual_stream_id != stream_id:
        raise ArchiveError(f"stream id does not match: actual={actual_stream_id} expected={stream_id}")
    return offset


@dataclass(frozen=True, slots=True)
class SegmentMigration:
    """The file side of `MigrateSegments`: the source's segment files to rename to the destination's names, in
    position order, and the source's empty file that follows its last segment (deleted, not moved)."""

    moves: tuple[tuple[str, str], ...]
    empty_following: tuple[str, ...]


def plan_segment_migration(
    archive_dir: str | os.PathLike[str], src: RecordingExtent, dst_recording_id: int
) -> SegmentMigration:
    """Which files a migration of `src`'s segments into `dst_recording_id` moves (Java's `moveAllSegments`, its
    checks first): every segment from the one of src's start to the one of its stop, but for one that starts at
    the stop position (the empty file a recording stopped on a segment boundary leaves). A source file that is
    missing, or a destination name already taken, raises `ArchiveError` (GENERIC) with Java's text; nothing has
    been moved then."""
    directory = os.fspath(archive_dir)
    term_length, segment_length = src.term_buffer_length, src.segment_file_length
    first = segment_file_base_position(src.start_position, src.start_position, term_length, segment_length)
    last = segment_file_base_position(src.start_position, src.stop_position, term_length, segment_length)
    moves: list[tuple[str, str]] = []
    empty: list[str] = []
    for position in range(first, last + 1, segment_length):
        src_name = segment_file_name(src.recording_id, position)
        if position == src.stop_position:
            empty.insert(0, src_name)
            continue
        src_path = os.path.join(directory, src_name)
        dst_path = os.path.join(directory, segment_file_name(dst_recording_id, position))
        if not os.path.exists(src_path):
            raise ArchiveError(f"missing src segment file {src_path}")
        if os.path.exists(dst_path):
            raise ArchiveError(f"preexisting dst segment file {dst_path}")
        moves.append((src_name, segment_file_name(dst_recording_id, position)))
    return SegmentMigration(tuple(moves), tuple(empty))


def move_segment_files(archive_dir: str | os.PathLike[str], moves: tuple[tuple[str, str], ...]) -> int:
    """Rename each (src, dst) pair in order; returns how many moved. A failed rename raises `ArchiveError` with
    Java's text (the files moved before it stay moved, as with Java)."""
    directory = os.fspath(archive_dir)
    for count, (src_name, dst_name) in enumerate(moves):
        src_path, dst_path = os.path.join(directory, src_name), os.path.join(directory, dst_name)
        try:
            os.rename(src_path, dst_path)
        except OSError as ex:
            raise ArchiveError(f"failed to rename {src_path} to {dst_path}") from ex
        time_index.move_companion(directory, src_name, dst_name)
        log.debug("segment %s moved to %s (%d of %d)", src_name, dst_name, count + 1, len(moves))
    return len(moves)
