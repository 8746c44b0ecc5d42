"""Typed Arrow columns -> SBE messages, in bulk, for the sink (`sbeSchema` + `sbeMessage` on a write).

API (what the sink calls)::

    encoder = SbeEncoder(schema_path, "Trade", ignore_columns=("reservedValue",))
    messages: pa.BinaryArray = encoder.encode(batch)   # batch: pa.RecordBatch or pa.Table
    # messages[i] = message header + fixed block (+ var data) of row i, ready to offer as one payload;
    # messages.buffers()[1:] are the int32 offsets and the contiguous bytes if a (buffer, offsets) pair is wanted.
    encoder.input_columns    # the column names the message takes, in schema order
    encoder.fixed_length     # bytes per message when the message has no var fields, else None

Columns are named and typed as the source decodes them (`aeron_archive_spark.archive.tables.sbe.columns`), so decoded
rows can be written back unchanged. Accepted input per field kind: integers (any Arrow integer type, or decimal for
uint64; values are range-checked), float/double, strings or binaries for char arrays (at most `length` bytes, zero
padded; ASCII for US-ASCII fields), binaries for byte arrays, enum names (strings) or codes (integers), set bitmasks
(integers), strings/binaries for var-length data (at most the field's maxValue bytes). Constant fields may be
omitted; if given they must hold the constant. Optional fields may be omitted or null (encoded as their SBE null
value); enums may be null (their null value); a null char array or var field is encoded empty. A missing required
field, a null in one, an unknown column, a value out of range or too long raises `SbeEncodeError` naming the column
(and the row).

Why vectorised: the whole batch is one numpy structured array (header + block per row) filled column by column,
then viewed as bytes; var-length fields are scattered into place with index arithmetic. No Python loop per row,
except for text in a character encoding other than ASCII/UTF-8.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aeron_archive_spark.archive.codecs.codec import SbeCodec
from aeron_archive_spark.archive.tables.sbe.columns import (
    ColumnSpec,
    Kind,
    SbeEncodeError,
    binary_layout,
    gather_bytes,
    header_dtype,
    load_codec,
    message_columns,
    resolve_message,
    wire_dtype,
)

log = logging.getLogger(__name__)

_HEADER_PREFIX = "\0header_"
_INT_RANGE = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint8": (0, (1 << 8) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
    "uint64": (0, (1 << 64) - 1),
    "char": (0, (1 << 8) - 1),
}
_ARROW_WIRE = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "char": pa.uint8(),
    "float": pa.float32(),
    "double": pa.float64(),
}


class SbeEncoder:
    """Encodes rows of typed columns as messages of one SBE template (see the module docstring)."""

    def __init__(self, schema: str | SbeCodec, message: str, ignore_columns: Iterable[str] = ()) -> None:
        self._codec = load_codec(schema) if isinstance(schema, str) else schema
        self._spec = resolve_message(self._codec, message)
        self._columns = message_columns(self._codec, self._spec.template_id)
        self._ignore = {c.lower() for c in ignore_columns}
        self._by_name = {c.name.lower(): c for c in self._columns}
        codec = self._codec
        header = header_dtype(codec)
        hl = codec.header_length
        names: list[str] = []
        formats: list[np.dtype] = []
        offsets: list[int] = []
        header_names, header_fields = header.names, header.fields
        assert header_names is not None and header_fields is not None  # header_dtype is always a structured dtype
        for name in header_names:
            fmt, off = header_fields[name][:2]
            names.append(_HEADER_PREFIX + name)
            formats.append(fmt)
            offsets.append(off)
        for col in self._columns:
            if col.is_fixed:
                assert col.field is not None
                names.append(col.attr)
                formats.append(_wire_format(codec, col))
                offsets.append(hl + col.field.offset)
        self._dtype = np.dtype(
            {"names": names, "formats": formats, "offsets": offsets, "itemsize": hl + self._spec.block_length}
        )
        self._header_values = {
            "block_length": self._spec.block_length,
            "template_id": self._spec.template_id,
            "schema_id": codec.schema_id,
            "version": codec.schema_version,
        }

    @property
    def message(self) -> str:
        return self._spec.name

    @property
    def input_columns(self) -> list[str]:
        return [c.name for c in self._columns]

    @property
    def fixed_length(self) -> int | None:
        return None if self._spec.var_fields or self._spec.groups else self._dtype.itemsize

    def encode(self, batch: pa.RecordBatch | pa.Table) -> pa.BinaryArray:
        """One encoded message per row of `batch`, in row order."""
        n = batch.num_rows
        given: dict[str, pa.Array] = {}
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            key = name.lower()
            if key in self._ignore:
                continue
            if key not in self._by_name:
                raise SbeEncodeError(
                    f"column {name!r} is not a field of SBE message {self._spec.name} (schema "
                    f"{self._codec.source}); its columns are: {', '.join(self.input_columns)}"
                )
            if key in given:
                raise SbeEncodeError(f"column {name!r} appears twice (column names are case-insensitive)")
            given[key] = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        records = np.zeros(n, dtype=self._dtype)
        for name, value in self._header_values.items():
            records[_HEADER_PREFIX + name] = value
        groups, var_parts = self._fill_block(self._columns, given, records, n)
        fixed = records.view(np.uint8).reshape(n * self._dtype.itemsize)
        if not var_parts and not groups:
            offsets = np.arange(n + 1, dtype=np.int64) * self._dtype.itemsize
            if offsets[-1] >= 2**31:
                raise SbeEncodeError(
                    f"{int(offsets[-1])} bytes of SBE messages in one batch exceed Arrow's 2 GiB "
                    "binary limit; write smaller batches"
                )
            return _binary_array(n, offsets, fixed)
        return self._with_var_data(records, groups, var_parts, n)

    # ---- one block: the message's, or the entries' of a group --------------------------------------------------

    def _fill_block(
        self,
        columns: Sequence[ColumnSpec],
        given: Mapping[str, pa.Array],
        records: np.ndarray,
        n: int,
        group: ColumnSpec | None = None,
    ) -> tuple[list[_Entries], list[tuple[ColumnSpec, np.ndarray, np.ndarray, np.ndarray]]]:
        """Write the fixed fields of `columns` into `records` (n rows); return their groups and var data.

        The same for a message's block and for a group's entries (`group`: the group's column, so a missing
        required field is named with it); constants are only checked, nested groups encoded recursively.
        """
        groups: list[_Entries] = []
        var_parts: list[tuple[ColumnSpec, np.ndarray, np.ndarray, np.ndarray]] = []
        for col in columns:
            arr = given.get(col.name.lower())
            if col.kind is Kind.CONSTANT:
                if arr is not None:
                    self._check_constant(col, arr)
            elif col.kind is Kind.GROUP:
                groups.append(self._group(col, arr, n))
            elif col.is_fixed:
                records[col.attr] = self._fixed(col, arr, n, group)
            else:
                var_parts.append((col, *self._var(col, arr, n)))
        return groups, var_parts

    # ---- fixed fields -----------------------------------------------------------------------------------------

    def _missing(self, col: ColumnSpec, n: int, group: ColumnSpec | None = None) -> np.ndarray:
        """Null values for an absent column, or an error naming it if the field is required.

        Inside a group (`group`, the group's column), the struct field is named with its group's path and the
        error lists the entry's own fields, not the message's columns.
        """
        f = col.field
        assert f is not None
        if col.kind in (Kind.TEXT, Kind.BYTES) or f.optional:
            return np.full(
                n, f.null_value if not isinstance(f.null_value, str | bytes) else b"", dtype=wire_dtype(self._codec, f)
            )
        if group is not None:
            raise SbeEncodeError(
                f"missing struct field {col.name!r} in the entries of column {group.name!r}: required field {f.name} "
                f"of group {group.schema_name} of SBE message {self._spec.name} (its fields: "
                f"{', '.join(c.name for c in group.children)})"
            )
        raise SbeEncodeError(
            f"missing column {col.name!r}: required field {f.name} of SBE message "
            f"{self._spec.name} (columns: {', '.join(self.input_columns)})"
        )

    def _fixed(self, col: ColumnSpec, arr: pa.Array | None, n: int, group: ColumnSpec | None = None) -> np.ndarray:
        if arr is None:
            if col.kind is Kind.ARRAY:
                return self._fixed_array(col, pa.nulls(n, type=col.arrow_type), n)
            return self._missing(col, n, group)
        f = col.field
        assert f is not None
        if col.kind in (Kind.TEXT, Kind.BYTES):
            return self._fixed_bytes(col, arr, n)
        if col.kind is Kind.ARRAY:
            return self._fixed_array(col, arr, n)
        values = self._enum_codes(col, arr) if col.kind is Kind.ENUM else self._numbers(col, arr)
        return values.astype(wire_dtype(self._codec, f))

    def _null_fill(self, col: ColumnSpec, arr: pa.Array, allowed: bool, fill: object) -> pa.Array:
        if not arr.null_count:
            return arr
        if not allowed:
            row = int(np.flatnonzero(~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False)))[0])
            raise SbeEncodeError(
                f"column {col.name!r} is null at row {row}, but field {col.schema_name} of SBE "
                f"message {self._spec.name} is required (not presence=optional)"
            )
        return pc.fill_null(arr, pa.scalar(fill, type=arr.type))

    def _numbers(self, col: ColumnSpec, arr: pa.Array) -> np.ndarray:
        f = col.field
        assert f is not None
        primitive = f.primitive_type
        t = arr.type
        numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        if not numeric or (col.kind is not Kind.FLOAT and pa.types.is_floating(t)):
            want = "a number" if col.kind is Kind.FLOAT else "an integer (or decimal for uint64)"
            raise SbeEncodeError(
                f"column {col.name!r} has type {t}; field {col.schema_name} ({primitive}) of SBE "
                f"message {self._spec.name} takes {want}"
            )
        if col.kind is Kind.FLOAT:
            arr = self._null_fill(col, arr.cast(pa.float64()), f.optional, float(f.null_value))
            return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
        if arr.null_count:
            wide = pa.decimal128(20, 0) if primitive == "uint64" or pa.types.is_decimal(t) else pa.int64()
            arr = self._null_fill(col, arr.cast(wide), f.optional, f.null_value)
        low, high = _INT_RANGE[primitive]
        if len(arr):
            bounds = pc.min_max(arr)
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
            if lo is not None and (lo < low or hi > high):
                bad = lo if lo < low else hi
                raise SbeEncodeError(
                    f"column {col.name!r}: value {bad} does not fit field {col.schema_name} "
                    f"({primitive}, {low}..{high}) of SBE message {self._spec.name}"
                )
        try:
            wire = arr.cast(_ARROW_WIRE[primitive], safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as ex:
            raise SbeEncodeError(
                f"column {col.name!r} ({t}) cannot be encoded as {primitive} for field {col.schema_name}: {ex}"
            ) from None
        out: np.ndarray = wire.to_numpy(zero_copy_only=False)
        return out

    def _enum_codes(self, col: ColumnSpec, arr: pa.Array) -> np.ndarray:
        f = col.field
        assert f is not None and f.enum is not None
        enum = f.enum
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            names = pa.array(list(enum.values), type=pa.string())
            index = pc.index_in(arr, value_set=names)
            unknown = pc.and_(pc.is_null(index), arr.is_valid())
            if pc.any(unknown).as_py():
                row = int(np.flatnonzero(np.asarray(unknown.to_numpy(zero_copy_only=False)))[0])
                raise SbeEncodeError(
                    f"column {col.name!r}: {arr[row].as_py()!r} at row {row} is not a "
                    f"{enum.name} value ({', '.join(enum.values)})"
                )
            codes = np.array(list(enum.values.values()), dtype=np.int64)
            idx = index.fill_null(0).to_numpy(zero_copy_only=False)
            out = codes[idx] if len(codes) else np.zeros(len(arr), dtype=np.int64)
            return np.where(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False)), out, enum.null_value)
        if pa.types.is_integer(arr.type):
            values: np.ndarray = arr.cast(pa.int64()).fill_null(enum.null_value).to_numpy(zero_copy_only=False)
            valid = np.isin(values, np.array([*enum.values.values(), enum.null_value], dtype=np.int64))
            if not valid.all():
                row = int(np.flatnonzero(~valid)[0])
                raise SbeEncodeError(
                    f"column {col.name!r}: {int(values[row])} at row {row} is not a {enum.name} "
                    f"code ({', '.join(f'{k}={v}' for k, v in enum.values.items())})"
                )
            return values
        raise SbeEncodeError(
            f"column {col.name!r} has type {arr.type}; enum field {col.schema_name} ({enum.name}) "
            "takes value names (string) or codes (integer)"
        )

    def _fixed_bytes(self, col: ColumnSpec, arr: pa.Array, n: int) -> np.ndarray:
        f = col.field
        assert f is not None
        starts, lengths, data = self._byte_column(col, arr, f.text_encoding if col.kind is Kind.TEXT else None)
        too_long = lengths > f.length
        if too_long.any():
            row = int(np.flatnonzero(too_long)[0])
            raise SbeEncodeError(
                f"column {col.name!r}: {int(lengths[row])} bytes at row {row} exceed the "
                f"{f.length} of field {col.schema_name} of SBE message {self._spec.name}"
            )
        body, _ = gather_bytes(data, starts, lengths)
        matrix = np.zeros((n, f.length), dtype=np.uint8)
        matrix[np.arange(f.length) < lengths[:, None]] = body
        return matrix.view(f"S{f.length}").reshape(n)

    def _byte_column(
        self, col: ColumnSpec, arr: pa.Array, encoding: str | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts, lengths, data) of a string/binary column; nulls are empty; text encoded and checked."""
        t = arr.type
        is_text = pa.types.is_string(t) or pa.types.is_large_string(t)
        if not (is_text or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            raise SbeEncodeError(
                f"column {col.name!r} has type {t}; field {col.schema_name} of SBE message "
                f"{self._spec.name} takes {'string' if encoding else 'binary'} values"
            )
        if is_text and encoding not in (None, "utf-8", "ascii"):
            arr = pa.array([None if s is None else s.encode(encoding) for s in arr.to_pylist()], type=pa.binary())
        if len(arr) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.uint8)
        starts, lengths, data = binary_layout(arr)
        if arr.null_count:
            lengths = np.where(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False)), lengths, 0)
        if is_text and encoding == "ascii" and data.size:
            body, offsets = gather_bytes(data, starts, lengths)
            high = np.flatnonzero(body >= 0x80)
            if high.size:
                row = int(np.searchsorted(offsets, high[0], side="right") - 1)
                raise SbeEncodeError(
                    f"column {col.name!r}: {arr[row].as_py()!r} at row {row} is not US-ASCII, "
                    f"as field {col.schema_name} of SBE message {self._spec.name} requires"
                )
        return starts, lengths, data

    def _check_constant(self, col: ColumnSpec, arr: pa.Array) -> None:
        f = col.field
        assert f is not None
        expected = f.constant
        if f.enum is not None and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            expected = next((k for k, v in f.enum.values.items() if v == f.constant), f.constant)
        distinct = [v for v in pc.unique(arr.drop_null()).to_pylist() if v != expected]
        if distinct:
            raise SbeEncodeError(
                f"column {col.name!r}: field {col.schema_name} of SBE message {self._spec.name} "
                f"is the constant {expected!r}, got {distinct[0]!r} (omit the column)"
            )

    # ---- var fields -------------------------------------------------------------------------------------------

    def _var(self, col: ColumnSpec, arr: pa.Array | None, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = col.var_field
        assert v is not None
        if arr is None:
            zeros = np.zeros(n, dtype=np.int64)
            return zeros, zeros, np.zeros(0, dtype=np.uint8)
        starts, lengths, data = self._byte_column(
            col, arr, v.text_encoding or ("utf-8" if col.kind is Kind.VAR_TEXT else None)
        )
        too_long = lengths > v.max_length
        if too_long.any():
            row = int(np.flatnonzero(too_long)[0])
            raise SbeEncodeError(
                f"column {col.name!r}: {int(lengths[row])} bytes at row {row} exceed the maximum "
                f"{v.max_length} of var field {col.schema_name} of SBE message {self._spec.name}"
            )
        return starts, lengths, data

    def _fixed_array(self, col: ColumnSpec, arr: pa.Array, n: int) -> np.ndarray:
        """An `array<number>` column -> (n, length) wire values; a null array is all null values (optional
        types) and a null element its type's null value; every non-null array must hold exactly `length`."""
        f = col.field
        assert f is not None
        if not (
            pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)
        ):
            raise SbeEncodeError(
                f"column {col.name!r} has type {arr.type}; array field {col.schema_name} of SBE message "
                f"{self._spec.name} takes an array of {f.length} numbers"
            )
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if not valid.all() and not f.optional:
            row = int(np.flatnonzero(~valid)[0])
            raise SbeEncodeError(
                f"column {col.name!r} is null at row {row}, but array field {col.schema_name} of SBE "
                f"message {self._spec.name} is required (not presence=optional)"
            )
        lengths = np.asarray(pc.list_value_length(arr).fill_null(f.length).to_numpy(zero_copy_only=False))
        wrong = lengths != f.length
        if wrong.any():
            row = int(np.flatnonzero(wrong)[0])
            raise SbeEncodeError(
                f"column {col.name!r}: {int(lengths[row])} values at row {row}, but field {col.schema_name} of "
                f"SBE message {self._spec.name} is an array of exactly {f.length}"
            )
        element = ColumnSpec(
            col.name,
            col.message,
            Kind.FLOAT if f.primitive_type in ("float", "double") else Kind.INT,
            col.arrow_type.value_type,
            field=f,
        )
        values = self._numbers(element, arr.flatten()).astype(wire_dtype(self._codec, f))
        out = np.full((n, f.length), f.null_value if f.optional else 0, dtype=wire_dtype(self._codec, f))
        out[valid] = values.reshape(-1, f.length)
        return out

    # ---- groups -----------------------------------------------------------------------------------------------

    def _group(self, col: ColumnSpec, arr: pa.Array | None, n: int) -> _Entries:
        """An `array<struct>` column -> the group's entries encoded column by column (nested groups too)."""
        g = col.group
        assert g is not None
        entry_type = col.arrow_type.value_type
        if arr is None:
            arr = pa.nulls(n, type=col.arrow_type)
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)) or not pa.types.is_struct(
            arr.type.value_type
        ):
            raise SbeEncodeError(
                f"column {col.name!r} has type {arr.type}; group {col.schema_name} of SBE message "
                f"{self._spec.name} takes an array of structs ({entry_type})"
            )
        counts = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        too_many = counts > g.max_count
        if too_many.any():
            row = int(np.flatnonzero(too_many)[0])
            raise SbeEncodeError(
                f"column {col.name!r}: {int(counts[row])} entries at row {row} exceed the {g.max_count} "
                f"of group {col.schema_name} of SBE message {self._spec.name}"
            )
        entries = arr.flatten()
        m = len(entries)
        given: dict[str, pa.Array] = {}
        for child_field, child in zip(entries.type, entries.flatten(), strict=True):
            given[child_field.name.lower()] = child
        known = {c.name.lower() for c in col.children}
        unknown = sorted(set(given) - known)
        if unknown:
            raise SbeEncodeError(
                f"column {col.name!r}: struct field {unknown[0]!r} is not a field of group {col.schema_name} of "
                f"SBE message {self._spec.name}; its fields are: {', '.join(c.name for c in col.children)}"
            )
        records = np.zeros(m, dtype=self._codec.block_dtype(g.fields, g.block_length))
        nested, var_parts = self._fill_block(col.children, given, records, m, col)
        entry_size = np.full(m, g.block_length, dtype=np.int64)
        for inner in nested:
            entry_size += inner.size
        for vcol, _, lengths, _ in var_parts:
            assert vcol.var_field is not None
            entry_size += vcol.var_field.length_size + lengths
        parent = np.repeat(np.arange(n, dtype=np.int64), counts)
        size = g.dimension_size + np.bincount(parent, weights=entry_size, minlength=n).astype(np.int64)
        order = self._codec.byte_order
        dim: dict[int, tuple[str, str]] = {
            g.block_length_offset: ("block_length", f"{order}u{_SIZES[g.block_length_primitive]}"),
            g.count_offset: ("count", f"{order}u{_SIZES[g.count_primitive]}"),
        }
        dimension = np.zeros(
            n,
            dtype=np.dtype(
                {
                    "names": [dim[o][0] for o in sorted(dim)],
                    "formats": [dim[o][1] for o in sorted(dim)],
                    "offsets": sorted(dim),
                    "itemsize": g.dimension_size,
                }
            ),
        )
        dimension["block_length"] = g.block_length
        dimension["count"] = counts
        return _Entries(
            g.dimension_size,
            g.block_length,
            dimension.view(np.uint8).reshape(n, g.dimension_size),
            counts,
            parent,
            records.view(np.uint8).reshape(m, g.block_length),
            nested,
            var_parts,
            entry_size,
            size,
        )

    def _place(self, entries: _Entries, out: np.ndarray, at: np.ndarray) -> None:
        """Write a group's dimension headers at `at` (one per parent) and its entries after each, recursively."""
        dim = entries.dimension_size
        if dim:
            out[at[:, None] + np.arange(dim)] = entries.dimension
        m = len(entries.parent)
        if m == 0:
            return
        cumulative = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(entries.entry_size, out=cumulative[1:])
        first = np.zeros(len(entries.counts) + 1, dtype=np.int64)
        np.cumsum(entries.counts, out=first[1:])
        base = cumulative[first[:-1]]  # entry bytes before each parent's first entry
        start = at[entries.parent] + dim + cumulative[:-1] - base[entries.parent]
        bl = entries.block_length
        if bl:
            out[start[:, None] + np.arange(bl)] = entries.block
        cursor = start + bl
        for inner in entries.nested:
            self._place(inner, out, cursor)
            cursor = cursor + inner.size
        self._place_var(out, cursor, entries.var_parts)

    def _place_var(
        self,
        out: np.ndarray,
        cursor: np.ndarray,
        var_parts: list[tuple[ColumnSpec, np.ndarray, np.ndarray, np.ndarray]],
    ) -> np.ndarray:
        """Write each var field's length prefix and bytes at `cursor` (one per row/entry); the cursor after."""
        k = len(cursor)
        for col, starts, lengths, data in var_parts:
            v = col.var_field
            assert v is not None
            prefix = lengths.astype(np.dtype(self._codec.byte_order + f"u{v.length_size}"))
            out[cursor[:, None] + np.arange(v.length_size)] = prefix.view(np.uint8).reshape(k, v.length_size)
            cursor = cursor + v.length_size
            body, body_offsets = gather_bytes(data, starts, lengths)
            if body.size:
                out[np.repeat(cursor - body_offsets[:-1], lengths) + np.arange(body.size)] = body
            cursor = cursor + lengths
        return cursor

    def _with_var_data(
        self,
        records: np.ndarray,
        groups: list[_Entries],
        var_parts: list[tuple[ColumnSpec, np.ndarray, np.ndarray, np.ndarray]],
        n: int,
    ) -> pa.BinaryArray:
        """Lay out header+block, the groups, then each var field's length prefix and bytes, per row, by index
        arithmetic."""
        fixed_size = self._dtype.itemsize
        sizes = np.full(n, fixed_size, dtype=np.int64)
        for entries in groups:
            sizes += entries.size
        for col, _, lengths, _ in var_parts:
            assert col.var_field is not None
            sizes += col.var_field.length_size + lengths
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise SbeEncodeError(
                f"{int(offsets[-1])} bytes of SBE messages in one batch exceed Arrow's 2 GiB "
                "binary limit; write smaller batches"
            )
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        row_start = offsets[:-1]
        out[row_start[:, None] + np.arange(fixed_size)] = records.view(np.uint8).reshape(n, fixed_size)
        cursor = row_start + fixed_size
        for entries in groups:
            self._place(entries, out, cursor)
            cursor = cursor + entries.size
        self._place_var(out, cursor, var_parts)
        return _binary_array(n, offsets, out)


