"""What the batch and streaming readers share: option parsing, the schema check, and `read()` on executors.

`read()` runs in an executor's Python worker on the pickled planning instance, so reader state that holds
connections (the driver-side `RecordingSource`) is dropped from the pickle, and everything a read needs comes from
the partition plus the parsed options.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.payload import PayloadDecoder, payload_decoder
from aeron_archive_spark.archive.tables.ranges import ReadRange
from aeron_archive_spark.archive.tables.read import read_batches
from aeron_archive_spark.archive.tables.recording_source import (
    RecordingSource,
    open_recording_source,
)
from aeron_archive_spark.connector.options import OPTIONS
from aeron_archive_spark.connector.source.partition import AeronArchivePartition
from aeron_archive_spark.connector.source.schema import arrow_schema, schema_for

log = logging.getLogger(__name__)


class ReaderBase:
    """Mixin for AeronArchiveBatchReader / AeronArchiveStreamReader."""

    _UNPICKLED = ("_source", "_decoder", "_decoder_built")

    def _setup(self, options: Mapping[str, str], schema: StructType, streaming: bool) -> None:
        self.options = SourceOptions.parse(options, streaming, OPTIONS)
        self._schema = schema
        self._source: RecordingSource | None = None
        self._decoder: PayloadDecoder | None = None
        self._decoder_built = False
        expected = schema_for(self._payload_decoder())
        if schema is not None and schema != expected:
            raise OptionError(
                'format("aeron-archive") has a fixed schema; remove .schema(...) (got '
                f"{schema.simpleString()}, the source produces {expected.simpleString()})"
            )
        self._arrow_schema = arrow_schema(expected)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._UNPICKLED:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._source = None
        self._decoder = None
        self._decoder_built = False

    def _payload_decoder(self) -> PayloadDecoder | None:
        if not self._decoder_built:
            self._decoder = payload_decoder(self.options)
            self._decoder_built = True
        return self._decoder

    @property
    def source(self) -> RecordingSource:
        """The driver-side view of the recordings (opened lazily: constructors must stay cheap)."""
        if self._source is None:
            self._source = open_recording_source(self.options)
        return self._source

    def _close_source(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Record batches of the messages that begin in the partition (executor side)."""
        if not isinstance(partition, AeronArchivePartition):
            return  # Spark's stand-in `InputPartition(None)` when planning found nothing to read
        readable = self._skip_lost_data(partition.read_range)
        if readable is None:
            return
        yield from read_batches(readable, self._arrow_schema, self._payload_decoder())

    def _skip_lost_data(self, partition: ReadRange) -> ReadRange | None:
        """With failOnDataLoss=false, start past data purged since planning (archiveDir; replays report it)."""
        if self.options.fail_on_data_loss or partition.archive_dir is None:
            return partition
        with Catalog(partition.archive_dir, writable=False) as catalog:
            descriptor = catalog.find(partition.recording_id)
        if descriptor is None:
            log.warning(
                "recording %d vanished before partition %d [%d, %d) was read; skipping it",
                partition.recording_id,
                partition.index,
                partition.start,
                partition.end,
            )
            return None
        if descriptor.start_position > partition.start:
            if descriptor.start_position >= partition.end:
                log.warning(
                    "recording %d: partition [%d, %d) was purged (start is now %d); skipping it",
                    partition.recording_id,
                    partition.start,
                    partition.end,
                    descriptor.start_position,
                )
                return None
            log.warning(
                "recording %d: data from %d to %d was purged before it was read; continuing at %d",
                partition.recording_id,
                partition.start,
                descriptor.start_position,
                descriptor.start_position,
            )
            return dataclasses.replace(partition, start=descriptor.start_position)
        return partition
