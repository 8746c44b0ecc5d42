"""Decoding SBE repeating groups (`sbeSchema`) beside reading the raw `value` column of the same recording.

One recording of MDP3-like book updates is made (`mdp3_book.xml`: the shape of CME MDP 3.0's
MDIncrementalRefreshBook46: an 11-byte root block, `NoMDEntries` of 1-10 32-byte entries, uniformly, and
`NoOrderIDEntries` of 0-2 24-byte entries), then read in the same process through the very code the Spark source's
executors run (`AeronArchiveBatchReader.read()` on every planned partition, `archiveDir`, no Spark):
- `raw`: the fixed columns and `value` only;
- `sbe`: the same plus the decoded columns (`sbeSchema`, `sbeMessage`): the root fields and two
  `array<struct<...>>` columns.
Runs alternate (raw, sbe, raw, sbe, ...) so that load changes on the machine hit both; the figures are medians,
of wall time and of the process's CPU time (steadier when other jobs share the cores). The `sbe` read includes
reading `value` (the source always gives it), so sbe/raw is the share of the raw read's rate left once groups are
decoded. `--spark` adds the same two reads through `spark.read.format("aeron-archive")` into the `noop` sink
(`local[2]`, wall time only: the work is in Python workers), alternated the same way.

Then, in memory (decoder only): `SbeDecoder.decode` on the raw read's batches, and on flat `BookEntry` messages
holding exactly the same NoMDEntries entries, one per row: what a group entry costs beside a flat row of the same
fields. `--breakdown` times the decoder's parts (instrumented, so a little slower).

Run: `bash ci/bench.sh sbe-groups [--messages N] [--repeat R] [--max-entries 10] [--max-orders 2] [--spark]
[--breakdown]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from aeron_archive_spark.archive.tables.sbe import SbeEncoder
from aeron_archive_spark.archive.tables.sbe.columns import binary_layout, schema_text
from aeron_archive_spark.archive.tables.sbe.decode import SbeDecoder
from tests.system.harness import Harness, wait_for

SCHEMA = str(Path(__file__).resolve().parent / "mdp3_book.xml")
MESSAGE = "MDIncrementalRefreshBook46"
TERM_LENGTH = 16 * 1024 * 1024
SEGMENT_LENGTH = 128 * 1024 * 1024
ENCODE_BATCH = 100_000

_ACTIONS = pa.array(["New", "Change", "Delete", "DeleteThru", "DeleteFrom", "Overlay"])
_SIDES = pa.array(["Bid", "Offer", "ImpliedBid", "ImpliedOffer"])
_ORDER_ACTIONS = pa.array(["New", "Update", "Delete"])


def _list(counts: np.ndarray, fields: dict[str, pa.Array]) -> pa.ListArray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    entries = pa.StructArray.from_arrays(list(fields.values()), names=list(fields))
    return pa.ListArray.from_arrays(pa.array(offsets), entries)


def book_updates(rng: np.random.Generator, first: int, n: int, max_entries: int, max_orders: int) -> pa.BinaryArray:
    """`n` encoded MDIncrementalRefreshBook46 messages (sequence numbers from `first`), by the project's encoder."""
    md = rng.integers(1, max_entries + 1, n)
    orders = rng.integers(0, max_orders + 1, n)
    m, k = int(md.sum()), int(orders.sum())
    null_orders = rng.random(m) < 0.1
    batch = pa.RecordBatch.from_pydict(
        {
            "TransactTime": pa.array(1_700_000_000_000_000_000 + np.arange(first, first + n, dtype=np.int64) * 1000),
            "MatchEventIndicator": pa.array(rng.choice(np.array([0x04, 0x84], dtype=np.int16), n)),
            "NoMDEntries": _list(
                md,
                {
                    "MDEntryPx_mantissa": pa.array(4_500_000_000_000 + rng.integers(-5000, 5000, m) * 250_000_000),
                    "MDEntrySize": pa.array(rng.integers(1, 500, m, dtype=np.int32)),
                    "SecurityID": pa.array(rng.choice(np.array([5432, 5433, 777], dtype=np.int32), m)),
                    "RptSeq": pa.array(np.arange(m, dtype=np.int64) + first * max_entries),
                    "NumberOfOrders": pa.array(rng.integers(1, 40, m, dtype=np.int32), mask=null_orders),
                    "MDPriceLevel": pa.array(rng.integers(1, 11, m, dtype=np.int16)),
                    "MDUpdateAction": _ACTIONS.take(pa.array(rng.integers(0, 3, m))),
                    "MDEntryType": _SIDES.take(pa.array(rng.integers(0, 2, m))),
                },
            ),
            "NoOrderIDEntries": _list(
                orders,
                {
                    "OrderID": pa.array(rng.integers(1, 2**62, k, dtype=np.int64)),
                    "MDOrderPriority": pa.array(rng.integers(1, 2**40, k, dtype=np.int64)),
                    "MDDisplayQty": pa.array(rng.integers(1, 100, k, dtype=np.int32)),
                    "ReferenceID": pa.array(rng.integers(1, 11, k, dtype=np.int16)),
                    "OrderUpdateAction": _ORDER_ACTIONS.take(pa.array(rng.integers(0, 3, k))),
                },
            ),
        }
    )
    return SbeEncoder(schema_text(SCHEMA), MESSAGE).encode(batch)


