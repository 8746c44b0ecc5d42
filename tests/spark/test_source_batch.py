"""`spark.read.format("aeron-archive")` against a real archive: rows equal what was published."""

from __future__ import annotations

import os

import pytest

from system.harness import SMALL_TERM, Harness, payloads_of
from spark.test_source_support import Recorder, rows_of, source_options

SIZES = [0, 1, 12, 13, 31, 100, 1000, 1376, 1377, 5000, 8000, 64, 0, 2048]


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def read(spark, options):
    reader = spark.read.format("aeron-archive")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_batch_read_returns_every_message_in_order_with_its_position_and_header_columns(spark, harness, path):
    rec = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}", 1001)
    rec.publish(payloads_of(SIZES * 12), reserved=1_000)  # several 64 KiB terms and 128 KiB segments
    df = read(spark, source_options(harness, remote=path == "replay", recordingId=rec.recording_id,
                                    maxBytesPerPartition="64k"))
    assert df.schema.simpleString() == ("struct<recordingId:bigint,position:bigint,sessionId:int,streamId:int,"
                                        "reservedValue:bigint,value:binary,timestamp:timestamp>")
    assert df.rdd.getNumPartitions() > 3
    rows = df.collect()
    assert [(r.position, bytes(r.value)) for r in rows] == rec.messages  # order, bytes and positions
    assert [r.reservedValue for r in rows] == rec.reserved
    descriptor = harness.client.list_recording(rec.recording_id)
    assert {(r.recordingId, r.sessionId, r.streamId) for r in rows} == {
        (rec.recording_id, descriptor.session_id, 1001)}


def test_batch_read_of_two_recordings_with_starting_and_ending_positions(spark, harness):
    a = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}", 1001)
    b = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}|alias=b", 1002)
    a.publish(payloads_of([100] * 50, seed=1))
    b.publish(payloads_of([300] * 40, seed=2))
    start_a, end_b = a.messages[10][0], b.messages[30][0]
    df = read(spark, source_options(
        harness, recordingIds=f"{b.recording_id},{a.recording_id}",
        startingPosition=f'{{"{a.recording_id}": {start_a}}}', endingPosition=f'{{"{b.recording_id}": {end_b}}}'))
    expected = sorted([(a.recording_id, p, v) for p, v in a.messages[10:]]
                      + [(b.recording_id, p, v) for p, v in b.messages[:30]])
    assert rows_of(df) == expected


def test_fragmented_messages_spanning_many_frames_across_terms_segments_and_partitions(spark, aeron_dir, tmp_path):
    """300 KiB messages: ~220 frames each (a message can be at most term/8, so 4 MiB terms; segments of 8 MiB)."""
    h = Harness(aeron_dir, str(tmp_path / "archive"), segment_file_length=8 << 20)
    try:
        rec = Recorder(h, "aeron:ipc?term-length=4m", 1001)
        sizes = [300 * 1024, 7, 300 * 1024 - 1, 0, 299 * 1024 + 5] * 5
        rec.publish(payloads_of(sizes, seed=5))
        df = read(spark, source_options(h, recordingId=rec.recording_id, maxBytesPerPartition="1k"))
        assert df.rdd.getNumPartitions() >= 2
        assert [(r.position, bytes(r.value)) for r in df.collect()] == rec.messages
    finally:
        h.close()


def test_fragmented_messages_larger_than_the_mtu_across_terms(spark, aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), segment_file_length=2 << 20)
    try:
        rec = Recorder(h, "aeron:ipc?term-length=1m", 1001)
        sizes = [128 * 1024, 5, 100_000, 0, 131_000] * 6  # up to term/8, 90+ frames each, ~2.5 terms
        rec.publish(payloads_of(sizes, seed=5))
        df = read(spark, source_options(h, recordingId=rec.recording_id, maxBytesPerPartition="1k"))
        assert df.rdd.getNumPartitions() >= 3
        assert [(r.position, bytes(r.value)) for r in df.collect()] == rec.messages
    finally:
        h.close()


def test_offline_read_of_a_closed_archive_and_of_a_legacy_catalog(spark, aeron_dir, tmp_path):
    from aeron_archive_spark.archive.storage.catalog import Catalog
    from unit.storage_helpers import write_legacy_catalog

    archive_dir = str(tmp_path / "archive")
    h = Harness(aeron_dir, archive_dir)
    rec = Recorder(h, f"aeron:ipc?term-length={SMALL_TERM}", 1001)
    rec.publish(payloads_of(SIZES * 4))
    rec.stop()
    h.close()  # no server from here on
    options = {"archiveDir": archive_dir, "channel": "aeron:ipc", "streamId": "1001"}
    assert [(r.position, bytes(r.value)) for r in read(spark, options).collect()] == rec.messages
    assert read(spark, {**options, "streamId": "1002"}).count() == 0  # no matching recording: empty, no error

    with Catalog(archive_dir, writable=False) as catalog:
        descriptors = list(catalog.descriptors())
    os.remove(os.path.join(archive_dir, "archive.catalog"))
    write_legacy_catalog(archive_dir, descriptors)  # the pre-1.32 fixed 1 KiB layout
    options = {"archiveDir": archive_dir, "recordingId": str(rec.recording_id)}
    assert [(r.position, bytes(r.value)) for r in read(spark, options).collect()] == rec.messages


def test_batch_errors_name_the_recording_or_the_archive_before_reading(spark, harness, tmp_path):
    rec = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}", 1001)
    rec.publish(payloads_of([10] * 3))
    with pytest.raises(Exception, match="recording 42 not found in the archive directory"):
        read(spark, source_options(harness, recordingId=42)).collect()
    with pytest.raises(Exception, match=f"endingPosition 999968 of recording {rec.recording_id} is past its current "
                                        "end"):
        read(spark, source_options(harness, recordingId=rec.recording_id,
                                   endingPosition=f'{{"{rec.recording_id}": 999968}}')).collect()
    with pytest.raises(Exception, match="cannot reach the archive on controlChannel=aeron:udp\\?endpoint=localhost:1"):
        read(spark, {"aeronDir": harness.aeron_dir, "controlChannel": "aeron:udp?endpoint=localhost:1",
                     "messageTimeout": "300ms", "recordingId": "0"}).collect()
    with pytest.raises(Exception, match="option archiveDir: no archive.catalog in"):
        read(spark, {"archiveDir": str(tmp_path), "recordingId": "0"}).collect()
