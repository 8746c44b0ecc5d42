"""Every script in examples/ runs as a user would run it (a subprocess of this interpreter), and says what it should.

Each test checks the exit code and the key lines of the script's output, numbers included, so a broken example fails
here. The scripts start their own embedded archive (own media driver) in a temporary directory, so they share
nothing with the other tests. Spark examples start their own local[2] Spark; they take 15-30 s each.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Every example script and the test(s) running it; test_every_example_is_tested keeps this complete.
TESTED = {
    "demo.py": ["test_demo_end_to_end"],
    "record_and_replay.py": ["test_record_and_replay", "test_record_and_replay_against_a_running_archive"],
    "cluster_recovery_replay.py": ["test_cluster_recovery_replay",
                                   "test_cluster_recovery_replay_with_nothing_to_replay"],
    "batch_read_archive_dir.py": ["test_batch_read_archive_dir"],
    "tail_live_recording.py": ["test_tail_live_recording"],
    "exactly_once_sink.py": ["test_exactly_once_sink"],
    "read_foreign_archive_dir.py": ["test_read_foreign_archive_dir_written_by_java",
                                    "test_read_foreign_archive_dir_without_java",
                                    "test_read_foreign_archive_dir_of_a_given_dir_leaves_it_unchanged"],
}


def run_example(name: str, *args: str, timeout: float = 180.0) -> str:
    """Run examples/<name> with this interpreter; returns its stdout, failing with both outputs on a non-zero exit.

    PYSPARK_PYTHON is removed from the environment: the scripts must point Spark's workers at this interpreter
    themselves, as they have to when a user runs them.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as ex:
        out = ex.stdout.decode() if isinstance(ex.stdout, bytes) else (ex.stdout or "")
        err = ex.stderr.decode() if isinstance(ex.stderr, bytes) else (ex.stderr or "")
        pytest.fail(f"{name} did not finish within {timeout}s\n--- stdout ---\n{out[-6000:]}\n--- stderr ---\n"
                    f"{err[-6000:]}")
    print(f"{name} {' '.join(args)}: exit {proc.returncode} after {time.monotonic() - started:.1f}s")
    assert proc.returncode == 0, (f"{name} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-6000:]}\n"
                                  f"--- stderr ---\n{proc.stderr[-6000:]}")
    return proc.stdout


def line(pattern: str, output: str) -> re.Match[str]:
    """The first output line matching `pattern` (a regex searched within each line)."""
    for text in output.splitlines():
        if (match := re.search(pattern, text)) is not None:
            return match
    raise AssertionError(f"no line matches {pattern!r} in:\n{output}")


def lines(pattern: str, output: str) -> list[re.Match[str]]:
    return [m for text in output.splitlines() if (m := re.search(pattern, text)) is not None]


# ---------------------------------------------------------------------------------------------------------------------
# the examples' own promises


def test_every_example_is_tested_documented_and_listed():
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert sorted(TESTED) == scripts, "every examples/*.py needs a test here (and TESTED must name it)"
    for tests in TESTED.values():
        for test in tests:
            assert callable(globals().get(test)), f"{test} is not a test in this module"
    listing = (EXAMPLES / "README.md").read_text()
    for script in scripts:
        source = (EXAMPLES / script).read_text()
        docstring = re.match(r'"""(.+?)"""', source, re.S)
        assert docstring is not None, f"{script} has no module docstring"
        assert script in docstring.group(1) or script == "demo.py", f"{script}'s docstring does not say how to run it"
        assert f"[{script}]({script})" in listing, f"examples/README.md does not list {script}"