@dataclass
class _Entries:
    """One group's encoded entries for a set of parents (rows or parent entries), ready to be placed."""

    dimension_size: int
    block_length: int
    dimension: np.ndarray  # (parents, dimension_size) bytes
    counts: np.ndarray  # entries per parent
    parent: np.ndarray  # parent of each entry
    block: np.ndarray  # (entries, block_length) bytes
    nested: list[_Entries]
    var_parts: list[tuple[ColumnSpec, np.ndarray, np.ndarray, np.ndarray]]
    entry_size: np.ndarray  # bytes per entry: block + nested groups + var fields
    size: np.ndarray  # bytes per parent: dimension + its entries


_SIZES = {"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8}


def _wire_format(codec: SbeCodec, col: ColumnSpec) -> np.dtype:
    """The wire dtype of a fixed column in a structured record (a subarray for arrays of numbers)."""
    assert col.field is not None
    if col.kind is Kind.ARRAY:
        return np.dtype((wire_dtype(codec, col.field), (col.field.length,)))
    return wire_dtype(codec, col.field)


def _binary_array(n: int, offsets: np.ndarray, data: np.ndarray) -> pa.BinaryArray:
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data))],
        null_count=0,
    )


def encode_batch(
    schema: str | SbeCodec, message: str, batch: pa.RecordBatch | pa.Table, ignore_columns: Iterable[str] = ()
) -> pa.BinaryArray:
    """One-shot form of `SbeEncoder(schema, message, ignore_columns).encode(batch)`."""
    return SbeEncoder(schema, message, ignore_columns).encode(batch)
