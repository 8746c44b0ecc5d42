"""Small ranges read through a real archive with their replays asked for ahead (`client.replay.read_ahead`), the
requests sent without waiting and their answers matched by correlation id (`ControlResponses`), and the archive's
side of it: replay requests answered out of line while their publications are added."""

from __future__ import annotations

import logging
import time

import pytest
from system.harness import Harness, payloads_of, wait_for
from system.test_replay_fetch import connection, partition, record_stopped

from aeron_archive_spark.archive.client.connection import REPLAY_STREAM_ID_DEFAULT
from aeron_archive_spark.archive.client.replay import ControlResponses
from aeron_archive_spark.archive.client.replay.read_ahead import PRIVATE_STREAM_ID_MIN
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.native import AeronClient
from aeron_archive_spark.archive.tables.read import read_ranges
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource
from aeron_archive_spark.archive.tables.schema import row_schema

CHANNELS = ["aeron:ipc", "aeron:udp?endpoint=localhost:0"]
# (replayChannel, replayStreamId): IPC with the default stream id (one subscription on a stream of the reader's
# own), IPC with a stream id the user chose (a subscription per replay), a wildcard UDP port (one subscription).
CASES = [
    pytest.param("aeron:ipc", REPLAY_STREAM_ID_DEFAULT, id="ipc-own-stream"),
    pytest.param("aeron:ipc", 7701, id="ipc-given-stream"),
    pytest.param("aeron:udp?endpoint=localhost:0", 7701, id="udp-wildcard"),
]


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def small_recordings(h: Harness, count: int, stream_id: int, big: bool = False) -> list[tuple[object, list[bytes]]]:
    """`count` stopped recordings of three messages each (sizes vary), with their payloads; each on its own stream
    (from `stream_id` on), so no recording catches the lingering image of the one before. `big`: fifteen messages
    of ~8 KB instead, ~120 KB, more than a replay's flow-control window on these 64 KiB terms, so a replay cannot
    finish unread."""
    out = []
    for i in range(count):
        sizes = [8000 - (i + j) % 7 for j in range(15)] if big else [40 + i, 200, 1 + 3 * i]
        payloads = payloads_of(sizes, seed=i)
        d, _ = record_stopped(h, payloads, stream_id + 100 * i)
        out.append((d, payloads))
    return out


def whole_ranges(recordings, conn) -> list:
    return [partition(d, d.start_position, d.stop_position, d.stop_position, conn, index=i)
            for i, (d, _) in enumerate(recordings)]


def rows_of(ranges) -> list[tuple[int, bytes]]:
    rows = []
    for batch in read_ranges(ranges, row_schema(None), None):
        table = batch.to_pydict()
        rows += list(zip(table["recordingId"], table["value"], strict=True))
    return rows


def expected_rows(recordings) -> list[tuple[int, bytes]]:
    return [(d.recording_id, p) for d, payloads in recordings for p in payloads]


def no_replays_left(h: Harness) -> bool:
    conductor = h.archive.conductor
    return not conductor._replays and not conductor._pending_replays


@pytest.fixture
def requests_sent_ahead(monkeypatch) -> list[int]:
    """Counts the replay requests sent without waiting."""
    sent: list[int] = []
    original = ControlResponses.send_replay

    def counting(self, *args, **kwargs):
        correlation_id = original(self, *args, **kwargs)
        sent.append(correlation_id)
        return correlation_id

    monkeypatch.setattr(ControlResponses, "send_replay", counting)
    return sent


@pytest.mark.parametrize(("replay_channel", "replay_stream_id"), CASES)
def test_small_ranges_read_ahead_give_exactly_the_recorded_rows_in_order(harness, replay_channel, replay_stream_id,
                                                                         requests_sent_ahead):
    recordings = small_recordings(harness, 14, 3301)
    ranges = whole_ranges(recordings, connection(harness, replay_channel, replay_stream_id=replay_stream_id))
    assert rows_of(ranges) == expected_rows(recordings)
    assert len(requests_sent_ahead) == len(ranges)  # every range's replay was asked for ahead
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")
    # Read again on the session the pool got back: same rows.
    assert rows_of(ranges) == expected_rows(recordings)


