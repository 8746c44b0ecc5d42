"""Replication throughput: a stopped recording replicated between two local archives over UDP, against a replay of the
same recording over UDP between the same two media drivers into a counting subscriber, same run.

- The source is `aeron-archive serve` in a process of its own, with its own embedded media driver; the recording
  (`--mib` MiB of 1 KiB messages on 16 MiB terms) is published over IPC on that driver and recorded LOCAL.
- The destination archive runs in this process on a second embedded media driver.
- `replicate`: the destination replicates the recording over `aeron:udp?endpoint=localhost:0` (the default
  replication channel) and the time runs from the request to SYNC; the replica is purged after each round.
- `replay`: a subscriber on the destination's driver asks the source for a replay of the whole recording over UDP
  and block-polls it, counting bytes, until the stop position (what a replication's recorder receives, without
  writing it).
Rounds alternate; medians, MB/s of each and the ratio replicate / replay (the target is >= 0.8).

Run: `bash ci/bench.sh replication [--mib 1024] [--rounds 3]`. Compare ratios taken in one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aeron_archive_spark.archive.client import AeronArchive, ReplicationParams
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver
from aeron_archive_spark.archive.storage.frames import to_int32
from tests.system.harness import Harness, wait_for

TERM = 16 * 1024 * 1024
MESSAGE = 1024
STREAM = 9301


def free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def start_source(base: Path) -> tuple[subprocess.Popen[str], dict[str, object], str]:
    port = free_udp_port()
    channel = f"aeron:udp?endpoint=localhost:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", str(base / "src"),
         "--control-channel", channel],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline()), channel


def record(src_aeron_dir: str, control_channel: str, mib: int) -> tuple[int, int]:
    """`mib` MiB recorded LOCAL over IPC on the source's driver; (recording id, stop position)."""
    channel = f"aeron:ipc?term-length={TERM}"
    with AeronArchive.connect(src_aeron_dir, control_channel, 10, "aeron:ipc") as src:
        src.start_recording(channel, STREAM, SourceLocation.LOCAL)
        publication = src.aeron.add_exclusive_publication(channel, STREAM)
        payload = b"r" * MESSAGE
        total = mib * 1024 * 1024
        while publication.position < total:
            if publication.offer(payload) <= 0:
                time.sleep(0.00001)
        stop = publication.position
        recording_id = wait_for(
            lambda: (r := src.find_last_matching_recording(0, channel, STREAM, publication.session_id)) >= 0 and r + 1,
            10, "the recording") - 1
        wait_for(lambda: src.get_recording_position(recording_id) >= stop, 120, "recorded")
        src.stop_recording(channel, STREAM)
        publication.close()
        return recording_id, stop


def replicate_once(dst: Harness, src_channel: str, recording_id: int, stop: int) -> float:
    started = time.perf_counter()
    replication_id = dst.client.replicate(recording_id, 10, src_channel, ReplicationParams())
    wait_for(lambda: any(e.correlation_id == replication_id and e.signal is RecordingSignal.SYNC
                         for e in dst.signals.events), 600, "SYNC", poll=dst.client.poll_for_recording_signals)
    elapsed = time.perf_counter() - started
    stop_signal = wait_for(
        lambda: next((e for e in dst.signals.of(RecordingSignal.STOP) if e.correlation_id == replication_id), None),
        60, "STOP", poll=dst.client.poll_for_recording_signals)
    dst_id = stop_signal.recording_id
    wait_for(lambda: dst.client.get_stop_position(dst_id) == stop, 60, "the replica stopped")
    dst.client.purge_recording(dst_id)
    return elapsed


def replay_once(aeron: AeronClient, src_channel: str, recording_id: int, stop: int) -> float:
    with AeronArchive.connect(aeron=aeron, control_request_channel=src_channel, control_request_stream_id=10,
                              control_response_channel="aeron:udp?endpoint=localhost:0") as src:
        subscription = aeron.add_subscription("aeron:udp?endpoint=localhost:0", 9302)
        try:
            channel = subscription.try_resolve_channel_endpoint_port(timeout_s=5)
            assert channel is not None
            started = time.perf_counter()
            replay_session_id = src.start_replay(recording_id, 0, stop, channel, 9302)
            image = wait_for(lambda: subscription.image_by_session_id(to_int32(replay_session_id)), 10, "image")
            received = 0

            def count(block: memoryview, _session_id: int, _term_id: int) -> None:
                nonlocal received
                received += len(block)

            idle = 0
            while received < stop:
                if image.block_poll(count, 8 * 1024 * 1024) == 0:
                    idle += 1
                    if idle > 3:
                        time.sleep(0.0001)
                else:
                    idle = 0
            elapsed = time.perf_counter() - started
            image.close()
            return elapsed
        finally:
            subscription.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    proc, ready, src_channel = start_source(base)
    try:
        recording_id, stop = record(str(ready["aeronDir"]), src_channel, args.mib)
        print(f"source: recording {recording_id}, {stop / 1e6:.0f} MB", flush=True)
        with EmbeddedMediaDriver(str(base / "dst-driver")) as driver:
            dst = Harness(driver.aeron_dir, str(base / "dst"), segment_file_length=128 * 1024 * 1024)
            aeron = AeronClient(driver.aeron_dir, client_name="bench-replay")
            try:
                times: dict[str, list[float]] = {"replicate": [], "replay": []}
                for round_ in range(args.rounds):
                    for name in ("replicate", "replay") if round_ % 2 == 0 else ("replay", "replicate"):
                        if name == "replicate":
                            elapsed = replicate_once(dst, src_channel, recording_id, stop)
                        else:
                            elapsed = replay_once(aeron, src_channel, recording_id, stop)
                        times[name].append(elapsed)
                        print(f"round {round_ + 1} {name}: {stop / elapsed / 1e6:.0f} MB/s", flush=True)
            finally:
                aeron.close()
                dst.close()
        medians = {name: stop / statistics.median(t) / 1e6 for name, t in times.items()}
        print(f"replicate {medians['replicate']:.0f} MB/s, replay {medians['replay']:.0f} MB/s, "
              f"ratio {medians['replicate'] / medians['replay']:.2f} (target >= 0.8)")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
