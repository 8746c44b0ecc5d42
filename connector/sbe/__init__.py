"""SBE (Simple Binary Encoding) payloads as typed Spark columns, shared by the source and the sink.

- `columns`: schema fields -> column names and Arrow types, vectorised numpy <-> Arrow conversion.
- `encode`: `SbeEncoder(schema_path, message).encode(batch) -> pa.BinaryArray` for the sink.
- The source's decoder is `aeron_archive_spark.connector.source.sbe_decode.SbeDecoder` (the `PayloadDecoder` protocol).

Schemas are parsed by `aeron_archive_spark.archive.codecs.codec.SbeCodec` (any SBE schema without repeating groups).
"""

from aeron_archive_spark.connector.sbe.columns import (
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
from aeron_archive_spark.connector.sbe.encode import SbeEncoder, encode_batch

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
