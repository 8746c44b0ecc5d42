"""`df.writeStream.format("aeron-archive")`: stage on executors, publish exactly once on the driver's commit.

Spark creates this writer per micro-batch in a planning worker (that instance is pickled to the executors for
`write`) and again in a fresh driver-side worker for `commit`/`abort`, so nothing but the options travels
between the two: the rows travel in the commit messages, and everything durable lives in the archive (the
sink log found by the query's checkpointLocation). See `aeron_archive_spark.connector.sink.committer` for the
protocol and what each crash point leaves behind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.connector.sink.columns import input_layout
from aeron_archive_spark.connector.sink.options import parse_sink_options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


class AeronArchiveStreamWriter(DataSourceStreamArrowWriter):
    """Appends each micro-batch to one Aeron Archive recording, exactly once (see module docstring)."""

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError(
                "the aeron-archive sink supports outputMode append only: a recording is an "
                "append-only log, so complete mode (rewrite the whole result every batch) does not "
                "apply"
            )
        self.options = parse_sink_options(options, streaming=True)
        self.layout = input_layout(schema, self.options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        from aeron_archive_spark.connector.sink.staging import stage_partition

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("AeronArchiveStreamWriter.write runs in a Spark task only")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if batch_id is None:
            raise RuntimeError("Spark did not set the streaming.sql.batchId task property for this micro-batch")
        return stage_partition(
            iterator,
            self.layout,
            str(int(batch_id)),
            context.partitionId(),
            context.attemptNumber(),
            self.options.task_result_compression,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from aeron_archive_spark.connector.sink.committer import commit_batch

        commit_batch(self.options, messages, batchId, str(batchId), streaming=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from aeron_archive_spark.connector.sink.committer import abort_batch

        abort_batch(self.options, messages, str(batchId), batchId)
