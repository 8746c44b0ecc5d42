"""A long-running archive: publications come and go under one recording subscription, and nothing piles up.

The archive server runs as its own process (`aeron-archive serve` on the tests' shared media driver), so its
`/proc/<pid>` shows exactly what the archive holds: memory mappings (a departed publication's log buffer that is
still mapped shows as a `(deleted)` file once the driver has removed it), open files and resident memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import free_udp_port
from system.harness import wait_for

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import SourceLocation

CONTROL_STREAM_ID = 4610
BATCH = 10


@dataclass(frozen=True)
class Footprint:
    mappings: int
    log_buffers: int
    deleted_log_buffers: int
    open_files: int
    rss_kib: int

    @classmethod
    def of(cls, pid: int) -> Footprint:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read().splitlines()
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return cls(
            mappings=len(maps),
            log_buffers=sum(1 for line in maps if "logbuffer" in line),
            deleted_log_buffers=sum(1 for line in maps if "logbuffer" in line and line.endswith("(deleted)")),
            open_files=len(os.listdir(f"/proc/{pid}/fd")),
            rss_kib=rss,
        )


@dataclass
class Server:
    proc: subprocess.Popen[str]
    client: AeronArchive
    aeron_dir: str


@pytest.fixture
def server(aeron_dir: str, tmp_path: os.PathLike[str]) -> Iterator[Server]:
    stream_id = CONTROL_STREAM_ID
    proc = subprocess.Popen(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", f"{tmp_path}/archive",
         "--aeron-dir", aeron_dir, "--control-channel", "none", "--local-control-stream-id", str(stream_id),
         "--low-storage-threshold", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    if not proc.stdout.readline():
        proc.kill()
        raise AssertionError("archive server did not start")
    client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel="aeron:ipc",
                                  control_request_stream_id=stream_id, control_response_channel="aeron:ipc")
    try:
        yield Server(proc, client, aeron_dir)
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def come_and_go(server: Server, channel: str, stream_id: int, count: int, recorded_before: int) -> None:
    """`count` publications, one after the other: each is recorded (one message) and then closed.

    A departed UDP image stays until the driver times it out, so at most `BATCH` recordings run at once (the
    archive's concurrent recording limit is 20).
    """
    aeron = server.client.aeron
    for n in range(1, count + 1):
        publication = aeron.add_exclusive_publication(channel, stream_id)
        wait_for(lambda p=publication: p.is_connected, what="the archive to subscribe")
        wait_for(lambda p=publication: p.offer(b"x" * 100) >= 0, what="an accepted offer")
        publication.close()
        if n % BATCH == 0 or n == count:
            recorded(server, recorded_before + n, recorded_before + (n - 1) // BATCH * BATCH)


def recorded(server: Server, count: int, since: int = 0) -> None:
    """Recordings `since`..`count - 1` exist, each stopped after its one message, and no later one does.

    Only the new ones are listed, so the check costs the same however many recordings the archive holds.
    """
    def listed() -> list[tuple[int, int]]:
        return [(d.recording_id, d.stop_position) for d in server.client.list_recordings(since, count - since + 1)]

    def stopped() -> bool:
        found = listed()
        return [r for r, _ in found] == list(range(since, count)) and all(stop == 160 for _, stop in found)
    try:
        wait_for(stopped, timeout=60, what=f"recordings {since}..{count - 1} stopped after one message each")
    except AssertionError as ex:
        raise AssertionError(f"{ex}: found {listed()}") from None


def test_departed_publications_leave_no_log_buffer_mapped_in_the_archive(server: Server) -> None:
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length=1m"
    server.client.start_recording(channel, 77, SourceLocation.REMOTE)
    come_and_go(server, channel, 77, 2, 0)
    baseline = wait_for(lambda: (f := Footprint.of(server.proc.pid)).deleted_log_buffers == 0 and f,
                        what="warm-up")
    come_and_go(server, channel, 77, 50, 2)
    # Every image is gone (each recording stopped): the archive must have unmapped every one of their log buffers.
    after = wait_for(lambda: (f := Footprint.of(server.proc.pid)).log_buffers <= baseline.log_buffers and f,
                     timeout=20, what=f"the archive to unmap departed log buffers ({Footprint.of(server.proc.pid)})")
    assert after.deleted_log_buffers == 0, (baseline, after)
    assert after.mappings <= baseline.mappings + 8, (baseline, after)
    assert after.open_files <= baseline.open_files, (baseline, after)


@pytest.mark.slow
def test_soak_thousands_of_publications_under_one_recording_subscription(server: Server) -> None:
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length=1m"
    server.client.start_recording(channel, 78, SourceLocation.REMOTE)
    warm_up, rounds, per_round = 200, 6, 500
    come_and_go(server, channel, 78, warm_up, 0)
    time.sleep(1.0)
    baseline = Footprint.of(server.proc.pid)
    rates = []
    for n in range(1, rounds + 1):
        started = time.monotonic()
        come_and_go(server, channel, 78, per_round, warm_up + (n - 1) * per_round)
        rates.append(per_round / (time.monotonic() - started))
    after = wait_for(lambda: (f := Footprint.of(server.proc.pid)).log_buffers <= baseline.log_buffers and f,
                     timeout=20, what=f"the archive to unmap departed log buffers ({Footprint.of(server.proc.pid)})")
    print(f"soak: {warm_up + rounds * per_round} publications; baseline {baseline}; after {after}; "
          f"recordings/s per round {[round(r) for r in rates]}")
    assert after.deleted_log_buffers == 0, after
    assert after.mappings <= baseline.mappings + 8, (baseline, after)
    assert after.open_files <= baseline.open_files, (baseline, after)
    assert after.rss_kib <= baseline.rss_kib * 1.10, (baseline, after)


def replay_many(server: Server, recording_id: int, stop: int, count: int, stream_id: int) -> None:
    """`count` replays of the whole recording, one after the other, each read to its end by a block-polling image."""
    for _ in range(count):
        subscription = server.client.replay(recording_id, "aeron:ipc", stream_id, position=0, length=stop)
        try:
            def at_end(subscription: Any = subscription) -> bool:
                images = subscription.images()
                for image in images:
                    image.block_poll(lambda *_: None, 1 << 20)
                return bool(images) and images[0].position >= stop

            wait_for(at_end, timeout=20, what="a replay to its end")
        finally:
            subscription.close()


def test_replays_leave_no_log_buffer_mapped_in_the_archive(server: Server) -> None:
    """Each replay maps its publication's log buffer twice in the archive (the C client's mapping, and the
    replayer's own for reading straight into the term): both must go when the replay ends."""
    channel = "aeron:ipc?term-length=1m"
    aeron = server.client.aeron
    publication = aeron.add_exclusive_publication(channel, 79)
    server.client.start_recording(f"{channel}|session-id={publication.session_id}", 79, SourceLocation.LOCAL)
    wait_for(lambda: publication.is_connected, what="the archive to subscribe")
    for _ in range(3000):
        wait_for(lambda: publication.offer(b"y" * 992) >= 0, what="an accepted offer")
    stop = publication.position
    (recording,) = server.client.list_recordings(0, 1)
    wait_for(lambda: server.client.get_recording_position(recording.recording_id) == stop, what="recorded")
    replay_many(server, recording.recording_id, stop, 3, 9791)
    baseline = wait_for(lambda: (f := Footprint.of(server.proc.pid)).deleted_log_buffers == 0 and f, what="warm-up")
    replay_many(server, recording.recording_id, stop, 40, 9791)
    after = wait_for(lambda: (f := Footprint.of(server.proc.pid)).log_buffers <= baseline.log_buffers and f, timeout=20,
                     what=f"the archive to unmap finished replays' log buffers ({Footprint.of(server.proc.pid)})")
    assert after.deleted_log_buffers == 0, (baseline, after)
    assert after.mappings <= baseline.mappings + 8, (baseline, after)
    assert after.open_files <= baseline.open_files, (baseline, after)
    publication.close()
