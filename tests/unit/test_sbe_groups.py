"""Repeating groups, nested groups, var data in groups and arrays of numbers: the per-message codec, the
vectorised Arrow decoder and the Arrow encoder, checked against messages encoded by hand with struct.pack."""

from __future__ import annotations

import struct
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from aeron_archive_spark.archive.codecs import CodecError, GroupEntry, SbeCodec
from aeron_archive_spark.archive.tables.sbe.decode import SbeDecoder
from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder

SCHEMAS = Path(__file__).parent / "sbe_schemas"
BOOK = str(SCHEMAS / "book.xml")
CAR = str(SCHEMAS / "car.xml")
PX_NULL = (1 << 63) - 1
I32_NULL = (1 << 31) - 1


def _header(block_length: int, template_id: int, version: int, schema_id: int = 42) -> bytes:
    return struct.pack("<HHHH", block_length, template_id, schema_id, version)


def _book_v2() -> bytes:
    """BookUpdate at the schema's version: 2 price levels (groupSize), 1 order (groupSize8Byte), by hand."""
    return (
        _header(11, 46, 2)
        + struct.pack("<QB2x", 1_700_000_000_123, 0x81)
        + struct.pack("<HB", 16, 2)  # groupSize: blockLength uint16, numInGroup uint8
        + struct.pack("<qiBBB1x", 4_512_250_000_000, 7, 0, ord("0"), 1)
        + struct.pack("<qiBBB1x", PX_NULL, I32_NULL, 2, ord("1"), 255)
        + struct.pack("<H5xB", 12, 1)  # groupSize8Byte: numInGroup at offset 7
        + struct.pack("<Qi", 987654321, I32_NULL)
    )


def _book_v1_older() -> bytes:
    """An older (version 1) sender: 14-byte entries without MDPriceLevel, no NoOrderIDEntries on the wire."""
    return (
        _header(11, 46, 1)
        + struct.pack("<QB2x", 5, 0)
        + struct.pack("<HB", 14, 1)
        + struct.pack("<qiBB", 100, 3, 1, ord("1"))
    )


def _book_newer() -> bytes:
    """A newer sender: root block of 13 bytes and 20-byte entries; the unknown trailing bytes are skipped."""
    return (
        _header(13, 46, 3)
        + struct.pack("<QB2x", 9, 1)
        + b"\xee\xee"
        + struct.pack("<HB", 20, 1)
        + struct.pack("<qiBBB1x", 42, 1, 1, ord("0"), 3)
        + b"\xff" * 4
        + struct.pack("<H5xB", 12, 0)
    )


def _quote() -> bytes:
    """Quote: array of int32, a groupSizeEncoding group with a nested group and var data in each entry."""
    return (
        _header(22, 2, 2)
        + struct.pack("<I6s3i", 77, b"ESZ5\0\0", -1, 2, 3)
        + struct.pack("<HH", 4, 2)  # NoLegs
        + struct.pack("<I", 1001)
        + struct.pack("<HB", 8, 2)  # NoFills of leg 1
        + struct.pack("<q", 10)
        + struct.pack("<q", 11)
        + struct.pack("<H", 5)
        + b"first"
        + struct.pack("<I", 1002)
        + struct.pack("<HB", 8, 0)  # no fills for leg 2
        + struct.pack("<H", 0)
        + struct.pack("<H", 2)
        + b"hi"
    )


def _table(decoder: SbeDecoder, payloads: list[bytes]) -> pa.Table:
    columns = decoder.decode(pa.array(payloads, type=pa.binary()), np.arange(len(payloads)) * 64, 7)
    return pa.Table.from_arrays(columns, schema=pa.schema(decoder.arrow_fields()))


# ---- per-message codec ------------------------------------------------------------------------------------------


