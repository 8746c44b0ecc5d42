"""Many small recordings read as one: `format("aeron-archive")` over N small recordings vs one of the same size.

One archive holds N small recordings (`--recordings`, `--rows-per` messages of `--payload` bytes each, all on one
channel + stream, selected by `channel`) and one recording of the same messages in total (its own stream). In the
same Spark session, alternated, `--repeat` times each:
- planning: `AeronArchiveBatchReader.partitions()` in this process (what Spark's driver-side Python worker runs),
  and the number of partitions it plans;
- total: `spark.read.format("aeron-archive")...write.format("noop")`, planning included;
for `archiveDir` (segment files) and the replay path (no `archiveDir`: bounded replays through the archive).
Printed: medians, and the ratio N small / one (the target is <= 2). Never timed assertions. Each timed run is also
charged the CPU seconds every process on the machine spent inside it (`/proc`, reaped children included), split
into this process (the archive and its media driver), Spark's JVM and its Python workers: on two shared cores the
total decides the time.

With `--time-index compare`, each path also reads the N small recordings with their time index files moved away
(`<path> many no-index`): the `timestamp` column is then null and no index is read or asked for, so `many /
many no-index` is what dating the rows of many small ranges costs (a `.tix` read each, or a TimeIndexRequest each
through the archive).

Run: `bash ci/bench.sh many_recordings [--recordings N] [--rows-per R] [--payload B] [--repeat K]
[--paths archiveDir,replay] [--open-cost BYTES] [--time-index compare]` (`--paths archiveDir`: only the segment-file path; `--open-cost`:
`openCostInBytes` for the read of the N small recordings, to weigh the packing's cost model).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from tests.system.harness import Harness, wait_for

TERM_LENGTH = 64 * 1024
MANY_STREAM = 3001
ONE_STREAM = 3002


CPU_GROUPS = ("archive", "jvm", "python workers", "other")


def cpu_by_group() -> Counter[str]:
    """CPU seconds so far of every process, by group (utime + stime, plus those of reaped children)."""
    ticks = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    out: Counter[str] = Counter()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:  # exited meanwhile
            continue
        program = cmdline.split(b"\0", 1)[0]
        if int(entry) == me:
            group = "archive"
        elif program.endswith(b"java"):
            group = "jvm"
        elif b"python" in program and b"pyspark" in cmdline:
            group = "python workers"
        else:
            group = "other"
        out[group] += sum(int(v) for v in fields[11:15]) / ticks
    return out


def record_many(h: Harness, count: int, rows: int, payload: bytes) -> str:
    """`count` recordings of `rows` messages each on one channel + stream (one exclusive publication each)."""
    channel = f"aeron:ipc?term-length={TERM_LENGTH}"
    stops = len(h.signals.of(RecordingSignal.STOP))
    h.client.start_recording(channel, MANY_STREAM, SourceLocation.LOCAL)
    for _ in range(count):
        starts = len(h.signals.of(RecordingSignal.START))
        publication = h.client.aeron.add_exclusive_publication(channel, MANY_STREAM)
        recording_id = h.await_signal(RecordingSignal.START, count=starts + 1).recording_id
        for _ in range(rows):
            while publication.offer(payload) <= 0:
                time.sleep(0.00001)
        target = publication.position
        wait_for(lambda rid=recording_id, t=target: h.client.get_recording_position(rid) >= t, what="recorded")
        publication.close()
    h.await_signal(RecordingSignal.STOP, count=stops + count, timeout=120)
    h.client.stop_recording(channel, MANY_STREAM)
    return channel


def record_one(h: Harness, rows: int, payload: bytes) -> int:
    channel = f"aeron:ipc?term-length={TERM_LENGTH}"
    starts = len(h.signals.of(RecordingSignal.START))
    h.client.start_recording(channel, ONE_STREAM, SourceLocation.LOCAL)
    publication = h.client.aeron.add_exclusive_publication(channel, ONE_STREAM)
    recording_id = h.await_signal(RecordingSignal.START, count=starts + 1).recording_id
    for _ in range(rows):
        while publication.offer(payload) <= 0:
            time.sleep(0.00001)
    target = publication.position
    wait_for(lambda: h.client.get_recording_position(recording_id) >= target, timeout=120, what="recorded")
    h.client.stop_recording(channel, ONE_STREAM)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id


def plan(options: dict[str, str]) -> tuple[float, int]:
    """Seconds to plan in this process, and the number of partitions."""
    from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader
    from aeron_archive_spark.connector.source.schema import FIXED_FIELDS

    reader = AeronArchiveBatchReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
    started = time.perf_counter()
    partitions = reader.partitions()
    return time.perf_counter() - started, len(partitions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recordings", type=int, default=1000)
    parser.add_argument("--rows-per", type=int, default=4)
    parser.add_argument("--payload", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--paths", default="archiveDir,replay",
                        help="comma-separated read paths to time: archiveDir, replay (default: both)")
    parser.add_argument("--replay-channel", default=None,
                        help="replayChannel of the replay path (default: the connector's, aeron:ipc here: the "
                             "archive is reached over IPC)")
    parser.add_argument("--driver-dir", default=None,
                        help="media driver directory parent (default: the embedded default, /dev/shm if roomy)")
    parser.add_argument("--open-cost", default=None,
                        help="openCostInBytes for the read of the N small recordings (default: the path's default)")
    parser.add_argument("--time-index", choices=["on", "compare"], default="on",
                        help="also read the small recordings with their time index files moved away")
    args = parser.parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = set(paths) - {"archiveDir", "replay"}
    if unknown or not paths:
        parser.error(f"--paths: expected archiveDir and/or replay, got {args.paths!r}")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aeron_archive_spark import connector

    spark = (SparkSession.builder.master("local[2]").appName("bench-many-recordings")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    connector.register(spark)

    root = tempfile.mkdtemp(prefix="bench-many-recordings-")
    # The driver where `serve`'s embedded driver goes (a memory filesystem when roomy): every replay creates a
    # publication's log buffer there, and on a disk each creation costs a file's writes (run B of the docs).
    driver = EmbeddedMediaDriver(os.path.join(args.driver_dir, f"bench-many-{os.getpid()}") if args.driver_dir else None)
    h = Harness(driver.aeron_dir, os.path.join(root, "archive"), segment_file_length=TERM_LENGTH * 4)
    payload = bytes(range(256)) * (args.payload // 256) + bytes(args.payload % 256)
    total_rows = args.recordings * args.rows_per
    results: dict[str, dict[str, list[float]]] = {}
    partitions: dict[str, int] = {}
    try:
        started = time.perf_counter()
        channel = record_many(h, args.recordings, args.rows_per, payload)
        one = record_one(h, total_rows, payload)
        print(f"recorded {args.recordings} x {args.rows_per} + 1 x {total_rows} messages of {args.payload} B "
              f"in {time.perf_counter() - started:.1f}s")
        disk = {"archiveDir": h.ctx.archive_dir}
        remote = {"aeronDir": h.aeron_dir, "controlChannel": h.ctx.local_control_channel,
                  "controlStreamId": str(h.ctx.local_control_stream_id), "controlResponseChannel": "aeron:ipc"}
        if args.replay_channel:
            remote["replayChannel"] = args.replay_channel
        many = {"channel": channel, "streamId": str(MANY_STREAM)}
        if args.open_cost is not None:
            many["openCostInBytes"] = args.open_cost
        single = {"recordingId": str(one)}
        cases: dict[str, dict[str, str]] = {}
        for path, location in (("archiveDir", disk), ("replay", remote)):
            if path not in paths:
                continue
            cases[f"{path} many"] = {**location, **many}
            cases[f"{path} one"] = {**location, **single}
            if args.time_index == "compare":
                cases[f"{path} many no-index"] = {**location, **many}

        hidden = os.path.join(root, "hidden-time-index")
        os.makedirs(hidden)

        def time_index(present: bool) -> None:
            """Move the archive's .tix files away (or back): the reads then find no index."""
            source, target = (hidden, h.ctx.archive_dir) if present else (h.ctx.archive_dir, hidden)
            for name in os.listdir(source):
                if name.endswith(".tix"):
                    os.replace(os.path.join(source, name), os.path.join(target, name))

        def total(options: dict[str, str]) -> Callable[[], None]:
            def run() -> None:
                df = spark.read.format("aeron-archive").options(**options).load()
                df.write.format("noop").mode("overwrite").save()
            return run

        for name, options in cases.items():  # warm up (Python workers, pooled sessions); check the row count
            time_index(present="no-index" not in name)
            got = spark.read.format("aeron-archive").options(**options).load().count()
            assert got == total_rows, f"{name}: {got} rows, expected {total_rows}"
        for _ in range(args.repeat):
            for name, options in cases.items():
                time_index(present="no-index" not in name)
                figures = results.setdefault(name, {"plan": [], "total": []})
                seconds, partitions[name] = plan(options)
                figures["plan"].append(seconds)
                cpu_before = cpu_by_group()
                began = time.perf_counter()
                total(options)()
                figures["total"].append(time.perf_counter() - began)
                cpu_after = cpu_by_group()
                for group in CPU_GROUPS:
                    figures.setdefault(f"cpu {group}", []).append(cpu_after[group] - cpu_before[group])
    finally:
        h.close()
        driver.close()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{args.recordings} recordings x {args.rows_per} rows vs 1 recording x {total_rows} rows "
          f"({args.payload} B payloads), medians of {args.repeat} alternated runs")
    print(f"{'case':<18} {'partitions':>10} {'plan s':>9} {'total s':>9}")
    med: dict[str, dict[str, float]] = {}
    for name, figures in results.items():
        med[name] = {k: statistics.median(v) for k, v in figures.items()}
        print(f"{name:<18} {partitions[name]:>10} {med[name]['plan']:>9.3f} {med[name]['total']:>9.3f}   "
              f"(total of each run: {', '.join(f'{t:.3f}' for t in figures['total'])})")
    print(f"\nCPU s per run (medians): {', '.join(CPU_GROUPS)}, total")
    for name in results:
        cpu = [med[name][f"cpu {group}"] for group in CPU_GROUPS]
        print(f"{name:<18} " + " ".join(f"{v:>8.3f}" for v in cpu) + f" {sum(cpu):>8.3f}")
    for path in paths:
        ratio = med[f"{path} many"]["total"] / med[f"{path} one"]["total"]
        print(f"{path}: {args.recordings} small / one, total time: {ratio:.2f}x")
        if args.time_index == "compare":
            dated = med[f"{path} many"]["total"] / med[f"{path} many no-index"]["total"]
            print(f"{path}: {args.recordings} small, time index / none, total time: {dated:.3f}x")


if __name__ == "__main__":
    main()
