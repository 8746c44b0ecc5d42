"""The streaming reader's planning logic without Spark, on a real archive directory."""

from __future__ import annotations

import json
import pickle
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from aeron_archive_spark.connector.source.batch_reader import DataLossError
from aeron_archive_spark.connector.source.schema import FIXED_FIELDS
from aeron_archive_spark.connector.source.stream_reader import AeronArchiveStreamReader, share_budget
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness, payloads_of

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def reader(h: Harness, **options) -> AeronArchiveStreamReader:
    return AeronArchiveStreamReader({k.lower(): v for k, v in source_options(h, **options).items()}, FIXED_FIELDS)


def drain(r: AeronArchiveStreamReader, start: dict, limit=None) -> tuple[list[tuple[int, int, bytes]], int, dict]:
    """Run micro-batches until no new data: (rows, batch count, last offset)."""
    rows, batches = [], 0
    limit = limit or r.getDefaultReadLimit()
    while True:
        end = r.latestOffset(start, limit)
        if end == start:
            return rows, batches, start
        batches += 1
        planned = r.partitions(start, end)
        assert r.partitions(start, end) == planned  # pure
        executor = pickle.loads(pickle.dumps(r))
        for p in planned:
            for batch in executor.read(p):
                rows += zip(batch.column("recordingId").to_pylist(), batch.column("position").to_pylist(),
                            batch.column("value").to_pylist())
        r.commit(end)
        start = end


def test_share_budget_is_fair_and_gives_small_needs_in_full():
    assert share_budget({1: 100, 2: 100}, 100) == {1: 50, 2: 50}
    assert share_budget({1: 10, 2: 1000, 3: 1000}, 300) == {1: 10, 2: 145, 3: 145}
    assert sum(share_budget({1: 7, 2: 9, 3: 1 << 30}, 1000).values()) == 1000


def test_initial_offset_is_memoized_and_max_bytes_cuts_at_message_boundaries(harness):
    a = Recorder(harness, CHANNEL, 1001)
    b = Recorder(harness, CHANNEL + "|alias=b", 1002)
    a.publish(payloads_of([1000, 3000, 10] * 20, seed=1))
    b.publish(payloads_of([64] * 300, seed=2))
    r = reader(harness, recordingIds=f"{b.recording_id},{a.recording_id}", maxBytesPerTrigger="6k")
    initial = r.initialOffset()
    assert r.initialOffset() is initial
    assert list(initial) == sorted(initial, key=int) and json.dumps(initial) == json.dumps(r.initialOffset())
    assert r.getDefaultReadLimit() == ReadMaxBytes(6 * 1024)
    starts_a = {p for p, _ in a.messages} | {a.position}
    starts_b = {p for p, _ in b.messages} | {b.position}
    start = initial
    for _ in range(5):
        end = r.latestOffset(start, ReadMaxBytes(6 * 1024))
        moved = {k: end[k] - start[k] for k in end}
        assert all(0 < m <= 6 * 1024 for m in moved.values())  # both progress, shared budget
        assert end[str(a.recording_id)] in starts_a and end[str(b.recording_id)] in starts_b
        assert r.reportLatestOffset() == {str(a.recording_id): a.position, str(b.recording_id): b.position}
        start = end
    rows, batches, last = drain(r, initial)
    assert sorted(rows) == sorted([(a.recording_id, p, v) for p, v in a.messages]
                                  + [(b.recording_id, p, v) for p, v in b.messages])
    assert batches > 10 and last == {str(a.recording_id): a.position, str(b.recording_id): b.position}


def test_a_message_larger_than_the_budget_still_makes_progress(harness):
    rec = Recorder(harness, CHANNEL, 1001)
    rec.publish(payloads_of([8000, 8000, 10], seed=3))
    r = reader(harness, recordingId=rec.recording_id, maxBytesPerTrigger="1k")
    rows, batches, _ = drain(r, r.initialOffset())
    assert [(p, v) for _, p, v in rows] == rec.messages and batches == 3


def test_min_bytes_waits_for_enough_data_or_the_delay(harness):
    rec = Recorder(harness, CHANNEL, 1001)
    r = reader(harness, recordingId=rec.recording_id, minBytesPerTrigger="4k", maxTriggerDelay="400ms")
    start = r.initialOffset()
    rec.publish(payloads_of([100] * 5))
    assert r.latestOffset(start, ReadAllAvailable()) == start  # 660 bytes < 4 KiB: wait
    rec.publish(payloads_of([1000] * 5))
    assert r.latestOffset(start, ReadAllAvailable()) == {str(rec.recording_id): rec.position}
    start = {str(rec.recording_id): rec.position}
    rec.publish(payloads_of([100]))
    assert r.latestOffset(start, ReadAllAvailable()) == start
    time.sleep(0.45)
    assert r.latestOffset(start, ReadAllAvailable()) == {str(rec.recording_id): rec.position}  # delay passed


def test_available_now_never_goes_past_the_end_seen_when_prepared(harness):
    # A stream of this test's own: the reader lists every recording of (channel, stream), and a publication an
    # earlier test closed on the shared driver may still be draining on 1001 and be recorded too.
    rec = Recorder(harness, CHANNEL, 1077)
    rec.publish(payloads_of([500] * 30))
    r = reader(harness, channel="aeron:ipc", streamId=1077, maxBytesPerTrigger="2k")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    target = rec.position
    rec.publish(payloads_of([500] * 30, seed=4))
    late = Recorder(harness, CHANNEL, 1077, start=False)  # a recording that starts after the target was fixed
    late.publish(payloads_of([10] * 3))
    rows, batches, last = drain(r, start)
    assert last == {str(rec.recording_id): target} and batches >= 5
    assert {row[0] for row in rows} == {rec.recording_id}


def test_purged_recording_fails_or_is_dropped_depending_on_fail_on_data_loss(harness):
    rec = Recorder(harness, CHANNEL, 1001)
    rec.publish(payloads_of([100] * 10))
    rec.stop()
    strict = reader(harness, recordingId=rec.recording_id)
    lenient = reader(harness, recordingId=rec.recording_id, failOnDataLoss="false")
    start = {str(rec.recording_id): rec.messages[3][0]}
    harness.client.purge_recording(rec.recording_id)
    with pytest.raises(DataLossError, match=rf"recording {rec.recording_id} no longer exists .*checkpointed "
                                            rf"position {rec.messages[3][0]}"):
        strict.latestOffset(start, ReadAllAvailable())
    with pytest.raises(DataLossError, match=f"recording {rec.recording_id} no longer exists"):
        strict.partitions(start, {str(rec.recording_id): rec.position})
    assert lenient.latestOffset(start, ReadAllAvailable()) == {}
    assert lenient.partitions(start, {}) == []
