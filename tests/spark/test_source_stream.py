"""`spark.readStream.format("aeron-archive")` against a real archive: tailing, limits, restarts, data loss."""

from __future__ import annotations

import glob
import json
import os
import threading
import time

import pytest

from aeron_archive_spark.connector.listener import BytesBehindListener
from system.harness import SMALL_TERM, Harness, payloads_of, wait_for
from spark.test_source_support import Recorder, source_options

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


class Collector:
    """foreachBatch target, idempotent per batch id (a replayed batch overwrites its first attempt)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int, bytes]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = [(r.recordingId, r.position, bytes(r.value)) for r in df.collect()]
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]

    def count(self) -> int:
        return len(self.rows())


def stream(spark, options, collector, checkpoint, **trigger):
    reader = spark.readStream.format("aeron-archive")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint))
            .trigger(**(trigger or {"processingTime": "150 milliseconds"})).start())


def expected_rows(*recorders: Recorder) -> list[tuple[int, int, bytes]]:
    return sorted((r.recording_id, p, v) for r in recorders for p, v in r.messages)


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_live_recording_is_tailed_in_many_size_limited_batches(spark, harness, tmp_path, path):
    rec = Recorder(harness, CHANNEL, 1001)
    rec.publish(payloads_of([200] * 20))
    collector = Collector()
    # archiveDir + aeronDir: the live end comes from the rec-pos counter on this host's driver
    options = source_options(harness, remote=path == "replay", recordingId=rec.recording_id,
                             maxBytesPerTrigger="4k", aeronDir=harness.aeron_dir)
    query = stream(spark, options, collector, tmp_path / "cp")
    try:
        for i in range(4):  # the recording grows while the query runs
            rec.publish(payloads_of([200, 3000, 0, 700] * 2, seed=i))
            time.sleep(0.3)
        wait_for(lambda: collector.count() >= len(rec.messages), timeout=60, what="all rows")
        query.processAllAvailable()
    finally:
        query.stop()
    assert collector.rows() == expected_rows(rec)
    assert len([b for b in collector.batches.values() if b]) >= 8  # 4 KiB per trigger over ~36 KiB
    for progress in query.recentProgress:
        if progress["numInputRows"]:
            source = progress["sources"][0]
            end = json.loads(source["endOffset"])
            assert list(end) == [str(rec.recording_id)]
            assert json.loads(source["latestOffset"])[str(rec.recording_id)] >= end[str(rec.recording_id)]


def test_restart_from_checkpoint_after_stopping_mid_stream_gives_every_message_exactly_once(spark, harness, tmp_path):
    rec = Recorder(harness, CHANNEL, 1001)
    rec.publish(payloads_of([300, 7, 2000] * 10))
    collector = Collector()
    options = source_options(harness, recordingId=rec.recording_id, maxBytesPerTrigger="8k",
                             startingPosition="latest")
    checkpoint = tmp_path / "cp"
    start_position = rec.position
    query = stream(spark, options, collector, checkpoint)
    wait_for(lambda: query.lastProgress is not None, timeout=60, what="first progress")
    rec.publish(payloads_of([300, 7, 2000] * 20, seed=3))  # ~48 KiB after the starting position
    wait_for(lambda: len(collector.batches) >= 3, timeout=60, what="a few batches")
    query.stop()  # mid-stream
    assert collector.count() < len([m for m in rec.messages if m[0] >= start_position])
    commits = sorted(glob.glob(str(checkpoint / "commits" / "*")), key=lambda p: int(os.path.basename(p)))
    # As if the query died after the sink ran but before Spark committed: that batch is replayed on restart.
    os.remove(commits[-1])
    crc = os.path.join(os.path.dirname(commits[-1]), f".{os.path.basename(commits[-1])}.crc")
    if os.path.exists(crc):
        os.remove(crc)

    query = stream(spark, {**options, "startingPosition": "earliest"}, collector, checkpoint)  # ignored on restart
    try:
        wait_for(lambda: collector.count() >= len([m for m in rec.messages if m[0] >= start_position]),
                 timeout=90, what="all rows after restart")
        query.processAllAvailable()
    finally:
        query.stop()
    got = collector.rows()
    assert got == [(rec.recording_id, p, v) for p, v in rec.messages if p >= start_position]
    assert len({row[1] for row in got}) == len(got)


def test_available_now_reads_up_to_the_end_seen_at_start_in_several_batches(spark, harness, tmp_path):
    rec = Recorder(harness, CHANNEL, 1001)
    rec.publish(payloads_of([500] * 100))
    before, end_before = list(rec.messages), rec.position
    published_later = []

    collector = Collector()

    def sink(df, batch_id):
        collector(df, batch_id)
        if batch_id == 0:  # data recorded after the query started must wait for the next run
            published_later.extend(rec.publish(payloads_of([64] * 50, seed=9)))

    options = source_options(harness, recordingId=rec.recording_id, maxBytesPerTrigger="10k",
                             aeronDir=harness.aeron_dir)
    lags: list[tuple[int, dict[int, int]]] = []
    listener = BytesBehindListener(lambda query_id, batch_id, behind: lags.append((batch_id, behind)))
    spark.streams.addListener(listener)
    try:
        query = stream(spark, options, sink, tmp_path / "cp", availableNow=True)
        assert query.awaitTermination(120)
        assert published_later
        assert collector.rows() == [(rec.recording_id, p, v) for p, v in before]
        assert len(collector.batches) >= 5  # ~53 KiB in 10 KiB triggers
        wait_for(lambda: len(lags) >= len(collector.batches), timeout=30, what="progress events")
    finally:
        spark.streams.removeListener(listener)
    behind = [lag[rec.recording_id] for _, lag in sorted(lags)]
    assert behind[0] > 0
    # the run stops at the end seen at its start: what was recorded later is still behind
    assert behind[-1] == rec.position - end_before
    assert listener.behind(query.id)[rec.recording_id] == behind[-1]

    query = stream(spark, options, collector, tmp_path / "cp", availableNow=True)  # the next run takes the rest
    assert query.awaitTermination(120)
    assert collector.rows() == [(rec.recording_id, p, v) for p, v in rec.messages]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_truncation_below_the_checkpoint(spark, harness, tmp_path, fail_on_data_loss):
    rec = Recorder(harness, CHANNEL, 1001)
    rec.publish(payloads_of([1000] * 100))
    stop = rec.stop()
    options = source_options(harness, recordingId=rec.recording_id,
                             failOnDataLoss=str(fail_on_data_loss).lower())
    collector = Collector()
    query = stream(spark, options, collector, tmp_path / "cp", availableNow=True)
    assert query.awaitTermination(120)
    assert collector.count() == 100

    truncated = rec.messages[40][0]
    harness.client.truncate_recording(rec.recording_id, truncated)
    trigger = {"availableNow": True} if fail_on_data_loss else {"once": True}  # Trigger.Once works too
    query = stream(spark, options, collector, tmp_path / "cp", **trigger)
    if fail_on_data_loss:
        with pytest.raises(Exception) as failure:
            query.awaitTermination(120)
        message = str(failure.value)
        assert f"recording {rec.recording_id} was truncated" in message
        assert str(truncated) in message and str(stop) in message
    else:
        assert query.awaitTermination(120)
        assert query.exception() is None
        last = [p for p in query.recentProgress if p["sources"]][-1]["sources"][0]
        assert json.loads(last["endOffset"]) == {str(rec.recording_id): truncated}
        assert collector.count() == 100  # nothing read twice


def test_new_recordings_on_a_subscribed_channel_are_picked_up(spark, harness, tmp_path):
    first = Recorder(harness, CHANNEL, 1001)
    first.publish(payloads_of([100] * 10))
    collector = Collector()
    options = source_options(harness, channel="aeron:ipc", streamId=1001)
    query = stream(spark, options, collector, tmp_path / "cp")
    try:
        wait_for(lambda: collector.count() >= 10, timeout=60, what="first recording's rows")
        second = Recorder(harness, CHANNEL, 1001, start=False)  # a new session: a new recording
        second.publish(payloads_of([50] * 15, seed=4))
        first.publish(payloads_of([70] * 5, seed=5))
        wait_for(lambda: collector.count() >= 30, timeout=60, what="rows of both recordings")
        query.processAllAvailable()
    finally:
        query.stop()
    assert second.recording_id != first.recording_id
    assert sorted(collector.rows()) == expected_rows(first, second)
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert list(end) == sorted(end, key=int)  # keys always in ascending recording id order


def test_streaming_errors_name_the_option_or_recording(spark, harness, tmp_path):
    with pytest.raises(Exception, match="unknown option 'maxoffsetspertrigger' .*did you mean maxBytesPerTrigger"):
        spark.readStream.format("aeron-archive").option("archiveDir", harness.ctx.archive_dir) \
            .option("recordingId", "0").option("maxOffsetsPerTrigger", "5").load()
    with pytest.raises(Exception, match="option maxBytesPerTrigger: expected a byte size"):
        spark.readStream.format("aeron-archive").option("archiveDir", harness.ctx.archive_dir) \
            .option("recordingId", "0").option("maxBytesPerTrigger", "5 parsecs").load()
    query = stream(spark, source_options(harness, recordingId=77), Collector(), tmp_path / "cp")
    with pytest.raises(Exception, match="recording 77 not found in the archive directory"):
        query.awaitTermination(60)
