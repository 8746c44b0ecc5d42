"""Write a stream into an archive recording exactly once, across a stop, a simulated crash and a restart.

`df.writeStream.format("aeron-archive")` turns each micro-batch into one contiguous position range of a recording
(`channel` + `streamId`: the first batch starts the recording, later batches and restarts extend it). The sink keeps
a durable batch map, `batchId -> [startPosition, stopPosition)`, in the archive itself: a small "sink log"
recording found by the query's `checkpointLocation`, so a restart on any host that reaches the archive finds it. A
batch that Spark runs again (after a crash between the sink's commit and Spark's own commit log entry) is
recognised there and not written twice.

This script:
1. runs a query from Spark's deterministic `rate-micro-batch` source (batch b holds rows b*R .. b*R + R-1) into a
   new recording, and stops it after a few batches (possibly in the middle of one);
2. deletes Spark's last commit-log entry, as if the driver had crashed right after the sink committed that batch;
3. restarts the query from the checkpoint: Spark re-runs that batch, the sink skips it, and the query continues;
4. prints the batch map (`aeron_archive_spark.connector.sink.read_batch_map`, read from the archive) and reads the
   recording back, checking that every row of every committed batch is there exactly once, inside its batch's
   position range.

Run it on its own (embedded archive in a temporary directory):

    .venv/bin/python examples/exactly_once_sink.py [--rows-per-batch 50 --batches 3]

or against a running archive: add `--aeron-dir DIR --control-channel aeron:ipc --control-stream-id 10`.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

SINK_CHANNEL = "aeron:ipc?term-length=64k"
SINK_STREAM_ID = 3003


def say(message: str) -> None:
    print(f"[exactly_once] {message}", flush=True)


def run_until(query, batch_id: int, timeout: float = 120.0) -> None:
    """Let the query run until it has completed `batch_id`, then stop it (it may be in the middle of the next)."""
    deadline = time.monotonic() + timeout
    try:
        while (query.lastProgress or {}).get("batchId", -1) < batch_id:
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the query did not reach batch {batch_id} within {timeout:g}s")
            time.sleep(0.05)
    finally:
        query.stop()


def spark_commits(checkpoint: str) -> list[int]:
    """The batch ids in Spark's commit log: batches Spark will not run again."""
    return sorted(int(os.path.basename(p)) for p in glob.glob(os.path.join(checkpoint, "commits", "[0-9]*")))