@pytest.mark.parametrize(("replay_channel", "replay_stream_id"), CASES)
def test_ranges_left_unread_have_their_replays_stopped(harness, replay_channel, replay_stream_id):
    recordings = small_recordings(harness, 10, 3302)
    ranges = whole_ranges(recordings, connection(harness, replay_channel, replay_stream_id=replay_stream_id))
    source = ReplayChunkSource()
    source.read_ahead(ranges)
    try:
        got = b"".join(bytes(chunk) for chunk, _ in source.iter_chunks(ranges[0]))
        assert len(got) == ranges[0].limit - ranges[0].start
        # Skip two ranges: their replays, asked for ahead, are given up; the next range still reads whole.
        got = b"".join(bytes(chunk) for chunk, _ in source.iter_chunks(ranges[3]))
        assert len(got) == ranges[3].limit - ranges[3].start
    finally:
        started = time.monotonic()
        source.close()
    # Stopped by the reader, not left to the archive's connect timeout (5 s) for want of a subscriber.
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")
    assert time.monotonic() - started < 4


def test_the_concurrent_replay_limit_makes_the_read_back_off(aeron_dir, tmp_path, caplog):
    h = Harness(aeron_dir, str(tmp_path / "archive"), max_concurrent_replays=2)
    try:
        recordings = small_recordings(h, 9, 3303)
        ranges = whole_ranges(recordings, connection(h, "aeron:udp?endpoint=localhost:0"))
        with caplog.at_level(logging.INFO, logger="aeron_archive_spark.archive.tables.replay_read_ahead"):
            assert rows_of(ranges) == expected_rows(recordings)
        assert "concurrent replay limit was reached: now at most" in caplog.text
        wait_for(lambda: no_replays_left(h), timeout=10, what="no replay left on the archive")
    finally:
        h.close()


def test_a_purged_recording_among_small_ranges_fails_naming_it_and_leaves_no_replay(harness):
    recordings = small_recordings(harness, 6, 3304)
    ranges = whole_ranges(recordings, connection(harness, "aeron:udp?endpoint=localhost:0"))
    victim = recordings[4][0]
    harness.client.purge_recording(victim.recording_id)
    with pytest.raises(Exception, match=f"recording {victim.recording_id}"):
        rows_of(ranges)
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")


def test_replay_requests_sent_ahead_are_each_answered_on_one_control_session(harness):
    """The archive answers requests in flight together, each with its own replay (publications added without
    blocking the conductor), and a refusal answers only its own request."""
    recordings = small_recordings(harness, 5, 3305)
    client = harness.client
    responses = ControlResponses(client)
    channel, stream_id = "aeron:ipc", 7702
    sent = [responses.send_replay(d.recording_id, d.start_position, d.stop_position - d.start_position,
                                  channel, stream_id) for d, _ in recordings]
    bad = responses.send_replay(10_000, 0, 64, channel, stream_id)
    answers: dict[int, int] = {}
    refusal: ArchiveError | None = None
    deadline = time.monotonic() + 10
    while (len(answers) < len(sent) or refusal is None) and time.monotonic() < deadline:
        for correlation_id in sent:
            if correlation_id not in answers:
                answer = responses.answer(correlation_id)
                if answer is not None:
                    answers[correlation_id] = answer
        if refusal is None:
            try:
                responses.answer(bad)
            except ArchiveError as ex:
                refusal = ex
        time.sleep(0.001)
    assert len(answers) == len(sent)
    assert len(set(answers.values())) == len(sent)
    assert refusal is not None and refusal.error_code == ErrorCode.UNKNOWN_RECORDING
    assert responses.awaited == len(sent)  # answered replays stay filed (for a later failure) until released
    with pytest.raises(KeyError):
        responses.answer(bad)  # an error answer ends its request
    for correlation_id in sent:
        responses.release(correlation_id)
    assert responses.awaited == 0
    # Each replay delivers its recording to a subscriber of its session.
    for (d, payloads), correlation_id in zip(recordings, sent, strict=True):
        session_id = answers[correlation_id] & 0xFFFFFFFF
        session_id -= (1 << 32) if session_id >= 1 << 31 else 0
        subscription = client.aeron.add_subscription(f"aeron:ipc?session-id={session_id}", stream_id)
        got: list[bytes] = []
        try:
            wanted = len(payloads)
            wait_for(lambda s=subscription, g=got, n=wanted: _poll_into(s, g) >= n,
                     timeout=10, what=f"replay of recording {d.recording_id}")
        finally:
            subscription.close()
        assert got == payloads
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")


