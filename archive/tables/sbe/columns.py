"""SBE schema fields as Spark columns: names, Arrow types and the vectorised numpy <-> Arrow conversions.

The source's decoder (`aeron_archive_spark.archive.tables.sbe.decode`) and the sink's encoder
(`aeron_archive_spark.archive.tables.sbe.encode`) share this module, so a row decoded by the source can be written
back by the sink unchanged (same names, same types).

Mapping (one column per fixed-block leaf field, in schema order, then one per var-length field):

- Names: the schema's field name; composite members are flattened to `<field>_<member>` (`price_mantissa`).
  A name that collides (case-insensitively, as Spark resolves columns) with a fixed source column (recordingId,
  position, sessionId, streamId, reservedValue, value, timestamp) becomes `<Message>_<name>`.
- Types: signed ints keep their width; unsigned ints widen because Spark has none (uint8 -> short,
  uint16 -> int, uint32 -> long, uint64 -> decimal(20,0), exact); float/double stay; char arrays and arrays with a
  characterEncoding -> string (cut at the first NUL); other byte arrays -> binary (all `length` bytes); enums ->
  string (the validValue name, `SBE_UNKNOWN` for a value the schema does not list, as Java's generated decoders);
  sets -> the widened integer bitmask; constants -> a literal column of the constant (enum constants by name);
  var-length data -> string if it has a characterEncoding, else binary.
- Arrays of numbers (a `length` on a primitive other than char/int8/uint8) -> `array<element>` of the element's
  type. Repeating groups -> `array<struct<...>>` whose struct fields follow these same rules (nested groups nest);
  a group the sender's version predates is null.
- Nulls: an optional field holding its null value, an enum holding the enum's null value, and a field the acting
  block length or version does not include (an older sender) are null. Required fields keep their raw value.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING
from xml.etree import ElementInclude

import numpy as np
import pyarrow as pa

from aeron_archive_spark.archive.codecs.codec import SbeCodec
from aeron_archive_spark.archive.codecs.schema import CodecError, FieldSpec, GroupSpec, SchemaError, VarFieldSpec

if TYPE_CHECKING:
    from aeron_archive_spark.archive.codecs.schema import MessageSpec

log = logging.getLogger(__name__)

# The source's own columns; a decoded field may not shadow them (Spark matches names case-insensitively).
# (`tables.schema.FIXED_FIELDS`, which imports this package's decoder: a test keeps the two lists equal)
RESERVED_COLUMNS = ("recordingId", "position", "sessionId", "streamId", "reservedValue", "value", "timestamp")
# With several templates decoded side by side, this column names the message each row holds.
MESSAGE_COLUMN = "sbeMessage"
# What an enum value missing from the schema decodes as (Java's generated `SBE_UNKNOWN`).
UNKNOWN_ENUM = "SBE_UNKNOWN"

_VIEW_INLINE = 12  # Arrow string_view keeps strings of <= 12 bytes inside the view
_VIEW = np.dtype((np.void, 16))
_UNSIGNED_WIDEN = {"uint8": np.int16, "uint16": np.int32, "uint32": np.int64}
_ARROW_INT = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.int16(),
    "uint16": pa.int32(),
    "uint32": pa.int64(),
    "uint64": pa.decimal128(20, 0),
}
_NUMPY_PRIMITIVE = {
    "char": "u1",
    "int8": "i1",
    "uint8": "u1",
    "int16": "i2",
    "uint16": "u2",
    "int32": "i4",
    "uint32": "u4",
    "int64": "i8",
    "uint64": "u8",
    "float": "f4",
    "double": "f8",
}
_STRUCT_TO_NUMPY = {"B": "u1", "H": "u2", "I": "u4", "Q": "u8"}


class SbeDecodeError(ValueError):
    """A payload is not a decodable message of the schema; the text names recording id and stream position."""


class SbeEncodeError(ValueError):
    """Input columns do not fit the SBE message; the text names the column (and row where it matters)."""


class Kind(Enum):
    INT = "int"
    FLOAT = "float"
    TEXT = "text"  # fixed char array (or array with characterEncoding)
    BYTES = "bytes"  # fixed uint8/int8 array without encoding
    ENUM = "enum"
    SET = "set"
    CONSTANT = "constant"
    VAR_TEXT = "var_text"
    VAR_BYTES = "var_bytes"
    ARRAY = "array"  # fixed array of numbers (not char/int8/uint8): array<element>
    GROUP = "group"  # repeating group: array<struct<children>>


@dataclass(frozen=True, eq=False)
class ColumnSpec:
    """One output column of one SBE message: where its bytes are and how they become Arrow values."""

    name: str
    message: str
    kind: Kind
    arrow_type: pa.DataType
    field: FieldSpec | None = None
    var_field: VarFieldSpec | None = None
    group: GroupSpec | None = None
    children: tuple[ColumnSpec, ...] = ()  # a group's entry columns (the struct's fields)

    @property
    def attr(self) -> str:
        """The field's key in the message's numpy structured dtype (`SbeCodec.numpy_dtype`)."""
        spec = self.field or self.var_field or self.group
        assert spec is not None
        return spec.attr

    @property
    def schema_name(self) -> str:
        spec = self.field or self.var_field or self.group
        assert spec is not None
        return spec.name

    @property
    def is_fixed(self) -> bool:
        return self.kind not in (Kind.CONSTANT, Kind.VAR_TEXT, Kind.VAR_BYTES, Kind.GROUP)


# --------------------------------------------------------------------------------------------------------------
# schema loading and column layout


def schema_text(path: str) -> str:
    """The schema at `path` as self-contained XML text (xi:includes expanded), to travel with a plan.

    The Spark driver reads the file once and the text goes to the executors inside the plan, so executors on
    other hosts need no copy of the file.
    """
    real = os.path.abspath(os.path.expanduser(path))
    try:
        with open(real, "rb") as f:
            data = f.read()
    except OSError as ex:
        raise SchemaError(f"option sbeSchema: cannot read SBE schema {path!r}: {ex}") from ex
    try:
        if b"XInclude" in data:
            root = ET.fromstring(data)
            ElementInclude.include(root, base_url=real)
            return ET.tostring(root, encoding="unicode")
        return data.decode("utf-8")
    except (ET.ParseError, UnicodeDecodeError) as ex:
        raise SchemaError(f"option sbeSchema: {path} is not a well-formed UTF-8 XML schema: {ex}") from ex
    except (OSError, ElementInclude.FatalIncludeError) as ex:
        raise SchemaError(f"option sbeSchema: {path}: cannot resolve xi:include: {ex}") from ex


def load_codec(path: str) -> SbeCodec:
    """The parsed schema at `path` (or given as its XML text, see `schema_text`), cached per process.

    A file is reloaded if it changes.
    """
    if path.lstrip().startswith("<"):
        return _load_codec_text(path)
    real = os.path.abspath(os.path.expanduser(path))
    try:
        stat = os.stat(real)
    except OSError as ex:
        raise SchemaError(f"option sbeSchema: cannot read SBE schema {path!r}: {ex}") from ex
    return _load_codec(real, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _load_codec_text(text: str) -> SbeCodec:
    try:
        return SbeCodec.from_xml(text)
    except CodecError as ex:
        raise SchemaError(f"option sbeSchema: {ex}") from ex


@functools.lru_cache(maxsize=16)
def _load_codec(path: str, _mtime_ns: int, _size: int) -> SbeCodec:
    try:
        return SbeCodec.from_xml(path)
    except CodecError as ex:
        raise SchemaError(f"option sbeSchema: {path}: {ex}") from ex


def resolve_message(codec: SbeCodec, name: str, option: str = "sbeMessage") -> MessageSpec:
    """The message called `name` (or with that template id), else an error listing the schema's messages."""
    key: str | int = int(name) if name.strip().isdigit() else name.strip()
    try:
        return codec.message(key)
    except CodecError:
        known = ", ".join(f"{m.name} (id {m.template_id})" for m in codec.messages)
        raise SchemaError(
            f"option {option}: no message {name!r} in SBE schema {codec.source}; it has {known}"
        ) from None


