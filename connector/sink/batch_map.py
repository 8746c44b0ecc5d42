"""The durable batch id -> [startPosition, stopPosition) map of a sink, and the public API to read it.

A reader of the recording uses it to tell which positions belong to which committed micro-batch (for example to
replay exactly batches 10..20, or to check that a position is committed). Each commit adds one small JSON file
`batches/<batchId:019>.json`, written atomically; every `COMPACT_EVERY` entries they are rolled into one
`batches/<first:019>-<last:019>.jsonl` segment, so a long-running query neither piles up files nor rewrites a
growing file per batch. A crash during compaction leaves entries in both forms; readers take each batch id once.

    from aeron_archive_spark.connector.sink.batch_map import read_batch_map
    for entry in read_batch_map("/chk/aeron-archive-sink"):
        print(entry.batch_id, entry.recording_id, entry.start_position, entry.stop_position)
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.state import atomic_write, atomic_write_json, fsync_dir

log = logging.getLogger(__name__)

BATCHES_DIR = "batches"
COMPACT_EVERY = 1000
_SINGLE = re.compile(r"^(\d{19})\.json$")
_SEGMENT = re.compile(r"^(\d{19})-(\d{19})\.jsonl$")


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One committed batch: its rows occupy [start_position, stop_position) of recording recording_id."""

    batch_id: int
    recording_id: int
    start_position: int
    stop_position: int
    rows: int
    payload_bytes: int
    committed_at: int  # epoch milliseconds

    def to_json(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "recordingId": self.recording_id,
            "startPosition": self.start_position,
            "stopPosition": self.stop_position,
            "rows": self.rows,
            "payloadBytes": self.payload_bytes,
            "committedAt": self.committed_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchEntry:
        return cls(
            int(data["batchId"]),
            int(data["recordingId"]),
            int(data["startPosition"]),
            int(data["stopPosition"]),
            int(data["rows"]),
            int(data["payloadBytes"]),
            int(data["committedAt"]),
        )


def _dir(state_dir: str) -> str:
    return os.path.join(state_dir, BATCHES_DIR)


def _listing(state_dir: str) -> tuple[list[int], list[tuple[int, int]]]:
    """(single entry batch ids, segment (first, last) ranges), both sorted."""
    try:
        names = os.listdir(_dir(state_dir))
    except FileNotFoundError:
        return [], []
    singles: list[int] = []
    segments: list[tuple[int, int]] = []
    for name in names:
        if (m := _SINGLE.match(name)) is not None:
            singles.append(int(m.group(1)))
        elif (m := _SEGMENT.match(name)) is not None:
            segments.append((int(m.group(1)), int(m.group(2))))
    return sorted(singles), sorted(segments)


def _single_path(state_dir: str, batch_id: int) -> str:
    return os.path.join(_dir(state_dir), f"{batch_id:019d}.json")


def _segment_path(state_dir: str, first: int, last: int) -> str:
    return os.path.join(_dir(state_dir), f"{first:019d}-{last:019d}.jsonl")


def _read_single(state_dir: str, batch_id: int) -> BatchEntry:
    path = _single_path(state_dir, batch_id)
    try:
        with open(path, "rb") as f:
            return BatchEntry.from_json(json.loads(f.read()))
    except (ValueError, KeyError) as ex:
        raise SinkError(f"batch map entry {path} is corrupt: {ex}") from None


def _read_segment(state_dir: str, first: int, last: int) -> list[BatchEntry]:
    path = _segment_path(state_dir, first, last)
    try:
        with open(path, "rb") as f:
            return [BatchEntry.from_json(json.loads(line)) for line in f if line.strip()]
    except (ValueError, KeyError) as ex:
        raise SinkError(f"batch map segment {path} is corrupt: {ex}") from None


def read_batch_map(state_dir: str) -> list[BatchEntry]:
    """Every committed batch of the sink whose state is in `state_dir` (its sinkStateDir), by batch id."""
    if not os.path.isdir(state_dir):
        raise FileNotFoundError(f"no sink state directory {state_dir}")
    singles, segments = _listing(state_dir)
    entries: dict[int, BatchEntry] = {}
    for first, last in segments:
        for entry in _read_segment(state_dir, first, last):
            entries[entry.batch_id] = entry
    for batch_id in singles:
        entries[batch_id] = _read_single(state_dir, batch_id)
    return [entries[k] for k in sorted(entries)]


def last_entry(state_dir: str) -> BatchEntry | None:
    """The entry with the highest batch id (reads one file)."""
    singles, segments = _listing(state_dir)
    last_single = singles[-1] if singles else -1
    last_segment = segments[-1] if segments else None
    if last_segment is not None and last_segment[1] > last_single:
        return _read_segment(state_dir, *last_segment)[-1]
    return _read_single(state_dir, last_single) if singles else None


def find_entry(state_dir: str, batch_id: int) -> BatchEntry | None:
    """The entry of `batch_id`, or None if that batch was never committed."""
    if os.path.exists(_single_path(state_dir, batch_id)):
        return _read_single(state_dir, batch_id)
    for first, last in _listing(state_dir)[1]:
        if first <= batch_id <= last:
            return next((e for e in _read_segment(state_dir, first, last) if e.batch_id == batch_id), None)
    return None


def append_entry(state_dir: str, entry: BatchEntry) -> None:
    """Durably record a committed batch (this is the commit point of the sink), then compact if due."""
    directory = _dir(state_dir)
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        fsync_dir(state_dir)
    atomic_write_json(_single_path(state_dir, entry.batch_id), entry.to_json())
    singles, _ = _listing(state_dir)
    if len(singles) >= COMPACT_EVERY:
        compact(state_dir)


def compact(state_dir: str) -> None:
    """Roll the single-entry files into one segment file (written atomically before the singles go)."""
    singles, _ = _listing(state_dir)
    if not singles:
        return
    entries = [_read_single(state_dir, batch_id) for batch_id in singles]
    data = "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in entries).encode()
    atomic_write(_segment_path(state_dir, singles[0], singles[-1]), data)
    for batch_id in singles:
        os.remove(_single_path(state_dir, batch_id))
    fsync_dir(_dir(state_dir))
    log.info("compacted %d batch map entries (%d..%d) in %s", len(singles), singles[0], singles[-1], state_dir)