def flat_entries(book: pa.BinaryArray) -> pa.BinaryArray:
    """The NoMDEntries entries of `book` messages as flat `BookEntry` messages, one per entry."""
    entries = SbeDecoder(schema_text(SCHEMA), MESSAGE).decode(book, np.zeros(len(book), dtype=np.int64), 0)[2]
    flat = pa.RecordBatch.from_struct_array(entries.flatten())  # type: ignore[attr-defined]
    return SbeEncoder(schema_text(SCHEMA), "BookEntry").encode(flat)


def record(h: Harness, messages: int, max_entries: int, max_orders: int) -> tuple[int, int]:
    """Publish and record the book updates; (recording id, payload bytes)."""
    channel = f"aeron:ipc?term-length={TERM_LENGTH}"
    stream_id = 4646
    starts = len(h.signals.of(RecordingSignal.START))
    h.client.start_recording(channel, stream_id, SourceLocation.LOCAL)
    publication = h.client.aeron.add_exclusive_publication(channel, stream_id)
    recording_id = h.await_signal(RecordingSignal.START, count=starts + 1).recording_id
    rng = np.random.default_rng(46)
    offer = publication.offer
    payload_bytes = 0
    for first in range(0, messages, ENCODE_BATCH):
        encoded = book_updates(rng, first, min(ENCODE_BATCH, messages - first), max_entries, max_orders)
        starts_, lengths, data = binary_layout(encoded)
        view = memoryview(data)
        payload_bytes += int(lengths.sum())
        for start, end in zip(starts_.tolist(), (starts_ + lengths).tolist(), strict=True):
            while offer(view[start:end]) <= 0:
                time.sleep(0.00001)
    target = publication.position
    wait_for(lambda: h.client.get_recording_position(recording_id) >= target, timeout=300, what="recorded")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id, payload_bytes


def batch_reader(options: dict[str, str]) -> Any:
    from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader
    from aeron_archive_spark.connector.source.schema import source_schema

    return AeronArchiveBatchReader({k.lower(): v for k, v in options.items()}, source_schema(options))


def read_all(options: dict[str, str]) -> Callable[[], tuple[int, int]]:
    """One full read through the partition reader (planning done once, outside the timing): (rows, entries)."""
    reader = batch_reader(options)
    partitions = reader.partitions()

    def run() -> tuple[int, int]:
        rows = entries = 0
        for partition in partitions:
            for batch in reader.read(partition):
                rows += batch.num_rows
                if "NoMDEntries" in batch.schema.names:
                    entries += len(batch.column("NoMDEntries").values)
        return rows, entries

    return run


