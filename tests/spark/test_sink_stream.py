"""`writeStream.format("aeron-archive")` end to end: exactly once across crashes, restarts and re-commits.

The input is Spark's `rate-micro-batch` source: batch b holds the longs [b*R, (b+1)*R), spread over the
partitions round-robin (partition p: b*R + p, b*R + p + P, ...), and a replayed batch holds the same rows. So the
recording's exact expected content follows from the sink's batch map alone: for each committed batch, partition
0's rows, then partition 1's, each as `str(n)` with reserved value n. Reading back goes through a real replay
with the Python client.
"""

from __future__ import annotations

import glob
import os
import random
import time

import pytest
from system.harness import Harness, wait_for
from system.test_sink_util import replay_range, sink_option_map, sink_options, sink_view

from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.connector.sink import faults, read_batch_map
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID
from aeron_archive_spark.connector.sink.log_store import SinkView

pytestmark = pytest.mark.spark

ROWS_PER_BATCH = 40
PARTITIONS = 2
SINK_STREAM_ID = 5001  # sink_option_map's target stream


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def expected_rows(batch_id: int, rows: int = ROWS_PER_BATCH, partitions: int = PARTITIONS) -> list[tuple[bytes, int]]:
    base = batch_id * rows
    ordered = [base + i for p in range(partitions) for i in range(p, rows, partitions)]
    return [(str(n).encode(), n) for n in ordered]


def start_query(spark, harness, checkpoint: str, rows: int = ROWS_PER_BATCH, **extra: str):
    frame = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows)
             .option("numPartitions", PARTITIONS).load()
             .selectExpr("CAST(value AS STRING) AS value", "value AS reservedValue"))
    writer = frame.writeStream.format("aeron-archive").option("checkpointLocation", checkpoint)
    for key, value in sink_option_map(harness, None, **extra).items():
        writer = writer.option(key, value)
    return writer.trigger(processingTime="0 seconds").start()


def run_batches(query, until_batch: int, timeout: float = 120.0) -> None:
    """Let the query run until it has committed `until_batch` (or failed); then stop it."""
    deadline = time.monotonic() + timeout
    try:
        while query.isActive and time.monotonic() < deadline:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] >= until_batch:
                break
            time.sleep(0.05)
    finally:
        query.stop()


def view_of(harness, checkpoint: str) -> SinkView:
    """The sink's state, read from its log in the archive as any host would (the checkpoint string names it)."""
    return sink_view(sink_options(harness, checkpoint))


def sink_entries(harness, checkpoint: str) -> list:
    """The sink's batch map; empty if no commit ever created its log."""
    try:
        return view_of(harness, checkpoint).entries or []
    except SinkError as ex:
        assert "no sink log" in str(ex), ex
        return []


def committed_spark_batches(checkpoint: str) -> list[int]:
    return sorted(int(os.path.basename(p)) for p in glob.glob(os.path.join(checkpoint, "commits", "[0-9]*")))


def assert_exactly_once(harness, checkpoint: str) -> int:
    """The recording holds each committed batch's rows exactly once, in order; returns the batches checked.

    Also: the public reader sees the same batch map, the sink log is released (stopped) and is the only other
    recording the sink made, and nothing else (a failed attempt's or a crashed commit's data) is on the sink's
    stream.
    """
    options = sink_options(harness, checkpoint)
    view = sink_view(options)
    entries = view.entries
    assert entries, "no batch committed"
    assert read_batch_map(options.connection, checkpoint_location=checkpoint) == entries
    assert [e.batch_id for e in entries] == list(range(len(entries))), "batch ids must be contiguous from 0"
    assert set(committed_spark_batches(checkpoint)) <= {e.batch_id for e in entries}, \
        "a batch Spark considers committed is missing from the sink"
    assert all(a.stop_position == b.start_position for a, b in zip(entries, entries[1:]))
    pending = view.state.pending
    assert pending is None or pending.batch_id > entries[-1].batch_id
    recording_id = view.state.target.recording_id
    assert {e.recording_id for e in entries} == {recording_id}
    assert [d.recording_id for d in harness.client.list_recordings_for_uri(0, 1000, "", SINK_STREAM_ID)] == \
        [recording_id], "a recording other than the target on the sink's stream"
    log_descriptor = harness.client.list_recording(view.log_recording_id)
    assert log_descriptor.stream_id == SINK_LOG_STREAM_ID and view.log_recording_id != recording_id
    # released: at once after a commit, or once the archive sees a dead committer's publication go
    wait_for(lambda: harness.client.get_stop_position(view.log_recording_id) != -1, timeout=30,
             what="the sink log to be released after the query stopped")
    assert sorted(d.recording_id for d in harness.client.list_recordings()) == \
        sorted([recording_id, view.log_recording_id]), "the sink made a recording besides its target and log"
    got = replay_range(harness.client, recording_id, entries[0].start_position, entries[-1].stop_position)
    expected = [row for e in entries for row in expected_rows(e.batch_id)]
    assert len(got) == len(expected), f"{len(got)} rows recorded, {len(expected)} expected"
    assert got == expected
    stop = harness.client.get_stop_position(recording_id)
    assert stop == entries[-1].stop_position, "uncommitted data after the last committed batch"
    return len(entries)


