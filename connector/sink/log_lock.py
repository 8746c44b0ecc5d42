"""Owning a sink's log for one commit (`acquire` -> `HeldLog`): the commit lock, appending records, compaction.

Owning the log is the commit lock. A committer extends the (stopped) log recording and keeps it recording for
the whole commit; the archive refuses a second extend of an active recording, so two committers never
interleave, and a committer that dies releases the lock when its publication's image goes away (the archive
then stops the recording). Records are appended on that publication and each waits until the archive has
recorded it, so a record is durable before the step it announces begins.

A log grown past COMPACT_AFTER_BYTES is compacted (`HeldLog.compact_if_due`) into its next generation, a new
recording whose alias ends in `.<generation>`, starting with a `snapshot` record and the state carried over; the
old one ends with a `moved` record and is purged. The current log is the newest generation whose snapshot is
whole (`log_store.generations`), so what a fresh process folds, and what the log keeps on disk, stays bounded.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.native import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED
from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.archive_ops import SESSION_PARAMS, ArchiveOps, OpenRecording
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID, log_alias
from aeron_archive_spark.connector.sink.log_records import encode_record, moved_record
from aeron_archive_spark.connector.sink.log_state import LogState
from aeron_archive_spark.connector.sink.log_store import find_logs, fold_log, forget, generations, remember

log = logging.getLogger(__name__)

LOG_TERM_LENGTH = 64 * 1024
# A log grown past this many bytes is compacted at the end of a commit: a new generation starts with a snapshot
# (the target and the last RECENT_ENTRIES batches), so a fresh process folds a bounded log, and the old one is
# purged. ~0.5 KB per batch: about 16,000 batches per generation.
COMPACT_AFTER_BYTES = 8 << 20

# Refusals that waiting for another committer to release the log cannot cure: the commit fails at once.
UNRETRIED_ERRORS = frozenset(
    {
        ErrorCode.STORAGE_SPACE,
        ErrorCode.MAX_RECORDINGS,
        ErrorCode.UNAUTHORISED_ACTION,
    }
)


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
            data = encode_record(record)
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
        remember(self.key, self.recording_id, self.position, self.state)

    def compact_if_due(self) -> HeldLog:
        """After a commit: start a new generation of a log grown past COMPACT_AFTER_BYTES; returns the log now held.

        The new log (alias generation + 1) starts with a `snapshot` record saying how many records follow and
        how many batches came before them, then the target, the last RECENT_ENTRIES `commit` records and any
        `pending`/`creating` (`LogState.snapshot`); it is whole before the old log gets its last record, `moved`,
        and is purged. A compaction that dies midway leaves either an incomplete new generation (ignored and purged
        by the next commit) or a complete one beside the old (which the next commit purges). It never fails the
        commit: its `commit` record is already durable in the old log.
        """
        state = self.state
        # at least twice what a snapshot of the carried entries takes (~0.25 KB each), so a small threshold can
        # never make every commit compact
        due = max(COMPACT_AFTER_BYTES, 512 * (len(state.recent) + 4))
        if self.position - self.start_position < due or self.released:
            return self
        generation = self.generation + 1
        records = state.snapshot(self.recording_id, generation, int(time.time() * 1000))
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
            fresh.append_all(records)
            faults.check("compact")
            self.append(moved_record(fresh.recording_id, generation))
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
        remember(self.key, fresh.recording_id, fresh.position, fresh.state)
        log.info(
            "compacted %s: %d batches in all, the last %d carried into %s",
            f"sink log recording {previous}",
            state.count,
            len(state.recent),
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
            held.state = fold_log(ops.options.connection, key, descriptor, held.describe())
        except BaseException:
            held.abandon()
            raise
        state = held.state
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