def test_schema_layout_of_groups_and_dimensions() -> None:
    codec = SbeCodec.from_xml(BOOK)
    spec = codec.message("BookUpdate")
    entries, orders = spec.groups
    assert (entries.name, entries.block_length, entries.dimension_size, entries.count_primitive) == (
        "NoMDEntries",
        16,
        3,
        "uint8",
    )
    assert (orders.dimension_size, orders.count_offset, orders.since_version) == (8, 7, 2)
    assert codec.message("Quote").groups[0].groups[0].name == "NoFills"
    assert codec.message("Quote").fields[2].is_array


def test_codec_decodes_hand_encoded_groups() -> None:
    codec = SbeCodec.from_xml(BOOK)
    msg = codec.decode(_book_v2())
    assert msg.transact_time == 1_700_000_000_123 and msg.match_event_indicator == 0x81
    first, second = msg.no_md_entries
    assert isinstance(first, GroupEntry)
    assert (first.md_entry_px_mantissa, first.md_entry_size, first.md_update_action, first.md_entry_type) == (
        4_512_250_000_000,
        7,
        0,
        ord("0"),
    )
    assert first.md_entry_px_exponent == -9 and first.md_price_level == 1
    assert (second.md_entry_px_mantissa, second.md_entry_size, second.md_price_level) == (PX_NULL, I32_NULL, 255)
    assert [o.order_id for o in msg.no_order_id_entries] == [987654321]
    assert msg.encoded_length == len(_book_v2())


def test_codec_encode_is_byte_identical_to_hand_encoding() -> None:
    codec = SbeCodec.from_xml(BOOK)
    encoded = codec.encode(
        "BookUpdate",
        transact_time=1_700_000_000_123,
        match_event_indicator=0x81,
        no_md_entries=[
            dict(md_entry_px_mantissa=4_512_250_000_000, md_entry_size=7, md_update_action="New",
                 md_entry_type=ord("0"), md_price_level=1),
            dict(md_update_action="Delete", md_entry_type=ord("1")),  # optional fields omitted: null values
        ],
        no_order_id_entries=[dict(order_id=987654321)],
    )
    assert encoded == _book_v2()
    assert codec.encode("Quote", **codec.decode(_quote()).as_dict()) == _quote()
    assert codec.encode("BookUpdate", **codec.decode(_book_v2()).as_dict()) == _book_v2()


def test_codec_older_and_newer_senders() -> None:
    codec = SbeCodec.from_xml(BOOK)
    old = codec.decode(_book_v1_older())
    assert old.no_md_entries[0].md_price_level == 255  # beyond the 14-byte entry and sinceVersion 2 > 1
    assert old.no_md_entries[0].md_entry_px_mantissa == 100
    assert old.no_order_id_entries == ()  # group sinceVersion 2: not on the wire of a version 1 message
    assert old.encoded_length == len(_book_v1_older())
    new = codec.decode(_book_newer())
    assert new.no_md_entries[0].md_price_level == 3 and new.no_md_entries[0].md_entry_px_mantissa == 42
    assert new.no_order_id_entries == () and new.encoded_length == len(_book_newer())


def test_codec_nested_groups_var_data_in_groups_and_arrays() -> None:
    codec = SbeCodec.from_xml(BOOK)
    msg = codec.decode(_quote())
    assert msg.ratios == (-1, 2, 3) and msg.symbol == "ESZ5" and msg.text == "hi"
    leg1, leg2 = msg.no_legs
    assert (leg1.leg_id, [f.fill_px for f in leg1.no_fills], leg1.leg_note) == (1001, [10, 11], "first")
    assert (leg2.leg_id, leg2.no_fills, leg2.leg_note) == (1002, (), "")
    assert msg.as_dict()["no_legs"][0] == {"leg_id": 1001, "no_fills": [{"fill_px": 10}, {"fill_px": 11}],
                                           "leg_note": "first"}
    hash(msg)
    with pytest.raises(CodecError, match="field ratios of message Quote is an array of 3 int32, got 2 values"):
        codec.encode("Quote", ratios=[1, 2])
    with pytest.raises(CodecError, match="unknown field 'bogus' for group Quote.NoLegs"):
        codec.encode("Quote", no_legs=[{"bogus": 1}])
    with pytest.raises(CodecError, match="group Quote.NoLegs.NoFills holds at most 254 entries"):
        codec.encode("Quote", no_legs=[{"no_fills": [{}] * 255}])
    with pytest.raises(CodecError, match="group Quote.NoLegs"):
        codec.decode(_quote()[:-12])


