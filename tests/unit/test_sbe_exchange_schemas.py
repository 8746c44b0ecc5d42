"""The real exchange schemas, every message: CME MDP 3.0 market data (FixBinary.xml) and CME iLink 3 order entry
(ilinkbinary.xml), both as the SBE project keeps them for its own tests. For each message, random valid messages
(every field set or, if optional, sometimes null; groups of 0-5 entries, nested groups too) are encoded by the
per-message codec, decoded through the Arrow path and compared value by value with what was generated, then encoded
back from the Arrow columns and compared byte for byte."""

from __future__ import annotations

import random
import string
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aeron_archive_spark.archive.codecs import SbeCodec
from aeron_archive_spark.archive.tables.sbe.columns import ColumnSpec, Kind, message_columns
from aeron_archive_spark.archive.tables.sbe.decode import SbeDecoder
from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder

SCHEMAS = Path(__file__).parent / "sbe_schemas"
MDP3 = str(SCHEMAS / "FixBinary.xml")
ILINK3 = str(SCHEMAS / "ilinkbinary.xml")
PER_MESSAGE = 25


def _value(col: ColumnSpec, r: random.Random) -> tuple[Any, Any]:
    """(what the codec is given, what the Arrow column must hold) for one fixed field; (omit, None) for a null."""
    f = col.field
    assert f is not None
    if col.kind is Kind.CONSTANT:
        if f.enum is not None:
            return _OMIT, next(k for k, v in f.enum.values.items() if v == f.constant)
        return _OMIT, f.constant
    if col.kind is Kind.ENUM:
        assert f.enum is not None
        name = r.choice(sorted(f.enum.values))
        return name, name
    if col.kind is Kind.SET:
        assert f.set_choices is not None
        bits = sum(1 << b for b in f.set_choices.values() if r.random() < 0.5)
        return bits, bits
    if f.optional and r.random() < 0.25:
        # An optional char array's null is all NUL bytes, which is also the empty string: "" (as Java's decoders).
        return _OMIT, "" if col.kind is Kind.TEXT else None
    if col.kind is Kind.TEXT:
        text = "".join(r.choice(string.ascii_letters + string.digits) for _ in range(r.randint(1, f.length)))
        return text, text
    if col.kind is Kind.BYTES:
        data = bytes(r.randrange(256) for _ in range(f.length))
        return data, data
    if col.kind is Kind.ARRAY:
        values = [_number(f, r) for _ in range(f.length)]
        return values, [Decimal(v) if f.primitive_type == "uint64" else v for v in values]
    value = _number(f, r)
    return value, Decimal(value) if f.primitive_type == "uint64" else value


def _number(f: Any, r: random.Random) -> int | float:
    if f.primitive_type in ("float", "double"):
        x = r.uniform(-1e9, 1e9)
        return float(np.float32(x)) if f.primitive_type == "float" else x
    while True:
        v = r.randint(int(f.min_value), int(f.max_value))
        if not f.optional or v != f.null_value:
            return v


_OMIT = object()


