"""`aeron-archive`: the standalone archive server and offline tools for operators."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from aeron_archive_spark.archive import constants as c

if TYPE_CHECKING:
    from aeron_archive_spark.archive.descriptor import RecordingDescriptor
    from aeron_archive_spark.archive.storage.catalog import Catalog

log = logging.getLogger("aeron_archive_spark.archive.cli")


def _size(text: str) -> int:
    """Sizes like 128m, 64k, 1g, or plain bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 65536, 64k, 128m, 1g)") from None


def _cmd_serve(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.cli import credentials, mark_file, retention
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext
    from aeron_archive_spark.archive.server.metrics import MetricsAddressError

    read_write_secret, read_only_secret = credentials.secrets_from_args(args)
    kept = retention.from_args(args)
    ctx = ArchiveContext(
        archive_dir=args.dir,
        aeron_dir=args.aeron_dir,
        control_channel=None if args.control_channel == "none" else args.control_channel,
        control_stream_id=args.control_stream_id,
        local_control_channel=args.local_control_channel,
        local_control_stream_id=args.local_control_stream_id,
        recording_events_enabled=args.recording_events,
        recording_events_channel=args.recording_events_channel,
        recording_events_stream_id=args.recording_events_stream_id,
        segment_file_length=args.segment_length,
        file_io_max_length=args.file_io_max_length,
        file_sync_level=args.file_sync_level,
        catalog_file_sync_level=max(args.catalog_file_sync_level, args.file_sync_level),
        record_checksum=args.record_checksum,
        replay_checksum=args.replay_checksum,
        archive_id=args.archive_id,
        max_concurrent_recordings=args.max_recordings,
        max_concurrent_replays=args.max_replays,
        low_storage_space_threshold=args.low_storage_threshold,
        replication_channel=args.replication_channel,
        replication_response_channel=args.replication_response_channel,
        retention=kept.default,
        retention_overrides=kept.overrides,
        retention_check_interval_ms=kept.check_interval_ms,
        time_index_interval_ns=_time_index_interval_ns(args.time_index_interval),
        metrics_address=args.metrics_address,
        **mark_file.context_options(args),
    )
    if kept.is_set:
        log.info(
            "retention: %s, %d override(s), checked every %d ms",
            kept.default.describe(),
            len(kept.overrides),
            kept.check_interval_ms,
        )
    credentials_required = read_write_secret is not None
    if read_write_secret is not None:
        ctx.require_credentials(read_write_secret, read_only_secret)
    log.info("credentials: %s", credentials.describe(args))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        archive = Archive.launch(ctx)
    except MetricsAddressError as ex:  # named as the option it came from
        raise ValueError(f"option --metrics-address {ex.address}: {ex.reason}") from None
    try:
        ready = {
            "aeronDir": archive.aeron_dir,
            "archiveDir": ctx.archive_dir,
            "controlChannel": ctx.control_channel,
            "controlStreamId": ctx.control_stream_id,
            "localControlChannel": ctx.local_control_channel,
            "localControlStreamId": ctx.local_control_stream_id,
            "archiveId": archive.archive_id,
            "credentialsRequired": credentials_required,
        }
        if archive.metrics is not None:
            ready["metricsUrl"] = archive.metrics.url
        print(json.dumps(ready), flush=True)
        while not stop.wait(0.2):
            pass
        log.info("shutting down")
    finally:
        archive.close()
    return 0


def _metrics_address(text: str) -> str:
    from aeron_archive_spark.archive.server.metrics import MetricsAddressError, parse_address

    try:
        parse_address(text)
    except MetricsAddressError as ex:
        raise argparse.ArgumentTypeError(f"{ex.reason}: {text!r}") from None
    return text


def _time_index_interval_ns(text: str) -> int:
    from aeron_archive_spark.archive.tables.option_table import parse_duration_ms

    if text.strip().lower() in ("0", "off"):
        return 0
    interval_ms = parse_duration_ms("--time-index-interval", text)
    if interval_ms <= 0:
        raise ValueError(f"option --time-index-interval: must be > 0 or 'off', got {text!r}")
    return interval_ms * 1_000_000


def _open_catalog(archive_dir: str) -> Catalog:
    from aeron_archive_spark.archive.storage.catalog import Catalog

    if not os.path.isfile(os.path.join(archive_dir, c.CATALOG_FILE_NAME)):
        raise SystemExit(f"aeron-archive: no {c.CATALOG_FILE_NAME} in {archive_dir}")
    return Catalog(archive_dir, writable=False)


def _iso_ms(ms: int) -> str:
    """A catalog timestamp (ms since the epoch) as ISO-8601 UTC, to the millisecond."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _cmd_list(args: argparse.Namespace) -> int:
    catalog = _open_catalog(args.dir)
    try:
        descriptors = list(catalog.descriptors())
    finally:
        catalog.close()
    if args.json:
        print(json.dumps([d.to_json_dict() for d in descriptors], indent=2))
        return 0
    header = (
        f"{'id':>6} {'startPosition':>14} {'stopPosition':>14} {'bytes':>14} {'sessionId':>11} {'streamId':>8}  "
        f"{'started':<24} {'stopped':<24} channel"
    )
    print(header)
    for d in descriptors:
        stop = "active" if d.stop_position == c.NULL_POSITION else str(d.stop_position)
        size = "" if d.stop_position == c.NULL_POSITION else str(d.stop_position - d.start_position)
        stopped = "" if d.stop_timestamp == c.NULL_TIMESTAMP else _iso_ms(d.stop_timestamp)
        print(
            f"{d.recording_id:>6} {d.start_position:>14} {stop:>14} {size:>14} {d.session_id:>11} "
            f"{d.stream_id:>8}  {_iso_ms(d.start_timestamp):<24} {stopped:<24} {d.original_channel}"
        )
    return 0


def _cmd_describe(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import segments

    catalog = _open_catalog(args.dir)
    try:
        descriptor = catalog.find(args.recording_id)
    finally:
        catalog.close()
    if descriptor is None:
        raise SystemExit(f"aeron-archive: unknown recording id: {args.recording_id} in {args.dir}")
    info = descriptor.to_json_dict()
    info["segmentFiles"] = [
        {"name": name, "size": os.path.getsize(os.path.join(args.dir, name))}
        for name in segments.list_segment_files(args.dir, args.recording_id)
    ]
    info["startTime"] = _iso_ms(descriptor.start_timestamp)
    info["stopTime"] = None if descriptor.stop_timestamp == c.NULL_TIMESTAMP else _iso_ms(descriptor.stop_timestamp)
    info["timeIndex"] = _time_index_info(args.dir, descriptor)
    print(json.dumps(info, indent=2))
    return 0


def _time_index_info(archive_dir: str, descriptor: RecordingDescriptor) -> dict[str, object] | None:
    """What the recording's time index dates: the positions and recorded times it covers, its bound."""
    from aeron_archive_spark.archive.storage.time_index import read_time_index

    stop = None if descriptor.stop_position == c.NULL_POSITION else descriptor.stop_position
    index = read_time_index(archive_dir, descriptor.recording_id, descriptor.start_position, stop)
    if index.is_empty:
        return None
    return {
        "firstPosition": int(index.positions[0]),
        "firstTime": _iso_ms(int(index.times_ns[0]) // 1_000_000),
        "lastSampleTime": _iso_ms(int(index.times_ns[-1]) // 1_000_000),
        "intervalNs": index.interval_ns,
        "samples": len(index.positions),
    }


def _cmd_verify(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage.checksums import checksum_for_name
    from aeron_archive_spark.archive.storage.verify import verify_archive

    checksum = checksum_for_name(args.checksum) if args.checksum else None
    results = verify_archive(args.dir, fix=args.fix, checksum=checksum)
    failed = 0
    for result in results:
        print(result.summary())
        if not result.ok:
            failed += 1
    print(
        f"verified {len(results)} recording(s): {len(results) - failed} ok, {failed} with problems"
        + (" (fixed)" if args.fix and failed else "")
    )
    return 0 if failed == 0 or args.fix else 1


# Verbs other installed parts add (the Spark connector adds `batches`): `add_subparser(subparsers)` callables
# declared as entry points of this group, so the engine never imports them by name.
CLI_ENTRY_POINTS = "aeron_archive_spark.cli"


def _add_plugin_verbs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for entry in sorted(entry_points(group=CLI_ENTRY_POINTS), key=lambda e: e.name):
        try:
            entry.load()(sub)
        except Exception as ex:  # a broken plug-in must not take the operator's tools down with it
            log.warning("aeron-archive: command %r from %s is unavailable: %s", entry.name, entry.value, ex)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aeron-archive", description=__doc__)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run an archive (embedded media driver unless --aeron-dir)")
    serve.add_argument("--dir", required=True, help="archive directory (catalog and segment files)")
    serve.add_argument("--aeron-dir", help="use the media driver running in this directory instead of embedding one")
    serve.add_argument(
        "--control-channel", default=c.CONTROL_CHANNEL_DEFAULT, help="UDP control request channel ('none' to disable)"
    )
    serve.add_argument("--control-stream-id", type=int, default=c.CONTROL_STREAM_ID_DEFAULT)
    serve.add_argument("--local-control-channel", default=c.LOCAL_CONTROL_CHANNEL_DEFAULT)
    serve.add_argument("--local-control-stream-id", type=int, default=c.LOCAL_CONTROL_STREAM_ID_DEFAULT)
    serve.add_argument("--recording-events", action="store_true", help="publish recording events")
    serve.add_argument("--recording-events-channel", default=c.RECORDING_EVENTS_CHANNEL_DEFAULT)
    serve.add_argument("--recording-events-stream-id", type=int, default=c.RECORDING_EVENTS_STREAM_ID_DEFAULT)
    serve.add_argument("--segment-length", type=_size, default=c.SEGMENT_FILE_LENGTH_DEFAULT)
    serve.add_argument("--file-io-max-length", type=_size, default=c.FILE_IO_MAX_LENGTH_DEFAULT)
    serve.add_argument("--file-sync-level", type=int, choices=(0, 1, 2), default=0)
    serve.add_argument("--catalog-file-sync-level", type=int, choices=(0, 1, 2), default=0)
    serve.add_argument("--record-checksum", help="CRC-32 or CRC-32C: checksum every recorded frame")
    serve.add_argument("--replay-checksum", help="CRC-32 or CRC-32C: verify frames on replay")
    serve.add_argument("--archive-id", type=int)
    serve.add_argument("--max-recordings", type=int, default=c.MAX_CONCURRENT_RECORDINGS_DEFAULT)
    serve.add_argument("--max-replays", type=int, default=c.MAX_CONCURRENT_REPLAYS_DEFAULT)
    serve.add_argument("--low-storage-threshold", type=_size, default=c.LOW_STORAGE_SPACE_THRESHOLD_DEFAULT)
    serve.add_argument(
        "--replication-channel",
        default=c.REPLICATION_CHANNEL_DEFAULT,
        help="where a replication's replays from a source archive come in, unless its request names a channel "
        "(Java's aeron.archive.replication.channel); use this host's address for sources on other hosts",
    )
    serve.add_argument(
        "--replication-response-channel",
        help="where source archives answer this archive's replications (default: IPC for an IPC source, else a "
        "port of its own at the control channel's host)",
    )
    serve.add_argument(
        "--time-index-interval",
        metavar="DURATION",
        default="10ms",
        help="the time index's bound: while data arrives the recorder notes (time, position) at most this often, "
        "so every message's recorded time is known to within it ('off' to keep none; default 10ms)",
    )
    serve.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        type=_metrics_address,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 0.0.0.0:9464; default: none)",
    )
    from aeron_archive_spark.archive.cli import credentials

    credentials.add_arguments(serve)
    from aeron_archive_spark.archive.cli import retention

    retention.add_arguments(serve)
    serve.set_defaults(func=_cmd_serve)

    lst = sub.add_parser("list", help="list recordings from the catalog (offline)")
    lst.add_argument("--dir", required=True)
    lst.add_argument("--json", action="store_true", help="an array of descriptors keyed by Aeron's field names")
    lst.set_defaults(func=_cmd_list)

    describe = sub.add_parser("describe", help="one recording's descriptor and segment files (offline)")
    describe.add_argument("--dir", required=True)
    describe.add_argument("recording_id", type=int)
    describe.set_defaults(func=_cmd_describe)

    verify = sub.add_parser("verify", help="check every recording's frames (offline); --fix truncates torn ends")
    verify.add_argument("--dir", required=True)
    verify.add_argument("--fix", action="store_true")
    verify.add_argument("--checksum", help="CRC-32 or CRC-32C, if the archive recorded checksums")
    verify.set_defaults(func=_cmd_verify)

    from aeron_archive_spark.archive.cli import export, mirror, stats, tail

    export.add_subparser(sub)
    mirror.add_subparser(sub)
    stats.add_subparser(sub)
    tail.add_subparser(sub)
    from aeron_archive_spark.archive.cli import tool

    tool.add_subparser(sub)
    from aeron_archive_spark.archive.cli import mark_file

    mark_file.add_subparser(sub)  # pid, errors; and serve's mark file options
    _add_plugin_verbs(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * args.verbose
    if args.command == "serve":
        level = min(level, logging.INFO)
    logging.basicConfig(
        level=max(level, logging.DEBUG), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from aeron_archive_spark.archive.exceptions import ArchiveError

    func: Callable[[argparse.Namespace], int] = args.func  # set by each subcommand's set_defaults
    try:
        return func(args)
    except (ValueError, ArchiveError) as ex:
        print(f"aeron-archive: {ex}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
