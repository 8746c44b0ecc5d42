"""Sink logs in the archive: finding them, reading and folding their records (cached per process), the read API.

`read_sink`, `read_sinks` and `read_batch_map` are what operators and the `batches` command read; the commit
folds its log with `fold_log` once it holds it (`log_lock`).

A sink's log recordings are found by their channel alias (`log_identity`). Within a generation the lowest
matching recording id is the log (two committers racing to create one: the later one backs off); across
generations, the current log is the newest whose snapshot is whole (`generations`, then `LogState.complete`), so
what a fresh process folds stays bounded. Reading replays the log from the archive (no shared disk needed) from
the position a process has already folded (cached per process: Spark reuses its commit worker), so a commit reads
only what other hosts appended since.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.replay import ReplayReader, ReplaySpan, read_messages
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_identity import (
    ALIAS_PREFIX,
    SINK_LOG_STREAM_ID,
    log_alias,
    log_id_of,
    sink_identity,
    sink_key,
)
from aeron_archive_spark.connector.sink.log_records import decode_record
from aeron_archive_spark.connector.sink.log_state import LogState

# -- finding and reading ---------------------------------------------------------------------------------------------

# A log's records are a few hundred bytes; a snapshot a few MiB at most. Chunks of this size read either in a few.
LOG_CHUNK_LENGTH = 1024 * 1024


def find_logs(archive: AeronArchive, key: str | None = None) -> list[RecordingDescriptor]:
    """Sink log recordings in the archive (of one key, or all), lowest recording id first."""
    fragment = log_alias(key) if key is not None else ALIAS_PREFIX
    found = archive.list_recordings_for_uri(0, 1 << 30, fragment, SINK_LOG_STREAM_ID)
    return sorted(found, key=lambda d: d.recording_id)


def generations(descriptors: list[RecordingDescriptor]) -> dict[str, list[tuple[int, RecordingDescriptor]]]:
    """Log recordings by key, each list newest generation first (lowest recording id first within one).

    The current log of a sink is the first of its list whose fold is complete: a newer generation supersedes an
    older one once its snapshot is whole, and within a generation the lowest id won the race to create it.
    """
    by_key: dict[str, list[tuple[int, RecordingDescriptor]]] = {}
    for descriptor in descriptors:
        found = log_id_of(descriptor)
        if found is not None:
            by_key.setdefault(found[0], []).append((found[1], descriptor))
    for listed in by_key.values():
        listed.sort(key=lambda g: (-g[0], g[1].recording_id))
    return by_key


def read_records(
    connection: ConnectionOptions, descriptor: RecordingDescriptor, start: int, stop: int
) -> Iterator[dict[str, Any]]:
    """The records of a log recording in `[start, stop)`, replayed from the archive (no shared disk needed)."""
    if stop <= start:
        return
    span = ReplaySpan(
        connection=connection,
        recording_id=descriptor.recording_id,
        session_id=descriptor.session_id,
        stream_id=descriptor.stream_id,
        term_length=descriptor.term_buffer_length,
        start=start,
        end=stop,
        limit=stop,
    )
    where = f"sink log recording {descriptor.recording_id}"
    for _position, value in read_messages(ReplayReader(LOG_CHUNK_LENGTH), span):
        yield decode_record(value, where)


def read_state(
    connection: ConnectionOptions, descriptor: RecordingDescriptor, stop: int, with_entries: bool = False
) -> LogState:
    """The state of a log folded up to `stop` (its stop position, or what is recorded of an active one)."""
    state = LogState(entries=[] if with_entries else None)
    for record in read_records(connection, descriptor, descriptor.start_position, stop):
        state.apply(record, f"sink log recording {descriptor.recording_id}")
    return state


# -- what a process has folded -----------------------------------------------------------------------------------

# Per process: (log recording id, position folded up to, state), so a reused commit worker reads only the tail.
_cache: dict[str, tuple[int, int, LogState]] = {}
_cache_lock = threading.Lock()


def fold_log(connection: ConnectionOptions, key: str, descriptor: RecordingDescriptor, where: str) -> LogState:
    """The state of a stopped log recording: what this process folded of it before, plus the records since."""
    start, state = _cached(key, descriptor)
    for record in read_records(connection, descriptor, start, descriptor.stop_position):
        state.apply(record, where)
    remember(key, descriptor.recording_id, descriptor.stop_position, state)
    return state


def _cached(key: str, descriptor: RecordingDescriptor) -> tuple[int, LogState]:
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == descriptor.recording_id and hit[1] <= descriptor.stop_position:
        return hit[1], hit[2].copy()
    return descriptor.start_position, LogState()


def remember(key: str, recording_id: int, position: int, state: LogState) -> None:
    """Note the state of a sink's log recording folded up to `position` (a copy: the caller goes on folding)."""
    with _cache_lock:
        _cache[key] = (recording_id, position, state.copy())


