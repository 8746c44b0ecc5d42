"""The records of a sink log, the sink's durable exactly-once state, and their JSON both ways.

On a cluster nothing the driver can fsync is shared: the checkpoint may be an `hdfs:`/`s3a:` URI that Python
on the driver cannot open, and a query may restart on another host. The archive is a durable log every host can
reach, so the state is a recording there, one per sink: the *sink log*. Each record is one Aeron message
holding one JSON object:

    {"t": "creating", "sessionId", "streamId", "channel", "startedAt"}
    {"t": "target",   "recordingId", "createdBySink", "streamId", "kind", "sink", "createdAt"}
    {"t": "pending",  "batchId", "recordingId", "startPosition", "startedAt", "sessionId" (optional)}
    {"t": "commit",   "batchId", "recordingId", "startPosition", "stopPosition", "rows", "payloadBytes",
                      "committedAt"}
    {"t": "rollback", "batchId", "recordingId", "position"}

and, written by a compaction (`log_lock.HeldLog.compact_if_due`), a new generation's first record and an old
one's last:

    {"t": "snapshot", "count", "records", "previous", "generation", "takenAt"}
    {"t": "moved",    "to", "generation"}

This module holds the record types and their encoding only; their meaning is the fold (`log_state`), the log's
recording is read by `log_store` and written by `log_lock`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError


@dataclass(frozen=True, slots=True)
class SinkTarget:
    """Which recording the sink writes; so restarts extend it without the user passing its id."""

    recording_id: int
    created_by_sink: bool
    stream_id: int
    kind: str  # "stream" (batch ids from Spark) or "batch" (df.write: the next free id per write)
    identity: str
    created_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "t": "target",
            "recordingId": self.recording_id,
            "createdBySink": self.created_by_sink,
            "streamId": self.stream_id,
            "kind": self.kind,
            "sink": self.identity,
            "createdAt": self.created_at,
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> SinkTarget:
        return cls(
            int(record["recordingId"]),
            bool(record["createdBySink"]),
            int(record["streamId"]),
            str(record["kind"]),
            str(record.get("sink", "")),
            int(record.get("createdAt", 0)),
        )


@dataclass(frozen=True, slots=True)
class Creating:
    """A commit is about to start the target's first recording, on a publication of this session id.

    Noted before the archive is asked to record, so that if the commit dies before its `target` record, the next
    commit finds that (empty) recording by session and stream id and adopts it instead of leaving it orphaned.
    """

    session_id: int
    stream_id: int
    channel: str
    started_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "t": "creating",
            "sessionId": self.session_id,
            "streamId": self.stream_id,
            "channel": self.channel,
            "startedAt": self.started_at,
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Creating:
        return cls(
            int(record["sessionId"]),
            int(record["streamId"]),
            str(record.get("channel", "")),
            int(record.get("startedAt", 0)),
        )


@dataclass(frozen=True, slots=True)
class Pending:
    """A commit that started publishing: the recording may hold data past start_position that is not committed.

    `session_id`: the session id of the publication the commit asked the archive to record (0 in logs written
    before it was noted), so that the next commit can stop the archive's subscription for it if the commit died
    after asking and before its publication existed.
    """

    batch_id: int
    recording_id: int
    start_position: int
    started_at: int
    session_id: int = 0

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "t": "pending",
            "batchId": self.batch_id,
            "recordingId": self.recording_id,
            "startPosition": self.start_position,
            "startedAt": self.started_at,
        }
        if self.session_id:
            record["sessionId"] = self.session_id
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Pending:
        return cls(
            int(record["batchId"]),
            int(record["recordingId"]),
            int(record["startPosition"]),
            int(record.get("startedAt", 0)),
            int(record.get("sessionId", 0)),
        )


def rollback_record(pending: Pending) -> dict[str, Any]:
    return {
        "t": "rollback",
        "batchId": pending.batch_id,
        "recordingId": pending.recording_id,
        "position": pending.start_position,
    }


def commit_record(entry: BatchEntry) -> dict[str, Any]:
    return {"t": "commit", **entry.to_json()}


def snapshot_record(count: int, records: int, previous: int, generation: int, taken_at: int) -> dict[str, Any]:
    """A compacted generation's first record: `count` batches came before the `records` records that follow."""
    return {
        "t": "snapshot",
        "count": count,
        "records": records,
        "previous": previous,
        "generation": generation,
        "takenAt": taken_at,
    }


def moved_record(to: int, generation: int) -> dict[str, Any]:
    """A compacted generation's last record: the log goes on in recording `to`."""
    return {"t": "moved", "to": to, "generation": generation}


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as the payload of one Aeron message."""
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def decode_record(value: bytes, where: str) -> dict[str, Any]:
    """One message's payload as a record; SinkError naming `where` if it is no JSON object."""
    try:
        record = json.loads(value)
    except ValueError as ex:
        raise SinkError(f"damaged record in {where}: {value[:80]!r} ({ex})") from None
    if not isinstance(record, dict):
        raise SinkError(f"damaged record in {where}: {value[:80]!r} is not a JSON object")
    return record
