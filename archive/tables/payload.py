"""The hook that turns message payloads into typed columns (`sbeSchema`), beside the raw `value` column.

`aeron_archive_spark.archive.tables.sbe.decode.SbeDecoder(schema_path: str, message: str | None, on_error: str)`
implements `PayloadDecoder` for SBE (`sbeSchema`, `sbeMessage`, `sbe.onError` = "fail" | "null"); the source only
depends on this protocol and on that constructor (see `payload_decoder`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from aeron_archive_spark.archive.tables.options import SourceOptions


@runtime_checkable
class PayloadDecoder(Protocol):
    """Decodes a batch of message payloads into extra Arrow columns, vectorised (no Python loop per message).

    A decoder is built on the driver (for the schema) and again on each executor (for reads) from the same
    options, so construction must be deterministic and reasonably cheap.
    """

    def arrow_fields(self) -> list[pa.Field]:
        """The extra columns, appended after `value` in this order.

        Every field must be nullable and of a type Spark maps both ways (signed ints, float/double, bool, binary,
        string, timestamp, decimal, struct/list of those): widen unsigned SBE types yourself (uint8 -> int16,
        uint16 -> int32, uint32 -> int64; uint64 -> int64 or decimal(20,0)). Field names must not collide with
        the fixed columns (recordingId, position, sessionId, streamId, reservedValue, value).
        """
        ...

    def decode(self, values: pa.BinaryArray, positions: np.ndarray, recording_id: int) -> list[pa.Array]:
        """One array per `arrow_fields()` entry, each `len(values)` long and of exactly that field's type.

        `values[i]` is the whole reassembled payload of the message at stream position `positions[i]` (int64) of
        recording `recording_id`. A payload that cannot be decoded (unknown template, truncated block) raises an
        error naming the recording and that position, or gives null in every decoded column of that row when the
        decoder was built with `sbe.onError=null`.
        """
        ...


def payload_decoder(options: SourceOptions) -> PayloadDecoder | None:
    """The decoder the options ask for (`sbeSchema`), or None for raw `value` only."""
    if options.sbe_schema is None:
        return None
    from aeron_archive_spark.archive.tables.sbe.decode import SbeDecoder

    decoder: PayloadDecoder = SbeDecoder(options.sbe_schema, options.sbe_message, options.sbe_on_error)
    if options.timestamp_field is not None:
        field_column_name(decoder, options.timestamp_field)  # a clear error now, not at the first read by time
    return decoder


def field_column_name(decoder: PayloadDecoder, field: str) -> str:
    """The decoded column `field` names (matched case-insensitively, as Spark does); a clear error listing the
    integer columns otherwise."""
    import pyarrow as pa

    fields = decoder.arrow_fields()
    for f in fields:
        if f.name.lower() == field.lower():
            if not (pa.types.is_integer(f.type) or pa.types.is_decimal(f.type) or pa.types.is_timestamp(f.type)):
                raise ValueError(f"option timestampField: column {f.name!r} is {f.type}, not an integer time")
            name: str = f.name
            return name
    candidates = [f.name for f in fields if pa.types.is_integer(f.type) or pa.types.is_decimal(f.type)]
    raise ValueError(
        f"option timestampField: no decoded column {field!r}; integer columns of the schema: "
        + (", ".join(candidates) or "(none)")
    )