def _column_base_name(name: str) -> str:
    return name.replace(".", "_")


def message_columns(codec: SbeCodec, message: str | int) -> list[ColumnSpec]:
    """The columns of one message, in schema order (fixed and constant fields, groups, then var fields)."""
    spec = codec.message(message)
    reserved = {c.lower() for c in (*RESERVED_COLUMNS, MESSAGE_COLUMN)}

    def name_of(schema_name: str) -> str:
        base = _column_base_name(schema_name)
        return f"{spec.name}_{base}" if base.lower() in reserved else base

    return _block_columns(spec.name, spec.name, spec.fields, spec.groups, spec.var_fields, name_of)


def _block_columns(
    message: str,
    owner: str,
    fields: tuple[FieldSpec, ...],
    groups: tuple[GroupSpec, ...],
    var_fields: tuple[VarFieldSpec, ...],
    name_of: Callable[[str], str],
) -> list[ColumnSpec]:
    """Columns of a message root or of a group's entries (a struct's fields: no reserved names to avoid)."""
    out: list[ColumnSpec] = []
    for f in fields:
        out.append(ColumnSpec(name_of(f.name), message, *_fixed_kind(f), field=f))
    for g in groups:
        children = _block_columns(message, f"{owner}.{g.name}", g.fields, g.groups, g.var_fields, _column_base_name)
        entry = pa.struct([pa.field(c.name, c.arrow_type, nullable=True) for c in children])
        out.append(ColumnSpec(name_of(g.name), message, Kind.GROUP, pa.list_(entry), group=g, children=tuple(children)))
    for v in var_fields:
        kind = Kind.VAR_TEXT if v.is_text else Kind.VAR_BYTES
        out.append(ColumnSpec(name_of(v.name), message, kind, pa.string() if v.is_text else pa.binary(), var_field=v))
    seen: dict[str, str] = {}
    for col in out:
        other = seen.setdefault(col.name.lower(), col.schema_name)
        if other != col.schema_name:
            raise SchemaError(
                f"SBE message {owner}: fields {other!r} and {col.schema_name!r} both map to column {col.name!r}"
            )
    return out


