"""`aeron-archive export ID --to FILE.parquet`: one recording's messages as a Parquet table, offline.

It reads the segment files through `archive.tables`, the Spark-free layer the Spark source reads through too (same
rows and columns as `spark.read.format("aeron-archive")`, including `--sbe-schema` typed columns), streaming one
record batch at a time so memory stays bounded whatever the recording's size; it needs neither Spark nor Java.
"""

from __future__ import annotations

import argparse
import sys

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode


def export_recording(
    archive_dir: str,
    recording_id: int,
    to: str,
    sbe_schema: str | None = None,
    sbe_message: str | None = None,
    progress: bool = True,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> tuple[int, int]:
    """Write the recording's messages to `to` (those the archive recorded in `[from_ms, to_ms)`, by its time
    index, where given); returns (rows, bytes of stream exported)."""
    # Imported here, not at the top: every `aeron-archive` command builds this verb's parser, and Arrow, Parquet
    # and the read layer would add ~0.4 s to each (`serve`, `list`, `--help`).
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from aeron_archive_spark.archive.tables.open_source import open_recording_source
    from aeron_archive_spark.archive.tables.options import SourceOptions
    from aeron_archive_spark.archive.tables.payload import payload_decoder
    from aeron_archive_spark.archive.tables.planning import MAX_BYTES_PER_RANGE_DEFAULT, plan_ranges
    from aeron_archive_spark.archive.tables.ranges import RecordingFacts, SegmentFiles
    from aeron_archive_spark.archive.tables.read import read_batches
    from aeron_archive_spark.archive.tables.schema import row_schema

    raw = {"archiveDir": archive_dir, "recordingId": str(recording_id)}
    if sbe_schema:
        raw["sbeSchema"] = sbe_schema
    if sbe_message:
        raw["sbeMessage"] = sbe_message
    options = SourceOptions.parse(raw)
    decoder = payload_decoder(options)
    schema = row_schema(decoder)
    source = open_recording_source(options)
    try:
        descriptor = source.list_selected().get(recording_id)
        if descriptor is None:
            raise ArchiveError(f"unknown recording id: {recording_id} in {archive_dir}", ErrorCode.UNKNOWN_RECORDING)
        start, end = descriptor.start_position, source.safe_end(descriptor)
        if from_ms is not None:
            found = source.position_at_time(descriptor, from_ms * 1_000_000, end)
            start = end if found is None else found
        if to_ms is not None:
            found = source.position_at_time(descriptor, to_ms * 1_000_000, end)
            end = end if found is None else max(found, start)
        ranges = plan_ranges(
            [(RecordingFacts.of(descriptor), start, end, end)], MAX_BYTES_PER_RANGE_DEFAULT, SegmentFiles(archive_dir)
        )
        rows = 0
        with (
            pq.ParquetWriter(to, schema) as writer,
            tqdm(
                total=end - start,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                disable=not progress,
                desc=f"recording {recording_id}",
                file=sys.stderr,
            ) as bar,
        ):
            done = start
            for read_range in ranges:
                for batch in read_batches(read_range, schema, decoder):
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    if batch.num_rows:
                        reached = min(int(batch.column("position")[-1].as_py()), end)
                        bar.update(max(0, reached - done))
                        done = max(done, reached)
                bar.update(max(0, read_range.end - done))
                done = max(done, read_range.end)
        return rows, end - start
    finally:
        source.close()


def add_subparser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="write one recording's messages to a Parquet file (offline)")
    export.add_argument("recording_id", type=int)
    export.add_argument("--dir", required=True, help="archive directory")
    export.add_argument("--to", required=True, metavar="FILE.parquet")
    export.add_argument("--sbe-schema", help="decode payloads into typed columns with this SBE XML schema")
    export.add_argument("--sbe-message", help="the schema's message to decode (default: by template id)")
    export.add_argument(
        "--from",
        dest="from_time",
        metavar="TIME",
        help="only messages recorded at or after this time (ms since the epoch, or ISO-8601 with a zone), by the "
        "archive's time index",
    )
    export.add_argument(
        "--until",
        dest="to_time",
        metavar="TIME",
        help="only messages recorded before this time (`--to` names the output file)",
    )
    export.add_argument("--no-progress", action="store_true")
    export.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.tables.option_table import parse_timestamp_ms

    from_ms = None if args.from_time is None else parse_timestamp_ms("--from", args.from_time)
    to_ms = None if args.to_time is None else parse_timestamp_ms("--until", args.to_time)
    rows, length = export_recording(
        args.dir,
        args.recording_id,
        args.to,
        args.sbe_schema,
        args.sbe_message,
        progress=not args.no_progress,
        from_ms=from_ms,
        to_ms=to_ms,
    )
    print(f"exported {rows} messages ({length} bytes of stream) of recording {args.recording_id} to {args.to}")
    return 0