def random_block(
    columns: tuple[ColumnSpec, ...] | list[ColumnSpec], r: random.Random
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Codec keyword arguments and the expected Arrow row (or struct) of a message root or a group entry (also
    used by the Spark test, tests/spark/test_sbe_groups_spark.py)."""
    kwargs: dict[str, Any] = {}
    row: dict[str, Any] = {}
    for col in columns:
        if col.kind is Kind.GROUP:
            assert col.group is not None
            entries = [random_block(col.children, r) for _ in range(r.randint(0, min(5, col.group.max_count)))]
            kwargs[col.attr] = [k for k, _ in entries]
            row[col.name] = [e for _, e in entries]
        elif col.kind in (Kind.VAR_TEXT, Kind.VAR_BYTES):
            assert col.var_field is not None
            n = r.randint(0, min(20, col.var_field.max_length))
            data: str | bytes = (
                "".join(r.choice(string.ascii_letters) for _ in range(n))
                if col.kind is Kind.VAR_TEXT
                else bytes(r.randrange(256) for _ in range(n))
            )
            kwargs[col.attr] = data
            row[col.name] = data
        else:
            given, expected = _value(col, r)
            if given is not _OMIT:
                kwargs[col.attr] = given
            row[col.name] = expected
    return kwargs, row


def _messages(schema: str) -> list[tuple[str, str]]:
    return [(schema, m.name) for m in SbeCodec.from_xml(schema).messages]


@pytest.mark.parametrize("schema, message", _messages(MDP3) + _messages(ILINK3),
                         ids=lambda v: Path(v).stem if v.endswith(".xml") else v)
def test_every_message_round_trips_through_arrow(schema: str, message: str) -> None:
    codec = SbeCodec.from_xml(schema)
    assert not codec.unsupported
    r = random.Random(f"{Path(schema).stem}/{message}")
    columns = message_columns(codec, message)
    generated = [random_block(columns, r) for _ in range(PER_MESSAGE)]
    payloads = [codec.encode(message, **kwargs) for kwargs, _ in generated]
    for payload in payloads:  # the per-message codec: decode, re-encode, same bytes
        decoded = codec.decode(payload)
        assert decoded.encoded_length == len(payload)
        assert codec.encode(message, **decoded.as_dict()) == payload
    decoder = SbeDecoder(schema, message)
    values = pa.array(payloads, type=pa.binary())
    arrays = decoder.decode(values, np.arange(len(payloads)) * 64, 1)
    # `value` alongside, as in the source's rows: a message without fields (AdminHeartbeat12) still has rows
    table = pa.Table.from_arrays([*arrays, values], schema=pa.schema([*decoder.arrow_fields(), ("value", pa.binary())]))
    for i, (row, (_, want)) in enumerate(zip(table.to_pylist(), generated, strict=True)):
        assert row == want | {"value": payloads[i]}, f"{message} #{i}"
    assert SbeEncoder(schema, message, ignore_columns=("value",)).encode(table).to_pylist() == payloads


@pytest.mark.parametrize("schema", [MDP3, ILINK3], ids=["FixBinary", "ilinkbinary"])
def test_all_messages_of_a_schema_in_one_stream(schema: str) -> None:
    """Without sbeMessage every template decodes side by side; each row holds its own message's values (a name that
    several messages use with different types is `<Message>_<name>`)."""
    codec = SbeCodec.from_xml(schema)
    r = random.Random(schema)
    messages = []
    for spec in codec.messages:
        for _ in range(3):
            kwargs, want = random_block(message_columns(codec, spec.name), r)
            messages.append((codec.encode(spec.name, **kwargs), spec.name, want))
    r.shuffle(messages)
    decoder = SbeDecoder(schema)
    arrays = decoder.decode(pa.array([p for p, _, _ in messages], type=pa.binary()), np.arange(len(messages)), 1)
    rows = pa.Table.from_arrays(arrays, schema=pa.schema(decoder.arrow_fields())).to_pylist()
    names = {f.name for f in decoder.arrow_fields()}
    for row, (_, name, want) in zip(rows, messages, strict=True):
        assert row["sbeMessage"] == name
        got = {k: row[f"{name}_{k}" if f"{name}_{k}" in names else k] for k in want}
        assert got == want, name


def test_missing_required_struct_field_is_named_with_its_group() -> None:
    """The sink's error for a group entry's missing required field should name the group and its entry fields."""
    from aeron_archive_spark.archive.tables.sbe.columns import SbeEncodeError

    book = str(SCHEMAS / "book.xml")
    entry = pa.struct([("MDEntryType", pa.string())])  # MDUpdateAction (required) left out
    table = pa.table({"TransactTime": pa.array([1], pa.int64()), "MatchEventIndicator": pa.array([0], pa.int16()),
                      "NoMDEntries": pa.array([[{"MDEntryType": "Bid"}]], pa.list_(entry))})
    with pytest.raises(SbeEncodeError, match=r"NoMDEntries.*MDUpdateAction.*MDEntryPx_mantissa"):
        SbeEncoder(book, "BookUpdate").encode(table)
