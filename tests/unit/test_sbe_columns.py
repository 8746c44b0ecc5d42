"""Vectorised SBE decode/encode (archive.tables.sbe: columns, decode, encode) against the per-message SbeCodec."""

from __future__ import annotations

import math
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aeron_archive_spark.archive.codecs.codec import SbeCodec, SchemaError
from aeron_archive_spark.archive.tables.sbe import (
    MESSAGE_COLUMN,
    UNKNOWN_ENUM,
    ColumnSpec,
    Kind,
    SbeDecodeError,
    SbeEncodeError,
    SbeEncoder,
    message_columns,
)
from aeron_archive_spark.archive.tables.payload import PayloadDecoder
from aeron_archive_spark.archive.tables.sbe.decode import SbeDecoder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "market_data.xml"

SCHEMA = """<?xml version="1.0" encoding="UTF-8"?>
<sbe:messageSchema xmlns:sbe="http://fixprotocol.io/2016/sbe" package="t" id="77" version="2"
                   byteOrder="{order}">
  <types>
    <composite name="messageHeader">
      <type name="blockLength" primitiveType="uint16"/><type name="templateId" primitiveType="uint16"/>
      <type name="schemaId" primitiveType="uint16"/><type name="version" primitiveType="uint16"/>
    </composite>
    <composite name="varString">
      <type name="length" primitiveType="uint16"/>
      <type name="varData" primitiveType="uint8" length="0" characterEncoding="UTF-8"/>
    </composite>
    <composite name="varBytes">
      <type name="length" primitiveType="uint32" maxValue="1000"/>
      <type name="varData" primitiveType="uint8" length="0"/>
    </composite>
    <type name="Sym" primitiveType="char" length="6"/>
    <type name="Raw4" primitiveType="uint8" length="4"/>
    <type name="OptInt" primitiveType="int32" presence="optional" nullValue="-1"/>
    <type name="OptDouble" primitiveType="double" presence="optional"/>
    <enum name="Side" encodingType="char"><validValue name="BUY">B</validValue><validValue name="SELL">S</validValue></enum>
    <enum name="Venue" encodingType="uint16"><validValue name="X">7</validValue><validValue name="Y">900</validValue></enum>
    <set name="Flags" encodingType="uint8"><choice name="A">0</choice><choice name="B">1</choice></set>
    <composite name="Px"><type name="m" primitiveType="int64"/><type name="e" primitiveType="int8" presence="constant">-4</type></composite>
  </types>
  <sbe:message name="Order" id="1">
    <field name="a" id="1" type="int8"/><field name="b" id="2" type="uint8"/>
    <field name="c" id="3" type="int16"/><field name="d" id="4" type="uint16"/>
    <field name="e" id="5" type="int32"/><field name="f" id="6" type="uint32"/>
    <field name="g" id="7" type="int64"/><field name="h" id="8" type="uint64"/>
    <field name="x" id="9" type="float"/><field name="y" id="10" type="OptDouble"/>
    <field name="sym" id="11" type="Sym"/><field name="raw" id="12" type="Raw4"/>
    <field name="opt" id="13" type="OptInt"/><field name="side" id="14" type="Side"/>
    <field name="venue" id="15" type="Venue"/><field name="flags" id="16" type="Flags"/>
    <field name="px" id="17" type="Px"/><field name="ch" id="18" type="char"/>
    <field name="late" id="19" type="int64" sinceVersion="2"/>
  </sbe:message>
  <sbe:message name="Note" id="2">
    <field name="g" id="1" type="int64"/><field name="x" id="2" type="double"/>
    <field name="position" id="3" type="int32"/>
    <data name="text" id="4" type="varString"/><data name="blob" id="5" type="varBytes" sinceVersion="2"/>
  </sbe:message>
</sbe:messageSchema>
"""


@pytest.fixture(params=["littleEndian", "bigEndian"])
def schema_path(request, tmp_path) -> str:
    path = tmp_path / f"schema-{request.param}.xml"
    path.write_text(SCHEMA.format(order=request.param))
    return str(path)


@pytest.fixture
def codec(schema_path) -> SbeCodec:
    return SbeCodec.from_xml(schema_path)


