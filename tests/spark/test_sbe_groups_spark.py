"""SBE repeating groups, nested groups and arrays end to end through Spark: record messages of the book (MDP3-like)
and Car schemas, read them with `sbeSchema` on both read paths, compare every field with what was encoded, run the
documented `explode` query, write the DataFrame back with the sink and compare the new recording's bytes."""

from __future__ import annotations

import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import functions as F
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness
from system.test_sink_util import replay_recording, sink_option_map
from unit.test_sbe_exchange_schemas import random_block

from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.archive.codecs.codec import SbeCodec
from aeron_archive_spark.archive.tables.sbe.columns import message_columns
from aeron_archive_spark.archive.tables.schema import FIXED_FIELDS

pytestmark = pytest.mark.spark

SCHEMAS = Path(__file__).resolve().parents[1] / "unit" / "sbe_schemas"
BOOK = str(SCHEMAS / "book.xml")
CAR = str(SCHEMAS / "car.xml")
CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
FIXED = tuple(f.name for f in FIXED_FIELDS)  # the source's own columns
PX_NULL = (1 << 63) - 1
I32_NULL = (1 << 31) - 1
ACTIONS = ("New", "Change", "Delete")
ENTRY_TYPES = {"Bid": ord("0"), "Offer": ord("1")}


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


# ---- messages: (codec kwargs, the Spark row expected for them) ----------------------------------------------------


def book_update(rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, Any]]:
    """A random BookUpdate: 0-5 price levels (groupSize), 0-3 orders (groupSize8Byte), nulls here and there."""
    transact = int(rng.integers(0, 1 << 64, dtype=np.uint64))
    indicator = int(rng.choice([0, 1, 0x80, 0x81]))
    levels, level_rows = [], []
    for _ in range(int(rng.integers(0, 6))):
        px = None if rng.random() < 0.2 else int(rng.integers(-(1 << 62), 1 << 62))
        size = None if rng.random() < 0.2 else int(rng.integers(-(1 << 31), I32_NULL))
        action = ACTIONS[int(rng.integers(0, 3))]
        side = "Bid" if rng.random() < 0.5 else "Offer"
        level = None if rng.random() < 0.2 else int(rng.integers(1, 11))
        entry: dict[str, Any] = {"md_update_action": action, "md_entry_type": ENTRY_TYPES[side]}
        if px is not None:
            entry["md_entry_px_mantissa"] = px
        if size is not None:
            entry["md_entry_size"] = size
        if level is not None:
            entry["md_price_level"] = level
        levels.append(entry)
        level_rows.append({"MDEntryPx_mantissa": px, "MDEntryPx_exponent": -9, "MDEntrySize": size,
                           "MDUpdateAction": action, "MDEntryType": side, "MDPriceLevel": level})
    orders, order_rows = [], []
    for _ in range(int(rng.integers(0, 4))):
        order_id = int(rng.integers(0, 1 << 64, dtype=np.uint64))
        qty = None if rng.random() < 0.3 else int(rng.integers(0, 1 << 20))
        orders.append({"order_id": order_id} | ({} if qty is None else {"md_display_qty": qty}))
        order_rows.append({"OrderID": Decimal(order_id), "MDDisplayQty": qty})
    kwargs = dict(transact_time=transact, match_event_indicator=indicator, no_md_entries=levels,
                  no_order_id_entries=orders)
    row = {"TransactTime": Decimal(transact), "MatchEventIndicator": indicator, "NoMDEntries": level_rows,
           "NoOrderIDEntries": order_rows}
    return kwargs, row


def book_update_v1(i: int) -> tuple[bytes, dict[str, Any]]:
    """An older (version 1) sender, by hand: 14-byte entries without MDPriceLevel, no NoOrderIDEntries group."""
    payload = (struct.pack("<HHHH", 11, 46, 42, 1) + struct.pack("<QB2x", 5 + i, 0) + struct.pack("<HB", 14, 1)
               + struct.pack("<qiBB", 100 + i, 3, 1, ord("1")))
    row = {"TransactTime": Decimal(5 + i), "MatchEventIndicator": 0, "NoOrderIDEntries": None,
           "NoMDEntries": [{"MDEntryPx_mantissa": 100 + i, "MDEntryPx_exponent": -9, "MDEntrySize": 3,
                            "MDUpdateAction": "Change", "MDEntryType": "Offer", "MDPriceLevel": None}]}
    return payload, row


