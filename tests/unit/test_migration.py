"""archive.storage.migration: Aeron's catalog migrations 0 -> 1 -> 2 -> 3 on synthetic legacy directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aeron_archive_spark.archive.constants import RecordingState
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage import migration
from aeron_archive_spark.archive.storage.catalog import Catalog, compose_semantic_version
from aeron_archive_spark.archive.storage.verify import verify_archive
from tests.unit.storage_helpers import SEGMENT_LENGTH, TERM_LENGTH, StreamBuilder, make_descriptor, write_legacy_catalog
from tests.unit.test_verify import record


def legacy_copy(source: Path, target: Path, version: int, names: dict[str, str]) -> None:
    """`source`'s recordings as an older Aeron left them: a fixed-entry catalog at `version`, files renamed."""
    target.mkdir()
    with Catalog(source, writable=False) as catalog:
        descriptors = list(catalog.descriptors())
    write_legacy_catalog(target, descriptors, version=version)
    for old, new in names.items():
        os.link(source / old, target / new)


def test_plan_follows_the_planner() -> None:
    assert migration.plan_migration(0) == [migration.VERSION_1, migration.VERSION_2, migration.VERSION_3]
    assert migration.plan_migration(compose_semantic_version(1, 2, 0)) == [migration.VERSION_2, migration.VERSION_3]
    assert migration.plan_migration(migration.VERSION_3) == []
    assert migration.plan_migration(compose_semantic_version(3, 1, 0)) == []
    assert migration.full_version_string(65536) == "65536(Major 1 Minor 0 Patch 0)"


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """Recordings as this archive names them: 0 from 0 over three segments, 1 from past its first segment (the
    case Java's steps misname), 2 from mid-term in the first segment."""
    directory = tmp_path / "written"
    directory.mkdir()
    record(directory, StreamBuilder(0).fill_to(300_000, payload_length=100))
    record(directory, StreamBuilder(3 * TERM_LENGTH + 1024).fill_to(3 * TERM_LENGTH + 300_000, payload_length=900))
    record(directory, StreamBuilder(TERM_LENGTH + 64).fill_to(TERM_LENGTH + 5000, payload_length=300))
    return directory


def test_version_0_index_names_become_position_names_and_the_catalog_aligned(written: Path, tmp_path: Path) -> None:
    base1 = 3 * TERM_LENGTH
    names = {"0-0.rec": "0-0.rec", f"0-{SEGMENT_LENGTH}.rec": "0-1.rec", f"0-{2 * SEGMENT_LENGTH}.rec": "0-2.rec",
             f"1-{base1}.rec": "1-0.rec", f"1-{base1 + SEGMENT_LENGTH}.rec": "1-1.rec",
             f"1-{base1 + 2 * SEGMENT_LENGTH}.rec": "1-2.rec", f"2-{TERM_LENGTH}.rec": "2-0.rec"}
    legacy = tmp_path / "legacy"
    legacy_copy(written, legacy, 0, names)

    result = migration.migrate_archive(legacy)
    assert result.catalog_version == 0 and result.latest_version == migration.VERSION_3
    assert [(s.from_version, s.to_version) for s in result.steps] == [
        (0, migration.VERSION_1), (migration.VERSION_1, migration.VERSION_2),
        (migration.VERSION_2, migration.VERSION_3)]
    assert result.steps[-1].catalog_rewritten
    assert sorted(os.listdir(legacy)) == sorted([*names, "archive.catalog", "migration-0-to-65536.dat",
                                                 "migration-65536-to-131072.dat", "migration-131072-to-196608.dat"])
    for new, old in names.items():  # contents untouched
        assert (legacy / new).read_bytes() == (written / new).read_bytes(), old
    with Catalog(legacy, writable=False) as catalog, Catalog(written, writable=False) as original:
        assert not catalog.is_legacy and catalog.version == migration.VERSION_3 and catalog.alignment == 64
        assert list(catalog.descriptors()) == list(original.descriptors())
        assert catalog.next_recording_id == 3
    assert all(r.ok for r in verify_archive(legacy))
    with Catalog(legacy, capacity=4096) as catalog:  # writable again
        assert catalog.add_new_recording(0, 1, 0, SEGMENT_LENGTH, TERM_LENGTH, 1408, 1, 2, "a", "b", "c") == 3
    assert migration.migrate_archive(legacy).steps == []  # done: nothing more