def test_record_and_replay():
    out = run_example("record_and_replay.py", "--messages", "1500")
    assert line(r"started an archive in ", out)
    recording = int(line(r"recording (\d+) started at position 0 ", out).group(1))
    end = int(line(r"published 1500 messages; recorded up to position (\d+)$", out).group(1))
    assert line(rf"recording {recording} stopped at position {end}$", out)
    assert line(rf"listed recording {recording}: \[0, {end}\) session -?\d+ stream 1001 "
                r"channel aeron:ipc\?term-length=64k$", out)
    assert line(r"replayed from 0: 1500 messages, first 'message 00000' at 0, last 'message 01499' at \d+$", out)
    mid = int(line(r"replayed from (\d+): 750 messages, first 'message 00750'$", out).group(1))
    assert 0 < mid < end
    deleted = line(rf"truncated at {mid}: (\d+) segment file\(s\) deleted; now recording {recording}: "
                   rf"\[0, {mid}\) ", out)
    assert int(deleted.group(1)) >= 1  # 128 KiB segments: the second half spans at least one whole segment file
    assert line(r"after truncation a full replay gives 750 messages, last 'message 00749'$", out)
    assert out.rstrip().endswith("done")


def test_record_and_replay_against_a_running_archive(tmp_path):
    """The --aeron-dir/--control-* options reach an `aeron-archive serve` process; the effect shows in its catalog."""
    archive_dir = tmp_path / "archive"
    cli = [sys.executable, "-m", "aeron_archive_spark.archive.cli.main"]
    server = subprocess.Popen([*cli, "serve", "--dir", str(archive_dir), "--control-channel", "none",
                               "--local-control-stream-id", "77", "--segment-length", "128k"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        out = run_example("record_and_replay.py", "--messages", "1000", "--aeron-dir", ready["aeronDir"],
                          "--control-channel", "aeron:ipc", "--control-stream-id", "77")
        assert "started an archive" not in out
        mid = int(line(r"replayed from (\d+): 500 messages, first 'message 00500'$", out).group(1))
        assert line(r"after truncation a full replay gives 500 messages", out)
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    listed = subprocess.run([*cli, "list", "--dir", str(archive_dir), "--json"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    [descriptor] = json.loads(listed.stdout)
    assert (descriptor["streamId"], descriptor["startPosition"], descriptor["stopPosition"]) == (1001, 0, mid)


@pytest.mark.parametrize("replay_channel", [None, "aeron:ipc"], ids=["udp", "ipc"])
def test_cluster_recovery_replay(replay_channel):
    args = ["--entries", "800", "--processed", "300"]
    if replay_channel:
        args += ["--replay-channel", replay_channel]
    out = run_example("cluster_recovery_replay.py", *args)
    leader = line(r"log recording (\d+): 800 entries, append position (\d+); processed 300 entries, "
                  r"log position (\d+)$", out)
    append_position, log_position = int(leader.group(2)), int(leader.group(3))
    assert 0 < log_position < append_position
    channel = line(r"\[consensus\] replay \d+ started: logSessionId (-?\d+) on (\S+) stream 103$", out)
    assert channel.group(2) == (replay_channel or channel.group(2)) and channel.group(2).startswith(
        replay_channel or "aeron:udp?endpoint=localhost:")
    session = channel.group(1)
    # The protocol, in order: image, JoinLog, the service joins at the log position, ServiceAck, then the replay.
    steps = [rf"\[consensus\] replay image connected at position {log_position}; sending JoinLog",
             rf"\[service\] JoinLog received: logSessionId {session}, \[{log_position}, {append_position}\)",
             rf"\[service\] joined the replay at position {log_position}; sending ServiceAck",
             rf"\[consensus\] ServiceAck received \(service at {log_position}\); replaying the log",
             rf"\[consensus\] replayed 500 log entries up to the append position {append_position}$"]
    lines = out.splitlines()
    missing = [step for step in steps if not any(re.search(step, text) for text in lines)]
    assert not missing, f"protocol steps not printed: {missing}\n--- stdout ---\n{out}"
    indexes = [next(i for i, text in enumerate(lines) if re.search(step, text)) for step in steps]
    assert indexes == sorted(indexes), out
    assert line(rf"\[service\] processed 500 log entries up to position {append_position}$", out)
    assert line(rf"both subscribers saw the same 500 entries at the same positions: 'log entry 300' at "
                rf"{log_position} to 'log entry 799' at \d+$", out)
    assert line(r"on to LEADER_INIT$", out)


def test_cluster_recovery_replay_with_nothing_to_replay():
    out = run_example("cluster_recovery_replay.py", "--entries", "50", "--processed", "50")
    assert line(r"log position == append position: nothing to replay, on to LEADER_INIT$", out)
    assert "[consensus]" not in out and "[service]" not in out


@pytest.mark.spark
def test_batch_read_archive_dir():
    out = run_example("batch_read_archive_dir.py", "--messages", "1000")
    assert line(r"recorded 1000 trades as recording 0 \(stream 1001\)$", out)
    assert line(r"recorded 500 quotes as recording 1 \(stream 1002\)$", out)
    assert line(r"archive closed: from here on only the files in ", out)
    assert line(r"catalog: recording 0 \[0, 64000\) stream 1001 ", out)  # 1000 messages of one 64-byte frame
    assert line(r"recording 0: 1000 messages, positions 0\.\.63936$", out)
    assert line(r"recording 1: 500 messages, positions 0\.\.31936$", out)
    assert line(r"\|0 +\|0 +\|trade 0 AAPL 100\.00 *\|", out)  # the first row of show(): position, reservedValue, text
    assert line(r"slice \[640, 1280\) of recording 0: 10 messages, first 'trade 10 MSFT 110\.10', "
                r"last 'trade 19 MSFT 102\.19'$", out)


@pytest.mark.spark
def test_tail_live_recording():
    out = run_example("tail_live_recording.py", "--seconds", "2", "--rate", "1000", "--max-bytes-per-trigger", "32k")
    recording = line(r"recording (\d+) is live on ", out).group(1)
    assert line(r"batch 0: 1 messages, positions 0\.\.0$", out)  # the query is up before the publisher starts
    assert line(r"publisher done: 2001 messages, recording \d+ at position (\d+)$", out)
    batches = lines(r"\] batch (\d+): (\d+) messages, positions (\d+)\.\.(\d+)$", out)
    assert sum(int(m.group(2)) for m in batches) == 2001
    # 32 KiB per trigger, 160-byte frames: at most 204 messages per batch
    assert max(int(m.group(2)) for m in batches) <= 32 * 1024 // 160
    starts = [int(m.group(3)) for m in batches]
    assert starts == sorted(starts)
    lag = [ast.literal_eval(m.group(1)) for m in lines(r"progress of batch \d+: bytes behind the live end (\{.*\})$",
                                                       out)]
    assert any(v[int(recording)] > 0 for v in lag), "the query never fell behind: nothing shows the backlog"
    assert lag[-1] == {int(recording): 0}
    done = line(r"the query read all 2001 messages exactly once, in (\d+) non-empty micro-batches; "
                r"bytes behind at the end: 0$", out)
    assert int(done.group(1)) >= 10  # 2001 x 160 bytes in batches of <= 32 KiB


@pytest.mark.spark
def test_exactly_once_sink():
    out = run_example("exactly_once_sink.py", "--rows-per-batch", "20", "--batches", "2")
    first = line(r"query stopped; Spark's commit log has batches \[([\d, ]+)\], the sink's batch map \[([\d, ]+)\]",
                 out)
    spark_batches = [int(b) for b in first.group(1).split(",")]
    assert spark_batches[:2] == [0, 1]
    assert set(spark_batches) <= {int(b) for b in first.group(2).split(",")}
    last = int(line(r"simulated a crash right after the sink committed batch (\d+): Spark will run it again",
                    out).group(1))
    assert last == spark_batches[-1]
    assert line(rf"Spark ran batch {last} again and the sink skipped it \(its batch map entry is unchanged\)", out)
    entries = [(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))
               for m in lines(r"  batch (\d+): \[(\d+), (\d+)\) (\d+) rows$", out)]
    assert [e[0] for e in entries] == list(range(len(entries))) and len(entries) >= last + 3
    assert all(e[3] == 20 for e in entries)
    assert all(a[2] == b[1] for a, b in zip(entries, entries[1:]))
    rows = 20 * len(entries)
    assert line(rf"read back {rows} rows: first 'row 0' at 0, last 'row {rows - 1}' at \d+$", out)
    assert line(rf"every row landed exactly once: {rows} rows = {len(entries)} batches x 20, each inside its "
                r"batch's range$", out)


def java_available() -> bool:
    from interop.javaenv import JavaEnv, JavaUnavailable
    try:
        JavaEnv.get()
        return True
    except JavaUnavailable:
        return False


@pytest.mark.spark
def test_read_foreign_archive_dir_written_by_java():
    if not java_available():
        pytest.skip("Java Aeron 1.15.1 unavailable (see tests/interop)")
    out = run_example("read_foreign_archive_dir.py", "--rows", "3")
    assert line(r"recording with the Java Aeron 1\.15\.1 archive into ", out)
    assert len(lines(r"Java recorded 192 messages on ", out)) == 2
    # `list`: id, start, stop, bytes, session, stream, started and stopped (ISO-8601 UTC), channel
    times = r"\d{4}-\d\d-\d\dT[\d:.]+Z +\d{4}-\d\d-\d\dT[\d:.]+Z +"
    assert line(r"^ +0 +0 +\d+ +\d+ +-?\d+ +1001  " + times + r"aeron:udp\?endpoint=localhost:\d+\|term-length=65536$", out)
    assert line(r"^ +1 +197632 +\d+ +\d+ +-?\d+ +1002  " + times + r"aeron:ipc\?term-length=65536$", out)
    assert line(r"catalog version 0\.0\.0, 2 recording\(s\)$", out)
    assert line(r"reading a copy with position names", out)
    for recording in (0, 1):
        assert line(rf"recording {recording}: 192 messages read by Spark; the first 3:$", out)
        assert line(rf"recording {recording}: all 192 messages match what the Java publisher sent", out)


@pytest.mark.spark
def test_read_foreign_archive_dir_without_java():
    out = run_example("read_foreign_archive_dir.py", "--generate-with", "python", "--rows", "2")
    assert line(r"recording with this project's archive into ", out)
    assert line(r"catalog version 3\.1\.0, 1 recording\(s\)$", out)
    assert line(r"recording 0: 500 messages read by Spark; the first 2:$", out)
    assert "reading a copy" not in out and "Java" not in out


@pytest.mark.spark
def test_read_foreign_archive_dir_of_a_given_dir_leaves_it_unchanged(aeron_dir, tmp_path):
    from aeron_archive_spark.archive.constants import RecordingSignal
    from system.harness import Harness, offer_all, wait_for

    archive_dir = tmp_path / "archive"
    h = Harness(aeron_dir, str(archive_dir))
    try:
        channel = "aeron:ipc?term-length=64k"
        for index, (stream_id, count) in enumerate(((7001, 30), (7002, 12))):
            h.client.start_recording(channel, stream_id)
            publication = h.client.aeron.add_exclusive_publication(channel, stream_id)
            recording_id = h.await_signal(RecordingSignal.START, count=index + 1).recording_id
            offer_all(publication, [b"x" * n for n in range(count)])
            wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position,
                     what="recorded")
            h.client.stop_recording(channel, stream_id)
            h.await_signal(RecordingSignal.STOP, recording_id)
    finally:
        h.close()
    before = {p.name: p.read_bytes() for p in archive_dir.iterdir()}
    out = run_example("read_foreign_archive_dir.py", "--dir", str(archive_dir), "--rows", "4")
    assert {p.name: p.read_bytes() for p in archive_dir.iterdir()} == before
    assert line(rf"aeron-archive list --dir {re.escape(str(archive_dir))}$", out)
    assert line(r"catalog version 3\.1\.0, 2 recording\(s\)$", out)
    assert line(r"recording 0: 30 messages read by Spark; the first 4:$", out)
    assert line(r"recording 1: 12 messages read by Spark; the first 4:$", out)
    assert line(r"^\|160 *\|-?\d+ *\|7001 *\|3 *\|", out)  # 4th row of recording 0: b"xxx" at 160


@pytest.mark.spark
def test_demo_end_to_end():
    """The main demo as `bash ci/main.sh` runs it, shortened (~45 s on 2 cores)."""
    started = time.monotonic()
    out = run_example("demo.py", "--seconds", "6", "--rate", "500", timeout=600)
    covered = line(r"trades covered by emitted bars: (\d+) of (\d+)$", out)
    assert int(covered.group(1)) == int(covered.group(2)) > 0
    print(f"demo.py --seconds 6 --rate 500 took {time.monotonic() - started:.0f}s")
