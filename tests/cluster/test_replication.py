"""Replication between two of our archives on two hosts (issue 32), over UDP across the namespace network.

The source archive runs on `publisher` (A), with 64 KiB segments so that a small recording spans many segment
files; the streams it records are published on A by tests/cluster/publisher.py (its own media driver, recorded
REMOTE). The destination archive runs on `driver2` (B), with a replication channel on B's address. A process on B
(publisher.py `session`, through B's archive's media driver) asks B's archive to replicate A's recordings, naming
A's UDP control channel, and watches the signals; nothing on B is told anything about A but that channel. Every
check compares what is on the two hosts' disks: each segment file's bytes (SHA-256), and the descriptors.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.cluster.topology import PUBLISHER_SCRIPT, ArchiveSession, Topology

pytestmark = pytest.mark.cluster

SRC_HOST, DST_HOST = "publisher", "driver2"
SRC_ARCHIVE, DST_ARCHIVE = "replication-src", "replication-dst"  # their services' names
ARCHIVE_DIR = "/tmp/replication-archive"  # on each host: hosts share no /tmp
CONTROL_PORT = 8020
CONTROL_STREAM_ID = 10
SEGMENT_LENGTH = 64 * 1024  # A's; the publisher's terms are 64 KiB too (one term a segment)
# The publisher's SBE trades are 96-byte frames: 8000 of them are ~750 KiB, 12 segment files.
STOPPED_COUNT = 8000
LIVE_RATE = 2000.0  # trades a second on a live source: ~190 KiB/s, three segments a second
# Stream ids of this module's recordings (fresh per run, as in test_connector.py).
STREAM_BASE = 20_000 + 100 * random.randrange(100)
S_REPLICATE, S_EXTEND, S_SYNC, S_MERGE = "REPLICATE", "EXTEND", "SYNC", "MERGE"
S_REPLICATE_END, S_STOP = "REPLICATE_END", "STOP"
# What a replica shares with its source (docs/replication.md, "Which recordings are copies of one another").
COPIED_FIELDS = (
    "startPosition",
    "stopPosition",
    "startTimestamp",
    "initialTermId",
    "termBufferLength",
    "segmentFileLength",
    "mtuLength",
    "sessionId",
    "streamId",
    "strippedChannel",
    "originalChannel",
    "sourceIdentity",
)


@dataclass
class Archives:
    cluster: Topology
    src: ArchiveSession  # a client of A's archive, on A
    dst: ArchiveSession  # a client of B's archive, on B
    src_control_channel: str  # A's archive, as B reaches it
    dst_aeron_dir: str

    def channel(self, port: int, live: bool = False) -> str:
        """A stream published on A: unicast to A's address, or (`live`) a dynamic multi-destination channel whose
        control address is on A, which both archives can subscribe to."""
        ip = self.cluster.ip(SRC_HOST)
        return f"aeron:udp?control-mode=dynamic|control={ip}:{port}" if live else f"aeron:udp?endpoint={ip}:{port}"

    def replicate(self, src_recording_id: int, **params: Any) -> int:
        replication_id: int = self.dst.call(
            "replicate",
            src_recording_id=src_recording_id,
            src_control_channel=self.src_control_channel,
            src_control_stream_id=CONTROL_STREAM_ID,
            **params,
        )
        return replication_id

    def signals(self, replication_id: int, until: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """B's client's signals of the replication once `until` came (the test fails with what came otherwise)."""
        seen = self.dst.call("signals", timeout_s + 30, correlation_id=replication_id, until=until, timeout_s=timeout_s)
        assert not seen["errors"], f"replication {replication_id} failed: {seen['errors']}"
        assert not seen["timedOut"], f"no {until} for replication {replication_id} in {timeout_s}s: {seen['signals']}"
        events: list[dict[str, Any]] = seen["signals"]
        return events

    def stopped(self, session: ArchiveSession, recording_id: int, timeout_s: float = 30.0) -> dict[str, Any]:
        described = session.call("await_position", timeout_s + 30, recording_id=recording_id, position=-1)
        assert described is not None, f"recording {recording_id} on {session.host} did not stop in {timeout_s}s"
        row: dict[str, Any] = described
        return row

    def at(self, session: ArchiveSession, recording_id: int, position: int, timeout_s: float = 30.0) -> None:
        reached = session.call("await_position", timeout_s + 30, recording_id=recording_id, position=position)
        assert reached is not None, f"recording {recording_id} on {session.host} did not reach {position}"

    def assert_same_bytes(self, src_id: int, dst_id: int, start: int, stop: int, whole: bool = True) -> None:
        """The replica's segment files hold the source's bytes over [start, stop), segment by segment; `whole`:
        the files themselves are identical (same names but for the recording id, same lengths, same bytes)."""
        want = self.src.call("segments", recording_id=src_id, start=start, stop=stop)
        got = self.dst.call("segments", recording_id=dst_id, start=start, stop=stop)
        assert sorted(got, key=int) == sorted(want, key=int), "the replica's segment files are not the source's"
        assert len(want) > 1 or stop - start <= SEGMENT_LENGTH
        for base in want:
            assert got[base]["range"] == want[base]["range"]
            assert got[base]["rangeSha256"] == want[base]["rangeSha256"], f"segment at {base} differs in {want[base]}"
            if whole:
                assert (got[base]["length"], got[base]["sha256"]) == (want[base]["length"], want[base]["sha256"]), (
                    f"segment file at {base} differs"
                )

    def assert_copy(self, src: dict[str, Any], dst_id: int) -> dict[str, Any]:
        """B's recording `dst_id` is a stopped copy of A's `src` (descriptor and every segment file)."""
        replica: dict[str, Any] = self.dst.call("describe", recording_id=dst_id)
        assert replica["stopPosition"] != -1
        assert {f: replica[f] for f in COPIED_FIELDS} == {f: src[f] for f in COPIED_FIELDS}
        self.assert_same_bytes(src["recordingId"], dst_id, src["startPosition"], src["stopPosition"])
        return replica


@pytest.fixture(scope="module")
def archives(cluster: Topology) -> Iterator[Archives]:
    """A's and B's archives (fresh directories) and a client of each on its own host, for the whole module."""
    for host in (SRC_HOST, DST_HOST):
        cluster.run(host, ["rm", "-rf", ARCHIVE_DIR], check=True, timeout=10)
    dst_ip = cluster.ip(DST_HOST)
    src = cluster.start_archive(
        SRC_ARCHIVE, SRC_HOST, archive_dir=ARCHIVE_DIR, control_port=CONTROL_PORT,
        args=["--segment-length", str(SEGMENT_LENGTH)],
    )  # fmt: skip
    dst = cluster.start_archive(
        DST_ARCHIVE, DST_HOST, archive_dir=ARCHIVE_DIR, control_port=CONTROL_PORT,
        args=["--replication-channel", f"aeron:udp?endpoint={dst_ip}:0"],
    )  # fmt: skip
    sessions: list[ArchiveSession] = []
    try:
        sessions.append(cluster.archive_session(SRC_HOST, src["aeronDir"], ARCHIVE_DIR))
        sessions.append(cluster.archive_session(DST_HOST, dst["aeronDir"], ARCHIVE_DIR))
        yield Archives(cluster, sessions[0], sessions[1], src["controlChannel"], dst["aeronDir"])
    finally:
        for session in sessions:
            session.close()
        for name in (SRC_ARCHIVE, DST_ARCHIVE):
            cluster.kill_service(name, signal.SIGTERM)


class Publisher:
    """publisher.py on A: numbered trades on `channel`, recorded REMOTE by A's archive (a recording of its own)."""

    def __init__(self, archives: Archives, channel: str, stream_id: int, *, rate: float, count: int = 0) -> None:
        self.archives, self.channel, self.stream_id, self.count = archives, channel, stream_id, count
        cluster = archives.cluster
        self.subscription_id = archives.src.call("start_recording", channel=channel, stream_id=stream_id)
        self.status_file = f"/tmp/replication-publisher/{stream_id}.json"
        argv = [cluster.python, str(PUBLISHER_SCRIPT), "publish", "--channel", channel, "--stream-id", str(stream_id)]
        argv += ["--rate", str(rate), "--count", str(count), "--status-file", self.status_file]
        argv += ["--aeron-dir", f"/dev/shm/aas-replication-{stream_id}", "--drain-s", "1"]
        if count:
            argv += ["--exit-when-done", "--linger-s", "0.2"]
        self.process = cluster.spawn(SRC_HOST, argv, stdout=subprocess.DEVNULL)
        recording = archives.src.call("await_recording", stream_id=stream_id)
        assert recording is not None, f"A's archive did not record stream {stream_id}"
        self.recording_id: int = recording["recordingId"]

    def stop(self) -> int:
        """End the stream (its publication closes, unless it ended by itself) and wait until A's recording stops
        there; the stop position."""
        if self.process.poll() is None and not self.count:
            self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=60) == 0, f"the publisher of stream {self.stream_id} failed"
        stopped = self.archives.stopped(self.archives.src, self.recording_id)
        self.archives.src.call("stop_recording_subscription", subscription_id=self.subscription_id)
        status = self.archives.cluster.run(SRC_HOST, ["cat", self.status_file], check=True, timeout=10).stdout
        published = json.loads(status)
        assert published["done"] and stopped["stopPosition"] == published["position"], (
            f"A's archive did not record the whole stream: {stopped}, published {published}"
        )
        position: int = stopped["stopPosition"]
        return position


