"""Executor side: stage one partition's rows as an Arrow IPC file, and the commit message that names it.

Publishing from `write()` would be at-least-once: a failed task attempt's messages would already be in the
recording. So each attempt writes `b{batch}-p{partition}-a{attempt}-{token}.arrow` (to a temporary name first,
renamed when complete) and returns a `StagedPartition`; only the attempts Spark reports as successful reach
`commit`, which publishes exactly those files in partition order. The random token keeps a zombie attempt from
an earlier run from overwriting a file a later commit message names. Staged files need no fsync: if the machine
dies before the commit, Spark re-runs the whole micro-batch and stages it again.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.columns import InputLayout, staged_schema, to_staged
from aeron_archive_spark.connector.sink.errors import SinkError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^b(?P<batch>[^-]+)-p(?P<partition>\d+)-a(?P<attempt>\d+)-[0-9a-f]+\.arrow(\.tmp)?$")


@dataclass
class StagedPartition(WriterCommitMessage):
    """What one successful task attempt staged; pickled back to the driver."""

    batch: str
    partition: int
    attempt: int
    path: str
    rows: int
    payload_bytes: int
    max_length: int


def staged_file_name(batch: str, partition: int, attempt: int) -> str:
    return f"b{batch}-p{partition}-a{attempt}-{uuid.uuid4().hex[:12]}.arrow"


def stage_partition(
    batches: Iterator[pa.RecordBatch],
    layout: InputLayout,
    staging_dir: str,
    batch: str,
    partition: int,
    attempt: int,
    fault_dir: str | None,
) -> StagedPartition:
    """Write every input batch (converted to the staged layout) to one IPC file; no per-row Python work."""
    os.makedirs(staging_dir, exist_ok=True)
    path = os.path.join(staging_dir, staged_file_name(batch, partition, attempt))
    tmp = path + ".tmp"
    schema = staged_schema(layout)
    where = f"partition {partition} of batch {batch}"
    rows = payload = longest = 0
    fault_rows = faults.rows_threshold(
        fault_dir, "write", batchId=_int_or_str(batch), partition=partition, attempt=attempt
    )
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for batch_in in batches:
                if batch_in.num_rows == 0:
                    continue
                staged = to_staged(batch_in, layout, schema, where)
                writer.write_batch(staged)
                values = staged.column(0)
                offsets = np.frombuffer(
                    values.buffers()[1], dtype=np.int32, count=len(values) + 1, offset=values.offset * 4
                )
                rows += len(values)
                payload += int(offsets[-1] - offsets[0])
                longest = max(longest, int(np.diff(offsets).max()))
                if fault_rows is not None and rows >= fault_rows:
                    faults.check(
                        fault_dir, "write", rows, batchId=_int_or_str(batch), partition=partition, attempt=attempt
                    )
        os.replace(tmp, path)
        faults.check(fault_dir, "after-stage", rows, batchId=_int_or_str(batch), partition=partition, attempt=attempt)
    except BaseException:
        with suppress(OSError):
            os.remove(tmp)
        raise
    log.debug("staged %d rows (%d payload bytes) of %s in %s", rows, payload, where, path)
    return StagedPartition(batch, partition, attempt, path, rows, payload, longest)


def _int_or_str(batch: str) -> int | str:
    return int(batch) if batch.lstrip("-").isdigit() else batch


def read_staged(message: StagedPartition) -> Iterable[pa.RecordBatch]:
    """The staged batches of one partition, memory-mapped (zero copy), checked against the commit message."""
    try:
        source = pa.memory_map(message.path, "r")
    except FileNotFoundError:
        raise SinkError(
            f"staged file {message.path} of partition {message.partition} (batch {message.batch}) is "
            "missing: stagingLocation must be shared by executors and the driver"
        ) from None
    reader = pa.ipc.open_file(source)
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    rows = sum(b.num_rows for b in batches)
    if rows != message.rows:
        raise SinkError(f"staged file {message.path} holds {rows} rows, its task reported {message.rows}")
    return batches


def remove_files(paths: Iterable[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as ex:
            log.warning("could not remove staged file %s: %s", path, ex)


def sweep(staging_dir: str, batch: str | None = None, up_to_batch: int | None = None) -> int:
    """Remove staged files of `batch`, and of every numeric batch <= up_to_batch (failed attempts, old runs)."""
    removed = []
    for path in glob.glob(os.path.join(glob.escape(staging_dir), "b*.arrow*")):
        match = _NAME.match(os.path.basename(path))
        if match is None:
            continue
        label = match.group("batch")
        if label == batch or (up_to_batch is not None and label.isdigit() and int(label) <= up_to_batch):
            removed.append(path)
    remove_files(removed)
    return len(removed)
