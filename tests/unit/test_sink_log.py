"""The sink log's pure parts besides the fold: sink identity and key, the log's alias and channel, generations.

The fold of its records is tests/unit/test_sink_log_state.py. The log itself (a recording in the archive, extended
for every commit) is exercised against a real archive by tests/system/test_sink_commit.py and, through the
`batches` command, tests/system/test_cli.py.
"""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_identity import (
    ALIAS_PREFIX,
    KEY_LENGTH,
    log_alias,
    log_id_of,
    sink_identity,
    sink_key,
)
from aeron_archive_spark.connector.sink.log_lock import LOG_TERM_LENGTH, log_channel
from aeron_archive_spark.connector.sink.log_store import generations
from aeron_archive_spark.connector.sink.options import parse_sink_options

# -- generations -----------------------------------------------------------------------------------------------------


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
