"""Driver side: publish a batch's staged partitions into the recording, exactly once.

The protocol (one commit, under the state directory's lock):

1. If the batch map already has this batch id (or a later one), the batch is committed: drop its staged files,
   do nothing else. That is what makes Spark's re-commit after a crash between our commit and its `commits/N`
   file a no-op.
2. If `pending.json` is left over, an earlier commit died while publishing: stop the recording if it is still
   active, and unless that batch's entry was written (then only the marker was left), truncate the recording
   back to the pending start position and wait for the archive's DELETE signal.
3. Write `pending.json` (batch id, recording id, start position = the recording's stop position), then publish
   the staged rows in partition order on an exclusive publication that starts exactly at the stop position
   while the archive extends the recording (the first batch of a `channel` target starts a new recording
   instead, and its id goes to `sink.json` before any data). Wait until the archive has recorded everything,
   then stop the recording, so it is stopped between batches and the next extend starts from a known position.
4. Append the batch map entry (the commit point: atomic file + fsync), then remove `pending.json`.

Connections are not this module's business: each commit leases a control session on the host's media driver from
the process's connection pool (`aeron_archive_spark.archive.client.pool`), which keeps it for the next commit
(Spark reuses its Python worker, so the connect handshake is paid once, not per micro-batch) and closes it instead
when the commit failed (an injected fault aside: it simulates a crash of the commit, not of the connection).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aeron_archive_spark.archive.channel import ChannelUri, add_session_id
from aeron_archive_spark.archive.client.aeron_archive import (
    AeronArchive,
    RecordingSignalEvent,
)
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.pool import (
    ArchiveConnectError,
    ArchiveLease,
    NoMediaDriverError,
    connection_pool,
)
from aeron_archive_spark.archive.constants import (
    NULL_COUNTER_ID,
    NULL_POSITION,
    RecordingSignal,
    SourceLocation,
)
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.native import ExclusivePublication
from aeron_archive_spark.archive.recording_pos import (
    find_counter_id_by_recording,
    is_active,
)
from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.batch_map import (
    BatchEntry,
    append_entry,
    find_entry,
    last_entry,
)
from aeron_archive_spark.connector.sink.errors import InjectedFault, SinkError
from aeron_archive_spark.connector.sink.options import SinkOptions
from aeron_archive_spark.connector.sink.publisher import FramePublisher
from aeron_archive_spark.connector.sink.staging import (
    StagedPartition,
    read_staged,
    remove_files,
    sweep,
)
from aeron_archive_spark.connector.sink.state import (
    Pending,
    SinkState,
    clear_pending,
    load_pending,
    load_state,
    query_id_of,
    save_pending,
    save_state,
    state_lock,
)

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 600.0
# Parameters that pin a publication to one session or start position; an extend channel sets its own.
_SESSION_PARAMS = ("session_id", "init_term_id", "term_id", "term_offset")


# -- the archive session ---------------------------------------------------------------------------------------


class _SignalLog:
    """Recording signals received during a commit's lease, so a waiter can look for the one it caused."""

    def __init__(self) -> None:
        self.events: list[RecordingSignalEvent] = []

    def __call__(self, event: RecordingSignalEvent) -> None:
        self.events.append(event)
        if len(self.events) > 4096:
            del self.events[:2048]

    def clear(self) -> None:
        """Forget earlier signals before issuing the request whose signal will be awaited."""
        self.events.clear()


def _lease_archive(connection: ConnectionOptions, signals: _SignalLog) -> tuple[ArchiveLease, AeronArchive]:
    """A pooled control session on the host's media driver, with `signals` receiving its recording signals."""
    lease = connection_pool().archive(
        connection, purpose="sink", host_driver_only=True, recording_signal_consumer=signals, keep_on=(InjectedFault,)
    )
    try:
        return lease, lease.acquire()
    except NoMediaDriverError as ex:
        raise SinkError(
            f"{ex}: start one there or set option aeronDir (or $AERON_DIR) to the directory of the "
            "archive's media driver"
        ) from ex
    except ArchiveConnectError as ex:
        raise SinkError(str(ex)) from ex