def record_stopped(archives: Archives, stream_id: int, count: int = STOPPED_COUNT) -> dict[str, Any]:
    """A stopped recording on A of `count` trades published as fast as they go; its descriptor."""
    publisher = Publisher(archives, archives.channel(40_000 + stream_id % 1000), stream_id, rate=0, count=count)
    publisher.stop()
    described: dict[str, Any] = archives.src.call("describe", recording_id=publisher.recording_id)
    return described


@pytest.fixture(scope="module")
def stopped_recording(archives: Archives) -> dict[str, Any]:
    """A recording on A of ~12 segments, stopped."""
    return record_stopped(archives, STREAM_BASE + 1)


def signal_names(events: list[dict[str, Any]]) -> list[str]:
    return [e["signal"] for e in events]


def test_a_stopped_recording_of_many_segments_is_copied_byte_for_byte(
    archives: Archives, stopped_recording: dict[str, Any]
) -> None:
    src = stopped_recording
    assert src["stopPosition"] > 10 * SEGMENT_LENGTH and src["segmentFileLength"] == SEGMENT_LENGTH
    replication_id = archives.replicate(src["recordingId"])
    events = archives.signals(replication_id, S_STOP)
    assert signal_names(events) == [S_REPLICATE, S_EXTEND, S_SYNC, S_REPLICATE_END, S_STOP]
    dst_id = events[0]["recordingId"]
    assert all(e["recordingId"] == dst_id for e in events)
    assert events[0]["position"] == src["startPosition"]
    assert events[2]["position"] == events[-1]["position"] == src["stopPosition"]
    archives.assert_copy(src, dst_id)


