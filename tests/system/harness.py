"""Helpers for system tests: a real archive on the shared embedded driver, a client, publishing and replay capture."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.client.aeron_archive import RecordingSignalEvent
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.server.archive import Archive
from aeron_archive_spark.archive.server.context import ArchiveContext

SMALL_TERM = 64 * 1024
SMALL_SEGMENT = 128 * 1024
_next_control_stream = itertools.count(20_000)


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition",
             poll: Callable[[], Any] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if poll is not None:
            poll()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.001)


@dataclass
class Signals:
    events: list[RecordingSignalEvent] = field(default_factory=list)

    def __call__(self, event: RecordingSignalEvent) -> None:
        self.events.append(event)

    def of(self, signal: RecordingSignal, recording_id: int | None = None) -> list[RecordingSignalEvent]:
        return [e for e in self.events if e.signal == signal and (recording_id is None or e.recording_id == recording_id)]


class Harness:
    """An archive in `archive_dir` on the shared driver, plus IPC-connected clients."""

    def __init__(self, aeron_dir: str, archive_dir: str, connect: bool = True, **ctx: Any) -> None:
        ctx.setdefault("control_channel", None)
        # Each archive gets its own local control stream, so archives of different tests never share requests.
        ctx.setdefault("local_control_stream_id", next(_next_control_stream))
        ctx.setdefault("segment_file_length", SMALL_SEGMENT)
        ctx.setdefault("low_storage_space_threshold", 0)
        self.ctx = ArchiveContext(archive_dir=archive_dir, aeron_dir=aeron_dir, **ctx)
        self.aeron_dir = aeron_dir
        self.archive: Archive | None = Archive.launch(self.ctx)
        self.signals = Signals()
        self.clients: list[AeronArchive] = []
        try:
            self.client = self.connect() if connect else None
        except BaseException:
            self.close()
            raise

    def connect(self, **kwargs: Any) -> AeronArchive:
        kwargs.setdefault("recording_signal_consumer", self.signals)
        client = AeronArchive.connect(
            aeron_dir=self.aeron_dir, control_request_channel=self.ctx.local_control_channel,
            control_request_stream_id=self.ctx.local_control_stream_id, control_response_channel="aeron:ipc",
            **kwargs)
        self.clients.append(client)
        return client

    def await_signal(self, signal: RecordingSignal, recording_id: int | None = None, count: int = 1,
                     timeout: float = 10.0) -> RecordingSignalEvent:
        wait_for(lambda: len(self.signals.of(signal, recording_id)) >= count, timeout,
                 f"{signal.name} signal", poll=self.client.poll_for_recording_signals)
        return self.signals.of(signal, recording_id)[count - 1]

    def restart(self, **overrides: Any) -> None:
        self.close_archive()
        for key, value in overrides.items():
            setattr(self.ctx, key, value)
        self.archive = Archive.launch(self.ctx)
        self.clients.clear()
        self.client = self.connect()

    def close_archive(self) -> None:
        for client in self.clients:
            try:
                client.close()
            except Exception:
                pass
        self.clients.clear()
        if self.archive is not None:
            self.archive.close()
            self.archive = None

    close = close_archive


def offer_all(publication: Any, payloads: Iterable[bytes], timeout: float = 20.0) -> list[tuple[int, int]]:
    """Offer each payload (retrying back pressure); returns each message's (start, end) stream position."""
    spans = []
    start = publication.position
    for payload in payloads:
        deadline = time.monotonic() + timeout
        while True:
            result = publication.offer(payload)
            if result > 0:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"offer failed with {result} for {timeout}s")
            time.sleep(0.0001)
        spans.append((start, result))
        start = result
    return spans


def collect(subscription: Any, count: int, timeout: float = 20.0) -> list[tuple[bytes, int, Any]]:
    """Poll until `count` messages arrived: (payload, end position, header)."""
    got: list[tuple[bytes, int, Any]] = []

    def handler(data: memoryview, header: Any) -> None:
        got.append((bytes(data), header.position, header))

    deadline = time.monotonic() + timeout
    while len(got) < count:
        if subscription.poll(handler, 100) == 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"received {len(got)} of {count} messages within {timeout}s")
            time.sleep(0.0005)
    return got


def payloads_of(sizes: Iterable[int], seed: int = 7) -> list[bytes]:
    import random
    rng = random.Random(seed)
    return [rng.randbytes(n) for n in sizes]


def serve_process(archive_dir: str, control_port: int, *extra: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """`aeron-archive serve` in a process of its own (its own embedded media driver; UDP control on localhost at
    `control_port`), and the JSON line it prints once ready. Kill it with -9 to take an archive down as a crash
    does."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", archive_dir,
         "--control-channel", f"aeron:udp?endpoint=localhost:{control_port}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())
    return proc, ready
