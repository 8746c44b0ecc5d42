"""What the batch and streaming readers share: option parsing, the schema check, and `read()` on executors.

`read()` runs in an executor's Python worker on the pickled planning instance, so reader state that holds
connections (the driver-side `RecordingSource`) is dropped from the pickle, and everything a read needs comes from
the partition plus the parsed options.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.field_times import FieldOrderCheck
from aeron_archive_spark.archive.tables.open_source import open_recording_source
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.archive.tables.payload import PayloadDecoder, field_column_name, payload_decoder
from aeron_archive_spark.archive.tables.ranges import ReadRange
from aeron_archive_spark.archive.tables.read import current_descriptors, read_ranges
from aeron_archive_spark.archive.tables.recording_source import RecordingSource
from aeron_archive_spark.connector.source.options import ReadOptions
from aeron_archive_spark.connector.source.partition import AeronArchivePartition
from aeron_archive_spark.connector.source.schema import arrow_schema, schema_for

log = logging.getLogger(__name__)


class ReaderBase:
    """Mixin for AeronArchiveBatchReader / AeronArchiveStreamReader."""

    _UNPICKLED: tuple[str, ...] = ("_source", "_decoder", "_decoder_built")

    def _setup(self, options: Mapping[str, str], schema: StructType, streaming: bool) -> None:
        self.options = ReadOptions.parse(options, streaming)
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
            self._decoder = payload_decoder(self.options.recordings)
            self._decoder_built = True
        return self._decoder

    @property
    def source(self) -> RecordingSource:
        """The driver-side view of the recordings (opened lazily: constructors must stay cheap)."""
        if self._source is None:
            self._source = open_recording_source(self.options.recordings)
        return self._source

    def _close_source(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            source.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Record batches of the messages that begin in the partition's ranges, range after range (executor side)."""
        if not isinstance(partition, AeronArchivePartition):
            return  # Spark's stand-in `InputPartition(None)` when planning found nothing to read
        readable = self._skip_lost_data(partition.read_ranges)
        if readable:
            after_loss = None if self.options.fail_on_data_loss else self._after_loss
            decoder = self._payload_decoder()
            batches = read_ranges(readable, self._arrow_schema, decoder, after_loss)
            field = self.options.recordings.timestamp_field
            by_time = self.options.starting_time is not None or self.options.ending_time is not None
            if field is None or decoder is None or not by_time:
                yield from batches
                return
            # A window placed by the messages' own time field: its reads check the order it assumes.
            order = FieldOrderCheck(field_column_name(decoder, field), self.options.recordings.timestamp_field_unit_ns)
            for batch in batches:
                yield order.check(batch)

    def _after_loss(self, read_range: ReadRange, error: Exception) -> ReadRange | None:
        """failOnDataLoss=false: a range whose read failed goes on with what is left of it if its recording lost
        data under the reader (a purge or retention removed segments it had not read yet, a truncation); the
        range itself otherwise (the failure is raised)."""
        rid = read_range.recording_id
        try:
            descriptor = current_descriptors([read_range])[rid]
        except Exception as ex:
            log.debug("recording %d: could not look it up again after a failed read: %s", rid, ex)
            return read_range
        surviving = self._surviving(read_range, descriptor)
        if surviving is not read_range:
            log.warning(
                "recording %d: reading [%d, %d) failed after data loss: %s",
                rid,
                read_range.start,
                read_range.end,
                error,
            )
        return surviving

    def _skip_lost_data(self, ranges: Sequence[ReadRange]) -> list[ReadRange]:
        """With failOnDataLoss=false, read only what still exists of ranges truncated or purged since planning.

        The driver clips a planned batch to what exists when it plans it (also when a restarted query re-runs a
        batch from its offset log), but a truncation or purge can still land between planning and this read; the
        recordings are looked up again (catalog, or `ListRecording` through the archive, once for all the
        partition's ranges) so the read neither fails on the missing bytes nor waits for them. With
        failOnDataLoss=true the read goes ahead and fails there, naming the recording and position.
        """
        if self.options.fail_on_data_loss:
            return list(ranges)
        descriptors = current_descriptors(ranges)
        readable = []
        for partition in ranges:
            surviving = self._surviving(partition, descriptors.get(partition.recording_id))
            if surviving is not None:
                readable.append(surviving)
        return readable

    @staticmethod
    def _surviving(partition: ReadRange, descriptor: RecordingDescriptor | None) -> ReadRange | None:
        rid, start, end = partition.recording_id, partition.start, partition.end
        if descriptor is None:
            log.warning("recording %d vanished before partition [%d, %d) was read; skipping it", rid, start, end)
            return None
        stop = None if descriptor.is_active else descriptor.stop_position
        surviving = partition.surviving(descriptor.start_position, stop)
        if surviving is partition:
            return partition
        extent = f"now spans [{descriptor.start_position}, {'active' if stop is None else stop})"
        if surviving is None:
            log.warning(
                "recording %d was truncated or purged after partition [%d, %d) was planned (it %s): "
                "nothing of the partition is left; skipping it",
                rid,
                start,
                end,
                extent,
            )
            return None
        log.warning(
            "recording %d was truncated or purged after partition [%d, %d) was planned (it %s): "
            "reading what is left, [%d, %d)",
            rid,
            start,
            end,
            extent,
            surviving.start,
            surviving.end,
        )
        return surviving
