"""`aeron-archive batches --state DIR [--json]`: print a sink's batch id -> recording positions map.

Declared as an `aeron_archive_spark.cli` entry point in pyproject.toml, which the `aeron-archive` command loads
(the engine never imports the connector). It reads only the sink's state directory (no archive or Spark needed),
so an operator can map a position in the recording back to the micro-batch that wrote it, or see that a commit is
pending after a crash.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime

from aeron_archive_spark.connector.sink.batch_map import read_batch_map
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.state import load_pending, load_state


def add_subparser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register the `batches` command on an argparse subparsers object; returns its parser."""
    parser = subparsers.add_parser(
        "batches",
        help="a Spark sink's batch id -> [startPosition, stopPosition) map (offline)",
        description="Print the batches a format('aeron-archive') sink committed, from its sinkStateDir "
        "(by default <checkpointLocation>/aeron-archive-sink).",
    )
    parser.add_argument("--state", required=True, help="the sink's state directory (sinkStateDir)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object: recording, pending commit and every batch entry"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    state_dir = os.path.abspath(args.state)
    if not os.path.isdir(state_dir):
        raise SystemExit(f"aeron-archive: no sink state directory {state_dir}")
    try:
        state = load_state(state_dir)
        pending = load_pending(state_dir)
        entries = read_batch_map(state_dir)
    except SinkError as ex:
        raise SystemExit(f"aeron-archive: {ex}") from None
    if args.json:
        print(
            json.dumps(
                {
                    "stateDir": state_dir,
                    "sink": None if state is None else state.to_json(),
                    "pending": None if pending is None else pending.to_json(),
                    "batches": [e.to_json() for e in entries],
                },
                indent=2,
            )
        )
        return 0
    if state is None:
        print(f"{state_dir}: no recording yet")
    else:
        origin = "created by the sink" if state.created_by_sink else "given by recordingId"
        print(
            f"{state_dir}: recording {state.recording_id} (stream {state.stream_id}, {origin}), "
            f"{len(entries)} committed batch(es)"
        )
    if pending is not None:
        print(
            f"pending: batch {pending.batch_id} started at position {pending.start_position} of recording "
            f"{pending.recording_id} and did not finish; the next commit truncates back to it"
        )
    print(
        f"{'batchId':>8} {'recordingId':>11} {'startPosition':>14} {'stopPosition':>14} {'bytes':>12} "
        f"{'rows':>10}  committedAt"
    )
    for e in entries:
        when = datetime.fromtimestamp(e.committed_at / 1000, tz=UTC).isoformat(timespec="milliseconds")
        print(
            f"{e.batch_id:>8} {e.recording_id:>11} {e.start_position:>14} {e.stop_position:>14} "
            f"{e.stop_position - e.start_position:>12} {e.rows:>10}  {when}"
        )
    return 0