def _fixed_kind(f: FieldSpec) -> tuple[Kind, pa.DataType]:
    if f.is_constant:
        if f.enum is not None:
            return Kind.CONSTANT, pa.string()
        if isinstance(f.constant, str):
            return Kind.CONSTANT, pa.string()
        if f.primitive_type in ("float", "double"):
            return Kind.CONSTANT, pa.float32() if f.primitive_type == "float" else pa.float64()
        return Kind.CONSTANT, _ARROW_INT[f.primitive_type]
    if f.struct_format.endswith("s"):
        return (Kind.TEXT, pa.string()) if f.text_encoding is not None else (Kind.BYTES, pa.binary())
    if f.is_array:
        element = _element_type(f.primitive_type)
        return Kind.ARRAY, pa.list_(pa.field("element", element, nullable=True))
    if f.enum is not None:
        return Kind.ENUM, pa.string()
    if f.set_choices is not None:
        return Kind.SET, _ARROW_INT[f.primitive_type]
    if f.primitive_type in ("float", "double"):
        return Kind.FLOAT, pa.float32() if f.primitive_type == "float" else pa.float64()
    return Kind.INT, _ARROW_INT[f.primitive_type]


def _element_type(primitive: str) -> pa.DataType:
    if primitive in ("float", "double"):
        return pa.float32() if primitive == "float" else pa.float64()
    return _ARROW_INT[primitive]


def header_dtype(codec: SbeCodec) -> np.dtype:
    """Numpy dtype of the schema's message header with fields block_length, template_id, schema_id, version.

    Built from the codec's compiled header struct (any unsigned-int composite the schema declares), so schemas
    with a non-standard header still decode vectorised.
    """
    fmt = codec._header_struct.format  # private, but the codec's compiled header layout is the source of truth
    order = fmt[0] if fmt[:1] in ("<", ">", "=", "!", "@") else "<"
    body = fmt[1:] if fmt[:1] in ("<", ">", "=", "!", "@") else fmt
    members: list[tuple[int, str]] = []
    offset = 0
    for count, code in re.findall(r"(\d*)([xBHIQ])", body):
        repeat = int(count) if count else 1
        if code == "x":
            offset += repeat
            continue
        for _ in range(repeat):
            members.append(
                (offset, order.replace("!", ">").replace("@", "<").replace("=", "<") + _STRUCT_TO_NUMPY[code])
            )
            offset += np.dtype(_STRUCT_TO_NUMPY[code]).itemsize
    names = ("block_length", "template_id", "schema_id", "version")
    idx = codec._header_idx
    return np.dtype(
        {
            "names": list(names),
            "formats": [members[i][1] for i in idx],
            "offsets": [members[i][0] for i in idx],
            "itemsize": codec.header_length,
        }
    )


