"""`df.write.format("aeron-archive").mode("append")`: writes share their target's sink log, a crashed write is repaired by
the next, SBE-encoded writes, and bad input named in errors."""

from __future__ import annotations

import os

import pytest
from system.harness import Harness
from system.test_sink_util import SINK_CHANNEL, batch_map, replay_range, replay_recording, sink_option_map, \
    sink_options, sink_view

from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.connector.sink import faults, read_batch_map
from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID

pytestmark = pytest.mark.spark

EXAMPLE_SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "market_data.xml")
SINK_STREAM_ID = 5001  # sink_option_map's target stream


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def write(frame, harness, mode: str = "append", **extra) -> None:
    """A batch write: no checkpoint, the target (channel + streamId unless recordingId is given) names its sink."""
    writer = frame.write.format("aeron-archive").mode(mode)
    for key, value in sink_option_map(harness, None, **extra).items():
        writer = writer.option(key, value)
    writer.save()


def batch_options(harness, **extra):
    return sink_options(harness, None, streaming=False, **extra)


def numbers(spark, start: int, stop: int, partitions: int = 3):
    return spark.range(start, stop, 1, partitions).selectExpr("CAST(CAST(id AS STRING) AS BINARY) AS value", "id AS reservedValue")


def encoded(n: int) -> bytes:
    return str(n).encode()


def recordings_of_sink_stream(harness) -> list[int]:
    return [d.recording_id for d in harness.client.list_recordings_for_uri(0, 100, "", SINK_STREAM_ID)]


def test_batch_writes_append_to_one_recording(spark, harness, tmp_path):
    write(numbers(spark, 0, 1000), harness)
    write(numbers(spark, 1000, 1500, partitions=2), harness)
    options = batch_options(harness)
    view = sink_view(options, streaming=False)
    entries = view.entries
    assert [(e.batch_id, e.rows) for e in entries] == [(0, 1000), (1, 500)]
    assert read_batch_map(options.connection, channel=SINK_CHANNEL, stream_id=SINK_STREAM_ID) == entries
    recording_id = view.state.target.recording_id
    assert view.state.target.created_by_sink and view.state.target.kind == "batch" and view.state.pending is None
    assert replay_recording(harness.client, recording_id) == [(encoded(n), n) for n in range(1500)]
    second = replay_range(harness.client, recording_id, entries[1].start_position, entries[1].stop_position)
    assert [r for _, r in second] == list(range(1000, 1500))
    with pytest.raises(Exception, match=r"supports mode\('append'\) only"):
        write(numbers(spark, 0, 10), harness, mode="overwrite")
    # one target recording, one sink log (released), nothing else
    assert recordings_of_sink_stream(harness) == [recording_id]
    log = harness.client.list_recording(view.log_recording_id)
    assert log.stream_id == SINK_LOG_STREAM_ID and log.stop_position != -1
    assert sorted(d.recording_id for d in harness.client.list_recordings()) == sorted([recording_id, log.recording_id])


def test_batch_writes_to_a_recording_id_and_to_its_channel(spark, harness, tmp_path):
    write(numbers(spark, 0, 10, partitions=1), harness)
    [first] = recordings_of_sink_stream(harness)
    assert [r for _, r in replay_recording(harness.client, first)] == list(range(10))
    # a recordingId target is another sink (its own log and batch ids), extending the same recording
    write(numbers(spark, 10, 20, partitions=2), harness, recordingId=first)
    write(numbers(spark, 20, 25, partitions=2), harness, recordingId=first)
    by_id = sink_view(batch_options(harness, recordingId=first), streaming=False)
    assert [(e.batch_id, e.rows) for e in by_id.entries] == [(0, 10), (1, 5)]
    assert not by_id.state.target.created_by_sink and by_id.state.target.recording_id == first
    # the channel target's next write extends the recording after them
    write(numbers(spark, 25, 30, partitions=1), harness)
    by_channel = batch_map(batch_options(harness), streaming=False)
    assert [(e.batch_id, e.rows) for e in by_channel] == [(0, 10), (1, 5)]
    assert by_channel[1].start_position == by_id.entries[-1].stop_position
    assert [r for _, r in replay_recording(harness.client, first)] == list(range(30))
    assert recordings_of_sink_stream(harness) == [first]
    assert len(harness.client.list_recordings()) == 3  # the target and the two sinks' logs