@dataclass
class Runs:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def time(self, run: Callable[[], Any]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


def alternate(cases: dict[str, Callable[[], Any]], repeat: int) -> dict[str, Runs]:
    """Wall and CPU seconds per run of each case; one warm-up each, then `repeat` rounds running every case."""
    for run in cases.values():
        run()
    runs = {name: Runs() for name in cases}
    for _ in range(repeat):
        for name, run in cases.items():
            runs[name].time(run)
    return runs


def value_batches(raw_options: dict[str, str]) -> list[tuple[pa.BinaryArray, np.ndarray]]:
    reader = batch_reader(raw_options)
    return [
        (batch.column("value"), batch.column("position").to_numpy())
        for partition in reader.partitions()
        for batch in reader.read(partition)
    ]


def decoder_cases(values: list[tuple[pa.BinaryArray, np.ndarray]]) -> tuple[dict[str, Callable[[], Any]], int]:
    """In-memory decode of the book batches, and of the same NoMDEntries entries as flat messages."""
    book = SbeDecoder(schema_text(SCHEMA), MESSAGE)
    flat = SbeDecoder(schema_text(SCHEMA), "BookEntry")
    flat_values = [(v, np.zeros(len(v), dtype=np.int64)) for v in (flat_entries(v) for v, _ in values)]

    def decode(decoder: SbeDecoder, batches: list[tuple[pa.BinaryArray, np.ndarray]]) -> Callable[[], None]:
        def run() -> None:
            for value, positions in batches:
                decoder.decode(value, positions, 0)

        return run

    return {"book": decode(book, values), "flat": decode(flat, flat_values)}, sum(len(v) for v, _ in flat_values)


def breakdown(values: list[tuple[pa.BinaryArray, np.ndarray]]) -> dict[str, float]:
    """CPU seconds of one decode of `values` by part of the decoder (each part's own time, callees excluded)."""
    import aeron_archive_spark.archive.tables.sbe.columns as columns
    import aeron_archive_spark.archive.tables.sbe.decode as decode

    spent: dict[str, float] = {}
    stack: list[float] = []

    def timed(module: Any, name: str, label: str) -> None:
        original = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            stack.append(0.0)
            try:
                return original(*args, **kwargs)
            finally:
                inner = stack.pop()
                took = time.process_time() - started
                spent[label] = spent.get(label, 0.0) + took - inner
                if stack:
                    stack[-1] += took

        setattr(module, name, wrapper)

    parts = [
        (decode, "_walk", "locate group entries (dimensions, offsets)"),
        (decode, "_fixed_walk", "locate group entries (dimensions, offsets)"),
        (decode, "_records", "gather blocks (header, root, entries)"),
        (decode, "fixed_to_arrow", "numeric fields -> Arrow (copy, widen, nulls)"),
        (columns, "enum_to_arrow", "enum fields -> Arrow strings"),
        (decode, "constant_to_arrow", "constants"),
        (decode, "_group_to_arrow", "list/struct assembly"),
        (decode.SbeDecoder, "decode", "rest (header checks, template dispatch)"),
    ]
    parts = [(module, name, label) for module, name, label in parts if hasattr(module, name)]  # older decoders
    originals = [(module, name, getattr(module, name)) for module, name, _ in parts]
    try:
        for module, name, label in parts:
            timed(module, name, label)
        decoder = SbeDecoder(schema_text(SCHEMA), MESSAGE)
        for value, positions in values:
            decoder.decode(value, positions, 0)
    finally:
        for module, name, original in originals:
            setattr(module, name, original)
    return spent


def spark_cases(options: dict[str, str], sbe_options: dict[str, str]) -> tuple[Any, dict[str, Callable[[], Any]]]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aeron_archive_spark import connector

    spark = (SparkSession.builder.master("local[2]").appName("bench-sbe-groups")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    connector.register(spark)

    def noop(opts: dict[str, str]) -> Callable[[], None]:
        return lambda: (spark.read.format("aeron-archive").options(**opts).load()
                        .write.format("noop").mode("overwrite").save())

    return spark, {"spark raw": noop(options), "spark sbe": noop(sbe_options)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=7, help="alternated rounds (medians are reported)")
    parser.add_argument("--max-entries", type=int, default=10, help="NoMDEntries per message: 1..N uniformly")
    parser.add_argument("--max-orders", type=int, default=2, help="NoOrderIDEntries per message: 0..N uniformly")
    parser.add_argument("--spark", action="store_true", help="also read through Spark into the noop sink")
    parser.add_argument("--breakdown", action="store_true", help="CPU time by part of the decoder")
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="bench-sbe-groups-")
    driver = EmbeddedMediaDriver(os.path.join(root, "driver"))
    h = Harness(driver.aeron_dir, os.path.join(root, "archive"), segment_file_length=SEGMENT_LENGTH)
    spark = None
    try:
        started = time.perf_counter()
        recording_id, payload_bytes = record(h, args.messages, args.max_entries, args.max_orders)
        print(f"recorded {args.messages:,} book updates ({payload_bytes / args.messages:.0f} B average payload) "
              f"in {time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores", flush=True)
        raw = {"archiveDir": h.ctx.archive_dir, "recordingId": str(recording_id)}
        sbe = {**raw, "sbeSchema": SCHEMA, "sbeMessage": MESSAGE}
        raw_run, sbe_run = read_all(raw), read_all(sbe)
        rows, entries = sbe_run()
        assert rows == args.messages and raw_run()[0] == rows, (rows, args.messages)
        cases: dict[str, Callable[[], Any]] = {"raw": raw_run, "sbe": sbe_run}
        if args.spark:
            spark, more = spark_cases(raw, sbe)
            cases.update(more)
        load_before = os.getloadavg()[0]
        reads = alternate(cases, args.repeat)
        load_after = os.getloadavg()[0]
        values = value_batches(raw)
        decoders, flat_rows = decoder_cases(values)
        decoded = alternate(decoders, args.repeat)
        parts = breakdown(values) if args.breakdown else {}
    finally:
        if spark is not None:
            spark.stop()
        h.close()
        driver.close()
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{rows:,} messages, {entries:,} NoMDEntries entries ({entries / rows:.2f} per message), "
          f"{payload_bytes / 1e6:.0f} MB of payload; medians of {args.repeat} alternated runs "
          f"(load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} cores)")
    print(f"{'read':<10} {'msgs/s (wall)':>14} {'vs raw':>7} {'msgs/s (CPU)':>14} {'vs raw':>7} {'MB/s':>7}   "
          "wall runs (s)")
    for name, runs in reads.items():
        base = reads["spark raw" if name.startswith("spark") else "raw"]
        cpu = "" if name.startswith("spark") else (
            f"{rows / runs.median_cpu:>14,.0f} {base.median_cpu / runs.median_cpu:>7.2f}")
        print(f"{name:<10} {rows / runs.median_wall:>14,.0f} {base.median_wall / runs.median_wall:>7.2f} "
              f"{cpu:>22} {payload_bytes / runs.median_wall / 1e6:>7.1f}   "
              + " ".join(f"{t:.2f}" for t in runs.wall))
    book, flat = decoded["book"].median_cpu, decoded["flat"].median_cpu
    raw_cpu = reads["raw"].median_cpu
    print(f"\ndecoder alone, in memory (CPU medians): book updates {rows / book:,.0f} msgs/s = "
          f"{book / rows * 1e9:.0f} ns per message ({book / raw_cpu:.1f}x the whole raw read, "
          f"{raw_cpu / rows * 1e9:.0f} ns per message), {book / entries * 1e9:.0f} ns per NoMDEntries entry")
    print(f"the same {flat_rows:,} entries as flat BookEntry messages: {flat / flat_rows * 1e9:.0f} ns per row; "
          f"NoMDEntries' share of the book decode if its entries cost as much as flat rows: "
          f"{flat / book:.0%}")
    if parts:
        total = sum(parts.values())
        print(f"\ndecoder CPU by part (one instrumented pass, {total / rows * 1e9:.0f} ns per message):")
        for label, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {seconds / total:6.1%}  {seconds / rows * 1e9:6.0f} ns/msg  {label}")


if __name__ == "__main__":
    main()