def random_order(rng: random.Random) -> dict[str, Any]:
    return dict(
        a=rng.randint(-128, 127), b=rng.randint(0, 254), c=rng.randint(-2**15, 2**15 - 1),
        d=rng.randint(0, 2**16 - 2), e=rng.randint(-2**31 + 1, 2**31 - 1), f=rng.randint(0, 2**32 - 2),
        g=rng.randint(-2**63 + 1, 2**63 - 1), h=rng.choice([0, 2**64 - 2, rng.randint(0, 2**64 - 2)]),
        x=rng.choice([1.5, -0.25, 3.0e10]), y=rng.choice([math.nan, 2.5, -1e300]),
        sym=rng.choice(["", "A", "ABCDEF", "XY\0Z"])[:6], raw=bytes(rng.randrange(256) for _ in range(4)),
        opt=rng.choice([-1, 5, 2**31 - 1]), side=rng.choice([ord("B"), ord("S"), ord("Q"), 0]),
        venue=rng.choice([7, 900, 65535, 3]), flags=rng.randint(0, 3), px_m=rng.randint(-10**12, 10**12),
        ch=rng.choice(["", "z"]), late=rng.randint(-5, 5),
    )


def random_note(rng: random.Random) -> dict[str, Any]:
    return dict(g=rng.randint(-100, 100), x=rng.random(), position=rng.randint(-5, 5),
                text=rng.choice(["", "hello", "héllo wörld", "x" * 300]),
                blob=bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 999]))))


def older_version(codec: SbeCodec, payload: bytes, block_length: int) -> bytes:
    """The same message as a version-1 sender writes it: a shorter block, version 1 in the header."""
    fmt = codec.byte_order + "HHHH"
    bl, tid, sid, _ = struct.unpack_from(fmt, payload)
    return struct.pack(fmt, block_length, tid, sid, 1) + payload[8:8 + block_length] + payload[8 + bl:]


def expected_value(col: ColumnSpec, msg: Any) -> Any:
    """What the per-message codec's decode of `msg` means under the column mapping rules."""
    if col.kind is Kind.CONSTANT:
        return col.field.constant  # type: ignore[union-attr]
    if col.var_field is not None:
        return None if col.var_field.since_version > msg.version else getattr(msg, col.attr)
    f = col.field
    assert f is not None
    if f.offset + f.size > msg.block_length or f.since_version > msg.version:
        return None
    v = getattr(msg, col.attr)
    if col.kind is Kind.ENUM:
        if v == f.enum.null_value:  # type: ignore[union-attr]
            return None
        return next((k for k, code in f.enum.values.items() if code == v), UNKNOWN_ENUM)  # type: ignore[union-attr]
    if f.optional and (v == f.null_value or (isinstance(v, float) and math.isnan(v) and math.isnan(f.null_value))):
        return None
    if f.primitive_type == "uint64":
        return Decimal(v)
    return v


def decode_rows(decoder: SbeDecoder, payloads: list[bytes], recording_id: int = 9) -> list[dict[str, Any]]:
    positions = np.arange(len(payloads), dtype=np.int64) * 1024
    arrays = decoder.decode(pa.array(payloads, type=pa.binary()), positions, recording_id)
    fields = decoder.arrow_fields()
    for arr, f in zip(arrays, fields):
        assert arr.type == f.type and len(arr) == len(payloads)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields)).to_pylist()


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


# ---------------------------------------------------------------------------------------------------------------


def test_decoder_implements_the_payload_decoder_protocol(schema_path):
    decoder = SbeDecoder(schema_path, "Order")
    assert isinstance(decoder, PayloadDecoder)
    assert all(f.nullable for f in decoder.arrow_fields())
    types = {f.name: f.type for f in decoder.arrow_fields()}
    assert types["b"] == pa.int16() and types["d"] == pa.int32() and types["f"] == pa.int64()
    assert types["h"] == pa.decimal128(20, 0) and types["x"] == pa.float32() and types["side"] == pa.string()
    assert types["raw"] == pa.binary() and types["px_m"] == pa.int64() and types["px_e"] == pa.int8()
    assert types["flags"] == pa.int16()


