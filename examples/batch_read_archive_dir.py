"""Batch-read an archive directory into a Spark DataFrame: no archive server, just the segment files and catalog.

`spark.read.format("aeron-archive").option("archiveDir", DIR)` reads recordings straight from disk (Spark tasks
`pread` the segment files; a recording is split into partitions at term boundaries). Each row is one message:
`recordingId, position, sessionId, streamId, reservedValue, value`. `position` is where the message starts, and
`startingPosition` / `endingPosition` (`{"<recordingId>": position}`) select the messages starting in
[startingPosition, endingPosition).

Run it on its own: it first records two small recordings with an embedded archive in a temporary directory, closes
that archive, then reads the directory:

    .venv/bin/python examples/batch_read_archive_dir.py [--messages 5000]

or read any archive directory (the archive may be running or not; nothing is written):

    .venv/bin/python examples/batch_read_archive_dir.py --archive-dir /data/archive
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

SYMBOLS = ("AAPL", "MSFT", "GOOG")


def say(message: str) -> None:
    print(f"[batch_read] {message}", flush=True)


def record_sample(archive_dir: str, messages: int) -> None:
    """Two stopped recordings of text messages: "trades" (stream 1001) and "quotes" (stream 1002)."""
    from aeron_archive_spark.archive import AeronArchive, SourceLocation
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    with Archive.launch(ArchiveContext(archive_dir=archive_dir, control_channel=None,
                                       segment_file_length=256 * 1024)) as archive, \
            AeronArchive.connect(aeron_dir=archive.aeron_dir, control_request_channel="aeron:ipc",
                                 control_response_channel="aeron:ipc") as client:
        for stream_id, kind, count in ((1001, "trade", messages), (1002, "quote", messages // 2)):
            channel = "aeron:ipc?term-length=64k"
            client.start_recording(channel, stream_id, SourceLocation.LOCAL)
            publication = client.aeron.add_exclusive_publication(channel, stream_id)
            for i in range(count):
                text = f"{kind} {i} {SYMBOLS[i % len(SYMBOLS)]} {100 + i % 17}.{i % 100:02d}"
                while publication.offer(text.encode(), reserved_value=i) < 0:
                    time.sleep(0.0001)
            recording_id = -1
            while recording_id < 0:  # the recording starts when the archive sees the publication
                recording_id = client.find_last_matching_recording(0, "aeron:ipc", stream_id, publication.session_id)
            while client.get_recording_position(recording_id) < publication.position:
                time.sleep(0.001)
            client.stop_recording(channel, stream_id)
            publication.close()
            say(f"recorded {count} {kind}s as recording {recording_id} (stream {stream_id})")
    say(f"archive closed: from here on only the files in {archive_dir} are used")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive-dir", help="read this archive directory (default: record a sample one first)")
    parser.add_argument("--messages", type=int, default=5000, help="size of the sample recording")
    args = parser.parse_args(argv)

    temp_dir = None
    if args.archive_dir:
        archive_dir = args.archive_dir
    else:
        temp_dir = tempfile.mkdtemp(prefix="batch-read-")
        archive_dir = os.path.join(temp_dir, "archive")
        record_sample(archive_dir, args.messages)

    # The catalog tells which recordings there are (`aeron-archive list --dir DIR` prints the same).
    from aeron_archive_spark.archive.storage.catalog import Catalog
    with Catalog(archive_dir, writable=False) as catalog:
        descriptors = list(catalog.descriptors())
    if not descriptors:
        raise SystemExit(f"no recordings in {archive_dir}")
    for d in descriptors:
        stop = "active" if d.stop_position == -1 else d.stop_position
        say(f"catalog: recording {d.recording_id} [{d.start_position}, {stop}) stream {d.stream_id} "
            f"{d.original_channel}")

    # Spark's Python workers must import this project too: run them with this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").appName("batch-read-archive-dir")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        first = descriptors[0].recording_id
        all_ids = ",".join(str(d.recording_id) for d in descriptors)

        # 1. Every recording: one row per message.
        everything = spark.read.format("aeron-archive").option("archiveDir", archive_dir) \
            .option("recordingIds", all_ids).load()
        everything.printSchema()
        summary = (everything.groupBy("recordingId", "streamId")
                   .agg(F.count(F.lit(1)).alias("messages"), F.min("position").alias("firstPosition"),
                        F.max("position").alias("lastPosition"), F.sum(F.length("value")).alias("payloadBytes"))
                   .orderBy("recordingId"))
        summary.show(truncate=False)
        for row in summary.collect():
            say(f"recording {row.recordingId}: {row.messages} messages, positions {row.firstPosition}.."
                f"{row.lastPosition}")

        # 2. One recording; the first messages as text.
        recording = spark.read.format("aeron-archive").option("archiveDir", archive_dir) \
            .option("recordingId", str(first)).load()
        recording.selectExpr("position", "reservedValue", "CAST(value AS STRING) AS text").show(5, truncate=False)

        # 3. A slice by position: messages starting in [position of message 10, position of message 20).
        positions = [r.position for r in recording.select("position").orderBy("position").limit(21).collect()]
        if len(positions) < 21:
            say(f"recording {first} has fewer than 21 messages: no slice to show")
            return 0
        start, end = positions[10], positions[20]
        window = (spark.read.format("aeron-archive").option("archiveDir", archive_dir)
                  .option("recordingId", str(first))
                  .option("startingPosition", json.dumps({str(first): start}))
                  .option("endingPosition", json.dumps({str(first): end})).load()
                  .selectExpr("position", "CAST(value AS STRING) AS text").orderBy("position"))
        window.show(truncate=False)
        rows = window.collect()
        assert [r.position for r in rows] == positions[10:20], "the slice is not messages 10..19"
        say(f"slice [{start}, {end}) of recording {first}: {len(rows)} messages, first {rows[0].text!r}, "
            f"last {rows[-1].text!r}")
        return 0
    finally:
        spark.stop()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