def quote(rng: np.random.Generator, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A random Quote: int32[3] array, groupSizeEncoding legs each with a nested fills group and var data."""
    legs, leg_rows = [], []
    for _ in range(int(rng.integers(0, 6))):
        leg_id = int(rng.integers(0, 1 << 32))
        fills = [int(rng.integers(-(1 << 63), 1 << 63)) for _ in range(int(rng.integers(0, 4)))]
        note = "note" * int(rng.integers(0, 3))
        legs.append({"leg_id": leg_id, "no_fills": [{"fill_px": f} for f in fills], "leg_note": note})
        leg_rows.append({"LegID": leg_id, "NoFills": [{"FillPx": f} for f in fills], "LegNote": note})
    ratios = [int(v) for v in rng.integers(-(1 << 31), 1 << 31, size=3)]
    symbol = ["ESZ5", "NQH6", "CLF26X"][i % 3]
    text = "t" * (i % 4)
    kwargs = dict(quote_id=i, symbol=symbol, ratios=ratios, no_legs=legs, text=text)
    row = {"QuoteID": i, "Symbol": symbol, "Ratios": ratios, "NoLegs": leg_rows, "Text": text}
    return kwargs, row


def car(rng: np.random.Generator, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A random Car (the SBE project's example): uint32[4] array, a group with var data, a nested group."""
    serial = int(rng.integers(0, 1 << 64, dtype=np.uint64))
    numbers = [int(v) for v in rng.integers(0, 1 << 32, size=4)]
    fuel = [{"speed": int(rng.integers(0, 1 << 16)), "mpg": float(np.float32(rng.integers(0, 400) / 4)),
             "usageDescription": "Urban Cycle"[: int(rng.integers(0, 12))]} for _ in range(int(rng.integers(0, 4)))]
    performance = [{"octaneRating": int(rng.integers(90, 111)),
                    "acceleration": [{"mph": int(rng.integers(0, 200)), "seconds": float(k) + 0.25}
                                     for k in range(int(rng.integers(0, 4)))]}
                   for _ in range(int(rng.integers(0, 3)))]
    available, code = ["F", "T"][i % 2], "ABC"[i % 3]
    booster = ["TURBO", "SUPERCHARGER", "NITROUS", "KERS"][i % 4]
    kwargs = dict(
        serial_number=serial, model_year=2000 + i % 30, available=available, code=code, some_numbers=numbers,
        vehicle_code="abc" + str(i % 1000).rjust(3, "0"), extras=i % 8, engine_capacity=1000 + i,
        engine_num_cylinders=4 + i % 4, engine_manufacturer_code=str(100 + i % 900), engine_efficiency=i % 101,
        engine_booster_enabled=available, engine_booster_boost_type=booster, engine_booster_horse_power=i % 256,
        fuel_figures=[{"speed": f["speed"], "mpg": f["mpg"], "usage_description": f["usageDescription"]}
                      for f in fuel],
        performance_figures=[{"octane_rating": p["octaneRating"],
                              "acceleration": [dict(a) for a in p["acceleration"]]} for p in performance],
        manufacturer="Honda" * (i % 3), model="Civic VTi é", activation_code="abcdef"[: i % 7],
    )
    row = {
        "serialNumber": Decimal(serial), "modelYear": 2000 + i % 30, "available": available, "code": code,
        "someNumbers": numbers, "vehicleCode": kwargs["vehicle_code"], "extras": i % 8, "discountedModel": "C",
        "engine_capacity": 1000 + i, "engine_numCylinders": 4 + i % 4, "engine_maxRpm": 9000,
        "engine_manufacturerCode": kwargs["engine_manufacturer_code"], "engine_fuel": "Petrol",
        "engine_efficiency": i % 101, "engine_boosterEnabled": available, "engine_booster_BoostType": booster,
        "engine_booster_horsePower": i % 256, "fuelFigures": fuel, "performanceFigures": performance,
        "manufacturer": kwargs["manufacturer"], "model": kwargs["model"], "activationCode": kwargs["activation_code"],
    }
    return kwargs, row


# ---- record, read (both paths), compare, write back, compare bytes --------------------------------------------------


def record(harness: Harness, stream_id: int, payloads: list[bytes]) -> Recorder:
    recorder = Recorder(harness, CHANNEL, stream_id)
    recorder.publish(payloads)
    recorder.stop()
    return recorder


def read(spark, harness: Harness, recording_id: int, schema: str, message: str, remote: bool):
    options = source_options(harness, remote=remote, recordingId=recording_id, sbeSchema=schema, sbeMessage=message,
                             maxBytesPerPartition="16k")
    return spark.read.format("aeron-archive").options(**options).load()


def typed(row: Any) -> dict[str, Any]:
    """A Spark row's SBE columns as plain Python (nested Rows -> dicts), without the source's own columns."""
    return {k: v for k, v in row.asDict(recursive=True).items() if k not in FIXED}


def write_back(df, harness: Harness, schema: str, message: str, stream_id: int) -> int:
    """Write the DataFrame's SBE columns with the sink to a new recording; returns its id."""
    writer = df.drop(*FIXED, "sbeMessage").write.format("aeron-archive").mode("append")
    for key, value in sink_option_map(harness, None, sbeSchema=schema, sbeMessage=message,
                                      streamId=stream_id).items():
        writer = writer.option(key, value)
    writer.save()
    [written] = [d.recording_id for d in harness.client.list_recordings_for_uri(0, 100, "", stream_id)]
    return written


def round_trip(spark, harness: Harness, schema: str, message: str, payloads: list[bytes],
               expected: list[dict[str, Any]], stream_id: int) -> list[bytes]:
    """Record `payloads`, check both read paths against `expected`, write back; returns the rewritten payloads."""
    recorder = record(harness, stream_id, payloads)
    for remote in (False, True):
        rows = read(spark, harness, recorder.recording_id, schema, message, remote).orderBy("position").collect()
        assert [(r.position, bytes(r.value)) for r in rows] == recorder.messages
        for i, (row, want) in enumerate(zip(rows, expected, strict=True)):
            assert typed(row) == want, f"message {i} (remote={remote})"
    df = read(spark, harness, recorder.recording_id, schema, message, remote=False).orderBy("position")
    written = write_back(df.coalesce(1), harness, schema, message, stream_id + 1)
    return [payload for payload, _ in replay_recording(harness.client, written)]


def test_book_updates_and_quotes_read_compare_explode_and_write_back(spark, harness):
    codec = SbeCodec.from_xml(BOOK)
    rng = np.random.default_rng(12)
    generated = [book_update(rng) for _ in range(400)]
    payloads = [codec.encode("BookUpdate", **kwargs) for kwargs, _ in generated]
    expected = [row for _, row in generated]
    older = [book_update_v1(i) for i in range(5)]
    payloads += [p for p, _ in older]
    expected += [r for _, r in older]
    rewritten = round_trip(spark, harness, BOOK, "BookUpdate", payloads, expected, 4401)
    assert rewritten[:400] == payloads[:400]  # at the schema's version: byte-identical
    for again, (_, row) in zip(rewritten[400:], older, strict=True):  # older sender: every known field survives
        msg = codec.decode(again)
        assert msg.transact_time == row["TransactTime"] and msg.no_order_id_entries == ()
        assert [(e.md_entry_px_mantissa, e.md_entry_size, e.md_price_level) for e in msg.no_md_entries] == [
            (e["MDEntryPx_mantissa"], e["MDEntrySize"], 255) for e in row["NoMDEntries"]]

    # the documented query (docs/sbe.md): one row per price level of each book update
    recording_id = next(d.recording_id for d in harness.client.list_recordings_for_uri(0, 100, "", 4401))
    book = read(spark, harness, recording_id, BOOK, "BookUpdate", remote=False)
    levels = (book.selectExpr("position", "TransactTime", "inline(NoMDEntries)")
              .where("MDPriceLevel IS NOT NULL")
              .selectExpr("position", "TransactTime", "MDPriceLevel", "MDEntryType AS side", "MDUpdateAction",
                          "MDEntryPx_mantissa * power(10, MDEntryPx_exponent) AS price", "MDEntrySize AS size")
              .orderBy("position", "side", "MDPriceLevel"))
    got = [(r.TransactTime, r.MDPriceLevel, r.side, r.MDUpdateAction, r.size, r.price) for r in levels.collect()]
    want = [(row["TransactTime"], e["MDPriceLevel"], e["MDEntryType"], e["MDUpdateAction"], e["MDEntrySize"],
             None if e["MDEntryPx_mantissa"] is None else e["MDEntryPx_mantissa"] * 1e-9)
            for row in expected for e in row["NoMDEntries"] if e["MDPriceLevel"] is not None]
    got, want = sorted(got, key=_level_key), sorted(want, key=_level_key)
    assert len(got) == len(want) > 400
    assert [g[:5] for g in got] == [w[:5] for w in want]
    assert [g[5] is None for g in got] == [w[5] is None for w in want]
    assert [g[5] for g in got if g[5] is not None] == pytest.approx([w[5] for w in want if w[5] is not None],
                                                                     rel=1e-12)

    generated_quotes = [quote(rng, i) for i in range(300)]
    quotes = [codec.encode("Quote", **kwargs) for kwargs, _ in generated_quotes]
    assert round_trip(spark, harness, BOOK, "Quote", quotes, [r for _, r in generated_quotes], 4411) == quotes


def _level_key(t: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((x is None, x if x is not None else 0) for x in t)


def test_car_example_read_compare_and_write_back(spark, harness):
    codec = SbeCodec.from_xml(CAR)
    rng = np.random.default_rng(5)
    generated = [car(rng, i) for i in range(300)]
    payloads = [codec.encode("Car", **kwargs) for kwargs, _ in generated]
    assert round_trip(spark, harness, CAR, "Car", payloads, [r for _, r in generated], 4421) == payloads


def test_streaming_read_of_group_messages(spark, harness, tmp_path):
    codec = SbeCodec.from_xml(BOOK)
    rng = np.random.default_rng(3)
    generated = [book_update(rng) for _ in range(50)]
    recorder = record(harness, 4431, [codec.encode("BookUpdate", **kwargs) for kwargs, _ in generated])
    options = source_options(harness, recordingId=recorder.recording_id, sbeSchema=BOOK, sbeMessage="BookUpdate")
    query = (spark.readStream.format("aeron-archive").options(**options).load()
             .writeStream.format("memory").queryName("sbe_groups_stream")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(60)
    finally:
        query.stop()
    rows = spark.sql("SELECT * FROM sbe_groups_stream ORDER BY position").collect()
    assert [typed(r) for r in rows] == [row for _, row in generated]



# ---- the real CME schemas (MDP 3.0 market data, iLink 3 order entry) ------------------------------------------------

MDP3 = str(SCHEMAS / "FixBinary.xml")
ILINK3 = str(SCHEMAS / "ilinkbinary.xml")
WRITTEN_BACK = {
    MDP3: ("MDIncrementalRefreshBook46", "SnapshotFullRefreshOrderBook53", "MDInstrumentDefinitionOption55"),
    ILINK3: ("NewOrderSingle514", "MassQuote517", "ExecutionReportTradeSpread526"),
}


@pytest.mark.parametrize("schema", [MDP3, ILINK3], ids=["FixBinary", "ilinkbinary"])
def test_cme_schema_every_message_through_spark(spark, harness, schema):
    """Every message of the schema in one recording, read without sbeMessage (each row by its template id) on both
    read paths and compared field by field; a few group-heavy messages taken from that read (their rows, their
    columns under their own names) and written back with the sink, byte-identical."""
    codec = SbeCodec.from_xml(schema)
    r = random.Random(f"spark/{Path(schema).stem}")
    messages = [(spec.name, *random_block(message_columns(codec, spec.name), r))
                for spec in codec.messages for _ in range(4)]
    r.shuffle(messages)
    payloads = [codec.encode(name, **kwargs) for name, kwargs, _ in messages]
    stream_id = 4441 if schema == MDP3 else 4451
    recorder = record(harness, stream_id, payloads)
    for remote in (False, True):
        options = source_options(harness, remote=remote, recordingId=recorder.recording_id, sbeSchema=schema)
        df = spark.read.format("aeron-archive").options(**options).load()
        names = set(df.columns)
        rows = df.orderBy("position").collect()
        assert [bytes(row.value) for row in rows] == payloads
        for i, (row, (name, _, want)) in enumerate(zip(rows, messages, strict=True)):
            got = row.asDict(recursive=True)
            assert got["sbeMessage"] == name
            assert {k: got[f"{name}_{k}" if f"{name}_{k}" in names else k] for k in want} == want, f"#{i} {name}"
    # write back: one message's rows of the multi-message read, its columns under their own names
    for offset, name in enumerate(WRITTEN_BACK[schema]):
        own = [c.name for c in message_columns(codec, name)]
        frame = df.where(f"sbeMessage = '{name}'").orderBy("position").select(
            *[F.col(f"{name}_{c}" if f"{name}_{c}" in names else c).alias(c) for c in own])
        written = write_back(frame.coalesce(1), harness, schema, name, stream_id + 1 + offset)
        expected = [p for p, (n, _, _) in zip(payloads, messages, strict=True) if n == name]
        assert [p for p, _ in replay_recording(harness.client, written)] == expected


def test_documented_explode_of_mdp3_book_updates(spark, harness):
    """docs/sbe.md's example as written there: MDIncrementalRefreshBook46 into one row per price level."""
    codec = SbeCodec.from_xml(MDP3)
    r = random.Random("docs/sbe.md")
    generated = [random_block(message_columns(codec, "MDIncrementalRefreshBook46"), r) for _ in range(200)]
    recorder = record(harness, 4461, [codec.encode("MDIncrementalRefreshBook46", **kw) for kw, _ in generated])
    df = read(spark, harness, recorder.recording_id, MDP3, "MDIncrementalRefreshBook46", remote=False)
    levels = (df  # sbeMessage = MDIncrementalRefreshBook46
              .selectExpr("position", "TransactTime", "inline(NoMDEntries)")   # one row per group entry
              .where("MDPriceLevel IS NOT NULL")
              .selectExpr("position", "TransactTime", "SecurityID", "MDPriceLevel",
                          "MDEntryType AS side", "MDUpdateAction",
                          "MDEntryPx_mantissa * power(10, MDEntryPx_exponent) AS price",
                          "MDEntrySize AS size"))
    got = sorted(((r.position, r.SecurityID, r.MDPriceLevel, r.side, r.MDUpdateAction, r.size, r.price)
                  for r in levels.collect()), key=_level_key)
    starts = [p for p, _ in recorder.messages]
    want = sorted(((start, e["SecurityID"], e["MDPriceLevel"], e["MDEntryType"], e["MDUpdateAction"],
                    e["MDEntrySize"], None if e["MDEntryPx_mantissa"] is None else e["MDEntryPx_mantissa"] * 1e-9)
                   for start, (_, row) in zip(starts, generated, strict=True) for e in row["NoMDEntries"]
                   if e["MDPriceLevel"] is not None), key=_level_key)
    assert len(got) == len(want) > 200
    assert [g[:6] for g in got] == [w[:6] for w in want]
    assert [g[6] is None for g in got] == [w[6] is None for w in want]
    assert [g[6] for g in got if g[6] is not None] == pytest.approx([w[6] for w in want if w[6] is not None],
                                                                     rel=1e-12)
    exists = df.where("exists(NoMDEntries, e -> e.MDEntryType = 'Bid' AND e.MDPriceLevel = 1)").count()
    assert exists == sum(any(e["MDEntryType"] == "Bid" and e["MDPriceLevel"] == 1 for e in row["NoMDEntries"])
                         for _, row in generated)
