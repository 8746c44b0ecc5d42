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

`session`: a client of an archive on this host (through its media driver) driven by JSON lines on stdin, one
answer a line on stdout: replications and their signals, descriptors, segment file digests (test_replication.py).

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
        # The driver sends the closed publication's end of stream from its own threads: receivers that see it end
        # their images (and recordings) at once, rather than after the image liveness timeout.
        time.sleep(args.drain_s)
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


class ArchiveSession:
    """`session`: one client of an archive on this host, driven by JSON lines on stdin (`{"command": ..., **args}`),
    each answered by one line on stdout (`{"result": ...}` or `{"error": ...}`).

    Every recording signal the archive sends is kept (replications report through them), and so is every error
    response that names a correlation id (a replication's failure comes as one, with the replication id).
    """

    def __init__(self, archive: Any, archive_dir: str | None) -> None:
        self.archive = archive
        self.archive_dir = archive_dir
        self.events: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        archive.recording_signal_consumer = self._on_signal

    def _on_signal(self, event: Any) -> None:
        self.events.append(
            {
                "correlationId": event.correlation_id,
                "recordingId": event.recording_id,
                "subscriptionId": event.subscription_id,
                "position": event.position,
                "signal": event.signal.name,
            }
        )

    def poll(self) -> None:
        from aeron_archive_spark.archive.exceptions import ArchiveError

        while True:
            try:
                if self.archive.poll_for_recording_signals() == 0:
                    return
            except ArchiveError as ex:
                self.errors.append({"correlationId": ex.correlation_id, "message": ex.message})

    def _until(self, condition: Any, timeout_s: float) -> bool:
        """Poll signals until `condition()` holds (True) or `timeout_s` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if condition():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    # -- commands ---------------------------------------------------------------------------------------------
    def replicate(
        self, src_recording_id: int, src_control_channel: str, src_control_stream_id: int, **params: Any
    ) -> int:
        from aeron_archive_spark.archive.client import ReplicationParams

        replication_id: int = self.archive.replicate(
            src_recording_id, src_control_stream_id, src_control_channel, ReplicationParams(**params)
        )
        return replication_id

    def tagged_replicate(self, **args: Any) -> int:
        replication_id: int = self.archive.tagged_replicate(**args)
        return replication_id

    def stop_replication(self, replication_id: int) -> None:
        self.archive.stop_replication(replication_id)

    def signals(self, correlation_id: int, until: str | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
        """The signals and errors of `correlation_id` (a replication id) so far, or once `until` has come."""

        def of_it() -> list[dict[str, Any]]:
            return [e for e in self.events if e["correlationId"] == correlation_id]

        arrived = self._until(lambda: until is None or any(e["signal"] == until for e in of_it()), timeout_s)
        errors = [e["message"] for e in self.errors if e["correlationId"] == correlation_id]
        return {"signals": of_it(), "errors": errors, "timedOut": not arrived}

    def start_recording(self, channel: str, stream_id: int) -> int:
        from aeron_archive_spark.archive import SourceLocation

        subscription_id: int = self.archive.start_recording(channel, stream_id, SourceLocation.REMOTE)
        return subscription_id

    def stop_recording_subscription(self, subscription_id: int) -> bool:
        stopped: bool = self.archive.try_stop_recording_subscription(subscription_id)
        return stopped

    def describe(self, recording_id: int) -> dict[str, Any] | None:
        """The descriptor (Aeron's field names), plus `recordingPosition` (-1 unless being recorded)."""
        descriptor = self.archive.list_recording(recording_id)
        if descriptor is None:
            return None
        row: dict[str, Any] = descriptor.to_json_dict()
        row["recordingPosition"] = self.archive.get_recording_position(recording_id)
        return row

    def recordings(self) -> list[dict[str, Any]]:
        return [d.to_json_dict() for d in self.archive.list_recordings(0, 1 << 30)]

    def await_recording(self, stream_id: int, timeout_s: float = 30.0) -> dict[str, Any] | None:
        """The newest recording of `stream_id`, once there is one."""
        found: list[dict[str, Any]] = []

        def begun() -> bool:
            found[:] = [r for r in self.recordings() if r["streamId"] == stream_id]
            return bool(found)

        return found[-1] if self._until(begun, timeout_s) else None

    def await_position(self, recording_id: int, position: int, timeout_s: float = 30.0) -> dict[str, Any] | None:
        """The descriptor once the recording holds `position` (-1: once it has stopped), None after `timeout_s`."""
        described: list[dict[str, Any] | None] = [None]

        def reached() -> bool:
            row = described[0] = self.describe(recording_id)
            if row is None:
                return False
            if position == -1:
                return bool(row["stopPosition"] != -1)
            return bool(max(row["stopPosition"], row["recordingPosition"]) >= position)

        return described[0] if self._until(reached, timeout_s) else None

    def segments(self, recording_id: int, start: int, stop: int) -> dict[str, Any]:
        """The recording's segment files in the archive directory, by base position: each file's length and
        SHA-256, and the SHA-256 of the bytes it holds of [start, stop) (what two copies must share)."""
        import hashlib

        if self.archive_dir is None:
            raise ValueError("the session was started without --archive-dir")
        prefix = f"{recording_id}-"
        files: dict[str, Any] = {}
        for name in sorted(os.listdir(self.archive_dir)):
            if not (name.startswith(prefix) and name.endswith(".rec")):
                continue
            base = int(name[len(prefix) : -len(".rec")])
            data = Path(self.archive_dir, name).read_bytes()
            lo, hi = max(start - base, 0), max(min(stop - base, len(data)), 0)
            files[str(base)] = {
                "length": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "range": [base + lo, base + max(lo, hi)],
                "rangeSha256": hashlib.sha256(data[lo:hi]).hexdigest(),
            }
        return files

    def run(self, lines: Any, out: Any) -> None:
        for line in lines:
            if not line.strip():
                continue
            request = json.loads(line)
            command = request.pop("command")
            try:
                reply = {"result": getattr(self, command)(**request)}
            except Exception as ex:
                log.exception("session command %s failed", command)
                reply = {"error": f"{type(ex).__name__}: {ex}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()


def _cmd_session(args: argparse.Namespace) -> int:
    with _archive(args) as archive:
        print(json.dumps({"result": {"archiveId": archive.archive_id()}}), flush=True)
        ArchiveSession(archive, args.archive_dir).run(sys.stdin, sys.stdout)
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
    publish.add_argument(
        "--drain-s", type=float, default=0.0, help="keep the media driver this long after closing (end of stream)"
    )
    publish.set_defaults(func=_cmd_publish)

    record = sub.add_parser("start-recording", help="record a channel REMOTE on the archive")
    record.add_argument("--channel", required=True)
    record.add_argument("--stream-id", type=int, default=1001)
    _add_archive_arguments(record)
    record.set_defaults(func=_cmd_start_recording)

    recordings = sub.add_parser("recordings", help="the archive's recordings and recorded positions as JSON")
    _add_archive_arguments(recordings)
    recordings.set_defaults(func=_cmd_recordings)

    session = sub.add_parser("session", help="drive a client of the archive with JSON lines on stdin")
    _add_archive_arguments(session)
    session.add_argument("--archive-dir", help="the archive's directory on this host (for `segments`)")
    session.set_defaults(func=_cmd_session)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