@pytest.mark.parametrize("older", [False, True])
def test_vectorised_decode_of_one_template_equals_per_message_decode(codec, schema_path, older):
    rng = random.Random(1)
    payloads = [codec.encode("Order", **random_order(rng)) for _ in range(300)]
    late_offset = codec.message("Order").field("late").offset
    if older:  # every other message from a version-1 sender: its block ends before `late`
        payloads = [older_version(codec, p, late_offset) if i % 2 else p for i, p in enumerate(payloads)]
    decoder = SbeDecoder(schema_path, "Order")
    rows = decode_rows(decoder, payloads)
    columns = message_columns(codec, "Order")
    for payload, row in zip(payloads, rows):
        msg = codec.decode(payload)
        for col in columns:
            assert same(row[col.name], expected_value(col, msg)), (col.name, row[col.name], msg)
    if older:
        assert rows[1]["late"] is None and rows[0]["late"] is not None


def test_several_templates_decode_into_the_union_of_their_columns(codec, schema_path):
    rng = random.Random(2)
    payloads = []
    for i in range(200):
        if i % 3:
            payloads.append(codec.encode("Order", **random_order(rng)))
        else:
            p = codec.encode("Note", **random_note(rng))
            payloads.append(older_version(codec, p, codec.message("Note").block_length) if i % 2 else p)
    decoder = SbeDecoder(schema_path)
    names = [f.name for f in decoder.arrow_fields()]
    # g (int64 in both) is shared; x (float vs double) is prefixed; Note.position clashes with a source column
    assert names[0] == MESSAGE_COLUMN and "g" in names and "Order_x" in names and "Note_x" in names
    assert "Note_position" in names and "x" not in names and names.count("g") == 1
    rows = decode_rows(decoder, payloads)
    for payload, row in zip(payloads, rows):
        msg = codec.decode(payload)
        assert row[MESSAGE_COLUMN] == msg.name
        for col in message_columns(codec, msg.name):
            name = f"{msg.name}_x" if col.name == "x" else col.name
            assert same(row[name], expected_value(col, msg)), (name, row[name], msg)
        other = "Note" if msg.name == "Order" else "Order"
        assert row[f"{other}_x"] is None
    assert any(r["blob"] is None for r in rows) and any(r["blob"] == b"" for r in rows)


def test_the_example_market_data_schema_decodes_trades(tmp_path):
    codec = SbeCodec.from_xml(str(EXAMPLE))
    trades = [codec.encode("Trade", symbol="AAPL", price_mantissa=18_512_000_000 + i, quantity=100 + i,
                           side=i % 2, timestamp_ns=1_700_000_000_000_000_000 + i, trade_id=i) for i in range(1000)]
    rows = decode_rows(SbeDecoder(str(EXAMPLE)), trades)
    assert list(rows[1]) == ["symbol", "price_mantissa", "price_exponent", "quantity", "timestampNs", "tradeId",
                             "side"]
    assert rows[1] == {"symbol": "AAPL", "price_mantissa": 18_512_000_001, "price_exponent": -8, "quantity": 101,
                       "timestampNs": 1_700_000_000_000_000_001, "tradeId": 1, "side": "SELL"}
    assert [r["tradeId"] for r in rows] == list(range(1000))


def test_sliced_and_non_contiguous_payload_arrays_decode(codec, schema_path):
    rng = random.Random(3)
    payloads = [codec.encode("Order", **random_order(rng)) for _ in range(50)]
    values = pa.array(payloads, type=pa.binary())[7:40]
    decoder = SbeDecoder(schema_path, "Order")
    arrays = decoder.decode(values, np.arange(33, dtype=np.int64), 1)
    got = pa.Table.from_arrays(arrays, schema=pa.schema(decoder.arrow_fields())).column("g").to_pylist()
    assert got == [codec.decode(p).g for p in payloads[7:40]]
    large = decoder.decode(pa.array(payloads, type=pa.large_binary()), np.arange(50, dtype=np.int64), 1)
    assert large[6].to_pylist() == [codec.decode(p).g for p in payloads]


def bad_payloads(codec: SbeCodec) -> dict[str, bytes]:
    order = codec.encode("Order", **random_order(random.Random(4)))
    note = codec.encode("Note", g=1, x=2.0, position=3, text="hello", blob=b"abc")
    fmt = codec.byte_order + "HHHH"
    bl, tid, sid, ver = struct.unpack_from(fmt, order)
    return {
        "shorter than the 8-byte SBE message header": order[:5],
        "unknown template id 99": struct.pack(fmt, bl, 99, sid, ver) + order[8:],
        "schema id 5 (template id 1) differs": struct.pack(fmt, bl, tid, 5, ver) + order[8:],
        "buffer too short for block of message Order": order[:-3],
        "var field text of message Note length 5 exceeds": note[:8 + codec.message("Note").block_length + 4],
    }


