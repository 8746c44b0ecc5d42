"""What the cluster topology runs on its hosts besides Spark and the archive server (see topology.py).

`publish`: the live market-data feed of the `publisher` host. SBE `Trade` messages (examples/market_data.xml),
each carrying a sequence number in `tradeId` (1, 2, 3, ... from `--first-seq`), so a test can check that every
message arrived exactly once. It embeds its own media driver (the host has nothing else) and publishes over UDP
to a unicast endpoint on the archive host, at `--rate` messages a second, `--count` of them (0: until stopped).
A message is never skipped: back pressure, a lost connection (e.g. a cut link) and admin actions are retried
with the same message. Its progress goes to `--status-file` (JSON, rewritten a few times a second) so tests can
read how far it got from outside the process.

`start-recording`: asks the archive to record the feed with source location REMOTE (the publisher is on another
host, so the archive subscribes to the channel like any receiver rather than spying on a local publication).
The `aeron-archive` CLI has no verb for it, so it is done here with the project's client.

`recordings`: lists the archive's recordings with their recorded positions as JSON, either through the archive's
own media driver (`--aeron-dir`, on the archive host) or, from any other host, through an embedded driver of
this process over the UDP control channel.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("tests.cluster.publisher")

SCHEMA = Path(__file__).resolve().parents[2] / "examples" / "market_data.xml"
SYMBOLS = ("AAPL", "MSFT", "GOOG", "AMZN", "TSLA")
STATUS_INTERVAL_S = 0.2
# Lateness beyond which the pacer stops catching up (after a stall it resumes the rate rather than bursting).
MAX_CATCH_UP_S = 1.0


def trade_fields(seq: int, timestamp_ns: int) -> dict[str, Any]:
    """The deterministic content of message `seq`: tests can recompute every field but the timestamp."""
    return {
        "symbol": SYMBOLS[seq % len(SYMBOLS)],
        "price_mantissa": (100 + seq % 50) * 100_000_000,
        "quantity": 1 + seq % 100,
        "timestamp_ns": timestamp_ns,
        "trade_id": seq,
        "side": "BUY" if seq % 2 == 0 else "SELL",
    }


class StatusFile:
    """The publisher's progress as one JSON object, replaced atomically so a reader never sees half of it."""

    def __init__(self, path: Path, **fixed: Any) -> None:
        self.path = path
        self.fields: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), **fixed}
        self._written_at = 0.0
        path.parent.mkdir(parents=True, exist_ok=True)

    def update(self, force: bool = False, **fields: Any) -> None:
        self.fields.update(fields)
        now = time.monotonic()
        if not force and now - self._written_at < STATUS_INTERVAL_S:
            return
        self._written_at = now
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.fields, "updatedNs": time.time_ns()}))
        tmp.replace(self.path)


class Publisher:
    """Offers numbered trades on one exclusive publication at a steady rate, never dropping or reordering one."""

    def __init__(self, publication: Any, codec: Any, status: StatusFile, stop: threading.Event) -> None:
        self.publication = publication
        self.codec = codec
        self.status = status
        self.stop = stop

    def offer(self, payload: bytes) -> bool:
        """Offer until accepted (True) or stopped (False); retryable refusals keep the same message."""
        from aeron_archive_spark.archive.native import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED

        while True:
            result = self.publication.offer(payload)
            if result > 0:
                return True
            if result not in (NOT_CONNECTED, BACK_PRESSURED, ADMIN_ACTION):
                raise RuntimeError(f"offer failed with {result} on {self.publication.channel}")
            self.status.update(connected=self.publication.is_connected)
            if self.stop.wait(0.001):
                return False

    def run(self, first_seq: int, count: int, rate: float) -> int:
        """Publish `count` trades (0: until stopped) from `first_seq`; returns the last sequence number sent."""
        interval = 1.0 / rate if rate > 0 else 0.0
        next_at = time.monotonic()
        seq = first_seq - 1
        while not self.stop.is_set() and (count <= 0 or seq - first_seq + 1 < count):
            payload = self.codec.encode("Trade", **trade_fields(seq + 1, time.time_ns()))
            if not self.offer(payload):
                break
            seq += 1
            self.status.update(
                lastSeq=seq,
                published=seq - first_seq + 1,
                position=self.publication.position,
                connected=self.publication.is_connected,
            )
            if interval:
                next_at = max(next_at + interval, time.monotonic() - MAX_CATCH_UP_S)
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.stop.wait(delay)
        return seq


