"""Bad input, listing, checksums and restarts against a real archive."""

from __future__ import annotations

import os
import struct

import pytest

from aeron_archive_spark.archive import ArchiveError, ErrorCode, SourceLocation
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for
from system.test_record_replay import REPLAY_CHANNEL, record, replay_all


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def stopped_recording(h: Harness, stream_id: int, n: int = 50, size: int = 200):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = payloads_of([size] * n, seed=stream_id)
    recording_id, spans, pub, _ = record(h, channel, stream_id, payloads)
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    pub.close()
    return recording_id, spans, payloads


def test_unknown_recording_is_named(harness):
    for call in (lambda: harness.client.get_stop_position(999), lambda: harness.client.get_start_position(999),
                 lambda: harness.client.truncate_recording(999, 0),
                 lambda: harness.client.start_replay(999, 0, -2, REPLAY_CHANNEL, 1)):
        with pytest.raises(ArchiveError) as err:
            call()
        assert err.value.error_code == ErrorCode.UNKNOWN_RECORDING
        assert "999" in err.value.message
    assert harness.client.list_recording(999) is None


def test_replay_position_validation(harness):
    recording_id, spans, _ = stopped_recording(harness, 2001)
    stop = spans[-1][1]
    cases = [
        (spans[3][0] + 8, ErrorCode.GENERIC, "FRAME_ALIGNMENT"),
        (stop, ErrorCode.INVALID_POSITION, str(stop)),
        (stop + 4096, ErrorCode.INVALID_POSITION, str(stop + 4096)),
        (spans[3][0] + 32, ErrorCode.INVALID_POSITION, "does not point to a valid frame"),
    ]
    for position, code, text in cases:
        with pytest.raises(ArchiveError) as err:
            harness.client.start_replay(recording_id, position, REPLAY_ALL_AND_STOP, REPLAY_CHANNEL, 2)
            wait_for(lambda: False, timeout=3, poll=harness.client.poll_for_recording_signals)
        assert err.value.error_code == code, (position, err.value)
        assert text in err.value.message


def test_truncate_rules(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, spans, pub, _ = record(harness, channel, 2002, payloads_of([100] * 20))
    with pytest.raises(ArchiveError) as err:
        harness.client.truncate_recording(recording_id, 0)
    assert err.value.error_code == ErrorCode.ACTIVE_RECORDING
    harness.client.stop_recording(channel, 2002)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    stop = spans[-1][1]
    for position in (stop + 32, 16, -32):
        with pytest.raises(ArchiveError) as err:
            harness.client.truncate_recording(recording_id, position)
        assert err.value.error_code == ErrorCode.INVALID_POSITION
    with pytest.raises(ArchiveError) as err:
        harness.client.truncate_recording(recording_id, spans[5][0] + 32)
    assert "data header" in err.value.message
    pub.close()


def test_duplicate_recording_and_unknown_subscription(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    harness.client.start_recording(channel, 2003, SourceLocation.LOCAL)
    with pytest.raises(ArchiveError) as err:
        harness.client.start_recording(channel, 2003, SourceLocation.LOCAL)
    assert err.value.error_code == ErrorCode.ACTIVE_SUBSCRIPTION
    harness.client.stop_recording(channel, 2003)
    assert not harness.client.try_stop_recording(channel, 2003)
    with pytest.raises(ArchiveError) as err:
        harness.client.stop_recording(channel, 2003)
    assert err.value.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION


def test_listing_and_queries(harness):
    ids = [stopped_recording(harness, 2010 + i, n=5)[0] for i in range(3)]
    listed = harness.client.list_recordings(0, 100)
    assert [d.recording_id for d in listed] == ids
    assert [d.recording_id for d in harness.client.list_recordings(ids[1], 1)] == [ids[1]]
    for_uri = harness.client.list_recordings_for_uri(0, 10, "aeron:ipc", 2011)
    assert [d.recording_id for d in for_uri] == [ids[1]]
    assert harness.client.list_recordings_for_uri(0, 10, "aeron:udp", 2011) == []
    d = listed[2]
    assert harness.client.find_last_matching_recording(0, "ipc", 2012, d.session_id) == ids[2]
    assert harness.client.find_last_matching_recording(0, "ipc", 2099, d.session_id) == -1
    assert harness.client.get_max_recorded_position(ids[0]) == listed[0].stop_position
    assert harness.client.get_recording_position(ids[0]) == -1
    assert harness.client.archive_id() == harness.archive.archive_id


def test_malformed_and_truncated_control_messages_never_crash_the_archive(harness):
    raw = harness.client.aeron.add_exclusive_publication(harness.ctx.local_control_channel,
                                                          harness.ctx.local_control_stream_id)
    wait_for(lambda: raw.is_connected)
    garbage = [b"", b"\x01", b"\x00" * 7, struct.pack("<HHHH", 56, 6, 101, 14) + b"\x00" * 10,
               struct.pack("<HHHH", 8, 9999, 101, 14) + b"\x00" * 8, struct.pack("<HHHH", 16, 58, 7, 14) + b"\x00" * 16,
               struct.pack("<HHHH", 16, 58, 101, 14) + b"\x00" * 16 + struct.pack("<I", 1 << 31),
               os.urandom(3000)]
    offer_all(raw, garbage)
    recording_id, spans, payloads = stopped_recording(harness, 2020, n=10)
    assert [g[0] for g in replay_all(harness, recording_id, 10)] == payloads
    raw.close()


def test_record_checksums_are_stored_and_verified_on_replay(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "a"), record_checksum="CRC-32C", replay_checksum="CRC-32C")
    try:
        recording_id, spans, payloads = stopped_recording(h, 2030, n=300, size=500)
        got = replay_all(h, recording_id, 300)
        assert [g[0] for g in got] == payloads
        segment = os.path.join(h.ctx.archive_dir, f"{recording_id}-0.rec")
        with open(segment, "r+b") as f:  # corrupt one payload byte of message 10
            f.seek(spans[10][0] + 40)
            byte = f.read(1)
            f.seek(spans[10][0] + 40)
            f.write(bytes([byte[0] ^ 0xFF]))
        # As in Aeron, the batch holding the corrupt frame is refused whole and the replay fails naming it.
        sub = h.client.replay(recording_id, REPLAY_CHANNEL, 3, length=REPLAY_ALL_AND_STOP)
        with pytest.raises(ArchiveError) as err:
            wait_for(lambda: False, timeout=5, poll=h.client.poll_for_recording_signals)
        assert "CRC" in err.value.message and str(spans[10][0]) in err.value.message
        assert sub.poll(lambda *a: None, 10) == 0
        sub.close()
        # Replaying from after the corrupt frame is unaffected.
        got = replay_all(h, recording_id, 289, position=spans[11][0])
        assert [g[0] for g in got] == payloads[11:]
    finally:
        h.close()


def test_restart_keeps_recordings(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "a"))
    try:
        recording_id, spans, payloads = stopped_recording(h, 2040, n=500, size=700)
        h.restart()
        d = h.client.list_recording(recording_id)
        assert d.stop_position == spans[-1][1]
        assert [g[0] for g in replay_all(h, recording_id, 500)] == payloads
    finally:
        h.close()
