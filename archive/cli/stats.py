"""`aeron-archive stats`: the archive's counters read from a media driver's CnC file, like Aeron's AeronStat."""

from __future__ import annotations

import argparse
import json
import time

from aeron_archive_spark.archive import constants as c

ARCHIVE_TYPES = {
    c.ARCHIVE_RECORDING_POSITION_TYPE_ID,
    c.ARCHIVE_ERROR_COUNT_TYPE_ID,
    c.ARCHIVE_CONTROL_SESSIONS_TYPE_ID,
    c.ARCHIVE_MAX_CYCLE_TIME_TYPE_ID,
    c.ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED_TYPE_ID,
    c.ARCHIVE_RECORDER_MAX_WRITE_TIME_TYPE_ID,
    c.ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID,
    c.ARCHIVE_RECORDER_TOTAL_WRITE_TIME_TYPE_ID,
    c.ARCHIVE_REPLAYER_MAX_READ_TIME_TYPE_ID,
    c.ARCHIVE_REPLAYER_TOTAL_READ_BYTES_TYPE_ID,
    c.ARCHIVE_REPLAYER_TOTAL_READ_TIME_TYPE_ID,
    c.ARCHIVE_RECORDING_SESSION_COUNT_TYPE_ID,
    c.ARCHIVE_REPLAY_SESSION_COUNT_TYPE_ID,
    c.ARCHIVE_CONTROL_SESSION_TYPE_ID,
}


def collect(aeron_dir: str, include_all: bool = False) -> list[dict[str, object]]:
    from aeron_archive_spark.archive.native import AeronClient

    with AeronClient(aeron_dir, client_name="aeron-archive-stats") as client:
        return [
            {"counterId": info.counter_id, "typeId": info.type_id, "value": info.value, "label": info.label}
            for info in client.counters_reader.counters()
            if include_all or info.type_id in ARCHIVE_TYPES
        ]


def add_subparser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stats = sub.add_parser("stats", help="the archive counters of a running media driver (like AeronStat)")
    stats.add_argument("--aeron-dir", help="media driver directory (default: $AERON_DIR or Aeron's default)")
    stats.add_argument("--all", action="store_true", help="every counter of the driver, not only the archive's")
    stats.add_argument("--json", action="store_true")
    stats.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted")
    stats.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.client.connection import default_aeron_dir

    aeron_dir = args.aeron_dir or default_aeron_dir()
    while True:
        rows = collect(aeron_dir, args.all)
        if args.json:
            print(json.dumps(rows))
        else:
            print(f"{'id':>4} {'type':>5} {'value':>20}  label")
            for row in rows:
                print(f"{row['counterId']:>4} {row['typeId']:>5} {row['value']:>20}  {row['label']}")
        if not args.watch:
            return 0
        time.sleep(args.watch)
        print()