def _stop_on_signals() -> threading.Event:
    """SIGTERM/SIGINT end the publisher cleanly (its publication closed, its driver directory removed)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _cmd_publish(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.codecs.codec import SbeCodec
    from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver

    stop = _stop_on_signals()
    codec = SbeCodec.from_xml(str(args.schema))
    with EmbeddedMediaDriver(args.aeron_dir, dir_delete_on_start=True) as driver:
        client = AeronClient(driver.aeron_dir, client_name="aas-publisher")
        try:
            # Small terms: a recording of a few hundred KiB already spans many terms, so reads split it into
            # many partitions (Spark partitions are whole terms), as a long-running feed's recording would.
            publication = client.add_exclusive_publication(
                f"{args.channel}|term-length={args.term_length}", args.stream_id
            )
            status = StatusFile(
                args.status_file,
                channel=args.channel,
                streamId=args.stream_id,
                sessionId=publication.session_id,
                firstSeq=args.first_seq,
                lastSeq=args.first_seq - 1,
                published=0,
                rate=args.rate,
                count=args.count,
                done=False,
            )
            status.update(force=True, connected=False, position=publication.position)
            log.info("publishing on %s stream %d session %d", args.channel, args.stream_id, publication.session_id)
            last = Publisher(publication, codec, status, stop).run(args.first_seq, args.count, args.rate)
            status.update(force=True, done=True, position=publication.position)
            log.info("published up to sequence %d (position %d)", last, publication.position)
            # Keep the publication (and so the archive's image and recording) alive until told to stop, unless
            # asked to exit; an exiting publisher lingers so the receiver can still pull retransmissions.
            stop.wait(args.linger_s if args.exit_when_done else None)
        finally:
            client.close()
    return 0


@contextlib.contextmanager
def _archive(args: argparse.Namespace) -> Iterator[Any]:
    """A client of the archive, on `--aeron-dir`'s media driver or on one embedded for this call."""
    from aeron_archive_spark.archive import AeronArchive
    from aeron_archive_spark.archive.native import EmbeddedMediaDriver

    with contextlib.ExitStack() as stack:
        aeron_dir = args.aeron_dir
        if aeron_dir is None:
            driver = stack.enter_context(
                EmbeddedMediaDriver(f"/dev/shm/aas-probe-{os.getpid()}", dir_delete_on_start=True)
            )
            aeron_dir = driver.aeron_dir
        archive = AeronArchive.connect(
            aeron_dir=aeron_dir,
            control_request_channel=args.control_channel,
            control_request_stream_id=args.control_stream_id,
            control_response_channel=args.control_response_channel,
            message_timeout_s=args.timeout_s,
        )
        stack.callback(archive.close)
        yield archive


def _cmd_start_recording(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive import SourceLocation

    with _archive(args) as archive:
        subscription_id = archive.start_recording(args.channel, args.stream_id, SourceLocation.REMOTE)
    print(json.dumps({"subscriptionId": subscription_id}))
    return 0


def _cmd_recordings(args: argparse.Namespace) -> int:
    with _archive(args) as archive:
        rows = []
        for descriptor in archive.list_recordings():
            row = descriptor.to_json_dict()
            row["recordedPosition"] = archive.get_max_recorded_position(descriptor.recording_id)
            rows.append(row)
    print(json.dumps(rows))
    return 0


def _add_archive_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--aeron-dir", help="media driver to use (default: embed one for this call)")
    parser.add_argument("--control-channel", default="aeron:ipc", help="the archive's control request channel")
    parser.add_argument("--control-stream-id", type=int, default=10)
    parser.add_argument(
        "--control-response-channel",
        default="aeron:ipc",
        help="over UDP: aeron:udp?endpoint=<this host's address>:0",
    )
    parser.add_argument("--timeout-s", type=float, default=10.0, help="archive message timeout")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    publish = sub.add_parser("publish", help="publish numbered SBE trades")
    publish.add_argument("--channel", required=True, help="e.g. aeron:udp?endpoint=10.77.0.10:40456")
    publish.add_argument("--term-length", default="64k", help="term length of the publication")
    publish.add_argument("--stream-id", type=int, default=1001)
    publish.add_argument("--rate", type=float, default=500.0, help="messages per second (0: as fast as possible)")
    publish.add_argument("--count", type=int, default=0, help="how many messages (0: until stopped)")
    publish.add_argument("--first-seq", type=int, default=1, help="sequence number (tradeId) of the first message")
    publish.add_argument("--status-file", type=Path, default=Path("/tmp/publisher/status.json"))
    publish.add_argument("--aeron-dir", default="/dev/shm/aas-publisher", help="the embedded driver's directory")
    publish.add_argument("--schema", type=Path, default=SCHEMA)
    publish.add_argument("--exit-when-done", action="store_true", help="exit after --count messages")
    publish.add_argument("--linger-s", type=float, default=2.0, help="with --exit-when-done: wait before closing")
    publish.set_defaults(func=_cmd_publish)

    record = sub.add_parser("start-recording", help="record a channel REMOTE on the archive")
    record.add_argument("--channel", required=True)
    record.add_argument("--stream-id", type=int, default=1001)
    _add_archive_arguments(record)
    record.set_defaults(func=_cmd_start_recording)

    recordings = sub.add_parser("recordings", help="the archive's recordings and recorded positions as JSON")
    _add_archive_arguments(recordings)
    recordings.set_defaults(func=_cmd_recordings)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
