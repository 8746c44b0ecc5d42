"""archive-mark.dat between Java 1.53 and ours (issue 34): Java's ArchiveTool `pid`, `errors` and `describe` on the
directory our archive holds (running, then killed with -9), ours on the directory Java's holds, and each archive
refusing the other's live directory (ours then takes over Java's once it is dead and stale). Skipped without
JAVA_AERON_HOME (see java153env.py)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from conftest import free_udp_port
from interop.java153env import Java153Env, JavaArchive, OurArchive, shm_dir, start_our_archive
from system.harness import wait_for

from aeron_archive_spark.archive.client import AeronArchive
from aeron_archive_spark.archive.storage import mark_file as mf


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aeron_archive_spark.archive.cli.main", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def _provoke_errors(aeron_dir: str, control_channel: str, times: int) -> None:
    """Control messages of a template the archive does not know: one distinct error, observed `times` times."""
    client = AeronArchive.connect(aeron_dir, control_channel, 10, "aeron:udp?endpoint=localhost:0")
    try:
        raw = client.aeron.add_exclusive_publication(control_channel, 10)
        wait_for(lambda: raw.is_connected, 10, "the control stream")
        for _ in range(times):
            while raw.offer(struct.pack("<HHHH", 8, 9999, 101, 14) + bytes(8)) <= 0:
                time.sleep(0.001)
        raw.close()
    finally:
        client.close()


def _java_reads_ours(env: Java153Env, ours: OurArchive) -> None:
    directory = ours.archive_dir
    pid = env.archive_tool(directory, "pid")
    assert pid.returncode == 0 and pid.stdout.strip() == str(ours.proc.pid), pid.stderr  # type: ignore[union-attr]
    errors = env.archive_tool(directory, "errors")
    assert errors.returncode == 0, errors.stderr
    assert errors.stdout.startswith("Archive error log:\n\n3 observations from "), errors.stdout
    assert "9999" in errors.stdout and "1 distinct errors observed." in errors.stdout
    assert f"Aeron driver error log (directory: {ours.aeron_dir}):" in errors.stdout
    describe = env.archive_tool(directory, "describe")
    assert describe.returncode == 0, describe.stderr
    (line,) = [x for x in describe.stdout.splitlines() if x.startswith("[MarkFileHeader]")]
    ours_line = mf.read_mark_file(str(directory)).header.java_string()
    same = lambda text: [f for f in text.split("|") if not f.startswith("activityTimestamp=")]  # noqa: E731
    assert same(line) == same(ours_line)  # every field but the heartbeat, which moves between the two reads
    assert "Catalog capacity in bytes: " in describe.stdout


def test_javas_archive_tool_reads_the_mark_file_of_our_archive_running_and_killed(env: Java153Env, ours: OurArchive,
                                                                                aeron_dir: str) -> None:
    _provoke_errors(aeron_dir, ours.control_channel, 3)
    wait_for(lambda: any(e.observation_count == 3 for e in mf.read_mark_file(str(ours.archive_dir)).errors), 10,
             "the errors in the mark file")
    _java_reads_ours(env, ours)
    assert ours.proc is not None
    os.kill(ours.proc.pid, signal.SIGKILL)
    ours.proc.wait(10)
    _java_reads_ours(env, ours)  # the embedded driver's directory outlives the kill too


def test_ours_reads_the_mark_file_of_javas_archive(java: JavaArchive) -> None:
    assert java.proc is not None
    pid = cli("pid", "--dir", str(java.archive_dir))
    assert pid.returncode == 0 and pid.stdout.strip() == str(java.proc.pid), pid.stderr
    header = json.loads(cli("pid", "--dir", str(java.archive_dir), "--json").stdout)
    assert header["archiveId"] == 7 and header["controlChannel"] == java.control_channel
    assert header["aeronDirectory"] == str(java.aeron_dir) and header["versionText"] == "3.1.0"
    errors = cli("errors", "--dir", str(java.archive_dir), "--json")
    assert errors.returncode == 0, errors.stderr
    out = json.loads(errors.stdout)
    assert out["errors"] == [] and out["driverErrors"] is not None  # Java's driver's log, read from its cnc.dat
    text = cli("errors", "--dir", str(java.archive_dir)).stdout
    assert text.startswith("Archive error log:\n\n0 distinct errors observed\n")


def test_our_serve_refuses_a_live_java_archive_and_takes_its_directory_once_it_is_dead_and_stale(
        java: JavaArchive, tmp_path: Path) -> None:
    assert java.proc is not None
    refused = cli("serve", "--dir", str(java.archive_dir), "--control-channel",
                  f"aeron:udp?endpoint=localhost:{free_udp_port()}")
    assert refused.returncode == 2 and "active mark file detected" in refused.stderr
    assert f"pid {java.proc.pid}" in refused.stderr and str(java.archive_dir) in refused.stderr
    assert java.proc.poll() is None
    os.kill(java.proc.pid, signal.SIGKILL)
    java.proc.wait(10)
    refused = cli("serve", "--dir", str(java.archive_dir), "--control-channel",
                  f"aeron:udp?endpoint=localhost:{free_udp_port()}")
    assert refused.returncode == 2 and "ms ago" in refused.stderr  # fresh, and nothing proves Java's holder gone
    last = mf.read_mark_file(str(java.archive_dir)).header.activity_timestamp
    time.sleep(max(0.0, (last + 1_100) / 1000 - time.time()))
    ours = start_our_archive(tmp_path / "ours-log", java.archive_dir, free_udp_port(), "--mark-file-timeout", "1s")
    try:
        assert ours.proc is not None and mf.read_mark_file(str(java.archive_dir)).header.pid == ours.proc.pid
    finally:
        ours.stop()


def test_javas_archive_refuses_the_directory_our_archive_holds(env: Java153Env, ours: OurArchive) -> None:
    aeron_dir = shm_dir("j153-refused")
    try:
        proc = subprocess.run(
            ["bash", str(env.home / "start-archive.sh"), str(aeron_dir), str(ours.archive_dir),
             f"-Daeron.archive.control.channel=aeron:udp?endpoint=localhost:{free_udp_port()}"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run(["rm", "-rf", str(aeron_dir)], check=False)
    assert proc.returncode != 0
    assert f"IllegalStateException: active mark file detected: {ours.archive_dir}/archive-mark.dat" in proc.stderr
    assert ours.proc is not None and ours.proc.poll() is None
    header = mf.read_mark_file(str(ours.archive_dir)).header
    assert header.pid == ours.proc.pid and header.is_ready  # untouched by Java's refused start