def _poll_into(subscription, got: list[bytes]) -> int:
    subscription.poll(lambda data, _header: got.append(bytes(data)), 10)
    return len(got)


def test_stop_all_replays_also_answers_replays_still_being_set_up(harness):
    recordings = small_recordings(harness, 3, 3306)
    client = harness.client
    responses = ControlResponses(client)
    sent = [responses.send_replay(d.recording_id, d.start_position, d.stop_position - d.start_position,
                                  "aeron:ipc", 7703) for d, _ in recordings]
    # Sent as the replay requests were, so that its wait does not drop their answers (a synchronous call would).
    stop_all = responses.send(lambda ids: m.StopAllReplaysRequest.of(**ids, recording_id=-1))
    assert responses.await_answer(stop_all, 10) is not None
    # Every request is answered, OK (set up before the stop, then stopped) or refused (stopped while set up).
    deadline = time.monotonic() + 10
    pending = set(sent)
    while pending and time.monotonic() < deadline:
        for correlation_id in list(pending):
            try:
                if responses.answer(correlation_id) is not None:
                    pending.discard(correlation_id)
            except ArchiveError as ex:
                assert "stop all replays" in str(ex)
                pending.discard(correlation_id)
        time.sleep(0.001)
    assert not pending
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")



@pytest.mark.parametrize("replay_stream_id", [REPLAY_STREAM_ID_DEFAULT, 7701])
def test_a_consumer_pause_longer_than_the_archives_connect_timeout_loses_nothing(aeron_dir, tmp_path,
                                                                                replay_stream_id):
    """On IPC with a given stream id each replay asked for ahead waits for its own subscription; if the consumer
    pauses for longer than the archive's connect timeout, those replays fail in the archive, and the reader must
    ask again. On the reader's own stream the replays are sent at once and wait, whole, in their images."""
    h = Harness(aeron_dir, str(tmp_path / "archive"), connect_timeout_ns=500_000_000)
    try:
        recordings = small_recordings(h, 6, 3307)
        ranges = whole_ranges(recordings, connection(h, "aeron:ipc", replay_stream_id=replay_stream_id))
        source = ReplayChunkSource()
        source.read_ahead(ranges)
        try:
            got = []
            for i, read_range in enumerate(ranges):
                got.append(b"".join(bytes(chunk) for chunk, _ in source.iter_chunks(read_range)))
                if i == 0:
                    time.sleep(1.5)  # the consumer (Spark) is busy elsewhere
        finally:
            source.close()
        for (d, _), data in zip(recordings, got, strict=True):
            assert len(data) == d.stop_position - d.start_position, d.recording_id
        wait_for(lambda: no_replays_left(h), timeout=10, what="no replay left on the archive")
    finally:
        h.close()


_KILLED_READER = r"""
import json, sys, time
from aeron_archive_spark.archive.native import AeronClient
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource
from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader
from aeron_archive_spark.connector.source.schema import FIXED_FIELDS

options = json.loads(sys.argv[1])
reader = AeronArchiveBatchReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
ranges = [r for p in reader.partitions() for r in p.read_ranges]
source = ReplayChunkSource()
source.read_ahead(ranges)
for i, read_range in enumerate(ranges):
    for _chunk in source.iter_chunks(read_range):
        pass
    print("read", i, flush=True)
    time.sleep(0.05)  # replays asked for ahead are in flight while it sleeps
print("done", flush=True)
"""