# -- one archive conversation -----------------------------------------------------------------------------------


@dataclass
class OpenRecording:
    """A publication the archive is recording (new or extended recording), positioned at `start_position`."""

    publication: ExclusivePublication
    subscription_id: int
    recording_id: int
    start_position: int
    channel: str
    confirmed: bool  # the archive's START/EXTEND signal for this subscription has been seen


class ArchiveOps:
    """The archive requests a commit needs, each waiting for its signal with the publish timeout."""

    def __init__(self, archive: AeronArchive, signals: _SignalLog, options: SinkOptions) -> None:
        self.archive = archive
        self.signals = signals
        self.options = options
        self.timeout_s = options.publish_timeout_s
        self.source_location = SourceLocation.REMOTE if options.source_location == "remote" else SourceLocation.LOCAL

    def _await_signal(self, what: str, match: Callable[[RecordingSignalEvent], bool]) -> RecordingSignalEvent:
        deadline = time.monotonic() + self.timeout_s
        while True:
            found = next((e for e in self.signals.events if match(e)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise SinkError(
                    f"no {what} signal from the archive within {self.timeout_s:.1f}s "
                    f"({self.options.connection.describe()})"
                )
            if self.archive.poll_for_recording_signals() == 0:
                time.sleep(0.0002)

    def descriptor(self, recording_id: int, origin: str) -> RecordingDescriptor:
        descriptor = self.archive.list_recording(recording_id)
        if descriptor is None:
            raise SinkError(
                f"recording {recording_id} ({origin}) is not in the archive "
                f"({self.options.connection.describe()}): unknown or purged recording id"
            )
        return descriptor

    def stop_active(self, recording_id: int) -> RecordingDescriptor:
        """Stop a recording left active by a publisher that died, and wait until the catalog has its stop."""
        self.archive.try_stop_recording_by_identity(recording_id)
        deadline = time.monotonic() + self.timeout_s
        while self.archive.get_stop_position(recording_id) == NULL_POSITION:
            if time.monotonic() > deadline:
                raise SinkError(f"recording {recording_id} did not stop within {self.timeout_s:.1f}s")
            time.sleep(0.001)
        return self.descriptor(recording_id, "stopped")

    def truncate(self, recording_id: int, position: int) -> None:
        self.signals.clear()
        self.archive.truncate_recording(recording_id, position)
        self._await_signal("DELETE", lambda e: e.signal == RecordingSignal.DELETE and e.recording_id == recording_id)

    def _publication_channel(self, channel: str) -> str:
        uri = ChannelUri.parse(channel)
        if uri.is_udp and self.source_location == SourceLocation.LOCAL and uri.get("ssc") is None:
            uri = uri.with_params(ssc="true")  # the archive's spy counts as a receiver
        return str(uri)

    def open_new(self, channel: str, stream_id: int) -> OpenRecording:
        publication_channel = self._publication_channel(channel)
        publication = self.archive.aeron.add_exclusive_publication(publication_channel, stream_id)
        try:
            self.signals.clear()
            subscription_id = self.archive.start_recording(
                add_session_id(publication_channel, publication.session_id),
                stream_id,
                self.source_location,
                auto_stop=True,
            )
            event = self._await_signal(
                "START", lambda e: e.signal == RecordingSignal.START and e.subscription_id == subscription_id
            )
        except BaseException:
            publication.close()
            raise
        log.info(
            "started recording %d of %s stream %d at position %d",
            event.recording_id,
            publication_channel,
            stream_id,
            event.position,
        )
        return OpenRecording(
            publication, subscription_id, event.recording_id, event.position, publication_channel, True
        )

    def open_extend(self, descriptor: RecordingDescriptor, base_channel: str) -> OpenRecording:
        """Extend a stopped recording; returns as soon as the archive accepted the request.

        Publishing may start at once: an IPC/spy image joins at the publication's position when the archive's
        subscription links, and offers before that are refused (NOT_CONNECTED), so nothing is lost; the EXTEND
        signal (or an INVALID_EXTENSION error) is checked before the commit completes, in `confirm`.
        """
        recording_id = descriptor.recording_id
        base = str(ChannelUri.parse(base_channel).with_params(**dict.fromkeys(_SESSION_PARAMS)))
        channel = self._publication_channel(AeronArchive.extend_channel(base, descriptor))
        publication = self.archive.aeron.add_exclusive_publication(channel, descriptor.stream_id)
        try:
            if publication.position != descriptor.stop_position:
                raise SinkError(
                    f"extend publication for recording {recording_id} starts at {publication.position}, "
                    f"not at the recording's stop position {descriptor.stop_position}"
                )
            self.signals.clear()
            subscription_id = self.archive.extend_recording(
                recording_id,
                add_session_id(channel, publication.session_id),
                descriptor.stream_id,
                self.source_location,
                auto_stop=True,
            )
        except BaseException:
            publication.close()
            raise
        return OpenRecording(publication, subscription_id, recording_id, descriptor.stop_position, channel, False)

    def confirm(self, opened: OpenRecording) -> None:
        """Wait for the EXTEND signal of an extend started by `open_extend` (raises on INVALID_EXTENSION)."""
        if not opened.confirmed:
            self._await_signal(
                "EXTEND", lambda e: e.signal == RecordingSignal.EXTEND and e.subscription_id == opened.subscription_id
            )
            opened.confirmed = True

    def poll(self) -> None:
        """Take in signals and asynchronous errors (an extend the archive refused) while publishing."""
        self.archive.poll_for_recording_signals()

    def await_recorded(self, recording_id: int, position: int) -> None:
        """Wait until the archive has recorded up to `position` (rec-pos counter, else position requests)."""
        reader = self.archive.aeron.counters_reader
        counter_id = find_counter_id_by_recording(reader, recording_id, self.archive.archive_id())
        deadline = time.monotonic() + self.timeout_s
        last = -1
        while True:
            if counter_id != NULL_COUNTER_ID:
                if not is_active(reader, counter_id, recording_id):
                    raise SinkError(
                        f"recording {recording_id} stopped before reaching position {position} "
                        f"(recorded {last}): did the archive shut down?"
                    )
                recorded = reader.get(counter_id)
            else:  # the archive runs on another media driver: ask it
                recorded = self.archive.get_recording_position(recording_id)
                if recorded == NULL_POSITION:
                    raise SinkError(f"recording {recording_id} stopped before reaching position {position}")
            if recorded >= position:
                return
            if recorded > last:
                last = recorded
                deadline = time.monotonic() + self.timeout_s
            elif time.monotonic() > deadline:
                raise SinkError(
                    f"the archive recorded recording {recording_id} only up to {recorded} of {position} "
                    f"and made no progress for {self.timeout_s:.1f}s"
                )
            time.sleep(0.0002 if counter_id != NULL_COUNTER_ID else 0.002)

    def stop(self, opened: OpenRecording) -> int:
        """Stop recording the publication; returns the stop position the archive reports."""
        self.signals.clear()
        self.archive.stop_recording_subscription(opened.subscription_id)
        event = self._await_signal(
            "STOP", lambda e: e.signal == RecordingSignal.STOP and e.recording_id == opened.recording_id
        )
        return event.position


# -- the commit --------------------------------------------------------------------------------------------------


def commit_batch(
    options: SinkOptions, messages: Sequence[Any], batch_id: int | None, label: str, streaming: bool
) -> BatchEntry | None:
    """Publish the staged partitions of one batch exactly once; returns its batch map entry.

    `batch_id` is Spark's micro-batch id (streaming) or None for a batch write, which takes the next free id of
    the state's batch map. Returns None only for a stale streaming batch older than the last committed one.
    """
    started = time.perf_counter()
    staged = _check_messages(messages, label)
    temporary = options.state_dir is None
    state_dir = options.state_dir or tempfile.mkdtemp(prefix="aeron-archive-sink-state-")
    if temporary:
        log.info(
            "df.write without sinkStateDir: state is kept only for this write (%s); give sinkStateDir to "
            "recover an interrupted commit in a later run and to extend the same recording",
            state_dir,
        )
    try:
        with state_lock(state_dir, max(LOCK_TIMEOUT_S, options.publish_timeout_s)):
            entry, published = _commit_locked(options, state_dir, staged, batch_id, streaming)
    finally:
        if temporary:
            shutil.rmtree(state_dir, ignore_errors=True)
    remove_files(m.path for m in staged)
    sweep(options.staging_dir, batch=label, up_to_batch=batch_id if streaming else None)
    if published and entry is not None:
        seconds = time.perf_counter() - started
        log.info(
            "commit of batch %d took %.3f s (%.1f MB/s of recording)",
            entry.batch_id,
            seconds,
            (entry.stop_position - entry.start_position) / max(seconds, 1e-9) / 1e6,
        )
    return entry


def abort_batch(options: SinkOptions, messages: Sequence[Any], label: str, batch_id: int | None) -> None:
    """Drop what the batch staged (including failed attempts' files, which no message names)."""
    remove_files(m.path for m in messages if isinstance(m, StagedPartition))
    sweep(options.staging_dir, batch=label)
    log.info("aborted batch %s: staged files removed", label if batch_id is None else batch_id)


def _check_messages(messages: Sequence[Any], label: str) -> list[StagedPartition]:
    staged: list[StagedPartition] = []
    for index, message in enumerate(messages):
        if not isinstance(message, StagedPartition):
            raise SinkError(
                f"commit got no staged data for task {index} of batch {label} "
                f"({type(message).__name__}): the task did not complete"
            )
        if message.batch != label:
            raise SinkError(f"staged file {message.path} belongs to batch {message.batch}, not to batch {label}")
        staged.append(message)
    return sorted(staged, key=lambda m: m.partition)


def _check_state(
    state: SinkState | None, options: SinkOptions, state_dir: str, kind: str, query_id: str | None
) -> None:
    if state is None:
        return
    where = f"sinkStateDir {state_dir}"
    if state.kind != kind:
        raise SinkError(
            f"{where} belongs to a {state.kind} sink, not a {kind} one: batch ids would clash; use "
            "one state directory per query"
        )
    if state.query_id and query_id and state.query_id != query_id:
        raise SinkError(
            f"{where} was written by streaming query {state.query_id}, but checkpoint "
            f"{options.checkpoint_location} is query {query_id}: batch ids would be confused; give "
            "each query (and each new checkpoint) its own sinkStateDir"
        )
    if options.recording_id is not None and options.recording_id != state.recording_id:
        raise SinkError(
            f"option recordingId={options.recording_id} but {where} writes recording "
            f"{state.recording_id}: use a fresh sinkStateDir to write another recording"
        )
    if options.stream_id is not None and options.stream_id != state.stream_id:
        raise SinkError(
            f"option streamId={options.stream_id} but {where} writes recording {state.recording_id} of "
            f"stream {state.stream_id}: use a fresh sinkStateDir to write another stream"
        )


def _commit_locked(
    options: SinkOptions, state_dir: str, staged: list[StagedPartition], batch_id: int | None, streaming: bool
) -> tuple[BatchEntry | None, bool]:
    """(the batch's entry, whether this call published it); already committed batches are not published again."""
    kind = "stream" if streaming else "batch"
    query_id = query_id_of(options.checkpoint_location) if streaming else None
    state = load_state(state_dir)
    _check_state(state, options, state_dir, kind, query_id)
    last = last_entry(state_dir)
    if batch_id is None:
        batch_id = last.batch_id + 1 if last is not None else 0
    elif last is not None and batch_id <= last.batch_id:
        existing = find_entry(state_dir, batch_id)
        log.info(
            "batch %d is already committed (%s): nothing to do",
            batch_id,
            f"positions [{existing.start_position}, {existing.stop_position}) of recording {existing.recording_id}"
            if existing
            else f"last committed batch is {last.batch_id}",
        )
        return existing, False
    elif last is not None and batch_id > last.batch_id + 1:
        log.warning("batch %d follows batch %d in %s: the batch map has a gap", batch_id, last.batch_id, state_dir)
    fault_dir = options.state_dir or options.staging_dir
    faults.check(fault_dir, "before-publish", batchId=batch_id)

    signals = _SignalLog()
    lease, archive = _lease_archive(options.connection, signals)
    with lease:  # an error (but an injected fault) closes the session instead of returning it to the pool
        ops = ArchiveOps(archive, signals, options)
        try:
            pending = load_pending(state_dir)
            if pending is not None:
                recover(ops, state_dir, pending)
            return _publish(ops, options, state_dir, state, last, staged, batch_id, kind, query_id, fault_dir), True
        except SinkError:
            raise
        except Exception as ex:
            raise SinkError(
                f"commit of batch {batch_id} to {options.target_text()} failed: {ex} "
                f"({options.connection.describe()}); a partly published batch is truncated by the next "
                "commit"
            ) from ex


def recover(ops: ArchiveOps, state_dir: str, pending: Pending) -> None:
    """Undo a commit that died while publishing: truncate back to where it started (unless it completed)."""
    descriptor = ops.descriptor(pending.recording_id, f"pending commit of batch {pending.batch_id}")
    if descriptor.is_active:
        log.warning(
            "recording %d is still active after an interrupted commit of batch %d: stopping it",
            pending.recording_id,
            pending.batch_id,
        )
        descriptor = ops.stop_active(pending.recording_id)
    if find_entry(state_dir, pending.batch_id) is not None:
        log.info("batch %d was committed before the crash; clearing its pending marker", pending.batch_id)
    elif descriptor.stop_position > pending.start_position:
        log.warning(
            "recovering interrupted commit of batch %d: truncating recording %d from %d back to %d",
            pending.batch_id,
            pending.recording_id,
            descriptor.stop_position,
            pending.start_position,
        )
        ops.truncate(pending.recording_id, pending.start_position)
    elif descriptor.stop_position < pending.start_position:
        raise SinkError(
            f"recording {pending.recording_id} stops at {descriptor.stop_position}, before position "
            f"{pending.start_position} where the interrupted commit of batch {pending.batch_id} began: "
            "was it truncated by someone else?"
        )
    clear_pending(state_dir)


def _publish(
    ops: ArchiveOps,
    options: SinkOptions,
    state_dir: str,
    state: SinkState | None,
    last: BatchEntry | None,
    staged: list[StagedPartition],
    batch_id: int,
    kind: str,
    query_id: str | None,
    fault_dir: str,
) -> BatchEntry:
    now = int(time.time() * 1000)
    rows = sum(m.rows for m in staged)
    payload = sum(m.payload_bytes for m in staged)
    recording_id = state.recording_id if state is not None else options.recording_id
    if recording_id is not None:
        origin = f"from {state_dir}" if state is not None else "option recordingId"
        descriptor = ops.descriptor(recording_id, origin)
        if descriptor.is_active:
            if state is None or not state.created_by_sink:
                raise SinkError(
                    f"recording {recording_id} ({origin}) is active: another publisher is recording "
                    "it; the sink extends only stopped recordings"
                )
            descriptor = ops.stop_active(recording_id)
        if last is not None and descriptor.stop_position < last.stop_position:
            raise SinkError(
                f"recording {recording_id} stops at {descriptor.stop_position}, before the end "
                f"{last.stop_position} of committed batch {last.batch_id}: it was truncated outside "
                "the sink"
            )
        if state is None:
            state = SinkState(recording_id, False, descriptor.stream_id, kind, query_id, now)
            save_state(state_dir, state)
        if rows == 0:
            return _record(
                state_dir,
                BatchEntry(batch_id, recording_id, descriptor.stop_position, descriptor.stop_position, 0, 0, now),
                fault_dir,
            )
        save_pending(state_dir, Pending(batch_id, recording_id, descriptor.stop_position, now))
        opened = ops.open_extend(descriptor, options.channel or descriptor.original_channel)
    else:
        assert options.channel is not None and options.stream_id is not None
        opened = ops.open_new(options.channel, options.stream_id)
        try:
            save_state(state_dir, SinkState(opened.recording_id, True, options.stream_id, kind, query_id, now))
            save_pending(state_dir, Pending(batch_id, opened.recording_id, opened.start_position, now))
        except BaseException:
            opened.publication.close()
            raise
    pending = Pending(batch_id, opened.recording_id, opened.start_position, now)
    try:
        stop_position = _stream_staged(ops, opened, staged, batch_id, fault_dir)
    except BaseException as ex:
        opened.publication.close()
        _rollback(ops, state_dir, pending, ex)
        raise
    entry = BatchEntry(
        batch_id, opened.recording_id, opened.start_position, stop_position, rows, payload, int(time.time() * 1000)
    )
    return _record(state_dir, entry, fault_dir)


def _record(state_dir: str, entry: BatchEntry, fault_dir: str) -> BatchEntry:
    faults.check(fault_dir, "before-entry", batchId=entry.batch_id)
    append_entry(state_dir, entry)
    faults.check(fault_dir, "after-entry", batchId=entry.batch_id)
    clear_pending(state_dir)
    log.info(
        "committed batch %d: %d rows at [%d, %d) of recording %d",
        entry.batch_id,
        entry.rows,
        entry.start_position,
        entry.stop_position,
        entry.recording_id,
    )
    return entry


def _stream_staged(
    ops: ArchiveOps, opened: OpenRecording, staged: list[StagedPartition], batch_id: int, fault_dir: str
) -> int:
    """Publish every staged batch in partition order, wait for the recorder, stop; returns the stop position."""
    what = f"publication {opened.channel} stream {opened.publication.stream_id} (recording {opened.recording_id})"
    publisher = FramePublisher(opened.publication, ops.timeout_s, what, check_alive=ops.poll)
    fault_rows = faults.rows_threshold(fault_dir, "publish", batchId=batch_id)
    published = 0
    try:
        for message in staged:
            for batch in read_staged(message):
                values = batch.column(0)
                reserved = batch.column(1).to_numpy() if batch.num_columns > 1 else None
                if fault_rows is not None and published + len(values) >= fault_rows:
                    cut = max(fault_rows - published, 0)
                    publisher.publish(values.slice(0, cut), None if reserved is None else reserved[:cut])
                    faults.check(fault_dir, "publish", fault_rows, batchId=batch_id)
                    values = values.slice(cut)
                    reserved = None if reserved is None else reserved[cut:]
                    published += cut
                    fault_rows = None
                publisher.publish(values, reserved)
                published += len(values)
        ops.confirm(opened)
        ops.await_recorded(opened.recording_id, publisher.position)
        stop_position = ops.stop(opened)
    finally:
        opened.publication.close()
    if stop_position != publisher.position:
        raise SinkError(
            f"recording {opened.recording_id} stopped at {stop_position}, but batch {batch_id} was "
            f"published up to {publisher.position}"
        )
    return stop_position


def _rollback(ops: ArchiveOps, state_dir: str, pending: Pending, cause: BaseException) -> None:
    """Best effort, right away: truncate what this failed commit published; the next commit retries if this fails."""
    try:
        recover(ops, state_dir, pending)
        log.warning("commit of batch %d failed (%s); its partial data was truncated", pending.batch_id, cause)
    except Exception as ex:
        log.warning(
            "commit of batch %d failed (%s) and could not be rolled back now (%s): the next commit "
            "truncates recording %d back to %d",
            pending.batch_id,
            cause,
            ex,
            pending.recording_id,
            pending.start_position,
        )
