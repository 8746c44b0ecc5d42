"""The sink log's pure parts: folding records into state, sink identity and key, the log's channel (no archive).

The log itself (a recording in the archive, extended for every commit) is exercised against a real archive by
tests/system/test_sink_commit.py and, through the `batches` command, tests/system/test_cli.py.
"""

from __future__ import annotations

import logging

import pytest

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.options import parse_sink_options
from aeron_archive_spark.connector.sink.sink_log import (
    ALIAS_PREFIX,
    KEY_LENGTH,
    LOG_TERM_LENGTH,
    RECENT_ENTRIES,
    LogState,
    Pending,
    SinkTarget,
    commit_record,
    log_alias,
    log_channel,
    log_id_of,
    generations,
    rollback_record,
    sink_identity,
    sink_key,
)

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


class _Descriptor:
    def __init__(self, recording_id: int, alias: str) -> None:
        self.recording_id = recording_id
        self.stripped_channel = f"aeron:ipc?alias={alias}"


def test_generations_order_newest_first_then_lowest_id():
    key, other = "a" * KEY_LENGTH, "b" * KEY_LENGTH
    logs = [_Descriptor(1, log_alias(key)), _Descriptor(5, log_alias(key, 2)), _Descriptor(4, log_alias(key, 1)),
            _Descriptor(6, log_alias(key, 2)), _Descriptor(2, log_alias(other)), _Descriptor(7, "not-a-sink"),
            _Descriptor(8, ALIAS_PREFIX + "short.1"), _Descriptor(9, log_alias(key) + ".x")]
    assert log_id_of(logs[1]) == (key, 2) and log_id_of(logs[0]) == (key, 0) and log_id_of(logs[5]) is None
    assert log_id_of(logs[6]) is None and log_id_of(logs[7]) is None
    found = generations(logs)  # type: ignore[arg-type]
    assert [(g, d.recording_id) for g, d in found[key]] == [(2, 5), (2, 6), (1, 4), (0, 1)]
    assert [(g, d.recording_id) for g, d in found[other]] == [(0, 2)]
    assert log_alias(key, 0) == ALIAS_PREFIX + key and log_alias(key, 3) == ALIAS_PREFIX + key + ".3"


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


# -- identity, key, channel ----------------------------------------------------------------------------------------


def test_sink_identity_and_key():
    stream = sink_identity(True, "hdfs://nn/chk/q1", None, None, None)
    assert stream == "checkpoint hdfs://nn/chk/q1"
    assert sink_identity(True, "hdfs://nn/chk/q1/", None, None, None) == stream
    # Spark passes the checkpoint as the user wrote it; the same string is the same sink on any host
    assert sink_key(sink_identity(True, "hdfs://nn/chk/q1", None, None, None)) == sink_key(stream)
    by_recording = sink_identity(False, None, 7, None, None)
    by_channel = sink_identity(False, None, None, "aeron:udp?endpoint=h:40123|term-length=16m|mtu=8k", 1001)
    assert by_recording == "recording 7"
    assert by_channel == "channel aeron:udp?endpoint=h:40123 stream 1001"  # tuning parameters do not matter
    assert by_channel == sink_identity(False, None, None, "aeron:udp?endpoint=h:40123", 1001)
    # a stream and a batch write never share a log, even with a checkpoint that looks like a target
    assert sink_identity(True, "recording 7", None, None, None) != by_recording
    assert sink_identity(False, "/chk/q1", 7, None, None) == by_recording  # a batch write ignores checkpoints
    keys = {sink_key(i) for i in (stream, by_recording, by_channel, sink_identity(False, None, 8, None, None),
                                  sink_identity(False, None, None, "aeron:udp?endpoint=h:40123", 1002),
                                  sink_identity(True, "hdfs://nn/chk/q2", None, None, None),
                                  sink_identity(True, "hdfs://nn/chk/q", None, None, None))}
    assert len(keys) == 7
    assert all(len(k) == KEY_LENGTH and int(k, 16) >= 0 for k in keys), "fixed-length hex: no key is another's prefix"
    assert sink_key("checkpoint " + "/x" * 2000) != sink_key("checkpoint " + "/x" * 1999)
    assert len(sink_key("checkpoint " + "/x" * 2000)) == KEY_LENGTH
    with pytest.raises(SinkError, match="needs the query's checkpointLocation"):
        sink_identity(True, None, 7, None, None)
    with pytest.raises(SinkError, match="needs the query's checkpointLocation"):
        sink_identity(True, "", None, "aeron:ipc", 1)


def test_log_channel():
    key = sink_key("recording 7")
    assert log_alias(key) == ALIAS_PREFIX + key
    ipc = ChannelUri.parse(log_channel("aeron:ipc?term-length=16m|session-id=5|mtu=8k", key))
    assert ipc.is_ipc and ipc.params == {"alias": log_alias(key), "term-length": str(LOG_TERM_LENGTH)}
    udp = ChannelUri.parse(log_channel(
        "aeron:udp?endpoint=archive-host:40123|term-length=16m|session-id=5|init-term-id=1|term-id=2|term-offset=64",
        key))
    assert udp.is_udp and udp.get("endpoint") == "archive-host:40123", "the log goes the way the sink's data goes"
    assert udp.get("alias") == log_alias(key) and udp.get("term-length") == str(LOG_TERM_LENGTH)
    assert not {"session-id", "init-term-id", "term-id", "term-offset"} & set(udp.params), \
        "a new log starts a new publication, not the target's"
    replaced = ChannelUri.parse(log_channel("aeron:udp?endpoint=h:1|alias=mine", key))
    assert replaced.get("alias") == log_alias(key)


# -- options of the file-based state are gone --------------------------------------------------------------------


@pytest.mark.parametrize("key, name, replaced_by", [
    ("sinkStateDir", "sinkStateDir", "keeps its exactly-once state in the archive itself"),
    ("sinkstatedir", "sinkStateDir", "checkpointLocation"),  # Spark lowercases option keys
    ("stagingLocation", "stagingLocation", "in Spark's commit messages"),
    ("STAGINGLOCATION", "stagingLocation", "no staging directory"),
])
@pytest.mark.parametrize("streaming", [True, False])
def test_removed_options_name_what_replaced_them(key, name, replaced_by, streaming):
    options = {"channel": "aeron:ipc", "streamId": "1001", "checkpointLocation": "/chk/q1", key: "/somewhere"}
    with pytest.raises(OptionError, match=f"option {name} was removed") as raised:
        parse_sink_options(options, streaming=streaming)
    assert replaced_by in str(raised.value)
