"""Driver side: publish a batch's rows (carried in Spark's commit messages) into the recording, exactly once.

The protocol, for one commit, while this committer owns the sink's log (`log_lock`: the durable state is a
recording in the archive itself, and owning it is the commit lock):

1. If the log's batch map already has this batch id (or a later one), the batch is committed: do nothing. That
   is what makes Spark's re-commit after a crash between our commit and its `commits/N` file a no-op.
2. If the log holds a `pending` record with no `commit` or `rollback`, an earlier commit died while
   publishing: stop the target recording if it is still active, truncate it back to the pending start
   position, wait for the archive's DELETE signal, and append `rollback`.
3. Append `pending` (batch id, recording id, start position = the recording's stop position), then publish the
   rows in partition order on an exclusive publication that starts exactly at the stop position while the
   archive extends the recording (the first batch of a `channel` target starts a new recording instead, and its
   id goes to the log as a `target` record before any data). Wait until the archive has recorded everything,
   then stop the recording, so it is stopped between batches and the next extend starts from a known position.
4. Append `commit` with the batch's positions: the commit point. Then release the log.

Every record is recorded by the archive before the next step starts, so whichever host runs the next commit
(the same driver, or a restarted query on another host with the same checkpointLocation) finds exactly where
this one stopped. Connections come from the process's connection pool (`archive_ops.lease_archive`), which keeps
the control session for the next commit (Spark reuses its Python worker) and closes it when a commit failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveDisconnectedError, ArchiveError, ArchiveTimeoutError
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, RunningArchive
from aeron_archive_spark.archive.tables.read import read_batches
from aeron_archive_spark.archive.tables.schema import row_schema
from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.archive_ops import (
    ArchiveOps,
    OpenRecording,
    SignalLog,
    lease_archive,
    own_session_id,
)
from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.log_identity import sink_identity, sink_key
from aeron_archive_spark.connector.sink.log_lock import HeldLog, acquire
from aeron_archive_spark.connector.sink.log_records import Creating, Pending, SinkTarget, commit_record, rollback_record
from aeron_archive_spark.connector.sink.options import SinkOptions
from aeron_archive_spark.connector.sink.publisher import FramePublisher
from aeron_archive_spark.connector.sink.resume import Resume, find_resume
from aeron_archive_spark.connector.sink.staging import StagedPartition, read_staged

log = logging.getLogger(__name__)

# How long a commit waits for another committer to release the sink's log (one that died releases it when the
# archive sees its publication go: the image liveness timeout, 10 s by default).
LOCK_TIMEOUT_S = 600.0


def commit_batch(
    options: SinkOptions, messages: Sequence[Any], batch_id: int | None, label: str, streaming: bool
) -> BatchEntry | None:
    """Publish the staged partitions of one batch exactly once; returns its batch map entry.

    `batch_id` is Spark's micro-batch id (streaming) or None for a batch write, which takes the next free id of
    the sink's batch map. Returns None only for a stale streaming batch older than the last committed one.
    """
    started = time.perf_counter()
    staged = _check_messages(messages, label)
    identity = sink_identity(
        streaming, options.checkpoint_location, options.recording_id, options.channel, options.stream_id
    )
    for attempt in (1, 2):
        try:
            entry, published = _commit_once(options, staged, batch_id, label, streaming, identity)
            break
        except SinkError as ex:
            if attempt == 2 or not _stale_session(ex):
                raise
            # The pooled session stopped answering (the archive restarted and does not know it): its lease closed
            # it; the protocol is idempotent (a partial publish is truncated), so commit again on a new session.
            log.warning("commit of batch %s: %s; committing again on a new archive session", label, ex)
    if published and entry is not None:
        seconds = time.perf_counter() - started
        log.info(
            "commit of batch %d took %.3f s (%.1f MB/s of recording)",
            entry.batch_id,
            seconds,
            (entry.stop_position - entry.start_position) / max(seconds, 1e-9) / 1e6,
        )
    return entry


def _commit_once(
    options: SinkOptions,
    staged: list[StagedPartition],
    batch_id: int | None,
    label: str,
    streaming: bool,
    identity: str,
) -> tuple[BatchEntry | None, bool]:
    """One commit on one leased control session: (the batch's entry, whether this call published it)."""
    signals = SignalLog()
    lease, archive = lease_archive(options.connection, signals, options.source_location == "local")
    with lease:  # an error (but an injected fault) closes the session instead of returning it to the pool
        ops = ArchiveOps(archive, signals, options)
        try:
            base_channel = options.channel
            if base_channel is None:
                assert options.recording_id is not None
                base_channel = ops.descriptor(options.recording_id, "option recordingId").original_channel
            held = acquire(
                ops, sink_key(identity), identity, base_channel, max(LOCK_TIMEOUT_S, options.publish_timeout_s)
            )
            try:
                result = _commit_held(ops, held, options, staged, batch_id, streaming)
            except BaseException:
                held.abandon()
                raise
            held = held.compact_if_due()
            held.release()
            return result
        except SinkError:
            raise
        except Exception as ex:
            raise SinkError(
                f"commit of batch {label} to {options.target_text()} failed: {ex} "
                f"({options.connection.describe()}); a partly published batch is truncated by the next "
                "commit"
            ) from ex


def _stale_session(error: BaseException) -> bool:
    """True if `error` came from a control session the archive no longer answers (timeout, lost response image)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (ArchiveTimeoutError, ArchiveDisconnectedError)):
            return True
        seen = seen.__cause__
    return False


def abort_batch(options: SinkOptions, messages: Sequence[Any], label: str, batch_id: int | None) -> None:
    """Nothing to undo: a batch reaches the archive only in `commit`, and its rows live only in the messages."""
    log.info(
        "aborted batch %s of %s: nothing was published", label if batch_id is None else batch_id, options.target_text()
    )


def _check_messages(messages: Sequence[Any], label: str) -> list[StagedPartition]:
    staged: list[StagedPartition] = []
    for index, message in enumerate(messages):
        if not isinstance(message, StagedPartition):
            raise SinkError(
                f"commit got no staged data for task {index} of batch {label} "
                f"({type(message).__name__}): the task did not complete"
            )
        if message.batch != label:
            raise SinkError(
                f"partition {message.partition} was staged for batch {message.batch}, not for batch {label}"
            )
        staged.append(message)
    return sorted(staged, key=lambda m: m.partition)


def _check_target(target: SinkTarget | None, options: SinkOptions, held: HeldLog, kind: str) -> None:
    if target is None:
        return
    where = held.describe()
    if target.kind != kind:
        raise SinkError(f"{where} belongs to a {target.kind} sink, not a {kind} one: batch ids would clash")
    if options.recording_id is not None and options.recording_id != target.recording_id:
        raise SinkError(
            f"option recordingId={options.recording_id} but {where} writes recording {target.recording_id}: "
            "give this query a new checkpointLocation to write another recording"
        )
    if options.stream_id is not None and options.stream_id != target.stream_id:
        raise SinkError(
            f"option streamId={options.stream_id} but {where} writes recording {target.recording_id} of stream "
            f"{target.stream_id}: give this query a new checkpointLocation to write another stream"
        )


def _commit_held(
    ops: ArchiveOps,
    held: HeldLog,
    options: SinkOptions,
    staged: list[StagedPartition],
    batch_id: int | None,
    streaming: bool,
) -> tuple[BatchEntry | None, bool]:
    """(the batch's entry, whether this call published it); already committed batches are not published again."""
    kind = "stream" if streaming else "batch"
    state = held.state
    _check_target(state.target, options, held, kind)
    last = state.last
    if batch_id is None:
        batch_id = last.batch_id + 1 if last is not None else 0
    elif last is not None and batch_id <= last.batch_id:
        existing = state.find(batch_id)
        log.info(
            "batch %d is already committed (%s): nothing to do",
            batch_id,
            f"positions [{existing.start_position}, {existing.stop_position}) of recording {existing.recording_id}"
            if existing
            else f"last committed batch is {last.batch_id}",
        )
        return existing, False
    elif last is not None and batch_id > last.batch_id + 1:
        log.warning(
            "batch %d follows batch %d in %s: the batch map has a gap", batch_id, last.batch_id, held.describe()
        )
    faults.check("before-publish", batchId=batch_id)
    resume = None
    if state.pending is not None:
        same_batch = staged if state.pending.batch_id == batch_id else None
        resume = recover(ops, held, state.pending, same_batch)
    return _publish(ops, held, options, staged, batch_id, kind, resume), True


def recover(
    ops: ArchiveOps, held: HeldLog, pending: Pending, staged: list[StagedPartition] | None = None
) -> Resume | None:
    """Finish or undo a commit that died while publishing.

    With `staged` (the same batch committed again) and the rows it left being exactly the batch's first rows at
    the positions this commit gives them, keep them and return where to go on (`resume`): readers never see a row
    taken back. Otherwise truncate back to where it started and log the rollback.
    """
    descriptor = ops.descriptor(pending.recording_id, f"pending commit of batch {pending.batch_id}")
    if pending.session_id and not descriptor.is_active:  # it may have died between its extend and publication
        ops.stop_orphans(descriptor.stream_id, session_id=pending.session_id)
    if descriptor.is_active:
        log.warning(
            "recording %d is still active after an interrupted commit of batch %d: stopping it",
            pending.recording_id,
            pending.batch_id,
        )
        descriptor = ops.stop_active(pending.recording_id)
    if staged is not None and descriptor.stop_position > pending.start_position:
        resume = _find_resume(ops, descriptor, pending, staged)
        if resume is not None:
            if resume.position < descriptor.stop_position:  # a message left open, or its term's padding
                ops.truncate(pending.recording_id, resume.position)
            log.warning(
                "finishing interrupted commit of batch %d forward: its first %d rows, recorded at [%d, %d) of "
                "recording %d, are kept; publishing the rest",
                pending.batch_id,
                resume.rows,
                pending.start_position,
                resume.position,
                pending.recording_id,
            )
            return resume
    if descriptor.stop_position > pending.start_position:
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
    held.append(rollback_record(pending))
    return None


def _find_resume(
    ops: ArchiveOps, descriptor: RecordingDescriptor, pending: Pending, staged: list[StagedPartition]
) -> Resume | None:
    """Compare what the interrupted commit recorded with the batch's rows (see `resume`); None if they differ."""
    values: list[pa.Array] = []
    reserved: list[np.ndarray] = []
    for message in staged:
        for batch in read_staged(message):
            values.append(batch.column(0))
            reserved.append(
                batch.column(1).to_numpy().astype(np.int64)
                if batch.num_columns > 1
                else np.zeros(batch.num_rows, dtype=np.int64)
            )
    stop = descriptor.stop_position
    read_range = ReadRange(
        0,
        RecordingFacts.of(descriptor),
        pending.start_position,
        stop,
        stop,
        RunningArchive(ops.options.connection),
        True,
    )
    try:
        batch_values = pa.concat_arrays(values) if values else pa.array([], pa.binary())
        return find_resume(
            read_batches(read_range, row_schema(None), None),
            batch_values,
            np.concatenate(reserved) if reserved else np.zeros(0, dtype=np.int64),
            pending.start_position,
            stop,
            descriptor.term_buffer_length,
            descriptor.mtu_length - frames.HEADER_LENGTH,
        )
    except (pa.ArrowException, ArchiveError, OSError, ValueError) as ex:
        log.warning("could not compare the interrupted commit of batch %d with its rows: %s", pending.batch_id, ex)
        return None


def _publish(
    ops: ArchiveOps,
    held: HeldLog,
    options: SinkOptions,
    staged: list[StagedPartition],
    batch_id: int,
    kind: str,
    resume: Resume | None = None,
) -> BatchEntry:
    now = int(time.time() * 1000)
    rows = sum(m.rows for m in staged)
    payload = sum(m.payload_bytes for m in staged)
    if resume is not None:
        return _publish_rest(ops, held, options, staged, batch_id, resume, rows, payload)
    if held.state.target is None and held.state.creating is not None and options.recording_id is None:
        _adopt(ops, held, held.state.creating, kind, now)
    target = held.state.target
    last = held.state.last
    recording_id = target.recording_id if target is not None else options.recording_id
    if recording_id is not None:
        origin = f"from {held.describe()}" if target is not None else "option recordingId"
        descriptor = ops.descriptor(recording_id, origin)
        if descriptor.is_active:
            if target is None or not target.created_by_sink:
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
        if target is None:
            held.append(SinkTarget(recording_id, False, descriptor.stream_id, kind, held.identity, now).to_json())
        if rows == 0:
            return _record(
                held,
                BatchEntry(batch_id, recording_id, descriptor.stop_position, descriptor.stop_position, 0, 0, now),
            )
        session_id = own_session_id()
        held.append(Pending(batch_id, recording_id, descriptor.stop_position, now, session_id).to_json())
        opened = ops.open_extend(descriptor, options.channel or descriptor.original_channel, session_id)
    else:
        assert options.channel is not None and options.stream_id is not None
        stream_id = options.stream_id

        def note_creating(session_id: int, channel: str) -> None:
            held.append(Creating(session_id, stream_id, channel, now).to_json())

        opened = ops.open_new(options.channel, stream_id, note_creating)
        try:
            faults.check("after-start", batchId=batch_id)
            held.append(SinkTarget(opened.recording_id, True, options.stream_id, kind, held.identity, now).to_json())
            held.append(Pending(batch_id, opened.recording_id, opened.start_position, now, opened.session_id).to_json())
        except BaseException:
            opened.publication.close()
            raise
    pending = Pending(batch_id, opened.recording_id, opened.start_position, now, opened.session_id)
    return _publish_and_record(ops, held, opened, staged, pending, rows, payload)


def _publish_and_record(
    ops: ArchiveOps,
    held: HeldLog,
    opened: OpenRecording | None,
    staged: list[StagedPartition],
    pending: Pending,
    rows: int,
    payload: int,
    skip: int = 0,
    stop_position: int | None = None,
) -> BatchEntry:
    """Publish the batch's rows (but the first `skip`) on `opened`, then append its `commit` record.

    A failure while publishing closes the publication and rolls the batch back at once (best effort). With no
    publication (every row already recorded), `stop_position` is where the batch ends.
    """
    if opened is not None:
        try:
            stop_position = _stream_staged(ops, opened, staged, pending.batch_id, skip=skip)
        except BaseException as ex:
            opened.publication.close()
            _rollback(ops, held, pending, ex)
            raise
    assert stop_position is not None
    entry = BatchEntry(
        pending.batch_id,
        pending.recording_id,
        pending.start_position,
        stop_position,
        rows,
        payload,
        int(time.time() * 1000),
    )
    return _record(held, entry)


def _publish_rest(
    ops: ArchiveOps,
    held: HeldLog,
    options: SinkOptions,
    staged: list[StagedPartition],
    batch_id: int,
    resume: Resume,
    rows: int,
    payload: int,
) -> BatchEntry:
    """Publish the rows of a batch an interrupted commit did not record; the batch keeps its `pending` start."""
    pending = held.state.pending
    assert pending is not None and pending.batch_id == batch_id
    descriptor = ops.descriptor(pending.recording_id, f"pending commit of batch {batch_id}")
    if descriptor.stop_position != resume.position:
        raise SinkError(
            f"recording {pending.recording_id} stops at {descriptor.stop_position}, not at {resume.position} where "
            f"the interrupted commit of batch {batch_id} is to go on: was it changed by someone else?"
        )
    opened = None
    if resume.rows < rows:
        session_id = own_session_id()  # noted first, as for any extend (see `recover`)
        held.append(replace(pending, session_id=session_id).to_json())
        opened = ops.open_extend(descriptor, options.channel or descriptor.original_channel, session_id)
    return _publish_and_record(ops, held, opened, staged, pending, rows, payload, resume.rows, resume.position)


def _adopt(ops: ArchiveOps, held: HeldLog, creating: Creating, kind: str, now: int) -> None:
    """Make the recording an interrupted commit started (before it could log its id) the sink's target.

    The commit that logged `creating` died between asking the archive to record its publication and appending the
    `target` record; nothing was published yet (rows follow `target` and `pending`), so the recording, if the
    archive started it, is empty. It is found by its publication's session and stream id, stopped if still active,
    and adopted; one that holds data or cannot be found is left alone and a new recording is started.
    """
    candidates = [
        d
        for d in ops.archive.list_recordings_for_uri(0, 1 << 30, "", creating.stream_id)
        if d.session_id == creating.session_id and d.stream_id == creating.stream_id
    ]
    if not candidates:
        ops.stop_orphans(creating.stream_id, session_id=creating.session_id)
        log.info(
            "interrupted creation of %s's recording (session %d) never reached the archive: starting a new one",
            held.identity,
            creating.session_id,
        )
        return
    descriptor = max(candidates, key=lambda d: d.recording_id)
    if descriptor.is_active:
        descriptor = ops.stop_active(descriptor.recording_id)
    if descriptor.stop_position != descriptor.start_position:
        log.warning(
            "recording %d has session id %d of an interrupted creation for %s but holds data: not adopted",
            descriptor.recording_id,
            creating.session_id,
            held.identity,
        )
        return
    log.warning(
        "adopting empty recording %d, started by an interrupted commit for %s, as the target",
        descriptor.recording_id,
        held.identity,
    )
    held.append(SinkTarget(descriptor.recording_id, True, descriptor.stream_id, kind, held.identity, now).to_json())


def _record(held: HeldLog, entry: BatchEntry) -> BatchEntry:
    faults.check("before-entry", batchId=entry.batch_id)
    held.append(commit_record(entry))
    faults.check("after-entry", batchId=entry.batch_id)
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
    ops: ArchiveOps, opened: OpenRecording, staged: list[StagedPartition], batch_id: int, skip: int = 0
) -> int:
    """Publish the staged batches in partition order (but their first `skip` rows), wait for the recorder, stop;
    returns the stop position."""
    what = f"publication {opened.channel} stream {opened.publication.stream_id} (recording {opened.recording_id})"
    publisher = FramePublisher(opened.publication, ops.timeout_s, what, check_alive=ops.poll)
    fault_rows = faults.rows_threshold("publish", batchId=batch_id)
    published = skip
    try:
        for message in staged:
            for batch in read_staged(message):
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                if skip:
                    batch, skip = batch.slice(skip), 0
                values = batch.column(0)
                reserved = batch.column(1).to_numpy() if batch.num_columns > 1 else None
                if fault_rows is not None and published + len(values) >= fault_rows:
                    cut = max(fault_rows - published, 0)
                    publisher.publish(values.slice(0, cut), None if reserved is None else reserved[:cut])
                    faults.check("publish", fault_rows, batchId=batch_id)
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


def _rollback(ops: ArchiveOps, held: HeldLog, pending: Pending, cause: BaseException) -> None:
    """Best effort, right away: truncate what this failed commit published; the next commit retries if this fails."""
    try:
        recover(ops, held, pending)
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
