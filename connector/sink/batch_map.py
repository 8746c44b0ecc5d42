"""A sink's batch id -> [startPosition, stopPosition) map entry (read with `connector.sink.read_batch_map`).

A reader of the recording uses it to tell which positions belong to which committed micro-batch (for example to
replay exactly batches 10..20, or to check that a position is committed). The entries are the `commit` records
of the sink's log, a recording in the archive itself (`aeron_archive_spark.connector.sink.log_store`), so any
host that reaches the archive can read them:

    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.connector.sink import read_batch_map

    archive = ConnectionOptions(control_channel="aeron:udp?endpoint=archive-host:8010")
    for entry in read_batch_map(archive, checkpoint_location="hdfs://nn/chk/q1"):
        print(entry.batch_id, entry.recording_id, entry.start_position, entry.stop_position)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
