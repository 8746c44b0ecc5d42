"""Replication between two of our archives on one media driver: a stopped recording copied whole (SYNC), a bound,
an extension of an earlier replica, a live source followed to its stop, a stop mid-way, and the refusals, with the
signals in Java's order and the replica's segment files byte-identical to the source's."""

from __future__ import annotations

import os
import struct
import time

import pytest
from system.harness import Harness, payloads_of, wait_for
from system.test_replay_fetch import record_stopped
from system.test_response_channels import response_channels

from aeron_archive_spark.archive.client import ReplicationParams
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.frames import SESSION_ID_FIELD_OFFSET, scan_frames
from aeron_archive_spark.archive.storage.segments import segment_file_name

CHANNELS = [
    pytest.param("aeron:udp?endpoint=localhost:0", id="udp"),
    pytest.param("aeron:ipc", id="ipc"),
]
S = RecordingSignal


@pytest.fixture
def src(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "src"))
    yield h
    h.close()


@pytest.fixture
def dst(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "dst"))
    yield h
    h.close()


def replicate(dst: Harness, src: Harness, src_recording_id: int, **params) -> int:
    return dst.client.replicate(
        src_recording_id, src.ctx.local_control_stream_id, src.ctx.local_control_channel, ReplicationParams(**params)
    )


def signals_of(h: Harness, replication_id: int) -> list[RecordingSignal]:
    return [e.signal for e in h.signals.events if e.correlation_id == replication_id]


def await_signals(h: Harness, replication_id: int, last: RecordingSignal, timeout: float = 20) -> list:
    wait_for(lambda: last in signals_of(h, replication_id), timeout, f"{last.name} of replication {replication_id}",
             poll=h.client.poll_for_recording_signals)
    return [e for e in h.signals.events if e.correlation_id == replication_id]


def segment_files(h: Harness, recording_id: int) -> list[str]:
    prefix = f"{recording_id}-"
    return sorted(f for f in os.listdir(h.ctx.archive_dir) if f.startswith(prefix) and f.endswith(".rec"))


def with_session_id(segment: bytes, session_id: int) -> bytes:
    """`segment` with every frame header's session id set to `session_id`."""
    out = bytearray(segment)
    scan = scan_frames(out, 0, len(out), stop_at_padding=False)
    for offset in scan.offsets.tolist():
        struct.pack_into("<i", out, offset + SESSION_ID_FIELD_OFFSET, session_id)
    return bytes(out)


def assert_same_segment_files(src: Harness, src_id: int, dst: Harness, dst_id: int,
                              session_id: int | None = None) -> None:
    """The replica has the source's segment files, byte for byte (with `session_id`: once every frame's session id
    field is set to it)."""
    names = segment_files(src, src_id)
    assert [f.replace(f"{dst_id}-", "", 1) for f in segment_files(dst, dst_id)] == \
        [f.replace(f"{src_id}-", "", 1) for f in names]
    for name in names:
        with open(os.path.join(src.ctx.archive_dir, name), "rb") as f:
            want = f.read()
        with open(os.path.join(dst.ctx.archive_dir, name.replace(f"{src_id}-", f"{dst_id}-", 1)), "rb") as f:
            got = f.read()
        assert len(got) == len(want), name
        assert (got if session_id is None else with_session_id(got, session_id)) == want, name