def wire_dtype(codec: SbeCodec, f: FieldSpec) -> np.dtype:
    """Numpy dtype of one fixed field on the wire (byte order included); `S<length>` for arrays."""
    if f.struct_format.endswith("s"):
        return np.dtype(f"S{f.length}")
    return np.dtype(codec.byte_order + _NUMPY_PRIMITIVE[f.primitive_type])


# --------------------------------------------------------------------------------------------------------------
# numpy -> Arrow (decode)


def _native(values: np.ndarray) -> np.ndarray:
    """Contiguous and in native byte order, as Arrow needs."""
    if not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    return np.ascontiguousarray(values)


def _mask_or_none(mask: np.ndarray | None) -> np.ndarray | None:
    if mask is None or not mask.any():
        return None
    return mask


def fixed_to_arrow(col: ColumnSpec, raw: np.ndarray, absent: np.ndarray | None = None) -> pa.Array:
    """Arrow values of a fixed field from its raw wire values (one per row); `absent` marks rows without it."""
    f = col.field
    assert f is not None
    if col.kind in (Kind.TEXT, Kind.BYTES):
        matrix = np.ascontiguousarray(raw).view(np.uint8).reshape(len(raw), f.length)
        return fixed_bytes_to_arrow(matrix, col.kind is Kind.TEXT, f.text_encoding, absent, col.name)
    if col.kind is Kind.ARRAY:
        return array_to_arrow(col, raw, absent)
    null = None if absent is None else absent.copy()
    if col.kind is Kind.ENUM:
        assert f.enum is not None
        codes = raw if raw.dtype.isnative else _native(raw)  # looked up in place: no copy of the codes
        return enum_to_arrow(codes, f.enum.values, f.enum.null_value, null)
    # One copy out of the (strided) records: straight to the widened type for unsigned ints.
    widen = _UNSIGNED_WIDEN.get(f.primitive_type)
    values = raw.astype(widen) if widen is not None else _native(raw)
    if f.optional:
        is_null = (
            np.isnan(values)
            if col.kind is Kind.FLOAT and isinstance(f.null_value, float) and np.isnan(f.null_value)
            else values == values.dtype.type(f.null_value)
        )
        null = is_null if null is None else (null | is_null)
    mask = _mask_or_none(null)
    if f.primitive_type == "uint64":
        return uint64_to_decimal(values, mask)
    return pa.array(values, type=col.arrow_type, mask=mask)


def array_to_arrow(col: ColumnSpec, raw: np.ndarray, absent: np.ndarray | None = None) -> pa.Array:
    """An (n, length) matrix of an array field -> `array<element>` of `length` values per row; an optional type's
    null value is a null element, a row the sender's block or version lacks is a null array."""
    f = col.field
    assert f is not None
    n = len(raw)
    values = _native(np.asarray(raw).reshape(n * f.length))
    null: np.ndarray | None = None
    if f.optional:
        null = (
            np.isnan(values)
            if isinstance(f.null_value, float) and np.isnan(f.null_value)
            else (values == values.dtype.type(f.null_value))
        )
    mask = _mask_or_none(null)
    element_type = _element_type(f.primitive_type)
    if f.primitive_type == "uint64":
        elements = uint64_to_decimal(values, mask)
    else:
        widen = _UNSIGNED_WIDEN.get(f.primitive_type)
        elements = pa.array(values if widen is None else values.astype(widen), type=element_type, mask=mask)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * f.length, type=pa.int32())
    list_mask = _mask_or_none(absent)
    return pa.ListArray.from_arrays(
        offsets, elements, type=col.arrow_type, mask=None if list_mask is None else pa.array(list_mask)
    )


def _validity(mask: np.ndarray | None) -> pa.Buffer | None:
    """Arrow validity bitmap (1 = valid) for a null mask, None when nothing is null."""
    if mask is None or not mask.any():
        return None
    return pa.py_buffer(np.packbits(~mask, bitorder="little"))


