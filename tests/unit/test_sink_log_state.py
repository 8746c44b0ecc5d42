"""The sink log's records and their fold, alone: records in, state out (no archive, no I/O).

`LogState.apply` is what every commit and every reader of a sink's state runs over the log's records; the
process cache (`log_store.fold_log`) folds a log in pieces, and a compaction (`LogState.snapshot`) carries the
state into a new generation. The log as a recording is tested against a real archive in
tests/system/test_sink_commit.py.
"""

from __future__ import annotations

import logging

import pytest

from aeron_archive_spark.connector.sink import log_state
from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_records import (
    Creating,
    Pending,
    SinkTarget,
    commit_record,
    decode_record,
    encode_record,
    moved_record,
    rollback_record,
    snapshot_record,
)
from aeron_archive_spark.connector.sink.log_state import RECENT_ENTRIES, LogState

WHERE = "sink log recording 3"


def entry(batch_id: int, size: int = 64) -> BatchEntry:
    return BatchEntry(batch_id, 7, batch_id * size, (batch_id + 1) * size, 2, 10, 1_700_000_000_000 + batch_id)


def target(kind: str = "stream") -> SinkTarget:
    return SinkTarget(7, True, 1001, kind, "checkpoint /chk/q1", 123)


def fold(records, with_entries: bool = True) -> LogState:
    state = LogState(entries=[] if with_entries else None)
    for record in records:
        state.apply(record, WHERE)
    return state


# -- folding -------------------------------------------------------------------------------------------------------


def test_records_round_trip_through_the_fold():
    pending = Pending(0, 7, 0, 99)
    state = fold([target().to_json(), pending.to_json()])
    assert state.target == target() and state.pending == pending
    assert state.last is None and state.count == 0 and state.entries == []
    state.apply(commit_record(entry(0)), WHERE)
    assert state.pending is None, "the batch's commit record ends its pending commit"
    assert state.last == entry(0) and state.count == 1 and state.entries == [entry(0)]
    assert state.find(0) == entry(0) and state.find(1) is None
    assert BatchEntry.from_json(entry(5).to_json()) == entry(5)


def test_a_commit_or_rollback_of_another_batch_leaves_the_pending_commit():
    state = fold([target().to_json(), Pending(3, 7, 192, 5).to_json()])
    state.apply(commit_record(entry(2)), WHERE)
    assert state.pending == Pending(3, 7, 192, 5)
    state.apply(rollback_record(Pending(2, 7, 128, 5)), WHERE)
    assert state.pending == Pending(3, 7, 192, 5)
    state.apply(rollback_record(Pending(3, 7, 192, 5)), WHERE)
    assert state.pending is None
    # a crash before the commit record: the next commit rolls back, then starts the batch again
    redo = fold([Pending(4, 7, 256, 1).to_json(), rollback_record(Pending(4, 7, 256, 1)),
                 Pending(4, 7, 256, 2).to_json()])
    assert redo.pending == Pending(4, 7, 256, 2)
    assert rollback_record(Pending(4, 7, 256, 1)) == {"t": "rollback", "batchId": 4, "recordingId": 7, "position": 256}


def test_the_last_and_recent_entries_without_the_whole_map():
    state = fold([commit_record(entry(i)) for i in range(RECENT_ENTRIES + 10)], with_entries=False)
    assert state.entries is None, "a commit keeps no full batch map unless asked"
    assert state.count == RECENT_ENTRIES + 10 and state.last == entry(RECENT_ENTRIES + 9)
    assert len(state.recent) == RECENT_ENTRIES and min(state.recent) == 10
    assert state.find(RECENT_ENTRIES + 9) == entry(RECENT_ENTRIES + 9)
    assert state.find(0) is None  # beyond the recent entries; a reader asks for the whole map instead
    full = fold([commit_record(entry(i)) for i in range(RECENT_ENTRIES + 10)])
    assert full.find(0) == entry(0) and full.entries == [entry(i) for i in range(RECENT_ENTRIES + 10)]


def test_a_compacted_log_folds_to_the_same_state_from_its_snapshot():
    # generation 1 starts with a snapshot: 40 batches came before the 3 carried over
    head = {"t": "snapshot", "count": 40, "records": 4, "previous": 3, "generation": 1, "takenAt": 1}
    body = [target().to_json(), *(commit_record(entry(i)) for i in (40, 41, 42))]
    state = fold([head, *body])
    assert state.complete and state.count == 43 and state.last == entry(42) and state.target == target()
    assert state.entries == [entry(40), entry(41), entry(42)] and state.find(41) == entry(41)
    state.apply(Pending(43, 7, 43 * 64, 0).to_json(), WHERE)
    assert state.pending is not None and state.complete
    # cut short: the compaction died before its snapshot was whole
    assert not fold([head, *body[:2]]).complete
    # the old generation's last record points at its successor
    old = fold([target().to_json(), commit_record(entry(0)), {"t": "moved", "to": 9, "generation": 1}])
    assert old.moved_to == 9 and old.complete


