"""Messages encoded by the SBE project's own generated Java codecs (the reference implementation of SBE), for every
message of CME MDP 3.0 (FixBinary.xml), CME iLink 3 (ilinkbinary.xml) and the SBE samples' Car schema (and its
version 1 extension): decoded through the Arrow path the Spark source uses and compared field by field with the
values the Java encoders set (as the Java decoders read them back), then encoded back from those Arrow columns with
the sink's encoder and compared byte for byte with the Java bytes. How the fixtures were made:
tests/unit/sbe_java_fixtures/README.md."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aeron_archive_spark.archive.codecs import SbeCodec
from aeron_archive_spark.archive.tables.sbe.columns import ColumnSpec, Kind, message_columns, schema_text
from aeron_archive_spark.archive.tables.sbe.decode import SbeDecoder
from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder

HERE = Path(__file__).parent
FIXTURES = HERE / "sbe_java_fixtures"
SCHEMAS = HERE / "sbe_schemas"
SAMPLES = FIXTURES / "schemas"  # the SBE samples' Car schemas as published (xi:include of common-types.xml)
SCHEMA_OF = {
    "car": str(SCHEMAS / "car.xml"),
    "car-extension": str(SAMPLES / "example-extension-schema.xml"),
    "FixBinary": str(SCHEMAS / "FixBinary.xml"),
    "ilinkbinary": str(SCHEMAS / "ilinkbinary.xml"),
    # SBE constructs the exchange schemas lack (header members the codec does not read, valueRef constant types)
    "sbe-constructs": str(SAMPLES / "sbe-constructs.xml"),
}
# Messages of sbe-constructs.xml that cannot be columns: field names equal but for case (Cased), or in snake_case
# (Refused, which the codec itself refuses).
NO_COLUMNS = {"Cased": 2, "Refused": 3}
# Fields the version 1 Car (the samples' extension schema) adds to version 0.
CAR_V1_FIELDS = ("uuid", "cupHolderCount")


@cache
def fixtures(name: str) -> tuple[dict[str, Any], ...]:
    """The fixture's messages in file order: {"message", "templateId", "hex", "values"} each."""
    with open(FIXTURES / f"{name}.jsonl", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def payloads(records: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> list[bytes]:
    return [bytes.fromhex(r["hex"]) for r in records]


# ---- the Java decoders' view -> our columns ----------------------------------------------------------------------


def expected_row(columns: list[ColumnSpec] | tuple[ColumnSpec, ...], values: dict[str, Any]) -> dict[str, Any]:
    """The Arrow row (or group entry struct) docs/sbe.md's mapping gives for the values the Java decoders read.

    The fixture's values are keyed by the schema's names, composites as nested objects; nulls are already applied
    as the Java generator defines them (an optional field at its null value, an enum at NULL_VAL); unsigned integers
    are exact, binaries are {"hex": ...}."""
    return {col.name: _expected(col, values) for col in columns}


def _expected(col: ColumnSpec, values: dict[str, Any]) -> Any:
    if col.kind is Kind.GROUP:
        return [expected_row(col.children, entry) for entry in values[col.schema_name]]
    if col.kind in (Kind.VAR_TEXT, Kind.VAR_BYTES):
        value = values[col.schema_name]
        return bytes.fromhex(value["hex"]) if col.kind is Kind.VAR_BYTES else value
    f = col.field
    assert f is not None
    value: Any = values
    for part in f.name.split("."):  # a composite member: "engine.booster.BoostType"
        value = value[part]
    if value is None:
        return None
    if col.kind is Kind.BYTES:
        return bytes.fromhex(value["hex"])
    if col.kind is Kind.ARRAY:
        return [None if v is None else Decimal(v) if f.primitive_type == "uint64" else v for v in value]
    if f.primitive_type == "uint64" and isinstance(value, int):
        return Decimal(value)
    return value


def decode_table(schema: str, message: str | None, data: list[bytes]) -> pa.Table:
    """The payloads through the source's vectorised decoder (`value` alongside, as in the source's rows)."""
    decoder = SbeDecoder(schema, message)
    values = pa.array(data, type=pa.binary())
    arrays = decoder.decode(values, np.arange(len(data)) * 64, 1)
    return pa.Table.from_arrays(
        [*arrays, values], schema=pa.schema([*decoder.arrow_fields(), ("value", pa.binary())])
    )


def _cases() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in SCHEMA_OF:
        for message in dict.fromkeys(r["message"] for r in fixtures(name)):
            if message not in NO_COLUMNS:
                out.append((name, message))
    return out


# ---- every message: decode, compare, encode back -----------------------------------------------------------------


def test_fixtures_cover_every_message_of_each_schema() -> None:
    for name, schema in SCHEMA_OF.items():
        codec = SbeCodec.from_xml(schema)
        supported = {m.template_id for m in codec.messages}
        assert set(codec.unsupported) == ({NO_COLUMNS["Refused"]} if name == "sbe-constructs" else set()), name
        assert {r["templateId"] for r in fixtures(name)} == supported | set(codec.unsupported), name
    assert len(fixtures("FixBinary")) == 29 * 4 and len(fixtures("ilinkbinary")) == 48 * 4


@pytest.mark.parametrize("fixture, message", _cases(), ids=lambda v: v)
def test_java_encoded_messages_decode_and_encode_back_byte_identical(fixture: str, message: str) -> None:
    schema = SCHEMA_OF[fixture]
    codec = SbeCodec.from_xml(schema)
    records = [r for r in fixtures(fixture) if r["message"] == message]
    data = payloads(records)
    columns = message_columns(codec, message)
    table = decode_table(schema, message, data)
    for i, (row, record) in enumerate(zip(table.to_pylist(), records, strict=True)):
        assert row == expected_row(columns, record["values"]) | {"value": data[i]}, f"{message} #{i}"
    # the sink's encoder, from the decoded columns: the Java bytes again (schema version, block lengths, known enums)
    assert SbeEncoder(schema, message, ignore_columns=("value",)).encode(table).to_pylist() == data
    for payload in data:  # the per-message codec agrees
        decoded = codec.decode(payload)
        assert decoded.encoded_length == len(payload)
        assert codec.encode(message, **decoded.as_dict()) == payload


@pytest.mark.parametrize("fixture", list(SCHEMA_OF))
def test_java_encoded_messages_of_all_templates_in_one_stream(fixture: str) -> None:
    """Without sbeMessage (each row by its template id), shuffled: same values, under `<Message>_<name>` where
    several messages use a name with different types."""
    schema = SCHEMA_OF[fixture]
    codec = SbeCodec.from_xml(schema)
    records = [r for r in fixtures(fixture) if r["message"] not in NO_COLUMNS]
    random.Random(fixture).shuffle(records)
    table = decode_table(schema, None, payloads(records))
    names = set(table.column_names)
    for i, (row, record) in enumerate(zip(table.to_pylist(), records, strict=True)):
        message = record["message"]
        want = expected_row(message_columns(codec, message), record["values"])
        got = {k: row[f"{message}_{k}" if f"{message}_{k}" in names else k] for k in want}
        assert got == want, f"#{i} {message}"
        if "sbeMessage" in names:
            assert row["sbeMessage"] == message


def test_samples_schema_with_xinclude_reads_as_the_inlined_copy() -> None:
    """The samples' example-schema.xml as published (xi:include of common-types.xml), by path and as the schema
    text the Spark driver ships to executors, decodes the Java messages as tests/unit/sbe_schemas/car.xml does."""
    data = payloads(fixtures("car"))
    want = decode_table(SCHEMA_OF["car"], "Car", data)
    published = str(SAMPLES / "example-schema.xml")
    for schema in (published, schema_text(published)):
        table = decode_table(schema, "Car", data)
        assert table.schema == want.schema and table.to_pylist() == want.to_pylist()
        assert SbeEncoder(schema, "Car", ignore_columns=("value",)).encode(table).to_pylist() == data


# ---- the Car schema's version 0 and version 1 (older and newer senders) ------------------------------------------


def test_version_0_car_read_with_the_version_1_schema() -> None:
    """An older sender: the version 1 fields (uuid, int64[2]; cupHolderCount) are null, everything else as sent
    (the Java version 1 decoders read the same values, with uuid as [null, null]); written back at version 1."""
    schema = SCHEMA_OF["car-extension"]
    records = fixtures("car")
    data = payloads(records)
    table = decode_table(schema, "Car", data)
    columns = message_columns(SbeCodec.from_xml(schema), "Car")
    for row, record in zip(table.to_pylist(), records, strict=True):
        values = record["values"] | dict.fromkeys(CAR_V1_FIELDS)
        want = {c.name: None if c.name in CAR_V1_FIELDS else _expected(c, values) for c in columns}
        assert {k: v for k, v in row.items() if k != "value"} == want
    again = SbeEncoder(schema, "Car", ignore_columns=("value",)).encode(table).to_pylist()
    codec = SbeCodec.from_xml(schema)
    for new, old in zip(again, data, strict=True):
        header = codec.peek_header(new)
        assert (header.block_length, header.version) == (codec.message("Car").block_length, 1)
        assert len(new) == len(old) + codec.message("Car").block_length - 45  # 45: the version 0 block
    # read again: now on the wire, the optional fields hold their null values (a null uuid array: null elements)
    rows = decode_table(schema, "Car", again).drop_columns(["value"]).to_pylist()
    assert rows == [row | {"uuid": [None, None]} for row in table.drop_columns(["value"]).to_pylist()]


def test_version_1_car_read_with_the_version_0_schema() -> None:
    """A newer sender: the unknown trailing block bytes are skipped, every version 0 field decodes (as the Java
    version 0 decoders read them); written back as version 0 messages of the same values."""
    schema = SCHEMA_OF["car"]
    records = fixtures("car-extension")
    table = decode_table(schema, "Car", payloads(records))
    columns = message_columns(SbeCodec.from_xml(schema), "Car")
    for row, record in zip(table.to_pylist(), records, strict=True):
        assert {k: v for k, v in row.items() if k != "value"} == expected_row(columns, record["values"])
    again = SbeEncoder(schema, "Car", ignore_columns=("value",)).encode(table).to_pylist()
    codec = SbeCodec.from_xml(schema)
    assert all(codec.peek_header(p)[:4] == (45, 1, 1, 0) for p in again)
    assert decode_table(schema, "Car", again).drop_columns(["value"]) == table.drop_columns(["value"])


# ---- messages without columns: the others of the schema still decode ---------------------------------------------


def test_message_without_columns_is_skipped_and_named_when_met() -> None:
    """Cased's fields qtyA and qtya would be one Spark column (names are case-insensitive) and Refused's bidPx and
    bidPX one codec attribute: without sbeMessage both are skipped and every other message decodes (the Java
    Stamped messages, header members the codec does not read included); a payload of either fails naming the
    message and why, or with sbe.onError=null gets null columns; sbeMessage naming one fails with the reason."""
    schema = SCHEMA_OF["sbe-constructs"]
    records = fixtures("sbe-constructs")
    decoder = SbeDecoder(schema)
    assert [f.name for f in decoder.arrow_fields()] == ["sbeMessage", "sentAt_time", "sentAt_unit", "unit", "side",
                                                        "qty", "legs", "note"]
    for name, template_id in NO_COLUMNS.items():
        data = payloads([r for r in records if r["message"] in ("Stamped", name)])
        why = "both map to column" if name == "Cased" else "collide in snake_case"
        with pytest.raises(Exception, match=f"message {name} \\(id {template_id}\\) is not supported: .*{why}"):
            decoder.decode(pa.array(data, type=pa.binary()), np.arange(len(data)), 1)
        lenient = SbeDecoder(schema, on_error="null")
        arrays = lenient.decode(pa.array(data, type=pa.binary()), np.arange(len(data)), 1)
        rows = pa.Table.from_arrays(arrays, schema=pa.schema(lenient.arrow_fields())).to_pylist()
        kinds = [r["message"] for r in records if r["message"] in ("Stamped", name)]
        assert [row["sbeMessage"] for row in rows] == [k if k == "Stamped" else None for k in kinds]
        with pytest.raises(Exception, match=name):
            SbeDecoder(schema, name)
