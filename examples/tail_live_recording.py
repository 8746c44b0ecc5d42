"""Tail a live recording with Spark Structured Streaming, watching how far behind the query is.

A publisher thread streams messages into a recording while a streaming query reads that recording with
`spark.readStream.format("aeron-archive")`:

- `archiveDir` + `aeronDir`: tasks read the segment files, and the live end of the recording comes from its
  `rec-pos` counter on the archive's media driver (without `archiveDir`, executors replay through the archive's
  control channel instead);
- `maxBytesPerTrigger` caps each micro-batch (cut at message boundaries), so a backlog is worked off in steps;
- `foreachBatch` prints each micro-batch's rows and position range;
- `aeron_archive_spark.connector.listener.BytesBehindListener` turns each progress event into "bytes behind the live end" per recording
  (Kafka's offsets-behind-latest, in bytes).

It stops when the query has read everything the publisher sent, and checks that every message arrived once, in
order. Run it on its own (embedded archive in a temporary directory):

    .venv/bin/python examples/tail_live_recording.py [--seconds 4 --rate 1000 --max-bytes-per-trigger 64k]

or against a running archive on this host: add `--aeron-dir DIR --archive-dir DIR [--control-channel ...]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

CHANNEL = "aeron:ipc?term-length=256k"
STREAM_ID = 1001


def say(message: str) -> None:
    print(f"[tail {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Publisher(threading.Thread):
    """Offers `rate` messages a second for `seconds` on an exclusive publication the archive records."""

    def __init__(self, publication, seconds: float, rate: int) -> None:
        super().__init__(name="publisher", daemon=True)
        self.publication = publication
        self.seconds = seconds
        self.rate = rate
        self.published = 0
        self.error: BaseException | None = None

    def publish_one(self) -> None:
        payload = f"event {self.published} at {time.time_ns()}".encode().ljust(100, b".")
        while (result := self.publication.offer(payload)) < 0:
            if result in (-4, -5):
                raise RuntimeError(f"publication closed ({result})")
            time.sleep(0.0001)  # back pressure
        self.published += 1

    def run(self) -> None:
        try:
            first = self.published
            total = first + int(self.seconds * self.rate)
            start = time.monotonic()
            while self.published < total:
                due = min(total, first + int((time.monotonic() - start) * self.rate) + 1)
                while self.published < due:
                    self.publish_one()
                time.sleep(0.005)
        except BaseException as ex:  # reported by the main thread
            self.error = ex


def wait_for(condition, timeout: float, what: str, query) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="how long to publish")
    parser.add_argument("--rate", type=int, default=1000, help="messages per second")
    parser.add_argument("--max-bytes-per-trigger", default="64k", help="the source's maxBytesPerTrigger")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up if the query has not caught up by then")
    own = parser.add_argument_group("use a running archive on this host instead of starting one")
    own.add_argument("--aeron-dir", help="the media driver directory of the running archive")
    own.add_argument("--archive-dir", help="its archive directory (default with the embedded archive: a temp dir)")
    own.add_argument("--control-channel", default="aeron:ipc", help="its control request channel")
    own.add_argument("--control-stream-id", type=int, default=10)
    args = parser.parse_args(argv)
    if args.aeron_dir and not args.archive_dir:
        parser.error("--archive-dir is required with --aeron-dir (the query reads the segment files)")

    from aeron_archive_spark.archive import AeronArchive, SourceLocation
    from aeron_archive_spark.archive.constants import RecordingSignal
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    temp_dir = tempfile.mkdtemp(prefix="tail-live-")
    archive = None
    if args.aeron_dir is None:
        archive_dir = args.archive_dir or os.path.join(temp_dir, "archive")
        archive = Archive.launch(ArchiveContext(
            archive_dir=archive_dir, control_channel=None, local_control_channel=args.control_channel,
            local_control_stream_id=args.control_stream_id, segment_file_length=1024 * 1024))
        say(f"started an archive in {archive_dir} (embedded media driver {archive.aeron_dir})")
    else:
        archive_dir = args.archive_dir
    aeron_dir = args.aeron_dir or archive.aeron_dir
    signals: list = []
    client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel=args.control_channel,
                                  control_request_stream_id=args.control_stream_id,
                                  control_response_channel="aeron:ipc", recording_signal_consumer=signals.append)
    spark = query = None
    try:
        client.start_recording(CHANNEL, STREAM_ID, SourceLocation.LOCAL)
        publication = client.aeron.add_exclusive_publication(CHANNEL, STREAM_ID)
        while not any(s.signal == RecordingSignal.START for s in signals):
            client.poll_for_recording_signals()
            time.sleep(0.001)
        recording_id = next(s.recording_id for s in signals if s.signal == RecordingSignal.START)
        say(f"recording {recording_id} is live on {CHANNEL} stream {STREAM_ID}")

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers import this project
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        from aeron_archive_spark.connector.listener import BytesBehindListener

        spark = (SparkSession.builder.master("local[2]").appName("tail-live-recording")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")

        # Progress events arrive on a listener thread after each micro-batch.
        listener = BytesBehindListener(
            on_lag=lambda query_id, batch_id, behind: say(f"  progress of batch {batch_id}: bytes behind the live "
                                                          f"end {behind}"))
        spark.streams.addListener(listener)

        seen: dict[int, list[int]] = {}  # batch id -> positions (foreachBatch runs here, in the driver)

        def on_batch(df, batch_id: int) -> None:
            positions = sorted(r.position for r in df.select("position").collect())
            seen[batch_id] = positions  # by batch id: a batch Spark re-runs replaces its first attempt
            if positions:
                say(f"batch {batch_id}: {len(positions)} messages, positions {positions[0]}..{positions[-1]}")
            else:
                say(f"batch {batch_id}: no new messages")

        stream = (spark.readStream.format("aeron-archive")
                  .option("archiveDir", archive_dir).option("aeronDir", aeron_dir)  # live end via rec-pos
                  .option("recordingId", str(recording_id))
                  .option("maxBytesPerTrigger", args.max_bytes_per_trigger)
                  .load())
        query = (stream.writeStream.foreachBatch(on_batch)
                 .option("checkpointLocation", os.path.join(temp_dir, "checkpoint"))
                 .trigger(processingTime="500 milliseconds").start())

        # One message first: once the query has read it, the query is up and we can watch it tail the stream.
        publisher = Publisher(publication, args.seconds, args.rate)
        publisher.publish_one()
        wait_for(lambda: seen, args.timeout, "the first micro-batch", query)
        publisher.start()
        say(f"publishing {args.rate} messages/s for {args.seconds:g}s; maxBytesPerTrigger "
            f"{args.max_bytes_per_trigger}")
        publisher.join()
        if publisher.error is not None:
            raise RuntimeError(f"publisher failed: {publisher.error}")
        end = publication.position
        while client.get_recording_position(recording_id) < end:
            time.sleep(0.01)
        say(f"publisher done: {publisher.published} messages, recording {recording_id} at position {end}")

        wait_for(lambda: sum(len(p) for p in list(seen.values())) >= publisher.published, args.timeout,
                 "the query to catch up", query)
        # Progress events reach the listener asynchronously: wait for the one saying 0 bytes behind.
        wait_for(lambda: listener.behind(query.id) == {recording_id: 0}, 30, "the last progress event", query)
        query.stop()

        positions = [p for batch_id in sorted(seen) for p in seen[batch_id]]
        assert positions == sorted(set(positions)), "messages repeated or out of order"
        assert len(positions) == publisher.published
        batches = sum(1 for p in seen.values() if p)
        say(f"the query read all {len(positions)} messages exactly once, in {batches} non-empty micro-batches; "
            f"bytes behind at the end: {listener.total_behind(query.id)}")
        client.stop_recording(CHANNEL, STREAM_ID)
        return 0
    finally:
        if query is not None and query.isActive:
            query.stop()
        if spark is not None:
            spark.stop()
        client.close()
        if archive is not None:
            archive.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
