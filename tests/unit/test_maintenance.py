"""archive.storage.maintenance: the storage side of ArchiveTool's verbs, on real temporary archive directories."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from aeron_archive_spark.archive.constants import RecordingState
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage import maintenance
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.checksums import Crc32, Crc32c
from aeron_archive_spark.archive.storage.verify import verify_archive
from tests.unit.storage_helpers import SEGMENT_LENGTH, StreamBuilder, make_descriptor, write_legacy_catalog
from tests.unit.test_verify import record


def three_recordings(directory: Path) -> Path:
    """A new archive directory with three stopped recordings: 0 spans three segments (to 300064), 1 starts at 4096,
    2 is small. The ArchiveTool verbs' tests (unit, CLI, Java interop) work on it."""
    directory.mkdir()
    record(directory, StreamBuilder(0).fill_to(300_000, payload_length=100))
    record(directory, StreamBuilder(4096).fill_to(70_000, payload_length=700))
    record(directory, StreamBuilder(0).fill_to(5000, payload_length=700))
    return directory


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return three_recordings(tmp_path / "archive")


def states(directory: Path) -> dict[int, int]:
    with Catalog(directory, writable=False) as catalog:
        return {e.descriptor.recording_id: e.state for e in catalog.entries()}


def test_require_archive_names_a_missing_directory_and_a_missing_catalog(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="archive directory not found: .*nope"):
        maintenance.require_archive(tmp_path / "nope")
    with pytest.raises(ArchiveError, match="no archive.catalog in archive directory"):
        maintenance.require_archive(tmp_path)
    assert os.listdir(tmp_path) == []


def test_capacity_reads_the_file_size_and_grows_but_never_shrinks(archive: Path) -> None:
    assert maintenance.catalog_capacity(archive) == 4096 == os.path.getsize(archive / "archive.catalog")
    assert maintenance.grow_catalog(archive, 1 << 20) == 1 << 20 == os.path.getsize(archive / "archive.catalog")
    assert maintenance.grow_catalog(archive, 8192) == 1 << 20  # smaller: no change, as Java
    with pytest.raises(ValueError, match="invalid catalog capacity"):
        maintenance.grow_catalog(archive, 16)
    assert maintenance.count_entries(archive) == 3


def test_a_catalog_grown_ahead_takes_new_entries_without_growing(archive: Path) -> None:
    maintenance.grow_catalog(archive, 64 * 1024)
    with Catalog(archive, capacity=32) as catalog:
        for _ in range(100):
            catalog.add_new_recording(0, 1, 0, SEGMENT_LENGTH, 65536, 1408, 1, 2, "aeron:ipc", "aeron:ipc", "x")
        assert catalog.capacity == 64 * 1024


def test_mark_invalid_then_valid_and_the_transitions_java_refuses(archive: Path) -> None:
    change = maintenance.mark_recording(archive, 1, RecordingState.INVALID)
    assert (change.old_state, change.new_state, change.changed) == (RecordingState.VALID, RecordingState.INVALID, True)
    assert states(archive)[1] == RecordingState.INVALID and maintenance.count_entries(archive) == 2
    assert not maintenance.mark_recording(archive, 1, RecordingState.INVALID).changed  # already: nothing written
    assert maintenance.mark_recording(archive, 1, RecordingState.VALID).changed
    assert maintenance.count_entries(archive) == 3
    with Catalog(archive) as catalog:
        catalog.change_state(2, RecordingState.DELETED)
    with pytest.raises(ArchiveError, match=r"\(recordingId=2\) state transition DELETED -> VALID is not allowed"):
        maintenance.mark_recording(archive, 2, RecordingState.VALID)
    with pytest.raises(ArchiveError, match="no recording found with recordingId: 9"):
        maintenance.mark_recording(archive, 9, RecordingState.INVALID)


def test_compact_drops_non_valid_entries_their_files_and_keeps_the_rest_byte_for_byte(archive: Path) -> None:
    (archive / "1-0.rec.del").write_bytes(b"pending")
    with Catalog(archive) as catalog:
        catalog.change_state(1, RecordingState.INVALID)
        catalog.change_state(2, RecordingState.DELETED)
        kept = next(e for e in catalog.entries() if e.descriptor.recording_id == 0)
        next_id = catalog.next_recording_id
    raw = (archive / "archive.catalog").read_bytes()
    plan = maintenance.plan_compaction(archive)
    assert plan.removed == ((1, RecordingState.INVALID), (2, RecordingState.DELETED))
    assert sorted(plan.files) == ["1-0.rec", "1-0.rec.del", "2-0.rec"]
    assert os.path.exists(archive / "1-0.rec")  # planning changes nothing

    result = maintenance.compact_catalog(archive)
    assert result.reclaimed_bytes == 2 * kept.frame_length
    assert sorted(os.listdir(archive)) == ["0-0.rec", f"0-{SEGMENT_LENGTH}.rec", f"0-{2 * SEGMENT_LENGTH}.rec",
                                           "archive.catalog"]
    new = (archive / "archive.catalog").read_bytes()
    assert len(new) == 32 + kept.frame_length  # trimmed to what it holds
    assert new[:20] == raw[:20]  # version, length, nextRecordingId, alignment
    assert new[32:] == raw[kept.offset : kept.offset + kept.frame_length]
    with Catalog(archive, writable=False) as catalog:
        assert [d.recording_id for d in catalog.descriptors()] == [0]
        assert catalog.next_recording_id == next_id  # ids are never reused
    assert all(r.ok for r in verify_archive(archive))


