"""SBE payloads -> typed Arrow columns (`sbeSchema`), the source's `PayloadDecoder`.

Why vectorised: a micro-batch holds millions of small messages, and a Python loop per message (`SbeCodec.decode`)
costs ~1-2 us each, more than the rest of the read path. Here a batch is decoded with a handful of numpy operations
per template and per field, whatever the row count:

1. The message headers are read as one numpy structured array (a strided zero-copy view when every payload has the
   same length and they lie back to back, the common fixed-size case; else one fancy-index gather).
2. Per template id present in the batch: the fixed blocks are viewed (or gathered) as `SbeCodec.numpy_dtype`
   records; each field becomes an Arrow array with one conversion (`aeron_archive_spark.archive.tables.sbe.columns`).
3. Var-length fields are walked once per *field* over all rows (length prefix gather, bounds checks, one byte
   gather per field), not once per message. Only text that fails UTF-8/ASCII validation is decoded row by row.

Template dispatch. With `sbeMessage` every payload must carry that message's template id. Without it, each
payload is decoded by the template id in its header; if the schema has one message the columns are that message's,
otherwise the columns are `sbeMessage` (the message name of the row) followed by the union of every message's
columns in schema order: a column name used by several messages with the same type is one shared column, a name
used with different types becomes `<Message>_<name>` for each of them. Columns of other messages are null in a
row.

Errors. A payload shorter than the header, of another schema id, of an unknown (or, with `sbeMessage`, another)
template, with a block or var field running past its end raises `SbeDecodeError` naming the recording id, the
message's stream position and the reason. With `sbe.onError=null` such a row gets null in every decoded column
instead (its `value` is still there) and the count is logged. Messages from an older schema version (shorter block,
fields with a newer `sinceVersion`) are not errors: the missing fields are null. Longer blocks (newer version)
decode their known fields.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from aeron_archive_spark.archive.codecs.codec import (
    CodecError,
    MessageSpec,
    SchemaError,
)
from aeron_archive_spark.archive.tables.sbe.columns import (
    MESSAGE_COLUMN,
    ColumnSpec,
    Kind,
    SbeDecodeError,
    binary_layout,
    bytes_to_arrow,
    constant_to_arrow,
    fixed_to_arrow,
    header_dtype,
    load_codec,
    message_columns,
    resolve_message,
)

log = logging.getLogger(__name__)

ON_ERROR_CHOICES = ("fail", "null")

# Why a row did not decode (0: it did).
_OK, _SHORT_HEADER, _SCHEMA_ID, _TEMPLATE, _SHORT_BLOCK, _VAR = range(6)


@dataclass
class _Plan:
    """How one template's payloads become output columns."""

    spec: MessageSpec
    dtype: np.dtype
    max_since: int
    fixed: list[tuple[int, ColumnSpec]] = field(default_factory=list)
    constants: list[tuple[int, ColumnSpec]] = field(default_factory=list)
    var: list[tuple[int, ColumnSpec]] = field(default_factory=list)


