"""The conductor's longest duty cycle while a replica is dated by its source's time index (COPY_TIME_INDEX).

Dating a replica rewrites one `.tix` file per segment (temp file, fsync, rename), on the conductor thread, where
every control request, recording start and replay set-up is served: this measures what that costs the conductor.

- Two archives in this process on one embedded media driver (as the system tests run them), 64 KiB terms and
  64 KiB segments, the time index every `--interval-ms` ms.
- The source records `--segments` segments of 1 KiB messages over IPC, pausing 1 ms every 16 KiB so that each
  segment has a few samples, and stops.
- Each round replicates the whole recording into the destination over UDP (`aeron:udp?endpoint=localhost:0`), from
  the request to the replica's STOP (after REPLICATE_END, so the copy is included), alternating a replication that
  copies the source's times (`copy`) and one that does not (`own`: the destination told it keeps no index, so the
  session ends at SYNC as with a Java source); the replica is purged after each round.
- `--file-sync-level` (0, Aeron's default, or 1, 2) is the destination's: the copy fsyncs each file only above 0, as
  the recorder syncs its segments.
- The destination conductor's max cycle time (`ArchiveConductor.max_cycle_time_ns`, what the
  `archive-conductor max cycle time` counter publishes) is reset before each round and read after its STOP.

Run: `bash ci/bench.sh time-index-copy [--segments 400] [--rounds 3] [--file-sync-level 1]`. Prints a JSON line of
medians (and each round's max cycle).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from aeron_archive_spark.archive.client import ReplicationParams
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from aeron_archive_spark.archive.storage.time_index import read_time_index
from tests.system.harness import Harness, offer_all, wait_for

TERM = 64 * 1024
SEGMENT = 64 * 1024
STREAM = 9401
CHANNEL = f"aeron:ipc?term-length={TERM}"


def record(src: Harness, segments: int) -> tuple[int, int]:
    assert src.client is not None
    src.client.start_recording(CHANNEL, STREAM)
    publication = src.client.aeron.add_exclusive_publication(CHANNEL, STREAM)
    recording_id = src.await_signal(RecordingSignal.START).recording_id
    payload = b"t" * 1000
    while publication.position < segments * SEGMENT:
        offer_all(publication, [payload] * 16)
        time.sleep(0.001)
    stop = publication.position
    wait_for(lambda: src.client.get_recording_position(recording_id) == stop, 30, "recorded")
    src.client.stop_recording(CHANNEL, STREAM)
    src.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id, stop


def replicate_once(dst: Harness, src: Harness, src_id: int, copy: bool) -> tuple[float, int, int]:
    """(seconds from request to STOP, the conductor's max cycle ns meanwhile, the replica's samples)."""
    assert dst.client is not None
    conductor = dst.archive.conductor if dst.archive is not None else None
    assert conductor is not None
    if copy:
        conductor.__dict__.pop("keeps_time_index", None)
    else:
        conductor.keeps_time_index = lambda: False  # type: ignore[method-assign]
    stops = len(dst.signals.of(RecordingSignal.STOP))
    conductor.max_cycle_time_ns = 0
    started = time.perf_counter()
    dst.client.replicate(
        src_id, src.ctx.local_control_stream_id, src.ctx.local_control_channel,
        ReplicationParams(replication_channel="aeron:udp?endpoint=localhost:0"))
    event = dst.await_signal(RecordingSignal.STOP, count=stops + 1, timeout=120)
    elapsed = time.perf_counter() - started
    max_cycle = conductor.max_cycle_time_ns
    samples = len(read_time_index(dst.ctx.archive_dir, event.recording_id).positions)
    dst.client.purge_recording(event.recording_id)
    return elapsed, max_cycle, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--file-sync-level", type=int, default=0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-tix-copy-"))
    interval_ns = int(args.interval_ms * 1_000_000)
    driver = EmbeddedMediaDriver(str(base / "aeron"))
    src = dst = None
    try:
        common = {"segment_file_length": SEGMENT, "time_index_interval_ns": interval_ns}
        src = Harness(driver.aeron_dir, str(base / "src"), **common)
        dst = Harness(driver.aeron_dir, str(base / "dst"), replication_timeout_ns=10_000_000_000,
                      file_sync_level=args.file_sync_level, catalog_file_sync_level=args.file_sync_level, **common)
        src_id, stop = record(src, args.segments)
        source_samples = len(read_time_index(src.ctx.archive_dir, src_id).positions)
        results: dict[str, list[tuple[float, int, int]]] = {"copy": [], "own": []}
        for _ in range(args.rounds):
            for mode in ("own", "copy"):
                results[mode].append(replicate_once(dst, src, src_id, mode == "copy"))
        out: dict[str, object] = {
            "segments": -(-stop // SEGMENT), "stop": stop, "source_samples": source_samples, "rounds": args.rounds,
            "file_sync_level": args.file_sync_level,
        }
        for mode, runs in results.items():
            out[f"{mode}_seconds"] = round(statistics.median(r[0] for r in runs), 3)
            out[f"{mode}_max_cycle_ms"] = round(statistics.median(r[1] for r in runs) / 1e6, 2)
            out[f"{mode}_max_cycle_ms_all"] = [round(r[1] / 1e6, 2) for r in runs]
            out[f"{mode}_replica_samples"] = runs[-1][2]
        print(json.dumps(out))
    finally:
        for h in (dst, src):
            if h is not None:
                h.close()
        driver.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
