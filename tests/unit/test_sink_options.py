"""Sink options and input columns: every mistake is named (no Spark session, no archive)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.connector.sink.columns import (
    input_layout,
    staged_schema,
    to_staged,
)
from aeron_archive_spark.connector.sink.errors import SinkSchemaError
from aeron_archive_spark.connector.sink.options import parse_sink_options

BASE = {"channel": "aeron:ipc", "streamId": "1001", "checkpointLocation": "/chk/q1"}


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


def test_the_checkpoint_identifies_a_stream_and_is_kept_as_given():
    options = parse_sink_options(BASE, streaming=True)
    assert options.checkpoint_location == "/chk/q1"
    assert (options.channel, options.stream_id, options.recording_id) == ("aeron:ipc", 1001, None)
    assert options.source_location == "local" and options.publish_timeout_s == 30.0
    assert not hasattr(options, "state_dir") and not hasattr(options, "staging_dir")
    # any URI scheme: the state is in the archive, so the driver never opens the checkpoint itself
    for uri in ("file:///chk/q2", "hdfs://nn/chk/q1", "s3a://bucket/chk/q1"):
        assert parse_sink_options(dict(BASE, checkpointLocation=uri), streaming=True).checkpoint_location == uri
    # Spark lowercases option keys
    lowered = parse_sink_options({"channel": "aeron:ipc", "streamid": "1", "checkpointlocation": "/c"}, streaming=True)
    assert lowered.checkpoint_location == "/c"


def test_batch_mode_needs_no_checkpoint():
    options = parse_sink_options({"recordingId": "5", "publishTimeout": "2s", "sourceLocation": "REMOTE"},
                                 streaming=False)
    assert options.recording_id == 5 and options.checkpoint_location is None
    assert options.publish_timeout_s == 2.0 and options.source_location == "remote"
    # a batch write is identified by its target, never by a checkpoint
    assert parse_sink_options(BASE, streaming=False).checkpoint_location is None


@pytest.mark.parametrize("options, message", [
    ({"channel": "aeron:ipc", "checkpointLocation": "/c"}, "option channel needs option streamId"),
    ({"streamId": "1", "checkpointLocation": "/c"}, "option streamId needs option channel"),
    ({"checkpointLocation": "/c"}, "needs a target: option recordingId"),
    ({"recordingId": "1", "channel": "aeron:ipc", "checkpointLocation": "/c"}, "either option recordingId"),
    ({"recordingId": "-3", "checkpointLocation": "/c"}, "option recordingId"),
    ({"recordingId": "x", "checkpointLocation": "/c"}, "option recordingId"),
    ({"channel": "tcp://x", "streamId": "1", "checkpointLocation": "/c"}, "option channel"),
    ({"recordingId": "1"}, "needs the query's checkpointLocation"),
    ({"recordingId": "1", "checkpointLocation": ""}, "needs the query's checkpointLocation"),
    ({"recordingId": "1", "checkpointLocation": "/c", "sinkStateDir": "/s"}, "option sinkStateDir was removed"),
    ({"recordingId": "1", "checkpointLocation": "/c", "stagingLocation": "/s"}, "option stagingLocation was removed"),
    ({"recordingId": "1", "checkpointLocation": "/c", "sourceLocation": "far"}, "option sourceLocation"),
    ({"recordingId": "1", "checkpointLocation": "/c", "publishTimeout": "soon"}, "option publishTimeout"),
    ({"recordingId": "1", "checkpointLocation": "/c", "startingPosition": "earliest"}, "startingPosition"),
    ({"recordingId": "1", "checkpointLocation": "/c", "recordingIdz": "1"}, "unknown option 'recordingIdz'"),
    ({"recordingId": "1", "checkpointLocation": "/c", "sbeMessage": "Trade"}, "option sbeMessage needs"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_sink_options(options, streaming=True)


def test_input_columns():
    options = parse_sink_options(BASE, streaming=True)
    layout = input_layout(schema(("value", BinaryType()), ("reservedValue", LongType())), options)
    assert (layout.value_index, layout.reserved_index) == (0, 1)
    layout = input_layout(schema(("Value", StringType())), options)
    assert (layout.value_index, layout.reserved_index) == (0, None)
    with pytest.raises(SinkSchemaError, match="column 'key' is not accepted"):
        input_layout(schema(("value", BinaryType()), ("key", StringType())), options)
    with pytest.raises(SinkSchemaError, match="needs a column 'value'.*input columns: reservedValue"):
        input_layout(schema(("reservedValue", LongType())), options)
    with pytest.raises(SinkSchemaError, match="column 'value' must be binary or string, got int"):
        input_layout(schema(("value", IntegerType())), options)
    with pytest.raises(SinkSchemaError, match="column 'reservedValue' must be a long.*got string"):
        input_layout(schema(("value", BinaryType()), ("reservedValue", StringType())), options)


EXAMPLE_SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "market_data.xml")


def test_sbe_columns_are_checked_and_encoded():
    options = parse_sink_options(dict(BASE, sbeSchema=EXAMPLE_SCHEMA, sbeMessage="Trade"), streaming=True)
    fields = schema(("symbol", StringType()), ("price_mantissa", LongType()), ("quantity", LongType()),
                    ("timestampNs", LongType()), ("tradeId", LongType()), ("side", StringType()),
                    ("reservedValue", LongType()))
    layout = input_layout(fields, options)
    assert (layout.value_index, layout.reserved_index, layout.sbe_message) == (None, 6, "Trade")
    batch = pa.record_batch([pa.array(["AAPL", "MSFT"]), pa.array([1, 2], pa.int64()), pa.array([3, 4], pa.int64()),
                             pa.array([5, 6], pa.int64()), pa.array([7, 8], pa.int64()), pa.array(["BUY", "SELL"]),
                             pa.array([70, 80], pa.int64())], names=list(fields.names))
    staged = to_staged(batch, layout, staged_schema(layout), "partition 0")
    from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder
    expected = SbeEncoder(EXAMPLE_SCHEMA, "Trade", ignore_columns=("reservedValue",)).encode(batch)
    assert staged.column(0).to_pylist() == expected.to_pylist() and len(expected[0].as_py()) == 56
    assert staged.column(1).to_pylist() == [70, 80]
    with pytest.raises(SinkSchemaError, match="column 'venue' is not a field of SBE message Trade"):
        input_layout(schema(("symbol", StringType()), ("venue", StringType())), options)
    with pytest.raises(OptionError, match="option sbeSchema needs option sbeMessage"):
        input_layout(fields, parse_sink_options(dict(BASE, sbeSchema=EXAMPLE_SCHEMA), streaming=True))


def test_a_message_without_fields_needs_a_column_to_carry_its_rows():
    # MDP 3.0's AdminHeartbeat12 has no fields: a DataFrame of only its columns has none, and Spark hands a Python
    # sink column-less Arrow batches as empty ones (rows lost without an error); reservedValue carries them.
    fix = os.path.join(os.path.dirname(__file__), "sbe_schemas", "FixBinary.xml")
    options = parse_sink_options(dict(BASE, sbeSchema=fix, sbeMessage="AdminHeartbeat12"), streaming=False)
    with pytest.raises(SinkSchemaError, match="no columns.*AdminHeartbeat12.*keep the column 'reservedValue'"):
        input_layout(schema(), options)
    layout = input_layout(schema(("reservedValue", LongType())), options)
    batch = pa.record_batch([pa.array([0, 0, 0], pa.int64())], names=["reservedValue"])
    staged = to_staged(batch, layout, staged_schema(layout), "partition 0")
    assert staged.num_rows == 3 and len(set(staged.column(0).to_pylist())) == 1  # three 8-byte header-only messages


def test_conversion_to_the_staged_layout():
    options = parse_sink_options(BASE, streaming=True)
    layout = input_layout(schema(("value", StringType()), ("reservedValue", IntegerType())), options)
    target = staged_schema(layout)
    batch = pa.record_batch([pa.array(["a", "", "ü"]), pa.array([1, None, 3], pa.int32())],
                            names=["value", "reservedValue"])
    staged = to_staged(batch, layout, target, "partition 0")
    assert staged.schema == target
    assert staged.column(0).to_pylist() == [b"a", b"", "ü".encode()]
    assert staged.column(1).to_pylist() == [1, 0, 3]
    nulls = pa.record_batch([pa.array(["a", None]), pa.array([1, 2], pa.int32())], names=["value", "reservedValue"])
    with pytest.raises(SinkSchemaError, match="column 'value' is null in row 1 of partition 3"):
        to_staged(nulls, layout, target, "partition 3")


def test_staged_partitions_carry_their_rows_in_the_commit_message():
    import dataclasses
    import pickle

    from aeron_archive_spark.connector.sink.errors import SinkError
    from aeron_archive_spark.connector.sink.staging import read_staged, stage_partition

    options = parse_sink_options(BASE, streaming=True)
    layout = input_layout(schema(("value", StringType()), ("reservedValue", LongType())), options)
    batches = [pa.record_batch([pa.array(["a", "bb"]), pa.array([1, 2], pa.int64())], names=["value", "reservedValue"]),
               pa.record_batch([pa.array([], pa.string()), pa.array([], pa.int64())], names=["value", "reservedValue"]),
               pa.record_batch([pa.array(["cccc"]), pa.array([3], pa.int64())], names=["value", "reservedValue"])]
    staged = stage_partition(iter(batches), layout, "4", 1, 2)
    assert (staged.batch, staged.partition, staged.attempt) == ("4", 1, 2)
    assert (staged.rows, staged.payload_bytes, staged.max_length) == (3, 7, 4)
    assert "ipc_bytes=" in repr(staged) and "cccc" not in repr(staged)
    message = pickle.loads(pickle.dumps(staged))  # as Spark ships it to the driver
    read = read_staged(message)
    assert [v for b in read for v in b.column(0).to_pylist()] == [b"a", b"bb", b"cccc"]
    assert [v for b in read for v in b.column(1).to_pylist()] == [1, 2, 3]
    empty = stage_partition(iter([]), layout, "4", 0, 0)
    assert empty.rows == 0 and read_staged(empty) == []
    with pytest.raises(SinkError, match="the rows of partition 1 \\(batch 4\\) arrived damaged"):
        read_staged(dataclasses.replace(staged, data=staged.data[: len(staged.data) // 2]))
    with pytest.raises(SinkError, match="partition 1 of batch 4 holds 3 rows, its task reported 5"):
        read_staged(dataclasses.replace(staged, rows=5))


@pytest.mark.parametrize("codec", ["lz4", "zstd", "none"])
def test_commit_messages_are_compressed_as_the_option_says(codec):
    import os as _os
    import pickle

    from aeron_archive_spark.connector.sink.staging import read_staged, stage_partition

    options = parse_sink_options({**BASE, "taskResultCompression": codec}, streaming=True)
    assert options.task_result_compression == (None if codec == "none" else codec)
    layout = input_layout(schema(("value", BinaryType())), options)
    repeated = [b"market-data-tick:%06d|" % i + b"\0" * 200 for i in range(2000)]  # compresses well
    noise = [_os.urandom(300) for _ in range(200)]  # does not
    batches = [pa.record_batch([pa.array(repeated, pa.binary())], names=["value"]),
               pa.record_batch([pa.array(noise, pa.binary())], names=["value"])]
    staged = stage_partition(iter(batches), layout, "1", 0, 0, options.task_result_compression)
    payload = sum(map(len, repeated)) + sum(map(len, noise))
    assert staged.payload_bytes == payload
    if codec == "none":
        assert len(staged.data) > payload
    else:
        assert len(staged.data) < payload // 2
    read = read_staged(pickle.loads(pickle.dumps(staged)))
    assert [v for b in read for v in b.column(0).to_pylist()] == repeated + noise


def test_task_result_compression_is_checked():
    with pytest.raises(OptionError, match="taskResultCompression"):
        parse_sink_options({**BASE, "taskResultCompression": "gzip"}, streaming=True)
