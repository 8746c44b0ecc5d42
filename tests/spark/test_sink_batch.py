"""`df.write.format("aeron-archive").mode("append")`, SBE-encoded writes, and bad input named in errors."""

from __future__ import annotations

import os

import pytest
from system.harness import Harness
from system.test_sink_util import replay_range, replay_recording, sink_option_map

from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.connector.sink.batch_map import read_batch_map
from aeron_archive_spark.connector.sink.state import load_state

pytestmark = pytest.mark.spark

EXAMPLE_SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "market_data.xml")


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def write(frame, harness, state_dir, mode: str = "append", **extra) -> None:
    writer = frame.write.format("aeron-archive").mode(mode)
    for key, value in sink_option_map(harness, state_dir, **extra).items():
        writer = writer.option(key, value)
    writer.save()


def numbers(spark, start: int, stop: int, partitions: int = 3):
    return spark.range(start, stop, 1, partitions).selectExpr("CAST(CAST(id AS STRING) AS BINARY) AS value", "id AS reservedValue")


def encoded(n: int) -> bytes:
    return str(n).encode()


def test_batch_writes_append_to_one_recording(spark, harness, tmp_path):
    state_dir = str(tmp_path / "state")
    write(numbers(spark, 0, 1000), harness, state_dir)
    write(numbers(spark, 1000, 1500, partitions=2), harness, state_dir)
    entries = read_batch_map(state_dir)
    assert [(e.batch_id, e.rows) for e in entries] == [(0, 1000), (1, 500)]
    recording_id = load_state(state_dir).recording_id
    assert replay_recording(harness.client, recording_id) == [(encoded(n), n) for n in range(1500)]
    second = replay_range(harness.client, recording_id, entries[1].start_position, entries[1].stop_position)
    assert [r for _, r in second] == list(range(1000, 1500))
    with pytest.raises(Exception, match=r"supports mode\('append'\) only"):
        write(numbers(spark, 0, 10), harness, state_dir, mode="overwrite")


def test_batch_write_without_state_dir_and_to_a_recording_id(spark, harness, tmp_path):
    write(numbers(spark, 0, 10, partitions=1), harness, None)
    [first] = harness.client.list_recordings()
    assert [r for _, r in replay_recording(harness.client, first.recording_id)] == list(range(10))
    write(numbers(spark, 10, 20, partitions=2), harness, None, recordingId=first.recording_id)
    assert [r for _, r in replay_recording(harness.client, first.recording_id)] == list(range(20))
    assert len(harness.client.list_recordings()) == 1


def test_sbe_encoded_write(spark, harness, tmp_path):
    from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder
    rows = [("AAPL", 1_000 + i, 10 * i, 1_700_000_000_000_000_000 + i, i, "BUY" if i % 2 else "SELL")
            for i in range(50)]
    frame = spark.createDataFrame(rows, "symbol string, price_mantissa long, quantity long, timestampNs long, "
                                        "tradeId long, side string").repartition(1)
    write(frame, harness, str(tmp_path / "state"), sbeSchema=EXAMPLE_SCHEMA, sbeMessage="Trade")
    recording_id = load_state(str(tmp_path / "state")).recording_id
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
        write(frame, harness, str(tmp_path / "state"), **extra)