def assert_same_bytes(src: Harness, src_id: int, dst: Harness, dst_id: int, start: int, stop: int) -> None:
    """The replica's segment files hold the source's bytes over [start, stop)."""
    d = src.client.list_recording(src_id)
    segment = d.segment_file_length
    base = start - start % segment
    while base < stop:
        with open(os.path.join(src.ctx.archive_dir, segment_file_name(src_id, base)), "rb") as f:
            want = f.read()
        with open(os.path.join(dst.ctx.archive_dir, segment_file_name(dst_id, base)), "rb") as f:
            got = f.read()
        lo, hi = max(start - base, 0), min(stop - base, segment)
        assert got[lo:hi] == want[lo:hi], f"segment at {base}"
        base += segment


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_stopped_recording_is_replicated_whole_with_java_s_signals(src, dst, channel):
    payloads = payloads_of([100 + (i * 37) % 3000 for i in range(300)])  # ~500 KB: several 128 KiB segments
    d, _ = record_stopped(src, payloads, 6001)
    # On one driver, an IPC replay with the recording's own session id would clash with its publisher, which may
    # still linger: a replication session id of its own (the replica then carries it).
    session = {"replication_session_id": d.session_id + 1} if channel == "aeron:ipc" else {}
    replication_id = replicate(dst, src, d.recording_id, replication_channel=channel, **session)
    events = await_signals(dst, replication_id, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = events[0].recording_id
    assert all(e.recording_id == dst_id for e in events)
    assert events[0].position == d.start_position and events[0].subscription_id == -1
    assert events[2].position == d.stop_position and events[-1].position == d.stop_position
    replica = dst.client.list_recording(dst_id)
    for field in ("start_position", "stop_position", "initial_term_id", "segment_file_length", "term_buffer_length",
                  "mtu_length", "stream_id", "stripped_channel", "original_channel", "source_identity",
                  "start_timestamp"):
        assert getattr(replica, field) == getattr(d, field), field
    # The extension's image brings the replay's session id into the descriptor, as Java's `extendRecording` does.
    assert replica.session_id == session.get("replication_session_id", d.session_id)
    # Every frame as recorded, but for the session id field a given replication session id went into.
    assert_same_segment_files(src, d.recording_id, dst, dst_id, d.session_id if session else None)
    # The replica replays as the source does.
    assert dst.client.get_stop_position(dst_id) == d.stop_position
    assert dst.archive.conductor._replications == {}


def test_a_bound_stops_the_replica_there_and_a_later_replication_extends_it_to_the_source_s_stop(src, dst):
    payloads = payloads_of([500] * 400)
    d, spans = record_stopped(src, payloads, 6002)
    bound = spans[150][1]  # a message boundary
    first = replicate(dst, src, d.recording_id, stop_position=bound)
    events = await_signals(dst, first, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.REPLICATE_END, S.STOP]
    dst_id = events[0].recording_id
    assert events[-1].position == bound == dst.client.get_stop_position(dst_id)
    second = replicate(dst, src, d.recording_id, dst_recording_id=dst_id)
    events = await_signals(dst, second, S.STOP)
    assert [e.signal for e in events] == [S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    assert events[0].position == bound
    assert dst.client.get_stop_position(dst_id) == d.stop_position
    assert_same_bytes(src, d.recording_id, dst, dst_id, d.start_position, d.stop_position)
    # Already in sync: nothing to copy.
    third = replicate(dst, src, d.recording_id, dst_recording_id=dst_id)
    assert [e.signal for e in await_signals(dst, third, S.REPLICATE_END)] == [S.SYNC, S.REPLICATE_END]


def test_a_live_source_is_followed_until_it_stops(src, dst):
    channel = "aeron:ipc?term-length=65536"
    src.client.start_recording(channel, 6003, SourceLocation.LOCAL)
    publication = src.client.aeron.add_exclusive_publication(channel, 6003)
    start = src.await_signal(S.START)
    first = payloads_of([700] * 50, seed=1)
    for p in first:
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    replication_id = replicate(dst, src, start.recording_id)
    extend = await_signals(dst, replication_id, S.EXTEND)
    dst_id = extend[0].recording_id
    for p in payloads_of([700] * 200, seed=2):  # recorded while the replica follows
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    stop = publication.position
    wait_for(lambda: dst.client.get_recording_position(dst_id) >= stop, 20, "the replica to follow the live source")
    assert S.SYNC not in signals_of(dst, replication_id)
    src.client.stop_recording(channel, 6003)
    publication.close()
    events = await_signals(dst, replication_id, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.REPLICATE_END, S.STOP]  # live: no SYNC
    assert dst.client.get_stop_position(dst_id) == stop == src.client.get_stop_position(start.recording_id)
    assert_same_bytes(src, start.recording_id, dst, dst_id, 0, stop)


def test_a_replication_stopped_mid_way_leaves_a_valid_replica_that_a_later_one_extends(src, dst):
    channel = "aeron:ipc?term-length=65536"
    src.client.start_recording(channel, 6004, SourceLocation.LOCAL)
    publication = src.client.aeron.add_exclusive_publication(channel, 6004)
    start = src.await_signal(S.START)
    for p in payloads_of([900] * 100):
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    replication_id = replicate(dst, src, start.recording_id)
    dst_id = await_signals(dst, replication_id, S.EXTEND)[0].recording_id
    wait_for(lambda: dst.client.get_recording_position(dst_id) >= publication.position, 20, "caught up")
    dst.client.stop_replication(replication_id)
    events = await_signals(dst, replication_id, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.REPLICATE_END, S.STOP]
    held = dst.client.get_stop_position(dst_id)
    assert held == events[-1].position > 0
    assert not dst.client.try_stop_replication(replication_id)  # gone already
    # The source goes on and stops; a later replication extends the replica from where it stopped.
    for p in payloads_of([900] * 100, seed=3):
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    src.client.stop_recording(channel, 6004)
    publication.close()
    src_stop = wait_for(lambda: (s := src.client.get_stop_position(start.recording_id)) != -1 and s, 10, "src stop")
    again = replicate(dst, src, start.recording_id, dst_recording_id=dst_id)
    events = await_signals(dst, again, S.STOP)
    assert [e.signal for e in events] == [S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    assert events[0].position == held
    assert dst.client.get_stop_position(dst_id) == src_stop
    assert_same_bytes(src, start.recording_id, dst, dst_id, 0, src_stop)


def test_requests_refused_up_front_and_failures_reported_with_the_replication_id(src, dst):
    d, _ = record_stopped(src, payloads_of([64] * 10), 6005)
    with pytest.raises(ArchiveError, match="unknown destination recording id 999") as info:
        replicate(dst, src, d.recording_id, dst_recording_id=999)
    assert info.value.error_code == ErrorCode.UNKNOWN_RECORDING
    with pytest.raises(ArchiveError, match="unknown replication id 12345") as info:
        dst.client.stop_replication(12345)
    assert info.value.error_code == ErrorCode.UNKNOWN_REPLICATION
    with pytest.raises(ValueError, match="can not be specified together"):
        replicate(dst, src, d.recording_id, live_destination="aeron:udp?endpoint=localhost:7777",
                  replication_session_id=5)
    # An unknown source recording: OK first, then the error with the replication id, then REPLICATE_END.
    replication_id = replicate(dst, src, 4242)
    with pytest.raises(ArchiveError, match="unknown src recording id 4242") as info:
        wait_for(lambda: False, 10, "the error", poll=dst.client.poll_for_recording_signals)
    assert info.value.correlation_id == replication_id and info.value.error_code == ErrorCode.UNKNOWN_RECORDING
    await_signals(dst, replication_id, S.REPLICATE_END)
    assert signals_of(dst, replication_id) == [S.REPLICATE_END]
    # No archive at the source channel: a connection failure, named.
    dst.archive.conductor.ctx.replication_timeout_ns = 500_000_000
    dst.client.replicate(d.recording_id, 9, "aeron:ipc", ReplicationParams())
    with pytest.raises(ArchiveError, match="Replication connection failed=.*no archive on control channel") as info:
        wait_for(lambda: False, 20, "the error", poll=dst.client.poll_for_recording_signals)
    assert info.value.error_code == ErrorCode.REPLICATION_CONNECTION_FAILURE
    # A fileIoMaxLength below the recording's MTU, as Java words it.
    replication_id = replicate(dst, src, d.recording_id, file_io_max_length=1024)
    with pytest.raises(ArchiveError, match=r"Replication fileIoMaxLength \(1024\) is less than than the recording "
                                           r"mtuLength \(1408\)"):
        wait_for(lambda: False, 10, "the error", poll=dst.client.poll_for_recording_signals)


def free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def live_channel(port: int) -> str:
    """An MDC publication (Java's test's LIVE_CHANNEL): subscribers join it through its control endpoint."""
    return f"aeron:udp?control-mode=dynamic|control=localhost:{port}|term-length=65536"


def replication_channel(port: str) -> str:
    """A UDP replication channel on a free port, or on the wildcard port 0 (the destination's driver binds one, and
    for a multi-destination recording subscription the session learns it from the replay destination's binding)."""
    return f"aeron:udp?endpoint=localhost:{free_udp_port() if port == 'free' else 0}"


PORTS = [pytest.param("free", id="fixed-port"), pytest.param("wildcard", id="wildcard-port")]


@pytest.mark.parametrize("port", PORTS)
def test_a_tagged_replication_records_through_a_subscription_others_can_join(src, dst, port):
    d, _ = record_stopped(src, payloads_of([300] * 200), 6006)
    channel = replication_channel(port)
    replication_id = dst.client.tagged_replicate(d.recording_id, -1, 7001, 7002, src.ctx.local_control_stream_id,
                                                 src.ctx.local_control_channel, replication_channel=channel)
    events = await_signals(dst, replication_id, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    assert_same_bytes(src, d.recording_id, dst, events[0].recording_id, d.start_position, d.stop_position)
    # The recording subscription was tagged as asked (control-mode=manual, the two tags, no endpoint).
    (subscribed,) = [e for e in events if e.signal is S.EXTEND]
    assert subscribed.subscription_id > 0


@pytest.mark.parametrize("port", PORTS)
def test_a_live_replication_merges_onto_the_live_stream_and_goes_on_recording_it(src, dst, port):
    live = live_channel(free_udp_port())
    src.client.start_recording(live, 6007, SourceLocation.LOCAL)
    publication = src.client.aeron.add_publication(live, 6007)
    start = src.await_signal(S.START)
    for p in payloads_of([600] * 100, seed=4):
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    channel = replication_channel(port)
    replication_id = replicate(dst, src, start.recording_id, live_destination=live, replication_channel=channel)
    merged = await_signals(dst, replication_id, S.REPLICATE_END, timeout=30)
    assert [e.signal for e in merged] == [S.REPLICATE, S.EXTEND, S.MERGE, S.REPLICATE_END]  # no STOP: the
    dst_id = merged[0].recording_id  # replica goes on recording the live stream
    for p in payloads_of([600] * 300, seed=5):
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    target = publication.position
    wait_for(lambda: dst.client.get_recording_position(dst_id) >= target, 20, "the replica to record the live stream")
    wait_for(lambda: src.client.get_recording_position(start.recording_id) >= target, 20, "the source to record")
    assert_same_bytes(src, start.recording_id, dst, dst_id, 0, target)
    publication.close()
    src.client.stop_recording(live, 6007)
    events = await_signals(dst, replication_id, S.STOP, timeout=30)  # the live image went: auto-stop
    assert events[-1].position >= target


@pytest.fixture
def udp_src(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "udp-src"), control_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}")
    yield h
    h.close()


@pytest.mark.parametrize("transport", ["udp", "ipc"])
def test_a_replication_over_response_channels_needs_no_address_of_the_destination(udp_src, dst, transport):
    """Java 1.53's response channels: the destination's control session to the source answers on the connection the
    destination opened (src_response_channel), and so does the source's replay (a replication channel in response
    mode: REPLAY_TOKEN, GET_ARCHIVE_PROXY), so the source needs no address of the destination."""
    src = udp_src
    payloads = payloads_of([100 + (i * 37) % 3000 for i in range(200)])
    d, _ = record_stopped(src, payloads, 6008)
    control_channel, control_stream, response, replication = response_channels(src, transport)
    replication_id = dst.client.replicate(
        d.recording_id, control_stream, control_channel,
        ReplicationParams(src_response_channel=response, replication_channel=replication))
    events = await_signals(dst, replication_id, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = events[0].recording_id
    assert dst.client.get_stop_position(dst_id) == d.stop_position
    # The replay's session id is the one the source's response publication chose (no session-id can be asked
    # for), so the replica carries it, in its descriptor and its frames; every other byte is the source's.
    assert dst.client.list_recording(dst_id).session_id != d.session_id
    assert_same_segment_files(src, d.recording_id, dst, dst_id, d.session_id)


def test_response_channels_are_refused_with_live_destinations_and_tags_as_java_refuses_them(src, dst):
    d, _ = record_stopped(src, payloads_of([64] * 10), 6009)
    response = "aeron:ipc?control-mode=response"
    with pytest.raises(ArchiveError, match="response channels can't be used with live destinations"):
        replicate(dst, src, d.recording_id, replication_channel=response, live_destination="aeron:ipc")
    with pytest.raises(ArchiveError, match="response channels can't be used with tagged replication"):
        dst.client.tagged_replicate(d.recording_id, -1, 1, 2, src.ctx.local_control_stream_id,
                                    src.ctx.local_control_channel, replication_channel=response)
