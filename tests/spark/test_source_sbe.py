"""`sbeSchema`: SBE-encoded trades recorded through a real archive come back as typed columns."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import ByteType, LongType, StringType

from aeron_archive_spark.archive.codecs.codec import SbeCodec
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness

pytestmark = pytest.mark.spark

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "market_data.xml")
CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def trade(codec: SbeCodec, i: int) -> bytes:
    return codec.encode("Trade", symbol=["AAPL", "MSFT", "GOOGLE01"][i % 3], price_mantissa=18_512_000_000 + i,
                        quantity=100 + i, side=i % 2, timestamp_ns=1_700_000_000_000_000_000 + i, trade_id=i)


def test_sbe_trades_read_back_as_typed_columns(spark, harness):
    codec = SbeCodec.from_xml(EXAMPLE)
    recorder = Recorder(harness, CHANNEL, 4301)
    recorder.publish(trade(codec, i) for i in range(3000))  # ~5 terms of 96-byte frames
    recorder.stop()
    df = (spark.read.format("aeron-archive")
          .options(**source_options(harness, recordingId=recorder.recording_id, sbeSchema=EXAMPLE,
                                    maxBytesPerPartition="128k"))
          .load())
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["symbol"] == StringType() and types["side"] == StringType()
    assert types["price_mantissa"] == LongType() and types["price_exponent"] == ByteType()
    assert types["tradeId"] == LongType() and types["timestampNs"] == LongType() and "value" in types
    rows = df.orderBy("position").collect()
    assert [r.position for r in rows] == [p for p, _ in recorder.messages]
    assert [bytes(r.value) for r in rows] == [v for _, v in recorder.messages]
    for i, r in enumerate(rows):
        assert (r.symbol, r.price_mantissa, r.price_exponent, r.quantity, r.side, r.timestampNs, r.tradeId) == (
            ["AAPL", "MSFT", "GOOGLE01"][i % 3], 18_512_000_000 + i, -8, 100 + i, ["BUY", "SELL"][i % 2],
            1_700_000_000_000_000_000 + i, i)
    assert sum(r.side == "BUY" for r in rows) == 1500


def test_undecodable_payload_fails_naming_position_or_becomes_a_null_row(spark, harness):
    codec = SbeCodec.from_xml(EXAMPLE)
    recorder = Recorder(harness, CHANNEL, 4302)
    recorder.publish([trade(codec, 0), b"not an SBE message", trade(codec, 2)])
    recorder.stop()
    bad_position = recorder.messages[1][0]
    options = source_options(harness, remote=True, recordingId=recorder.recording_id, sbeSchema=EXAMPLE)
    rows = (spark.read.format("aeron-archive").options(**options, **{"sbe.onError": "null"}).load()
            .orderBy("position").collect())
    assert [r.tradeId for r in rows] == [0, None, 2] and rows[1].symbol is None and rows[1].side is None
    assert bytes(rows[1].value) == b"not an SBE message" and rows[1].position == bad_position
    with pytest.raises(Exception) as info:
        spark.read.format("aeron-archive").options(**options).load().collect()
    text = str(info.value)
    assert f"recording {recorder.recording_id}: cannot decode the SBE message at position {bad_position}" in text
