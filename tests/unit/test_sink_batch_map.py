"""The sink's durable batch map, state files and the `batches` CLI command (no archive needed)."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from aeron_archive_spark.connector.sink import batch_map
from aeron_archive_spark.connector.sink.batch_map import BatchEntry, append_entry, find_entry, last_entry, read_batch_map
from aeron_archive_spark.connector.sink.cli import add_subparser
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.state import Pending, SinkState, clear_pending, load_pending, load_state, save_pending, save_state


def entry(batch_id: int, size: int = 64) -> BatchEntry:
    return BatchEntry(batch_id, 7, batch_id * size, (batch_id + 1) * size, 2, 10, 1_700_000_000_000 + batch_id)


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="aeron-archive")
    add_subparser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_entries_round_trip_and_lookups(tmp_path):
    state = str(tmp_path)
    assert last_entry(state) is None and find_entry(state, 0) is None
    for i in range(5):
        append_entry(state, entry(i))
    assert read_batch_map(state) == [entry(i) for i in range(5)]
    assert last_entry(state) == entry(4)
    assert find_entry(state, 3) == entry(3) and find_entry(state, 9) is None


def test_compaction_keeps_every_entry_once(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_map, "COMPACT_EVERY", 4)
    state = str(tmp_path)
    for i in range(10):
        append_entry(state, entry(i))
    names = sorted(os.listdir(os.path.join(state, "batches")))
    assert names == ["0000000000000000000-0000000000000000003.jsonl", "0000000000000000004-0000000000000000007.jsonl",
                     "0000000000000000008.json", "0000000000000000009.json"]
    assert read_batch_map(state) == [entry(i) for i in range(10)]
    assert last_entry(state) == entry(9) and find_entry(state, 5) == entry(5)
    # a crash between writing a segment and removing its singles leaves duplicates: read once
    with open(os.path.join(state, "batches", "0000000000000000005.json"), "w") as f:
        json.dump(entry(5).to_json(), f)
    assert read_batch_map(state) == [entry(i) for i in range(10)]
    # and a segment ending last wins for last_entry
    for name in ("0000000000000000008.json", "0000000000000000009.json"):
        os.remove(os.path.join(state, "batches", name))
    assert last_entry(state) == entry(7)


def test_corrupt_entries_are_named(tmp_path):
    state = str(tmp_path)
    append_entry(state, entry(0))
    with open(os.path.join(state, "batches", "0000000000000000000.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(SinkError, match="0000000000000000000.json is corrupt"):
        read_batch_map(state)
    with pytest.raises(FileNotFoundError, match="no sink state directory"):
        read_batch_map(str(tmp_path / "missing"))


def test_state_and_pending_files(tmp_path):
    state_dir = str(tmp_path)
    assert load_state(state_dir) is None and load_pending(state_dir) is None
    state = SinkState(3, True, 1001, "stream", "q-1", 123)
    save_state(state_dir, state)
    assert load_state(state_dir) == state
    save_pending(state_dir, Pending(4, 3, 4096, 9))
    assert load_pending(state_dir) == Pending(4, 3, 4096, 9)
    clear_pending(state_dir)
    clear_pending(state_dir)  # idempotent
    assert load_pending(state_dir) is None
    assert not [n for n in os.listdir(state_dir) if ".tmp" in n]


def test_batches_command_table_and_json(tmp_path, capsys):
    state = str(tmp_path)
    save_state(state, SinkState(7, True, 1001, "stream", None, 1))
    for i in range(3):
        append_entry(state, entry(i))
    save_pending(state, Pending(3, 7, 192, 5))
    assert cli(["batches", "--state", state]) == 0
    out = capsys.readouterr().out
    assert "recording 7 (stream 1001, created by the sink), 3 committed batch(es)" in out
    assert "pending: batch 3 started at position 192" in out
    lines = [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert [line[:4] for line in lines] == [["0", "7", "0", "64"], ["1", "7", "64", "128"], ["2", "7", "128", "192"]]
    assert cli(["batches", "--state", state, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sink"]["recordingId"] == 7 and data["pending"]["batchId"] == 3
    assert [b["stopPosition"] for b in data["batches"]] == [64, 128, 192]
    with pytest.raises(SystemExit, match="no sink state directory"):
        cli(["batches", "--state", str(tmp_path / "nope")])