def test_copy_is_independent():
    state = fold([target().to_json(), commit_record(entry(0))])
    copy = state.copy()
    copy.apply(commit_record(entry(1)), WHERE)
    copy.apply(Pending(2, 7, 128, 0).to_json(), WHERE)
    assert state.last == entry(0) and state.count == 1 and state.pending is None
    assert 1 not in state.recent and state.entries == [entry(0)]
    assert copy.last == entry(1) and copy.entries == [entry(0), entry(1)]


def test_unknown_records_are_skipped_and_damaged_ones_named(caplog):
    state = fold([target().to_json()])
    with caplog.at_level(logging.WARNING):
        state.apply({"t": "compacted", "upTo": 9}, WHERE)
    assert "unknown record type 'compacted' in sink log recording 3" in caplog.text
    assert state.target == target()
    with pytest.raises(SinkError, match="damaged record in sink log recording 3"):
        state.apply({"t": "commit", "batchId": 1}, WHERE)
    with pytest.raises(SinkError, match="damaged record in sink log recording 3"):
        state.apply({"t": "pending", "batchId": "x", "recordingId": 7, "startPosition": 0}, WHERE)
    with pytest.raises(SinkError, match="damaged record"):
        state.apply({"batchId": 1}, WHERE)


# -- the records, both ways ------------------------------------------------------------------------------------------


def test_every_record_round_trips_through_its_json_and_its_payload():
    records = [
        Creating(0x1234, 1001, "aeron:udp?endpoint=h:40123", 5).to_json(),
        target().to_json(),
        Pending(0, 7, 0, 99).to_json(),
        Pending(0, 7, 0, 99, session_id=0x4321).to_json(),
        commit_record(entry(0)),
        rollback_record(Pending(1, 7, 64, 100)),
        snapshot_record(40, 4, 3, 1, 1),
        moved_record(9, 1),
    ]
    assert [r["t"] for r in records] == [
        "creating", "target", "pending", "pending", "commit", "rollback", "snapshot", "moved"
    ]
    assert "sessionId" not in records[2], "a pending record without a session id keeps the older form"
    assert Creating.from_json(records[0]) == Creating(0x1234, 1001, "aeron:udp?endpoint=h:40123", 5)
    assert SinkTarget.from_json(records[1]) == target()
    assert Pending.from_json(records[2]) == Pending(0, 7, 0, 99)
    assert Pending.from_json(records[3]) == Pending(0, 7, 0, 99, 0x4321)
    assert BatchEntry.from_json(records[4]) == entry(0)
    assert snapshot_record(40, 4, 3, 1, 1) == {
        "t": "snapshot", "count": 40, "records": 4, "previous": 3, "generation": 1, "takenAt": 1
    }
    assert moved_record(9, 1) == {"t": "moved", "to": 9, "generation": 1}
    for record in records:
        payload = encode_record(record)
        assert decode_record(payload, WHERE) == record
        assert payload == encode_record(dict(reversed(record.items()))), "keys sorted: one payload per record"
        assert b", " not in payload and b": " not in payload, "compact JSON"


def test_records_of_older_logs_fold_with_their_defaults():
    # fields added later (the target's sink and creation time, a creation's channel and start, a pending
    # commit's start and session id) are optional in what the fold reads
    state = fold([
        {"t": "creating", "sessionId": 5, "streamId": 1001},
        {"t": "target", "recordingId": 7, "createdBySink": True, "streamId": 1001, "kind": "stream"},
        {"t": "pending", "batchId": 0, "recordingId": 7, "startPosition": 0},
    ])
    assert state.target == SinkTarget(7, True, 1001, "stream", "", 0)
    assert state.pending == Pending(0, 7, 0, 0, 0)
    assert fold([{"t": "creating", "sessionId": 5, "streamId": 1001}]).creating == Creating(5, 1001, "", 0)


def test_damaged_payloads_are_named():
    with pytest.raises(SinkError, match=r"damaged record in sink log recording 3: b'\{\"t\":' \(") as raised:
        decode_record(b'{"t":', WHERE)
    assert raised.value.__cause__ is None
    with pytest.raises(SinkError, match="damaged record in sink log recording 3: b'\\[1, 2\\]' is not a JSON object"):
        decode_record(b"[1, 2]", WHERE)
    with pytest.raises(SinkError, match="is not a JSON object"):
        decode_record(b'"commit"', WHERE)
    long = b"x" * 200
    with pytest.raises(SinkError) as raised:
        decode_record(long, WHERE)
    assert repr(long[:80]) in str(raised.value) and repr(long[:81]) not in str(raised.value), "cut to 80 bytes"
    in_flight = fold([Pending(1, 7, 64, 0).to_json()])
    with pytest.raises(SinkError, match="damaged record in sink log recording 3"):
        in_flight.apply({"t": "rollback", "batchId": "one"}, WHERE)
    assert in_flight.pending == Pending(1, 7, 64, 0)