def test_a_write_repairs_what_a_crashed_write_left(spark, harness, tmp_path):
    """The driver's commit worker dies after publishing, before the batch map entry: the next write truncates."""
    write(numbers(spark, 0, 100, partitions=2), harness)
    faults.arm({"point": "before-entry", "action": "exit"})
    with pytest.raises(Exception):  # noqa: B017 - Spark wraps the worker's crash
        write(numbers(spark, 1000, 1100, partitions=2), harness)
    assert faults.armed() == [], "the crash fired"
    options = batch_options(harness)
    crashed = sink_view(options, streaming=False)
    assert [e.batch_id for e in crashed.entries] == [0] and crashed.state.pending.batch_id == 1
    recording_id = crashed.state.target.recording_id
    assert harness.client.get_max_recorded_position(recording_id) > crashed.entries[0].stop_position, \
        "the crashed write's rows were recorded"
    # the dead worker holds the sink log until the archive sees its publication go; this write waits, then repairs
    write(numbers(spark, 100, 150, partitions=2), harness)
    view = sink_view(options, streaming=False)
    assert [(e.batch_id, e.rows) for e in view.entries] == [(0, 100), (1, 50)] and view.state.pending is None
    assert view.entries[1].start_position == view.entries[0].stop_position
    assert [r for _, r in replay_recording(harness.client, recording_id)] == list(range(150))
    assert recordings_of_sink_stream(harness) == [recording_id]


def test_sbe_encoded_write(spark, harness, tmp_path):
    from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder
    rows = [("AAPL", 1_000 + i, 10 * i, 1_700_000_000_000_000_000 + i, i, "BUY" if i % 2 else "SELL")
            for i in range(50)]
    frame = spark.createDataFrame(rows, "symbol string, price_mantissa long, quantity long, timestampNs long, "
                                        "tradeId long, side string").repartition(1)
    write(frame, harness, sbeSchema=EXAMPLE_SCHEMA, sbeMessage="Trade")
    recording_id = sink_view(batch_options(harness), streaming=False).state.target.recording_id
    got = replay_recording(harness.client, recording_id)
    import pyarrow as pa
    batch = pa.RecordBatch.from_pylist([dict(zip(frame.columns, r)) for r in rows])
    expected = SbeEncoder(EXAMPLE_SCHEMA, "Trade").encode(batch).to_pylist()
    assert [p for p, _ in got] == expected


@pytest.mark.parametrize("select, extra, message", [
    ("CAST(CAST(id AS STRING) AS BINARY) AS value; id AS key", {}, "column 'key' is not accepted by the aeron-archive sink"),
    ("id AS reservedValue", {}, "needs a column 'value'"),
    ("CAST(CAST(id AS STRING) AS BINARY) AS value", {"recordingId": 999}, r"recording 999 \(option recordingId\) is not in the "
                                                          "archive"),
    ("CAST(CAST(id AS STRING) AS BINARY) AS value", {"controlStreamId": 4243, "messageTimeout": "1s"},
     "cannot reach the archive on controlChannel=aeron:ipc controlStreamId=4243"),
    ("CAST(CAST(id AS STRING) AS BINARY) AS value", {"sbeSchema": EXAMPLE_SCHEMA},
     "option sbeSchema needs option sbeMessage"),
    ("IF(id = 3, NULL, CAST(CAST(id AS STRING) AS BINARY)) AS value", {}, "column 'value' is null in row 3"),
])
def test_bad_input_is_named(spark, harness, tmp_path, select, extra, message):
    frame = spark.range(0, 5, 1, 1).selectExpr(*[s.strip() for s in select.split("; ")])
    with pytest.raises(Exception, match=message):
        write(frame, harness, **extra)