def test_version_1_relative_names_get_the_term_base_as_java_step_1_2(written: Path, tmp_path: Path) -> None:
    base1 = 3 * TERM_LENGTH
    names = {"0-0.rec": "0-0.rec", f"0-{SEGMENT_LENGTH}.rec": f"0-{SEGMENT_LENGTH}.rec",
             f"1-{base1}.rec": "1-0.rec", f"1-{base1 + SEGMENT_LENGTH}.rec": f"1-{SEGMENT_LENGTH}.rec",
             f"2-{TERM_LENGTH}.rec": "2-0.rec"}
    names |= {f"0-{2 * SEGMENT_LENGTH}.rec": f"0-{2 * SEGMENT_LENGTH}.rec",
              f"1-{base1 + 2 * SEGMENT_LENGTH}.rec": f"1-{2 * SEGMENT_LENGTH}.rec"}
    legacy = tmp_path / "legacy"
    legacy_copy(written, legacy, migration.VERSION_1, names)
    result = migration.migrate_archive(legacy)
    assert [s.to_version for s in result.steps] == [migration.VERSION_2, migration.VERSION_3]
    assert result.steps[0].skipped == [(0, "names are already positions")]
    assert sorted(os.listdir(legacy)) == sorted([*names, "archive.catalog", "migration-65536-to-131072.dat",
                                                 "migration-131072-to-196608.dat"])
    assert all(r.ok for r in verify_archive(legacy))


def test_version_2_only_rewrites_the_catalog_and_keeps_states(written: Path, tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    with Catalog(written, writable=False) as catalog:
        descriptors = list(catalog.descriptors())
    write_legacy_catalog(legacy, descriptors, version=migration.VERSION_2,
                         states=[RecordingState.VALID, RecordingState.INVALID, RecordingState.VALID])
    result = migration.migrate_archive(legacy)
    assert [s.to_version for s in result.steps] == [migration.VERSION_3] and not result.steps[0].renames
    with Catalog(legacy, writable=False) as catalog:
        assert [(e.descriptor.recording_id, e.state) for e in catalog.entries()] == [
            (0, RecordingState.VALID), (1, RecordingState.INVALID), (2, RecordingState.VALID)]
        assert os.path.getsize(legacy / "archive.catalog") == 32 + sum(e.frame_length for e in catalog.entries())


def test_invalid_entries_keep_their_names_and_a_malformed_name_stops_the_step(tmp_path: Path) -> None:
    write_legacy_catalog(tmp_path, [make_descriptor(0, stop_position=0), make_descriptor(1, stop_position=0)],
                         states=[RecordingState.INVALID, RecordingState.VALID], version=0)
    (tmp_path / "0-1.rec").write_bytes(b"")
    (tmp_path / "1-x.rec").write_bytes(b"")
    with pytest.raises(ArchiveError, match=r"\(recordingId=1\) malformed recording file name: 1-x.rec"):
        migration.migrate_archive(tmp_path)
    os.remove(tmp_path / "1-x.rec")
    with pytest.raises(ArchiveError, match="migration-0-to-65536.dat: it exists"):
        migration.migrate_archive(tmp_path)  # an earlier attempt's mark: the operator looks first, as with Java
    os.remove(tmp_path / "migration-0-to-65536.dat")
    result = migration.migrate_archive(tmp_path)
    assert result.steps[0].skipped == [(0, "INVALID")]
    assert os.path.exists(tmp_path / "0-1.rec")


def test_a_catalog_of_a_newer_major_version_is_refused(tmp_path: Path) -> None:
    write_legacy_catalog(tmp_path, [], version=compose_semantic_version(4, 0, 0))
    with pytest.raises(ArchiveError):
        migration.migrate_archive(tmp_path)