# -- a commit's records, cut anywhere ----------------------------------------------------------------------------


def _commits(batches: range) -> list[dict]:
    """What a stream's commits append: the target once, then `pending` and `commit` for each batch."""
    records: list[dict] = [Creating(5, 1001, "aeron:ipc", 0).to_json(), target().to_json()]
    for batch in batches:
        records += [Pending(batch, 7, batch * 64, batch).to_json(), commit_record(entry(batch))]
    return records


def test_a_target_record_ends_the_creation_it_announced():
    # a commit that died between `creating` and `target`: the next commit finds the creation and adopts it
    died = fold([Creating(5, 1001, "aeron:ipc", 0).to_json()])
    assert died.creating == Creating(5, 1001, "aeron:ipc", 0) and died.target is None
    adopted = fold([Creating(5, 1001, "aeron:ipc", 0).to_json(), target().to_json()])
    assert adopted.creating is None and adopted.target == target()


def test_a_log_that_ends_midway_through_a_commit_holds_it_as_pending():
    records = _commits(range(3))
    mid = fold(records[:-1])  # the last batch's `pending` without its `commit`: the committer died publishing
    assert mid.pending == Pending(2, 7, 128, 2) and mid.last == entry(1) and mid.count == 2
    assert mid.find(2) is None
    whole = fold(records)
    assert whole.pending is None and whole.last == entry(2) and whole.count == 3
    # the next commit rolls the dead one back and redoes the batch
    redone = fold([*records[:-1], rollback_record(Pending(2, 7, 128, 2)), Pending(2, 7, 128, 9).to_json(),
                   commit_record(entry(2))])
    assert redone == whole


def test_folding_in_pieces_gives_the_state_of_the_whole_log():
    # what the process cache does: fold a log up to where it was read, keep a copy, go on with what came since
    records = _commits(range(6))
    whole = fold(records)
    for cut in range(len(records) + 1):
        head = fold(records[:cut])
        kept = head.copy()
        for record in records[cut:]:
            kept.apply(record, WHERE)
        assert kept == whole, f"cut after {cut} records"
        assert head == fold(records[:cut]), "folding the copy leaves the cached state as it was"


# -- compaction ------------------------------------------------------------------------------------------------------


def test_a_snapshot_folds_to_the_state_it_was_taken_of(monkeypatch):
    monkeypatch.setattr(log_state, "RECENT_ENTRIES", 3)
    records = [*_commits(range(10)), Creating(6, 1001, "aeron:ipc", 0).to_json(), Pending(10, 7, 640, 10).to_json()]
    state = fold(records, with_entries=False)
    assert state.count == 10 and sorted(state.recent) == [7, 8, 9]
    snapshot = state.snapshot(previous=3, generation=2, taken_at=77)
    head, *body = snapshot
    assert head == snapshot_record(7, len(body), 3, 2, 77), "7 batches came before the 3 carried over"
    assert [r["t"] for r in body] == ["target", "creating", "commit", "commit", "commit", "pending"]
    carried = fold(snapshot, with_entries=False)
    assert carried.complete and carried.moved_to is None
    for name in ("target", "creating", "pending", "last", "count", "recent"):
        assert getattr(carried, name) == getattr(state, name), name
    # a generation whose writer died before its snapshot was whole is not a log
    for cut in range(1, len(snapshot)):
        assert not fold(snapshot[:cut]).complete, f"cut after {cut} records"
    # and the next commit goes on from it as from the old one
    for s in (state, carried):
        s.apply(commit_record(entry(10)), WHERE)
    assert carried.pending is None and carried.last == state.last and carried.count == state.count == 11


def test_a_snapshot_of_an_empty_or_fresh_log():
    assert LogState().snapshot(3, 1, 0) == [snapshot_record(0, 0, 3, 1, 0)]
    empty = fold(LogState().snapshot(3, 1, 0))
    assert empty.complete and empty.count == 0 and empty.target is None and empty.last is None


def test_every_record_of_a_snapshot_counts_toward_it_even_one_this_version_does_not_know(caplog):
    head = snapshot_record(5, 2, 3, 1, 0)
    with caplog.at_level(logging.WARNING):
        state = fold([head, {"t": "newer-kind"}, commit_record(entry(5))])
    assert state.complete and state.count == 6 and "unknown record type 'newer-kind'" in caplog.text
    assert not fold([head, {"t": "newer-kind"}]).complete
