"""Migration of an archive directory written by an older Aeron to the current catalog version (`ArchiveTool
migrate`: `ArchiveMigrationPlanner` and the `ArchiveMigration_0_1`, `_1_2`, `_2_3` steps of Java 1.53).

What each version changed on disk:

    0.0.0 -> 1.0.0  segment files were named `<id>-<segmentIndex>.rec`, the index counted from the segment that holds
                    the recording's start (its term base); they get position names.
    1.0.0 -> 2.0.0  a recording whose term and segment lengths differ had its files named by their position relative to
                    the start's term base: that base is added (Java's step, as it is).
    2.0.0 -> 3.0.0  the catalog's fixed 1 KiB entries are rewritten to the aligned layout (64-byte alignment, a 32-byte
                    header with nextRecordingId): `archive.catalog.updated`, trimmed, then renamed over the catalog.

Each step stamps the catalog with its version and leaves an empty `migration-<from>-to-<to>.dat` behind, as Java's.
Two deliberate differences:

* The plan starts from the catalog's version. Java's starts from `archive-mark.dat`'s, and stamps that file too; a
  directory always has a catalog, and Java 1.53 cannot even open the mark file an Aeron 1.15 archive leaves (its
  version field is 0: "mark file is created but not initialised"). The mark file is left as it is.
* Step 0 -> 1 names a file `index * segmentLength` from the start's term base, which is what the files of a version 0
  archive hold. Java's step counts from the start's *segment* base instead, and its 1 -> 2 step then adds the term
  base on top: for a recording that starts at or past its first segment (with terms shorter than segments) every
  file ends up named one or more segments past its data, which Java's own `verify` then rejects ("fragment
  termOffset ... termId ... (expected ...)"). Here the two steps together give every file the name of the
  position its first byte has; where Java's steps are right (a start inside the first segment, or terms as long as
  segments) the names are the same.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from aeron_archive_spark.archive.constants import RECORDING_SEGMENT_SUFFIX, RecordingState
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import (
    CATALOG_HEADER_LENGTH,
    CATALOG_MAJOR_VERSION,
    DEFAULT_ALIGNMENT,
    DESCRIPTOR_HEADER_LENGTH,
    Catalog,
    CatalogEntry,
    catalog_path,
    compose_semantic_version,
    semantic_version_major,
)
from aeron_archive_spark.archive.storage.frames import align
from aeron_archive_spark.archive.storage.segments import fsync_directory

log = logging.getLogger(__name__)

VERSION_1 = compose_semantic_version(1, 0, 0)
VERSION_2 = compose_semantic_version(2, 0, 0)
VERSION_3 = compose_semantic_version(3, 0, 0)
STEP_VERSIONS = (VERSION_1, VERSION_2, VERSION_3)  # each step's target (Java's `minimumVersion`), in order
UPDATED_SUFFIX = ".updated"

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_CATALOG_HEADER = struct.Struct("<iiqi")
_FIXED_BODY = 7 * 8 + 6 * 4  # the descriptor's fixed fields before its three var fields
# Given an entry and its files as (number in the name, name), the renames (old, new) in order, or why none.
type _NewNames = Callable[[CatalogEntry, list[tuple[int, str]]], list[tuple[str, str]] | str]
_NUMBER = re.compile(r"^-?[0-9]+$")


def full_version_string(version: int) -> str:
    """A version as Java's migration prints it: `65536(Major 1 Minor 0 Patch 0)`."""
    return f"{version}(Major {(version >> 16) & 0xFF} Minor {(version >> 8) & 0xFF} Patch {version & 0xFF})"


def migration_timestamp_file_name(from_version: int, to_version: int) -> str:
    return f"migration-{from_version}-to-{to_version}.dat"


def plan_migration(version: int) -> list[int]:
    """The target versions of the steps a catalog at `version` needs, in order (`ArchiveMigrationPlanner`)."""
    for index, target in enumerate(STEP_VERSIONS):
        if target > version:
            return list(STEP_VERSIONS[index:])
    return []


@dataclass(frozen=True, slots=True)
class Rename:
    recording_id: int
    old_name: str
    new_name: str


@dataclass(slots=True)
class MigrationStep:
    """One step done: its versions, the files it renamed, and the recordings it left alone (and why)."""

    from_version: int
    to_version: int
    renames: list[Rename] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    catalog_rewritten: bool = False


@dataclass(slots=True)
class Migration:
    catalog_version: int  # before the migration
    steps: list[MigrationStep] = field(default_factory=list)

    @property
    def latest_version(self) -> int:
        return self.steps[-1].to_version if self.steps else self.catalog_version


def catalog_version(archive_dir: str | os.PathLike[str]) -> int:
    with Catalog(archive_dir, writable=False) as catalog:
        return catalog.version


def migrate_archive(archive_dir: str | os.PathLike[str]) -> Migration:
    """Run every step the catalog's version calls for; a catalog at the current major version is left alone.

    A step that fails (a malformed segment file name, a rename target that exists, a timestamp file left by an
    earlier attempt) raises `ArchiveError` naming the file; the steps done before it stay done, and the catalog's
    version says where to go on from, as with Java.
    """
    directory = os.fspath(archive_dir)
    version = catalog_version(directory)
    if semantic_version_major(version) > CATALOG_MAJOR_VERSION:
        raise ArchiveError(f"catalog version {version} is newer than this software's: {catalog_path(directory)}")
    migration = Migration(version)
    for target in plan_migration(version):
        step = MigrationStep(version, target)
        _create_timestamp_file(directory, version, target)
        if target == VERSION_1:
            _rename_segments(directory, step, _version_0_name)
            _stamp_legacy_version(directory, target)
        elif target == VERSION_2:
            _rename_segments(directory, step, _version_1_name)
            _stamp_legacy_version(directory, target)
        else:
            _rewrite_catalog(directory, target)
            step.catalog_rewritten = True
        fsync_directory(directory)
        log.info("migrated %s from %s to %s", directory, full_version_string(version), full_version_string(target))
        migration.steps.append(step)
        version = target
    return migration


