"""Read an archive directory written by another Aeron Archive (by default: the real Java Aeron Archive 1.15.1).

Aeron Archive's on-disk format (`archive.catalog` + `<recordingId>-<position>.rec` segment files holding the frames
verbatim) is the contract, so a directory written by the Java archive is read here like one of ours: listed offline
(what `aeron-archive list --dir DIR` prints), then read with `spark.read.format("aeron-archive").option("archiveDir",
DIR)`, no server involved.

By default it makes such a directory first: with the Java Aeron 1.15.1 archive (`ci/java_aeron.sh` fetches the jar;
`tests/interop/java/JavaArchiveWriter.java` records a UDP and an IPC stream of 192 messages each, 0 to 8192 bytes,
and reports each message's length, CRC-32 and position, which are then checked against what Spark reads). Without
Java (or with `--generate-with python`) this project's archive writes the directory instead.

Directories of Aeron before the catalog 1.0 migration (1.15.1 is one) name segment files `<recordingId>-<segment
index>.rec`; this script reads such a directory from a copy whose segment files it renames to position names,
exactly what Aeron's `ArchiveTool <dir> migrate` does to them (the original directory is never modified).

    .venv/bin/python examples/read_foreign_archive_dir.py                 # Java 1.15.1 if possible
    .venv/bin/python examples/read_foreign_archive_dir.py --generate-with python
    .venv/bin/python examples/read_foreign_archive_dir.py --dir /data/some-archive [--rows 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def say(message: str) -> None:
    print(f"[read_foreign] {message}", flush=True)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_with_java(work: Path) -> tuple[Path, dict] | None:
    """Run JavaArchiveWriter (Aeron 1.15.1); returns (archive dir, its report), or None if Java Aeron is unavailable."""
    sys.path.insert(0, str(ROOT / "tests"))  # the interop tests' helpers: jar download, javac, bounded runs
    from interop.javaenv import JavaEnv, JavaUnavailable

    try:
        java = JavaEnv.get()
    except JavaUnavailable as ex:
        say(f"Java Aeron 1.15.1 is not available ({ex})")
        return None
    archive_dir = work / "java-archive"
    say(f"recording with the Java Aeron {java.jar.stem.removeprefix('aeron-all-')} archive into {archive_dir}")
    result = java.run("JavaArchiveWriter", work / "java-aeron", archive_dir, free_udp_port(), free_udp_port(),
                      free_udp_port(), timeout=60)
    shutil.rmtree(work / "java-aeron", ignore_errors=True)  # the Java media driver's directory
    report = result.json()
    for r in report["recordings"]:
        say(f"Java recorded {len(r['messages'])} messages on {r['publicationChannel']} stream {r['streamId']}: "
            f"recording {r['recordingId']} [{r['startPosition']}, {r['stopPosition']})")
    return archive_dir, report


def generate_with_python(work: Path) -> Path:
    """A directory written by this project's archive (used when Java is not available)."""
    from aeron_archive_spark.archive import AeronArchive, SourceLocation
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    archive_dir = work / "archive"
    say(f"recording with this project's archive into {archive_dir}")
    with Archive.launch(ArchiveContext(archive_dir=str(archive_dir), control_channel=None,
                                       segment_file_length=128 * 1024)) as archive, \
            AeronArchive.connect(aeron_dir=archive.aeron_dir, control_request_channel="aeron:ipc",
                                 control_response_channel="aeron:ipc") as client:
        channel = "aeron:ipc?term-length=64k"
        client.start_recording(channel, 1001, SourceLocation.LOCAL)
        publication = client.aeron.add_exclusive_publication(channel, 1001)
        for i in range(500):
            while publication.offer(f"message {i}".encode() + bytes(i % 300)) < 0:
                time.sleep(0.0001)
        recording_id = -1
        while recording_id < 0:
            recording_id = client.find_last_matching_recording(0, "aeron:ipc", 1001, publication.session_id)
        while client.get_recording_position(recording_id) < publication.position:
            time.sleep(0.001)
        client.stop_recording(channel, 1001)
    return archive_dir


