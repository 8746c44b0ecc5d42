"""`df.write.format("aeron-archive").mode("append")`: the streaming sink's machinery for one batch.

Each `df.write` is one entry of the batch map of its target (recording id, or channel and stream id), with the
next free batch id as its (pseudo) batch id: every write to the same target shares one sink log in the archive,
so a write also repairs what a crashed earlier write left behind.

Only `append` is supported: `overwrite` would have to truncate the recording under its readers (a recording is
an append-only log that others may be tailing), and making "truncate, then write" exactly once would need a
second pending state for little use; truncate explicitly with `AeronArchive.truncate_recording` if that is
really wanted.

A write is all or nothing: its rows reach the archive only in the driver's commit, which truncates whatever it
published if it fails (or, after a driver crash, the next write to the same target does).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.connector.sink.columns import input_layout
from aeron_archive_spark.connector.sink.options import parse_sink_options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


class AeronArchiveBatchWriter(DataSourceArrowWriter):
    """Appends one DataFrame to an Aeron Archive recording as a single committed batch."""

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError(
                "the aeron-archive sink supports mode('append') only: a recording is an append-only "
                "log that readers may be tailing, so mode('overwrite') is rejected; truncate the "
                "recording explicitly (AeronArchive.truncate_recording) if you mean to rewrite it"
            )
        self.options = parse_sink_options(options, streaming=False)
        self.layout = input_layout(schema, self.options)
        # The driver creates this instance once per write and pickles it to the executors and to the commit, so
        # the label is shared by all of them and unique per write.
        self.label = f"w{time.time_ns()}{uuid.uuid4().hex[:6]}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        from aeron_archive_spark.connector.sink.staging import stage_partition

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("AeronArchiveBatchWriter.write runs in a Spark task only")
        return stage_partition(
            iterator,
            self.layout,
            self.label,
            context.partitionId(),
            context.attemptNumber(),
            self.options.task_result_compression,
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from aeron_archive_spark.connector.sink.committer import commit_batch

        commit_batch(self.options, messages, None, self.label, streaming=False)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from aeron_archive_spark.connector.sink.committer import abort_batch

        abort_batch(self.options, messages, self.label, None)
