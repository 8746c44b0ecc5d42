"""Replication between our archive and the real Java Aeron 1.53 archive, both ways (issue 32).

Two processes: Java's ArchivingMediaDriver (its own Java media driver and archive directory) and our
`aeron-archive serve` (its embedded C media driver), each on its own UDP control port. The test's clients run on our
archive's media driver and talk to both archives over UDP. A recording made in one archive is replicated into the
other with the request Java's client sends (ReplicateRequest2):

a. Java -> ours, a stopped recording: our archive's signals are Java's (REPLICATE, EXTEND, SYNC, REPLICATE_END,
   STOP), the replica's descriptor carries the source's, and its segment files equal the Java archive's byte for byte;
   Java's archive announces no time index: the replica keeps its own times, and nothing waits on Java for them;
b. Java -> ours, bounded, then extended to the source's stop by a second replication;
c. ours -> Java, a stopped recording: the Java archive's signals and segment files, the same way round;
d. Java -> ours, a live recording merged onto the live stream (an MDC publication both archives subscribe to): MERGE,
   and the replica goes on recording the live stream;
e. response-mode control sessions (`control-mode=response`) both ways: our client with Java's archive, Java's client
   with ours (it then replays a recording whole);
f. response-channel replays and replications: Java's client replaying from ours over a response channel (its
   replayViaResponseChannel), and each archive replicating from the other with a srcResponseChannel and a response
   replication channel (REPLAY_TOKEN, GET_ARCHIVE_PROXY).

Every test skips unless JAVA_AERON_HOME names a Java Aeron 1.53 build (see /work/shared/java-aeron/README.md):
    JAVA_AERON_HOME=~/.cache/java-aeron .venv/bin/python -m pytest tests/interop/test_java153_replication.py
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_udp_port
from interop.java153env import JavaArchive, OurArchive, udp

from aeron_archive_spark.archive.client import AeronArchive, ReplicationParams
from aeron_archive_spark.archive.client.aeron_archive import RecordingSignalEvent
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.storage.segments import segment_file_name
from aeron_archive_spark.archive.storage.time_index import read_time_index

S = RecordingSignal
CONTROL_STREAM_ID = 10
RESPONSE = "aeron:udp?endpoint=localhost:0"
TERM_LENGTH = 64 * 1024


class Client:
    """A client of one archive on our archive's media driver, over UDP, keeping the signals it receives."""

    def __init__(self, aeron_dir: str, control_channel: str) -> None:
        self.signals: list[RecordingSignalEvent] = []
        self.archive = AeronArchive.connect(aeron_dir, control_channel, CONTROL_STREAM_ID, RESPONSE,
                                            recording_signal_consumer=self.signals.append, message_timeout_s=10)

    def await_signal(self, correlation_id: int, signal: RecordingSignal, timeout: float = 30) -> list[RecordingSignal]:
        deadline = time.monotonic() + timeout
        while signal not in (got := [e.signal for e in self.signals if e.correlation_id == correlation_id]):
            self.archive.poll_for_recording_signals()
            assert time.monotonic() < deadline, f"no {signal.name} for {correlation_id} within {timeout}s: {got}"
            time.sleep(0.005)
        return got

    def events(self, correlation_id: int) -> list[RecordingSignalEvent]:
        return [e for e in self.signals if e.correlation_id == correlation_id]

    def close(self) -> None:
        self.archive.close()


@pytest.fixture
def clients(java: JavaArchive, ours: OurArchive) -> Iterator[tuple[Client, Client]]:
    to_java = Client(ours.aeron_dir, java.control_channel)
    to_ours = Client(ours.aeron_dir, ours.control_channel)
    yield to_java, to_ours
    to_java.close()
    to_ours.close()


def record(archive: AeronArchive, count: int, stream_id: int) -> tuple[int, int]:
    """`count` messages published from our media driver over UDP and recorded REMOTE by `archive`; returns
    (recording id, stop position)."""
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length={TERM_LENGTH}"
    subscription_id = archive.start_recording(channel, stream_id, SourceLocation.REMOTE)
    publication = archive.aeron.add_exclusive_publication(channel, stream_id)
    deadline = time.monotonic() + 10
    while not publication.is_connected:
        assert time.monotonic() < deadline, "the archive did not subscribe"
        time.sleep(0.01)
    for i in range(count):
        payload = bytes([i % 251]) * (50 + (i * 97) % 1900)
        while publication.offer(payload) <= 0:
            time.sleep(0.0001)
    stop = publication.position
    recording_id = -1
    while recording_id < 0 or archive.get_recording_position(recording_id) < stop:
        recording_id = archive.find_last_matching_recording(0, channel, stream_id, publication.session_id)
        assert time.monotonic() < deadline + 20, "not recorded"
        time.sleep(0.01)
    archive.stop_recording_subscription(subscription_id)
    while archive.get_stop_position(recording_id) != stop:
        time.sleep(0.01)
    publication.close()
    return recording_id, stop


