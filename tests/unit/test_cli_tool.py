"""`aeron-archive` ArchiveTool verbs (archive.cli.tool) end to end through `main`, on good and damaged directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.constants import RecordingState
from aeron_archive_spark.archive.storage.catalog import Catalog
from tests.unit.storage_helpers import SEGMENT_LENGTH, make_descriptor, write_legacy_catalog
from tests.unit.test_cli_offline import snapshot
from tests.unit.test_maintenance import three_recordings


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return three_recordings(tmp_path / "archive")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as ex:  # argparse
        code = 2 if not isinstance(ex.code, int) else ex.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_capacity_count_entries_and_describe_all(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(archive)
    assert run(capsys, "capacity", "--dir", d)[:2] == (0, "Catalog capacity in bytes: 4096\n")
    assert run(capsys, "capacity", "--dir", d, "2m")[:2] == (0, "Catalog capacity in bytes: 2097152 (was 4096)\n")
    code, out, _ = run(capsys, "capacity", "--dir", d, "1m", "--json")
    assert code == 0 and json.loads(out) == {"capacity": 2097152, "previousCapacity": 2097152}
    assert run(capsys, "count-entries", "--dir", d)[:2] == (0, "3\n")
    run(capsys, "mark-invalid", "--dir", d, "1")
    assert json.loads(run(capsys, "count-entries", "--dir", d, "--json")[1]) == {"entries": 2}

    code, out, _ = run(capsys, "describe-all", "--dir", d)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "Catalog capacity in bytes: 2097152" and len(lines) == 4
    assert lines[2].startswith("[RecordingDescriptor](sbeTemplateId=22|sbeSchemaId=101|sbeSchemaVersion=14|"
                               "sbeBlockLength=80):controlSessionId=0|correlationId=0|recordingId=1|")
    assert lines[2].endswith("|strippedChannel='aeron:ipc'|originalChannel='aeron:ipc'|sourceIdentity='aeron:ipc'"
                             "|INVALID")
    entries = json.loads(run(capsys, "describe-all", "--dir", d, "--json")[1])["entries"]
    assert [(e["recordingId"], e["state"]) for e in entries] == [(0, "VALID"), (1, "INVALID"), (2, "VALID")]


def test_bad_input_is_named(archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(archive)
    code, _, err = run(capsys, "count-entries", "--dir", str(tmp_path / "nope"))
    assert code == 2 and "archive directory not found" in err and "nope" in err
    code, _, err = run(capsys, "compact", "--dir", str(tmp_path), "--yes")
    assert code == 2 and f"no archive.catalog in archive directory {tmp_path}" in err
    code, _, err = run(capsys, "mark-valid", "--dir", d, "12")
    assert code == 2 and "no recording found with recordingId: 12" in err
    code, _, err = run(capsys, "mark-valid", "--dir", d, "-3")
    assert code == 2 and "not a recording id: '-3'" in err
    code, _, err = run(capsys, "capacity", "--dir", d, "lots")
    assert code == 2 and "BYTES" in err and "lots" in err
    code, _, err = run(capsys, "checksum", "--dir", d, "MD5")
    assert code == 2 and "unsupported checksum 'MD5'" in err
    assert os.listdir(tmp_path / "archive") and not (tmp_path / "nope").exists()


def test_mark_valid_after_mark_invalid_and_deleted_is_refused(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(archive)
    assert run(capsys, "mark-invalid", "--dir", d, "2")[:2] == (0, "(recordingId=2) changed state to INVALID\n")
    assert run(capsys, "mark-invalid", "--dir", d, "2")[:2] == (0, "(recordingId=2) is already INVALID\n")
    assert run(capsys, "mark-valid", "--dir", d, "2")[:2] == (0, "(recordingId=2) changed state to VALID\n")
    with Catalog(archive) as catalog:
        catalog.change_state(2, RecordingState.DELETED)
    code, _, err = run(capsys, "mark-valid", "--dir", d, "2")
    assert code == 2 and "(recordingId=2) state transition DELETED -> VALID is not allowed" in err


def test_compact_asks_lists_with_dry_run_and_deletes_with_yes(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(archive)
    run(capsys, "mark-invalid", "--dir", d, "1")
    before = snapshot(archive)
    code, _, err = run(capsys, "compact", "--dir", d)  # no terminal under pytest: refuses, changes nothing
    assert code == 2 and "pass --yes" in err and "1 non-VALID recording(s)" in err
    code, out, _ = run(capsys, "compact", "--dir", d, "--dry-run")
    assert code == 0 and out.startswith("Compaction result: would delete 1 records and reclaimed 192 bytes")
    assert snapshot(archive) == before
    code, out, _ = run(capsys, "compact", "--dir", d, "--yes", "--json")
    assert code == 0 and json.loads(out) == {"deletedRecords": [{"recordingId": 1, "state": "INVALID"}],
                                             "reclaimedBytes": 192, "deletedFiles": ["1-0.rec"], "dryRun": False}
    assert not (archive / "1-0.rec").exists()
    assert run(capsys, "count-entries", "--dir", d)[1] == "2\n"
    assert run(capsys, "verify", "--dir", d)[0] == 0
    code, out, _ = run(capsys, "compact", "--dir", d)  # nothing to drop: no question
    assert code == 0 and out.startswith("Compaction result: deleted 0 records and reclaimed 0 bytes")


def test_compact_answers_the_terminal(archive: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run(capsys, "mark-invalid", "--dir", str(archive), "0")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, out, _ = run(capsys, "compact", "--dir", str(archive))
    assert code == 1 and "not confirmed, nothing changed" in out and (archive / "0-0.rec").exists()
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert run(capsys, "compact", "--dir", str(archive))[0] == 0 and not (archive / "0-0.rec").exists()


def test_delete_orphaned_segments(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(archive)
    for name in ("0-393216.rec", "1-131072.rec", "9-0.rec"):
        (archive / name).write_bytes(b"x")
    code, out, _ = run(capsys, "delete-orphaned-segments", "--dir", d, "--dry-run")
    assert code == 0 and out.splitlines() == [
        "(recordingId=0) would delete 0-393216.rec: after the stop's segment 262144",
        "(recordingId=1) would delete 1-131072.rec: after the stop's segment 0",
        "2 orphaned segment file(s) found (dry run)"]
    code, out, _ = run(capsys, "delete-orphaned-segments", "--dir", d, "1", "--yes", "--json")
    assert code == 0 and [o["name"] for o in json.loads(out)["orphanedSegments"]] == ["1-131072.rec"]
    assert (archive / "0-393216.rec").exists() and not (archive / "1-131072.rec").exists()
    code, _, err = run(capsys, "delete-orphaned-segments", "--dir", d, "9", "--yes")
    assert code == 2 and "no recording found with recordingId: 9" in err
    assert run(capsys, "delete-orphaned-segments", "--dir", d, "--yes")[0] == 0
    assert (archive / "9-0.rec").exists() and not (archive / "0-393216.rec").exists()


def test_checksum_then_verify_with_checksums(archive: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(archive)
    code, out, _ = run(capsys, "checksum", "--dir", d, "CRC-32C", "-a")
    assert code == 0 and out.splitlines()[0].startswith("(recordingId=0) ") and "in 3 file(s) (CRC-32C)" in out
    assert run(capsys, "verify", "--dir", d, "--checksum", "CRC-32C")[0] == 0
    code, out, _ = run(capsys, "checksum", "--dir", d, "io.aeron.archive.checksum.Crc32", "1", "--json")
    assert code == 0 and [s["recordingId"] for s in json.loads(out)] == [1]
    os.truncate(archive / "2-0.rec", 1000)  # a torn tail: reported, the exit code says so
    code, out, _ = run(capsys, "checksum", "--dir", d, "CRC-32")
    assert code == 1 and "(recordingId=2, file=" in out and "is cut by the end of the file" in out


def test_migrate_a_legacy_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_legacy_catalog(tmp_path, [make_descriptor(0, start_position=0, stop_position=2 * SEGMENT_LENGTH)],
                         version=0)
    for index in range(3):
        (tmp_path / f"0-{index}.rec").write_bytes(b"")
    code, _, err = run(capsys, "migrate", "--dir", str(tmp_path))
    assert code == 2 and "please ensure archive is not running" in err and "pass --yes" in err
    code, out, _ = run(capsys, "migrate", "--dir", str(tmp_path), "--yes")
    assert code == 0
    assert out.splitlines()[:3] == ["Catalog version=0(Major 0 Minor 0 Patch 0)",
                                    "Latest version=196864(Major 3 Minor 1 Patch 0)",
                                    "Migration step to 65536(Major 1 Minor 0 Patch 0)"]
    assert f"(recordingId=0) renaming 0-2.rec -> 0-{2 * SEGMENT_LENGTH}.rec" in out
    assert sorted(p.name for p in tmp_path.glob("*.rec")) == ["0-0.rec", f"0-{SEGMENT_LENGTH}.rec",
                                                             f"0-{2 * SEGMENT_LENGTH}.rec"]
    code, out, _ = run(capsys, "migrate", "--dir", str(tmp_path), "--json")  # nothing left: no question
    assert code == 0 and json.loads(out) == {"catalogVersion": 196608, "steps": []}


def test_writing_verbs_refuse_while_an_archive_maps_the_catalog(archive: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom aeron_archive_spark.archive.storage.catalog import Catalog\n"
         "c = Catalog(sys.argv[1], capacity=32, recover=False)\nprint('open', flush=True)\ntime.sleep(60)\n",
         str(archive)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        before = snapshot(archive)
        for verb in (["mark-invalid", "0"], ["compact", "--yes"], ["capacity", "1m"], ["checksum", "CRC-32"],
                     ["delete-orphaned-segments", "--yes"], ["migrate", "--yes"]):
            code, _, err = run(capsys, verb[0], "--dir", str(archive), *verb[1:])
            assert code == 2 and f"pid {holder.pid} has the catalog mapped for writing" in err, verb
            assert f"stop the archive before `{verb[0]}`" in err
        assert snapshot(archive) == before
        assert run(capsys, "count-entries", "--dir", str(archive))[:2] == (0, "3\n")  # reading is fine
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and run(capsys, "mark-invalid", "--dir", str(archive), "0")[0] != 0:
        time.sleep(0.05)
    assert run(capsys, "count-entries", "--dir", str(archive))[1] == "2\n"


def test_writing_verbs_refuse_while_the_mark_file_shows_an_archive(archive: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An archive the /proc check cannot see (on another host sharing the directory, in another container) still
    shows in its mark file's activity: refused while it is fresh, allowed once stale or closed."""
    from aeron_archive_spark.archive.storage.mark_file import ArchiveMarkFile

    now = [int(time.time() * 1000)]
    mark = ArchiveMarkFile.acquire(str(archive), archive_dir=str(archive), epoch_clock=lambda: now[0])
    try:
        mark.encode(control_stream_id=10, local_control_stream_id=10, events_stream_id=30, archive_id=3,
                    error_buffer_length=mark.header().error_buffer_length, control_channel=None,
                    local_control_channel="aeron:ipc", events_channel=None, aeron_directory="/elsewhere")
        mark.signal_ready(now[0])
        before = snapshot(archive)
        code, _, err = run(capsys, "mark-invalid", "--dir", str(archive), "0")
        assert code == 2 and "its mark file shows an archive: last activity" in err
        assert snapshot(archive) == before
        mark.update_activity_timestamp(now[0] - 60_000)  # its holder stopped updating it a minute ago
        assert run(capsys, "mark-invalid", "--dir", str(archive), "0")[0] == 0
    finally:
        mark.close()
