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
from dataclasses import dataclass
from typing import Protocol

from aeron_archive_spark.archive.constants import DELETE_SUFFIX, NULL_POSITION, RECORDING_SEGMENT_SUFFIX
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HEADER_LENGTH,
    compute_term_id_from_position,
    header_matches,
    position_bits_to_shift,
)

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^([0-9]+)-(-?[0-9]+)\.rec$")


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