def forget(key: str) -> None:
    """Drop what this process folded of a sink's log (the log moved on in a way the cache cannot follow)."""
    with _cache_lock:
        _cache.pop(key, None)


# -- what operators read -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SinkView:
    """What an operator sees of one sink: its log recording, target, pending commit and batch map."""

    log_recording_id: int
    key: str
    state: LogState

    @property
    def entries(self) -> list[BatchEntry] | None:
        return self.state.entries


def read_sink(
    connection: ConnectionOptions,
    checkpoint_location: str | None = None,
    recording_id: int | None = None,
    channel: str | None = None,
    stream_id: int | None = None,
) -> SinkView:
    """One sink's state (batch map included), named by its checkpoint location or its batch write target."""
    if checkpoint_location is not None:
        identity = sink_identity(True, checkpoint_location, None, None, None)
    elif recording_id is not None or (channel is not None and stream_id is not None):
        identity = sink_identity(False, None, recording_id, channel, stream_id)
    else:
        raise ValueError("name the sink: checkpoint_location, recording_id, or channel and stream_id")
    key = sink_key(identity)
    views = read_sinks(connection, key)
    if not views:
        raise SinkError(f"no sink log for {identity} in the {connection.describe()}")
    return views[0]


def read_batch_map(
    connection: ConnectionOptions,
    *,
    checkpoint_location: str | None = None,
    recording_id: int | None = None,
    channel: str | None = None,
    stream_id: int | None = None,
) -> list[BatchEntry]:
    """Every committed batch of one sink, by batch id, read from its log in the archive at `connection`.

    Name the sink as it was written: a stream by its query's `checkpoint_location` (the option value as Spark
    passed it), a batch write by its target (`recording_id`, or `channel` and `stream_id`).
    """
    return read_sink(connection, checkpoint_location, recording_id, channel, stream_id).entries or []


def read_sinks(connection: ConnectionOptions, key: str | None = None) -> list[SinkView]:
    """Every sink log in the archive (or those of one key), with their batch maps."""
    from aeron_archive_spark.archive.client.host import requires_host_driver
    from aeron_archive_spark.archive.client.pool import connection_pool

    views: list[SinkView] = []
    lease = connection_pool().archive(
        connection, purpose="sink-reader", host_driver_only=requires_host_driver(connection)
    )
    with lease as archive:
        for found_key, listed in generations(find_logs(archive, key)).items():
            for _generation, descriptor in listed:
                stop = descriptor.stop_position
                if stop < 0:  # a commit holds it: read what is recorded so far
                    stop = archive.get_recording_position(descriptor.recording_id)
                if stop < 0:  # it stopped since it was listed (a commit released or abandoned it)
                    stop = archive.get_stop_position(descriptor.recording_id)
                stop = max(stop, descriptor.start_position)
                state = read_state(connection, descriptor, stop, True)
                if state.complete:  # else a compaction died mid-snapshot: the generation before it holds the state
                    views.append(SinkView(descriptor.recording_id, found_key, state))
                    break
    views.sort(key=lambda v: v.log_recording_id)
    return views