def uint64_to_decimal(values: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    """uint64 values as decimal(20,0), built from buffers: each value is the low half of a 128-bit integer."""
    words = np.zeros((len(values), 2), dtype=np.uint64)
    words[:, 0 if np.little_endian else 1] = values
    validity = _validity(mask)
    return pa.Array.from_buffers(
        pa.decimal128(20, 0),
        len(values),
        [validity, pa.py_buffer(words)],
        null_count=-1 if validity is not None else 0,
    )


@dataclass(frozen=True)
class _EnumTable:
    """An enum's names as Arrow `string_view` views (16 bytes each), and per code type a code -> view table.

    View `len(known)` is `SBE_UNKNOWN`; the last one (empty) stands for the null value.
    """

    known: np.ndarray
    views: np.ndarray
    data: pa.Buffer
    lookup: dict[str, np.ndarray]


@functools.lru_cache(maxsize=256)
def _enum_table(items: tuple[tuple[str, int], ...]) -> _EnumTable:
    names = [k.encode() for k, _ in items] + [UNKNOWN_ENUM.encode(), b""]
    views = np.zeros((len(names), 4), dtype=np.uint32)
    data = bytearray()
    for i, name in enumerate(names):
        views[i, 0] = len(name)
        if len(name) <= _VIEW_INLINE:
            views[i, 1:] = np.frombuffer(name.ljust(_VIEW_INLINE, b"\0"), dtype=np.uint32)
        else:
            views[i, 1] = np.frombuffer(name[:4], dtype=np.uint32)[0]
            views[i, 3] = len(data)  # buffer index 0, offset
            data += name
    return _EnumTable(
        np.array([v for _, v in items], dtype=np.int64),
        views.view(_VIEW).reshape(len(names)),
        pa.py_buffer(bytes(data) or b"\0"),
        {},
    )


def _view_index(table: _EnumTable, codes: np.ndarray, null_value: int) -> np.ndarray:
    """Index of each code's view: its name's, else SBE_UNKNOWN's; the null value's is the last (empty) one."""
    known = table.known
    found = np.searchsorted(known, codes)
    clipped = np.minimum(found, max(len(known) - 1, 0))
    hit = (known[clipped] == codes) if len(known) else np.zeros(len(codes), dtype=bool)
    index = np.where(hit, clipped, len(known))
    index[codes == null_value] = len(table.views) - 1
    return index


def _enum_lookup(table: _EnumTable, dtype: np.dtype, null_value: int) -> np.ndarray:
    """The view of every code of a 1- or 2-byte code type, indexed by the code's unsigned bit pattern."""
    key = f"{dtype.str}:{null_value}"
    lookup = table.lookup.get(key)
    if lookup is None:
        codes = np.arange(1 << (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}").view(dtype.newbyteorder("="))
        lookup = table.views[_view_index(table, codes.astype(np.int64), null_value)]
        table.lookup[key] = lookup
    return lookup


def enum_to_arrow(
    codes: np.ndarray, values: Mapping[str, int], null_value: int, null: np.ndarray | None = None
) -> pa.Array:
    """Enum codes to their names, without a string per row.

    Each name is a precomputed 16-byte Arrow `string_view` view; 1- and 2-byte codes (the usual enum encodings)
    pick theirs with one table lookup, wider codes by a search over the schema's values. The view array is then
    cast to `string` in C++.
    """
    table = _enum_table(tuple(sorted(values.items(), key=lambda kv: kv[1])))
    if codes.dtype.itemsize <= 2 and codes.dtype.kind in "iu":
        views = _enum_lookup(table, codes.dtype, null_value)[codes.view(f"u{codes.dtype.itemsize}")]
        in_range = np.iinfo(codes.dtype).min <= null_value <= np.iinfo(codes.dtype).max
        is_null = codes == null_value if in_range else None
    else:
        index = _view_index(table, codes.astype(np.int64), null_value)
        views = table.views[index]
        is_null = index == len(table.views) - 1
    mask = null if is_null is None else (is_null if null is None else (null | is_null))
    validity = _validity(mask)
    array = pa.Array.from_buffers(
        pa.string_view(),
        len(views),
        [validity, pa.py_buffer(views), table.data],
        null_count=-1 if validity is not None else 0,
    )
    return array.cast(pa.string())


def fixed_bytes_to_arrow(
    matrix: np.ndarray, text: bool, encoding: str | None, absent: np.ndarray | None, column: str
) -> pa.Array:
    """An (n, length) byte matrix to strings cut at the first NUL, or to binaries of all `length` bytes."""
    n, width = matrix.shape
    if text:
        is_nul = matrix == 0
        lengths = np.where(is_nul.any(axis=1), is_nul.argmax(axis=1), width).astype(np.int64)
    else:
        lengths = np.full(n, width, dtype=np.int64)
    if absent is not None:
        lengths = np.where(absent, 0, lengths)
    if not text and absent is None:
        offsets = np.arange(n + 1, dtype=np.int64) * width
        return _byte_array(n, offsets, np.ascontiguousarray(matrix).reshape(-1), None, None, column)
    # Row-major boolean selection keeps each row's leading bytes, in row order: the concatenated values.
    body = matrix[np.arange(width) < lengths[:, None]]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _byte_array(n, offsets, body, encoding if text else None, absent, column)


def binary_layout(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths) as int64 into the data buffer, and the data buffer as uint8, without copying data."""
    offset_type: type[np.int32 | np.int64]
    if pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type):
        offset_type = np.int64
    elif pa.types.is_binary(values.type) or pa.types.is_string(values.type):
        offset_type = np.int32
    else:
        raise TypeError(f"expected a binary or string array, got {values.type}")
    n = len(values)
    buffers = values.buffers()
    offsets = np.frombuffer(
        buffers[1], dtype=offset_type, count=n + 1, offset=values.offset * np.dtype(offset_type).itemsize
    ).astype(np.int64)
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None and buffers[2].size
        else np.zeros(0, dtype=np.uint8)
    )
    return offsets[:-1], np.diff(offsets), data


def gather_bytes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the byte ranges `data[starts[i]:starts[i]+lengths[i]]`: (bytes, int32 offsets), no Python loop."""
    lengths = lengths.astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise SbeDecodeError(f"{total} bytes of variable-length data in one batch exceed Arrow's 2 GiB binary limit")
    if total == 0:
        return np.empty(0, dtype=np.uint8), offsets.astype(np.int32)
    if len(lengths) and np.all(starts[1:] == starts[:-1] + lengths[:-1]):
        out = data[int(starts[0]) : int(starts[0]) + total]  # already contiguous: one slice
    else:
        index = np.repeat(starts.astype(np.int64) - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
        out = data[index]
    return np.ascontiguousarray(out), offsets.astype(np.int32)


def bytes_to_arrow(
    data: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    encoding: str | None,
    null: np.ndarray | None,
    column: str,
) -> pa.Array:
    """A string (if `encoding`) or binary Arrow array of byte ranges of `data`; rows in `null` are null.

    Text is validated once for the whole array; only if that fails are rows decoded one by one with
    replacement characters (as the per-message codec does), so valid data never takes a Python loop.
    """
    body, offsets = gather_bytes(data, starts, lengths)
    return _byte_array(len(lengths), offsets, body, encoding, null, column)


def _byte_array(
    n: int, offsets: np.ndarray, body: np.ndarray, encoding: str | None, null: np.ndarray | None, column: str
) -> pa.Array:
    if offsets[-1] >= 2**31:
        raise SbeDecodeError(
            f"column {column}: {int(offsets[-1])} bytes in one batch exceed Arrow's 2 GiB binary limit"
        )
    offsets = offsets.astype(np.int32)
    mask = _mask_or_none(null)
    validity = None if mask is None else pa.array(~mask, type=pa.bool_()).buffers()[1]
    arrow_type = pa.string() if encoding is not None else pa.binary()
    arr = pa.Array.from_buffers(
        arrow_type, n, [validity, pa.py_buffer(offsets), pa.py_buffer(body)], null_count=-1 if mask is not None else 0
    )
    if encoding is None:
        return arr
    if encoding in ("ascii", "utf-8"):
        if encoding == "ascii" and (body.size == 0 or int(body.max()) < 0x80):
            return arr
        if encoding == "utf-8":
            try:
                arr.validate(full=True)
                return arr
            except pa.ArrowInvalid:
                pass
    log.debug("column %s: text needs per-row decoding (%s)", column, encoding)
    raw = pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(body)], null_count=-1 if mask is not None else 0
    )
    return pa.array([None if b is None else b.decode(encoding, "replace") for b in raw.to_pylist()], type=pa.string())


def constant_to_arrow(col: ColumnSpec, n: int) -> pa.Array:
    """A constant field's value repeated `n` times (enum constants by name)."""
    f = col.field
    assert f is not None and f.is_constant
    value = f.constant
    if f.enum is not None:
        value = next((k for k, v in f.enum.values.items() if v == value), UNKNOWN_ENUM)
    arrow_type = col.arrow_type
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return pa.array(np.full(n, value, dtype=arrow_type.to_pandas_dtype()), type=arrow_type)
    return pa.repeat(pa.scalar(value, type=arrow_type), n)
