"""A Spark streaming query tailing a live recording whose archive keeps it within a size (retention): with
failOnDataLoss=false it goes on from each new start; every row it gives is the message recorded at that position,
none twice, in order, and everything still retained at the end is read."""

from __future__ import annotations

import pytest
from spark.test_source_stream import Collector, stream
from spark.test_source_support import source_options
from system.harness import SMALL_SEGMENT, Harness
from system.test_retention import LIVES, Live

from aeron_archive_spark.archive.server.retention import RetentionLimits

pytestmark = pytest.mark.spark


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), retention=RetentionLimits(max_bytes=3 * SMALL_SEGMENT),
                retention_check_interval_ms=50)
    yield h
    while LIVES:
        LIVES.pop().publication.close()
    h.close()


@pytest.mark.parametrize("remote", [False, True], ids=["archiveDir", "replay"])
def test_a_query_tails_a_live_recording_under_retention(spark, harness, tmp_path, remote):
    live = Live(harness, 7701 + int(remote))
    live.publish(200)
    options = source_options(harness, remote=remote, recordingId=live.recording_id, maxBytesPerTrigger="64k",
                             failOnDataLoss="false")
    collector = Collector()
    query = stream(spark, options, collector, tmp_path / "cp")
    try:
        for _ in range(6):  # ~1.8 MB while the query runs: retention cuts the start many times
            live.publish(300)
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    rows = collector.rows()
    published = dict(live.messages)
    positions = [p for _, p, _ in rows]
    assert positions == sorted(set(positions))  # in order, none twice
    assert all(published[p] == v for _, p, v in rows)  # each row is the message recorded there
    start = live.start()
    assert start > 0 and harness.archive.conductor.retention.purges >= 2
    assert [p for p, _ in live.messages if p >= start] == [p for p in positions if p >= start]  # all retained read
    assert len(rows) < len(live.messages)  # the query fell behind the retention: data was lost under it
