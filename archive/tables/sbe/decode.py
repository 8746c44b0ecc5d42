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
4. Repeating groups (`array<struct<...>>`): the dimensions of all rows are read at once; entries of groups without
   nested groups or var data are located with `np.repeat`/`cumsum` arithmetic on per-row values (others are
   walked one entry *index* at a time across all rows); all entry blocks are gathered in one copy through an
   overlapping window on the buffer, each field becomes an Arrow array with one conversion, and the list is
   assembled from its offsets and validity buffers. Enum names come from precomputed Arrow string views. The
   cost is a few ns per value per pass, so a message with many entries costs about as many flat rows
   (`tests/benchmarks/bench_sbe_groups.py`, docs/performance.md).

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

from aeron_archive_spark.archive.codecs.codec import SbeCodec
from aeron_archive_spark.archive.codecs.schema import CodecError, MessageSpec, SchemaError
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

_UNSIGNED = {"uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8"}

# (schema source, template id) of the messages without columns already logged, so a schema is reported once.
_WARNED: set[tuple[str, int]] = set()

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
    groups: list[tuple[int, _GroupPlan]] = field(default_factory=list)
    var: list[tuple[int, ColumnSpec]] = field(default_factory=list)


class _GroupPlan:
    """How one repeating group's entries become an `array<struct<...>>` column (nested groups recursively)."""

    def __init__(self, codec: SbeCodec, col: ColumnSpec) -> None:
        g = col.group
        assert g is not None
        self.col = col
        self.spec = g
        self.dtype = codec.block_dtype(g.fields, g.block_length)
        self.max_since = max((f.since_version for f in g.fields if not f.is_constant), default=0)
        order = codec.byte_order
        dim: dict[int, tuple[str, str]] = {
            g.block_length_offset: ("block_length", order + _UNSIGNED[g.block_length_primitive]),
            g.count_offset: ("count", order + _UNSIGNED[g.count_primitive]),
        }
        self.dimension = np.dtype(
            {
                "names": [dim[o][0] for o in sorted(dim)],
                "formats": [dim[o][1] for o in sorted(dim)],
                "offsets": sorted(dim),
                "itemsize": g.dimension_size,
            }
        )
        self.children = list(col.children)
        self.nested = [_GroupPlan(codec, c) for c in col.children if c.kind is Kind.GROUP]
        self.var = [c for c in col.children if c.kind in (Kind.VAR_TEXT, Kind.VAR_BYTES)]
        # Fewest bytes an entry takes beyond its block: each nested group's dimension and each var length prefix.
        self.entry_extra = sum(p.spec.dimension_size for p in self.nested) + sum(
            c.var_field.length_size for c in self.var if c.var_field is not None
        )
        self.fixed_size = not self.nested and not self.var
        self.order = codec.byte_order


