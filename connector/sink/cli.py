"""`aeron-archive batches`: print Spark sinks' batch id -> recording positions maps, read from the archive.

Declared as an `aeron_archive_spark.cli` entry point in pyproject.toml, which the `aeron-archive` command loads
(the engine never imports the connector). A sink's state is a log recording in the archive itself (read by
`aeron_archive_spark.connector.sink.log_store`), so this asks a running archive, from any host that reaches it:
an operator can map a position in a recording back to the micro-batch that wrote it, or see that a commit is
pending after a crash.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_identity import sink_identity, sink_key
from aeron_archive_spark.connector.sink.log_store import SinkView, read_sinks


def add_subparser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register the `batches` command on an argparse subparsers object; returns its parser."""
    parser = subparsers.add_parser(
        "batches",
        help="Spark sinks' batch id -> [startPosition, stopPosition) maps, from their logs in the archive",
        description="Print the batches format('aeron-archive') sinks committed: every sink of the archive, or "
        "the one named by --checkpoint (a stream) or by its target (a batch write).",
    )
    parser.add_argument("--aeron-dir", help="media driver directory (default: $AERON_DIR, else an embedded one)")
    parser.add_argument("--control-channel", default=c.CONTROL_CHANNEL_DEFAULT, help="the archive's control channel")
    parser.add_argument("--control-stream-id", type=int, default=c.CONTROL_STREAM_ID_DEFAULT)
    parser.add_argument("--checkpoint", help="the streaming query's checkpointLocation, as given to Spark")
    parser.add_argument("--recording-id", type=int, help="the target recording of batch writes")
    parser.add_argument("--channel", help="the target channel of batch writes (with --stream-id)")
    parser.add_argument("--stream-id", type=int, help="the target stream id of batch writes (with --channel)")
    parser.add_argument(
        "--json", action="store_true", help="a JSON array: per sink its log, target, pending commit and batches"
    )
    parser.set_defaults(func=run)
    return parser


def _key(args: argparse.Namespace) -> str | None:
    if args.checkpoint is not None:
        return sink_key(sink_identity(True, args.checkpoint, None, None, None))
    if args.recording_id is not None:
        return sink_key(sink_identity(False, None, args.recording_id, None, None))
    if args.channel is not None or args.stream_id is not None:
        if args.channel is None or args.stream_id is None:
            raise SystemExit("aeron-archive: --channel and --stream-id go together")
        return sink_key(sink_identity(False, None, None, args.channel, args.stream_id))
    return None


def run(args: argparse.Namespace) -> int:
    connection = ConnectionOptions(
        aeron_dir=args.aeron_dir, control_channel=args.control_channel, control_stream_id=args.control_stream_id
    )
    key = _key(args)
    try:
        views = read_sinks(connection, key)
    except SinkError as ex:
        raise SystemExit(f"aeron-archive: {ex}") from None
    if key is not None and not views:
        raise SystemExit(f"aeron-archive: no such sink in the {connection.describe()}")
    if args.json:
        print(json.dumps([_to_json(v) for v in views], indent=2))
        return 0
    if not views:
        print(f"no aeron-archive sinks in the {connection.describe()}")
    for view in views:
        _print(view)
    return 0


def _to_json(view: SinkView) -> dict[str, object]:
    state = view.state
    return {
        "logRecordingId": view.log_recording_id,
        "key": view.key,
        "sink": None if state.target is None else state.target.to_json(),
        "pending": None if state.pending is None else state.pending.to_json(),
        "batches": [e.to_json() for e in view.entries or []],
    }


def _print(view: SinkView) -> None:
    state = view.state
    entries = view.entries or []
    if state.target is None:
        print(f"sink log recording {view.log_recording_id}: no target recording yet")
    else:
        target = state.target
        origin = "created by the sink" if target.created_by_sink else "given by recordingId"
        print(
            f"{target.identity} (sink log recording {view.log_recording_id}): recording {target.recording_id} "
            f"(stream {target.stream_id}, {origin}, {target.kind}), {len(entries)} committed batch(es)"
        )
    if state.pending is not None:
        pending = state.pending
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
