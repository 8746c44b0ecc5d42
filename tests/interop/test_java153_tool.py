"""ArchiveTool parity (issue 34): our `aeron-archive` verbs against Java 1.53's `io.aeron.archive.ArchiveTool` on the
same directories. Byte-for-byte where both change files (mark-invalid, checksum, compact, migrate's catalog), the
same verdicts from verify on damaged directories, and Java's tool reading what ours wrote. Skipped without
JAVA_AERON_HOME (see java153env.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from interop.java153env import Java153Env, JavaArchive
from interop.javaenv import JavaEnv
from conftest import free_udp_port
from tests.unit.test_maintenance import three_recordings


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aeron_archive_spark.archive.cli.main", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def java_tool(env: Java153Env, directory: Path, *args: str, answer: str = "") -> subprocess.CompletedProcess[str]:
    """ArchiveTool with `answer` on stdin (its confirmation questions read a line)."""
    return subprocess.run([env.java, *env.jvm_options, "-cp", env.classpath_aeron, "io.aeron.archive.ArchiveTool",
                           str(directory), *args], capture_output=True, text=True, timeout=60, input=answer)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def ours(tmp_path: Path) -> Path:
    return three_recordings(tmp_path / "ours")


def twin(directory: Path) -> Path:
    copy = directory.parent / f"{directory.name}-java"
    shutil.copytree(directory, copy)
    return copy


def test_mark_checksum_and_compact_change_the_same_bytes_as_java(env: Java153Env, ours: Path) -> None:
    theirs = twin(ours)
    assert cli("mark-invalid", "--dir", str(ours), "1").returncode == 0
    assert "(recordingId=1) changed state to INVALID" in java_tool(env, theirs, "mark-invalid", "1").stdout
    assert files(ours) == files(theirs)

    assert cli("checksum", "--dir", str(ours), "CRC-32C", "-a").returncode == 0
    java_tool(env, theirs, "checksum", "io.aeron.archive.checksum.Crc32c", "-a")
    assert files(ours) == files(theirs)  # every frame's session id and every descriptor checksum

    ours_compact = cli("compact", "--dir", str(ours), "--yes")
    java_compact = java_tool(env, theirs, "compact", answer="y\n")
    assert "Compaction result: deleted 1 records and reclaimed 192 bytes" in ours_compact.stdout
    assert "Compaction result: deleted 1 records and reclaimed 192 bytes" in java_compact.stdout
    assert files(ours) == files(theirs) and "1-0.rec" not in files(ours)

    assert java_tool(env, ours, "count-entries").stdout.strip() == cli("count-entries", "--dir", str(ours)).stdout.strip()
    verify = java_tool(env, ours, "verify", "-a", "-checksum", "io.aeron.archive.checksum.Crc32c")
    assert verify.returncode == 0 and verify.stdout.split() == ["(recordingId=0)", "OK", "(recordingId=2)", "OK"]


def test_capacity_grown_by_ours_is_read_by_java(env: Java153Env, ours: Path) -> None:
    assert cli("capacity", "--dir", str(ours), "1m").returncode == 0
    assert java_tool(env, ours, "count-entries").stdout.strip() == "3"
    assert os.path.getsize(ours / "archive.catalog") == 1 << 20


def test_delete_orphaned_segments_deletes_what_java_deletes(env: Java153Env, ours: Path) -> None:
    for name in ("0-393216.rec", "0-abc.rec", "1-131072.rec", "9-0.rec"):
        (ours / name).write_bytes(b"x")
    theirs = twin(ours)
    assert cli("delete-orphaned-segments", "--dir", str(ours), "--yes").returncode == 0
    java_tool(env, theirs, "delete-orphaned-segments", answer="y\n")
    assert sorted(files(ours)) == sorted(files(theirs))
    assert "9-0.rec" in files(ours) and "0-abc.rec" not in files(ours)


def test_writing_verbs_refuse_while_java_archive_runs_and_describe_all_prints_its_lines(
        env: Java153Env, java: JavaArchive, ours: Path) -> None:
    refused = cli("mark-invalid", "--dir", str(java.archive_dir), "0")
    assert refused.returncode == 2 and "has the catalog mapped for writing" in refused.stderr
    assert "java" in refused.stderr.lower()
    java.stop()
    shutil.copy(java.archive_dir / "archive-mark.dat", ours / "archive-mark.dat")
    assert cli("mark-invalid", "--dir", str(ours), "1").returncode == 0
    java_lines = java_tool(env, ours, "describe-all").stdout.splitlines()
    our_lines = cli("describe-all", "--dir", str(ours)).stdout.splitlines()
    # the second line starts with the time now (HH:MM:SS), which may tick between the two runs
    assert java_lines[0] == our_lines[0] == f"INFO: mark file exists: {ours / 'archive-mark.dat'}"
    assert java_lines[1].split(" ", 1)[1] == our_lines[1].split(" ", 1)[1]
    assert java_lines[2:] == our_lines[2:] and len(our_lines) == 7


def damage(directory: Path, kind: str) -> None:
    if kind == "torn tail":
        os.truncate(directory / "0-262144.rec", 300_000 - 262_144)
    elif kind in ("missing last segment", "missing middle segment"):
        os.remove(directory / ("0-262144.rec" if kind == "missing last segment" else "0-131072.rec"))
    else:
        with open(directory / "0-131072.rec", "r+b") as f:
            f.seek(5000)
            f.write(b"XX")


@pytest.mark.parametrize("kind, java_flags, java_ok", [
    ("torn tail", [], False),
    ("missing last segment", [], False),
    ("bad checksum", ["-a", "-checksum", "io.aeron.archive.checksum.Crc32c"], False),
    ("missing middle segment", ["-a"], True),  # Java checks only the files there are: a documented difference
])
def test_verify_verdicts_on_damaged_directories(env: Java153Env, ours: Path, kind: str, java_flags: list[str],
                                                java_ok: bool) -> None:
    if kind == "bad checksum":
        assert cli("checksum", "--dir", str(ours), "CRC-32C", "-a").returncode == 0
    damage(ours, kind)
    theirs = twin(ours)
    catalog_before = (ours / "archive.catalog").read_bytes()
    mine = cli("verify", "--dir", str(ours), *(["--checksum", "CRC-32C"] if kind == "bad checksum" else []))
    java_result = java_tool(env, theirs, "verify", *java_flags)
    assert mine.returncode == 1 and "(recordingId=0) ERR" in mine.stdout
    assert "(recordingId=1) OK" in mine.stdout and "(recordingId=1) OK" in java_result.stdout
    assert (java_result.returncode == 0) is java_ok, java_result.stdout
    assert ("(recordingId=0) OK" in java_result.stdout) is java_ok
    if not java_ok:  # Java marks the entry INVALID; ours reports and leaves the catalog alone (--fix cuts)
        described = cli("describe-all", "--dir", str(theirs)).stdout.splitlines()
        assert described[1].endswith("|INVALID") and described[2].endswith("|VALID")
        assert (ours / "archive.catalog").read_bytes() == catalog_before


def test_migrate_of_an_aeron_1_15_directory_against_java(env: Java153Env, java_env: JavaEnv, tmp_path: Path) -> None:
    """Ours and Java's migration write the same catalog; Java's renames misname the files of a recording that
    starts past its first segment (its own verify rejects them), ours give position names verify accepts."""
    base = tmp_path / "j115"
    java_env.run("JavaArchiveWriter", base / "aeron", base / "archive", free_udp_port(), free_udp_port(),
                 free_udp_port(), timeout=60)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(base / "archive", ours)
    shutil.copytree(base / "archive", theirs)
    refused = java_tool(env, theirs, "migrate", answer="y\n")
    assert "mark file is created but not initialised" in refused.stdout  # 1.15's mark file: version 0
    with open(theirs / "archive-mark.dat", "r+b") as f:  # let Java plan every step, as ours plans from the catalog
        f.write(b"\x01")
    java_tool(env, theirs, "migrate", answer="y\n")
    assert cli("migrate", "--dir", str(ours), "--yes").returncode == 0
    assert files(ours)["archive.catalog"] == files(theirs)["archive.catalog"]
    assert sorted(n for n in files(ours) if n.startswith("migration-")) == \
        sorted(n for n in files(theirs) if n.startswith("migration-"))
    assert sorted(n for n in files(ours) if n.startswith("1-")) == ["1-196608.rec", "1-327680.rec", "1-458752.rec"]
    assert sorted(n for n in files(theirs) if n.startswith("1-")) == ["1-327680.rec", "1-458752.rec", "1-589824.rec"]
    assert java_tool(env, ours, "verify", "-a").returncode == 0
    assert java_tool(env, theirs, "verify", "-a").returncode != 0
