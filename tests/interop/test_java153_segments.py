"""Segment management against the real Java Aeron 1.53 (issue 33): Java's client drives Java's archive and ours
through the same sequence (`java153/JavaSegmentSequence.java`: detach, replay before the start, attach, delete
detached, purge, refusals, a purge past and up to a running replay, migrate) and both must answer alike: return
values, error codes and texts, signals, start and stop positions and the files left on disk.

Two archives, 128 KiB segments, each with its own media driver (Java's ArchivingMediaDriver; our `serve` with its
embedded C driver); the Java client runs on the driver of the archive it drives (its recordings are made over IPC).
Where the answers differ on purpose they are normalised, each with its reason:
- the replay-in-progress refusal names the replay's session id (each driver picks its own) and its publication's
  channel, which each archive builds with its parameters in its own order: both are masked.

Skips unless JAVA_AERON_HOME names a Java Aeron 1.53 build:
    JAVA_AERON_HOME=/root/.cache/java-aeron .venv/bin/python -m pytest tests/interop/test_java153_segments.py
"""

from __future__ import annotations

import re
from pathlib import Path

from interop.java153env import Java153Env

RESPONSE = "aeron:udp?endpoint=localhost:0"
SEGMENT = 128 * 1024


def sequence(env: Java153Env, aeron_dir: str, control_channel: str, archive_dir: Path) -> list[str]:
    result = env.run("JavaSegmentSequence", aeron_dir, control_channel, RESPONSE, archive_dir.resolve(),
                     timeout=180)
    lines = [line for line in result.stdout.splitlines() if " | " in line]
    return [re.sub(r"sessionId=-?\d+ streamId=(\d+) channel=\S+", r"sessionId=S streamId=\1 channel=C", line)
            for line in lines]


def test_javas_client_gets_the_same_answers_from_both_archives(env, java, ours):
    want = sequence(env, str(java.aeron_dir), java.control_channel, java.archive_dir)
    got = sequence(env, ours.aeron_dir, ours.control_channel, ours.archive_dir)
    assert len(want) == 36, "\n".join(want)
    for expected, actual in zip(want, got, strict=True):
        assert actual == expected
    # What Java's archive answered, as ManageRecordingHistoryTest and MigrateSegmentsTest expect it.
    answers = {line.split(" | ")[0]: line.split(" | ")[1] for line in want}
    assert answers["attach"] == "ok 3"
    assert answers["delete detached"] == "ok 2"
    assert answers["purge to 4 segments"] == "ok 2"
    assert answers["purge up to a running replay"] == "ok 2"
    assert answers["migrate prepend"] == "ok 2"
    assert answers["migrate the empty source again"] == "ok 0"  # and DELETE: its empty file was queued
    assert answers["replay before the start"] == (
        f"error 16 requested replay start position=0 is less than recording start position={3 * SEGMENT} "
        "for recording 0")
    assert answers["purge past a running replay"].startswith(
        f"error 0 invalid detach: replay in progress -  state=REPLAY newStartPosition={7 * SEGMENT} "
        f"upperBound={6 * SEGMENT} sessionId=S streamId=7402 channel=C")