@pytest.mark.parametrize(("replay_channel", "replay_stream_id"), CASES)
def test_a_reader_killed_mid_read_ahead_leaves_nothing_behind_on_the_archive(tmp_path, replay_channel,
                                                                             replay_stream_id):
    """kill -9 a reader with replays asked for ahead: the archive ends its control session and every replay (in
    flight, waiting for a subscriber, or being set up) once the media driver declares the client dead, and goes
    on serving."""
    import json
    import subprocess
    import sys

    from aeron_archive_spark.archive.native import EmbeddedMediaDriver

    # A short client liveness timeout, so the driver declares the killed reader dead within seconds.
    with EmbeddedMediaDriver(str(tmp_path / "driver"), settings={"AERON_CLIENT_LIVENESS_TIMEOUT": "2s",
                                                                  "AERON_TIMER_INTERVAL": "20ms"}) as driver:
        h = Harness(driver.aeron_dir, str(tmp_path / "archive"))
        try:
            base = {REPLAY_STREAM_ID_DEFAULT: 3310, 7701: 3308}[replay_stream_id] + (replay_channel != CHANNELS[0])
            recordings = small_recordings(h, 40, base, big=True)
            conductor = h.archive.conductor
            sessions_before = len(conductor._control_sessions)
            options = {"aeronDir": h.aeron_dir, "controlChannel": h.ctx.local_control_channel,
                       "controlStreamId": str(h.ctx.local_control_stream_id),
                       "controlResponseChannel": "aeron:ipc", "replayChannel": replay_channel,
                       "replayStreamId": str(replay_stream_id),
                       "recordingIds": ",".join(str(d.recording_id) for d, _ in recordings)}
            proc = subprocess.Popen([sys.executable, "-c", _KILLED_READER, json.dumps(options)],
                                    stdout=subprocess.PIPE, text=True)
            try:
                for line in proc.stdout:
                    if line.startswith("read 3"):
                        break
                # Replays asked for ahead are waiting for the reader (they cannot finish unread).
                assert conductor._replays or conductor._pending_replays, "no replay in flight at the kill"
                proc.kill()  # SIGKILL
                proc.wait(timeout=10)
            finally:
                if proc.poll() is None:
                    proc.kill()
            wait_for(lambda: no_replays_left(h) and len(conductor._control_sessions) <= sessions_before,
                     timeout=30, what="the killed reader's replays and control session ended")
            # The archive goes on serving: the same ranges read whole in this process.
            ranges = whole_ranges(recordings, connection(h, replay_channel, replay_stream_id=replay_stream_id))
            assert rows_of(ranges) == expected_rows(recordings)
        finally:
            h.close()


def test_on_ipc_with_the_default_stream_id_one_subscription_on_a_stream_of_its_own_serves_every_replay(
        harness, monkeypatch):
    """No subscription per replay: every request names one stream id of this reader's own, not the default."""
    recordings = small_recordings(harness, 8, 3312)
    streams: list[int] = []
    per_replay: list[str] = []
    original_send = ControlResponses.send_replay
    original_async = AeronClient.async_add_subscription

    def send(self, recording_id, position, length, channel, stream_id):
        streams.append(stream_id)
        return original_send(self, recording_id, position, length, channel, stream_id)

    def async_add(self, channel, stream_id):
        per_replay.append(channel)
        return original_async(self, channel, stream_id)

    monkeypatch.setattr(ControlResponses, "send_replay", send)
    monkeypatch.setattr(AeronClient, "async_add_subscription", async_add)
    conn = connection(harness, "aeron:ipc", replay_stream_id=REPLAY_STREAM_ID_DEFAULT)
    ranges = whole_ranges(recordings, conn)
    assert rows_of(ranges) == expected_rows(recordings)
    assert len(streams) == len(ranges) and len(set(streams)) == 1
    assert streams[0] >= PRIVATE_STREAM_ID_MIN
    assert per_replay == []
    # A second read draws another stream.
    streams.clear()
    assert rows_of(ranges) == expected_rows(recordings)
    assert len(set(streams)) == 1 and streams[0] >= PRIVATE_STREAM_ID_MIN
    wait_for(lambda: no_replays_left(harness), timeout=10, what="no replay left on the archive")
