"""Throughput of the aeron-archive Spark sink beside a no-op Python Arrow sink (the API's ceiling), same run.

Both queries read the same in-memory Python streaming source (zero-copy Arrow batches of fixed-size values,
`availableNow`, fixed rows per micro-batch) and differ only in the sink: `bench-noop` is a
`DataSourceStreamArrowWriter` whose `write` only counts rows, `aeron-archive` serializes every partition as Arrow
IPC (LZ4-compressed buffers) into its commit message and the driver publishes it into a real archive recording on
commit, exactly once (its
state: a sink log recording in the same archive, found by each query's checkpointLocation). Figures are rows/s and MB/s of value
bytes over the wall time from `start()` to the end of the query; the ratio is aeron-archive / no-op.

The archive and its media driver run in this process, so they share the machine's cores with Spark's JVM and
Python workers, as they would on a single host. Aeron clients created here (the archive's) use a 1 ms conductor
idle sleep, the usual low-latency setting; the sink sets the same for its own client.

Values are a fixed pattern (compresses ~20x), or incompressible bytes with `--random-values`.

Run: `python -m tests.benchmarks.bench_spark_sink [--rows-64 N] [--rows-1k N] [--reps N] [--random-values]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow  # noqa: E402

from tests.benchmarks.archive_driver import add_driver_argument, archive_driver  # noqa: E402


# -- the source: rowsPerBatch fixed-size values per micro-batch, zero-copy slices of one buffer -----------------

@dataclass
class RangePartition(InputPartition):
    start: int
    stop: int


class BenchReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Any) -> None:
        self.total = int(options["totalRows"])
        self.batch_rows = int(options["batchRows"])
        self.value_size = int(options["valueSize"])
        self.partitions_per_batch = int(options.get("partitions", "2"))
        self.random_values = options.get("valueKind", "pattern") == "random"

    def initialOffset(self) -> dict:
        return {"row": 0}

    def getDefaultReadLimit(self) -> ReadMaxRows:
        return ReadMaxRows(self.batch_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: Any) -> dict:
        step = self.total if isinstance(limit, ReadAllAvailable) else limit.max_rows
        return {"row": min(start["row"] + step, self.total)}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        lo, hi = start["row"], end["row"]
        n = self.partitions_per_batch
        cuts = [lo + (hi - lo) * i // n for i in range(n + 1)]
        return [RangePartition(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        import numpy as np
        chunk = 8192
        size = self.value_size
        if self.random_values:  # incompressible (what compressing the commit messages cannot shrink)
            data = pa.py_buffer(np.random.default_rng(partition.start).integers(0, 256, chunk * size, np.uint8))
        else:  # a fixed pattern, which compresses ~20x
            data = pa.py_buffer((np.arange(chunk * size, dtype=np.uint32) * 2654435761 >> 24).astype(np.uint8))
        offsets = pa.py_buffer(np.arange(0, (chunk + 1) * size, size, dtype=np.int32))
        schema = pa.schema([("value", pa.binary())])
        for row in range(partition.start, partition.stop, chunk):
            n = min(chunk, partition.stop - row)
            values = pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])
            yield pa.RecordBatch.from_arrays([values], schema=schema)

    def commit(self, end: dict) -> None:
        pass


class BenchSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-values"

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: Any) -> BenchReader:
        return BenchReader(self.options)


# -- the ceiling: a Python Arrow sink that does nothing but count ------------------------------------------------

@dataclass
class Counted(WriterCommitMessage):
    rows: int


class NoopWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Counted:
        return Counted(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: list, batchId: int) -> None:
        pass

    def abort(self, messages: list, batchId: int) -> None:
        pass


class NoopSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-noop"

    def streamWriter(self, schema: Any, overwrite: bool) -> NoopWriter:
        return NoopWriter()


# -- running -----------------------------------------------------------------------------------------------------

@dataclass
class Run:
    sink: str
    value_size: int
    rows: int
    seconds: float
    trigger_seconds: float
    batches: int

    @property
    def rows_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_s(self) -> float:
        return self.rows * self.value_size / self.seconds / 1e6


def run_query(spark: Any, sink: str, sink_options: dict[str, str], value_size: int, rows: int, batch_rows: int,
              work: str, value_kind: str = "pattern") -> Run:
    checkpoint = tempfile.mkdtemp(dir=work, prefix=f"chk-{sink}-")
    frame = (spark.readStream.format("bench-values").option("totalRows", rows).option("batchRows", batch_rows)
             .option("valueSize", value_size).option("valueKind", value_kind).load())
    writer = frame.writeStream.format(sink).option("checkpointLocation", checkpoint)
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"{sink} query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    done = sum(p["numInputRows"] for p in progress)
    if done != rows:
        raise RuntimeError(f"{sink} query processed {done} rows, expected {rows}")
    trigger = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return Run(sink, value_size, rows, seconds, trigger, len(progress))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-64", type=int, default=4_000_000, help="rows per run with 64-byte values")
    parser.add_argument("--rows-1k", type=int, default=1_000_000, help="rows per run with 1 KiB values")
    parser.add_argument("--batch-rows-64", type=int, default=500_000, help="rows per micro-batch, 64-byte values")
    parser.add_argument("--batch-rows-1k", type=int, default=200_000, help="rows per micro-batch, 1 KiB values")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--term-length", default="16m", help="term length of the recording's channel")
    parser.add_argument("--work-dir", default=None, help="where the archive and the checkpoints go")
    parser.add_argument("--random-values", action="store_true",
                        help="incompressible values (default: a fixed pattern, which the sink's LZ4-compressed "
                        "commit messages shrink ~20x)")
    add_driver_argument(parser)
    args = parser.parse_args(argv)
    kind = "random" if args.random_values else "pattern"

    os.environ.setdefault("AERON_CLIENT_IDLE_SLEEP_DURATION", "1ms")
    from pyspark.sql import SparkSession

    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext
    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.archive.client.pool import connection_pool
    from aeron_archive_spark.connector.sink import read_batch_map

    work = tempfile.mkdtemp(prefix="bench-spark-sink-", dir=args.work_dir)
    driver = archive_driver(args.driver, work)
    ctx = ArchiveContext(archive_dir=os.path.join(work, "archive"), aeron_dir=driver.aeron_dir,
                         control_channel=None, low_storage_space_threshold=0)
    archive = Archive.launch(ctx)
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-sink")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BenchSource)
    spark.dataSource.register(NoopSink)
    runs: list[Run] = []
    try:
        for value_size, rows, batch_rows in ((64, args.rows_64, args.batch_rows_64),
                                             (1024, args.rows_1k, args.batch_rows_1k)):
            stream_id = 7000 + value_size
            aeron_options = {
                "aeronDir": driver.aeron_dir, "controlChannel": ctx.local_control_channel,
                "controlStreamId": str(ctx.local_control_stream_id), "controlResponseChannel": "aeron:ipc",
                "channel": f"aeron:ipc?term-length={args.term_length}", "streamId": str(stream_id),
            }
            warm = min(rows, 2 * batch_rows) // 4
            run_query(spark, "bench-noop", {}, value_size, warm, max(warm // 2, 1), work, kind)
            run_query(spark, "aeron-archive", aeron_options, value_size, warm, max(warm // 2, 1), work, kind)
            for _ in range(args.reps):
                for sink, options in (("bench-noop", {}), ("aeron-archive", aeron_options)):
                    run = run_query(spark, sink, options, value_size, rows, batch_rows, work, kind)
                    runs.append(run)
                    print(f"  {sink:<14} {value_size:>5} B  {run.rows:>9} rows in {run.batches:>3} batches  "
                          f"{run.seconds:7.2f} s  {run.rows_s:>11,.0f} rows/s  {run.mb_s:8.1f} MB/s", flush=True)
        # every query's batches are in its sink log (the checkpoint, as run_query passed it, names the sink)
        connection = ConnectionOptions(aeron_dir=driver.aeron_dir, control_channel=ctx.local_control_channel,
                                       control_stream_id=ctx.local_control_stream_id,
                                       control_response_channel="aeron:ipc")
        for checkpoint in os.listdir(work):
            if checkpoint.startswith("chk-aeron-archive-"):
                entries = read_batch_map(connection, checkpoint_location=os.path.join(work, checkpoint))
                assert entries and all(e.stop_position > e.start_position for e in entries)
    finally:
        spark.stop()
        connection_pool().close()
        archive.close()
        driver.close()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'value':>6} {'sink':<14} {'rows/s':>12} {'MB/s':>9} {'in-trigger rows/s':>18}")
    summary = {}
    for value_size in (64, 1024):
        means = {}
        for sink in ("bench-noop", "aeron-archive"):
            chosen = [r for r in runs if r.sink == sink and r.value_size == value_size]
            rows_s = sum(r.rows for r in chosen) / sum(r.seconds for r in chosen)
            trigger_rows_s = sum(r.rows for r in chosen) / sum(r.trigger_seconds for r in chosen)
            means[sink] = rows_s
            print(f"{value_size:>5}B {sink:<14} {rows_s:>12,.0f} {rows_s * value_size / 1e6:>9.1f} "
                  f"{trigger_rows_s:>18,.0f}")
        ratio = means["aeron-archive"] / means["bench-noop"]
        summary[value_size] = ratio
        print(f"{value_size:>5}B ratio aeron-archive / no-op sink: {ratio:.2f}")
    print(json.dumps({"ratio_64B": round(summary[64], 3), "ratio_1KiB": round(summary[1024], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
