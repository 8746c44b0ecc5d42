"""Throughput of `format("aeron-archive")` reads beside the ceiling of PySpark's Python data source API.

For 64 B and 1 KiB messages, one recording is made, then measured in the same Spark session:
- `read`: `spark.read.format("aeron-archive")...write.format("noop")` (all partitions);
- `stream`: `readStream` with `Trigger.AvailableNow` into the `noop` sink;
each through `archiveDir` (segment files) and through the replay path (`ReplayChunkSource`, when importable), and
beside a trivial in-memory Python data source that yields the very same Arrow batches from a memory-mapped Arrow
IPC file (no decoding at all): the most any Python source can do on this machine. Figures are rows/s and MB/s of
payload, plus the ratio to that ceiling.

Run: `python -m tests.benchmarks.bench_spark_source [--rows-64 N] [--rows-1k N] [--repeat R] [--sizes 64,1024]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from tests.benchmarks.archive_driver import add_driver_argument, archive_driver
from tests.system.harness import Harness, wait_for

TERM_LENGTH = 16 * 1024 * 1024
SEGMENT_LENGTH = 128 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------------------
# the ceiling: an in-memory source replaying pre-built Arrow batches


@dataclass
class _Slice(InputPartition):
    path: str
    first: int
    count: int


def _batches(path: str, first: int, count: int) -> Iterator[pa.RecordBatch]:
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(first, first + count):
            yield reader.get_batch(i)


class _CeilingReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.slices = [tuple(map(int, s.split(":"))) for s in options["slices"].split(",")]

    def partitions(self) -> list[InputPartition]:
        return [_Slice(self.path, first, count) for first, count in self.slices]

    def read(self, partition: _Slice) -> Iterator[pa.RecordBatch]:
        return _batches(partition.path, partition.first, partition.count)


class _CeilingStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.batch = _CeilingReader(options)

    def initialOffset(self) -> dict[str, int]:
        return {"done": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"done": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return self.batch.partitions() if end["done"] > start["done"] else []

    def read(self, partition: _Slice) -> Iterator[pa.RecordBatch]:
        return _batches(partition.path, partition.first, partition.count)


class CeilingDataSource(DataSource):
    """Yields stored Arrow batches of the aeron-archive schema: the Python data source API's ceiling."""

    @classmethod
    def name(cls) -> str:
        return "arrow-ceiling"

    def schema(self) -> str:
        return ("recordingId long, position long, sessionId int, streamId int, reservedValue long, "
                "value binary")

    def reader(self, schema: Any) -> DataSourceReader:
        return _CeilingReader(dict(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _CeilingStreamReader(dict(self.options))


# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Figure:
    seconds: float
    rows: int
    payload_bytes: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6


def record(h: Harness, payload_size: int, rows: int) -> int:
    channel = f"aeron:ipc?term-length={TERM_LENGTH}"
    stream_id = 2000 + payload_size
    starts = len(h.signals.of(RecordingSignal.START))
    h.client.start_recording(channel, stream_id, SourceLocation.LOCAL)
    publication = h.client.aeron.add_exclusive_publication(channel, stream_id)
    recording_id = h.await_signal(RecordingSignal.START, count=starts + 1).recording_id
    payload = bytes(range(256)) * (payload_size // 256) + bytes(payload_size % 256)
    offer = publication.offer
    for _ in range(rows):
        while offer(payload) <= 0:
            time.sleep(0.00001)
    target = publication.position
    wait_for(lambda: h.client.get_recording_position(recording_id) >= target, timeout=120, what="recorded")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id


def build_ceiling_file(options: dict[str, str], path: str) -> str:
    """Our own batches for every partition, written as Arrow IPC; returns the `slices` option."""
    from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader
    from aeron_archive_spark.connector.source.schema import FIXED_FIELDS

    reader = AeronArchiveBatchReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
    slices = []
    written = 0
    with pa.OSFile(path, "wb") as sink:
        writer = None
        for partition in reader.partitions():
            count = 0
            for batch in reader.read(partition):
                if writer is None:
                    writer = pa.ipc.new_file(sink, batch.schema)
                writer.write_batch(batch)
                count += 1
            slices.append(f"{written}:{count}")
            written += count
        assert writer is not None
        writer.close()
    return ",".join(slices)


def decode_only(options: dict[str, str], repeat: int) -> float:
    """Best time of `read()` over all partitions in this process (no Spark): the decoder's own cost."""
    from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader
    from aeron_archive_spark.connector.source.schema import FIXED_FIELDS

    reader = AeronArchiveBatchReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
    partitions = reader.partitions()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for partition in partitions:
            for _batch in reader.read(partition):
                pass
        best = min(best, time.perf_counter() - started)
    return best


def runners(spark: Any, fmt: str, options: dict[str, str], rows: int, checkpoint_root: str
            ) -> tuple[Callable[[], None], Callable[[], None]]:
    """(batch read, AvailableNow stream), both into the `noop` sink."""

    def batch_read() -> None:
        spark.read.format(fmt).options(**options).load().write.format("noop").mode("overwrite").save()

    def stream_read() -> None:
        query = (spark.readStream.format(fmt).options(**options).load().writeStream.format("noop")
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="checkpoint-", dir=checkpoint_root))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        got = sum(p["numInputRows"] for p in query.recentProgress)
        assert got == rows, f"{fmt}: streamed {got} rows, expected {rows}"

    return batch_read, stream_read


def measure(cases: dict[str, tuple[Callable[[], None], Callable[[], None]]], repeat: int
            ) -> dict[str, list[float]]:
    """Best time per case and mode; runs are interleaved so that load changes on the machine hit every case."""
    for read, _ in cases.values():
        read()  # warm up Python workers
    best: dict[str, list[float]] = {name: [float("inf"), float("inf")] for name in cases}
    for _ in range(repeat):
        for mode in (0, 1):
            for name, pair in cases.items():
                started = time.perf_counter()
                pair[mode]()
                best[name][mode] = min(best[name][mode], time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows-64", type=int, default=3_000_000)
    parser.add_argument("--rows-1k", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="64,1024", help="message sizes to measure, of 64 and 1024")
    parser.add_argument("--max-bytes-per-partition", default=None,
                        help="the maxBytesPerPartition option of both reads (default: the connector's)")
    add_driver_argument(parser)
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aeron_archive_spark import connector

    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-source")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    connector.register(spark)
    spark.dataSource.register(CeilingDataSource)

    try:
        import aeron_archive_spark.archive.tables.replay_chunks as replay_fetch
        replay_available = hasattr(replay_fetch, "ReplayChunkSource")
    except ImportError:
        replay_available = False

    root = tempfile.mkdtemp(prefix="bench-spark-source-")
    driver = archive_driver(args.driver, root)
    h = Harness(driver.aeron_dir, os.path.join(root, "archive"), segment_file_length=SEGMENT_LENGTH)
    results = []
    decode_figures: list[tuple[int, Figure]] = []
    try:
        sizes = {int(size) for size in args.sizes.split(",")}
        for payload, rows in ((64, args.rows_64), (1024, args.rows_1k)):
            if payload not in sizes:
                continue
            recording_id = record(h, payload, rows)
            disk = {"archiveDir": h.ctx.archive_dir, "recordingId": str(recording_id)}
            remote = {"aeronDir": h.aeron_dir, "controlChannel": h.ctx.local_control_channel,
                      "controlStreamId": str(h.ctx.local_control_stream_id), "controlResponseChannel": "aeron:ipc",
                      "replayChannel": "aeron:ipc", "recordingId": str(recording_id)}
            if args.max_bytes_per_partition:
                disk["maxBytesPerPartition"] = remote["maxBytesPerPartition"] = args.max_bytes_per_partition
            ipc = os.path.join(root, f"ceiling-{payload}.arrow")
            ceiling_options = {"path": ipc, "slices": build_ceiling_file(disk, ipc)}
            cases = {
                "ceiling (in-memory Arrow)": runners(spark, "arrow-ceiling", ceiling_options, rows, root),
                "aeron-archive archiveDir": runners(spark, "aeron-archive", disk, rows, root),
            }
            if replay_available:
                cases["aeron-archive replay"] = runners(spark, "aeron-archive", remote, rows, root)
            decode_s = decode_only(disk, args.repeat)
            times = measure(cases, args.repeat)
            for name, (read_s, stream_s) in times.items():
                results.append((payload, name, (Figure(read_s, rows, rows * payload),
                                                Figure(stream_s, rows, rows * payload))))
            if not replay_available:
                results.append((payload, "aeron-archive replay: not available", None))
            decode_figures.append((payload, Figure(decode_s, rows, rows * payload)))
            os.remove(ipc)
    finally:
        h.close()
        driver.close()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    print()
    for payload, figure in decode_figures:
        print(f"{payload:>5}B decode only (archiveDir read(), one core, no Spark): {figure.rows_per_s:,.0f} rows/s "
              f"{figure.mb_per_s:.1f} MB/s")
    print(f"\n{'msg':>6} {'source':<30} {'mode':<7} {'rows/s':>12} {'MB/s':>9} {'vs ceiling':>10}")
    ceilings = {payload: figures for payload, name, figures in results if name.startswith("ceiling")}
    for payload, name, figures in results:
        if figures is None:
            print(f"{payload:>5}B {name}")
            continue
        for mode, figure, reference in (("read", figures[0], ceilings[payload][0]),
                                        ("stream", figures[1], ceilings[payload][1])):
            ratio = figure.rows_per_s / reference.rows_per_s
            print(f"{payload:>5}B {name:<30} {mode:<7} {figure.rows_per_s:>12,.0f} {figure.mb_per_s:>9.1f} "
                  f"{ratio:>10.2f}")


if __name__ == "__main__":
    main()