class SbeDecoder:
    """`PayloadDecoder` for SBE: `SbeDecoder(schema_path, sbe_message=None, on_error="fail")`."""

    def __init__(self, schema_path: str, sbe_message: str | None = None, on_error: str = "fail") -> None:
        if on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"option sbe.onError: expected fail or null, got {on_error!r}")
        self._codec = load_codec(schema_path)
        self._on_error = on_error
        self._header = header_dtype(self._codec)
        self._header_length = self._codec.header_length
        self._message = None if sbe_message is None else resolve_message(self._codec, sbe_message)
        specs = [self._message] if self._message is not None else list(self._codec.messages)
        if not specs:
            raise SchemaError(f"option sbeSchema: SBE schema {self._codec.source} declares no messages")
        self._multi = len(specs) > 1
        self._fields: list[pa.Field] = []
        self._plans: dict[int, _Plan] = {}
        self._build(specs)

    # ---- layout -----------------------------------------------------------------------------------------------

    def _build(self, specs: list[MessageSpec]) -> None:
        per_message = [(spec, message_columns(self._codec, spec.template_id)) for spec in specs]
        types: dict[str, set[str]] = {}
        for _, cols in per_message:
            for col in cols:
                types.setdefault(col.name.lower(), set()).add(str(col.arrow_type))
        clashing = {name for name, kinds in types.items() if len(kinds) > 1}
        index: dict[str, int] = {}
        if self._multi:
            self._fields.append(pa.field(MESSAGE_COLUMN, pa.string(), nullable=True))
            index[MESSAGE_COLUMN.lower()] = 0
        for spec, cols in per_message:
            plan = _Plan(
                spec,
                self._codec.numpy_dtype(spec.template_id),
                max((f.since_version for f in spec.fields if not f.is_constant), default=0),
            )
            for col in cols:
                name = f"{spec.name}_{col.name}" if col.name.lower() in clashing else col.name
                out = index.get(name.lower())
                if out is None:
                    out = index[name.lower()] = len(self._fields)
                    self._fields.append(pa.field(name, col.arrow_type, nullable=True))
                elif self._fields[out].type != col.arrow_type:
                    raise SchemaError(
                        f"option sbeSchema: column {name!r} of message {spec.name} has type "
                        f"{col.arrow_type}, another message's has {self._fields[out].type}"
                    )
                if col.kind is Kind.CONSTANT:
                    plan.constants.append((out, col))
                elif col.is_fixed:
                    plan.fixed.append((out, col))
                else:
                    plan.var.append((out, col))
            self._plans[spec.template_id] = plan

    def arrow_fields(self) -> list[pa.Field]:
        return list(self._fields)

    # ---- decode -----------------------------------------------------------------------------------------------

    def decode(self, values: pa.BinaryArray, positions: np.ndarray, recording_id: int) -> list[pa.Array]:
        """One Arrow array per `arrow_fields()` entry for the payloads `values` (see the module docstring)."""
        n = len(values)
        if n == 0:
            return [pa.array([], type=f.type) for f in self._fields]
        starts, lengths, data = binary_layout(values)
        hl = self._header_length
        reason = np.zeros(n, dtype=np.int8)
        has_header = lengths >= hl
        if values.null_count:
            has_header &= np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        reason[~has_header] = _SHORT_HEADER
        header = _records(data, starts, lengths, hl, self._header, all_valid=bool(has_header.all()))
        template_ids = header["template_id"].astype(np.int64)
        wrong_schema = has_header & (header["schema_id"] != self._codec.schema_id)
        reason[wrong_schema] = _SCHEMA_ID
        candidates = reason == _OK
        pieces: list[list[tuple[np.ndarray, pa.Array]]] = [[] for _ in self._fields]
        present = template_ids[candidates]
        if not present.size:
            templates: np.ndarray | list[int] = []
        elif int(present.min()) == int(present.max()):
            templates = [int(present[0])]  # one template (the common case): skip the sort np.unique does
        else:
            templates = np.unique(present)
        for template_id in templates:
            rows = (
                np.arange(n)
                if len(present) == n and len(templates) == 1
                else np.flatnonzero(candidates & (template_ids == template_id))
            )
            plan = self._plans.get(int(template_id))
            if plan is None:
                reason[rows] = _TEMPLATE
                continue
            self._decode_template(plan, rows, header, starts, lengths, data, reason, pieces)
        bad = np.flatnonzero(reason != _OK)
        if bad.size:
            if self._on_error == "fail":
                row = int(bad[0])
                raise SbeDecodeError(
                    f"recording {recording_id}: cannot decode the SBE message at position {int(positions[row])}: "
                    f"{self._explain(int(reason[row]), row, header, starts, lengths, data)} (schema "
                    f"{self._codec.source}; option sbe.onError=null gives null columns instead)"
                )
            log.warning(
                "recording %d: %d of %d payloads are not decodable SBE messages (first at position %d); "
                "their decoded columns are null (sbe.onError=null)",
                recording_id,
                bad.size,
                n,
                int(positions[int(bad[0])]),
            )
        return [_assemble(p, n, f.type) for p, f in zip(pieces, self._fields, strict=True)]

    def _decode_template(
        self,
        plan: _Plan,
        rows: np.ndarray,
        header: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        data: np.ndarray,
        reason: np.ndarray,
        pieces: list[list[tuple[np.ndarray, pa.Array]]],
    ) -> None:
        hl = self._header_length
        block_length = header["block_length"][rows].astype(np.int64)
        version = header["version"][rows].astype(np.int64)
        row_start = starts[rows]
        row_end = row_start + lengths[rows]
        bad = row_start + hl + block_length > row_end
        # Var fields: one pass per field over all rows; a row's cursor advances past each field it has.
        cursor = row_start + hl + block_length
        var_ranges: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for _, col in plan.var:
            v = col.var_field
            assert v is not None
            present = version >= v.since_version
            readable = present & ~bad & (cursor + v.length_size <= row_end)
            bad |= present & ~bad & ~readable
            prefix = _records(
                data,
                np.where(readable, cursor, 0),
                np.where(readable, v.length_size, 0),
                v.length_size,
                np.dtype(self._codec.byte_order + f"u{v.length_size}"),
                all_valid=bool(readable.all()),
            )
            n_bytes = np.where(readable, prefix.astype(np.int64), 0)
            data_start = cursor + v.length_size
            overflow = readable & ((n_bytes > v.max_length) | (data_start + n_bytes > row_end))
            bad |= overflow
            var_ranges.append((data_start, n_bytes, present))
            cursor = np.where(present, data_start + n_bytes, cursor)
        reason[rows[bad]] = np.where(row_start[bad] + hl + block_length[bad] > row_end[bad], _SHORT_BLOCK, _VAR)
        good: np.ndarray | slice
        if bad.any():
            good_mask = ~bad
            if not good_mask.any():
                return
            good = good_mask
        else:
            good = slice(None)
        out_rows = rows[good]
        k = int(out_rows.size)
        good_block = block_length[good]
        good_version = version[good]
        spec_length = plan.spec.block_length
        complete = bool((good_block >= spec_length).all() and (good_version >= plan.max_since).all())
        block_starts = row_start[good] + hl
        if complete:
            records = _records(data, block_starts, np.full(k, spec_length), spec_length, plan.dtype, all_valid=True)
        else:
            records = _records(
                data, block_starts, np.minimum(good_block, spec_length), spec_length, plan.dtype, all_valid=False
            )
        for out, col in plan.fixed:
            f = col.field
            assert f is not None
            absent = None if complete else ((f.offset + f.size > good_block) | (f.since_version > good_version))
            pieces[out].append((out_rows, fixed_to_arrow(col, records[col.attr], absent)))
        for out, col in plan.constants:
            pieces[out].append((out_rows, constant_to_arrow(col, k)))
        for (out, col), (data_start, n_bytes, present) in zip(plan.var, var_ranges, strict=True):
            absent = ~present[good]
            assert col.var_field is not None
            encoding = col.var_field.text_encoding if col.kind is Kind.VAR_TEXT else None
            pieces[out].append(
                (
                    out_rows,
                    bytes_to_arrow(
                        data, data_start[good], n_bytes[good], encoding, absent if absent.any() else None, col.name
                    ),
                )
            )
        if self._multi:
            pieces[0].append((out_rows, pa.repeat(pa.scalar(plan.spec.name, type=pa.string()), k)))

    def _explain(
        self, code: int, row: int, header: np.ndarray, starts: np.ndarray, lengths: np.ndarray, data: np.ndarray
    ) -> str:
        length = int(lengths[row])
        if code == _SHORT_HEADER:
            return f"payload of {length} bytes is shorter than the {self._header_length}-byte SBE message header"
        template_id = int(header["template_id"][row])
        if code == _SCHEMA_ID:
            return (
                f"schema id {int(header['schema_id'][row])} (template id {template_id}) differs from the "
                f"schema's id {self._codec.schema_id}"
            )
        if code == _TEMPLATE:
            if self._message is not None:
                other = next((m.name for m in self._codec.messages if m.template_id == template_id), None)
                what = f"message {other}" if other else "not in the schema"
                return (
                    f"template id {template_id} ({what}) is not sbeMessage={self._message.name} "
                    f"(template id {self._message.template_id})"
                )
            known = ", ".join(f"{m.name}={m.template_id}" for m in self._codec.messages)
            return f"unknown template id {template_id} (schema templates: {known})"
        payload = data[int(starts[row]) : int(starts[row]) + length].tobytes()
        try:
            self._codec.decode(payload)
        except CodecError as ex:
            return f"truncated or malformed message ({length} bytes): {ex}"
        return f"truncated or malformed message ({length} bytes, block length {int(header['block_length'][row])})"