def test_compact_refuses_a_legacy_catalog(tmp_path: Path) -> None:
    write_legacy_catalog(tmp_path, [make_descriptor(0)], states=[RecordingState.INVALID])
    with pytest.raises(ArchiveError, match="legacy fixed 1 KiB entry layout: run `aeron-archive migrate`"):
        maintenance.compact_catalog(tmp_path)


def test_orphaned_segments_are_outside_start_and_stop_segments_of_any_entry(archive: Path) -> None:
    for name in ("0-393216.rec", "0-abc.rec", "1-131072.rec", "7-0.rec", "1-0.rec.del", "notes.txt"):
        (archive / name).write_bytes(b"")
    with Catalog(archive) as catalog:
        catalog.change_state(1, RecordingState.INVALID)  # every entry counts, whatever its state
    found = maintenance.find_orphaned_segments(archive)
    assert [(o.name, o.recording_id) for o in found] == [("0-393216.rec", 0), ("0-abc.rec", 0), ("1-131072.rec", 1)]
    assert "after the stop's segment 262144" in found[0].reason and "no position" in found[1].reason
    assert [o.name for o in maintenance.find_orphaned_segments(archive, 1)] == ["1-131072.rec"]
    with pytest.raises(ArchiveError, match="no recording found with recordingId: 7"):
        maintenance.find_orphaned_segments(archive, 7)  # files but no entry: not Java's business either

    assert [o.name for o in maintenance.delete_orphaned_segments(archive, 0)] == ["0-393216.rec", "0-abc.rec"]
    assert os.path.exists(archive / "1-131072.rec")
    maintenance.delete_orphaned_segments(archive)
    assert sorted(os.listdir(archive)) == ["0-0.rec", "0-131072.rec", "0-262144.rec", "1-0.rec", "1-0.rec.del",
                                           "2-0.rec", "7-0.rec", "archive.catalog", "notes.txt"]


def test_a_time_index_whose_segment_is_gone_is_an_orphan_too(archive: Path) -> None:
    """Beyond Java: Java's archive and ArchiveTool delete `.rec` files only, and may leave our `.tix` beside none."""
    for name in ("0-0.tix", "0-131072.tix", "0-524288.tix", "1-0.tix", "1-131072.tix", "7-0.tix"):
        (archive / name).write_bytes(b"")
    (archive / "1-0.rec").rename(archive / "1-0.rec.del")  # deletion pending: its index goes with it, not before
    found = maintenance.find_orphaned_segments(archive)
    assert [(o.name, o.reason) for o in found if o.name.endswith(".tix")] == [
        ("0-524288.tix", "a time index without its segment"), ("1-131072.tix", "a time index without its segment")]
    maintenance.delete_orphaned_segments(archive)
    assert sorted(n for n in os.listdir(archive) if n.endswith(".tix")) == ["0-0.tix", "0-131072.tix", "1-0.tix",
                                                                             "7-0.tix"]


def test_a_time_index_copy_s_temporary_file_left_by_a_crash_is_an_orphan(archive: Path) -> None:
    """A destination archive killed while it dated a replica by its source leaves `<name>.tix.tmp` (no reader lists
    it); the next copy would overwrite it, and delete-orphaned-segments removes it, its `.tix` staying."""
    for name in ("0-0.tix", "0-0.tix.tmp", "1-0.tix.tmp", "7-0.tix.tmp"):
        (archive / name).write_bytes(b"x")
    found = maintenance.find_orphaned_segments(archive)
    reason = "a time index copy's temporary file"
    assert [(o.name, o.recording_id, o.reason) for o in found if ".tix" in o.name] == [
        ("0-0.tix.tmp", 0, reason), ("1-0.tix.tmp", 1, reason)]
    maintenance.delete_orphaned_segments(archive)
    assert sorted(n for n in os.listdir(archive) if ".tix" in n) == ["0-0.tix", "7-0.tix.tmp"]  # 7: not catalogued


