"""Live-tail latency of `readStream.format("aeron-archive")` beside a trivial in-memory Python streaming source.

A publisher thread offers 64-byte messages at `--rate` msg/s (default 1,000) to one recording for the whole run;
each payload carries its publish time (`time.time_ns()`, little-endian int64, first 8 bytes) and is also appended to
a plain file of 64-byte records. Phases, alternated in rounds within one Spark session (`local[2]`), each run a
fresh query with the default trigger into `foreachBatch` for `--seconds` (after an uncounted first run of every
source, `--prime` seconds, which starts the Python workers and warms up the JVM):

- `floor`: a trivial Python streaming source (`latestOffset` = records in the file, `read` = those records as one
  Arrow batch of the aeron-archive schema, no decoding): the least a Python source costs per micro-batch here;
- `archiveDir`: the segment files;
- `replay`: the running archive, no `archiveDir` (planning through the control session, bounded replays).

The batch function collects the batch's `value` column, so the read is inside it, as in any real sink. Figures per
source, over the batches after `--warmup` seconds: median batch duration (`durationMs.triggerExecution` of Spark's
progress reports) and the medians of every other `durationMs` part (`addBatch`, `latestOffset`, ...), rows per batch,
and publish-to-batch latency p50/p99: from the publish time to when the batch's rows are in the batch function's
hands (and to when the function was entered). Ratios are to the floor of the same run.

A micro-batch's duration feeds back into the next one's size (rows = rate x duration), so a fixed cost per batch
shows up amplified when a per-row cost is not negligible, and the figures swing with the machine's load: compare
sources within a run, over several rounds.

`--stopped-recordings N` first records N small stopped recordings on the live recording's channel and stream, and
the archive sources then select by `channel` + `streamId` (starting at `latest`) instead of by `recordingId`: what
a live tail costs when its channel has a history of many recordings (every trigger has to account for them).

Run: `python -m tests.benchmarks.bench_live_tail [--quick] [--rounds R] [--seconds S] [--rate N] [--sources ...]
[--stopped-recordings N]` (`BENCH_LIVE_TAIL_TRACE=1` prints every progress report).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from tests.benchmarks.archive_driver import add_driver_argument, archive_driver
from tests.system.harness import Harness, wait_for

PAYLOAD = 64
TERM_LENGTH = 1024 * 1024
SEGMENT_LENGTH = 128 * 1024 * 1024
STREAM_ID = 3001
SCHEMA = "recordingId long, position long, sessionId int, streamId int, reservedValue long, value binary"
_ARROW_SCHEMA = pa.schema(
    [
        ("recordingId", pa.int64()),
        ("position", pa.int64()),
        ("sessionId", pa.int32()),
        ("streamId", pa.int32()),
        ("reservedValue", pa.int64()),
        ("value", pa.binary()),
    ]
)
_STAMP = struct.Struct("<q")


# ---------------------------------------------------------------------------------------------------------------
# the floor: a trivial streaming source over the publisher's file of payloads


@dataclass
class _Records(InputPartition):
    path: str
    first: int
    end: int


class _FloorStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]

    def _count(self) -> int:
        return os.path.getsize(self.path) // PAYLOAD

    def initialOffset(self) -> dict[str, int]:
        return {"n": self._count()}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        return {"n": self._count()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [_Records(self.path, start["n"], end["n"])] if end["n"] > start["n"] else []

    def read(self, partition: _Records) -> Iterator[pa.RecordBatch]:
        n = partition.end - partition.first
        with open(partition.path, "rb") as f:
            f.seek(partition.first * PAYLOAD)
            data = f.read(n * PAYLOAD)
        positions = pa.array(range(partition.first, partition.end), pa.int64())
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(struct.pack(f"<{n + 1}i", *range(0, (n + 1) * PAYLOAD, PAYLOAD))),
                             pa.py_buffer(data)]
        )
        yield pa.RecordBatch.from_arrays(
            [pa.array([0] * n, pa.int64()), positions, pa.array([0] * n, pa.int32()), pa.array([0] * n, pa.int32()),
             pa.array([0] * n, pa.int64()), values],
            schema=_ARROW_SCHEMA,
        )

    def commit(self, end: dict[str, int]) -> None:
        pass


class FloorDataSource(DataSource):
    """The publisher's payloads, appended to a file, as a streaming source of the aeron-archive schema."""

    @classmethod
    def name(cls) -> str:
        return "live-floor"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _FloorStreamReader(dict(self.options))


# ---------------------------------------------------------------------------------------------------------------


