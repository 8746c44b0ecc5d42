"""archive-mark.dat with `serve` processes: a second archive on a held directory is refused (naming the directory,
the holder's pid and activity) and the first goes on; an archive killed with -9 is taken over by a restart; a
holder not provably dead is waited out as Java does; errors land in the mark file's log, read by `errors`/`pid`."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time

from conftest import free_udp_port
from system.harness import serve_process, wait_for

from aeron_archive_spark.archive.client import AeronArchive
from aeron_archive_spark.archive.storage import mark_file as mf

CLI = [sys.executable, "-m", "aeron_archive_spark.archive.cli.main"]


def _serve_refused(archive_dir: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "serve", "--dir", archive_dir, "--control-channel", f"aeron:udp?endpoint=localhost:{free_udp_port()}",
         *extra], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    if proc.stdout is not None:
        proc.stdout.close()


def _killed_serve(archive_dir: str) -> subprocess.Popen[str]:
    """A `serve` on `archive_dir`, once ready killed with -9 (its mark file left fresh, as by a crash)."""
    proc, _ = serve_process(archive_dir, free_udp_port())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()
    return proc


def test_a_second_serve_on_a_held_directory_is_refused_and_the_first_goes_on(aeron_dir, tmp_path):
    archive_dir = str(tmp_path / "archive")
    port = free_udp_port()
    proc, _ = serve_process(archive_dir, port)
    try:
        refused = _serve_refused(archive_dir)
        assert refused.returncode == 2, refused.stderr
        assert "active mark file detected" in refused.stderr
        assert archive_dir in refused.stderr and f"pid {proc.pid}" in refused.stderr, refused.stderr
        assert "last activity" in refused.stderr
        assert proc.poll() is None
        header = mf.read_mark_file(archive_dir).header
        assert header.pid == proc.pid and header.activity_timestamp > 0 and header.is_ready
        first = header.activity_timestamp
        wait_for(lambda: mf.read_mark_file(archive_dir).header.activity_timestamp > first, 5, "the next heartbeat")
        client = AeronArchive.connect(aeron_dir, f"aeron:udp?endpoint=localhost:{port}", 10,
                                      "aeron:udp?endpoint=localhost:0")  # fmt: skip
        try:
            assert client.list_recordings(0, 10) == []  # the first archive still serves its directory
        finally:
            client.close()
    finally:
        _stop(proc)
    assert proc.returncode == 0
    assert mf.read_mark_file(archive_dir).header.activity_timestamp == -1  # closed cleanly: Java's signalTerminated


def test_a_serve_killed_with_9_is_taken_over_at_once_by_a_restart(tmp_path):
    archive_dir = str(tmp_path / "archive")
    proc = _killed_serve(archive_dir)
    killed = mf.read_mark_file(archive_dir).header
    assert killed.pid == proc.pid and time.time() * 1000 - killed.activity_timestamp < 10_000  # fresh: Java refuses
    started = time.monotonic()
    again, _ = serve_process(archive_dir, free_udp_port())  # our record proves the holder gone: no 10 s wait
    try:
        assert mf.read_mark_file(archive_dir).header.pid == again.pid
        assert time.monotonic() - started < 10
    finally:
        _stop(again)


def test_a_holder_not_proven_dead_is_taken_over_once_its_activity_is_older_than_the_timeout(tmp_path):
    """As Java: a fresh activity timestamp refuses, a stale one is taken over (the timeout shortened for the test)."""
    archive_dir = str(tmp_path / "archive")
    proc = _killed_serve(archive_dir)
    path = os.path.join(archive_dir, mf.FILENAME)
    with open(path, "r+b") as f:  # as a Java archive leaves it: no record of ours to prove its holder gone
        f.seek(mf.OWNER_RECORD_OFFSET)
        f.write(bytes(64))
    refused = _serve_refused(archive_dir)  # default timeout, 10 s
    assert refused.returncode == 2 and f"pid {proc.pid}" in refused.stderr and "ms ago" in refused.stderr
    last = mf.read_mark_file(archive_dir).header.activity_timestamp
    time.sleep(max(0.0, (last + 1_100) / 1000 - time.time()))
    again, _ = serve_process(archive_dir, free_udp_port(), "--mark-file-timeout", "1s")
    try:
        assert mf.read_mark_file(archive_dir).header.pid == again.pid
    finally:
        _stop(again)


def test_errors_go_to_the_mark_file_counted_as_distinct_and_pid_and_errors_read_them(aeron_dir, tmp_path):
    archive_dir = str(tmp_path / "archive")
    port = free_udp_port()
    proc, _ = serve_process(archive_dir, port)
    try:
        client = AeronArchive.connect(aeron_dir, f"aeron:udp?endpoint=localhost:{port}", 10,
                                      "aeron:udp?endpoint=localhost:0")  # fmt: skip
        try:
            raw = client.aeron.add_exclusive_publication(f"aeron:udp?endpoint=localhost:{port}", 10)
            wait_for(lambda: raw.is_connected, 10, "the control stream")
            unknown = struct.pack("<HHHH", 8, 9999, 101, 14) + bytes(8)  # a template the archive does not know
            for _ in range(3):
                while raw.offer(unknown) <= 0:
                    time.sleep(0.001)

            def logged() -> list[dict[str, object]]:
                out = _cli("errors", "--dir", archive_dir, "--json")
                assert out.returncode == 0, out.stderr
                errors: list[dict[str, object]] = json.loads(out.stdout)["errors"]
                return errors

            entries = wait_for(lambda: [e for e in logged() if e["observationCount"] == 3], 10, "3 observations")
            (entry,) = entries
            assert "9999" in str(entry["text"]) and entry["firstObservationTimestamp"] <= entry[
                "lastObservationTimestamp"]  # fmt: skip
            raw.close()
        finally:
            client.close()
        pid = _cli("pid", "--dir", archive_dir)
        assert pid.returncode == 0 and pid.stdout.strip() == str(proc.pid)
        text = _cli("errors", "--dir", archive_dir)
        assert text.returncode == 0
        assert text.stdout.startswith("Archive error log:\n\n3 observations from ")
        assert "1 distinct errors observed." in text.stdout and "Aeron driver error log (directory: " in text.stdout
    finally:
        _stop(proc)
    missing = _cli("pid", "--dir", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no archive-mark.dat" in missing.stderr
