"""A Spark batch read over two archives holding copies of a recording (`controlChannels`) against the same read from
one archive (`controlChannel`), same run.

- Two archives, each `aeron-archive serve` in a process of its own with its own embedded media driver: the
  recording (`--mib` MiB of 1 KiB messages on 16 MiB terms) is made on the first and replicated into the second.
- Spark (`local[2]`) reads it through the archives, its executors' replays arriving over UDP on a third media driver
  (this process's), into the `noop` sink: `one` names the first archive, `two` both.
- One read of each first, not counted (warm-up); then rounds alternate; medians, MB/s of each and the ratio two / one.

On one host the archives share its cores with Spark, so a second archive adds no capacity; the figure shows what
spreading and the replicated planner cost or save here. On a cluster, each archive on a host of its own adds its
host's disk, cores and network.

Run: `bash ci/bench.sh replicas [--mib 256] [--rounds 5] [--max-bytes-per-partition 16m]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aeron_archive_spark.archive.client import AeronArchive, ReplicationParams
from aeron_archive_spark.archive.client.aeron_archive import RecordingSignalEvent
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from tests.benchmarks.bench_replication import record, start_source
from tests.system.harness import wait_for


def replicate(aeron_dir: str, src_channel: str, dst_channel: str, recording_id: int, stop: int) -> None:
    """The second archive replicates the recording from the first; returns once the replica stopped at `stop`."""
    events: list[RecordingSignalEvent] = []
    with AeronArchive.connect(aeron_dir, dst_channel, 10, "aeron:udp?endpoint=localhost:0",
                              recording_signal_consumer=events.append) as dst:
        replication_id = dst.replicate(recording_id, 10, src_channel, ReplicationParams())
        stopped = wait_for(lambda: next((e for e in events if e.correlation_id == replication_id
                                         and e.signal is RecordingSignal.STOP), None),
                           600, "the replica to stop", poll=dst.poll_for_recording_signals)
        assert dst.get_stop_position(stopped.recording_id) == stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-bytes-per-partition", default="16m")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    base = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    first, first_ready, first_channel = start_source(base / "a")
    second, _, second_channel = start_source(base / "b")
    driver = EmbeddedMediaDriver(str(base / "spark-driver"))
    spark = (SparkSession.builder.master("local[2]").appName("bench-replicas").config("spark.ui.enabled", "false")
             .getOrCreate())
    from aeron_archive_spark import connector

    connector.register(spark)
    try:
        recording_id, stop = record(str(first_ready["aeronDir"]), first_channel, args.mib)
        replicate(driver.aeron_dir, first_channel, second_channel, recording_id, stop)
        print(f"recording {recording_id}: {stop / 1e6:.0f} MB on both archives", flush=True)
        common = {"aeronDir": driver.aeron_dir, "recordingId": str(recording_id),
                  "replayChannel": "aeron:udp?endpoint=localhost:0",
                  "controlResponseChannel": "aeron:udp?endpoint=localhost:0",
                  "maxBytesPerPartition": args.max_bytes_per_partition}
        reads = {"one": {"controlChannel": first_channel, **common},
                 "two": {"controlChannels": f"{first_channel};{second_channel}", **common}}
        def read(name: str) -> float:
            started = time.perf_counter()
            spark.read.format("aeron-archive").options(**reads[name]).load().write.format("noop") \
                .mode("overwrite").save()
            return time.perf_counter() - started

        for name in reads:  # warm-up, not counted: Spark's first jobs, the workers' imports and connections
            read(name)
        times: dict[str, list[float]] = {name: [] for name in reads}
        for round_ in range(args.rounds):
            for name in ("one", "two") if round_ % 2 == 0 else ("two", "one"):
                elapsed = read(name)
                times[name].append(elapsed)
                print(f"round {round_ + 1} {name}: {stop / elapsed / 1e6:.0f} MB/s", flush=True)
        medians = {name: stop / statistics.median(t) / 1e6 for name, t in times.items()}
        print(f"one archive {medians['one']:.0f} MB/s, two {medians['two']:.0f} MB/s, "
              f"ratio two / one {medians['two'] / medians['one']:.2f}")
    finally:
        spark.stop()
        driver.close()
        for proc in (first, second):
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
