"""What reading history by time costs: a short time window of a long recording against the whole recording, and
the `timestamp` column against the same read with no time index to look up.

One recording is made at a steady pace for `--seconds` (1 KiB messages, `--mb-per-s`), so its recorded times spread
evenly over that span. Then, in one Spark session (`local[2]`), alternated, medians of `--rounds`:

- `whole`: the whole recording (`write.format("noop")`);
- `window`: `startingTimestamp` / `endingTimestamp` one `--window-s` long in the middle: its share of the recording
  is printed beside the time ratio (ideally the two are close: finding the window costs a few index reads);
- the `timestamp` column's cost to a read that does not select it (`select("position", "value")`, written to
  `noop`): with the index, and once its `.tix` files are moved away (no index read, the column null): Spark's Python
  data sources cannot tell the source which columns a query uses, so every row is dated either way; and the same
  for a read that selects every column (`select("*")`), where Spark also converts the column.

Each through `archiveDir` and through the archive (replays). Run: `bash ci/bench.sh time-window [--seconds 60]
[--window-s 3] [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from tests.benchmarks.archive_driver import add_driver_argument, archive_driver
from tests.system.harness import Harness, wait_for

TERM_LENGTH = 16 * 1024 * 1024
MESSAGE = 1024


def record_paced(h: Harness, seconds: float, mb_per_s: float) -> tuple[int, int, int, int]:
    """A recording fed at a steady pace; returns (recording id, stop position, first and last offer ms)."""
    channel = f"aeron:ipc?term-length={TERM_LENGTH}"
    h.client.start_recording(channel, 4242, SourceLocation.LOCAL)
    publication = h.client.aeron.add_exclusive_publication(channel, 4242)
    recording_id = h.await_signal(RecordingSignal.START).recording_id
    payload = bytes(range(256)) * (MESSAGE // 256)
    per_tick = max(1, int(mb_per_s * 1e6 / MESSAGE / 100))  # 100 ticks a second
    begun = time.time()
    first_ms = int(begun * 1000)
    tick = 0
    while time.time() - begun < seconds:
        for _ in range(per_tick):
            while publication.offer(payload) <= 0:
                time.sleep(0.00001)
        tick += 1
        delay = begun + tick / 100 - time.time()
        if delay > 0:
            time.sleep(delay)
    last_ms = int(time.time() * 1000)
    stop = publication.position
    wait_for(lambda: h.client.get_recording_position(recording_id) >= stop, timeout=120, what="recorded")
    h.client.stop_recording(channel, 4242)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id, stop, first_ms, last_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the recording is fed")
    parser.add_argument("--mb-per-s", type=float, default=8.0, help="its pace")
    parser.add_argument("--window-s", type=float, default=3.0, help="the window read")
    parser.add_argument("--rounds", type=int, default=5)
    add_driver_argument(parser)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    work = tempfile.mkdtemp(prefix="bench-time-window-")
    driver = archive_driver(args.driver, work)
    h = Harness(driver.aeron_dir, os.path.join(work, "archive"), segment_file_length=128 * 1024 * 1024)
    spark = (SparkSession.builder.master("local[2]").appName("bench-time-window")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    from aeron_archive_spark import connector

    connector.register(spark)
    try:
        recording_id, stop, first_ms, last_ms = record_paced(h, args.seconds, args.mb_per_s)
        middle = (first_ms + last_ms) // 2
        window = {"startingTimestamp": str(middle), "endingTimestamp": str(middle + int(args.window_s * 1000))}
        print(f"recording {recording_id}: {stop / 1e6:.0f} MB over {(last_ms - first_ms) / 1000:.1f} s; window "
              f"{args.window_s} s", flush=True)
        paths = {
            "archiveDir": {"archiveDir": h.ctx.archive_dir},
            "replay": {"aeronDir": driver.aeron_dir, "controlChannel": h.ctx.local_control_channel,
                       "controlStreamId": str(h.ctx.local_control_stream_id),
                       "controlResponseChannel": "aeron:ipc", "replayChannel": "aeron:ipc"},
        }

        def read(options: dict[str, str], columns: tuple[str, ...] = ("*",)) -> tuple[float, int]:
            started = time.perf_counter()
            df = spark.read.format("aeron-archive").options(recordingId=str(recording_id), **options).load()
            rows = df.count() if "startingTimestamp" in options else 0
            if not rows:
                df.select(*columns).write.format("noop").mode("overwrite").save()
            return time.perf_counter() - started, rows

        for path, location in paths.items():
            read(location)  # warm-up: Spark's first jobs, the workers' imports and connections
            _, window_rows = read({**location, **window})
            share = window_rows * (MESSAGE + 32) / stop
            times: dict[str, list[float]] = {"whole": [], "window": []}
            for round_ in range(args.rounds):
                for name in ("whole", "window") if round_ % 2 == 0 else ("window", "whole"):
                    times[name].append(read(location if name == "whole" else {**location, **window})[0])
            whole, part = statistics.median(times["whole"]), statistics.median(times["window"])
            print(f"{path}: whole {whole:.2f} s ({stop / whole / 1e6:.0f} MB/s), window {part:.2f} s: "
                  f"time ratio {part / whole:.3f} for {share:.3f} of the recording", flush=True)

        # the timestamp column: the same whole reads with the index, and with its files moved away
        index_files = glob.glob(os.path.join(h.ctx.archive_dir, "*.tix"))
        hidden = os.path.join(work, "hidden")
        os.makedirs(hidden)
        for path, location in paths.items():
            for columns in (("position", "value"), ("*",)):
                times = {"indexed": [], "no-index": []}
                for round_ in range(args.rounds):
                    for name in ("indexed", "no-index") if round_ % 2 == 0 else ("no-index", "indexed"):
                        for f in index_files:
                            moved = os.path.join(hidden, os.path.basename(f))
                            if name == "no-index" and os.path.exists(f):
                                os.replace(f, moved)
                            if name == "indexed" and os.path.exists(moved):
                                os.replace(moved, f)
                        times[name].append(read(location, columns)[0])
                indexed, bare = statistics.median(times["indexed"]), statistics.median(times["no-index"])
                print(f"{path} select({', '.join(columns)}): indexed {stop / indexed / 1e6:.0f} MB/s, no index "
                      f"{stop / bare / 1e6:.0f} MB/s, indexed/no-index time {indexed / bare:.3f}", flush=True)
            for f in index_files:
                moved = os.path.join(hidden, os.path.basename(f))
                if os.path.exists(moved):
                    os.replace(moved, f)
    finally:
        spark.stop()
        h.close()
        driver.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
