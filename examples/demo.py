"""The end-to-end demo: live market data recorded by the archive, VWAP bars computed by Spark, written back.

1. Starts a standalone archive on an embedded media driver in a temporary (or given) directory.
2. A publisher streams SBE-encoded trades (examples/market_data.xml) of a few symbols; the archive records them.
3. A Spark Structured Streaming query tails the live recording with `format("aeron-archive")`, decodes it with
   `sbeSchema`, computes per-symbol VWAP and volume over 1-second event-time windows, and writes the bars to a
   second recording with the aeron-archive sink.
4. A batch read of that recording prints the bars; the archive counters show what was recorded and replayed.

Run: `bash ci/main.sh` (options: `bash ci/main.sh --help`). To use your own archive instead of the embedded one,
pass `--aeron-dir`, `--archive-dir` and `--control-channel`/`--control-stream-id` of that archive.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = str(HERE / "market_data.xml")
TRADES_CHANNEL = "aeron:ipc?term-length=4m"
TRADES_STREAM = 1001
BARS_CHANNEL = "aeron:ipc?term-length=1m"
BARS_STREAM = 2002
SYMBOLS = {"AAPL": 190.0, "MSFT": 410.0, "GOOG": 170.0, "AMZN": 180.0, "TSLA": 250.0}
# After the last trade, a zero-quantity heartbeat trade 10 s later advances the event-time watermark so the last
# bars are emitted. (A marker symbol filtered out of the query would not work: Spark pushes such a filter below
# the watermark, so the marker would never move it.)
HEARTBEAT_DELAY_NS = 10_000_000_000


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


class TradePublisher(threading.Thread):
    """Publishes SBE Trade messages at a steady rate on an exclusive publication the archive records."""

    def __init__(self, publication, seconds: float, rate: int) -> None:
        super().__init__(name="trade-publisher", daemon=True)
        from aeron_archive_spark.archive.codecs.codec import SbeCodec
        self.codec = SbeCodec.from_xml(SCHEMA)
        self.publication = publication
        self.seconds = seconds
        self.rate = rate
        self.published = 0
        self.last_timestamp_ns = 0
        self.error: BaseException | None = None

    def offer(self, payload: bytes) -> None:
        while True:
            result = self.publication.offer(payload)
            if result > 0:
                return
            if result in (-4, -5):
                raise RuntimeError(f"trade publication closed ({result})")
            time.sleep(0.0001)

    def trade(self, symbol: str, price: float, quantity: int, timestamp_ns: int) -> bytes:
        return self.codec.encode("Trade", symbol=symbol, price_mantissa=int(price * 1e8), quantity=quantity,
                                 timestamp_ns=timestamp_ns, trade_id=self.published + 1,
                                 side=random.choice(("BUY", "SELL")))

    def run(self) -> None:
        try:
            prices = dict(SYMBOLS)
            rng = random.Random(42)
            start = time.monotonic()
            interval = 1.0 / self.rate
            next_send = start
            while time.monotonic() - start < self.seconds:
                symbol = rng.choice(list(prices))
                prices[symbol] *= 1 + rng.gauss(0, 0.0005)
                now_ns = time.time_ns()
                self.offer(self.trade(symbol, prices[symbol], rng.randint(1, 500), now_ns))
                self.published += 1
                self.last_timestamp_ns = now_ns
                next_send += interval
                delay = next_send - time.monotonic()
                if delay > 0.001:
                    time.sleep(delay)
            self.offer(self.trade(next(iter(SYMBOLS)), 1.0, 0, self.last_timestamp_ns + HEARTBEAT_DELAY_NS))
        except BaseException as ex:  # reported by the main thread
            self.error = ex


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="aeron-archive for Spark: end-to-end demo")
    parser.add_argument("--work-dir", help="where the archive, checkpoints and logs go (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to publish trades")
    parser.add_argument("--rate", type=int, default=2000, help="trades per second")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    own = parser.add_argument_group("use your own archive instead of starting one")
    own.add_argument("--aeron-dir", help="media driver directory of your archive")
    own.add_argument("--archive-dir", help="its archive directory (must be readable here)")
    own.add_argument("--control-channel", default="aeron:ipc", help="its control request channel")
    own.add_argument("--control-stream-id", type=int, default=10)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="aeron-archive-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from aeron_archive_spark.archive import AeronArchive
    from aeron_archive_spark.archive.cli.stats import collect
    from aeron_archive_spark.archive.constants import RecordingSignal
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    archive = None
    if args.aeron_dir is None:
        archive_dir = str(work / "archive")
        say(f"starting an archive with an embedded media driver in {archive_dir}")
        archive = Archive.launch(ArchiveContext(archive_dir=archive_dir, control_channel=None,
                                                local_control_channel=args.control_channel,
                                                local_control_stream_id=args.control_stream_id,
                                                segment_file_length=16 * 1024 * 1024))
        aeron_dir = archive.aeron_dir
    else:
        if not args.archive_dir:
            raise SystemExit("--archive-dir is required with --aeron-dir (the Spark source reads segment files)")
        aeron_dir, archive_dir = args.aeron_dir, args.archive_dir
        say(f"using the archive of the media driver in {aeron_dir} (archive dir {archive_dir})")
    signals = []
    client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel=args.control_channel,
                                  control_request_stream_id=args.control_stream_id,
                                  control_response_channel="aeron:ipc", recording_signal_consumer=signals.append)
    spark = None
    try:
        say(f"recording trades on {TRADES_CHANNEL} stream {TRADES_STREAM}")
        client.start_recording(TRADES_CHANNEL, TRADES_STREAM)
        publication = client.aeron.add_exclusive_publication(TRADES_CHANNEL, TRADES_STREAM)
        deadline = time.monotonic() + 10
        while not [s for s in signals if s.signal == RecordingSignal.START]:
            client.poll_for_recording_signals()
            if time.monotonic() > deadline:
                raise RuntimeError("the archive did not start recording the trades")
            time.sleep(0.01)
        trades_id = next(s.recording_id for s in signals if s.signal == RecordingSignal.START)
        say("starting Spark (local[2])")
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
        spark = (SparkSession.builder.master("local[2]").appName("aeron-archive-demo")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")

        trades = (spark.readStream.format("aeron-archive")
                  .option("archiveDir", archive_dir).option("aeronDir", aeron_dir)
                  .option("recordingId", str(trades_id)).option("sbeSchema", SCHEMA)
                  .option("maxBytesPerTrigger", "8m").load())
        bars = (trades
                .withColumn("ts", F.timestamp_micros(F.floor(F.col("timestampNs") / 1000).cast("long")))
                .withWatermark("ts", "2 seconds")
                .withColumn("price", F.col("price_mantissa") * F.lit(1e-8))
                .groupBy(F.window("ts", "1 second"), "symbol")
                .agg((F.sum(F.col("price") * F.col("quantity")) / F.sum("quantity")).alias("vwap"),
                     F.sum("quantity").alias("volume"), F.count(F.lit(1)).alias("trades")))
        out = bars.select(F.to_json(F.struct(F.col("window.start").alias("start"), "symbol", "vwap", "volume",
                                             "trades")).alias("value"))
        query = (out.writeStream.format("aeron-archive").outputMode("append")
                 .option("aeronDir", aeron_dir).option("controlChannel", args.control_channel)
                 .option("controlStreamId", str(args.control_stream_id))
                 .option("channel", BARS_CHANNEL).option("streamId", str(BARS_STREAM))
                 .option("checkpointLocation", str(work / "checkpoint"))
                 .trigger(processingTime="2 seconds").start())
        say(f"streaming query {query.id} started: trades -> 1 s VWAP bars -> {BARS_CHANNEL} stream {BARS_STREAM}")
        publisher = TradePublisher(publication, args.seconds, args.rate)
        publisher.start()
        say(f"publishing ~{args.rate} trades/s for {args.seconds:.0f}s into recording {trades_id}; the query tails "
            "it through its rec-pos counter")

        seen_batch = -1
        while publisher.is_alive() or query.lastProgress is None:
            time.sleep(1)
            progress = query.lastProgress
            if progress and progress["batchId"] != seen_batch:
                seen_batch = progress["batchId"]
                say(f"batch {seen_batch}: {progress['numInputRows']} trades in "
                    f"(end offset {progress['sources'][0]['endOffset']}), published {publisher.published} so far")
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
        publisher.join()
        if publisher.error is not None:
            raise RuntimeError(f"publisher failed: {publisher.error}")
        final = client.get_recording_position(trades_id)
        say(f"publisher done: {publisher.published} trades, recording {trades_id} at position {final}")

        deadline = time.monotonic() + 120
        consumed_in = None
        while True:  # until the query consumed the whole recording, then ran the batch that emits the last bars
            query.processAllAvailable()
            progress = query.lastProgress
            end = progress and progress["sources"][0]["endOffset"]
            if consumed_in is None and end and json.loads(end).get(str(trades_id)) == final:
                consumed_in = progress["batchId"]
            if consumed_in is not None and progress["batchId"] > consumed_in:
                break  # the no-data batch after the end-of-day marker advanced the watermark
            if time.monotonic() > deadline:
                raise RuntimeError(f"query did not reach position {final}: {end}")
            time.sleep(0.5)
        query.stop()
        say("streaming query stopped")

        schema = "start timestamp, symbol string, vwap double, volume long, trades long"
        # Read the bars back through the running archive (replays over Aeron: executors need no shared disk).
        result = (spark.read.format("aeron-archive").option("aeronDir", aeron_dir)
                  .option("controlChannel", args.control_channel)
                  .option("controlStreamId", str(args.control_stream_id)).option("replayChannel", "aeron:ipc")
                  .option("channel", BARS_CHANNEL).option("streamId", str(BARS_STREAM)).load()
                  .select("recordingId", "position", F.from_json(F.col("value").cast("string"), schema).alias("bar"))
                  .select("recordingId", "position", "bar.*").orderBy("start", "symbol"))
        rows = result.count()
        say(f"batch read of the bars recording (replayed by the archive): {rows} bars")
        result.show(40, truncate=False)
        total = result.agg(F.sum("trades")).first()[0] or 0
        say(f"trades covered by emitted bars: {total} of {publisher.published}")

        say("archive counters:")
        for row in collect(aeron_dir):
            print(f"    {row['typeId']:>4} {row['value']:>16}  {row['label']}")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        client.close()
        if archive is not None:
            archive.close()
            say("archive closed")
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
