"""The sink's driver-side commit against a real archive: order, idempotence, crash recovery, failures.

Spark is not needed to exercise the protocol: partitions are staged as executors would stage them, and
`commit_batch` is what the stream writer's `commit` calls. Hard crashes run the commit in a child process that an
armed fault kills with `os._exit` at the chosen point.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest

from aeron_archive_spark.archive import SourceLocation
from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.tables.option_table import OptionError

from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.committer import commit_batch
from aeron_archive_spark.connector.sink.errors import InjectedFault, SinkError
from system.harness import Harness, offer_all, payloads_of, wait_for
from system.test_sink_util import batch_map, replay_recording, sink_options, sink_view, stage, value_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def aeron_dir(tmp_path_factory):
    """A media driver of this module's own that times a dead client out after 2 s (Aeron's default is 10 s): the
    hard-crash tests wait for the driver to close what a killed commit left behind, and no live client here goes
    2 s without a keepalive (the C client's conductor thread sends them)."""
    from aeron_archive_spark.archive.native import EmbeddedMediaDriver

    driver = EmbeddedMediaDriver(str(tmp_path_factory.mktemp("aeron-sink-commit") / "driver"),
                                 settings={"AERON_TIMER_INTERVAL": "20ms", "AERON_CLIENT_LIVENESS_TIMEOUT": "2s"})
    yield driver.aeron_dir
    connection_pool().close()
    driver.close()


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def batch_payloads(batch: int, partition: int, count: int) -> list[bytes]:
    """Distinct payloads of varied sizes: empty, tiny, and beyond the 1376-byte max payload (fragmented)."""
    sizes = [0, 1, 31, 32, 33, 1376, 1377, 5000] + [(i * 37) % 300 for i in range(count - 8)]
    return [f"{batch}:{partition}:{i}|".encode() + bytes([i % 251]) * sizes[i] for i in range(count)]


def stage_batch(options, batch: int, sizes=(300, 200), attempt: int = 0, label: str | None = None):
    partitions = []
    expected = []
    for p, count in enumerate(sizes):
        values = batch_payloads(batch, p, count)
        reserved = [batch * 1_000_000 + p * 10_000 + i for i in range(count)]
        # two Arrow batches per partition, as Spark sends several
        partitions.append([value_batch(values[:count // 2], reserved[:count // 2]),
                           value_batch(values[count // 2:], reserved[count // 2:])])
        expected += list(zip(values, reserved))
    return stage(options, str(batch) if label is None else label, partitions, attempt), expected


def commit_in_child(options, messages, batch_id: int) -> int:
    """Run commit_batch in a fresh process (a crash there is a real crash); returns its exit code."""
    payload = pickle.dumps((options, messages, batch_id))
    code = ("import pickle, sys, logging; logging.basicConfig(level=logging.INFO)\n"
            "from aeron_archive_spark.connector.sink.committer import commit_batch\n"
            "options, messages, batch_id = pickle.loads(sys.stdin.buffer.read())\n"
            "commit_batch(options, messages, batch_id, str(batch_id), True)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    return subprocess.run([sys.executable, "-c", code], input=payload, env=env, timeout=120).returncode


def test_batches_extend_one_recording_in_partition_order(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    expected = []
    for batch in range(3):
        messages, rows = stage_batch(options, batch)
        entry = commit_batch(options, messages, batch, str(batch), True)
        assert entry is not None and entry.rows == len(rows)
        expected += rows
    view = sink_view(options)
    state = view.state.target
    assert state is not None and state.created_by_sink
    assert replay_recording(harness.client, state.recording_id) == expected
    entries = view.entries
    assert [e.batch_id for e in entries] == [0, 1, 2]
    descriptor = harness.client.list_recording(state.recording_id)
    assert entries[0].start_position == descriptor.start_position
    assert all(a.stop_position == b.start_position for a, b in zip(entries, entries[1:]))
    assert entries[-1].stop_position == descriptor.stop_position
    assert view.state.pending is None
    log_descriptor = harness.client.list_recording(view.log_recording_id)
    assert log_descriptor.stop_position != -1, "the sink log is stopped between commits"
    assert [d.recording_id for d in harness.client.list_recordings_for_uri(0, 100, "", 5001)] == [state.recording_id]


def test_recommitting_a_committed_batch_is_a_no_op(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    first, rows0 = stage_batch(options, 0)
    entry0 = commit_batch(options, first, 0, "0", True)
    second, rows1 = stage_batch(options, 1)
    entry1 = commit_batch(options, second, 1, "1", True)
    for batch in (1, 0):  # Spark re-commits the last batch after a crash; an older id must be ignored too
        again, _ = stage_batch(options, batch)
        result = commit_batch(options, again, batch, str(batch), True)
        assert result == (entry1 if batch == 1 else entry0)
    state = sink_view(options).state.target
    assert harness.client.get_stop_position(state.recording_id) == entry1.stop_position
    assert replay_recording(harness.client, state.recording_id) == rows0 + rows1


def test_a_restart_on_another_process_continues_from_the_log_in_the_archive(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    commit_batch(options, messages, 0, "0", True)
    messages, rows1 = stage_batch(options, 1)
    assert commit_in_child(options, messages, 1) == 0  # another process (a driver on another host) commits
    messages, rows2 = stage_batch(options, 2)
    entry = commit_batch(options, messages, 2, "2", True)  # this process's cached state is stale: re-read
    assert [e.batch_id for e in batch_map(options)] == [0, 1, 2]
    assert replay_recording(harness.client, entry.recording_id) == rows0 + rows1 + rows2


def test_extends_an_existing_recording_given_by_id(harness, tmp_path):
    channel = "aeron:ipc?term-length=65536"
    subscription_id = harness.client.start_recording(channel, 4401, SourceLocation.LOCAL)
    publication = harness.client.aeron.add_exclusive_publication(channel, 4401)
    recording_id = harness.await_signal(RecordingSignal.START).recording_id
    before = payloads_of([100] * 20)
    offer_all(publication, before)
    wait_for(lambda: harness.client.get_recording_position(recording_id) == publication.position)

    options = sink_options(harness, str(tmp_path / "chk"), recordingId=recording_id)
    messages, rows = stage_batch(options, 0)
    with pytest.raises(SinkError, match=f"recording {recording_id} .*is active"):
        commit_batch(options, messages, 0, "0", True)
    harness.client.stop_recording_subscription(subscription_id)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()

    messages, rows = stage_batch(options, 0)
    entry = commit_batch(options, messages, 0, "0", True)
    assert entry.recording_id == recording_id
    assert [p for p, _ in replay_recording(harness.client, recording_id)] == before + [p for p, _ in rows]
    state = sink_view(options).state.target
    assert state.recording_id == recording_id and not state.created_by_sink


def _crash_mid_publish(harness, options):
    """Commit batch 0, then die publishing batch 1 after 2,200 of its 3,000 rows."""
    messages, rows0 = stage_batch(options, 0)
    entry0 = commit_batch(options, messages, 0, "0", True)
    messages, rows1 = stage_batch(options, 1, sizes=(1500, 1500))
    faults.arm({"point": "publish", "afterRows": 1500 + 700, "action": "exit"})
    assert commit_in_child(options, messages, 1) == 17
    pending = sink_view(options).state.pending
    assert pending is not None and pending.batch_id == 1 and pending.start_position == entry0.stop_position
    recording_id = entry0.recording_id
    # the child died with the recording active (its publication lingers until the driver times the client out)
    wait_for(lambda: (harness.client.get_max_recorded_position(recording_id) > entry0.stop_position),
             what="partial data recorded")
    return entry0, messages, rows0, rows1


def test_hard_crash_mid_publish_is_finished_forward_when_the_batch_is_committed_again(harness, tmp_path, caplog):
    # Spark commits the same batch again after a restart: the rows already recorded (read by any reader tailing
    # the target) are kept, and only the rest is published, so nothing a reader saw is ever taken back.
    options = sink_options(harness, str(tmp_path / "chk"))
    entry0, messages, rows0, rows1 = _crash_mid_publish(harness, options)
    with caplog.at_level(logging.WARNING, logger="aeron_archive_spark.connector.sink.committer"):
        entry1 = commit_batch(options, messages, 1, "1", True)
    assert "finishing interrupted commit of batch 1 forward" in caplog.text
    assert "truncating recording" not in caplog.text
    assert entry1.start_position == entry0.stop_position and entry1.rows == 3000
    assert replay_recording(harness.client, entry0.recording_id) == rows0 + rows1
    assert sink_view(options).state.pending is None and [e.batch_id for e in batch_map(options)] == [0, 1]


def test_hard_crash_mid_publish_is_truncated_and_redone_when_the_rows_differ(harness, tmp_path, caplog):
    # A non-deterministic query gives other rows on the second attempt: what the dead commit left is truncated.
    options = sink_options(harness, str(tmp_path / "chk"))
    entry0, _, rows0, _ = _crash_mid_publish(harness, options)
    other, rows1 = stage_batch(options, 1, sizes=(1400, 1500), label="1")  # the same batch id, other rows
    with caplog.at_level(logging.WARNING, logger="aeron_archive_spark.connector.sink.committer"):
        entry1 = commit_batch(options, other, 1, "1", True)
    assert "truncating recording" in caplog.text and "forward" not in caplog.text
    assert entry1.start_position == entry0.stop_position and entry1.rows == 2900
    assert replay_recording(harness.client, entry0.recording_id) == rows0 + rows1
    assert sink_view(options).state.pending is None


def test_failure_mid_publish_is_rolled_back_at_once(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    entry0 = commit_batch(options, messages, 0, "0", True)
    messages, rows1 = stage_batch(options, 1)
    faults.arm({"point": "publish", "afterRows": 250, "action": "raise"})
    with pytest.raises(InjectedFault):
        commit_batch(options, messages, 1, "1", True)
    assert sink_view(options).state.pending is None
    assert harness.client.get_stop_position(entry0.recording_id) == entry0.stop_position
    commit_batch(options, messages, 1, "1", True)
    assert replay_recording(harness.client, entry0.recording_id) == rows0 + rows1


def test_crash_after_publishing_before_the_entry_keeps_the_published_batch(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    faults.arm({"point": "before-entry", "action": "exit"})
    assert commit_in_child(options, messages, 0) == 17  # the first batch of a new recording
    view = sink_view(options)
    state = view.state.target
    assert state is not None and view.entries == [] and view.state.pending is not None
    assert harness.client.get_stop_position(state.recording_id) > 0  # fully published, then crashed
    entry = commit_batch(options, messages, 0, "0", True)
    assert entry.start_position == 0
    assert replay_recording(harness.client, state.recording_id) == rows0


def _recordings_of_target(harness, options):
    return [d for d in harness.client.list_recordings_for_uri(0, 1000, "", options.stream_id)
            if d.stream_id == options.stream_id]


@pytest.mark.parametrize("action", ["exit", "raise"])
def test_a_commit_dying_after_starting_a_new_recording_leaves_no_orphan(harness, tmp_path, action, caplog):
    # The first commit of a channel target asks the archive to record a new publication, then dies before it can
    # log the new recording's id: the next commit finds that empty recording by its session id and adopts it.
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    faults.arm({"point": "after-start", "action": action})
    if action == "exit":
        assert commit_in_child(options, messages, 0) == 17
    else:
        with pytest.raises(InjectedFault):
            commit_batch(options, messages, 0, "0", True)
    view = sink_view(options)
    assert view.state.target is None and view.state.creating is not None
    [orphan] = _recordings_of_target(harness, options)
    assert orphan.session_id == view.state.creating.session_id

    with caplog.at_level(logging.WARNING, logger="aeron_archive_spark.connector.sink.committer"):
        entry = commit_batch(options, messages, 0, "0", True)
    assert f"adopting empty recording {orphan.recording_id}" in caplog.text
    assert entry.recording_id == orphan.recording_id and entry.start_position == orphan.start_position
    [only] = _recordings_of_target(harness, options)
    assert only.recording_id == orphan.recording_id
    messages, rows1 = stage_batch(options, 1)
    commit_batch(options, messages, 1, "1", True)
    assert replay_recording(harness.client, orphan.recording_id) == rows0 + rows1
    assert sink_view(options).state.creating is None


def test_an_interrupted_creation_that_never_reached_the_archive_starts_a_new_recording(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    # A `creating` record whose session id the archive never saw (the commit died before its start request).
    from aeron_archive_spark.connector.sink.archive_ops import ArchiveOps, lease_archive, SignalLog
    from aeron_archive_spark.connector.sink.log_identity import sink_identity, sink_key
    from aeron_archive_spark.connector.sink.log_lock import acquire
    from aeron_archive_spark.connector.sink.log_records import Creating
    identity = sink_identity(True, options.checkpoint_location, None, None, None)
    signals = SignalLog()
    lease, archive = lease_archive(options.connection, signals, True)
    with lease:
        held = acquire(ArchiveOps(archive, signals, options), sink_key(identity), identity, options.channel, 30)
        held.append(Creating(0x7EADBEEF, options.stream_id, options.channel, 0).to_json())
        held.release()
    entry = commit_batch(options, messages, 0, "0", True)
    [only] = _recordings_of_target(harness, options)
    assert entry.recording_id == only.recording_id and only.session_id != 0x7EADBEEF
    assert replay_recording(harness.client, only.recording_id) == rows0


def _sink_logs(harness, options):
    from aeron_archive_spark.connector.sink.log_identity import log_id_of, sink_identity, sink_key
    from aeron_archive_spark.connector.sink.log_store import find_logs
    key = sink_key(sink_identity(True, options.checkpoint_location, None, None, None))
    return [(log_id_of(d)[1], d) for d in find_logs(harness.client, key)]


@pytest.fixture
def small_logs(monkeypatch):
    from aeron_archive_spark.connector.sink import log_lock, log_state, log_store
    monkeypatch.setattr(log_lock, "COMPACT_AFTER_BYTES", 1500)
    monkeypatch.setattr(log_state, "RECENT_ENTRIES", 3)
    log_store._cache.clear()
    yield log_store
    log_store._cache.clear()


def test_a_long_log_is_compacted_into_a_new_generation_and_the_old_one_purged(harness, tmp_path, small_logs, caplog):
    options = sink_options(harness, str(tmp_path / "chk"))
    expected = []
    entries = []
    with caplog.at_level(logging.INFO, logger="aeron_archive_spark.connector.sink.log_lock"):
        for batch in range(24):
            messages, rows = stage_batch(options, batch, sizes=(3, 2))
            entries.append(commit_batch(options, messages, batch, str(batch), True))
            expected += rows
    assert "compacted sink log recording" in caplog.text
    [(generation, current)] = _sink_logs(harness, options)  # one log left: every older generation was purged
    assert generation >= 2
    # bounded: what a fresh process folds (compaction is due past the threshold, or twice a snapshot's size)
    assert current.stop_position - current.start_position < max(1500, 512 * 7) + 1200
    view = sink_view(options)
    assert view.log_recording_id == current.recording_id
    assert view.state.count == 24 and view.state.last == entries[-1]
    assert view.state.target.recording_id == entries[0].recording_id
    assert view.entries == entries[-len(view.entries):] and 3 <= len(view.entries) < 24

    # A fresh process (nothing cached) re-commits a carried-over batch (a no-op) and goes on exactly once.
    small_logs._cache.clear()
    again, _ = stage_batch(options, 23, sizes=(3, 2))
    assert commit_batch(options, again, 23, "23", True) == entries[-1]
    messages, rows = stage_batch(options, 24, sizes=(3, 2))
    assert commit_batch(options, messages, 24, "24", True).batch_id == 24
    assert replay_recording(harness.client, entries[0].recording_id) == expected + rows


def test_a_compaction_that_fails_midway_loses_nothing(harness, tmp_path, small_logs):
    options = sink_options(harness, str(tmp_path / "chk"))
    expected = []
    # the new generation is whole but the old log never gets its `moved` record: the next commit takes the new
    # one and purges the old
    faults.arm({"point": "compact", "action": "raise"})
    for batch in range(16):
        messages, rows = stage_batch(options, batch, sizes=(3, 2))
        commit_batch(options, messages, batch, str(batch), True)
        expected += rows
    [(generation, _)] = _sink_logs(harness, options)
    assert generation >= 1
    view = sink_view(options)
    assert view.state.count == 16 and view.state.last.batch_id == 15

    # A generation cut short (its writer died mid-snapshot) is ignored and purged; the log before it goes on.
    from aeron_archive_spark.connector.sink.archive_ops import ArchiveOps, SignalLog, lease_archive
    from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID
    from aeron_archive_spark.connector.sink.log_lock import HeldLog, log_channel
    from aeron_archive_spark.connector.sink.log_state import LogState
    [(generation, current)] = _sink_logs(harness, options)
    key = sink_view(options).key
    signals = SignalLog()
    lease, archive = lease_archive(options.connection, signals, True)
    with lease:
        ops = ArchiveOps(archive, signals, options)
        opened = ops.open_new(log_channel(options.channel, key, generation + 1), SINK_LOG_STREAM_ID)
        cut = HeldLog(ops, key, opened, LogState(), opened.start_position, "test", generation + 1)
        cut.append({"t": "snapshot", "count": 0, "records": 5, "previous": current.recording_id,
                    "generation": generation + 1, "takenAt": 0})
        cut.release()
    assert len(_sink_logs(harness, options)) == 2
    assert sink_view(options).log_recording_id == current.recording_id  # readers skip it too
    messages, rows = stage_batch(options, 16, sizes=(3, 2))
    assert commit_batch(options, messages, 16, "16", True).batch_id == 16
    assert opened.recording_id not in [d.recording_id for _, d in _sink_logs(harness, options)]
    assert sink_view(options).state.count == 17
    assert replay_recording(harness.client, sink_view(options).state.target.recording_id) == expected + rows


def test_crash_after_the_entry_leaves_a_committed_batch(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    faults.arm({"point": "after-entry", "action": "exit"})
    assert commit_in_child(options, messages, 0) == 17  # died holding the log: the next commit waits for it
    [entry] = batch_map(options)
    again, _ = stage_batch(options, 0)
    assert commit_batch(options, again, 0, "0", True) == entry  # Spark's re-commit: a no-op
    messages, rows1 = stage_batch(options, 1)
    commit_batch(options, messages, 1, "1", True)
    assert sink_view(options).state.pending is None
    assert replay_recording(harness.client, entry.recording_id) == rows0 + rows1


def test_archive_going_away_mid_commit_fails_clearly_and_the_next_run_recovers(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"), publishTimeout="3s", messageTimeout="2s")
    messages, rows0 = stage_batch(options, 0)
    entry0 = commit_batch(options, messages, 0, "0", True)
    big = [[value_batch([bytes([p]) * 1000] * 20_000, range(20_000))] for p in range(2)]
    messages = stage(options, "1", big)
    recording_id = entry0.recording_id

    def kill_archive() -> None:
        wait_for(lambda: harness.client.get_recording_position(recording_id) > entry0.stop_position, timeout=30,
                 what="commit started publishing")
        time.sleep(0.05)
        harness.close_archive()

    killer = threading.Thread(target=kill_archive)
    killer.start()
    with pytest.raises(SinkError) as failure:
        commit_batch(options, messages, 1, "1", True)
    killer.join()
    print("failure:", failure.value)
    assert "recording" in str(failure.value) or "archive" in str(failure.value)

    harness.restart()
    assert sink_view(options).state.pending is not None
    entry1 = commit_batch(options, messages, 1, "1", True)
    assert entry1.start_position == entry0.stop_position
    assert replay_recording(harness.client, entry0.recording_id) == rows0 + [(v, r) for b in big for v, r in zip(
        b[0].column(0).to_pylist(), b[0].column(1).to_pylist())]


def test_archive_restart_between_batches_reconnects(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, rows0 = stage_batch(options, 0)
    commit_batch(options, messages, 0, "0", True)
    harness.restart()
    messages, rows1 = stage_batch(options, 1)
    entry = commit_batch(options, messages, 1, "1", True)
    assert replay_recording(harness.client, entry.recording_id) == rows0 + rows1


def test_unknown_recording_id_is_named(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"), recordingId=987)
    messages, _ = stage_batch(options, 0)
    with pytest.raises(SinkError, match="recording 987 \\(option recordingId\\) is not in the archive"):
        commit_batch(options, messages, 0, "0", True)


def test_unreachable_archive_is_named(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"), controlStreamId=4242, messageTimeout="1s")
    messages, _ = stage_batch(options, 0)
    with pytest.raises(SinkError, match="controlStreamId=4242"):
        commit_batch(options, messages, 0, "0", True)
    with pytest.raises(OptionError, match="recordingId"):
        sink_options(harness, str(tmp_path / "chk"), recordingId="x")


def test_a_checkpoint_of_another_target_is_refused(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"))
    messages, _ = stage_batch(options, 0)
    entry = commit_batch(options, messages, 0, "0", True)
    second = sink_options(harness, str(tmp_path / "chk2"), streamId=5002)
    messages, _ = stage_batch(second, 0)
    another = commit_batch(second, messages, 0, "0", True).recording_id
    other = sink_options(harness, str(tmp_path / "chk"), recordingId=another)
    messages, _ = stage_batch(other, 1)
    with pytest.raises(SinkError, match=f"recordingId={another} but sink log recording"):
        commit_batch(other, messages, 1, "1", True)
    assert sink_view(options).state.target.recording_id == entry.recording_id


def test_batch_writes_take_the_next_batch_id(harness, tmp_path):
    options = sink_options(harness, str(tmp_path / "chk"), streaming=False)
    first, rows0 = stage_batch(options, 0, label="wA")  # batch writes label their files with a write id
    e0 = commit_batch(options, first, None, "wA", False)
    second = stage(options, "wB", [[value_batch([b"x", b"y"])]])
    e1 = commit_batch(options, second, None, "wB", False)
    assert (e0.batch_id, e1.batch_id) == (0, 1)
    assert e1.start_position == e0.stop_position
    assert [e.batch_id for e in batch_map(options, streaming=False)] == [0, 1]
    streaming = sink_options(harness, str(tmp_path / "chk"), streaming=True)  # a stream has its own log
    messages, rows2 = stage_batch(streaming, 2)
    e2 = commit_batch(streaming, messages, 2, "2", True)
    assert e2.recording_id != e0.recording_id and [e.batch_id for e in batch_map(streaming)] == [2]



@pytest.mark.parametrize(
    "channel", ["aeron:ipc?term-length=65536", "aeron:udp?endpoint=localhost:24325|term-length=65536"]
)
def test_the_archive_records_a_session_before_its_publication_is_added(harness, tmp_path, monkeypatch, channel):
    # Aeron's order for an extend: ask the archive to record first, add the publication second. Over UDP the
    # publication's first setup frame then finds the archive's subscription (the other way round, the image links
    # only on the sender's setup retry, 100 ms later, twice per commit: the log and the target).
    from aeron_archive_spark.archive.channel import ChannelUri
    from aeron_archive_spark.archive.native.client import AeronClient
    from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID

    options = sink_options(harness, str(tmp_path / "chk"), channel=channel)
    added: list[tuple[int, bool]] = []
    original = AeronClient.add_exclusive_publication

    def add_exclusive_publication(self, publication_channel, stream_id):
        if stream_id not in (options.stream_id, SINK_LOG_STREAM_ID):  # the control session's own publication
            return original(self, publication_channel, stream_id)
        session = int(ChannelUri.parse(publication_channel).get("session-id"))
        listed = harness.client.list_recording_subscriptions(0, 100, f"session-id={session}", stream_id, True)
        added.append((session, any(f"session-id={session}" in s.stripped_channel for s in listed)))
        return original(self, publication_channel, stream_id)

    monkeypatch.setattr(AeronClient, "add_exclusive_publication", add_exclusive_publication)
    expected = []
    for batch in range(2):
        messages, rows = stage_batch(options, batch)
        commit_batch(options, messages, batch, str(batch), True)
        expected += rows
    # batch 0: the new log, the new target; batch 1: the log's and the target's extends
    assert len(added) == 4 and all(subscribed for _, subscribed in added), added
    assert len({session for session, _ in added}) == 4
    entries = batch_map(options)
    assert replay_recording(harness.client, entries[-1].recording_id) == expected


def test_subscriptions_left_by_a_commit_that_died_before_its_publications_are_stopped(harness, tmp_path, caplog):
    # A commit killed between asking the archive to extend (the log, or the target after noting `pending` with its
    # session id) and adding the publication leaves archive subscriptions no publication will ever reach: the
    # next commit stops them, and recovers the batch as any interrupted one.
    from aeron_archive_spark.archive.channel import add_session_id
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
    from aeron_archive_spark.connector.sink.archive_ops import ArchiveOps, SignalLog, lease_archive, own_session_id
    from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID, log_alias, sink_identity, sink_key
    from aeron_archive_spark.connector.sink.log_lock import acquire
    from aeron_archive_spark.connector.sink.log_records import Pending

    options = sink_options(harness, str(tmp_path / "chk"))
    messages0, rows0 = stage_batch(options, 0)
    entry0 = commit_batch(options, messages0, 0, "0", True)
    target = harness.client.list_recording(entry0.recording_id)
    identity = sink_identity(True, options.checkpoint_location, None, None, None)
    key = sink_key(identity)
    target_session, log_session = own_session_id(), own_session_id()
    signals = SignalLog()
    lease, archive = lease_archive(options.connection, signals, True)
    with lease:
        ops = ArchiveOps(archive, signals, options)
        held = acquire(ops, key, identity, options.channel, 30)
        held.append(Pending(1, target.recording_id, target.stop_position, 0, target_session).to_json())
        archive.extend_recording(
            target.recording_id,
            add_session_id(AeronArchive.extend_channel(options.channel, target), target_session),
            target.stream_id, ops.source_location, auto_stop=True,
        )
        held.release()
        log_descriptor = archive.list_recording(held.recording_id)
        archive.extend_recording(
            held.recording_id,
            add_session_id(AeronArchive.extend_channel(log_descriptor.original_channel, log_descriptor), log_session),
            SINK_LOG_STREAM_ID, ops.source_location, auto_stop=True,
        )

    def left(fragment, stream_id):
        return [s for s in harness.client.list_recording_subscriptions(0, 100, fragment, stream_id, True)]

    assert len(left(f"session-id={target_session}", options.stream_id)) == 1
    assert len(left(f"alias={log_alias(key)}", SINK_LOG_STREAM_ID)) == 1
    messages1, rows1 = stage_batch(options, 1)
    with caplog.at_level(logging.WARNING, logger="aeron_archive_spark.connector.sink.archive_ops"):
        commit_batch(options, messages1, 1, "1", True)
    assert caplog.text.count("left by a commit that died before its publication existed") == 2
    assert left(f"session-id={target_session}", options.stream_id) == []
    assert left(f"alias={log_alias(key)}", SINK_LOG_STREAM_ID) == []
    assert replay_recording(harness.client, target.recording_id) == rows0 + rows1
    assert [e.batch_id for e in batch_map(options)] == [0, 1]


def test_an_archive_out_of_storage_fails_the_commit_at_once(harness, tmp_path, monkeypatch):
    # Waiting for another committer to release the sink's log cannot cure a full disk: the commit fails at once,
    # naming the refusal, instead of retrying for the lock timeout (10 minutes).
    import collections

    from aeron_archive_spark.archive.server import conductor

    options = sink_options(harness, str(tmp_path / "chk"))
    messages, _ = stage_batch(options, 0)
    commit_batch(options, messages, 0, "0", True)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(conductor.shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 0))
    messages, _ = stage_batch(options, 1)
    started = time.monotonic()
    with pytest.raises(SinkError, match="STORAGE_SPACE"):
        commit_batch(options, messages, 1, "1", True)
    assert time.monotonic() - started < 60  # not the 600 s lock timeout
    monkeypatch.undo()
    commit_batch(options, messages, 1, "1", True)
    assert [e.batch_id for e in batch_map(options)] == [0, 1]


def test_stopping_leftover_subscriptions_is_best_effort(harness, tmp_path, caplog):
    # A commit that holds the log must not fail (and retry for the lock it already holds) because the cleanup's
    # listing failed: it logs and goes on.
    from aeron_archive_spark.archive.exceptions import ArchiveTimeoutError, ErrorCode
    from aeron_archive_spark.connector.sink.archive_ops import ArchiveOps, SignalLog

    class Unanswered:
        def list_recording_subscriptions(self, *args):
            raise ArchiveTimeoutError("no response to ListRecordingSubscriptionsRequest", ErrorCode.GENERIC, 7)

    ops = ArchiveOps(Unanswered(), SignalLog(), sink_options(harness, str(tmp_path / "chk")))
    with caplog.at_level(logging.WARNING, logger="aeron_archive_spark.connector.sink.archive_ops"):
        assert ops.stop_orphans(5001, session_id=1234) == 0
    assert "could not list recording subscriptions (session-id=1234 stream 5001)" in caplog.text


@pytest.mark.parametrize("which", ["target", "log"])
def test_a_commit_killed_between_its_record_request_and_its_publication_leaves_nothing_behind(
    harness, tmp_path, which, caplog
):
    # kill -9 (os._exit) of the committing process right after it asked the archive to record (the target's
    # extend, or the sink log's) and before its publication exists: the next commit stops the subscription left
    # behind and commits the batch exactly once.
    from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID, log_alias, sink_identity, sink_key

    options = sink_options(harness, str(tmp_path / "chk"))
    messages0, rows0 = stage_batch(options, 0)
    entry0 = commit_batch(options, messages0, 0, "0", True)
    stream = options.stream_id if which == "target" else SINK_LOG_STREAM_ID
    key = sink_key(sink_identity(True, str(tmp_path / "chk"), None, None, None))
    fragment = "" if which == "target" else f"alias={log_alias(key)}"

    def left():
        return harness.client.list_recording_subscriptions(0, 100, fragment, stream, True)

    assert left() == []
    messages1, rows1 = stage_batch(options, 1)
    faults.arm({"point": "after-record-request", "action": "exit", "streamId": stream})
    assert commit_in_child(options, messages1, 1) == 17
    [orphan] = left()
    if which == "target":
        assert f"session-id={sink_view(options).state.pending.session_id}" in orphan.stripped_channel
    with caplog.at_level(logging.WARNING, logger="aeron_archive_spark.connector.sink.archive_ops"):
        commit_batch(options, messages1, 1, "1", True)
    assert "left by a commit that died before its publication existed" in caplog.text
    assert left() == []
    assert [e.batch_id for e in batch_map(options)] == [0, 1]
    assert replay_recording(harness.client, entry0.recording_id) == rows0 + rows1
