"""Which input columns the sink accepts, and their conversion to the staged Arrow layout.

Without `sbeSchema` a row is one Aeron message: `value` (binary, or string sent as its UTF-8 bytes) is the
payload and the optional `reservedValue` (an integral column) goes into the frame header's reserved value field.
Any other column is an error naming it, because silently dropping data would be worse. With `sbeSchema` the
typed columns are encoded into messages of `sbeMessage` on the executors, so what is staged is the same.

Staged batches always have the layout `value: binary not null[, reservedValue: int64]`; the driver-side commit
never needs to know where the bytes came from.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.connector.sink.errors import SinkSchemaError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder
    from aeron_archive_spark.connector.sink.options import SinkOptions

VALUE = "value"
RESERVED_VALUE = "reservedValue"
_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")


@dataclass(frozen=True, slots=True)
class InputLayout:
    """Positions of the input columns in the Arrow batches Spark hands to `write()`."""

    value_index: int | None
    reserved_index: int | None
    column_names: tuple[str, ...]
    sbe_schema: str | None = None  # with sbe_message: typed columns are encoded into SBE messages
    sbe_message: str | None = None

    @property
    def has_reserved(self) -> bool:
        return self.reserved_index is not None


def input_layout(schema: StructType, options: SinkOptions) -> InputLayout:
    """Check the DataFrame's columns; errors name the offending column and what is accepted."""
    names = tuple(field.name for field in schema.fields)
    if not names and options.sbe_schema is not None:
        # Spark hands a Python sink Arrow batches, and a batch without columns carries no row count: every row
        # would be lost without an error (a message with no fields, such as MDP 3.0's AdminHeartbeat12).
        raise SinkSchemaError(
            f"the DataFrame has no columns: Spark passes such rows to a Python sink as empty batches, so none "
            f"would be written; for SBE message {options.sbe_message} (no fields to give), keep the column "
            f"{RESERVED_VALUE!r} (long, 0 if you have none)"
        )
    if options.sbe_schema is not None:
        return _sbe_layout(schema, options)
    value_index = reserved_index = None
    for index, field in enumerate(schema.fields):
        kind = type(field.dataType).__name__
        if field.name.lower() == VALUE.lower():
            if kind not in ("BinaryType", "StringType"):
                raise SinkSchemaError(
                    f"column {field.name!r} must be binary or string, got {field.dataType.simpleString()}"
                )
            value_index = index
        elif field.name.lower() == RESERVED_VALUE.lower():
            if kind not in _INTEGRAL:
                raise SinkSchemaError(
                    f"column {field.name!r} must be a long (the frame header's reserved value), "
                    f"got {field.dataType.simpleString()}"
                )
            reserved_index = index
        else:
            raise SinkSchemaError(
                f"column {field.name!r} is not accepted by the aeron-archive sink: give only {VALUE!r} (binary or "
                f"string) and optionally {RESERVED_VALUE!r} (long), or set sbeSchema/sbeMessage to encode typed "
                f"columns; input columns: {', '.join(names)}"
            )
    if value_index is None:
        raise SinkSchemaError(
            f"the aeron-archive sink needs a column {VALUE!r} (binary or string) with the message "
            f"payload; input columns: {', '.join(names) or '(none)'}"
        )
    return InputLayout(value_index, reserved_index, names)


def _sbe_layout(schema: StructType, options: SinkOptions) -> InputLayout:
    """Check the columns against the SBE message now (on the driver), so a wrong column fails at query start."""
    if options.sbe_message is None:
        raise OptionError(
            "option sbeSchema needs option sbeMessage when writing: the name of the SBE message each row is encoded as"
        )
    encoder = sbe_encoder(options.sbe_schema, options.sbe_message)
    accepted = {name.lower() for name in encoder.input_columns}
    names = tuple(field.name for field in schema.fields)
    reserved_index = None
    for index, field in enumerate(schema.fields):
        if field.name.lower() == RESERVED_VALUE.lower():
            if type(field.dataType).__name__ not in _INTEGRAL:
                raise SinkSchemaError(
                    f"column {field.name!r} must be a long (the frame header's reserved value), "
                    f"got {field.dataType.simpleString()}"
                )
            reserved_index = index
        elif field.name.lower() not in accepted:
            raise SinkSchemaError(
                f"column {field.name!r} is not a field of SBE message {encoder.message} (option sbeMessage); "
                f"its columns are: {', '.join(encoder.input_columns)}, plus optionally {RESERVED_VALUE!r}"
            )
    return InputLayout(None, reserved_index, names, options.sbe_schema, options.sbe_message)


@functools.lru_cache(maxsize=8)
def sbe_encoder(schema_path: str, message: str) -> SbeEncoder:
    """One encoder per (schema, message) and process: executors reuse it for every batch."""
    from aeron_archive_spark.archive.tables.sbe.encode import SbeEncoder

    return SbeEncoder(schema_path, message, ignore_columns=(RESERVED_VALUE,))


def staged_schema(layout: InputLayout) -> pa.Schema:
    import pyarrow as pa

    fields = [pa.field(VALUE, pa.binary(), nullable=False)]
    if layout.has_reserved:
        fields.append(pa.field(RESERVED_VALUE, pa.int64(), nullable=False))
    return pa.schema(fields)


def to_staged(batch: pa.RecordBatch, layout: InputLayout, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """One input batch in the staged layout (zero-copy for binary, and for string: same buffers, new type)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    reserved = batch.column(layout.reserved_index) if layout.reserved_index is not None else None
    if layout.sbe_schema is not None:
        assert layout.sbe_message is not None
        values = sbe_encoder(layout.sbe_schema, layout.sbe_message).encode(batch)
    else:
        assert layout.value_index is not None
        values = batch.column(layout.value_index)
    if values.null_count:
        row = int(pc.index(values.is_null(), True).as_py())
        raise SinkSchemaError(
            f"column {VALUE!r} is null in row {row} of {where}: an Aeron message cannot be null "
            "(use an empty binary value for an empty message)"
        )
    if (
        pa.types.is_string(values.type)
        or pa.types.is_large_string(values.type)
        or pa.types.is_large_binary(values.type)
    ):
        values = values.view(pa.binary()) if pa.types.is_string(values.type) else values.cast(pa.binary())
    elif not pa.types.is_binary(values.type):
        raise SinkSchemaError(f"column {VALUE!r} arrived as Arrow {values.type}, expected binary or string")
    columns = [values]
    if "reservedValue" in schema.names:
        if reserved is None:
            reserved = pa.nulls(len(values), pa.int64())
        if reserved.type != pa.int64():
            reserved = reserved.cast(pa.int64())
        if reserved.null_count:
            reserved = reserved.fill_null(0)
        columns.append(reserved)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
