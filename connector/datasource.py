"""`format("aeron-archive")`: one DataSource serving `read`, `readStream`, `write` and `writeStream`.

The heavy pieces (Aeron, numpy, pyarrow) are imported only when a reader or writer is created, because Spark
imports this module in its data-source lookup worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

NAME = "aeron-archive"


class AeronArchiveDataSource(DataSource):
    """Aeron Archive recordings as a Spark table or stream; see README for the options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from aeron_archive_spark.connector.source.schema import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader

        return AeronArchiveBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from aeron_archive_spark.connector.source.stream_reader import AeronArchiveStreamReader

        return AeronArchiveStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from aeron_archive_spark.connector.sink.batch_writer import AeronArchiveBatchWriter

        return AeronArchiveBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from aeron_archive_spark.connector.sink.stream_writer import AeronArchiveStreamWriter

        return AeronArchiveStreamWriter(self.options, schema, overwrite)