def test_unsupported_message_does_not_block_the_others() -> None:
    codec = SbeCodec.from_xml(BOOK)
    assert codec.unsupported[3][0] == "Broken"
    assert "NoSuchType" in codec.unsupported[3][1]
    with pytest.raises(CodecError, match="message Broken \\(id 3\\) is not supported: .*unknown type 'NoSuchType'"):
        codec.message("Broken")
    with pytest.raises(CodecError, match="not supported"):
        codec.decode(_header(0, 3, 2))
    assert codec.decode(_book_v2()).transact_time == 1_700_000_000_123


# ---- Arrow decode / encode --------------------------------------------------------------------------------------


def test_arrow_types_of_groups_and_arrays() -> None:
    decoder = SbeDecoder(BOOK, "BookUpdate")
    types = {f.name: f.type for f in decoder.arrow_fields()}
    entry = types["NoMDEntries"].value_type
    assert pa.types.is_list(types["NoMDEntries"]) and pa.types.is_struct(entry)
    assert [(f.name, str(f.type)) for f in entry] == [
        ("MDEntryPx_mantissa", "int64"), ("MDEntryPx_exponent", "int8"), ("MDEntrySize", "int32"),
        ("MDUpdateAction", "string"), ("MDEntryType", "string"), ("MDPriceLevel", "int16")]
    quote = {f.name: f.type for f in SbeDecoder(BOOK, "Quote").arrow_fields()}
    assert quote["Ratios"] == pa.list_(pa.int32())
    legs = quote["NoLegs"].value_type
    assert str(legs.field("NoFills").type) == "list<item: struct<FillPx: int64>>"
    assert legs.field("LegNote").type == pa.string()


def test_arrow_decode_of_hand_encoded_messages() -> None:
    rows = _table(SbeDecoder(BOOK, "BookUpdate"), [_book_v2(), _book_v1_older(), _book_newer()]).to_pylist()
    assert rows[0]["NoMDEntries"] == [
        {"MDEntryPx_mantissa": 4_512_250_000_000, "MDEntryPx_exponent": -9, "MDEntrySize": 7,
         "MDUpdateAction": "New", "MDEntryType": "Bid", "MDPriceLevel": 1},
        {"MDEntryPx_mantissa": None, "MDEntryPx_exponent": -9, "MDEntrySize": None,
         "MDUpdateAction": "Delete", "MDEntryType": "Offer", "MDPriceLevel": None},
    ]
    assert rows[0]["NoOrderIDEntries"] == [{"OrderID": Decimal(987654321), "MDDisplayQty": None}]
    assert rows[0]["TransactTime"] == Decimal(1_700_000_000_123)
    assert rows[1]["NoMDEntries"][0]["MDPriceLevel"] is None and rows[1]["NoMDEntries"][0]["MDEntrySize"] == 3
    assert rows[1]["NoOrderIDEntries"] is None  # absent: the sender's version predates the group
    assert rows[2]["NoMDEntries"][0]["MDPriceLevel"] == 3 and rows[2]["NoOrderIDEntries"] == []
    quote = _table(SbeDecoder(BOOK, "Quote"), [_quote(), _quote()]).to_pylist()
    assert quote[0]["Ratios"] == [-1, 2, 3] and quote[0]["Text"] == "hi" and quote[0]["Symbol"] == "ESZ5"
    assert quote[1]["NoLegs"] == [
        {"LegID": 1001, "NoFills": [{"FillPx": 10}, {"FillPx": 11}], "LegNote": "first"},
        {"LegID": 1002, "NoFills": [], "LegNote": ""},
    ]


