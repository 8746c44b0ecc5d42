"""The row schema of a read, as Arrow: the fixed Aeron columns, then a payload decoder's typed columns.

Spark-free, so the offline `export` writes exactly the columns a Spark read produces. The Spark source derives its
`StructType` from this schema, and Spark checks every batch against that type's Arrow form; the types used here
(int32/int64, `binary`, `string`, float/double, decimal, every field nullable) map to Spark and back unchanged,
which `tests/spark` checks for the SBE columns too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from aeron_archive_spark.archive.tables.payload import PayloadDecoder

FIXED_FIELDS: tuple[pa.Field, ...] = (
    pa.field("recordingId", pa.int64(), nullable=True),
    pa.field("position", pa.int64(), nullable=True),
    pa.field("sessionId", pa.int32(), nullable=True),
    pa.field("streamId", pa.int32(), nullable=True),
    pa.field("reservedValue", pa.int64(), nullable=True),
    pa.field("value", pa.binary(), nullable=True),
    # When the archive recorded the message (its time index, to within the index's interval); null where unknown:
    # a recording without an index (Java's archive, the index off) or bytes recorded before it began.
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=True),
)
FIXED_NAMES = frozenset(f.name for f in FIXED_FIELDS)


def row_schema(decoder: PayloadDecoder | None) -> pa.Schema:
    """FIXED_FIELDS, then the decoder's columns; a decoded column may not reuse a fixed column's name."""
    fields = list(FIXED_FIELDS)
    if decoder is not None:
        for f in decoder.arrow_fields():
            if f.name in FIXED_NAMES:
                raise ValueError(f"sbeSchema: decoded column {f.name!r} collides with a fixed source column")
            fields.append(f.with_nullable(True))
    return pa.schema(fields)