def test_stream_writes_every_row_once_in_order(spark, harness, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    run_batches(start_query(spark, harness, checkpoint), until_batch=4)
    count = assert_exactly_once(harness, checkpoint)
    assert count >= 5
    # a restart continues the same recording, found again through the sink log in the archive (no recordingId)
    first = view_of(harness, checkpoint)
    recording_id = first.state.target.recording_id
    run_batches(start_query(spark, harness, checkpoint), until_batch=count + 1)
    assert assert_exactly_once(harness, checkpoint) >= count + 2
    again = view_of(harness, checkpoint)
    assert (again.state.target.recording_id, again.log_recording_id) == (recording_id, first.log_recording_id)
    assert [d.recording_id for d in harness.client.list_recordings_for_uri(0, 100, "", SINK_STREAM_ID)] == \
        [recording_id]

    # the source reads the same rows back, and the batch map tells which batch each position belongs to
    rows = (spark.read.format("aeron-archive").option("archiveDir", harness.ctx.archive_dir)
            .option("recordingId", recording_id).load().collect())
    entries = view_of(harness, checkpoint).entries
    assert [(bytes(r.value), r.reservedValue) for r in rows] == [row for e in entries for row in expected_rows(
        e.batch_id)]
    for row in rows:
        [entry] = [e for e in entries if e.start_position <= row.position < e.stop_position]
        assert entry.batch_id == row.reservedValue // ROWS_PER_BATCH


def crash_rounds(spark, harness, checkpoint: str, rounds: int, seed: int) -> list[str]:
    """Run the query `rounds` times, each ending in a randomly chosen crash; returns what was done."""
    rng = random.Random(seed)
    done = []
    next_batch = 0
    for _ in range(rounds):
        mode = rng.choice(["fault", "fault", "stop", "commits"])
        if mode == "fault":
            point = rng.choice(["before-publish", "publish", "before-entry", "after-entry", "write"])
            spec = {"point": point, "action": rng.choice(["raise", "exit"]), "batchId": next_batch + rng.randint(0, 1)}
            if point in ("publish", "write"):
                spec["afterRows"] = rng.randint(1, ROWS_PER_BATCH // PARTITIONS)
            faults.arm(spec)
            done.append(f"{point}/{spec['action']}@{spec['batchId']}")
        query = start_query(spark, harness, checkpoint)
        if mode == "stop":  # stop abruptly at a random moment, maybe in the middle of a commit
            time.sleep(rng.uniform(0.5, 3.0))
            query.stop()
            done.append("stop")
        else:
            run_batches(query, until_batch=next_batch + rng.randint(1, 3), timeout=60)
        faults.disarm()
        if mode == "commits":  # a driver crash after the sink committed, before Spark wrote commits/N
            committed = committed_spark_batches(checkpoint)
            if committed:
                for name in (str(committed[-1]), f".{committed[-1]}.crc"):
                    path = os.path.join(checkpoint, "commits", name)
                    if os.path.exists(path):
                        os.remove(path)
                done.append(f"commits/{committed[-1]} deleted")
        entries = sink_entries(harness, checkpoint)
        next_batch = entries[-1].batch_id + 1 if entries else 0
    # a clean final run completes whatever is pending
    run_batches(start_query(spark, harness, checkpoint), until_batch=next_batch + 1)
    return done


def test_crashes_at_random_points_never_lose_or_duplicate_rows(spark, harness, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    done = crash_rounds(spark, harness, checkpoint, rounds=4, seed=11)
    count = assert_exactly_once(harness, checkpoint)
    print("crash rounds:", done, "batches:", count)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_crash_soak(spark, harness, tmp_path, seed):
    checkpoint = str(tmp_path / "checkpoint")
    done = crash_rounds(spark, harness, checkpoint, rounds=15, seed=seed)
    count = assert_exactly_once(harness, checkpoint)
    print(f"crash soak seed {seed}:", done, "batches:", count)
    assert count > 10


def test_crash_during_commit_is_truncated_and_redone(spark, harness, tmp_path):
    """A hard crash of the commit worker halfway through publishing: the restart truncates, then redoes."""
    checkpoint = str(tmp_path / "checkpoint")
    run_batches(start_query(spark, harness, checkpoint), until_batch=1)
    entries = sink_entries(harness, checkpoint)
    crash_batch = entries[-1].batch_id + 1
    faults.arm({"point": "publish", "afterRows": ROWS_PER_BATCH // 2, "action": "exit",
                           "batchId": crash_batch})
    query = start_query(spark, harness, checkpoint)
    wait_for(lambda: not query.isActive, timeout=60, what="the query to fail")
    assert query.exception() is not None
    assert not faults.armed(), "the crash fired"
    view = view_of(harness, checkpoint)  # the log is still held by the dead worker: read what it recorded
    pending = view.state.pending
    assert pending is not None and pending.batch_id == crash_batch
    recording_id = view.state.target.recording_id
    # half the batch is in the recording (still active: the dead worker's publication has not timed out yet)
    wait_for(lambda: harness.client.get_max_recorded_position(recording_id) > pending.start_position,
             what="partial batch recorded")
    run_batches(start_query(spark, harness, checkpoint), until_batch=crash_batch + 1)
    assert assert_exactly_once(harness, checkpoint) >= crash_batch + 1


def test_bad_input_fails_the_query_naming_the_column(spark, harness, tmp_path):
    frame = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
             .selectExpr("CAST(value AS STRING) AS value", "timestamp AS ts"))
    writer = frame.writeStream.format("aeron-archive").option("checkpointLocation", str(tmp_path / "c"))
    for key, value in sink_option_map(harness, None).items():
        writer = writer.option(key, value)
    query = writer.start()
    with pytest.raises(Exception, match="column 'ts' is not accepted by the aeron-archive sink"):
        query.awaitTermination(60)
    query.stop()
