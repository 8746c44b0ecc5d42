"""README.md's Quickstart, executed as written: the bash block starts the archive, the Python blocks run against it.

The fenced blocks are taken from the README itself. The only changes are the placeholders the README tells the user
to replace (the `aeronDir` that `serve` printed, and the /tmp paths, which become this test's temporary directory).
The Python blocks run in one interpreter (a user pasting them into one session), followed by a few lines appended
here, not in the README: let the streaming query the sink block started process what is there, stop it, and read
the sink's recording back.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

AERON_DIR_PLACEHOLDER = "/dev/shm/aeron-archive-…"
ARCHIVE_PLACEHOLDER = "/tmp/quickstart-archive"
CHECKPOINT_PLACEHOLDER = "/tmp/quickstart-checkpoint"

EPILOGUE = '''
# ---- appended by tests/examples/test_readme.py (not in the README) ----
import json as _json
[_query] = spark.streams.active  # the sink query the last block started
_query.processAllAvailable()
_streamed = sum(p["numInputRows"] for p in _query.recentProgress)
_query.stop()
_sunk = (spark.read.format("aeron-archive").option("archiveDir", {archive!r})
         .option("channel", "aeron:ipc").option("streamId", "3003").load()
         .orderBy("position").selectExpr("CAST(value AS STRING) AS text").collect())
print("README-CHECK " + _json.dumps({{"streamed": _streamed, "sunk": [r.text for r in _sunk]}}))
spark.stop()
'''


def quickstart_blocks() -> list[tuple[str, str]]:
    """(language, code) of each fenced block in README.md's Quickstart section."""
    text = README.read_text()
    assert "\n## Quickstart\n" in text, "README.md has no Quickstart section"
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w+)\n(.*?)^```", section, re.S | re.M)


def substitute(code: str, replacements: dict[str, str], used: set[str]) -> str:
    for placeholder, value in replacements.items():
        if placeholder in code:
            used.add(placeholder)
            code = code.replace(placeholder, value)
    return code


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"`serve` printed nothing within {timeout}s; stderr:\n{err[-4000:]}")
    return proc.stdout.readline()


@pytest.mark.spark
@pytest.mark.slow  # the default run covers the Quickstart in tests/wheel: the same blocks, run against the wheel
def test_quickstart_as_written(tmp_path):
    run_quickstart(tmp_path, python=sys.executable, serve_cwd=ROOT)


def run_quickstart(tmp_path: Path, python: str, serve_cwd: Path, aeron_archive: str | None = None) -> None:
    """Run the Quickstart's blocks and check what they print and leave behind.

    `python` runs the Python blocks and the final offline listing; the bash block runs in `serve_cwd`, with its
    `.venv/bin/aeron-archive` replaced by `aeron_archive` when given (an installation elsewhere).
    """
    blocks = quickstart_blocks()
    assert [lang for lang, _ in blocks] == ["bash", "python", "python", "python"], \
        "the Quickstart's blocks changed: update this test"
    archive_dir, checkpoint = str(tmp_path / "quickstart-archive"), str(tmp_path / "quickstart-checkpoint")
    used: set[str] = set()

    # 1. The bash block, from the repository root as the README assumes (`.venv/bin/aeron-archive`).
    [serve_command] = [c for c in blocks[0][1].splitlines() if c.strip() and not c.startswith("#")]
    serve_command = substitute(serve_command, {ARCHIVE_PLACEHOLDER: archive_dir}, used)
    if aeron_archive is not None:
        assert serve_command.startswith(".venv/bin/aeron-archive "), serve_command
        serve_command = aeron_archive + serve_command.removeprefix(".venv/bin/aeron-archive")
    server = subprocess.Popen(["bash", "-c", f"exec {serve_command}"], cwd=serve_cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        ready = json.loads(read_line(server, 30))
        assert ready["archiveDir"] == archive_dir and ready["localControlChannel"] == "aeron:ipc"
        assert ready["controlChannel"] is None  # --control-channel none
        aeron_dir = ready["aeronDir"]
        # The shape the README shows: on shm where it is a memory filesystem with room, as Aeron's default on Linux.
        from aeron_archive_spark.archive.native import default_driver_parent
        assert aeron_dir.startswith(os.path.join(default_driver_parent()[0], "aeron-archive-")), aeron_dir

        # 2. The Python blocks, in one interpreter, with the placeholders replaced.
        replacements = {AERON_DIR_PLACEHOLDER: aeron_dir, ARCHIVE_PLACEHOLDER: archive_dir,
                        CHECKPOINT_PLACEHOLDER: checkpoint}
        script = "\n".join(substitute(code, replacements, used) for _, code in blocks[1:])
        script += EPILOGUE.format(archive=archive_dir)
        assert used == {ARCHIVE_PLACEHOLDER, AERON_DIR_PLACEHOLDER, CHECKPOINT_PLACEHOLDER}, \
            f"placeholders not found in the Quickstart: {set(replacements) - used}"
        (tmp_path / "quickstart.py").write_text(script)
        # Not in the repository root (nothing may depend on it), and without PYSPARK_PYTHON: the README's blocks
        # must work for a user who did not set it.
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
        started = time.monotonic()
        proc = subprocess.run([python, str(tmp_path / "quickstart.py")], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        print(f"quickstart Python blocks: exit {proc.returncode} after {time.monotonic() - started:.1f}s")
        out = proc.stdout
        assert proc.returncode == 0, f"--- stdout ---\n{out[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
    finally:
        server.send_signal(signal.SIGINT)  # "keep it running" until here; SIGINT shuts it down cleanly
        try:
            _, serve_err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert server.returncode == 0, serve_err[-4000:]

    head = out[:3000]  # before the long README-CHECK line
    # The client block: the descriptor of recording 0, then the first replayed messages at their positions.
    assert re.search(r"^RecordingDescriptor\(.*recording_id=0, .*stream_id=1001, .*"
                     r"original_channel='aeron:ipc\?term-length=64k'", out, re.M), head
    assert "[(0, b'tick 0'), (64, b'tick 1'), (128, b'tick 2')]" in out, head
    # The Spark read block's show(3), whatever its column padding.
    assert re.search(r"^\|position\|text\|\n\+-+\+-+\+\n\|0\|tick0\|\n\|64\|tick1\|\n\|128\|tick2\|$",
                     out.replace(" ", ""), re.M), head
    # The stream + sink blocks: 1000 messages streamed from recording 0 into a new recording, once each, in order.
    [check] = [line for line in out.splitlines() if line.startswith("README-CHECK ")]
    result = json.loads(check.removeprefix("README-CHECK "))
    assert result["streamed"] == 1000
    assert result["sunk"] == [f"tick {i}" for i in range(1000)]

    # What the archive holds afterwards (offline): the recorded ticks and the sink's recording.
    listed = subprocess.run([python, "-m", "aeron_archive_spark.archive.cli.main", "list", "--dir", archive_dir,
                             "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    from aeron_archive_spark.connector.sink.log_identity import ALIAS_PREFIX, SINK_LOG_STREAM_ID
    recordings = {d["streamId"]: d for d in json.loads(listed.stdout)}
    # and the sink's state: its log recording (found by the query's checkpointLocation), on a stream of its own
    assert set(recordings) == {1001, 3003, SINK_LOG_STREAM_ID}
    assert ALIAS_PREFIX in recordings[SINK_LOG_STREAM_ID]["originalChannel"]
    assert len(json.loads(listed.stdout)) == 3
    assert (recordings[1001]["startPosition"], recordings[1001]["stopPosition"]) == (0, 64000)
    assert recordings[3003]["stopPosition"] - recordings[3003]["startPosition"] == 64000