class Publisher(threading.Thread):
    """Offers a timestamped payload every 1/rate s to the recorded publication and appends it to `path`."""

    def __init__(self, publication: Any, path: str, rate: int) -> None:
        super().__init__(name="live-publisher", daemon=True)
        self.publication = publication
        self.path = path
        self.interval = 1.0 / rate
        self.stop_event = threading.Event()
        self.sent = 0
        self.late = 0

    def run(self) -> None:
        filler = bytes(range(PAYLOAD - 8))
        with open(self.path, "ab", buffering=0) as out:
            next_at = time.monotonic()
            while not self.stop_event.is_set():
                now = time.monotonic()
                if now < next_at:
                    time.sleep(next_at - now)
                elif now - next_at > 0.01:
                    self.late += 1
                payload = _STAMP.pack(time.time_ns()) + filler
                while self.publication.offer(payload) <= 0:
                    time.sleep(0.00005)
                out.write(payload)
                self.sent += 1
                next_at += self.interval


@dataclass
class Phase:
    source: str
    batches: list[dict[str, Any]] = field(default_factory=list)  # progress of the batches after the warm-up
    latency_rows_ms: list[float] = field(default_factory=list)  # publish -> rows in the batch function
    latency_entry_ms: list[float] = field(default_factory=list)  # publish -> batch function entered
    load: str = ""


def record_stopped(h: Harness, channel: str, count: int) -> None:
    """`count` stopped recordings of 4 messages each on `channel` + STREAM_ID (already being recorded)."""
    for _ in range(count):
        starts = len(h.signals.of(RecordingSignal.START))
        publication = h.client.aeron.add_exclusive_publication(channel, STREAM_ID)
        recording_id = h.await_signal(RecordingSignal.START, count=starts + 1).recording_id
        for _ in range(4):
            while publication.offer(bytes(PAYLOAD)) <= 0:
                time.sleep(0.00001)
        target = publication.position
        wait_for(lambda rid=recording_id, t=target: h.client.get_recording_position(rid) >= t, what="recorded")
        publication.close()
        h.await_signal(RecordingSignal.STOP, recording_id, timeout=30)


def run_phase(spark: Any, source: str, fmt: str, options: dict[str, str], seconds: float, warmup: float,
              checkpoint_root: str) -> Phase:
    phase = Phase(source)
    started = time.time_ns()
    counted_from = started + int(warmup * 1e9)
    counted: set[int] = set()

    def on_batch(df: Any, batch_id: int) -> None:
        entered = time.time_ns()
        rows = df.select("value").collect()
        got = time.time_ns()
        if entered < counted_from or not rows:
            return
        counted.add(batch_id)
        for row in rows:
            published = _STAMP.unpack_from(row.value, 0)[0]
            phase.latency_rows_ms.append((got - published) / 1e6)
            phase.latency_entry_ms.append((entered - published) / 1e6)

    query = (spark.readStream.format(fmt).options(**options).load().writeStream.foreachBatch(on_batch)
             .option("checkpointLocation", tempfile.mkdtemp(prefix="checkpoint-", dir=checkpoint_root)).start())
    try:
        deadline = time.monotonic() + warmup + seconds
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"{source}: query failed: {query.exception()}")
            time.sleep(0.2)
    finally:
        query.stop()
    phase.batches = [p for p in query.recentProgress if p.get("batchId") in counted and p["numInputRows"] > 0]
    if os.environ.get("BENCH_LIVE_TAIL_TRACE"):
        for p in query.recentProgress:
            print(source, p.get("batchId"), p["numInputRows"], p["durationMs"], flush=True)
    phase.load = _load()
    return phase


def _load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class Summary:
    batches: int
    rows_per_batch: float
    durations: dict[str, float]
    p50: float
    p99: float
    entry_p50: float
    entry_p99: float