def test_orphans_of_a_recording_purged_at_its_start_and_of_an_active_one(tmp_path: Path) -> None:
    record(tmp_path, StreamBuilder(0).fill_to(300_000, payload_length=100))
    record(tmp_path, StreamBuilder(0).fill_to(1000, payload_length=100), stop=False)
    with Catalog(tmp_path, recover=False) as catalog:  # recording 1 stays active
        catalog.update_start_position(0, SEGMENT_LENGTH)  # as a purge of the first segment leaves it
    for name in ("1-131072.rec", "1-9999872.rec"):
        (tmp_path / name).write_bytes(b"")
    found = [o.name for o in maintenance.find_orphaned_segments(tmp_path)]
    assert found == ["0-0.rec"]  # an active recording has no stop: nothing after its start is an orphan


def test_checksum_stamps_the_last_file_or_all_and_the_descriptor(archive: Path) -> None:
    crc = Crc32c()
    stamps = maintenance.stamp_checksums(archive, crc)
    assert [(s.recording_id, s.files) for s in stamps] == [(0, ["0-262144.rec"]), (1, ["1-0.rec"]), (2, ["2-0.rec"])]
    assert all(not s.errors for s in stamps)
    results = {r.recording_id: r for r in verify_archive(archive, checksum=crc)}
    assert results[1].ok and results[2].ok and not results[0].ok  # its first two files have no checksums yet
    assert results[0].first_issue_position == 0

    stamps = maintenance.stamp_checksums(archive, crc, recording_id=0, all_files=True)
    assert [len(s.files) for s in stamps] == [3] and stamps[0].frames > 1800
    assert all(r.ok for r in verify_archive(archive, checksum=crc))
    with Catalog(archive, writable=False, checksum=crc) as catalog:
        assert all(catalog.entry_checksum_ok(rid) for rid in (0, 1, 2))
    assert not all(r.ok for r in verify_archive(archive, checksum=Crc32()))


def test_checksum_starts_at_the_start_term_offset_and_reports_a_torn_frame(tmp_path: Path) -> None:
    rid, end = record(tmp_path, StreamBuilder(4096).fill_to(20_000, payload_length=500))
    path = tmp_path / f"{rid}-0.rec"
    garbage = b"\xff" * 64
    with open(path, "r+b") as f:
        f.write(garbage)  # before the start: never read
    os.truncate(path, end - 100)
    [stamp] = maintenance.stamp_checksums(tmp_path, Crc32())
    assert stamp.frames > 10
    assert len(stamp.errors) == 1 and "is cut by the end of the file" in stamp.errors[0]
    assert path.read_bytes()[:64] == garbage


def test_checksum_of_an_unknown_or_invalid_recording_and_of_one_without_files(archive: Path) -> None:
    with pytest.raises(ArchiveError, match="no recording found with recordingId: 5"):
        maintenance.stamp_checksums(archive, Crc32(), recording_id=5)
    maintenance.mark_recording(archive, 2, RecordingState.INVALID)
    with pytest.raises(ArchiveError, match="no recording found with recordingId: 2"):
        maintenance.stamp_checksums(archive, Crc32(), recording_id=2)  # Java's forEntry: VALID ones only
    os.remove(archive / "1-0.rec")
    stamps = {s.recording_id: s for s in maintenance.stamp_checksums(archive, Crc32())}
    assert stamps[1].errors == ["(recordingId=1) ERR: no segment files to checksum"]
    assert stamps[2].files == ["2-0.rec"]  # all entries, whatever their state, as Java


def test_catalog_writers_sees_a_writable_mapping_only(tmp_path: Path, archive: Path) -> None:
    proc = tmp_path / "proc"
    target = os.path.realpath(archive / "archive.catalog")
    for pid, perms in ((101, "rw-s"), (102, "r--s"), (103, "rw-p")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "maps").write_text(f"7f00-7f10 {perms} 00000000 08:01 42 {target}\n")
        (proc / str(pid) / "cmdline").write_bytes(b"java\0-cp\0x\0")
    assert maintenance.catalog_writers(archive, str(proc)) == [maintenance.CatalogWriter(101, "java -cp x")]
    with Catalog(archive, capacity=32):  # this process is never reported
        assert maintenance.catalog_writers(archive) == []


def test_a_corrupt_state_value_is_named(archive: Path) -> None:
    with Catalog(archive, writable=False) as catalog:
        offset = next(iter(catalog.entries())).offset
    with open(archive / "archive.catalog", "r+b") as f:
        f.seek(offset + 4)
        f.write(struct.pack("<i", 7))
    with pytest.raises(ArchiveError, match="unknown recording state 7"):
        maintenance.mark_recording(archive, 0, RecordingState.INVALID)
