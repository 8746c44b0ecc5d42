"""A sink committing for a long time: open files, memory mappings and memory stay flat, the state log bounded.

Every commit leases a control session, extends two recordings (the sink log and the target) on two new exclusive
publications and closes them again; a streaming query does that once per micro-batch for months. A publication or
log buffer left behind per commit shows here as mappings or files growing with the number of commits. With a small
compaction threshold the sink log is compacted many times over, and must stay one recording of bounded length.
The default run commits a few hundred batches; `-m slow` commits thousands.
"""

from __future__ import annotations

import logging
import os

import pytest

from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.connector.sink import log_lock, log_state, log_store
from aeron_archive_spark.connector.sink.committer import commit_batch
from system.harness import Harness
from system.test_sink_util import batch_map, replay_range, sink_options, sink_view, stage, value_batch


def _usage() -> tuple[int, int, int]:
    """(open files, memory mappings, RSS in KiB) of this process (the archive and the committer both run here)."""
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return len(os.listdir("/proc/self/fd")), maps, rss


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def _soak(harness, tmp_path, monkeypatch, caplog, commits: int) -> None:
    # pytest keeps every captured log record of a test in memory (log_level INFO: several lines a commit), which
    # would show as RSS growth of the test, not of the sink
    caplog.set_level(logging.WARNING)
    monkeypatch.setattr(log_lock, "COMPACT_AFTER_BYTES", 16 * 1024)
    monkeypatch.setattr(log_state, "RECENT_ENTRIES", 8)
    log_store._cache.clear()
    options = sink_options(harness, str(tmp_path / "chk"))
    warm = commits // 5
    samples = []
    for batch in range(commits):
        values = [f"{batch}:{i}".encode() * (1 + i % 7) for i in range(20)]
        commit_batch(options, stage(options, str(batch), [[value_batch(values)]]), batch, str(batch), True)
        if batch >= warm and (batch - warm) % max(1, (commits - warm) // 4) == 0:
            samples.append(_usage())
    samples.append(_usage())
    files, maps, rss = zip(*samples, strict=True)
    print(f"{commits} commits: open files {files}, mappings {maps}, RSS KiB {rss}")
    # One leaked publication per commit would add mappings (its log buffer) with every commit. The allocator may
    # map a few more regions early on (seen: +14 over the first thousand commits of 5,000, then flat), so the
    # bound is a small constant overall and flat over the second half.
    assert max(files) - files[0] <= 2, f"open files grew over {commits - warm} commits: {files}"
    assert max(maps) - maps[0] <= 32, f"memory mappings grew over {commits - warm} commits: {maps}"
    assert maps[-1] - maps[len(maps) // 2] <= 8, f"memory mappings still growing: {maps}"
    assert rss[-1] - rss[0] < 16 * 1024, f"RSS grew by {(rss[-1] - rss[0]) // 1024} MiB: {rss}"

    view = sink_view(options)
    assert view.state.count == commits and view.state.last.batch_id == commits - 1
    logs = log_store.find_logs(harness.client, view.key)
    assert len(logs) == 1, "every compacted generation but the current one was purged"
    assert logs[0].stop_position - logs[0].start_position < 64 * 1024
    [last] = [e for e in batch_map(options) if e.batch_id == commits - 1]
    got = replay_range(harness.client, last.recording_id, last.start_position, last.stop_position)
    assert [v for v, _ in got] == [f"{commits - 1}:{i}".encode() * (1 + i % 7) for i in range(20)]


def test_a_long_running_sink_keeps_files_mappings_and_its_log_bounded(harness, tmp_path, monkeypatch, caplog):
    _soak(harness, tmp_path, monkeypatch, caplog, 300)


@pytest.mark.slow
def test_a_sink_soak_of_thousands_of_commits(harness, tmp_path, monkeypatch, caplog):
    _soak(harness, tmp_path, monkeypatch, caplog, 5000)