def summarize(phases: list[Phase]) -> Summary:
    batches = [b for p in phases for b in p.batches]
    keys = sorted({k for b in batches for k in b["durationMs"]})
    durations = {k: _median([b["durationMs"].get(k, 0) for b in batches]) for k in keys}
    rows = [p for phase in phases for p in phase.latency_rows_ms]
    entry = [p for phase in phases for p in phase.latency_entry_ms]
    return Summary(len(batches), _median([b["numInputRows"] for b in batches]), durations,
                   _pct(rows, 0.5), _pct(rows, 0.99), _pct(entry, 0.5), _pct(entry, 0.99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round of 12 s per source, 6 s priming (< 3 min)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds of each phase left out")
    parser.add_argument("--prime", type=float, default=8.0, help="seconds of an uncounted first run per source")
    parser.add_argument("--rate", type=int, default=1000, help="messages per second")
    parser.add_argument("--sources", default="floor,archiveDir,replay")
    parser.add_argument("--stopped-recordings", type=int, default=0,
                        help="small stopped recordings on the live channel + stream first; select by channel")
    add_driver_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.prime = 1, 12.0, 3.0, 6.0

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aeron_archive_spark import connector

    spark = (SparkSession.builder.master("local[2]").appName("bench-live-tail")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    connector.register(spark)
    spark.dataSource.register(FloorDataSource)

    root = tempfile.mkdtemp(prefix="bench-live-tail-")
    driver = archive_driver(args.driver, root)
    h = Harness(driver.aeron_dir, os.path.join(root, "archive"), segment_file_length=SEGMENT_LENGTH)
    channel = f"aeron:ipc?term-length={TERM_LENGTH}"
    records = os.path.join(root, "payloads.bin")
    open(records, "wb").close()
    publisher: Publisher | None = None
    phases: dict[str, list[Phase]] = {}
    try:
        h.client.start_recording(channel, STREAM_ID, SourceLocation.LOCAL)
        record_stopped(h, channel, args.stopped_recordings)
        starts = len(h.signals.of(RecordingSignal.START))
        publication = h.client.aeron.add_exclusive_publication(channel, STREAM_ID)
        recording_id = h.await_signal(RecordingSignal.START, count=starts + 1).recording_id
        publisher = Publisher(publication, records, args.rate)
        publisher.start()
        wait_for(lambda: publisher is not None and publisher.sent > 10, timeout=10, what="publishing")
        options = {
            "floor": ("live-floor", {"path": records}),
            "archiveDir": ("aeron-archive", {"archiveDir": h.ctx.archive_dir, "recordingId": str(recording_id),
                                             "startingPosition": "latest"}),
            "replay": ("aeron-archive", {"aeronDir": h.aeron_dir, "controlChannel": h.ctx.local_control_channel,
                                         "controlStreamId": str(h.ctx.local_control_stream_id),
                                         "controlResponseChannel": "aeron:ipc", "replayChannel": "aeron:ipc",
                                         "recordingId": str(recording_id), "startingPosition": "latest"}),
        }
        if args.stopped_recordings:
            for _, opts in (options["archiveDir"], options["replay"]):
                del opts["recordingId"]
                opts.update({"channel": channel, "streamId": str(STREAM_ID)})
            print(f"{args.stopped_recordings} stopped recordings on the channel; the archive sources select by "
                  "channel + streamId", flush=True)
        sources = [s for s in args.sources.split(",") if s]
        print(f"{_load()}; {args.rounds} round(s) of {args.seconds:.0f} s (+{args.warmup:.0f} s warm-up) per source, "
              f"{args.rate} msg/s of {PAYLOAD} B", flush=True)
        for source in sources:  # warm up the JVM and the Python workers of every source: not counted
            run_phase(spark, source, *options[source], args.prime, 0.0, root)
        for round_index in range(args.rounds):
            order = sources if round_index % 2 == 0 else sources[::-1]
            for source in order:
                fmt, opts = options[source]
                phase = run_phase(spark, source, fmt, opts, args.seconds, args.warmup, root)
                phases.setdefault(source, []).append(phase)
                s = summarize([phase])
                print(f"round {round_index + 1} {source:<10} {s.batches:4d} batches, "
                      f"{s.rows_per_batch:6.0f} rows/batch, batch {s.durations.get('triggerExecution', 0):6.0f} ms, "
                      f"addBatch {s.durations.get('addBatch', 0):6.0f} ms, latency p50 {s.p50:6.0f} ms "
                      f"p99 {s.p99:6.0f} ms ({phase.load})", flush=True)
    finally:
        if publisher is not None:
            publisher.stop_event.set()
            publisher.join(5)
        spark.stop()
        h.close()
        driver.close()
        shutil.rmtree(root, ignore_errors=True)

    if publisher is not None and publisher.late:
        print(f"publisher fell > 10 ms behind its schedule {publisher.late} times")
    summaries = {source: summarize(runs) for source, runs in phases.items()}
    floor = summaries.get("floor")
    parts = sorted({k for s in summaries.values() for k in s.durations} - {"triggerExecution", "addBatch"})
    print(f"\n{'source':<11} {'batches':>7} {'rows/b':>6} {'batch ms':>8} {'addBatch':>8} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'entry p50':>9} {'entry p99':>9}  "
          f"{'batch/floor':>11} {'p50/floor':>9} {'p99/floor':>9}")
    for source, s in summaries.items():
        ratios = ""
        if floor is not None:
            ratios = (f"{s.durations.get('triggerExecution', 0) / floor.durations.get('triggerExecution', 1):>11.2f} "
                      f"{s.p50 / floor.p50:>9.2f} {s.p99 / floor.p99:>9.2f}")
        print(f"{source:<11} {s.batches:>7} {s.rows_per_batch:>6.0f} {s.durations.get('triggerExecution', 0):>8.0f} "
              f"{s.durations.get('addBatch', 0):>8.0f} {s.p50:>7.0f} {s.p99:>7.0f} {s.entry_p50:>9.0f} "
              f"{s.entry_p99:>9.0f}  {ratios}")
    print("\nmedian durationMs parts (ms): " + ", ".join(parts))
    for source, s in summaries.items():
        print(f"{source:<11} " + " ".join(f"{k}={s.durations.get(k, 0):.0f}" for k in parts))


if __name__ == "__main__":
    main()
