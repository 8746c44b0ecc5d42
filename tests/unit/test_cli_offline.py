"""Issue 11, defect 5: the offline tools (`list`, `describe`, `verify`, `export`) read an archive directory; none of
them may create or change anything in it unless asked to fix, and a directory that does not exist is an error that
names it (never a new, empty archive)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.verify import verify_archive
from tests.unit.storage_helpers import StreamBuilder
from tests.unit.test_verify import record

Snapshot = dict[str, tuple[int, int, int]]


def snapshot(root: Path) -> Snapshot:
    """Every file and directory under `root` with its size, mtime and mode."""
    found: Snapshot = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            st = os.stat(path)
            found[path] = (st.st_size, st.st_mtime_ns, st.st_mode)
    st = os.stat(root)
    found[str(root)] = (0, st.st_mtime_ns, st.st_mode)
    return found


def run(argv: list[str]) -> tuple[int, str]:
    """Exit code and error text of one command (SystemExit carries its message)."""
    try:
        return main(argv), ""
    except SystemExit as ex:
        return 2 if ex.code is None or isinstance(ex.code, str) else int(ex.code), str(ex.code)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    directory = tmp_path / "archive"
    directory.mkdir()
    record(directory, StreamBuilder(0).fill_to(9000, payload_length=100))
    record(directory, StreamBuilder(4096).fill_to(70_000, payload_length=700))
    return directory


def offline_commands(directory: Path, out: Path) -> list[list[str]]:
    d = str(directory)
    return [
        ["list", "--dir", d],
        ["list", "--json", "--dir", d],
        ["describe", "--dir", d, "0"],
        ["verify", "--dir", d],
        ["verify", "--dir", d, "--checksum", "CRC-32C"],
        ["verify", "--dir", d, "--fix"],  # nothing to fix: nothing may change
        ["export", "0", "--dir", d, "--to", str(out), "--no-progress"],
    ]


def test_offline_commands_leave_an_archive_untouched(archive: Path, tmp_path: Path) -> None:
    for argv in offline_commands(archive, tmp_path / "out.parquet"):
        before = snapshot(archive)
        run(argv)
        assert snapshot(archive) == before, argv


@pytest.mark.parametrize("fix", [False, True], ids=["verify", "verify-fix"])
def test_verify_of_a_missing_directory_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fix: bool
) -> None:
    missing = tmp_path / "no-such-archive"
    code, message = run(["verify", "--dir", str(missing), *(["--fix"] if fix else [])])
    assert code != 0
    assert str(missing) in message + capsys.readouterr().err
    assert not missing.exists()


def test_verify_fix_of_a_directory_without_catalog_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, message = run(["verify", "--dir", str(empty), "--fix"])
    assert code != 0 and str(empty) in message + capsys.readouterr().err
    assert os.listdir(empty) == []
    with pytest.raises(ArchiveError, match=str(empty)):
        verify_archive(empty, fix=True)
    assert os.listdir(empty) == []


def test_every_offline_command_refuses_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "gone"
    for argv in offline_commands(missing, tmp_path / "out.parquet"):
        code, message = run(argv)
        assert code != 0, argv
        assert str(missing) in message + capsys.readouterr().err, argv
        assert not missing.exists(), argv
    assert not (tmp_path / "out.parquet").exists()


def test_verify_reports_a_torn_last_frame_and_fix_cuts_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defect 1 through the command line: a segment file cut inside the last frame of a stopped recording."""
    builder = StreamBuilder(0).fill_to(5000, payload_length=96)
    last = builder.append(1000)
    record(tmp_path, builder)
    os.truncate(tmp_path / "0-0.rec", last.position + 300)
    assert main(["verify", "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "torn_last_frame" in out and f"position={last.position}" in out and "0 ok, 1 with problems" in out
    assert main(["verify", "--dir", str(tmp_path), "--fix"]) == 0
    assert f"fixed: stopPosition={last.position}" in capsys.readouterr().out
    assert main(["list", "--json", "--dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["stopPosition"] == last.position
    assert main(["verify", "--dir", str(tmp_path)]) == 0