def simulate_crash_after_sink_commit(checkpoint: str, batch_id: int) -> None:
    """Make the checkpoint look as if the driver died right after the sink committed `batch_id`: Spark has planned
    it (offsets/<batch_id>) but not recorded it as done (no commits/<batch_id>), and planned nothing after it."""
    for log in ("commits", "offsets"):
        for path in glob.glob(os.path.join(checkpoint, log, "[0-9]*")):
            number = int(os.path.basename(path))
            if number > batch_id or (log == "commits" and number == batch_id):
                os.remove(path)
                crc = os.path.join(os.path.dirname(path), f".{number}.crc")
                if os.path.exists(crc):
                    os.remove(crc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-batch", type=int, default=50)
    parser.add_argument("--batches", type=int, default=3, help="batches to run before the stop, and again after")
    own = parser.add_argument_group("use a running archive instead of starting one")
    own.add_argument("--aeron-dir", help="the media driver directory of the running archive")
    own.add_argument("--archive-dir", help="where the embedded archive keeps its files (default: a temp dir)")
    own.add_argument("--control-channel", default="aeron:ipc", help="the archive's control request channel")
    own.add_argument("--control-stream-id", type=int, default=10)
    args = parser.parse_args(argv)
    rows_per_batch = args.rows_per_batch

    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    temp_dir = tempfile.mkdtemp(prefix="exactly-once-")
    checkpoint = os.path.join(temp_dir, "checkpoint")
    archive = None
    if args.aeron_dir is None:
        archive_dir = args.archive_dir or os.path.join(temp_dir, "archive")
        archive = Archive.launch(ArchiveContext(
            archive_dir=archive_dir, control_channel=None, local_control_channel=args.control_channel,
            local_control_stream_id=args.control_stream_id, segment_file_length=1024 * 1024))
        say(f"started an archive in {archive_dir} (embedded media driver {archive.aeron_dir})")
    aeron_dir = args.aeron_dir or archive.aeron_dir
    # How the sink (on the Spark driver) and the reads below reach the archive.
    connection = {"aeronDir": aeron_dir, "controlChannel": args.control_channel,
                  "controlStreamId": str(args.control_stream_id), "controlResponseChannel": "aeron:ipc"}

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers import this project
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.connector.sink import read_batch_map, read_sink

    # The same archive, as the reading API takes it: the sink's state is a recording there, named by the checkpoint.
    archive_connection = ConnectionOptions(aeron_dir=aeron_dir, control_channel=args.control_channel,
                                           control_stream_id=args.control_stream_id,
                                           control_response_channel="aeron:ipc")

    def batch_map():
        return read_batch_map(archive_connection, checkpoint_location=checkpoint)

    spark = (SparkSession.builder.master("local[2]").appName("exactly-once-sink")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    def start_query():
        rows = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
                .option("numPartitions", 2).load()
                .select(F.format_string("row %d", "value").alias("value"), F.col("value").alias("reservedValue")))
        return (rows.writeStream.format("aeron-archive").options(**connection)
                .option("channel", SINK_CHANNEL).option("streamId", str(SINK_STREAM_ID))
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="1 second").start())

    try:
        # 1. Run, then stop mid-way.
        run_until(start_query(), args.batches - 1)
        say(f"query stopped; Spark's commit log has batches {spark_commits(checkpoint)}, the sink's batch map "
            f"{[e.batch_id for e in batch_map()]}")

        # 2. The worst moment for a crash: the sink has committed a batch but Spark's commit log does not say so.
        last = spark_commits(checkpoint)[-1]
        simulate_crash_after_sink_commit(checkpoint, last)
        say(f"simulated a crash right after the sink committed batch {last}: Spark will run it again")
        before = {e.batch_id: e for e in batch_map()}

        # 3. Restart from the checkpoint: batch `last` is re-run (and skipped by the sink), then new batches.
        run_until(start_query(), last + args.batches)
        after = {e.batch_id: e for e in batch_map()}
        assert last in spark_commits(checkpoint), f"Spark did not run batch {last} again"
        assert after[last] == before[last], f"the sink wrote batch {last} again"
        say(f"restarted query stopped; Spark ran batch {last} again and the sink skipped it (its batch map entry "
            f"is unchanged); Spark's commit log has batches {spark_commits(checkpoint)}")

        # 4. The batch map, and the recording read back through the archive.
        entries = batch_map()
        sink = read_sink(archive_connection, checkpoint_location=checkpoint)
        recording_id = sink.state.target.recording_id
        say(f"batch map of recording {recording_id} (kept in sink log recording {sink.log_recording_id} of the "
            "archive):")
        for e in entries:
            say(f"  batch {e.batch_id}: [{e.start_position}, {e.stop_position}) {e.rows} rows")
        assert [e.batch_id for e in entries] == list(range(len(entries))), "batch ids must be contiguous"
        assert all(a.stop_position == b.start_position for a, b in zip(entries, entries[1:])), "gaps between batches"

        rows = (spark.read.format("aeron-archive").options(**connection).option("replayChannel", "aeron:ipc")
                .option("recordingId", str(recording_id)).load()
                .select("position", "reservedValue", F.col("value").cast("string").alias("text"))
                .orderBy("position").collect())
        say(f"read back {len(rows)} rows: first {rows[0].text!r} at {rows[0].position}, last {rows[-1].text!r} at "
            f"{rows[-1].position}")
        expected = range(len(entries) * rows_per_batch)
        assert sorted(r.reservedValue for r in rows) == list(expected), "rows missing or duplicated"
        assert all(r.text == f"row {r.reservedValue}" for r in rows)
        for r in rows:  # each row lies in the position range of the batch it came from
            [entry] = [e for e in entries if e.start_position <= r.position < e.stop_position]
            assert entry.batch_id == r.reservedValue // rows_per_batch, f"row {r.text} outside its batch"
        say(f"every row landed exactly once: {len(rows)} rows = {len(entries)} batches x {rows_per_batch}, "
            f"each inside its batch's range")
        return 0
    finally:
        spark.stop()
        from aeron_archive_spark.archive.client.pool import connection_pool

        connection_pool().close()  # the reads' archive session, before its archive (and media driver) goes
        if archive is not None:
            archive.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
