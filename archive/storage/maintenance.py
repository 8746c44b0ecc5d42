"""Offline maintenance of an archive directory: the storage side of Aeron's `ArchiveTool` verbs.

Each function does what the ArchiveTool verb of the same name does to the catalog and the segment files (Java 1.53,
`io.aeron.archive.ArchiveTool`), returns what it did as data, and prints nothing: `archive.cli.tool` words the
results for operators. The archive must not be running while they write: a running archive keeps its own view of
the catalog and would overwrite or contradict the changes. `catalog_writers` finds processes that have the catalog
mapped for writing (a running archive, Java's or ours), so the CLI can refuse; Java's tool does not check at all.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass, field

from aeron_archive_spark.archive.constants import CATALOG_FILE_NAME, NULL_POSITION, RECORDING_SEGMENT_SUFFIX
from aeron_archive_spark.archive.constants import RecordingState as State
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import (
    CATALOG_HEADER_LENGTH,
    MIN_CAPACITY,
    Catalog,
    CatalogEntry,
    catalog_path,
)
from aeron_archive_spark.archive.storage.checksums import Checksum
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HEADER_LENGTH,
    SESSION_ID_FIELD_OFFSET,
    align,
    frame_length_at,
    frame_type_at,
)
from aeron_archive_spark.archive.storage.segments import (
    delete_pending_name,
    delete_segment_file,
    fsync_directory,
    recording_file_names,
    segment_file_base_position,
)
from aeron_archive_spark.archive.storage.time_index import TIME_INDEX_SUFFIX
from aeron_archive_spark.archive.storage.time_index_copy import TEMP_SUFFIX as TIME_INDEX_COPY_SUFFIX

log = logging.getLogger(__name__)

COMPACT_SUFFIX = ".compact"  # ArchiveTool.compact writes the new catalog next to the old one under this name
_CATALOG_HEADER = struct.Struct("<iiqi")
_I32 = struct.Struct("<i")
# ArchiveTool's view of a segment file name (`Catalog.indexSegmentFiles`): a `.rec` name whose text before the
# first dash is a recording id; the position after it may not parse (delete-orphaned-segments deletes such files).
_REC_NAME = re.compile(r"^([0-9]+)-(.*)\.rec$")
_POSITION = re.compile(r"^-?[0-9]+$")


def require_archive(archive_dir: str | os.PathLike[str]) -> str:
    """The directory as a string, once it is known to hold a catalog: every verb's first check, so a mistyped path
    is named as such and never turned into a new, empty archive."""
    directory = os.fspath(archive_dir)
    if not os.path.isdir(directory):
        raise ArchiveError(f"archive directory not found: {directory}")
    if not os.path.isfile(catalog_path(directory)):
        raise ArchiveError(f"no {CATALOG_FILE_NAME} in archive directory {directory}")
    return directory


# -- a running archive ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CatalogWriter:
    """A process with the catalog mapped shared and writable: a running archive (Java's or ours) or a tool."""

    pid: int
    command: str


def catalog_writers(archive_dir: str | os.PathLike[str], proc: str = "/proc") -> list[CatalogWriter]:
    """Other processes of this host that have the directory's catalog mapped for writing (Linux `/proc`; empty
    where there is none).

    Both archives map `archive.catalog` shared and writable for as long as they run, and readers (list, Spark)
    map it read-only, so this tells a running archive from a reader without any file of the archive's own. Processes
    whose maps cannot be read (another user's) are not seen.
    """
    target = os.path.realpath(catalog_path(archive_dir))
    found: list[CatalogWriter] = []
    try:
        pids = [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(os.path.join(proc, str(pid), "maps"), encoding="utf-8", errors="replace") as maps:
                writable = any(_maps_line_writes(line, target) for line in maps)
        except OSError:
            continue
        if writable:
            found.append(CatalogWriter(pid, _command_line(proc, pid)))
    return found


def _maps_line_writes(line: str, target: str) -> bool:
    parts = line.split(maxsplit=5)
    return len(parts) == 6 and parts[5].rstrip("\n") == target and parts[1].startswith("rw") and parts[1][3] == "s"


def _command_line(proc: str, pid: int) -> str:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


# -- capacity and counts ----------------------------------------------------------------------------------------------


def catalog_capacity(archive_dir: str | os.PathLike[str]) -> int:
    """The catalog's capacity in bytes, i.e. its file size (`ArchiveTool.capacity(dir)`)."""
    with Catalog(require_archive(archive_dir), writable=False) as catalog:
        return catalog.capacity


def grow_catalog(archive_dir: str | os.PathLike[str], capacity: int) -> int:
    """Grow the catalog file to `capacity` bytes; a smaller value changes nothing (`ArchiveTool.capacity(dir, n)`).
    Returns the capacity after the call. The archive grows the catalog by half each time it fills up; sizing it
    ahead saves those remaps, and a catalog in use cannot be grown past what its archive maps."""
    directory = require_archive(archive_dir)
    with Catalog(directory, writable=True, capacity=capacity, recover=False) as catalog:
        return catalog.capacity


def count_entries(archive_dir: str | os.PathLike[str]) -> int:
    """How many VALID entries the catalog holds (`ArchiveTool count-entries`, Java's `Catalog.entryCount`)."""
    with Catalog(require_archive(archive_dir), writable=False) as catalog:
        return len(catalog)


def catalog_entries(archive_dir: str | os.PathLike[str]) -> tuple[int, list[CatalogEntry]]:
    """(capacity, every entry in file order whatever its state): what `describe-all` shows."""
    with Catalog(require_archive(archive_dir), writable=False) as catalog:
        return catalog.capacity, list(catalog.entries())


# -- recording state --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateChange:
    recording_id: int
    old_state: State
    new_state: State

    @property
    def changed(self) -> bool:
        return self.old_state != self.new_state


def mark_recording(archive_dir: str | os.PathLike[str], recording_id: int, target: State) -> StateChange:
    """Set a recording's entry to VALID or INVALID (`ArchiveTool mark-valid` / `mark-invalid`).

    As Java: only INVALID <-> VALID is allowed (a DELETED entry stays deleted), an entry already in the target
    state is left alone, and an unknown id raises. An INVALID entry is invisible to every request of the archive;
    marking it VALID again brings it back as it was.
    """
    if target not in (State.VALID, State.INVALID):
        raise ValueError(f"a recording can be marked VALID or INVALID, not {target.name}")
    expected = State.INVALID if target == State.VALID else State.VALID
    directory = require_archive(archive_dir)
    with Catalog(directory, writable=True, capacity=MIN_CAPACITY, recover=False) as catalog:
        entry = _entry_of(catalog, recording_id)
        current = _state(entry.state)
        if current == target:
            return StateChange(recording_id, current, target)
        if current != expected:
            raise ArchiveError(
                f"(recordingId={recording_id}) state transition {current.name} -> {target.name} is not allowed"
            )
        catalog.change_state(recording_id, target)
        log.info("recording %d: %s -> %s in %s", recording_id, current.name, target.name, directory)
        return StateChange(recording_id, current, target)


def _entry_of(catalog: Catalog, recording_id: int) -> CatalogEntry:
    for entry in catalog.entries():
        if entry.descriptor.recording_id == recording_id:
            return entry
    raise ArchiveError(f"no recording found with recordingId: {recording_id} in {catalog.archive_dir}")


def _state(value: int) -> State:
    try:
        return State(value)
    except ValueError:
        raise ArchiveError(f"unknown recording state {value} in the catalog") from None


# -- compaction -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compaction:
    """What `compact` removes (or removed): the non-VALID entries, the bytes they held, their files."""

    removed: tuple[tuple[int, State], ...]  # (recording id, state) of each entry dropped
    reclaimed_bytes: int
    files: tuple[str, ...]  # segment files (and pending deletions) of the dropped recordings


def plan_compaction(archive_dir: str | os.PathLike[str]) -> Compaction:
    """What `compact_catalog` would do, changing nothing (for a confirmation or a dry run)."""
    directory = require_archive(archive_dir)
    with Catalog(directory, writable=False) as catalog:
        _refuse_legacy(catalog, "compact")
        dropped = [e for e in catalog.entries() if e.state != State.VALID]
    files = tuple(name for e in dropped for name in recording_file_names(directory, e.descriptor.recording_id))
    return Compaction(
        tuple((e.descriptor.recording_id, _state(e.state)) for e in dropped),
        sum(e.frame_length for e in dropped),
        files,
    )


def compact_catalog(archive_dir: str | os.PathLike[str]) -> Compaction:
    """Remove every non-VALID entry from the catalog and delete its recording's files (`ArchiveTool compact`).

    As Java: the kept entries are copied, bytes unchanged, after a header with the same version, nextRecordingId
    and alignment into `archive.catalog.compact`, trimmed to what they fill; the dropped recordings' files are
    deleted first, then the new file replaces the catalog. That order makes an interrupted compaction safe to run
    again: the old catalog still lists whatever was not finished. Unlike Java, the replacement is one atomic rename
    (Java deletes the catalog, then moves the new one in) and the new file is synced first.
    """
    directory = require_archive(archive_dir)
    path = catalog_path(directory)
    plan = plan_compaction(directory)
    with Catalog(directory, writable=False) as catalog:
        kept = [e for e in catalog.entries() if e.state == State.VALID]
        header = _CATALOG_HEADER.pack(
            catalog.version, CATALOG_HEADER_LENGTH, catalog.next_recording_id, catalog.alignment
        ) + bytes(CATALOG_HEADER_LENGTH - _CATALOG_HEADER.size)
    with open(path, "rb") as source:
        old = source.read()
    body = b"".join(old[e.offset : e.offset + e.frame_length] for e in kept)

    for name in plan.files:
        delete_segment_file(directory, name)
    compact_path = path + COMPACT_SUFFIX
    with open(compact_path, "wb") as target:
        target.write(header + body)
        target.flush()
        os.fsync(target.fileno())
    os.replace(compact_path, path)
    fsync_directory(directory)
    log.info(
        "compacted %s: removed %d entries (%d bytes), deleted %d files",
        path,
        len(plan.removed),
        plan.reclaimed_bytes,
        len(plan.files),
    )
    return plan


def _refuse_legacy(catalog: Catalog, verb: str) -> None:
    if catalog.is_legacy:
        raise ArchiveError(
            f"catalog {catalog.path} uses the legacy fixed 1 KiB entry layout: run `aeron-archive migrate` before "
            f"`{verb}`"
        )


# -- orphaned segments ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OrphanedSegment:
    name: str
    recording_id: int
    reason: str


def find_orphaned_segments(
    archive_dir: str | os.PathLike[str], recording_id: int | None = None
) -> list[OrphanedSegment]:
    """Segment files of catalogued recordings that lie outside their recording (`ArchiveTool
    delete-orphaned-segments`): before the segment of its start, after the segment of its stop (a stopped
    recording), or named with a position that does not parse; and, beyond Java, time index files (`.tix`) whose
    segment file is gone, and the temporary files (`.tix.tmp`) a process killed while it dated a replica by its
    source left (no reader lists them; the tool runs only while no archive holds the directory, so none is being
    written).

    As Java, every entry counts whatever its state, and files of a recording id the catalog has no entry for are
    not looked at (`compact` removes the files of the entries it drops). An unknown `recording_id` raises.
    """
    directory = require_archive(archive_dir)
    with Catalog(directory, writable=False) as catalog:
        entries = [e for e in catalog.entries() if recording_id is None or e.descriptor.recording_id == recording_id]
    if recording_id is not None and not entries:
        raise ArchiveError(f"no recording found with recordingId: {recording_id} in {directory}")
    names_by_id: dict[int, list[str]] = {}
    listed = sorted(os.listdir(directory))
    for name in listed:
        match = _REC_NAME.match(name)
        if match is not None:
            names_by_id.setdefault(int(match.group(1)), []).append(name)
    found: list[OrphanedSegment] = []
    # Beyond Java: a time index file (ours) whose segment is gone, e.g. deleted by Java's archive or ArchiveTool,
    # which know only `.rec` files.
    present = set(listed)
    catalogued = {e.descriptor.recording_id for e in entries}
    temp_suffix = TIME_INDEX_SUFFIX + TIME_INDEX_COPY_SUFFIX
    for name in listed:
        rid_text = name.split("-", 1)[0]
        if not (rid_text.isdigit() and int(rid_text) in catalogued):
            continue
        if name.endswith(temp_suffix):
            found.append(OrphanedSegment(name, int(rid_text), "a time index copy's temporary file"))
            continue
        if not name.endswith(TIME_INDEX_SUFFIX):
            continue
        segment = name[: -len(TIME_INDEX_SUFFIX)] + RECORDING_SEGMENT_SUFFIX
        if segment not in present and delete_pending_name(segment) not in present:
            found.append(OrphanedSegment(name, int(rid_text), "a time index without its segment"))
    for entry in entries:
        d = entry.descriptor
        first = segment_file_base_position(
            d.start_position, d.start_position, d.term_buffer_length, d.segment_file_length
        )
        last = (
            None
            if d.stop_position == NULL_POSITION
            else segment_file_base_position(
                d.start_position, d.stop_position, d.term_buffer_length, d.segment_file_length
            )
        )
        for name in names_by_id.get(d.recording_id, []):
            text = name[len(f"{d.recording_id}-") : -len(RECORDING_SEGMENT_SUFFIX)]
            if not _POSITION.match(text):
                found.append(OrphanedSegment(name, d.recording_id, "no position in its name"))
            elif int(text) < first:
                found.append(OrphanedSegment(name, d.recording_id, f"before the start's segment {first}"))
            elif last is not None and int(text) > last:
                found.append(OrphanedSegment(name, d.recording_id, f"after the stop's segment {last}"))
    return found


def delete_orphaned_segments(
    archive_dir: str | os.PathLike[str], recording_id: int | None = None
) -> list[OrphanedSegment]:
    """Delete what `find_orphaned_segments` finds; returns the files deleted."""
    directory = require_archive(archive_dir)
    orphans = find_orphaned_segments(directory, recording_id)
    for orphan in orphans:
        delete_segment_file(directory, orphan.name)
    if orphans:
        fsync_directory(directory)
        log.info("deleted %d orphaned segment files in %s", len(orphans), directory)
    return orphans


# -- record checksums -------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ChecksumStamp:
    """What `stamp_checksums` did to one recording."""

    recording_id: int
    files: list[str] = field(default_factory=list)
    frames: int = 0
    errors: list[str] = field(default_factory=list)


def stamp_checksums(
    archive_dir: str | os.PathLike[str],
    checksum: Checksum,
    recording_id: int | None = None,
    all_files: bool = False,
) -> list[ChecksumStamp]:
    """Compute each DATA frame's record checksum and write it into the frame's session-id field, and the catalog
    entry's descriptor checksum (`ArchiveTool checksum <algorithm> [recordingId] [-a]`).

    As Java: only the last segment file of each recording unless `all_files`; every entry whatever its state when
    no `recording_id` is given, else that VALID recording (an unknown one raises). Afterwards the archive can run
    with record checksums on and verify the frames on replay. A file is walked from its first frame (the start's
    term offset in the start's segment) to its first zero frame length or its end.
    """
    directory = require_archive(archive_dir)
    stamps: list[ChecksumStamp] = []
    with Catalog(directory, writable=True, capacity=MIN_CAPACITY, checksum=checksum, recover=False) as catalog:
        if recording_id is not None and not catalog.has_recording(recording_id):
            raise ArchiveError(f"no recording found with recordingId: {recording_id} in {directory}")
        entries = [e for e in catalog.entries() if recording_id is None or e.descriptor.recording_id == recording_id]
        if recording_id is not None:
            entries = [e for e in entries if e.state == State.VALID]
        for entry in entries:
            catalog.refresh_checksum(entry.offset)
            stamps.append(_stamp_recording(directory, entry, checksum, all_files))
    return stamps


def _stamp_recording(directory: str, entry: CatalogEntry, checksum: Checksum, all_files: bool) -> ChecksumStamp:
    d = entry.descriptor
    stamp = ChecksumStamp(d.recording_id)
    prefix = f"{d.recording_id}-"
    positioned: list[tuple[int, str]] = []
    for name in recording_file_names(directory, d.recording_id):
        text = name[len(prefix) : -len(RECORDING_SEGMENT_SUFFIX)]
        if name.endswith(RECORDING_SEGMENT_SUFFIX) and _POSITION.match(text):
            positioned.append((int(text), name))
    if not positioned:
        stamp.errors.append(f"(recordingId={d.recording_id}) ERR: no segment files to checksum")
        return stamp
    positioned.sort()
    start_term_base = d.start_position - (d.start_position & (d.term_buffer_length - 1))
    for base, name in positioned if all_files else positioned[-1:]:
        first = d.start_position - start_term_base if base == start_term_base else 0
        stamp.files.append(name)
        stamp.frames += _stamp_file(os.path.join(directory, name), first, checksum, d.recording_id, stamp.errors)
    return stamp


def _stamp_file(path: str, offset: int, checksum: Checksum, recording_id: int, errors: list[str]) -> int:
    """Stamp the DATA frames of one file from `offset` to its first zero frame length; returns how many.

    Frames are read a chunk at a time and the chunk written back once (only session-id words change), rather than
    a read and a write per frame as Java does: a segment holds up to millions of frames. A DATA frame that runs
    past the end of the file, or a file that ends inside a frame header, is an error (Java: "failed to read").
    """
    frames = 0
    chunk_length = _STAMP_CHUNK
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        while offset < size:
            chunk = bytearray(os.pread(fd, min(chunk_length, size - offset), offset))
            at_end = offset + len(chunk) >= size
            cursor, done, dirty = 0, False, False
            while True:
                if cursor + HEADER_LENGTH > len(chunk):
                    if at_end and cursor < len(chunk):
                        errors.append(_read_error(recording_id, path, offset + cursor, "its header", size))
                    done = at_end
                    break
                length = frame_length_at(chunk, cursor)
                if length <= 0:
                    done = True
                    break
                aligned = align(length, FRAME_ALIGNMENT)
                if frame_type_at(chunk, cursor) == HDR_TYPE_DATA:
                    if cursor + aligned > len(chunk):
                        if at_end:
                            errors.append(_read_error(recording_id, path, offset + cursor, "its data", size))
                            done = True
                        elif cursor == 0:
                            chunk_length = aligned  # a frame longer than the chunk: read it whole
                        break
                    value = checksum.compute(chunk, cursor + HEADER_LENGTH, aligned - HEADER_LENGTH)
                    _I32.pack_into(chunk, cursor + SESSION_ID_FIELD_OFFSET, value)
                    frames += 1
                    dirty = True
                cursor += aligned
            if dirty:
                os.pwrite(fd, chunk[: min(cursor, len(chunk))], offset)
            if done:
                break
            offset += cursor
    finally:
        os.close(fd)
    return frames


def _read_error(recording_id: int, path: str, offset: int, what: str, size: int) -> str:
    return (
        f"(recordingId={recording_id}, file={path}) ERR: the frame at file offset {offset} is cut by the end of the "
        f"file ({size} bytes) in {what}"
    )


_STAMP_CHUNK = 1024 * 1024