def assert_same_segments(src_dir: Path, src_id: int, dst_dir: Path, dst_id: int, start: int, stop: int,
                         segment: int) -> None:
    base = start - start % segment
    while base < stop:
        want = (src_dir / segment_file_name(src_id, base)).read_bytes()
        got = (dst_dir / segment_file_name(dst_id, base)).read_bytes()
        lo, hi = max(start - base, 0), min(stop - base, segment)
        assert got[lo:hi] == want[lo:hi], f"segment at {base}"
        base += segment


def assert_same_descriptor(src: AeronArchive, src_id: int, dst: AeronArchive, dst_id: int) -> None:
    a, b = src.list_recording(src_id), dst.list_recording(dst_id)
    for field in ("start_position", "stop_position", "initial_term_id", "segment_file_length", "term_buffer_length",
                  "mtu_length", "session_id", "stream_id", "stripped_channel", "original_channel",
                  "source_identity", "start_timestamp"):
        assert getattr(b, field) == getattr(a, field), field


def test_java_to_ours_a_stopped_recording(java, ours, clients):
    to_java, to_ours = clients
    src_id, stop = record(to_java.archive, 400, 7101)
    replication_id = to_ours.archive.replicate(src_id, CONTROL_STREAM_ID, java.control_channel)
    signals = to_ours.await_signal(replication_id, S.STOP)
    assert signals == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = to_ours.events(replication_id)[0].recording_id
    assert to_ours.archive.get_stop_position(dst_id) == stop
    assert_same_descriptor(to_java.archive, src_id, to_ours.archive, dst_id)
    assert_same_segments(java.archive_dir, src_id, ours.archive_dir, dst_id, 0, stop, 128 * 1024)


def test_java_to_ours_a_replica_keeps_its_own_times_without_asking_java(java, ours, clients):
    """Java's archive announces no time index, so our replica is dated by its own recorder and the replication
    never waits on a time index request Java would leave unanswered."""
    to_java, to_ours = clients
    src_id, stop = record(to_java.archive, 400, 7104)
    source_stopped_ns = to_java.archive.list_recording(src_id).stop_timestamp * 1_000_000
    started = time.monotonic()
    replication_id = to_ours.archive.replicate(src_id, CONTROL_STREAM_ID, java.control_channel)
    assert to_ours.await_signal(replication_id, S.STOP) == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    assert time.monotonic() - started < 5  # well inside the replication timeout: nothing was awaited from Java
    dst_id = to_ours.events(replication_id)[0].recording_id
    index = read_time_index(ours.archive_dir, dst_id, 0, stop)
    assert len(index.positions) > 0 and int(index.positions[0]) == 0
    assert int(index.times_ns[0]) >= source_stopped_ns  # recorded by the replica, after the source had stopped