def test_a_live_replication_merges_then_ends_with_the_source_s_stream(archives: Archives) -> None:
    stream_id = STREAM_BASE + 2
    live = archives.channel(40_000 + stream_id % 1000, live=True)
    publisher = Publisher(archives, live, stream_id, rate=LIVE_RATE)
    try:
        archives.at(archives.src, publisher.recording_id, 2 * SEGMENT_LENGTH)  # a replay to catch up first
        replication_id = archives.replicate(publisher.recording_id, live_destination=live)
        merged = archives.signals(replication_id, S_REPLICATE_END)
        assert signal_names(merged) == [S_REPLICATE, S_EXTEND, S_MERGE, S_REPLICATE_END]
        dst_id = merged[0]["recordingId"]
        # B now records the live stream itself, as A does, while A's publisher goes on.
        merged_at = merged[2]["position"]
        archives.at(archives.dst, dst_id, merged_at + 2 * SEGMENT_LENGTH)
        replica = archives.dst.call("describe", recording_id=dst_id)
        assert replica["stopPosition"] == -1 and replica["recordingPosition"] > merged_at
    finally:
        stop = publisher.stop()
    events = archives.signals(replication_id, S_STOP)  # the live image ended: B's recording stops with A's
    assert signal_names(events) == [S_REPLICATE, S_EXTEND, S_MERGE, S_REPLICATE_END, S_STOP]
    assert events[-1]["position"] == stop
    src = archives.src.call("describe", recording_id=publisher.recording_id)
    assert archives.assert_copy(src, dst_id)["stopPosition"] == stop


