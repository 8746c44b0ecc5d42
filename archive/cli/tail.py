"""`aeron-archive tail ID`: print a recording's messages as they are recorded, through a follow replay."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive.cli import credentials
from aeron_archive_spark.archive.client.connection import REPLAY_CHANNEL_DEFAULT_IPC
from aeron_archive_spark.archive.tables.option_table import parse_timestamp_ms

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
    from aeron_archive_spark.archive.native import HeaderValues


def _render(data: memoryview, position: int, fmt: str, limit: int) -> str:
    raw = bytes(data[:limit])
    more = "…" if len(data) > limit else ""
    if fmt == "json":
        return json.dumps({"position": position, "length": len(data), "hex": bytes(data).hex()})
    if fmt == "text":
        return f"{position:>14} {len(data):>8}  {raw.decode('utf-8', 'replace')}{more}"
    return f"{position:>14} {len(data):>8}  {raw.hex(' ')}{more}"


# How long after a `--to` time to settle it: more than the time index's default 10 ms bound and a recorder cycle.
_TO_MARGIN_NS = 50_000_000


def _end_at(client: AeronArchive, recording_id: int, to_ns: int, passed: bool = False) -> int | None:
    """The position before which messages were recorded before `to_ns`; None while that is not known yet (the time
    is still to come). Once it has `passed`, a time no message reached ends at the recorded position, read before
    the index is asked: every byte below it was dated (sampled) before it was counted as recorded."""
    recorded = client.get_recording_position(recording_id) if passed else c.NULL_POSITION
    at = client.position_at_time(recording_id, to_ns)
    if at != c.NULL_POSITION:
        return int(at)
    if not passed:
        return None
    if recorded == c.NULL_POSITION:  # stopped meanwhile
        recorded = client.get_stop_position(recording_id)
    return int(recorded)


def add_subparser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tail = sub.add_parser("tail", help="print a recording's messages as they are recorded (follow replay)")
    tail.add_argument("recording_id", type=int)
    tail.add_argument("--aeron-dir", help="media driver directory (default: $AERON_DIR or Aeron's default)")
    tail.add_argument("--control-channel", default=c.LOCAL_CONTROL_CHANNEL_DEFAULT)
    tail.add_argument("--control-stream-id", type=int, default=c.LOCAL_CONTROL_STREAM_ID_DEFAULT)
    tail.add_argument("--response-channel", default=c.LOCAL_CONTROL_CHANNEL_DEFAULT)  # IPC, as the control channel
    tail.add_argument("--replay-channel", default=REPLAY_CHANNEL_DEFAULT_IPC)
    tail.add_argument("--replay-stream-id", type=int, default=0x7A11)
    tail.add_argument("--from-start", action="store_true", help="replay history first (default: only new messages)")
    tail.add_argument(
        "--from",
        dest="from_time",
        metavar="TIME",
        help="start at the first message recorded at or after this time (ms since the epoch, or ISO-8601 with a "
        "zone), by the archive's time index",
    )
    tail.add_argument(
        "--to",
        dest="to_time",
        metavar="TIME",
        help="stop before the first message recorded at or after this time (a time to come: when it has passed)",
    )
    tail.add_argument("--format", choices=("hex", "text", "json"), default="hex")
    tail.add_argument("--max-bytes", type=int, default=64, help="bytes of each message to print")
    tail.add_argument("-n", "--count", type=int, default=0, help="stop after N messages (0: until interrupted)")
    credentials.add_client_arguments(tail)
    tail.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
    from aeron_archive_spark.archive.exceptions import ArchiveError

    client = AeronArchive.connect(
        aeron_dir=args.aeron_dir,
        control_request_channel=args.control_channel,
        control_request_stream_id=args.control_stream_id,
        control_response_channel=args.response_channel,
        client_name="aeron-archive-tail",
        credentials=credentials.client_secret(args),
    )
    try:
        descriptor = client.list_recording(args.recording_id)
        if descriptor is None:
            raise ArchiveError(f"unknown recording id: {args.recording_id}")
        live = client.get_recording_position(args.recording_id)
        recorded = live if live != c.NULL_POSITION else descriptor.stop_position
        to_ns = None if args.to_time is None else parse_timestamp_ms("--to", args.to_time) * 1_000_000
        if args.from_time is not None:
            at = client.position_at_time(args.recording_id, parse_timestamp_ms("--from", args.from_time) * 1_000_000)
            position = recorded if at == c.NULL_POSITION else at
        elif args.from_start:
            position = descriptor.start_position
        else:
            position = recorded
        end = _end_at(client, args.recording_id, to_ns) if to_ns is not None else None
        stopped = descriptor.stop_position != c.NULL_POSITION and position >= descriptor.stop_position
        if stopped:
            print(
                f"recording {args.recording_id} is stopped at {descriptor.stop_position}; nothing to tail "
                "(use --from-start to print its history)",
                file=sys.stderr,
            )
            return 0
        subscription = client.replay(
            args.recording_id,
            args.replay_channel,
            args.replay_stream_id,
            position=position,
            length=c.REPLAY_ALL_AND_FOLLOW,
        )
        printed = 0
        reached = position  # where the next message begins

        def on_message(data: memoryview, header: HeaderValues) -> None:
            nonlocal printed, reached
            if end is not None and header.start_position >= end:
                reached = end
                return
            print(_render(data, header.start_position, args.format, args.max_bytes), flush=True)
            printed += 1
            reached = header.position

        try:
            while args.count == 0 or printed < args.count:
                if end is None and to_ns is not None and time.time_ns() >= to_ns + _TO_MARGIN_NS:
                    end = _end_at(client, args.recording_id, to_ns, passed=True)
                if end is not None and reached >= end:
                    break  # every message recorded before --to is printed
                if subscription.poll(on_message, min(100, args.count - printed) if args.count else 100) == 0:
                    images = subscription.images()
                    if images and all(i.is_end_of_stream for i in images):
                        break  # the recording stopped: a follow replay ends with it
                    time.sleep(0.001)
        except KeyboardInterrupt:
            pass
        finally:
            subscription.close()
        return 0
    finally:
        client.close()
