"""Record and replay through a real embedded media driver, archive and client."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive import ArchiveError, ErrorCode, SourceLocation
from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from conftest import free_udp_port
from system.harness import SMALL_TERM, Harness, collect, offer_all, payloads_of, wait_for

REPLAY_CHANNEL = "aeron:ipc"


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def record(h: Harness, channel: str, stream_id: int, payloads: list[bytes], location=SourceLocation.LOCAL,
           publication=None):
    """Record `payloads` published on (channel, stream_id); returns (recording_id, spans, publication)."""
    client = h.client
    subscription_id = client.start_recording(channel, stream_id, location)
    pub = publication or client.aeron.add_exclusive_publication(channel, stream_id)
    start = h.await_signal(RecordingSignal.START, count=len(h.signals.of(RecordingSignal.START)) + 1)
    assert start.subscription_id == subscription_id
    spans = offer_all(pub, payloads)
    # The recording of THIS publication: the shared test driver may hold other publications on the same channel
    # and stream (left open by tests that simulate a crash in-process), which the subscription records too.
    recording_id = wait_for(
        lambda: max(-1, client.find_last_matching_recording(0, channel, stream_id, pub.session_id)) + 1,
        what=f"the recording of publication session {pub.session_id}",
    ) - 1
    wait_for(lambda: client.get_recording_position(recording_id) == pub.position, what="recording caught up")
    return recording_id, spans, pub, subscription_id


def replay_all(h: Harness, recording_id: int, count: int, position: int = -1, length: int = REPLAY_ALL_AND_STOP,
               stream_id: int = 9001):
    sub = h.client.replay(recording_id, REPLAY_CHANNEL, stream_id, position=position, length=length)
    try:
        return collect(sub, count)
    finally:
        sub.close()


SIZES = [0, 1, 31, 32, 33, 100, 1000, 1376, 1377, 4000, 8000, 65, 0, 2048]


@pytest.mark.parametrize("media", ["ipc", "udp-local", "udp-remote"])
def test_record_then_replay_every_message_in_order_at_the_same_positions(harness, media):
    if media == "ipc":
        channel, location = f"aeron:ipc?term-length={SMALL_TERM}", SourceLocation.LOCAL
    else:
        channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length={SMALL_TERM}"
        location = SourceLocation.LOCAL if media == "udp-local" else SourceLocation.REMOTE
    payloads = payloads_of(SIZES * 30)  # several terms and segments: 64 KiB terms, 128 KiB segments
    recording_id, spans, pub, _ = record(harness, channel, 1001, payloads, location)
    harness.client.stop_recording(channel, 1001)
    stop = harness.await_signal(RecordingSignal.STOP, recording_id)
    assert stop.position == pub.position
    d = harness.client.list_recording(recording_id)
    assert d.start_position == 0 and d.stop_position == pub.position
    assert d.term_buffer_length == SMALL_TERM and d.stream_id == 1001 and d.original_channel == channel
    got = replay_all(harness, recording_id, len(payloads))
    assert [g[0] for g in got] == payloads
    assert [g[1] for g in got] == [end for _, end in spans]
    pub.close()


def test_messages_from_empty_to_several_mib_fragmented_across_terms(harness):
    channel = "aeron:ipc?term-length=32m"
    sizes = [0, 3 * 1024 * 1024 + 17, 5, 4 * 1024 * 1024 - 1, 1408 * 3]
    payloads = payloads_of(sizes, seed=3)
    recording_id, spans, pub, _ = record(harness, channel, 1002, payloads)
    harness.client.stop_recording(channel, 1002)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    got = replay_all(harness, recording_id, len(payloads))
    assert [len(g[0]) for g in got] == sizes
    assert [g[0] for g in got] == payloads
    assert [g[1] for g in got] == [end for _, end in spans]
    pub.close()


def test_replay_from_a_mid_position_and_for_a_length(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = payloads_of([200] * 2000)
    recording_id, spans, pub, _ = record(harness, channel, 1003, payloads)
    start, _ = spans[1234]
    got = replay_all(harness, recording_id, len(payloads) - 1234, position=start)
    assert [g[0] for g in got] == payloads[1234:]
    assert got[0][1] == spans[1234][1]
    # a bounded length: exactly the messages that start before position + length
    length = spans[1300][0] - start
    sub = harness.client.replay(recording_id, REPLAY_CHANNEL, 9002, position=start, length=length)
    got = collect(sub, 1300 - 1234)
    assert [g[0] for g in got] == payloads[1234:1300]
    sub.close()
    pub.close()


def test_follow_replay_of_a_live_recording_sees_new_messages_and_ends_when_recording_stops(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    first = payloads_of([500] * 100, seed=1)
    recording_id, spans, pub, _ = record(harness, channel, 1004, first)
    sub = harness.client.replay(recording_id, REPLAY_CHANNEL, 9003)  # REPLAY_ALL_AND_FOLLOW
    got = collect(sub, len(first))
    later = payloads_of([700] * 300, seed=2)
    offer_all(pub, later)
    got += collect(sub, len(later))
    assert [g[0] for g in got] == first + later
    harness.client.stop_recording(channel, 1004)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    wait_for(lambda: sub.image_count == 0 or all(i.is_end_of_stream or i.is_closed for i in sub.images()),
             timeout=15, what="follow replay to end after the recording stopped")
    sub.close()
    pub.close()


def test_bounded_replay_advances_as_its_counter_advances(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = payloads_of([300] * 400)
    recording_id, spans, pub, _ = record(harness, channel, 1005, payloads)
    harness.client.stop_recording(channel, 1005)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    counter = harness.client.aeron.add_counter(1001, b"limit", "bounded replay limit")
    counter.set(spans[99][1])
    sub = harness.client.replay(recording_id, REPLAY_CHANNEL, 9004, limit_counter_id=counter.counter_id)
    got = collect(sub, 100)
    assert [g[0] for g in got] == payloads[:100]
    assert sub.poll(lambda *a: got.append(a), 10) == 0 or len(got) == 100
    counter.set(spans[249][1])
    got += collect(sub, 150)
    assert [g[0] for g in got] == payloads[:250]
    sub.close()
    counter.close()
    pub.close()


def test_extend_after_stop_continues_positions_and_replays_both_parts(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    first = payloads_of([1000] * 150, seed=4)
    recording_id, spans, pub, _ = record(harness, channel, 1006, first)
    harness.client.stop_recording(channel, 1006)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    pub.close()
    d = harness.client.list_recording(recording_id)
    # The extend subscription names the new publication's session: the closed one may still drain on stream 1006,
    # and an image of it would join at its old position (INVALID_EXTENSION).
    publication_channel = harness.client.extend_channel(channel, d)
    pub2 = harness.client.aeron.add_exclusive_publication(publication_channel, 1006)
    extend_channel = add_session_id(publication_channel, pub2.session_id)
    harness.client.extend_recording(recording_id, extend_channel, 1006, SourceLocation.LOCAL)
    harness.await_signal(RecordingSignal.EXTEND, recording_id)
    assert pub2.position == d.stop_position
    second = payloads_of([900] * 150, seed=5)
    offer_all(pub2, second)
    wait_for(lambda: harness.client.get_recording_position(recording_id) == pub2.position)
    harness.client.stop_recording(extend_channel, 1006)
    harness.await_signal(RecordingSignal.STOP, recording_id, count=2)
    got = replay_all(harness, recording_id, 300)
    assert [g[0] for g in got] == first + second
    assert harness.client.get_stop_position(recording_id) == pub2.position
    pub2.close()


def test_extend_with_wrong_term_length_is_an_invalid_extension(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, _, pub, _ = record(harness, channel, 1007, payloads_of([100] * 10))
    harness.client.stop_recording(channel, 1007)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    pub.close()
    d = harness.client.list_recording(recording_id)
    bad = harness.client.extend_channel(channel, d).replace(f"term-length={SMALL_TERM}", "term-length=131072")
    # As above, the extend subscription names the new publication's session: the closed one may still drain on
    # stream 1007, and an image of it joins at the stop position, a valid extension (the CI flake this avoids).
    pub2 = harness.client.aeron.add_exclusive_publication(bad, 1007)
    harness.client.extend_recording(recording_id, add_session_id(bad, pub2.session_id), 1007)
    with pytest.raises(ArchiveError) as err:
        wait_for(lambda: False, timeout=5, poll=harness.client.poll_for_recording_signals)
    assert err.value.error_code == ErrorCode.INVALID_EXTENSION
    assert "termBufferLength" in err.value.message
    pub2.close()


@pytest.mark.parametrize("where", ["mid-segment", "segment-boundary", "start"])
def test_truncate(harness, where):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = payloads_of([992] * 600)  # 1024-byte frames: exactly 128 per 128 KiB segment
    recording_id, spans, pub, _ = record(harness, channel, 1008, payloads)
    harness.client.stop_recording(channel, 1008)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    index = {"mid-segment": 300, "segment-boundary": 256, "start": 0}[where]
    position = spans[index][0]
    if where == "segment-boundary":
        assert position == 2 * 128 * 1024
    deleted = harness.client.truncate_recording(recording_id, position)
    assert deleted >= 1
    harness.await_signal(RecordingSignal.DELETE, recording_id)
    assert harness.client.get_stop_position(recording_id) == position
    if index:
        got = replay_all(harness, recording_id, index)
        assert [g[0] for g in got] == payloads[:index]
    with pytest.raises(ArchiveError) as err:
        harness.client.start_replay(recording_id, position, -2, REPLAY_CHANNEL, 9005)
    assert err.value.error_code == (ErrorCode.INVALID_POSITION if index else ErrorCode.INVALID_POSITION)
    pub.close()


def test_purge_removes_recording_and_files(harness):
    import os
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, _, pub, _ = record(harness, channel, 1009, payloads_of([1000] * 300))
    harness.client.stop_recording(channel, 1009)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    assert harness.client.purge_recording(recording_id) >= 2
    harness.await_signal(RecordingSignal.DELETE, recording_id)
    assert not [f for f in os.listdir(harness.ctx.archive_dir) if f.startswith(f"{recording_id}-")]
    assert harness.client.list_recording(recording_id) is None
    with pytest.raises(ArchiveError) as err:
        harness.client.get_stop_position(recording_id)
    assert err.value.error_code == ErrorCode.UNKNOWN_RECORDING
    pub.close()