def test_arrow_round_trip_is_byte_identical() -> None:
    payloads = [_book_v2(), _book_v2()]
    table = _table(SbeDecoder(BOOK, "BookUpdate"), payloads)
    assert SbeEncoder(BOOK, "BookUpdate").encode(table).to_pylist() == payloads
    table = _table(SbeDecoder(BOOK, "Quote"), [_quote()] * 3)
    assert SbeEncoder(BOOK, "Quote").encode(table).to_pylist() == [_quote()] * 3


def test_arrow_encode_from_built_columns_matches_hand_encoding() -> None:
    entry = pa.struct([("MDEntryPx_mantissa", pa.int64()), ("MDEntrySize", pa.int32()),
                       ("MDUpdateAction", pa.string()), ("MDEntryType", pa.string()), ("MDPriceLevel", pa.int16())])
    table = pa.table({
        "TransactTime": pa.array([1_700_000_000_123], pa.int64()),
        "MatchEventIndicator": pa.array([0x81], pa.int16()),
        "NoMDEntries": pa.array([[
            {"MDEntryPx_mantissa": 4_512_250_000_000, "MDEntrySize": 7, "MDUpdateAction": "New",
             "MDEntryType": "Bid", "MDPriceLevel": 1},
            {"MDEntryPx_mantissa": None, "MDEntrySize": None, "MDUpdateAction": "Delete",
             "MDEntryType": "Offer", "MDPriceLevel": None}]], pa.list_(entry)),
        "NoOrderIDEntries": pa.array([[{"OrderID": 987654321}]], pa.list_(pa.struct([("OrderID", pa.int64())]))),
    })
    assert SbeEncoder(BOOK, "BookUpdate").encode(table).to_pylist() == [_book_v2()]


def test_arrow_decode_matches_codec_for_many_random_messages() -> None:
    codec = SbeCodec.from_xml(BOOK)
    rng = np.random.default_rng(7)
    payloads = []
    for i in range(300):
        legs = [
            {"leg_id": int(rng.integers(0, 1 << 32)),
             "no_fills": [{"fill_px": int(rng.integers(-1000, 1000))} for _ in range(int(rng.integers(0, 4)))],
             "leg_note": "n" * int(rng.integers(0, 5))}
            for _ in range(int(rng.integers(0, 5)))
        ]
        payloads.append(codec.encode("Quote", quote_id=i, symbol="AB", ratios=[i, -i, 3], no_legs=legs,
                                     text="t" * (i % 3)))
    rows = _table(SbeDecoder(BOOK, "Quote"), payloads).to_pylist()
    for payload, row in zip(payloads, rows, strict=True):
        msg = codec.decode(payload)
        assert row["QuoteID"] == msg.quote_id and row["Ratios"] == list(msg.ratios) and row["Text"] == msg.text
        assert [(e["LegID"], [f["FillPx"] for f in e["NoFills"]], e["LegNote"]) for e in row["NoLegs"]] == [
            (e.leg_id, [f.fill_px for f in e.no_fills], e.leg_note) for e in msg.no_legs]
    again = SbeEncoder(BOOK, "Quote").encode(_table(SbeDecoder(BOOK, "Quote"), payloads))
    assert again.to_pylist() == payloads


def test_arrow_decode_of_malformed_groups() -> None:
    truncated = _quote()[:-12]
    with pytest.raises(Exception, match="cannot decode the SBE message at position 64.*group Quote.NoLegs"):
        _table(SbeDecoder(BOOK, "Quote"), [_quote(), truncated])
    rows = _table(SbeDecoder(BOOK, "Quote", on_error="null"), [_quote(), truncated, _quote()]).to_pylist()
    assert rows[1]["NoLegs"] is None and rows[1]["QuoteID"] is None
    assert rows[0]["NoLegs"] == rows[2]["NoLegs"] and len(rows[2]["NoLegs"]) == 2
    huge = bytearray(_book_v2())
    huge[21] = 200  # numInGroup (after the 8-byte header, 11-byte block and uint16 blockLength) past the end
    with pytest.raises(Exception, match="200 entries of 16 bytes"):
        _table(SbeDecoder(BOOK, "BookUpdate"), [bytes(huge)])


