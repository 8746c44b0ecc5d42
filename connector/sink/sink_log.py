"""The sink's durable exactly-once state, kept in the archive itself as a recording of JSON records.

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

The state is the fold of the records (`LogState`): the target recording, the commit in flight (a `pending`
without its `commit` or `rollback`), and the batch map. A sink finds its log by the `alias` of the log's channel,
`aeron-archive-spark-sink:<key>` on stream `SINK_LOG_STREAM_ID`, with `<key>` a digest of what identifies the
sink across restarts and hosts (`sink_identity`): the query's checkpointLocation for a stream, the target for a
batch write. The lowest matching recording id is the log (two committers racing to create one: the later one
backs off).

Owning the log is the commit lock. A committer extends the (stopped) log recording and keeps it recording for
the whole commit; the archive refuses a second extend of an active recording, so two committers never
interleave, and a committer that dies releases the lock when its publication's image goes away (the archive
then stops the recording). Records are appended on that publication and each waits until the archive has
recorded it, so a record is durable before the step it announces begins. Reading replays the log from the
position a process has already folded (cached per process: Spark reuses its commit worker), so a commit reads
only what other hosts appended since.

A log grown past COMPACT_AFTER_BYTES is compacted (`HeldLog.compact_if_due`) into its next generation, a new
recording whose alias ends in `.<generation>`, starting with a `snapshot` record and the state carried over; the
old one ends with a `moved` record and is purged. The current log is the newest generation whose snapshot is
whole (`generations`), so what a fresh process folds, and what the log keeps on disk, stays bounded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.native import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts
from aeron_archive_spark.archive.tables.read import read_batches
from aeron_archive_spark.archive.tables.schema import row_schema
from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.archive_ops import SESSION_PARAMS, ArchiveOps, OpenRecording
from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError

log = logging.getLogger(__name__)

# The stream id of every sink log ("aeron" in ASCII): a reader matching the target's channel and stream id
# never matches a log, whose channel alias also names it.
SINK_LOG_STREAM_ID = 0x6165_726F
ALIAS_PREFIX = "aeron-archive-spark-sink:"
LOG_TERM_LENGTH = 64 * 1024
KEY_LENGTH = 24
# How many recent batch map entries a commit keeps in memory (a re-commit after a crash asks for the last one);
# also how many a compacted log carries over.
RECENT_ENTRIES = 1000
# A log grown past this many bytes is compacted at the end of a commit: a new generation starts with a snapshot
# (the target and the last RECENT_ENTRIES batches), so a fresh process folds a bounded log, and the old one is
# purged. ~0.5 KB per batch: about 16,000 batches per generation.
COMPACT_AFTER_BYTES = 8 << 20


# -- identity ----------------------------------------------------------------------------------------------------


def sink_identity(
    streaming: bool,
    checkpoint_location: str | None,
    recording_id: int | None,
    channel: str | None,
    stream_id: int | None,
) -> str:
    """What identifies a sink across restarts and hosts, as text shown to operators.

    A stream: its checkpointLocation (a restart on another host gives the same location: Spark's checkpoint is
    the query's identity). A batch write: its target (the recording, or channel and stream), so every write to
    the same target shares one log and one batch map, and a write repairs what a crashed one left.
    """
    if streaming:
        if not checkpoint_location:
            raise SinkError("a streaming aeron-archive sink needs the query's checkpointLocation")
        return f"checkpoint {checkpoint_location.rstrip('/')}"
    if recording_id is not None:
        return f"recording {recording_id}"
    from aeron_archive_spark.archive.channel import strip_channel

    assert channel is not None and stream_id is not None
    return f"channel {strip_channel(channel)} stream {stream_id}"


def sink_key(identity: str) -> str:
    """A fixed-length digest of the identity: never a prefix of another key, and no path in the alias."""
    return hashlib.sha256(identity.encode()).hexdigest()[:KEY_LENGTH]


def log_alias(key: str, generation: int = 0) -> str:
    """The alias of generation `generation` of a sink's log (the first keeps the plain alias of earlier versions)."""
    return ALIAS_PREFIX + key + (f".{generation}" if generation else "")


# -- records and state ---------------------------------------------------------------------------------------------


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


def rollback_record(pending: Pending) -> dict[str, Any]:
    return {
        "t": "rollback",
        "batchId": pending.batch_id,
        "recordingId": pending.recording_id,
        "position": pending.start_position,
    }


def commit_record(entry: BatchEntry) -> dict[str, Any]:
    return {"t": "commit", **entry.to_json()}


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
                self.target = SinkTarget(
                    int(record["recordingId"]),
                    bool(record["createdBySink"]),
                    int(record["streamId"]),
                    str(record["kind"]),
                    str(record.get("sink", "")),
                    int(record.get("createdAt", 0)),
                )
                self.creating = None
            elif kind == "creating":
                self.creating = Creating(
                    int(record["sessionId"]),
                    int(record["streamId"]),
                    str(record.get("channel", "")),
                    int(record.get("startedAt", 0)),
                )
            elif kind == "pending":
                self.pending = Pending(
                    int(record["batchId"]),
                    int(record["recordingId"]),
                    int(record["startPosition"]),
                    int(record.get("startedAt", 0)),
                    int(record.get("sessionId", 0)),
                )
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


# -- finding and reading ---------------------------------------------------------------------------------------------


def find_logs(archive: AeronArchive, key: str | None = None) -> list[RecordingDescriptor]:
    """Sink log recordings in the archive (of one key, or all), lowest recording id first."""
    fragment = log_alias(key) if key is not None else ALIAS_PREFIX
    found = archive.list_recordings_for_uri(0, 1 << 30, fragment, SINK_LOG_STREAM_ID)
    return sorted(found, key=lambda d: d.recording_id)


def log_id_of(descriptor: RecordingDescriptor) -> tuple[str, int] | None:
    """(key, generation) in a log recording's channel alias, or None if it is not a sink log."""
    try:
        alias = ChannelUri.parse(descriptor.stripped_channel).get("alias") or ""
    except Exception:
        return None
    if not alias.startswith(ALIAS_PREFIX):
        return None
    key, _, generation = alias[len(ALIAS_PREFIX) :].partition(".")
    if len(key) != KEY_LENGTH:
        return None
    try:
        return key, int(generation) if generation else 0
    except ValueError:
        return None


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
    read_range = ReadRange(0, RecordingFacts.of(descriptor), start, stop, stop, None, connection)
    where = f"sink log recording {descriptor.recording_id}"
    for batch in read_batches(read_range, row_schema(None), None):
        for value in batch.column("value").to_pylist():
            try:
                record = json.loads(value)
            except ValueError as ex:
                raise SinkError(f"damaged record in {where}: {value[:80]!r} ({ex})") from None
            if not isinstance(record, dict):
                raise SinkError(f"damaged record in {where}: {value[:80]!r} is not a JSON object")
            yield record


def read_state(
    connection: ConnectionOptions, descriptor: RecordingDescriptor, stop: int, with_entries: bool = False
) -> LogState:
    """The state of a log folded up to `stop` (its stop position, or what is recorded of an active one)."""
    state = LogState(entries=[] if with_entries else None)
    for record in read_records(connection, descriptor, descriptor.start_position, stop):
        state.apply(record, f"sink log recording {descriptor.recording_id}")
    return state


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
    from aeron_archive_spark.archive.client.pool import connection_pool, requires_host_driver

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


# Per process: (log recording id, position folded up to, state), so a reused commit worker reads only the tail.
_cache: dict[str, tuple[int, int, LogState]] = {}
_cache_lock = threading.Lock()


def _cached(key: str, descriptor: RecordingDescriptor) -> tuple[int, LogState]:
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == descriptor.recording_id and hit[1] <= descriptor.stop_position:
        return hit[1], hit[2].copy()
    return descriptor.start_position, LogState()


def _remember(key: str, recording_id: int, position: int, state: LogState) -> None:
    with _cache_lock:
        _cache[key] = (recording_id, position, state.copy())


def forget(key: str) -> None:
    with _cache_lock:
        _cache.pop(key, None)


# -- owning the log for one commit ------------------------------------------------------------------------------


class HeldLog:
    """A sink log this committer owns (its recording extended by our publication) until `release`."""

    def __init__(
        self,
        ops: ArchiveOps,
        key: str,
        opened: OpenRecording,
        state: LogState,
        position: int,
        identity: str,
        generation: int = 0,
        start_position: int = 0,
        base_channel: str | None = None,
    ) -> None:
        self.ops = ops
        self.key = key
        self.opened = opened
        self.state = state
        self.position = position
        self.identity = identity
        self.generation = generation
        self.start_position = start_position
        self.base_channel = base_channel or opened.channel
        self.released = False

    @property
    def recording_id(self) -> int:
        return self.opened.recording_id

    def describe(self) -> str:
        return f"sink log recording {self.recording_id} ({self.identity})"

    def append(self, record: dict[str, Any]) -> None:
        """Append one record and wait until the archive has recorded it; then fold it into the state."""
        self.append_all([record])

    def append_all(self, records: list[dict[str, Any]]) -> None:
        """Append records in order, then wait once until the archive has recorded the last; then fold them."""
        if not records:
            return
        publication = self.opened.publication
        result = 0
        for record in records:
            data = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
            deadline = time.monotonic() + self.ops.timeout_s
            while True:
                result = publication.offer(data)
                if result > 0:
                    break
                if result not in (BACK_PRESSURED, NOT_CONNECTED, ADMIN_ACTION):
                    raise SinkError(f"cannot append to {self.describe()}: offer returned {result}")
                if time.monotonic() > deadline:
                    raise SinkError(
                        f"cannot append to {self.describe()}: not connected or back pressured for "
                        f"{self.ops.timeout_s:.1f}s ({self.ops.options.connection.describe()})"
                    )
                self.ops.poll()
                time.sleep(0.0002)
        self.ops.confirm(self.opened)
        self.ops.await_recorded(self.recording_id, result)
        self.position = result
        for record in records:
            self.state.apply(record, self.describe())
        _remember(self.key, self.recording_id, self.position, self.state)

    def compact_if_due(self) -> HeldLog:
        """After a commit: start a new generation of a log grown past COMPACT_AFTER_BYTES; returns the log now held.

        The new log (alias generation + 1) starts with a `snapshot` record saying how many records follow and
        how many batches came before them, then the target, the last RECENT_ENTRIES `commit` records and any
        `pending`/`creating`; it is whole before the old log gets its last record, `moved`, and is purged. A
        compaction that dies midway leaves either an incomplete new generation (ignored and purged by the next
        commit) or a complete one beside the old (which the next commit purges). It never fails the commit: its
        `commit` record is already durable in the old log.
        """
        state = self.state
        # at least twice what a snapshot of the carried entries takes (~0.25 KB each), so a small threshold can
        # never make every commit compact
        due = max(COMPACT_AFTER_BYTES, 512 * (len(state.recent) + 4))
        if self.position - self.start_position < due or self.released:
            return self
        kept = sorted(state.recent.values(), key=lambda e: e.batch_id)
        body: list[dict[str, Any]] = []
        if state.target is not None:
            body.append(state.target.to_json())
        if state.creating is not None:
            body.append(state.creating.to_json())
        body += [commit_record(e) for e in kept]
        if state.pending is not None:
            body.append(state.pending.to_json())
        generation = self.generation + 1
        head = {
            "t": "snapshot",
            "count": state.count - len(kept),
            "records": len(body),
            "previous": self.recording_id,
            "generation": generation,
            "takenAt": int(time.time() * 1000),
        }
        try:
            opened = self.ops.open_new(log_channel(self.base_channel, self.key, generation), SINK_LOG_STREAM_ID)
        except Exception as ex:
            log.warning("could not compact %s (%s): the next commit tries again", self.describe(), ex)
            return self
        fresh = HeldLog(
            self.ops,
            self.key,
            opened,
            LogState(),
            opened.start_position,
            self.identity,
            generation,
            opened.start_position,
            self.base_channel,
        )
        try:
            fresh.append_all([head, *body])
            faults.check("compact")
            self.append({"t": "moved", "to": fresh.recording_id, "generation": generation})
        except Exception as ex:
            log.warning("compaction of %s into recording %d failed: %s", self.describe(), fresh.recording_id, ex)
            fresh.abandon()
            forget(self.key)
            return self
        previous = self.recording_id
        try:
            self.release()
        except Exception as ex:  # its records are all recorded (`moved` was awaited): the new generation rules
            log.warning("releasing compacted %s: %s", self.describe(), ex)
        _purge_quietly(self.ops, previous, "compacted into " + fresh.describe())
        _remember(self.key, fresh.recording_id, fresh.position, fresh.state)
        log.info(
            "compacted %s: %d batches in all, the last %d carried into %s",
            f"sink log recording {previous}",
            state.count,
            len(kept),
            fresh.describe(),
        )
        return fresh

    def release(self) -> None:
        """Stop recording the log (the lock is free again); idempotent."""
        if self.released:
            return
        self.released = True
        try:
            self.ops.confirm(self.opened)
            stop = self.ops.stop(self.opened)
        finally:
            self.opened.publication.close()
        if stop != self.position:
            forget(self.key)
            raise SinkError(f"{self.describe()} stopped at {stop}, but its records end at {self.position}")

    def abandon(self) -> None:
        """After a failure: close the publication (the archive stops the log when the image goes) and forget."""
        forget(self.key)
        if self.released:
            return
        self.released = True
        try:
            self.ops.archive.try_stop_recording_subscription(self.opened.subscription_id)
        except Exception as ex:
            log.debug("could not stop %s: %s", self.describe(), ex)
        self.opened.publication.close()


def log_channel(base_channel: str, key: str, generation: int = 0) -> str:
    """A new log's channel: the sink's own path to the archive (its endpoint), a small term, the log's alias."""
    uri = ChannelUri.parse(base_channel)
    cleared = dict.fromkeys(SESSION_PARAMS)
    alias = log_alias(key, generation)
    if uri.is_ipc:
        return str(ChannelUri("ipc", {}).with_params(alias=alias, term_length=LOG_TERM_LENGTH))
    return str(uri.with_params(**cleared, alias=alias, term_length=LOG_TERM_LENGTH))


def _purge_quietly(ops: ArchiveOps, recording_id: int, why: str) -> None:
    """Purge a superseded log recording; one that cannot be purged now (a reader replays it) is purged later."""
    try:
        ops.archive.purge_recording(recording_id)
        log.info("purged sink log recording %d (%s)", recording_id, why)
    except Exception as ex:
        log.info("sink log recording %d (%s) not purged now: %s", recording_id, why, ex)


# Refusals that waiting for another committer to release the log cannot cure: the commit fails at once.
UNRETRIED_ERRORS = frozenset(
    {
        ErrorCode.STORAGE_SPACE,
        ErrorCode.MAX_RECORDINGS,
        ErrorCode.UNAUTHORISED_ACTION,
    }
)


def acquire(ops: ArchiveOps, key: str, identity: str, base_channel: str, lock_timeout_s: float) -> HeldLog:
    """Own the sink's log for one commit: create it, or extend it once no other committer holds it.

    The log is the newest generation whose fold is complete (`generations`); an older generation left by a
    compaction that died after its successor was whole, or a newer one cut short, is purged on the way.
    """
    archive = ops.archive
    deadline = time.monotonic() + lock_timeout_s
    waited_for: int | None = None
    skipped: set[int] = set()  # generations found incomplete (purged, or to be purged once stopped)
    while True:
        listed = [(g, d) for g, d in generations(find_logs(archive, key)).get(key, []) if d.recording_id not in skipped]
        if not listed and skipped:
            raise SinkError(
                f"the sink log of {identity} was compacted into a recording that is gone (log recordings "
                f"{sorted(skipped)} are superseded or incomplete): was it purged by hand?"
            )
        if not listed:
            opened = ops.open_new(log_channel(base_channel, key), SINK_LOG_STREAM_ID)
            held = HeldLog(
                ops, key, opened, LogState(), opened.start_position, identity, 0, opened.start_position, base_channel
            )
            lower = [d for d in find_logs(archive, key) if d.recording_id < opened.recording_id]
            if lower:  # another committer created one first: use that one
                held.abandon()
                continue
            log.info("created sink log recording %d for %s", opened.recording_id, identity)
            return held
        generation, descriptor = listed[0]
        if descriptor.is_active:
            if waited_for != descriptor.recording_id:
                waited_for = descriptor.recording_id
                log.info(
                    "sink log recording %d (%s) is held by another commit (or one that died, until the archive "
                    "sees its publication go): waiting up to %.0fs",
                    descriptor.recording_id,
                    identity,
                    max(0.0, deadline - time.monotonic()),
                )
            if time.monotonic() > deadline:
                raise SinkError(
                    f"sink log recording {descriptor.recording_id} ({identity}) has been held by another "
                    f"commit for more than {lock_timeout_s:.0f}s: is a second query writing with the same "
                    "checkpoint or target?"
                )
            time.sleep(0.1)
            continue
        try:
            opened = ops.open_extend(descriptor, descriptor.original_channel)
            ops.confirm(opened)
            ops.stop_orphans(SINK_LOG_STREAM_ID, alias=log_alias(key, generation), keep=opened.subscription_id)
        except (ArchiveError, SinkError) as ex:
            if isinstance(ex, ArchiveError) and ex.error_code in UNRETRIED_ERRORS:
                raise SinkError(
                    f"cannot extend sink log recording {descriptor.recording_id} ({identity}): {ex} "
                    f"({ops.options.connection.describe()})"
                ) from ex
            if time.monotonic() > deadline:
                raise SinkError(f"cannot take sink log recording {descriptor.recording_id} ({identity}): {ex}") from ex
            log.info("sink log recording %d not taken (%s): retrying", descriptor.recording_id, ex)
            time.sleep(0.1)
            continue
        held = HeldLog(
            ops,
            key,
            opened,
            LogState(),
            descriptor.stop_position,
            identity,
            generation,
            descriptor.start_position,
            base_channel,
        )
        try:
            start, state = _cached(key, descriptor)
            for record in read_records(ops.options.connection, descriptor, start, descriptor.stop_position):
                state.apply(record, held.describe())
            held.state = state
            _remember(key, descriptor.recording_id, descriptor.stop_position, state)
        except BaseException:
            held.abandon()
            raise
        if state.moved_to is not None or not state.complete:
            # compacted meanwhile (its successor is listed now), or a successor cut short: not the log
            why = "compacted" if state.moved_to is not None else "an incomplete compaction"
            held.release()
            forget(key)
            skipped.add(descriptor.recording_id)
            _purge_quietly(ops, descriptor.recording_id, why)
            continue
        for _older, superseded in listed[1:]:
            if not superseded.is_active and superseded.recording_id < descriptor.recording_id:
                _purge_quietly(ops, superseded.recording_id, "superseded by " + held.describe())
        return held
