"""`aeron-archive mirror`: keep a destination archive a replica of a source archive (see `archive.client.mirror`)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive.cli import credentials

log = logging.getLogger(__name__)


def add_subparser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mirror = sub.add_parser(
        "mirror",
        help="keep a destination archive a replica of every recording of a source archive (new and live ones too)",
    )
    mirror.add_argument(
        "--source-channel",
        required=True,
        help="the source archive's control channel, as the "
        "destination archive reaches it (e.g. aeron:udp?endpoint=prod-archive:8010)",
    )
    mirror.add_argument("--source-stream-id", type=int, default=c.CONTROL_STREAM_ID_DEFAULT)
    mirror.add_argument(
        "--destination-channel",
        default=c.LOCAL_CONTROL_CHANNEL_DEFAULT,
        help="the destination archive's control channel (default: IPC, an archive on this host)",
    )
    mirror.add_argument("--destination-stream-id", type=int, default=c.LOCAL_CONTROL_STREAM_ID_DEFAULT)
    mirror.add_argument(
        "--response-channel",
        default=c.CONTROL_RESPONSE_CHANNEL_DEFAULT,
        help="where both archives answer this tool (default: a UDP port of its own on localhost; toward an archive "
        "on another host, on this host's address there)",
    )
    mirror.add_argument("--aeron-dir", help="media driver directory (default: $AERON_DIR or Aeron's default)")
    mirror.add_argument("--channel", default="", help="only recordings whose channel contains this")
    mirror.add_argument("--stream-id", type=int, help="only recordings of this stream")
    mirror.add_argument("--replication-channel", help="where replays come in (default: the destination's own)")
    mirror.add_argument("--max-concurrent", type=int, default=4, help="replications running at once")
    mirror.add_argument("--interval", type=float, default=1.0, help="seconds between passes")
    mirror.add_argument(
        "--once",
        action="store_true",
        help="exit once everything is in sync or being recorded (live recordings go on being "
        "replicated by the destination)",
    )
    credentials.add_client_arguments(mirror)
    mirror.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive, RecordingSignalEvent
    from aeron_archive_spark.archive.client.host import localize_channel
    from aeron_archive_spark.archive.client.mirror import Mirror, MirrorSource

    if args.max_concurrent < 1:
        raise SystemExit(f"aeron-archive mirror: --max-concurrent must be at least 1, got {args.max_concurrent}")
    if args.interval <= 0:
        raise SystemExit(f"aeron-archive mirror: --interval must be positive, got {args.interval}")
    secret = credentials.client_secret(args)

    def connect(channel: str, stream_id: int) -> Callable[..., AeronArchive]:
        def open_client(consumer: Callable[[RecordingSignalEvent], None] | None = None) -> AeronArchive:
            return AeronArchive.connect(
                aeron_dir=args.aeron_dir,
                control_request_channel=channel,
                control_request_stream_id=stream_id,
                # localhost (the default's) toward an archive on another host becomes this host's address there
                control_response_channel=localize_channel(args.response_channel, channel),
                client_name="aeron-archive-mirror",
                credentials=secret,
                recording_signal_consumer=consumer,
            )

        return open_client

    mirror = Mirror(
        connect(args.source_channel, args.source_stream_id),
        connect(args.destination_channel, args.destination_stream_id),
        MirrorSource(args.source_channel, args.source_stream_id, args.channel, args.stream_id),
        replication_channel=args.replication_channel,
        max_concurrent=args.max_concurrent,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    log.info(
        "mirroring %s stream %d into %s stream %d",
        args.source_channel,
        args.source_stream_id,
        args.destination_channel,
        args.destination_stream_id,
    )
    mirror.run(stop, args.interval, once=args.once)
    log.info("mirror: %d replications started, %d failed", mirror.started, mirror.failed)
    return 0