def _records(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, dtype: np.dtype, all_valid: bool
) -> np.ndarray:
    """`width`-byte records at `starts` viewed as `dtype`; bytes past a row's `lengths` read as zero.

    Zero-copy strided view when every row is whole and rows are equally spaced (fixed-size messages back to
    back); otherwise one vectorised gather.
    """
    k = len(starts)
    if k == 0 or width == 0:
        return np.zeros(k, dtype=dtype)
    if all_valid and data.size:
        first = int(starts[0])
        stride = int(starts[1] - starts[0]) if k > 1 else width
        if (
            stride >= width
            and first + (k - 1) * stride + width <= data.size
            and (k == 1 or bool(np.all(np.diff(starts) == stride)))
        ):
            return np.ndarray((k,), dtype=dtype, buffer=data, offset=first, strides=(stride,))
    columns = np.arange(width, dtype=np.int64)
    index = starts.astype(np.int64)[:, None] + columns
    inside = columns < np.minimum(lengths, width)[:, None] if not all_valid else None
    if data.size == 0:
        matrix = np.zeros((k, width), dtype=np.uint8)
    elif inside is None:
        matrix = data[index]
    else:
        matrix = data[np.where(inside, np.minimum(index, data.size - 1), 0)]
        matrix[~inside] = 0
    return np.ascontiguousarray(matrix).view(dtype).reshape(k)


def _assemble(pieces: list[tuple[np.ndarray, pa.Array]], n: int, arrow_type: pa.DataType) -> pa.Array:
    """Scatter per-template pieces (row indices + values) into one array of `n` rows; uncovered rows are null."""
    if not pieces:
        return pa.nulls(n, type=arrow_type)
    if len(pieces) == 1 and len(pieces[0][0]) == n:
        return pieces[0][1]  # rows come from flatnonzero, so a full cover is already in order
    covered = np.concatenate([rows for rows, _ in pieces])
    mask = np.ones(n, dtype=bool)
    mask[covered] = False
    uncovered = np.flatnonzero(mask)
    order = np.concatenate([covered, uncovered])
    combined = pa.concat_arrays([arr for _, arr in pieces] + [pa.nulls(len(uncovered), type=arrow_type)])
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n, dtype=np.int64)
    return combined.take(pa.array(inverse))
