"""The sink's durable state directory: which recording it writes, the commit in flight, a commit lock.

Layout of `sinkStateDir`:

    sink.json      {"version", "recordingId", "createdBySink", "streamId", "kind", "queryId", "createdAt"}
    pending.json   {"batchId", "recordingId", "startPosition", "startedAt"}: present only while a commit
                   publishes; a crash leaves it behind, and the next commit truncates the recording back to
                   startPosition before redoing the batch
    batches/       the batch id -> positions map (`aeron_archive_spark.connector.sink.batch_map`)
    staging/       staged Arrow files (default stagingLocation)
    lock           flock'd for the whole of a commit, so two committers never interleave

Every file is replaced atomically: written to a temporary name, fsynced, renamed, and the directory fsynced, so a
crash leaves either the old or the new content, never a torn one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aeron_archive_spark.connector.sink.errors import SinkError

log = logging.getLogger(__name__)

STATE_FILE = "sink.json"
PENDING_FILE = "pending.json"
LOCK_FILE = "lock"
STATE_VERSION = 1


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as ex:  # some filesystems refuse fsync on directories
        if ex.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Write, fsync, rename over `path`, fsync the directory."""
    directory = os.path.dirname(path)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def atomic_write_json(path: str, value: Any) -> None:
    atomic_write(path, (json.dumps(value, sort_keys=True) + "\n").encode())


def remove_durably(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    fsync_dir(os.path.dirname(path))


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None
    except ValueError as ex:
        raise SinkError(
            f"sink state file {path} is corrupt ({ex}); it was written atomically, so something else modified it"
        ) from None


@dataclass(frozen=True, slots=True)
class SinkState:
    """Which recording this sink writes; kept so restarts extend it without the user passing its id."""

    recording_id: int
    created_by_sink: bool
    stream_id: int
    kind: str  # "stream" (batch ids from Spark) or "batch" (df.write: the next free id per write)
    query_id: str | None
    created_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "recordingId": self.recording_id,
            "createdBySink": self.created_by_sink,
            "streamId": self.stream_id,
            "kind": self.kind,
            "queryId": self.query_id,
            "createdAt": self.created_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SinkState:
        return cls(
            int(data["recordingId"]),
            bool(data["createdBySink"]),
            int(data["streamId"]),
            str(data["kind"]),
            data.get("queryId"),
            int(data.get("createdAt", 0)),
        )


@dataclass(frozen=True, slots=True)
class Pending:
    """A commit that started publishing: the recording may hold data past start_position that is not committed."""

    batch_id: int
    recording_id: int
    start_position: int
    started_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "recordingId": self.recording_id,
            "startPosition": self.start_position,
            "startedAt": self.started_at,
        }


def load_state(state_dir: str) -> SinkState | None:
    data = read_json(os.path.join(state_dir, STATE_FILE))
    return None if data is None else SinkState.from_json(data)


def save_state(state_dir: str, state: SinkState) -> None:
    atomic_write_json(os.path.join(state_dir, STATE_FILE), state.to_json())


def load_pending(state_dir: str) -> Pending | None:
    data = read_json(os.path.join(state_dir, PENDING_FILE))
    if data is None:
        return None
    return Pending(
        int(data["batchId"]), int(data["recordingId"]), int(data["startPosition"]), int(data.get("startedAt", 0))
    )


def save_pending(state_dir: str, pending: Pending) -> None:
    atomic_write_json(os.path.join(state_dir, PENDING_FILE), pending.to_json())


def clear_pending(state_dir: str) -> None:
    remove_durably(os.path.join(state_dir, PENDING_FILE))


def query_id_of(checkpoint_location: str | None) -> str | None:
    """The streaming query id Spark keeps in `<checkpoint>/metadata`, if readable."""
    if checkpoint_location is None:
        return None
    try:
        with open(os.path.join(checkpoint_location, "metadata")) as f:
            return str(json.loads(f.readline())["id"])
    except (OSError, ValueError, KeyError):
        return None


@contextmanager
def state_lock(state_dir: str, timeout_s: float) -> Iterator[None]:
    """Exclusive lock on the state directory for one commit (flock: released if the process dies)."""
    os.makedirs(state_dir, exist_ok=True)
    fd = os.open(os.path.join(state_dir, LOCK_FILE), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SinkError(
                        f"sinkStateDir {state_dir} is locked by another commit for more than "
                        f"{timeout_s:.0f}s: is a second query writing with the same state?"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)