def test_a_replication_stopped_mid_way_is_completed_by_a_second_one_extending_its_replica(archives: Archives) -> None:
    stream_id = STREAM_BASE + 3
    publisher = Publisher(archives, archives.channel(40_000 + stream_id % 1000), stream_id, rate=LIVE_RATE)
    try:
        archives.at(archives.src, publisher.recording_id, SEGMENT_LENGTH)
        first = archives.replicate(publisher.recording_id)  # follows the live source...
        dst_id = archives.signals(first, S_EXTEND)[0]["recordingId"]
        archives.at(archives.dst, dst_id, 2 * SEGMENT_LENGTH + 1000)
        archives.dst.call("stop_replication", replication_id=first)  # ... until told to stop
        events = archives.signals(first, S_STOP)
        assert signal_names(events) == [S_REPLICATE, S_EXTEND, S_REPLICATE_END, S_STOP]
        held = events[-1]["position"]
        assert held == archives.dst.call("describe", recording_id=dst_id)["stopPosition"]
        # What the replica holds is the source's, up to where it stopped.
        archives.assert_same_bytes(publisher.recording_id, dst_id, 0, held, whole=False)
        archives.at(archives.src, publisher.recording_id, held + SEGMENT_LENGTH)
    finally:
        stop = publisher.stop()
    assert held < stop
    second = archives.replicate(publisher.recording_id, dst_recording_id=dst_id)
    events = archives.signals(second, S_STOP)
    assert signal_names(events) == [S_EXTEND, S_SYNC, S_REPLICATE_END, S_STOP]
    assert all(e["recordingId"] == dst_id for e in events)
    assert events[0]["position"] == held and events[-1]["position"] == stop
    src = archives.src.call("describe", recording_id=publisher.recording_id)
    archives.assert_copy(src, dst_id)


def test_a_tagged_replication_records_through_a_tagged_subscription(
    archives: Archives, stopped_recording: dict[str, Any]
) -> None:
    src = stopped_recording
    replication_id: int = archives.dst.call(
        "tagged_replicate",
        src_recording_id=src["recordingId"],
        dst_recording_id=-1,
        channel_tag_id=STREAM_BASE + 91,
        subscription_tag_id=STREAM_BASE + 92,
        src_control_stream_id=CONTROL_STREAM_ID,
        src_control_channel=archives.src_control_channel,
    )
    events = archives.signals(replication_id, S_STOP)
    assert signal_names(events) == [S_REPLICATE, S_EXTEND, S_SYNC, S_REPLICATE_END, S_STOP]
    (extend,) = [e for e in events if e["signal"] == S_EXTEND]
    assert extend["subscriptionId"] > 0  # the tagged (multi-destination) recording subscription
    archives.assert_copy(src, events[0]["recordingId"])


def test_mirror_once_copies_what_b_lacks_and_recognises_the_replicas_it_has(archives: Archives) -> None:
    new = record_stopped(archives, STREAM_BASE + 5, count=STOPPED_COUNT // 2)
    before = {r["recordingId"]: r for r in archives.dst.call("recordings")}

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[f] for f in COPIED_FIELDS if f != "stopPosition")

    sources = archives.src.call("recordings")
    lacking = [s for s in sources if key(s) not in {key(r) for r in before.values()}]
    assert new["recordingId"] in {s["recordingId"] for s in lacking}
    argv = ["aeron-archive", "mirror", "--once", "--interval", "0.2", "--aeron-dir", archives.dst_aeron_dir]
    argv += ["--source-channel", archives.src_control_channel]
    argv += ["--response-channel", f"aeron:udp?endpoint={archives.cluster.ip(DST_HOST)}:0"]
    result = archives.cluster.run(DST_HOST, argv, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    after = {r["recordingId"]: r for r in archives.dst.call("recordings")}
    added = [r for rid, r in after.items() if rid not in before]
    assert sorted(key(r) for r in added) == sorted(key(s) for s in lacking), "mirror copied a recording twice"
    # Every recording of A now has a complete copy on B (the ones made before by the other tests too).
    for source in sources:
        replicas = [rid for rid, r in after.items() if key(r) == key(source)]
        assert replicas, f"recording {source['recordingId']} of A has no replica on B"
        for dst_id in replicas:
            archives.stopped(archives.dst, dst_id)
            archives.assert_copy(source, dst_id)
