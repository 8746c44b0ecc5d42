"""The source's row schema: the fixed Aeron columns, plus a payload decoder's typed columns when `sbeSchema` is set.

Spark checks every `pyarrow.RecordBatch` that `read()` yields against `to_arrow_schema(schema)` with
`Schema.equals`, so the Arrow schema here is derived from the Spark schema rather than declared twice: every field
nullable, `binary` (not `large_binary`), int32/int64 exactly as below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from aeron_archive_spark.connector.options import SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from aeron_archive_spark.connector.source.payload import PayloadDecoder

FIXED_FIELDS = StructType(
    [
        StructField("recordingId", LongType(), True),
        StructField("position", LongType(), True),
        StructField("sessionId", IntegerType(), True),
        StructField("streamId", IntegerType(), True),
        StructField("reservedValue", LongType(), True),
        StructField("value", BinaryType(), True),
    ]
)
FIXED_NAMES = frozenset(FIXED_FIELDS.fieldNames())


def schema_for(decoder: PayloadDecoder | None) -> StructType:
    """FIXED_FIELDS, then the decoder's columns (Spark types mapped from its Arrow fields)."""
    if decoder is None:
        return FIXED_FIELDS
    from pyspark.sql.pandas.types import from_arrow_type

    fields = list(FIXED_FIELDS.fields)
    for f in decoder.arrow_fields():
        if f.name in FIXED_NAMES:
            raise ValueError(f"sbeSchema: decoded column {f.name!r} collides with a fixed source column")
        fields.append(StructField(f.name, from_arrow_type(f.type), True))
    return StructType(fields)


def source_schema(options: Mapping[str, str]) -> StructType:
    """The schema `DataSource.schema()` reports; validates the options as a side effect (errors name them)."""
    from aeron_archive_spark.connector.source.payload import payload_decoder

    return schema_for(payload_decoder(SourceOptions.parse(options, None)))


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects batches of `schema` to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
