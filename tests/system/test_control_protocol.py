"""Control protocol behaviour: transports, old clients, authentication, events, counters, replay control."""

from __future__ import annotations

import struct
import time

import pytest

from aeron_archive_spark.archive import AeronArchive, ArchiveError, ErrorCode, SourceLocation, recording_pos
from aeron_archive_spark.archive.codecs import load_archive_codec, messages
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import (
    ARCHIVE_CONTROL_SESSION_TYPE_ID,
    ARCHIVE_ERROR_COUNT_TYPE_ID,
    ARCHIVE_RECORDING_POSITION_TYPE_ID,
    PROTOCOL_SEMANTIC_VERSION,
    REPLAY_ALL_AND_FOLLOW,
    RecordingSignal,
)
from aeron_archive_spark.archive.native import AeronClient
from aeron_archive_spark.archive.server.authenticator import SharedSecretAuthenticator
from conftest import free_udp_port
from system.harness import SMALL_TERM, Harness, collect, offer_all, payloads_of, wait_for
from system.test_record_replay import REPLAY_CHANNEL, record


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def test_client_connects_over_udp_with_an_ephemeral_response_port(aeron_dir, tmp_path):
    port = free_udp_port()
    h = Harness(aeron_dir, str(tmp_path / "a"), control_channel=f"aeron:udp?endpoint=localhost:{port}",
                control_stream_id=4200)
    try:
        with AeronArchive.connect(aeron_dir=aeron_dir,
                                  control_request_channel=f"aeron:udp?endpoint=localhost:{port}",
                                  control_request_stream_id=4200,
                                  control_response_channel="aeron:udp?endpoint=localhost:0") as client:
            assert client.archive_id() == h.archive.archive_id
            assert client.list_recordings() == []
    finally:
        h.close()


def test_an_aeron_1_52_style_connect_request_is_accepted(harness):
    """ConnectRequest (template 2) was removed in 1.53 but older clients may still send it."""
    codec = load_archive_codec()
    aeron = harness.client.aeron
    pub = aeron.add_exclusive_publication("aeron:ipc", harness.ctx.local_control_stream_id)
    response_channel = f"aeron:ipc?session-id={pub.session_id}"
    sub = aeron.add_subscription(response_channel, 4201)
    wait_for(lambda: pub.is_connected)
    offer_all(pub, [codec.encode("ConnectRequest", correlation_id=77, response_stream_id=4201,
                                 version=PROTOCOL_SEMANTIC_VERSION, response_channel=response_channel)])
    got = []
    wait_for(lambda: any(m.template_id == t.CONTROL_RESPONSE and m.correlation_id == 77 for m in got),
             poll=lambda: sub.poll(lambda d, h: got.append(codec.decode(d)), 10))
    response = next(m for m in got if m.template_id == t.CONTROL_RESPONSE)
    assert response.code == 0 and response.relevant_id > 0
    sub.close()
    pub.close()


def test_wrong_major_version_is_refused_with_a_clear_error(harness):
    codec = load_archive_codec()
    aeron = harness.client.aeron
    pub = aeron.add_exclusive_publication("aeron:ipc", harness.ctx.local_control_stream_id)
    response_channel = f"aeron:ipc?session-id={pub.session_id}"
    sub = aeron.add_subscription(response_channel, 4202)
    wait_for(lambda: pub.is_connected)
    offer_all(pub, [codec.encode("AuthConnectRequest", correlation_id=5, response_stream_id=4202,
                                 version=2 << 16, response_channel=response_channel)])
    got = []
    wait_for(lambda: got, poll=lambda: sub.poll(lambda d, h: got.append(codec.decode(d)), 10))
    assert got[0].code == 1 and "invalid client version" in got[0].error_message
    sub.close()
    pub.close()


def test_authenticator_rejects_bad_credentials(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "a"), connect=False, authenticator=SharedSecretAuthenticator(b"s3cret"))
    try:
        with pytest.raises(ArchiveError) as err:
            h.connect(credentials=b"wrong")
        assert err.value.error_code == ErrorCode.AUTHENTICATION_REJECTED
        client = h.connect(credentials=b"s3cret")
        assert client.list_recordings() == []
    finally:
        h.close()


def test_recording_events_stream(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "a"), recording_events_enabled=True,
                recording_events_channel="aeron:ipc", recording_events_stream_id=4203)
    try:
        codec = load_archive_codec()
        events = h.client.aeron.add_subscription("aeron:ipc", 4203)
        wait_for(lambda: events.is_connected)
        channel = f"aeron:ipc?term-length={SMALL_TERM}"
        recording_id, spans, pub, _ = record(h, channel, 4204, payloads_of([100] * 50))
        h.client.stop_recording(channel, 4204)
        h.await_signal(RecordingSignal.STOP, recording_id)
        got = []
        wait_for(lambda: any(m.template_id == t.RECORDING_STOPPED for m in got),
                 poll=lambda: events.poll(lambda d, hdr: got.append(codec.decode(d)), 10))
        names = [m.name for m in got]
        assert names[0] == "RecordingStarted" and names[-1] == "RecordingStopped"
        assert "RecordingProgress" in names
        assert got[-1].stop_position == spans[-1][1] and got[0].recording_id == recording_id
        pub.close()
        events.close()
    finally:
        h.close()


