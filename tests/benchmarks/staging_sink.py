"""The other sink design of issue 10, built only to be measured: executors publish to per-task staging recordings.

Issue 10 names two ways rows can get from executors into the target recording with nothing shared between hosts:
1. rows carried to the driver inside Spark's commit messages, which the driver publishes into the target (what the
   product's sink does: `connector/sink/staging.py`, `committer.py`);
2. executors publishing each task's rows into a staging recording of its own in the archive, which the commit then
   appends to the target in partition order.

This module is design 2, as faithful as the product's pieces allow, so `bench_cluster --staging` can time both on the
same cluster in the same run:
- `write` (executor): the task's rows, converted exactly as the product's sink converts them, are published with
  the product's block publisher (`FramePublisher`) on a new exclusive publication over UDP to the archive, which
  records it REMOTE as a new recording (the staging recording); the task waits until it is recorded, stops it and
  returns only its id and counts. A failed task leaves a stopped recording nobody commits (the real design would
  purge it in `abort` and on restart; this prototype purges in `commit` only).
- `commit` (driver): each partition's staging recording, in partition order, is replayed to the driver through the
  source's own replay reader (`read_ranges`), and its rows are handed to the product's `commit_batch`, which
  publishes them into the target exactly once; the staging recordings are then purged.

Appending a recording to another cannot happen inside the archive: Aeron's protocol has no such request, and
replication extends a recording only with the same recording's later positions (the frames' term offsets depend on
the position, so a staging recording's bytes cannot be re-based onto the target's stop without re-framing them).
So every byte crosses the network three times (executor -> archive, archive -> driver, driver -> archive) and is
recorded twice, against twice and once for design 1 (executor -> driver in Spark's result, driver -> archive).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

from aeron_archive_spark.connector.sink.stream_writer import AeronArchiveStreamWriter

log = logging.getLogger(__name__)

STAGING_STREAM_OFFSET = 1_000_000  # staging stream id = target stream id + this: never matched by target readers


@dataclass
class StagingRecording(WriterCommitMessage):
    """What one successful task attempt left in the archive: a stopped staging recording."""

    batch: str
    partition: int
    attempt: int
    recording_id: int
    start_position: int
    stop_position: int
    rows: int
    payload_bytes: int
    max_length: int


class StagingStreamWriter(AeronArchiveStreamWriter):
    """The product's stream writer with design 2's `write` and `commit` (module docstring)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        import numpy as np
        from pyspark import TaskContext

        from aeron_archive_spark.connector.sink.archive_ops import ArchiveOps, SignalLog, lease_archive
        from aeron_archive_spark.connector.sink.columns import staged_schema, to_staged
        from aeron_archive_spark.connector.sink.publisher import FramePublisher

        context = TaskContext.get()
        assert context is not None
        batch = str(context.getLocalProperty("streaming.sql.batchId"))
        partition, attempt = context.partitionId(), context.attemptNumber()
        options = self.options
        assert options.channel is not None and options.stream_id is not None
        signals = SignalLog()
        lease, archive = lease_archive(options.connection, signals, local_source=False)
        try:
            ops = ArchiveOps(archive, signals, options)
            opened = ops.open_new(options.channel, options.stream_id + STAGING_STREAM_OFFSET)
            try:
                publisher = FramePublisher(
                    opened.publication, options.publish_timeout_s, f"staging recording {opened.recording_id}"
                )
                schema = staged_schema(self.layout)
                rows = payload = longest = 0
                where = f"partition {partition} of batch {batch}"
                for batch_in in iterator:
                    if batch_in.num_rows == 0:
                        continue
                    staged = to_staged(batch_in, self.layout, schema, where)
                    values = staged.column(0)
                    reserved = staged.column(1).to_numpy() if self.layout.has_reserved else None
                    publisher.publish(values, reserved)
                    offsets = np.frombuffer(
                        values.buffers()[1], dtype=np.int32, count=len(values) + 1, offset=values.offset * 4
                    )
                    lengths = np.diff(offsets)
                    rows += len(values)
                    payload += int(lengths.sum())
                    longest = max(longest, int(lengths.max()))
                    ops.poll()
                ops.await_recorded(opened.recording_id, publisher.position)
                stop = ops.stop(opened)
            finally:
                opened.publication.close()
        finally:
            lease.release()
        return StagingRecording(
            batch, partition, attempt, opened.recording_id, opened.start_position, stop, rows, payload, longest
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from aeron_archive_spark.archive.client.pool import connection_pool
        from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, RunningArchive
        from aeron_archive_spark.archive.tables.read import read_ranges
        from aeron_archive_spark.archive.tables.schema import row_schema
        from aeron_archive_spark.connector.sink.columns import staged_schema
        from aeron_archive_spark.connector.sink.committer import commit_batch
        from aeron_archive_spark.connector.sink.staging import StagedPartition

        staging = sorted((m for m in messages if isinstance(m, StagingRecording)), key=lambda m: m.partition)
        connection = self.options.connection
        with connection_pool().archive(connection, purpose="staging") as archive:
            descriptors = {m.recording_id: archive.list_recording(m.recording_id) for m in staging}
        schema_in = row_schema(None)
        schema_out = staged_schema(self.layout)
        staged: list[StagedPartition] = []
        for message in staging:
            descriptor = descriptors[message.recording_id]
            assert descriptor is not None, f"staging recording {message.recording_id} is gone"
            read_range = ReadRange(
                0,
                RecordingFacts.of(descriptor),
                message.start_position,
                message.stop_position,
                message.stop_position,
                RunningArchive(connection),
                True,
            )
            sink = pa.BufferOutputStream()
            rows = 0
            with pa.ipc.new_stream(sink, schema_out) as writer:
                for batch in read_ranges([read_range], schema_in, None):
                    columns = [batch.column("value")]
                    if self.layout.has_reserved:
                        columns.append(batch.column("reservedValue"))
                    writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema_out))
                    rows += batch.num_rows
            if rows != message.rows:
                raise RuntimeError(f"staging recording {message.recording_id} holds {rows} rows, not {message.rows}")
            staged.append(
                StagedPartition(
                    message.batch,
                    message.partition,
                    message.attempt,
                    sink.getvalue().to_pybytes(),
                    rows,
                    message.payload_bytes,
                    message.max_length,
                )
            )
        commit_batch(self.options, staged, batchId, str(batchId), streaming=True)
        with connection_pool().archive(connection, purpose="staging") as archive:
            for message in staging:
                archive.purge_recording(message.recording_id)


class StagingRecordingsSink(DataSource):
    """`format("bench-staging-recordings")`: the aeron-archive sink's options, design 2's data path."""

    @classmethod
    def name(cls) -> str:
        return "bench-staging-recordings"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return StagingStreamWriter(self.options, schema, overwrite)
