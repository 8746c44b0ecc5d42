"""SBE (Simple Binary Encoding) payloads as typed Arrow columns, both ways: the source decodes, the sink encodes.

- `columns`: schema fields -> column names and Arrow types, vectorised numpy <-> Arrow conversion.
- `decode`: `SbeDecoder(schema_path, message, on_error)`, the reads' `PayloadDecoder` (Spark source, `export`).
- `encode`: `SbeEncoder(schema_path, message).encode(batch) -> pa.BinaryArray` for the Spark sink.

Schemas are parsed by `aeron_archive_spark.archive.codecs.codec.SbeCodec` (repeating groups, nested groups and
arrays included).
"""

from aeron_archive_spark.archive.tables.sbe.columns import (
    MESSAGE_COLUMN,
    RESERVED_COLUMNS,
    UNKNOWN_ENUM,
    ColumnSpec,
    Kind,
    SbeDecodeError,
    SbeEncodeError,
    load_codec,
    message_columns,
)
from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder, encode_batch

__all__ = [
    "MESSAGE_COLUMN",
    "RESERVED_COLUMNS",
    "UNKNOWN_ENUM",
    "ColumnSpec",
    "Kind",
    "SbeDecodeError",
    "SbeEncodeError",
    "SbeEncoder",
    "encode_batch",
    "load_codec",
    "message_columns",
]
