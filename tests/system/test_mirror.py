"""`Mirror` and `aeron-archive mirror`: a destination kept a replica of a source archive's recordings (stopped,
new and live ones), restartable without copying twice, across a source restart, and fed by two sources."""

from __future__ import annotations

import threading
import time

import pytest
from system.harness import Harness, payloads_of, wait_for
from system.test_replay_fetch import record_stopped
from system.test_replication import dst, src  # noqa: F401 - the two archives, as fixtures

from aeron_archive_spark.archive.cli.main import main as cli_main
from aeron_archive_spark.archive.client.mirror import Mirror, MirrorSource, copy_key
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation

S = RecordingSignal


def mirror_of(src: Harness, dst: Harness, **kw) -> Mirror:
    return Mirror(lambda: src.connect(recording_signal_consumer=None),
                  lambda consumer: dst.connect(recording_signal_consumer=consumer),
                  MirrorSource(src.ctx.local_control_channel, src.ctx.local_control_stream_id, **kw),
                  replication_channel="aeron:udp?endpoint=localhost:0")


class Running:
    """A mirror on a thread of its own, passing every 50 ms."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.stop = threading.Event()
        self.thread = threading.Thread(target=mirror.run, args=(self.stop, 0.05), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def in_sync(src: Harness, dst: Harness) -> bool:
    """Every source recording has exactly one replica, at the source's stop (or being recorded if it is live)."""
    replicas: dict[tuple, list] = {}
    for d in dst.client.list_recordings():
        replicas.setdefault(copy_key(d), []).append(d)
    for d in src.client.list_recordings():
        held = replicas.get(copy_key(d), [])
        if len(held) != 1:
            return False
        if d.stop_position == -1:
            if held[0].stop_position != -1:
                return False
        elif held[0].stop_position != d.stop_position:
            return False
    return True


def live_recording(h: Harness, stream_id: int):
    channel = "aeron:ipc?term-length=65536"
    h.client.start_recording(channel, stream_id, SourceLocation.LOCAL)
    publication = h.client.aeron.add_exclusive_publication(channel, stream_id)
    start = h.await_signal(S.START, count=len(h.signals.of(S.START)) + 1)
    return channel, publication, start.recording_id


def offer(publication, count: int, seed: int) -> None:
    for p in payloads_of([800] * count, seed=seed):
        while publication.offer(p) <= 0:
            time.sleep(0.0001)


def test_a_mirror_copies_stopped_new_and_live_recordings_and_restarts_without_copying_twice(src, dst):
    for i in range(3):
        record_stopped(src, payloads_of([200 + i * 50] * 100, seed=i), 6101 + i)
    channel, publication, live_id = live_recording(src, 6110)
    offer(publication, 100, seed=9)
    running = Running(mirror_of(src, dst))
    try:
        wait_for(lambda: in_sync(src, dst), 30, "the destination to mirror the source")
        # The live recording is followed: what the source records next reaches its replica.
        offer(publication, 200, seed=10)
        target = publication.position
        live_key = copy_key(src.client.list_recording(live_id))
        replica = next(d for d in dst.client.list_recordings() if copy_key(d) == live_key)
        wait_for(lambda: dst.client.get_recording_position(replica.recording_id) >= target, 20, "the live replica")
        # A recording the source starts later is mirrored too.
        record_stopped(src, payloads_of([300] * 50, seed=11), 6111)
        wait_for(lambda: in_sync(src, dst), 30, "the new recording mirrored")
    finally:
        running.close()
    count = len(dst.client.list_recordings())
    # The live recording stops while no mirror runs: its replica stops with it (the replication follows it).
    src.client.stop_recording(channel, 6110)
    publication.close()
    wait_for(lambda: src.client.get_stop_position(live_id) != -1, 10, "the source recording stopped")
    # A mirror started again copies nothing twice.
    again = mirror_of(src, dst)
    wait_for(lambda: in_sync(src, dst), 30, "in sync again", poll=again.pass_once)
    assert len(dst.client.list_recordings()) == count
    again.close()


def test_a_mirror_goes_on_across_a_source_restart(src, dst):
    record_stopped(src, payloads_of([400] * 100), 6120)
    channel, publication, live_id = live_recording(src, 6121)
    offer(publication, 100, seed=1)
    running = Running(mirror_of(src, dst))
    try:
        wait_for(lambda: in_sync(src, dst), 30, "mirrored")
        publication.close()
        src.restart()  # the live recording stops where it was; its replica with it, once the replay ends
        record_stopped(src, payloads_of([500] * 80, seed=2), 6122)
        wait_for(lambda: in_sync(src, dst), 60, "mirrored after the source restarted")
    finally:
        running.close()
    assert len(dst.client.list_recordings()) == len(src.client.list_recordings()) == 3


def test_two_sources_fan_in_and_a_filter_keeps_to_one_stream(aeron_dir, tmp_path, src, dst):
    other = Harness(aeron_dir, str(tmp_path / "other"))
    try:
        record_stopped(src, payloads_of([100] * 20), 6131)
        record_stopped(src, payloads_of([100] * 20, seed=3), 6132)
        record_stopped(other, payloads_of([100] * 20, seed=4), 6131)
        for mirror in (mirror_of(src, dst, stream_id=6131), mirror_of(other, dst)):
            wait_for(lambda m=mirror: m.pass_once() == 0 and m.running == 0, 30, "a mirror pass with nothing to do",
                     poll=lambda m=mirror: m._drain(m._destination()))
            mirror.close()
        keys = {copy_key(d) for d in dst.client.list_recordings()}
        wanted = {copy_key(d) for d in src.client.list_recordings() if d.stream_id == 6131}
        wanted |= {copy_key(d) for d in other.client.list_recordings()}
        assert keys == wanted and len(dst.client.list_recordings()) == 2
    finally:
        other.close()


def test_the_command_mirrors_once_and_exits(src, dst):
    for i in range(2):
        record_stopped(src, payloads_of([300] * 40, seed=i), 6141 + i)
    code = cli_main(["mirror", "--aeron-dir", src.aeron_dir,
                     "--source-channel", src.ctx.local_control_channel,
                     "--source-stream-id", str(src.ctx.local_control_stream_id),
                     "--destination-channel", dst.ctx.local_control_channel,
                     "--destination-stream-id", str(dst.ctx.local_control_stream_id),
                     "--response-channel", "aeron:ipc", "--interval", "0.05", "--once"])
    assert code == 0
    wait_for(lambda: in_sync(src, dst), 10, "mirrored")
    with pytest.raises(SystemExit, match="--max-concurrent must be at least 1"):
        cli_main(["mirror", "--source-channel", "aeron:ipc", "--max-concurrent", "0"])
