"""The remote read path (bounded replays through a running archive) gives the same rows as reading archiveDir."""

from __future__ import annotations

import pytest

from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness, payloads_of

pytestmark = pytest.mark.spark

COLUMNS = ["recordingId", "position", "sessionId", "streamId", "reservedValue", "value"]


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def rows(spark, options: dict[str, str]) -> list[tuple]:
    df = spark.read.format("aeron-archive").options(**options).load()
    return sorted(tuple(r) for r in df.select(*COLUMNS).collect())


def test_archive_dir_and_running_archive_give_identical_rows(spark, harness):
    recorder = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}", 4201)
    # unfragmented and fragmented messages (max payload 1376 B, max message 8 KiB on 64 KiB terms), ~12 terms, padding at term ends
    recorder.publish(payloads_of([0, 1, 100, 1377, 4000, 8000, 33, 8192] * 40, seed=21))
    stop = recorder.stop()
    common = {"recordingId": recorder.recording_id, "maxBytesPerPartition": "128k"}
    from_disk = rows(spark, source_options(harness, **common))
    over_ipc = rows(spark, source_options(harness, remote=True, **common))
    over_udp = rows(spark, source_options(harness, remote=True, replayChannel="aeron:udp?endpoint=localhost:0",
                                          **common))
    assert len(from_disk) == len(recorder.messages) and stop > 8 * SMALL_TERM
    assert [(r[1], bytes(r[5])) for r in from_disk] == recorder.messages
    assert over_ipc == from_disk
    assert over_udp == from_disk
    assert not harness.archive.conductor._replays


def test_pads_in_the_middle_of_terms_read_alike_on_both_paths(spark, harness):
    """PADs wherever a publisher's appendPadding left them (issue 30): between messages, longer than a chunk's rest,
    two in a row, at the end; small partitions so ranges start and end next to them."""
    recorder = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}", 4202)
    publication = recorder.publication
    payloads = payloads_of([1, 100, 1377, 600, 4000, 33] * 40, seed=22)
    for i in range(0, len(payloads), 10):
        recorder.publish(payloads[i:i + 10], wait=False)
        for length in (200,) if i % 30 else (200, 8192, 0):
            while publication.append_padding(length) <= 0:
                pass
    stop = recorder.stop()
    common = {"recordingId": recorder.recording_id, "maxBytesPerPartition": "16k"}
    from_disk = rows(spark, source_options(harness, **common))
    over_ipc = rows(spark, source_options(harness, remote=True, **common))
    over_udp = rows(spark, source_options(harness, remote=True, replayChannel="aeron:udp?endpoint=localhost:0",
                                          **common))
    assert stop > 4 * SMALL_TERM
    assert [(r[1], bytes(r[5])) for r in from_disk] == recorder.messages
    assert over_ipc == from_disk
    assert over_udp == from_disk
    assert not harness.archive.conductor._replays