def _create_timestamp_file(directory: str, from_version: int, to_version: int) -> None:
    path = os.path.join(directory, migration_timestamp_file_name(from_version, to_version))
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    except FileExistsError:
        raise ArchiveError(
            f"could not create migration timestamp file {path}: it exists (an earlier migration to "
            f"{full_version_string(to_version)} started here; check the directory and remove it to go on)"
        ) from None
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename_segments(directory: str, step: MigrationStep, new_name: _NewNames) -> None:
    """Rename the `.rec` files of every catalogued recording that is not INVALID (Java skips those), highest
    number first so that no new name can be taken by a file not yet renamed."""
    with Catalog(directory, writable=False) as catalog:
        entries = list(catalog.entries())
    names = os.listdir(directory)
    for entry in entries:
        recording_id = entry.descriptor.recording_id
        if entry.state == RecordingState.INVALID:
            step.skipped.append((recording_id, "INVALID"))
            continue
        prefix = f"{recording_id}-"
        numbered: list[tuple[int, str]] = []
        for name in names:
            if name.startswith(prefix) and name.endswith(RECORDING_SEGMENT_SUFFIX):
                text = name[len(prefix) : -len(RECORDING_SEGMENT_SUFFIX)]
                if not _NUMBER.match(text):
                    raise ArchiveError(f"(recordingId={recording_id}) malformed recording file name: {name}")
                numbered.append((int(text), name))
        plan = new_name(entry, numbered)
        if isinstance(plan, str):
            step.skipped.append((recording_id, plan))
            continue
        for old, new in plan:
            if old == new:
                continue
            source, target = os.path.join(directory, old), os.path.join(directory, new)
            if os.path.exists(target):
                raise ArchiveError(f"(recordingId={recording_id}) could not rename {source} -> {target}: it exists")
            os.rename(source, target)
            step.renames.append(Rename(recording_id, old, new))
            log.debug("recording %d: %s -> %s", recording_id, old, new)


def _start_term_base(entry: CatalogEntry) -> int:
    d = entry.descriptor
    return d.start_position - (d.start_position & (d.term_buffer_length - 1))


def _version_0_name(entry: CatalogEntry, numbered: list[tuple[int, str]]) -> list[tuple[str, str]] | str:
    """Index names to version 1 names: relative to the start's term base, absolute where terms are as long as
    segments (the convention Java's 1 -> 2 step completes)."""
    d = entry.descriptor
    base = _start_term_base(entry) if d.term_buffer_length == d.segment_file_length else 0
    return [
        (old, f"{d.recording_id}-{base + index * d.segment_file_length}{RECORDING_SEGMENT_SUFFIX}")
        for index, old in sorted(numbered, reverse=True)
    ]


def _version_1_name(entry: CatalogEntry, numbered: list[tuple[int, str]]) -> list[tuple[str, str]] | str:
    """Relative names to absolute ones: the start's term base added (`ArchiveMigration_1_2`)."""
    d = entry.descriptor
    base = _start_term_base(entry)
    if base == 0 or d.term_buffer_length == d.segment_file_length:
        return "names are already positions"
    return [
        (old, f"{d.recording_id}-{base + relative}{RECORDING_SEGMENT_SUFFIX}")
        for relative, old in sorted(numbered, reverse=True)
    ]


def _stamp_legacy_version(directory: str, version: int) -> None:
    """Write the version into the header of a catalog still in the fixed-entry layout (its first int)."""
    fd = os.open(catalog_path(directory), os.O_RDWR)
    try:
        os.pwrite(fd, _I32.pack(version), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _rewrite_catalog(directory: str, version: int) -> None:
    """The fixed 1 KiB entries rewritten to the aligned layout (`ArchiveMigration_2_3.migrateCatalogFile`): a new
    header (version, length 32, nextRecordingId, alignment 64), then each entry, whatever its state, with its
    header copied, its length set to its aligned frame less the header, and its body copied as far as that frame
    reaches. The new file is trimmed to what it holds and renamed over the catalog."""
    path = catalog_path(directory)
    with Catalog(directory, writable=False) as catalog:
        entries = list(catalog.entries())
        next_recording_id = catalog.next_recording_id
    with open(path, "rb") as source:
        old = source.read()
    out = bytearray(
        _CATALOG_HEADER.pack(version, CATALOG_HEADER_LENGTH, next_recording_id, DEFAULT_ALIGNMENT)
        + bytes(CATALOG_HEADER_LENGTH - _CATALOG_HEADER.size)
    )
    for entry in entries:
        body = entry.offset + DESCRIPTOR_HEADER_LENGTH
        cursor = body + _FIXED_BODY
        for _ in range(3):  # stripped channel, original channel, source identity
            (length,) = _U32.unpack_from(old, cursor)
            cursor += 4 + length
        frame = align(cursor - entry.offset, DEFAULT_ALIGNMENT)
        start = len(out)
        out += old[entry.offset : entry.offset + frame].ljust(frame, b"\0")
        _I32.pack_into(out, start, frame - DESCRIPTOR_HEADER_LENGTH)
    updated = path + UPDATED_SUFFIX
    with open(updated, "wb") as target:
        target.write(out)
        target.flush()
        os.fsync(target.fileno())
    os.replace(updated, path)