@pytest.mark.parametrize("case", range(5))
def test_undecodable_payloads_fail_naming_recording_and_position(codec, schema_path, case):
    reason, bad = list(bad_payloads(codec).items())[case]
    good = codec.encode("Order", **random_order(random.Random(6)))
    with pytest.raises(SbeDecodeError) as info:
        decode_rows(SbeDecoder(schema_path), [good, good, bad, good, bad], recording_id=42)
    text = str(info.value)
    assert "recording 42" in text and "position 2048" in text and reason in text, text
    assert "sbe.onError=null" in text


def test_on_error_null_routes_undecodable_payloads_to_null_rows(codec, schema_path):
    bad = list(bad_payloads(codec).values())
    good = codec.encode("Order", **random_order(random.Random(7)))
    payloads = [good] + bad + [good]
    rows = decode_rows(SbeDecoder(schema_path, on_error="null"), payloads)
    assert rows[0]["g"] == rows[-1]["g"] == codec.decode(good).g and rows[0][MESSAGE_COLUMN] == "Order"
    for row in rows[1:-1]:
        assert all(v is None for v in row.values()), row


def test_sbe_message_rejects_other_templates_and_unknown_names(codec, schema_path):
    note = codec.encode("Note", **random_note(random.Random(8)))
    with pytest.raises(SbeDecodeError, match=r"template id 2 \(message Note\) is not sbeMessage=Order"):
        decode_rows(SbeDecoder(schema_path, "Order"), [note])
    with pytest.raises(SchemaError, match="option sbeMessage: no message 'Trade'.*Order \\(id 1\\), Note \\(id 2\\)"):
        SbeDecoder(schema_path, "Trade")
    with pytest.raises(ValueError, match="sbe.onError"):
        SbeDecoder(schema_path, "Order", on_error="skip")


def test_empty_batch_gives_empty_typed_columns(schema_path):
    decoder = SbeDecoder(schema_path)
    arrays = decoder.decode(pa.array([], type=pa.binary()), np.zeros(0, dtype=np.int64), 1)
    assert [a.type for a in arrays] == [f.type for f in decoder.arrow_fields()] and all(len(a) == 0 for a in arrays)


# --------------------------------------------------------------------------------------------------------------- encode


def test_encode_round_trips_decoded_rows_and_matches_the_codec(codec, schema_path):
    rng = random.Random(9)
    orders = [random_order(rng) for _ in range(200)]
    for o in orders:  # the codec writes unknown enum codes, the encoder only named values or the null value
        o["side"] = o["side"] if o["side"] in (ord("B"), ord("S")) else 0
        o["venue"] = o["venue"] if o["venue"] in (7, 900) else 65535
    payloads = [codec.encode("Order", **o) for o in orders]
    decoder = SbeDecoder(schema_path, "Order")
    arrays = decoder.decode(pa.array(payloads, type=pa.binary()), np.arange(200, dtype=np.int64), 1)
    batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(decoder.arrow_fields()))
    encoded = SbeEncoder(schema_path, "Order").encode(batch)
    assert encoded.type == pa.binary() and encoded.null_count == 0
    for original, again in zip(payloads, encoded.to_pylist()):
        a, b = codec.decode(original), codec.decode(again)
        assert all(same(x, y) for x, y in zip(a.as_dict().values(), b.as_dict().values())), (a, b)
    # with a required value in every field, the bytes are exactly the codec's
    assert encoded.to_pylist()[0] == payloads[0] or codec.decode(payloads[0]).y != codec.decode(payloads[0]).y