def test_rec_pos_and_archive_counters_are_found_by_another_client(harness, aeron_dir):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, spans, pub, _ = record(harness, channel, 4205, payloads_of([100] * 20))
    with AeronClient(aeron_dir, client_name="observer") as observer:
        reader = observer.counters_reader
        counter_id = recording_pos.find_counter_id_by_recording(reader, recording_id, harness.archive.archive_id)
        assert counter_id >= 0
        assert reader.type_id(counter_id) == ARCHIVE_RECORDING_POSITION_TYPE_ID
        assert reader.get(counter_id) == spans[-1][1]
        rid, session_id, source, archive_id = recording_pos.decode_key(reader.key(counter_id))
        assert (rid, session_id, source, archive_id) == (recording_id, pub.session_id, "aeron:ipc",
                                                         harness.archive.archive_id)
        assert reader.label(counter_id).startswith(f"rec-pos: {recording_id} {pub.session_id} 4205 aeron:ipc")
        assert recording_pos.is_active(reader, counter_id, recording_id)
        types = {reader.type_id(i) for i in reader.find_by_type(ARCHIVE_ERROR_COUNT_TYPE_ID)}
        assert types == {ARCHIVE_ERROR_COUNT_TYPE_ID}
        sessions = reader.find_by_type(ARCHIVE_CONTROL_SESSION_TYPE_ID)
        assert harness.client.control_session_id in {reader.get(i) for i in sessions}
        harness.client.stop_recording(channel, 4205)
        harness.await_signal(RecordingSignal.STOP, recording_id)
        wait_for(lambda: recording_pos.find_counter_id_by_recording(reader, recording_id) == -1)
    pub.close()


def test_stop_replay_and_stop_all_replays(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, _, pub, _ = record(harness, channel, 4206, payloads_of([100] * 20))
    replay_id = harness.client.start_replay(recording_id, 0, REPLAY_ALL_AND_FOLLOW, REPLAY_CHANNEL, 4207)
    other = harness.client.start_replay(recording_id, 0, REPLAY_ALL_AND_FOLLOW, REPLAY_CHANNEL, 4208)
    conductor = harness.archive.conductor
    wait_for(lambda: len(conductor._replays) == 2)
    harness.client.stop_replay(replay_id)
    wait_for(lambda: replay_id not in conductor._replays)
    assert other in conductor._replays
    harness.client.stop_replay(123456789)  # unknown ids are OK, as in Aeron
    harness.client.stop_all_replays(recording_id)
    wait_for(lambda: not conductor._replays)
    pub.close()


def test_max_concurrent_replays(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "a"), max_concurrent_replays=1)
    try:
        channel = f"aeron:ipc?term-length={SMALL_TERM}"
        recording_id, _, pub, _ = record(h, channel, 4209, payloads_of([100] * 20))
        h.client.start_replay(recording_id, 0, REPLAY_ALL_AND_FOLLOW, REPLAY_CHANNEL, 4210)
        with pytest.raises(ArchiveError) as err:
            h.client.start_replay(recording_id, 0, REPLAY_ALL_AND_FOLLOW, REPLAY_CHANNEL, 4211)
        assert err.value.error_code == ErrorCode.MAX_REPLAYS
        pub.close()
    finally:
        h.close()


def test_auto_stop_and_recording_subscriptions_listing(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    sub_id = harness.client.start_recording(channel, 4212, SourceLocation.LOCAL, auto_stop=True)
    listed = harness.client.list_recording_subscriptions(0, 10, "ipc", 4212, True)
    assert [(s.subscription_id, s.stream_id) for s in listed] == [(sub_id, 4212)]
    pub = harness.client.aeron.add_exclusive_publication(channel, 4212)
    start = harness.await_signal(RecordingSignal.START)
    offer_all(pub, payloads_of([10] * 5))
    wait_for(lambda: harness.client.get_recording_position(start.recording_id) == pub.position)
    pub.close()
    harness.await_signal(RecordingSignal.STOP, start.recording_id, timeout=15)
    wait_for(lambda: harness.client.list_recording_subscriptions(0, 10, "ipc", 4212, True) == [])


def test_client_close_ends_its_control_session(harness):
    other = harness.connect()
    conductor = harness.archive.conductor
    wait_for(lambda: other.control_session_id in conductor._control_sessions)
    other.close()
    wait_for(lambda: other.control_session_id not in conductor._control_sessions)
    with pytest.raises(ArchiveError):
        other.list_recordings()


def test_replay_of_an_unknown_limit_counter_is_refused(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, _, pub, _ = record(harness, channel, 4213, payloads_of([10] * 5))
    with pytest.raises(ArchiveError) as err:
        harness.client.start_bounded_replay(recording_id, 0, -1, 9999, REPLAY_CHANNEL, 4214)
    assert "9999" in err.value.message
    pub.close()


def test_follow_replay_reaches_messages_published_after_it_started(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, spans, pub, _ = record(harness, channel, 4215, [b"first"])
    sub = harness.client.replay(recording_id, REPLAY_CHANNEL, 4216)
    assert collect(sub, 1)[0][0] == b"first"
    time.sleep(0.2)
    offer_all(pub, [struct.pack("<q", i) for i in range(100)])
    got = collect(sub, 100)
    assert [struct.unpack("<q", g[0])[0] for g in got] == list(range(100))
    sub.close()
    pub.close()


def test_unsupported_requests_get_an_error_naming_them(harness):
    client = harness.client
    with client._lock:
        correlation_id, _ = client._request(lambda ids: messages.UpdateChannelRequest.of(
            **ids, recording_id=1, channel="aeron:ipc"))
        with pytest.raises(ArchiveError) as err:
            client._await_response(correlation_id, "UpdateChannelRequest")
    assert "UpdateChannelRequest" in err.value.message and "not supported" in err.value.message
