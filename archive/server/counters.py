"""The archive's own Aeron counters (types 101-112), visible to `aeron-archive stats` and to AeronStat."""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive.native import AeronClient, Counter

VERSION_TEXT = "0.1.0"


def fit_label(head: str, text: str, tail: str, max_length: int = c.COUNTER_MAX_LABEL_LENGTH) -> str:
    """`head + text + tail` as a counter label of at most `max_length` bytes, `text` cut to make room.

    The driver's limit is in bytes, and `text` may come from a client (clientInfo, a channel) with characters of
    several bytes each: cutting by characters could overrun the limit, and cutting bytes blindly could split a
    character. Like Java's `putStringWithoutLengthAscii`, characters outside ASCII become '?', so a byte is a
    character and every reader (Java's ASCII label decoder included) sees the same text. `head` and `tail` are
    the archive's own ASCII and are kept whole.
    """
    if not text.isascii():
        text = text.encode("ascii", "replace").decode("ascii")
    room = max(0, max_length - len(head.encode()) - len(tail.encode()))
    return head + text[:room] + tail


@dataclass
class WorkerTotals:
    """Accumulated by a recorder/replayer thread; published to counters only on cycles that did work."""

    max_time_ns: int = 0
    total_bytes: int = 0
    total_time_ns: int = 0


class ArchiveCounters:
    def __init__(self, aeron: AeronClient, archive_id: int, mode: str = "DEDICATED") -> None:
        key = struct.pack("<q", archive_id)
        suffix = f" - archiveId={archive_id}"
        self._lock = threading.Lock()
        add = aeron.add_counter
        self.errors = add(
            c.ARCHIVE_ERROR_COUNT_TYPE_ID,
            key,
            f"Archive Errors - archiveId={archive_id} version={VERSION_TEXT} commit=python",
        )
        self.control_sessions = add(c.ARCHIVE_CONTROL_SESSIONS_TYPE_ID, key, "Archive Control Sessions" + suffix)
        self.recorder_max_write_time = add(
            c.ARCHIVE_RECORDER_MAX_WRITE_TIME_TYPE_ID, key, "archive-recorder max write time in ns" + suffix
        )
        self.recorder_total_write_bytes = add(
            c.ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID, key, "archive-recorder total write bytes" + suffix
        )
        self.recorder_total_write_time = add(
            c.ARCHIVE_RECORDER_TOTAL_WRITE_TIME_TYPE_ID, key, "archive-recorder total write time in ns" + suffix
        )
        self.replayer_max_read_time = add(
            c.ARCHIVE_REPLAYER_MAX_READ_TIME_TYPE_ID, key, "archive-replayer max read time in ns" + suffix
        )
        self.replayer_total_read_bytes = add(
            c.ARCHIVE_REPLAYER_TOTAL_READ_BYTES_TYPE_ID, key, "archive-replayer total read bytes" + suffix
        )
        self.replayer_total_read_time = add(
            c.ARCHIVE_REPLAYER_TOTAL_READ_TIME_TYPE_ID, key, "archive-replayer total read time in ns" + suffix
        )
        self.recording_sessions = add(
            c.ARCHIVE_RECORDING_SESSION_COUNT_TYPE_ID, key, "Archive Recording Sessions" + suffix
        )
        self.replay_sessions = add(c.ARCHIVE_REPLAY_SESSION_COUNT_TYPE_ID, key, "Archive Replay Sessions" + suffix)
        self.max_cycle_time = {
            name: add(c.ARCHIVE_MAX_CYCLE_TIME_TYPE_ID, key, f"archive-{name} max cycle time in ns: {mode}" + suffix)
            for name in ("conductor", "recorder", "replayer")
        }
        self._aeron = aeron
        self._archive_id = archive_id
        self._all: list[Counter] = [
            self.errors,
            self.control_sessions,
            self.recorder_max_write_time,
            self.recorder_total_write_bytes,
            self.recorder_total_write_time,
            self.replayer_max_read_time,
            self.replayer_total_read_bytes,
            self.replayer_total_read_time,
            self.recording_sessions,
            self.replay_sessions,
            *self.max_cycle_time.values(),
        ]

    def add_control_session_counter(self, control_session_id: int, client_info: str, image_session_id: int) -> Counter:
        """One counter per connected client (Aeron 1.49+): key archiveId, controlSessionId; value the id."""
        key = struct.pack("<qq", self._archive_id, control_session_id)
        label = fit_label(
            "control-session: ",
            client_info or "client",
            f" sessionId={image_session_id} - archiveId={self._archive_id}",
        )
        counter = self._aeron.add_counter(c.ARCHIVE_CONTROL_SESSION_TYPE_ID, key, label)
        counter.set(control_session_id)
        return counter

    def increment_errors(self) -> None:
        with self._lock:
            self.errors.set(self.errors.get() + 1)

    def publish_recorder(self, totals: WorkerTotals) -> None:
        self.recorder_max_write_time.set(totals.max_time_ns)
        self.recorder_total_write_bytes.set(totals.total_bytes)
        self.recorder_total_write_time.set(totals.total_time_ns)

    def publish_replayer(self, totals: WorkerTotals) -> None:
        self.replayer_max_read_time.set(totals.max_time_ns)
        self.replayer_total_read_bytes.set(totals.total_bytes)
        self.replayer_total_read_time.set(totals.total_time_ns)

    def close(self) -> None:
        for counter in self._all:
            counter.close()