def test_java_to_ours_bounded_then_extended(java, ours, clients):
    to_java, to_ours = clients
    src_id, stop = record(to_java.archive, 400, 7102)
    bound = to_java.archive.get_stop_position(src_id) // 2 // 32 * 32
    first = to_ours.archive.replicate(src_id, CONTROL_STREAM_ID, java.control_channel,
                                      ReplicationParams(stop_position=bound))
    assert to_ours.await_signal(first, S.STOP) == [S.REPLICATE, S.EXTEND, S.REPLICATE_END, S.STOP]
    dst_id = to_ours.events(first)[0].recording_id
    held = to_ours.archive.get_stop_position(dst_id)
    assert held >= bound  # the frame starting before the bound comes whole
    second = to_ours.archive.replicate(src_id, CONTROL_STREAM_ID, java.control_channel,
                                       ReplicationParams(dst_recording_id=dst_id))
    assert to_ours.await_signal(second, S.STOP) == [S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    assert to_ours.archive.get_stop_position(dst_id) == stop
    assert_same_segments(java.archive_dir, src_id, ours.archive_dir, dst_id, 0, stop, 128 * 1024)


def test_ours_to_java_a_stopped_recording(java, ours, clients):
    to_java, to_ours = clients
    src_id, stop = record(to_ours.archive, 400, 7103)
    replication_id = to_java.archive.replicate(src_id, CONTROL_STREAM_ID, ours.control_channel)
    signals = to_java.await_signal(replication_id, S.STOP)
    assert signals == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = to_java.events(replication_id)[0].recording_id
    assert to_java.archive.get_stop_position(dst_id) == stop
    assert_same_descriptor(to_ours.archive, src_id, to_java.archive, dst_id)
    assert_same_segments(ours.archive_dir, src_id, java.archive_dir, dst_id, 0, stop, 128 * 1024)


def test_java_to_ours_live_merge(java, ours, clients):
    to_java, to_ours = clients
    control = free_udp_port()
    # fc=min: the publication waits for its slowest receiver. An MDC publication's default (max) lets the fast
    # receiver (our replica, on the publisher's own driver) run a term window ahead of the Java archive's, which
    # then loses data it can no longer have repaired, and its image times out: Aeron's behaviour, not the merge's.
    live = f"aeron:udp?control-mode=dynamic|control=localhost:{control}|term-length={TERM_LENGTH}|fc=min"
    subscription_id = to_java.archive.start_recording(live, 7104, SourceLocation.REMOTE)
    publication = to_java.archive.aeron.add_publication(live, 7104)
    deadline = time.monotonic() + 10
    while not publication.is_connected:
        assert time.monotonic() < deadline, "the Java archive did not join the live stream"
        time.sleep(0.01)
    for i in range(200):
        while publication.offer(bytes([i % 251]) * 700) <= 0:
            time.sleep(0.0001)
    src_id = -1
    while src_id < 0:
        src_id = to_java.archive.find_last_matching_recording(0, live, 7104, publication.session_id)
        time.sleep(0.01)
    replication_id = to_ours.archive.replicate(
        src_id, CONTROL_STREAM_ID, java.control_channel,
        ReplicationParams(live_destination=live, replication_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}"))
    assert to_ours.await_signal(replication_id, S.REPLICATE_END, timeout=60) == \
        [S.REPLICATE, S.EXTEND, S.MERGE, S.REPLICATE_END]
    dst_id = to_ours.events(replication_id)[0].recording_id
    for i in range(300):
        while publication.offer(bytes([(i + 7) % 251]) * 700) <= 0:
            time.sleep(0.0001)
    target = publication.position
    deadline = time.monotonic() + 30
    while to_ours.archive.get_recording_position(dst_id) < target or \
            to_java.archive.get_recording_position(src_id) < target:
        assert time.monotonic() < deadline, (
            f"the replica did not go on recording the live stream to {target}: replica at "
            f"{to_ours.archive.get_recording_position(dst_id)}, source at "
            f"{to_java.archive.get_recording_position(src_id)} ({to_java.archive.list_recording(src_id)}); "
            f"Java's log: {java.logs()[-3000:]}"
        )
        time.sleep(0.01)
    to_java.archive.stop_recording_subscription(subscription_id)
    publication.close()
    to_ours.await_signal(replication_id, S.STOP, timeout=30)  # the live image went: auto-stop
    stop = to_ours.archive.get_stop_position(dst_id)
    assert stop >= target
    java_stop = to_java.archive.get_stop_position(src_id)
    assert_same_segments(java.archive_dir, src_id, ours.archive_dir, dst_id, 0, min(stop, java_stop), 128 * 1024)


def test_our_response_mode_client_talks_to_java_s_archive(java, ours):
    """Response channels as Java 1.53 links them: our client's responses come back on the connection it opened."""
    response = f"aeron:udp?control-mode=response|control=localhost:{free_udp_port()}"
    with AeronArchive.connect(ours.aeron_dir, java.control_channel, CONTROL_STREAM_ID, response,
                              message_timeout_s=10) as client:
        assert client.archive_id() == 7  # start-archive.sh's aeron.archive.id
        assert client.list_recordings() == []


def test_java_s_client_in_response_mode_replays_from_ours(env, ours):
    """Java 1.53's client connects to our archive with a response-mode control response channel (our archive's
    response publication answers the client's request image) and replays a recording whole."""
    with AeronArchive.connect(ours.aeron_dir, ours.control_channel, CONTROL_STREAM_ID, RESPONSE) as client:
        recording_id, stop = record(client, 100, 7105)
    response = f"aeron:udp?control-mode=response|control=localhost:{free_udp_port()}"
    result = env.run("JavaReplayDump", ours.aeron_dir, ours.control_channel, CONTROL_STREAM_ID, response,
                     udp(free_udp_port()), 2002, 5000, recording_id, timeout=120)
    (replay,) = result.json()["replays"]
    assert replay["closedReason"] == "stop", replay
    assert replay["endPosition"] == replay["stopPosition"] == stop


def response_channel() -> str:
    """A response channel (`control-mode=response`) on a port of its own: Java's test shares one string between the
    control responses and the replay (srcResponseChannel = replicationChannel), on different streams."""
    return f"aeron:udp?control-mode=response|control=localhost:{free_udp_port()}"


def test_java_s_client_replays_from_ours_over_a_response_channel(env, ours):
    """Java 1.53's `replay` with a response replay channel (its `replayViaResponseChannel`: a replay token, a
    publication to our control channel naming its subscription, the replay request with the token on it): our
    archive answers that publication with the replay, which arrives whole."""
    with AeronArchive.connect(ours.aeron_dir, ours.control_channel, CONTROL_STREAM_ID, RESPONSE) as client:
        recording_id, stop = record(client, 150, 7106)
    response = response_channel()
    # A response replay channel without the token path would fail at our archive (a response publication needs an
    # image to answer): "stop" with every frame means the replay came over the connection Java's client opened.
    result = env.run("JavaReplayDump", ours.aeron_dir, ours.control_channel, CONTROL_STREAM_ID, response, response,
                     2003, 5000, recording_id, timeout=120)
    (replay,) = result.json()["replays"]
    assert replay["closedReason"] == "stop", replay
    assert replay["endPosition"] == replay["stopPosition"] == stop
    assert replay["imageJoinPosition"] == replay["startPosition"] == 0
    data = [frame for frame in replay["frames"] if frame[2] == 1]  # HDR_TYPE_DATA
    assert len(data) >= 150 and all(frame[6] == replay["imageSessionId"] for frame in data)


@pytest.mark.parametrize("direction", ["java-from-ours", "ours-from-java"])
def test_replication_over_response_channels(java, ours, clients, direction):
    """One archive replicating from the other with a srcResponseChannel and a response replication channel (the
    destination's REPLAY_TOKEN and GET_ARCHIVE_PROXY states): its control session to the source and the source's
    replay both answer connections the destination opened."""
    to_java, to_ours = clients
    src, dst, src_control_channel = ((to_ours, to_java, ours.control_channel) if direction == "java-from-ours"
                                     else (to_java, to_ours, java.control_channel))
    src_id, stop = record(src.archive, 300, 7107 if direction == "java-from-ours" else 7108)
    response = response_channel()
    replication_id = dst.archive.replicate(
        src_id, CONTROL_STREAM_ID, src_control_channel,
        ReplicationParams(src_response_channel=response, replication_channel=response))
    assert dst.await_signal(replication_id, S.STOP) == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = dst.events(replication_id)[0].recording_id
    assert dst.archive.get_stop_position(dst_id) == stop
    assert_same_payloads(src.archive, src_id, dst.archive, dst_id, stop)


def assert_same_payloads(src: AeronArchive, src_id: int, dst: AeronArchive, dst_id: int, stop: int) -> None:
    """Over a response channel the replay's session id is the response publication's (none can be asked for), so
    the replica's frames carry it: what must be the source's is every message, in order, and the positions."""
    assert messages_of(dst, dst_id, stop) == messages_of(src, src_id, stop)


def messages_of(archive: AeronArchive, recording_id: int, stop: int) -> list[bytes]:
    messages: list[bytes] = []
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    with archive.replay(recording_id, channel, 7999, position=0, length=stop) as subscription:
        deadline = time.monotonic() + 30
        while not subscription.images() or subscription.images()[0].position < stop:
            subscription.poll(lambda data, header: messages.append(bytes(data)), 100)
            assert time.monotonic() < deadline, f"the replay of recording {recording_id} did not reach {stop}"
        subscription.poll(lambda data, header: messages.append(bytes(data)), 100)
    return messages
