"""`aeron-archive export --sbe-schema`: repeating groups, nested groups and arrays land in Parquet as nested types
(list<struct<...>>, list<element>), with the values that were encoded, read back with pyarrow alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark.test_sbe_groups_spark import book_update, book_update_v1, car, quote
from system.harness import SMALL_TERM, Harness
from system.test_record_replay import record

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.codecs.codec import SbeCodec
from aeron_archive_spark.archive.constants import RecordingSignal

SCHEMAS = Path(__file__).resolve().parents[1] / "unit" / "sbe_schemas"
BOOK = str(SCHEMAS / "book.xml")
CAR = str(SCHEMAS / "car.xml")
CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
FIXED = ("recordingId", "position", "sessionId", "streamId", "reservedValue", "value", "timestamp")


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def recorded(h: Harness, stream_id: int, payloads: list[bytes]) -> int:
    recording_id, _, pub, _ = record(h, CHANNEL, stream_id, payloads)
    h.client.stop_recording(CHANNEL, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    pub.close()
    return recording_id


def export(h: Harness, recording_id: int, out: str, *sbe: str) -> pa.Table:
    assert main(["export", str(recording_id), "--dir", h.ctx.archive_dir, "--to", out, "--no-progress", *sbe]) == 0
    return pq.read_table(out)


def test_export_of_book_updates_and_quotes_by_template_id(harness, tmp_path, capsys):
    """No --sbe-message: every message decodes by its template id; the other message's columns are null."""
    codec = SbeCodec.from_xml(BOOK)
    rng = np.random.default_rng(21)
    books = [book_update(rng) for _ in range(200)]
    quotes = [quote(rng, i) for i in range(100)]
    older = [book_update_v1(i) for i in range(3)]
    messages = ([(codec.encode("BookUpdate", **kw), "BookUpdate", row) for kw, row in books]
                + [(codec.encode("Quote", **kw), "Quote", row) for kw, row in quotes]
                + [(payload, "BookUpdate", row) for payload, row in older])
    order = rng.permutation(len(messages))
    messages = [messages[i] for i in order]
    recording_id = recorded(harness, 5031, [payload for payload, _, _ in messages])
    table = export(harness, recording_id, str(tmp_path / "book.parquet"), "--sbe-schema", BOOK)
    assert f"exported {len(messages)} messages" in capsys.readouterr().out
    types = {f.name: f.type for f in table.schema}
    assert pa.types.is_list(types["NoMDEntries"]) and pa.types.is_struct(types["NoMDEntries"].value_type)
    legs = types["NoLegs"].value_type
    assert pa.types.is_list(legs.field("NoFills").type) and legs.field("LegNote").type == pa.string()
    assert pa.types.is_list(types["Ratios"]) and types["Ratios"].value_type == pa.int32()
    assert types["TransactTime"] == pa.decimal128(20, 0)
    rows = table.to_pylist()
    assert [bytes(r["value"]) for r in rows] == [payload for payload, _, _ in messages]
    for i, (row, (_, name, want)) in enumerate(zip(rows, messages, strict=True)):
        assert row["sbeMessage"] == name
        assert {k: row[k] for k in want} == want, f"message {i}"
        others = set(row) - set(want) - set(FIXED) - {"sbeMessage"}
        assert all(row[k] is None for k in others), f"message {i}: {name} has other messages' columns set"


def test_export_of_car_messages_with_sbe_message(harness, tmp_path):
    codec = SbeCodec.from_xml(CAR)
    rng = np.random.default_rng(22)
    cars = [car(rng, i) for i in range(150)]
    recording_id = recorded(harness, 5032, [codec.encode("Car", **kw) for kw, _ in cars])
    table = export(harness, recording_id, str(tmp_path / "car.parquet"), "--sbe-schema", CAR, "--sbe-message", "Car")
    assert str(table.schema.field("performanceFigures").type) == (  # Parquet names list items "element"
        "list<element: struct<octaneRating: int16, "
        "acceleration: list<element: struct<mph: int32, seconds: float>>>>")
    assert str(table.schema.field("someNumbers").type) == "list<element: int64>"
    assert [{k: v for k, v in row.items() if k not in FIXED} for row in table.to_pylist()] == [r for _, r in cars]
