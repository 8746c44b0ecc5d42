"""Fault injection for crash tests: make a write or a commit fail at a chosen point, in a real Spark worker.

Tests cannot monkeypatch code that runs in Spark's Python workers, so faults are armed through a JSON file
(`FAULT_FILE`, a list of specs) in the directory named by the environment variable `FAULT_DIR_ENV`, which the
test sets before its Spark session (and so its workers) start; without the variable the hooks do nothing. The sink
checks for the file with one `os.path.exists` per write task and per commit, so it costs nothing when unused.
Faults of the cluster tests are real ones instead (kill -9 of workers, drivers and the archive). A spec:

    {"point": "write" | "after-stage" | "before-publish" | "after-record-request" | "after-start" | "publish" |
               "before-entry" | "after-entry" | "compact",
     "action": "raise" | "exit",          # exit: os._exit(17), a hard crash of the Python worker
     "afterRows": 500,                    # write/publish: fire once this many rows are staged/published
     "batchId": 3, "partition": 0, "attempt": 0,   # optional filters ("streamId" for after-record-request)
     "once": true}                        # remove the spec when it fires (default true)
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from aeron_archive_spark.connector.sink.errors import InjectedFault

log = logging.getLogger(__name__)

FAULT_FILE = "_inject_faults.json"
FAULT_DIR_ENV = "AERON_ARCHIVE_SPARK_FAULT_DIR"
POINTS = (
    "write",
    "after-stage",
    "before-publish",
    "after-record-request",
    "after-start",
    "publish",
    "before-entry",
    "after-entry",
    "compact",
)


def fault_dir() -> str | None:
    """Where faults are armed ($AERON_ARCHIVE_SPARK_FAULT_DIR), or None: fault injection is off."""
    return os.environ.get(FAULT_DIR_ENV) or None


def fault_path(directory: str) -> str:
    return os.path.join(directory, FAULT_FILE)


def _armed_dir() -> str | None:
    directory = fault_dir()
    return directory if directory is not None and os.path.exists(fault_path(directory)) else None


def arm(*specs: dict[str, Any]) -> None:
    """Add fault specs (tests call this; the directory is shared by the test's executors and driver)."""
    directory = fault_dir()
    if directory is None:
        raise RuntimeError(f"set ${FAULT_DIR_ENV} before the Spark session starts to arm faults")
    for spec in specs:
        if spec.get("point") not in POINTS:
            raise ValueError(f"fault point must be one of {POINTS}, got {spec.get('point')!r}")
    os.makedirs(directory, exist_ok=True)
    with _locked(directory):
        current = _read(directory)
        _write(directory, current + list(specs))


def armed() -> list[dict[str, Any]]:
    """The specs still armed (a test checks that every one fired)."""
    directory = fault_dir()
    return [] if directory is None else _read(directory)


def disarm() -> None:
    directory = fault_dir()
    if directory is None:
        return
    with _locked(directory), suppress(FileNotFoundError):
        os.remove(fault_path(directory))


@contextmanager
def _locked(directory: str) -> Iterator[None]:
    fd = os.open(os.path.join(directory, FAULT_FILE + ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(directory: str) -> list[dict[str, Any]]:
    try:
        with open(fault_path(directory)) as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    return list(data) if isinstance(data, list) else [data]


def _write(directory: str, specs: list[dict[str, Any]]) -> None:
    path = fault_path(directory)
    if not specs:
        with suppress(FileNotFoundError):
            os.remove(path)
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(specs, f)
    os.replace(tmp, path)


def _matches(spec: dict[str, Any], point: str, rows: int, context: dict[str, Any]) -> bool:
    if spec.get("point") != point:
        return False
    if rows < int(spec.get("afterRows", 0)):
        return False
    return all(spec[key] == value for key, value in context.items() if key in spec)


def rows_threshold(point: str, **context: Any) -> int | None:
    """The afterRows of the first armed spec for `point` that matches `context`, or None (no file: no I/O)."""
    directory = _armed_dir()
    if directory is None:
        return None
    for spec in _read(directory):
        if spec.get("point") == point and all(spec[k] == v for k, v in context.items() if k in spec):
            return int(spec.get("afterRows", 0))
    return None


def check(point: str, rows: int = 0, **context: Any) -> None:
    """Fire the first armed spec matching this point, row count and context (raise, or exit the process)."""
    directory = _armed_dir()
    if directory is None:
        return
    with _locked(directory):
        specs = _read(directory)
        fired = next((s for s in specs if _matches(s, point, rows, context)), None)
        if fired is None:
            return
        if fired.get("once", True):
            specs.remove(fired)
            _write(directory, specs)
    log.warning("injected fault %s at %s after %d rows (%s)", fired.get("action", "raise"), point, rows, context)
    if fired.get("action", "raise") == "exit":
        os._exit(17)
    raise InjectedFault(f"injected fault at {point} after {rows} rows ({context})")