def readable_copy_if_needed(archive_dir: Path, work: Path) -> Path:
    """The directory to read: `archive_dir` itself, or a copy with position-named segment files if its catalog
    predates Aeron's catalog 1.0 migration (segment files named by index)."""
    from aeron_archive_spark.archive.storage.catalog import Catalog, semantic_version_major, semantic_version_string

    with Catalog(archive_dir, writable=False) as catalog:
        version = catalog.version
        descriptors = list(catalog.descriptors())
    say(f"catalog version {semantic_version_string(version)}, {len(descriptors)} recording(s)")
    if semantic_version_major(version) > 0:
        return archive_dir
    copy = work / "migrated"
    shutil.copytree(archive_dir, copy)
    for d in descriptors:
        # Segment k of a recording starts at the start position's term base + k * segmentFileLength.
        start_term_base = d.start_position - (d.start_position & (d.term_buffer_length - 1))
        indexed = sorted(copy.glob(f"{d.recording_id}-*.rec"), key=lambda p: int(p.stem.split("-")[1]), reverse=True)
        for path in indexed:  # highest index first: a new name never collides with a file not yet renamed
            index = int(path.stem.split("-")[1])
            path.rename(copy / f"{d.recording_id}-{start_term_base + index * d.segment_file_length}.rec")
    say(f"catalog version 0 names segment files by index: reading a copy with position names ({copy}), as "
        f"Aeron's `ArchiveTool migrate` would rename them")
    return copy


def check_against_java_report(recording_id: int, rows: list, report: dict) -> None:
    """Every message as the Java publisher reported it: [length, CRC-32, publication position before the offer,
    position the offer returned]. A message starts in between (after a PAD frame if it did not fit in its term)."""
    [published] = [r for r in report["recordings"] if r["recordingId"] == recording_id]
    if len(rows) != len(published["messages"]):
        raise SystemExit(f"recording {recording_id}: Spark read {len(rows)} messages, Java published "
                         f"{len(published['messages'])}")
    for row, (length, crc, before, end) in zip(rows, published["messages"]):
        if (row.length, row.crc32) != (length, crc) or not before <= row.position < end:
            raise SystemExit(f"recording {recording_id}: the message at {row.position} (length {row.length}, CRC "
                             f"{row.crc32}) is not what Java published there (length {length}, CRC {crc}, "
                             f"between {before} and {end})")
    say(f"recording {recording_id}: all {len(rows)} messages match what the Java publisher sent (length, CRC-32, "
        f"position)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="read this archive directory instead of generating one (never modified)")
    parser.add_argument("--generate-with", choices=("java", "python"), default="java",
                        help="who writes the generated directory (java falls back to python if unavailable)")
    parser.add_argument("--rows", type=int, default=5, help="rows to show per recording")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="read-foreign-"))
    try:
        report = None
        if args.dir:
            archive_dir = Path(args.dir)
        else:
            generated = generate_with_java(work) if args.generate_with == "java" else None
            if generated is not None:
                archive_dir, report = generated
            else:
                archive_dir = generate_with_python(work)

        # What `aeron-archive list --dir DIR` prints (the command line tool, called in-process).
        from aeron_archive_spark.archive.cli.main import main as aeron_archive_cli
        say(f"aeron-archive list --dir {archive_dir}")
        if aeron_archive_cli(["list", "--dir", str(archive_dir)]) != 0:
            return 1
        readable = readable_copy_if_needed(archive_dir, work)

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers import this project
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from aeron_archive_spark.archive.storage.catalog import Catalog

        spark = (SparkSession.builder.master("local[2]").appName("read-foreign-archive-dir")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            with Catalog(readable, writable=False) as catalog:
                recording_ids = [d.recording_id for d in catalog.descriptors()]
            for recording_id in recording_ids:
                df = (spark.read.format("aeron-archive").option("archiveDir", str(readable))
                      .option("recordingId", str(recording_id)).load()
                      .select("position", "sessionId", "streamId", F.length("value").alias("length"),
                              F.crc32("value").alias("crc32"), F.hex(F.substring("value", 1, 12)).alias("head")))
                say(f"recording {recording_id}: {df.count()} messages read by Spark; the first {args.rows}:")
                df.orderBy("position").show(args.rows, truncate=False)
                if report is not None:
                    check_against_java_report(recording_id, df.orderBy("position").collect(), report)
        finally:
            spark.stop()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