def test_encode_var_fields_and_omitted_optional_columns(codec, schema_path):
    rng = random.Random(10)
    notes = [random_note(rng) for _ in range(100)]
    table = pa.table({"g": [n["g"] for n in notes], "x": [n["x"] for n in notes],
                      "Note_position": pa.array([n["position"] for n in notes], type=pa.int32()),
                      "text": [n["text"] for n in notes], "blob": [n["blob"] for n in notes],
                      "reservedValue": [0] * 100})
    encoder = SbeEncoder(schema_path, "Note", ignore_columns=["reservedValue"])
    assert encoder.fixed_length is None and encoder.input_columns == ["g", "x", "Note_position", "text", "blob"]
    encoded = encoder.encode(table).to_pylist()
    assert encoded == [codec.encode("Note", **n) for n in notes]
    fixed = SbeEncoder(schema_path, "Order")
    batch = pa.table({name: pa.array([1, 2], type=pa.int64()) for name in ("a", "b", "c", "d", "e", "f", "g", "h")}
                     | {"x": [0.5, 1.0], "sym": ["AB", "ABCDEF"], "raw": [b"\x01", b"1234"],
                        "side": ["BUY", None], "venue": pa.array([7, 900], type=pa.int16()), "flags": [1, 3],
                        "px_m": [10, 20], "ch": ["q", ""], "late": [1, 2], "opt": pa.array([None, 3], pa.int64()),
                        "px_e": pa.array([-4, -4], pa.int8())})
    out = [codec.decode(b) for b in fixed.encode(batch).to_pylist()]
    assert fixed.fixed_length == 8 + codec.message("Order").block_length
    assert out[0].opt == -1 and out[1].opt == 3 and math.isnan(out[0].y)  # omitted optional double -> NaN null
    assert out[0].side == ord("B") and out[1].side == 0  # null enum -> its null value (char enum: NUL)
    assert out[0].sym == "AB" and out[0].raw == b"\x01\0\0\0" and out[1].venue == 900 and out[0].px_e == -4


@pytest.mark.parametrize("columns, message", [
    ({"g": [1], "zzz": [2]}, "column 'zzz' is not a field of SBE message Note"),
    ({"x": [1.0]}, "missing column 'g': required field g of SBE message Note"),
    ({"g": [1, None], "x": [1.0, 2.0]}, "column 'g' is null at row 1"),
    ({"g": ["1"], "x": [1.0]}, "column 'g' has type string"),
    ({"g": [1], "x": [1.0], "Note_position": [2**40]}, "column 'Note_position': value 1099511627776 does not fit"),
    ({"g": [1], "x": [1.0], "Note_position": [1], "blob": [b"x" * 1001]}, "column 'blob': 1001 bytes at row 0 exceed the maximum 1000"),
])
def test_encode_errors_name_the_column(schema_path, columns, message):
    with pytest.raises(SbeEncodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SbeEncoder(schema_path, "Note").encode(pa.table(columns))


def test_encode_errors_for_enum_text_and_constant_columns():
    encoder = SbeEncoder(str(EXAMPLE), "Trade")
    base = {"symbol": ["AAPL"], "price_mantissa": [1], "quantity": [1], "timestampNs": [1], "tradeId": [1]}
    with pytest.raises(SbeEncodeError, match=r"column 'side': 'HOLD' at row 0 is not a Side value \(BUY, SELL\)"):
        encoder.encode(pa.table(base | {"side": ["HOLD"]}))
    with pytest.raises(SbeEncodeError, match="column 'side': 5 at row 0 is not a Side code"):
        encoder.encode(pa.table(base | {"side": [5]}))
    with pytest.raises(SbeEncodeError, match="column 'symbol': 9 bytes at row 0 exceed the 8 of field symbol"):
        encoder.encode(pa.table(base | {"side": ["BUY"], "symbol": ["TOOLONGXX"]}))
    with pytest.raises(SbeEncodeError, match="column 'symbol': 'ÄPL' at row 0 is not US-ASCII"):
        encoder.encode(pa.table(base | {"side": ["BUY"], "symbol": ["ÄPL"]}))
    with pytest.raises(SbeEncodeError, match="column 'price_exponent'.*is the constant -8, got -2"):
        encoder.encode(pa.table(base | {"side": ["BUY"], "price_exponent": [-2]}))


def test_encode_of_an_empty_batch_is_an_empty_binary_array():
    encoder = SbeEncoder(str(EXAMPLE), "Trade")
    empty = pa.table({name: pa.array([], type=pa.int64()) for name in ("price_mantissa", "quantity", "timestampNs",
                                                                       "tradeId")}
                     | {"symbol": pa.array([], pa.string()), "side": pa.array([], pa.string())})
    out = encoder.encode(empty)
    assert out.type == pa.binary() and len(out) == 0


def test_decoded_fields_yield_to_every_fixed_source_column():
    from aeron_archive_spark.archive.tables.sbe.columns import RESERVED_COLUMNS
    from aeron_archive_spark.archive.tables.schema import FIXED_FIELDS

    assert RESERVED_COLUMNS == tuple(f.name for f in FIXED_FIELDS)
