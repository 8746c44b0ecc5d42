"""The state of a sink log: the fold of its records (`LogState.apply`), pure, no archive and no I/O.

The state is the target recording, the commit in flight (a `pending` without its `commit` or `rollback`), and
the batch map (the `commit` records: the last one, a count, the last RECENT_ENTRIES by batch id, and all of them
only when asked for). A compacted generation starts with a `snapshot` record saying how many records follow: until
they have all been folded the state is not `complete`, so a generation whose writer died mid-snapshot is never
taken for the log; an old generation ends with `moved` (`moved_to`: its successor). Records of a type this version
does not know are skipped with a warning; a known record without its fields is a SinkError naming the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_records import Creating, Pending, SinkTarget, commit_record, snapshot_record

log = logging.getLogger(__name__)

# How many recent batch map entries a commit keeps in memory (a re-commit after a crash asks for the last one);
# also how many a compacted log carries over.
RECENT_ENTRIES = 1000


@dataclass
class LogState:
    """The fold of a sink log's records; `entries` only when asked for (a long-running query has many)."""

    target: SinkTarget | None = None
    creating: Creating | None = None
    pending: Pending | None = None
    last: BatchEntry | None = None
    count: int = 0
    recent: dict[int, BatchEntry] = field(default_factory=dict)
    entries: list[BatchEntry] | None = None
    moved_to: int | None = None  # this log was compacted into that recording (a newer generation)
    expected: int = 0  # records of a snapshot still to come: a log whose snapshot is cut short is incomplete

    @property
    def complete(self) -> bool:
        """False for a compacted log whose writer died before its snapshot was whole: it must not be used."""
        return self.expected == 0

    def apply(self, record: dict[str, Any], where: str) -> None:
        try:
            kind = record["t"]
            if self.expected > 0 and kind != "snapshot":
                self.expected -= 1
            if kind == "snapshot":
                self.count = int(record["count"])
                self.expected = int(record["records"])
            elif kind == "moved":
                self.moved_to = int(record["to"])
            elif kind == "target":
                self.target = SinkTarget.from_json(record)
                self.creating = None
            elif kind == "creating":
                self.creating = Creating.from_json(record)
            elif kind == "pending":
                self.pending = Pending.from_json(record)
            elif kind == "commit":
                entry = BatchEntry.from_json(record)
                self.last = entry
                self.count += 1
                self.recent[entry.batch_id] = entry
                if len(self.recent) > RECENT_ENTRIES:
                    del self.recent[min(self.recent)]
                if self.entries is not None:
                    self.entries.append(entry)
                if self.pending is not None and self.pending.batch_id == entry.batch_id:
                    self.pending = None
            elif kind == "rollback":
                if self.pending is not None and self.pending.batch_id == int(record["batchId"]):
                    self.pending = None
            else:
                log.warning("unknown record type %r in %s: ignored (written by a newer version?)", kind, where)
        except (KeyError, TypeError, ValueError) as ex:
            raise SinkError(f"damaged record in {where}: {record!r} ({ex})") from None

    def find(self, batch_id: int) -> BatchEntry | None:
        found = self.recent.get(batch_id)
        if found is None and self.entries is not None:
            found = next((e for e in self.entries if e.batch_id == batch_id), None)
        return found

    def copy(self) -> LogState:
        return replace(self, recent=dict(self.recent), entries=None if self.entries is None else list(self.entries))

    def snapshot(self, previous: int, generation: int, taken_at: int) -> list[dict[str, Any]]:
        """The records that start generation `generation` of this log (compacted from recording `previous`).

        A `snapshot` record saying how many records follow and how many batches came before them, then the
        target, any `creating`, the recent `commit` records by batch id, and any `pending`: folded, they give the
        same target, commit in flight, count, last and recent entries as this state.
        """
        body: list[dict[str, Any]] = []
        if self.target is not None:
            body.append(self.target.to_json())
        if self.creating is not None:
            body.append(self.creating.to_json())
        body += [commit_record(e) for e in sorted(self.recent.values(), key=lambda e: e.batch_id)]
        if self.pending is not None:
            body.append(self.pending.to_json())
        head = snapshot_record(self.count - len(self.recent), len(body), previous, generation, taken_at)
        return [head, *body]
