"""Bytes behind latest, per recording, from streaming progress events.

PySpark's Python sources cannot report custom source metrics (`sources[].metrics` is always empty), but progress
carries the source's `endOffset` and, through `reportLatestOffset`, its `latestOffset`; both are
`{"<recordingId>": position}`, so their difference is the lag in recorded bytes, Kafka's `*OffsetsBehindLatest`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger(__name__)


def _positions(text: Any) -> dict[int, int] | None:
    if not text:
        return None
    try:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        return {int(k): int(v) for k, v in data.items()}
    except (TypeError, ValueError, AttributeError):
        return None  # another kind of source


def bytes_behind(latest_offset: Any, end_offset: Any) -> dict[int, int] | None:
    """`{recordingId: latest - end}` (never negative) from two offsets (JSON text or dicts), or None."""
    latest = _positions(latest_offset)
    end = _positions(end_offset)
    if latest is None or end is None:
        return None
    return {rid: max(0, position - end.get(rid, position)) for rid, position in sorted(latest.items())}


class BytesBehindListener(StreamingQueryListener):
    """Tracks, per query, how many recorded bytes each recording is behind its latest position.

    `spark.streams.addListener(listener)`; then `listener.behind(query.id)` gives the last figures, and
    `on_lag(query_id, batch_id, {recordingId: bytes})` (optional) is called for each progress event.
    """

    def __init__(self, on_lag: Callable[[str, int, dict[int, int]], None] | None = None) -> None:
        self._on_lag = on_lag
        self._lock = threading.Lock()
        self._behind: dict[str, dict[int, int]] = {}

    def behind(self, query_id: Any) -> dict[int, int]:
        with self._lock:
            return dict(self._behind.get(str(query_id), {}))

    def total_behind(self, query_id: Any) -> int:
        return sum(self.behind(query_id).values())

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        merged: dict[int, int] = {}
        for source in progress.sources:
            lag = bytes_behind(source.latestOffset, source.endOffset)
            if lag:
                merged.update(lag)
        if not merged and not any(s.latestOffset for s in progress.sources):
            return
        query_id = str(progress.id)
        with self._lock:
            self._behind[query_id] = merged
        log.info("query %s batch %d: bytes behind latest %s", query_id, progress.batchId, merged)
        if self._on_lag is not None:
            self._on_lag(query_id, progress.batchId, merged)


def lag_summary(behind: Mapping[int, int]) -> dict[str, int]:
    """min/max/avg/total bytes behind across recordings (Kafka's *OffsetsBehindLatest, in bytes)."""
    values = list(behind.values())
    if not values:
        return {"min": 0, "max": 0, "avg": 0, "total": 0}
    return {"min": min(values), "max": max(values), "avg": sum(values) // len(values), "total": sum(values)}
