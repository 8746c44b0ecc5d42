"""Reads through `archive.tables` with `responseChannels=true`: control sessions and every replay (one span's read,
the read-ahead of small spans, continuation replays) come back over response channels, and give exactly the rows of
the ordinary read. The firewall side (no inbound port on the reading host) is tested on the namespace cluster
(`tests/cluster/test_response_channels_firewall.py`)."""

from __future__ import annotations

import pytest
from conftest import free_udp_port
from system.harness import Harness, payloads_of, wait_for
from system.test_replay_fetch import record_stopped
from system.test_replay_read_ahead import expected_rows, no_replays_left, small_recordings

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.archive.client.replay import via_response
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.planning import pack_ranges
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, RunningArchive
from aeron_archive_spark.archive.tables.read import read_ranges
from aeron_archive_spark.archive.tables.schema import row_schema


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"),
                control_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}")
    yield h
    h.close()


def read_options(h: Harness, response: bool, **extra: str) -> ConnectionOptions:
    raw = {"aeronDir": h.aeron_dir, "controlChannel": h.ctx.control_channel,
           "controlStreamId": str(h.ctx.control_stream_id), "recordingId": "0", "messageTimeout": "5s", **extra}
    if response:
        raw["responseChannels"] = "true"
        raw.setdefault("responseControlPort", str(free_udp_port()))
    location = SourceOptions.parse(raw).location
    assert isinstance(location, RunningArchive)
    return location.connection


def ranges_of(recordings, conn: ConnectionOptions) -> list[ReadRange]:
    out = []
    for i, (d, _) in enumerate(recordings):
        facts = RecordingFacts(d.recording_id, d.start_position, d.term_buffer_length, d.segment_file_length,
                               d.initial_term_id, d.session_id, d.stream_id, d.mtu_length)
        out.append(ReadRange(i, facts, d.start_position, d.stop_position, d.stop_position, RunningArchive(conn)))
    return out


def read_partitions(partitions: list[list[ReadRange]]) -> list[tuple[int, bytes]]:
    """Every partition read as an executor reads it (its ranges in order, one chunk source), in partition order."""
    rows: list[tuple[int, bytes]] = []
    for ranges in partitions:
        for batch in read_ranges(ranges, row_schema(None), None):
            table = batch.to_pydict()
            rows += list(zip(table["recordingId"], table["value"], strict=True))
    return rows


@pytest.fixture
def setups(monkeypatch) -> list[via_response.ResponseChannelReplay]:
    """Every replay set up over a response channel."""
    made: list[via_response.ResponseChannelReplay] = []
    original = via_response.ResponseChannelReplay.__init__

    def counting(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(via_response.ResponseChannelReplay, "__init__", counting)
    return made


def test_many_small_recordings_in_several_partitions_read_the_same_rows_over_response_channels(harness, setups):
    recordings = small_recordings(harness, 24, 4401)
    ordinary = ranges_of(recordings, read_options(harness, response=False))
    response_conn = read_options(harness, response=True)
    assert "control-mode=response" in response_conn.control_response_channel
    assert "control-mode=response" in response_conn.replay_channel
    response = ranges_of(recordings, response_conn)
    # Several partitions of several small ranges each: the read-ahead pipelines each partition's replays.
    partitions = pack_ranges(response, max_bytes=sum(r.size for r in response) // 3, open_cost=0)
    assert len(partitions) >= 3 and all(len(p) > 1 for p in partitions)
    expected = expected_rows(recordings)
    assert read_partitions([ordinary]) == expected
    before = len(setups)
    got = read_partitions(partitions)
    assert sorted(got) == sorted(expected)
    assert len(setups) - before >= len(response)  # every range's replay came over a response channel
    # The reader's control sessions answer over response publications, kept apart from the ordinary ones in the
    # pool (sessions are keyed by their response channel).
    conductor = harness.archive.conductor
    answering = [s.response_channel for s in conductor._control_sessions.values()]
    assert any("control-mode=response" in c for c in answering)
    assert any("control-mode=response" not in c for c in answering)
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")
    assert connection_pool().stats().leased == 0


def test_a_large_range_with_continuation_replays_reads_the_same_bytes_over_response_channels(harness, setups):
    """A range replayed in one bounded replay plus continuations for a message fragmented past its end: each replay
    a response-channel one of its own."""
    payloads = payloads_of([120_000] * 3 + [300] * 200, seed=7)  # fragmented past the first replay's 64 KiB slack
    d, _ = record_stopped(harness, payloads, 4501, term_length=1 << 20)
    recordings = [(d, payloads)]
    conn = read_options(harness, response=True)
    (whole,) = ranges_of(recordings, conn)
    # End the range inside the first (fragmented) message: its rest comes in continuation replays.
    cut = ReadRange(0, whole.recording, d.start_position, d.start_position + 64, d.stop_position, RunningArchive(conn))
    rows = read_partitions([[cut]])
    assert [p for _, p in rows] == payloads[:1]
    assert read_partitions([[whole]]) == expected_rows(recordings)
    assert len(setups) >= 3