@dataclass
class _Walk:
    """Where the entries of one group are, for a set of parent instances (message rows or parent entries).

    Entries are in parent order then entry order; `parent` indexes the parent instances, `present` (per parent)
    is False where the group is absent (sender's version older than the group's sinceVersion).
    """

    parent: np.ndarray
    start: np.ndarray
    block_length: np.ndarray
    version: np.ndarray
    present: np.ndarray
    var: list[tuple[np.ndarray, np.ndarray]]
    nested: list[_Walk]
    # Entries per parent instance when known (None once `parent` is remapped: then counted from `parent`).
    counts: np.ndarray | None = None
    # Every entry has the group's whole block and fields (None: not known, check the entries).
    complete: bool | None = None

    def reorder(self, perm: np.ndarray) -> None:
        """Apply a permutation to the entries, keeping nested entries in (new parent, entry) order."""
        self.parent = self.parent[perm]
        self.start = self.start[perm]
        self.block_length = self.block_length[perm]
        self.version = self.version[perm]
        self.var = [(a[perm], b[perm]) for a, b in self.var]
        inverse = np.empty(len(perm), dtype=np.int64)
        inverse[perm] = np.arange(len(perm), dtype=np.int64)
        for child in self.nested:
            child.present = child.present[perm]
            child.parent = inverse[child.parent]
            child.counts = None
            child.reorder(np.argsort(child.parent, kind="stable"))


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
        self._skipped: dict[int, tuple[str, str]] = {}  # template id -> (name, why it has no columns)
        self._build(specs)

    # ---- layout -----------------------------------------------------------------------------------------------

    def _build(self, specs: list[MessageSpec]) -> None:
        # Messages whose fields cannot be columns (two names that differ only in case): without sbeMessage they
        # are skipped like the messages the codec refuses, the others still decode; with sbeMessage, an error.
        per_message: list[tuple[MessageSpec, list[ColumnSpec]]] = []
        for spec in specs:
            try:
                per_message.append((spec, message_columns(self._codec, spec.template_id)))
            except SchemaError as ex:
                if self._message is not None:
                    raise
                self._skipped[spec.template_id] = (spec.name, str(ex))
                if (self._codec.source, spec.template_id) not in _WARNED:
                    _WARNED.add((self._codec.source, spec.template_id))
                    log.warning(
                        "SBE schema %s: message %s (id %d) is not supported: %s",
                        self._codec.source,
                        spec.name,
                        spec.template_id,
                        ex,
                    )
        if not per_message:
            raise SchemaError(
                f"option sbeSchema: no message of SBE schema {self._codec.source} can be decoded: "
                + "; ".join(reason for _, reason in self._skipped.values())
            )
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
                elif col.kind is Kind.GROUP:
                    plan.groups.append((out, _GroupPlan(self._codec, col)))
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
        cursor = row_start + hl + block_length
        walks: list[_Walk] = []
        for _, group_plan in plan.groups:  # groups come before the var fields on the wire
            walk, cursor = _walk(group_plan, data, cursor, row_end, version, np.arange(len(rows)), bad)
            walks.append(walk)
        # Var fields: one pass per field over all rows; a row's cursor advances past each field it has.
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
        if plan.groups:
            if k != len(rows):  # some rows are malformed: walk the groups of the good ones again, alone
                ok = np.flatnonzero(~bad)
                cursor = row_start[ok] + hl + block_length[ok]
                walks = []
                for _, group_plan in plan.groups:
                    walk, cursor = _walk(
                        group_plan, data, cursor, row_end[ok], version[ok], np.arange(k), np.zeros(k, dtype=bool)
                    )
                    walks.append(walk)
            for (out, group_plan), walk in zip(plan.groups, walks, strict=True):
                pieces[out].append((out_rows, _group_to_arrow(group_plan, walk, data, k)))
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
            refused = self._codec.unsupported.get(template_id) or self._skipped.get(template_id)
            if self._message is not None:
                other = next((m.name for m in self._codec.messages if m.template_id == template_id), None)
                other = other or (refused[0] if refused else None)
                what = f"message {other}" if other else "not in the schema"
                return (
                    f"template id {template_id} ({what}) is not sbeMessage={self._message.name} "
                    f"(template id {self._message.template_id})"
                )
            if refused is not None:
                return f"message {refused[0]} (id {template_id}) is not supported: {refused[1]}"
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
    back); otherwise one gather through an overlapping window on the buffer (`width`-byte void items one byte
    apart), which copies `width` contiguous bytes per record: several times faster than indexing byte by byte
    or gathering the rows of a 2-D window.
    Rows too close to the buffer's end for the window, and bytes past a short row's length, are fixed up
    separately, for those rows only.
    """
    k = len(starts)
    if k == 0 or width == 0 or data.size == 0:
        return np.zeros(k, dtype=dtype)
    if all_valid:
        first = int(starts[0])
        stride = int(starts[1] - starts[0]) if k > 1 else width
        if (
            stride >= width
            and first + (k - 1) * stride + width <= data.size
            and int(starts[-1]) == first + (k - 1) * stride  # cheap rejection before the full check
            and (k == 1 or bool(np.all(np.diff(starts) == stride)))
        ):
            return np.ndarray((k,), dtype=dtype, buffer=data, offset=first, strides=(width if k == 1 else stride,))
    starts = starts.astype(np.int64, copy=False)
    limit = data.size - width
    window = (
        np.ndarray((limit + 1,), dtype=np.dtype((np.void, width)), buffer=data, offset=0, strides=(1,))
        if limit >= 0
        else None
    )
    if window is not None and int(starts.max()) <= limit:
        records = window[starts]
    else:
        records = np.zeros(k, dtype=np.dtype((np.void, width)))
        near_end = starts > limit
        fits = np.flatnonzero(~near_end)
        if window is not None and fits.size:
            records[fits] = window[starts[fits]]
        rows = np.flatnonzero(near_end)
        columns = np.arange(width, dtype=np.int64)
        inside = (columns < np.minimum(lengths[rows], width)[:, None]) & (starts[rows, None] + columns < data.size)
        tail = data[np.where(inside, np.minimum(starts[rows, None] + columns, data.size - 1), 0)]
        tail[~inside] = 0
        records.view(np.uint8).reshape(k, width)[rows] = tail
    if not all_valid:
        short = np.flatnonzero(lengths < width)
        if short.size:
            matrix = records.view(np.uint8).reshape(k, width)
            sub = matrix[short]
            sub[np.arange(width) >= lengths[short][:, None]] = 0
            matrix[short] = sub
    out: np.ndarray = records.view(dtype)
    return out


def _walk(
    plan: _GroupPlan,
    data: np.ndarray,
    pos: np.ndarray,
    end: np.ndarray,
    version: np.ndarray,
    row: np.ndarray,
    bad: np.ndarray,
) -> tuple[_Walk, np.ndarray]:
    """Locate the entries of one group for every parent instance (dimension at `pos`, bytes up to `end`).

    `row` maps each instance to its message row; `bad` (per message row) is read and updated: a row whose group
    runs past its payload is marked, and nothing more is read for it. Returns the entries and each instance's
    position after the group. Groups of fixed-size entries (no nested groups or var data) are located with
    arithmetic alone; otherwise entries are walked in rounds, the k-th entry of every instance at once, so the
    Python loop runs once per entry *index*, not per entry or per field.
    """
    n = len(pos)
    present = version >= plan.spec.since_version
    ok = present & ~bad[row]
    dimension_size = plan.spec.dimension_size
    readable = ok & (pos + dimension_size <= end)
    if bool(readable.all()):  # the common case: every instance has the group's dimension
        dims = _records(
            data, pos, np.broadcast_to(np.int64(dimension_size), (n,)), dimension_size, plan.dimension, all_valid=True
        )
        block_length = dims["block_length"].astype(np.int64)
        count = dims["count"].astype(np.int64)
    else:
        bad[row[ok & ~readable]] = True
        dims = _records(
            data,
            np.where(readable, pos, 0),
            np.where(readable, dimension_size, 0),
            dimension_size,
            plan.dimension,
            all_valid=False,
        )
        block_length = np.where(readable, dims["block_length"].astype(np.int64), 0)
        count = np.where(readable, dims["count"].astype(np.int64), 0)
    body = pos + dimension_size
    too_big = readable & (body + count * (block_length + plan.entry_extra) > end)
    if too_big.any():
        bad[row[too_big]] = True
        count[too_big] = 0
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    total = int(offsets[-1])
    parent = np.repeat(np.arange(n, dtype=np.int64), count)
    if plan.fixed_size:
        return _fixed_walk(plan, parent, body, count, offsets, block_length, version, present), np.where(
            readable, body + count * block_length, pos
        )
    entry_length = block_length[parent]
    entry_version = version[parent]
    start = np.zeros(total, dtype=np.int64)
    var = [(np.zeros(total, dtype=np.int64), np.zeros(total, dtype=np.int64)) for _ in plan.var]
    rounds: list[list[tuple[np.ndarray, _Walk]]] = [[] for _ in plan.nested]
    cursor = body.copy()
    for r in range(int(count.max()) if n else 0):
        active = np.flatnonzero(count > r)
        flat = offsets[active] + r
        at = cursor[active]
        start[flat] = at
        at = at + block_length[active]
        a_end, a_version, a_row = end[active], version[active], row[active]
        for j, nested in enumerate(plan.nested):
            walk, at = _walk(nested, data, at, a_end, a_version, a_row, bad)
            walk.parent = flat[walk.parent]
            walk.counts = None
            rounds[j].append((flat, walk))
        for j, col in enumerate(plan.var):
            v = col.var_field
            assert v is not None
            has = a_version >= v.since_version
            ok_v = has & ~bad[a_row]
            readable_v = ok_v & (at + v.length_size <= a_end)
            bad[a_row[ok_v & ~readable_v]] = True
            prefix = _records(
                data,
                np.where(readable_v, at, 0),
                np.where(readable_v, v.length_size, 0),
                v.length_size,
                np.dtype(plan.order + f"u{v.length_size}"),
                all_valid=False,
            )
            n_bytes = np.where(readable_v, prefix.astype(np.int64), 0)
            data_start = at + v.length_size
            overflow = readable_v & ((n_bytes > v.max_length) | (data_start + n_bytes > a_end))
            bad[a_row[overflow]] = True
            n_bytes[overflow] = 0
            var[j][0][flat] = data_start
            var[j][1][flat] = n_bytes
            at = np.where(has, data_start + n_bytes, at)
        cursor[active] = at
    nested_walks = [_merge_rounds(pieces, total) for pieces in rounds]
    walk = _Walk(parent, start, entry_length, entry_version, present, var, nested_walks)
    return walk, np.where(readable, cursor, pos)


def _fixed_walk(
    plan: _GroupPlan,
    parent: np.ndarray,
    body: np.ndarray,
    count: np.ndarray,
    offsets: np.ndarray,
    block_length: np.ndarray,
    version: np.ndarray,
    present: np.ndarray,
) -> _Walk:
    """Entries of a group without nested groups or var data: arithmetic on the parents' arrays only.

    Entry i of a parent starts at `body + i * block_length`. Per-entry arrays are built with `np.repeat` of
    per-parent values (no per-entry gather), and are broadcast scalars when every parent agrees (one block
    length, one version: the common case), so the cost per entry is one repeat and one multiply-add.
    """
    total = len(parent)
    used = count > 0
    lengths_used = block_length[used]
    versions_used = version[used]
    spec_length = plan.spec.block_length
    complete = bool((lengths_used >= spec_length).all() and (versions_used >= plan.max_since).all())
    step = np.arange(total, dtype=np.int64)
    if lengths_used.size and bool((lengths_used == lengths_used[0]).all()):
        length = int(lengths_used[0])
        start = np.repeat(body - offsets[:-1] * length, count)
        entry_length: np.ndarray = np.broadcast_to(np.int64(length), (total,))
        if length != 1:
            step *= length
    else:
        entry_length = np.repeat(block_length, count)
        start = np.repeat(body - offsets[:-1] * block_length, count)
        step *= entry_length
    start += step
    if versions_used.size and bool((versions_used == versions_used[0]).all()):
        entry_version: np.ndarray = np.broadcast_to(np.int64(versions_used[0]), (total,))
    else:
        entry_version = np.repeat(version, count)
    return _Walk(parent, start, entry_length, entry_version, present, [], [], counts=count, complete=complete)


def _merge_rounds(pieces: list[tuple[np.ndarray, _Walk]], n_parents: int) -> _Walk:
    """One walk of a nested group from the walks of each round (parents given by their flat entry index)."""
    merged = _concat([w for _, w in pieces])
    present = np.ones(n_parents, dtype=bool)
    if pieces:
        present[np.concatenate([flat for flat, _ in pieces])] = merged.present
    merged.present = present
    merged.reorder(np.argsort(merged.parent, kind="stable"))
    return merged


def _concat(walks: list[_Walk]) -> _Walk:
    """Entries of several walks of one group back to back (children re-indexed to the concatenated entries)."""
    if len(walks) == 1:
        return walks[0]
    if not walks:
        empty = np.zeros(0, dtype=np.int64)
        return _Walk(empty, empty, empty, empty, np.zeros(0, dtype=bool), [], [])
    bases = np.cumsum([0] + [len(w.parent) for w in walks[:-1]])
    nested = []
    for j in range(len(walks[0].nested)):
        children = []
        for w, base in zip(walks, bases, strict=True):
            child = w.nested[j]
            child.parent = child.parent + int(base)
            children.append(child)
        nested.append(_concat(children))
    return _Walk(
        np.concatenate([w.parent for w in walks]),
        np.concatenate([w.start for w in walks]),
        np.concatenate([w.block_length for w in walks]),
        np.concatenate([w.version for w in walks]),
        np.concatenate([w.present for w in walks]),
        [
            (np.concatenate([w.var[j][0] for w in walks]), np.concatenate([w.var[j][1] for w in walks]))
            for j in range(len(walks[0].var))
        ],
        nested,
    )


def _group_to_arrow(plan: _GroupPlan, walk: _Walk, data: np.ndarray, n_parents: int) -> pa.Array:
    """The located entries as `array<struct>`: each field gathered once for all entries of all parents."""
    total = len(walk.parent)
    if walk.counts is not None and len(walk.counts) == n_parents:
        counts = walk.counts
    else:
        counts = np.bincount(walk.parent, minlength=n_parents) if total else np.zeros(n_parents, dtype=np.int64)
    if total >= 2**31:
        raise SbeDecodeError(f"column {plan.col.name}: {total} group entries in one batch exceed Arrow's limit")
    offsets = np.zeros(n_parents + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    spec_length = plan.spec.block_length
    complete = walk.complete
    if complete is None:
        complete = bool((walk.block_length >= spec_length).all() and (walk.version >= plan.max_since).all())
    lengths = (
        np.broadcast_to(np.int64(spec_length), (total,)) if complete else np.minimum(walk.block_length, spec_length)
    )
    records = _records(data, walk.start, lengths, spec_length, plan.dtype, all_valid=complete)
    nested = iter(zip(plan.nested, walk.nested, strict=True))
    var = iter(walk.var)
    arrays: list[pa.Array] = []
    for col in plan.children:
        if col.kind is Kind.GROUP:
            nested_plan, nested_walk = next(nested)
            arrays.append(_group_to_arrow(nested_plan, nested_walk, data, total))
        elif col.kind is Kind.CONSTANT:
            arrays.append(constant_to_arrow(col, total))
        elif col.is_fixed:
            f = col.field
            assert f is not None
            absent = None if complete else ((f.offset + f.size > walk.block_length) | (f.since_version > walk.version))
            arrays.append(fixed_to_arrow(col, records[col.attr], absent))
        else:
            v = col.var_field
            assert v is not None
            data_start, n_bytes = next(var)
            missing = walk.version < v.since_version
            encoding = v.text_encoding if col.kind is Kind.VAR_TEXT else None
            arrays.append(
                bytes_to_arrow(data, data_start, n_bytes, encoding, missing if missing.any() else None, col.name)
            )
    entry_type = plan.col.arrow_type.value_type
    entries = pa.StructArray.from_arrays(arrays, fields=list(entry_type))
    absent = ~walk.present
    validity = pa.py_buffer(np.packbits(walk.present, bitorder="little")) if absent.any() else None
    return pa.Array.from_buffers(
        plan.col.arrow_type,
        n_parents,
        [validity, pa.py_buffer(offsets)],
        null_count=-1 if validity is not None else 0,
        children=[entries],
    )


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