def test_multi_message_decode_skips_unsupported_message() -> None:
    decoder = SbeDecoder(BOOK)
    names = [f.name for f in decoder.arrow_fields()]
    assert "NoMDEntries" in names and "NoLegs" in names and "Nope" not in names
    rows = _table(decoder, [_book_v2(), _quote()]).to_pylist()
    assert rows[0]["sbeMessage"] == "BookUpdate" and rows[1]["sbeMessage"] == "Quote"
    assert rows[0]["NoLegs"] is None and len(rows[1]["NoLegs"]) == 2


# ---- the SBE project's Car example ------------------------------------------------------------------------------


def _car(codec: SbeCodec, serial: int, fuel: int, performance: int) -> bytes:
    return codec.encode(
        "Car", serial_number=serial, model_year=2013, available="T", code="A", some_numbers=[0, 1, 2, serial],
        vehicle_code="abcdef", extras=6, engine_capacity=2000, engine_num_cylinders=4,
        engine_manufacturer_code="123", engine_efficiency=35, engine_booster_enabled="T",
        engine_booster_boost_type="NITROUS", engine_booster_horse_power=200,
        fuel_figures=[{"speed": 30 + j, "mpg": 35.5, "usage_description": "Urban Cycle"[: j * 3]} for j in range(fuel)],
        performance_figures=[
            {"octane_rating": 95 + j, "acceleration": [{"mph": 30 + k, "seconds": 4.0 + k} for k in range(j + 1)]}
            for j in range(performance)
        ],
        manufacturer="Honda", model="Civic VTi", activation_code="abcdef",
    )


def test_car_example_wire_layout_by_hand() -> None:
    codec = SbeCodec.from_xml(CAR)
    hand = (
        struct.pack("<HHHH", 45, 1, 1, 0)
        + struct.pack("<QHBB4I6sB", 1234, 2013, 1, ord("A"), 0, 1, 2, 1234, b"abcdef", 6)
        + struct.pack("<HB3sbBBB", 2000, 4, b"123", 35, 1, ord("N"), 200)
        + struct.pack("<HH", 6, 1) + struct.pack("<Hf", 30, 35.5) + struct.pack("<I", 0)
        + struct.pack("<HH", 1, 1) + struct.pack("<B", 95) + struct.pack("<HH", 6, 1) + struct.pack("<Hf", 30, 4.0)
        + struct.pack("<I", 5) + b"Honda" + struct.pack("<I", 9) + b"Civic VTi" + struct.pack("<I", 6) + b"abcdef"
    )
    assert _car(codec, 1234, 1, 1) == hand
    msg = codec.decode(hand)
    assert msg.engine_max_rpm == 9000 and msg.engine_fuel == "Petrol" and msg.discounted_model == ord("C")
    assert msg.some_numbers == (0, 1, 2, 1234)


def test_car_example_arrow_round_trip() -> None:
    codec = SbeCodec.from_xml(CAR)
    payloads = [_car(codec, i, i % 3, (i * 7) % 4) for i in range(40)]
    decoder = SbeDecoder(CAR)
    table = _table(decoder, payloads)
    rows = table.to_pylist()
    assert rows[5]["someNumbers"] == [0, 1, 2, 5]
    assert rows[5]["performanceFigures"][2]["acceleration"][2] == {"mph": 32, "seconds": 6.0}
    assert rows[2]["fuelFigures"][1] == {"speed": 31, "mpg": 35.5, "usageDescription": "Urb"}
    assert rows[0]["engine_booster_BoostType"] == "NITROUS" and rows[0]["discountedModel"] == "C"
    assert SbeEncoder(CAR, "Car").encode(table).to_pylist() == payloads


def test_control_protocol_codec_unchanged() -> None:
    from aeron_archive_spark.archive.codecs import CODEC

    assert not CODEC.unsupported and all(not m.groups for m in CODEC.messages)
