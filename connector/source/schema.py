"""The source's Spark schema: the Arrow row schema of `archive.tables.schema`, as Spark types.

Spark checks every `pyarrow.RecordBatch` that `read()` yields against `to_arrow_schema(schema)` with
`Schema.equals`, so the Arrow schema batches are built with is derived back from the Spark schema rather than
declared twice: every field nullable, `binary` (not `large_binary`), int32/int64 exactly as the row schema says.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from aeron_archive_spark.archive.tables.payload import PayloadDecoder, payload_decoder
from aeron_archive_spark.archive.tables.schema import row_schema
from aeron_archive_spark.connector.source.options import ReadOptions


def schema_for(decoder: PayloadDecoder | None) -> StructType:
    """The fixed columns, then the decoder's columns, as Spark types."""
    return StructType([StructField(f.name, from_arrow_type(f.type), True) for f in row_schema(decoder)])


FIXED_FIELDS = schema_for(None)


def source_schema(options: Mapping[str, str]) -> StructType:
    """The schema `DataSource.schema()` reports; validates the options as a side effect (errors name them)."""
    return schema_for(payload_decoder(ReadOptions.parse(options, None).recordings))


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects batches of `schema` to have."""
    return to_arrow_schema(schema, timezone="UTC")
