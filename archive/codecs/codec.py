"""Schema-driven SBE codec: one XML schema in, precompiled `struct` layouts out.

The schema's layouts come from `schema` (why a parser of our own: see there and docs/sbe.md).

Everything that depends only on the schema is computed once per message: a `struct.Struct` for the 8-byte header
plus the fixed block (gaps left by explicit offsets are pad bytes, so they encode as zeros), the encode defaults,
the null values and the variable-length field layouts. Decoding then costs one `unpack_from` for the block in the
common case and one per variable-length field.

Compatibility rules (SBE's, as applied by Aeron's `ControlSessionAdapter`): the header's blockLength and version
are the *acting* ones. A field that lies beyond a shorter (older) block, or whose `sinceVersion` is newer than the
acting version, decodes as its null value; a variable-length field newer than the acting version is absent from
the wire and decodes as empty; bytes of a longer (newer) block beyond the known fields are skipped; trailing bytes
after the last variable-length field are ignored (catalog padding on RecordingDescriptor). "Null" is SBE's null
(declared nullValue of an optional type, else the primitive's: INT32_MIN, INT64_MIN, UINT_MAX...), not Aeron's
NULL_VALUE (-1); mapping one to the other is the request adapter's business, as in Java.

Encoding fills omitted fixed fields with the optional type's nullValue, else 0, and omitted var fields with empty
data; enum fields take ints, IntEnums or value names. Decoded messages are immutable per-message `Message`
subclasses (tuples underneath) so a decode is one `tuple.__new__`.

Supported schema features: primitive, named simple, enum, set (as an int bitmask), char/uint8/int8 array
(as str/bytes), arrays of other primitives (as tuples), constant and composite (flattened to `<field>_<member>`)
fields, `data` fields, and repeating groups (any dimension composite with unsigned blockLength/numInGroup; nested
groups and var data inside entries; decoded as tuples of `GroupEntry`, encoded from sequences of mappings). The
wire order is SBE's: root block (acting length from the header), groups in schema order (each entry: its block at
the dimension's acting length, its nested groups, its var data), then the message's var data; a group newer than
the acting version is absent. A message the codec cannot represent is refused alone (`SbeCodec.unsupported`).
"""

from __future__ import annotations

import logging
import operator
import struct
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self, cast
from xml.etree import ElementInclude

if TYPE_CHECKING:
    import numpy

from .schema import (
    PRIMITIVES,
    XINCLUDE_TAG,
    CodecError,
    EnumSpec,
    FieldSpec,
    GroupSpec,
    MessageSpec,
    SchemaError,
    SchemaParser,
    VarFieldSpec,
    local_name,
)

__all__ = [
    "GroupEntry",
    "Message",
    "MessageHeader",
    "SbeCodec",
]


log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview


class MessageHeader(NamedTuple):
    block_length: int
    template_id: int
    schema_id: int
    version: int


class Message(tuple[Any, ...]):
    """A decoded message: an immutable record with fields as snake_case attributes plus header metadata.

    Each message of a schema gets its own subclass (named after the message), built once with the codec, so
    decoding is a single `tuple.__new__` and attribute access an `itemgetter`. Metadata: `name`, `template_id`,
    `schema_id`, `block_length`, `version` (the acting version from the header) and `encoded_length` (bytes
    consumed, header included). A schema field of the same name wins (ControlResponse/AuthConnectRequest/
    Challenge/ConnectRequest/CatalogHeader.version are fields); the header values are always available, never
    shadowed, as `header` (a `MessageHeader`). Equality and hashing use the template id and field values only.
    """

    __slots__ = ()

    # Set on each per-message subclass.
    _spec: ClassVar[MessageSpec]
    _attrs: ClassVar[tuple[str, ...]]
    _n: ClassVar[int]
    _constants: ClassVar[dict[str, Any]]
    _schema_id: ClassVar[int]
    _group_attrs: ClassVar[tuple[str, ...]] = ()
    name: ClassVar[str]
    template_id: ClassVar[int]
    schema_id: ClassVar[int]

    _schema_version: ClassVar[int]

    @classmethod
    def _of(cls, **fields: Any) -> Self:
        """A message to encode, from every field by keyword (the generated classes' typed `of` calls this).

        The header metadata is the schema's: the message's block length and the schema version; the encoded
        length is 0 until it is encoded.
        """
        values = [fields.pop(attr) for attr in cls._attrs]
        if fields:
            raise CodecError(f"{cls._spec.name} has no field(s) {', '.join(sorted(fields))}")
        return _new_tuple(cls, (*values, cls._spec.block_length, cls._schema_version, 0))

    @property
    def header(self) -> MessageHeader:
        n = self._n
        cls = type(self)
        return MessageHeader(self[n], cls._spec.template_id, cls._schema_id, self[n + 1])

    def as_dict(self) -> dict[str, Any]:
        """Schema fields only (no metadata): fixed fields in offset order, groups (as lists of dicts, recursively)
        and var fields in wire order, constants. The result is valid keyword input for `SbeCodec.encode`."""
        d = dict(zip(self._attrs, self, strict=False))  # the tuple goes on with the header metadata
        for attr in self._group_attrs:
            d[attr] = [entry.as_dict() for entry in d[attr]]
        if self._constants:
            d.update(self._constants)
        return d

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._spec.template_id == other._spec.template_id and tuple.__getitem__(
            self, slice(0, self._n)
        ) == tuple.__getitem__(other, slice(0, other._n))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash((self._spec.template_id, tuple.__getitem__(self, slice(0, self._n))))

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{self._spec.name}({body})"

    def __reduce__(self) -> Any:
        raise TypeError(f"{self._spec.name} messages are not picklable; pickle as_dict() instead")


class GroupEntry(tuple[Any, ...]):
    """One entry of a repeating group: an immutable record of its fields (snake_case attributes), nested groups
    (tuples of entries) and var fields, in wire order. Each group of a schema gets its own subclass."""

    __slots__ = ()

    _group: ClassVar[GroupSpec]
    _attrs: ClassVar[tuple[str, ...]]
    _constants: ClassVar[dict[str, Any]]
    _group_attrs: ClassVar[tuple[str, ...]] = ()

    def as_dict(self) -> dict[str, Any]:
        """Fields, nested groups (lists of dicts) and var fields, then constants: valid input for encoding."""
        d = dict(zip(self._attrs, self, strict=True))
        for attr in self._group_attrs:
            d[attr] = [entry.as_dict() for entry in d[attr]]
        if self._constants:
            d.update(self._constants)
        return d

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({body})"

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} entries are not picklable; pickle as_dict() instead")


def _entry_class(group: GroupSpec, path: str, attrs: tuple[str, ...], constants: dict[str, Any]) -> type[GroupEntry]:
    """The per-group GroupEntry subclass, named by its path (`Car.performanceFigures.acceleration`)."""
    ns: dict[str, Any] = {
        "__slots__": (),
        "__doc__": group.description or f"An entry of group {path}.",
        "_group": group,
        "_attrs": attrs,
        "_constants": dict(constants),
        "_group_attrs": tuple(g.attr for g in group.groups),
    }
    for i, attr in enumerate(attrs):
        ns[attr] = property(operator.itemgetter(i))
    ns.update(constants)
    return type(path, (GroupEntry,), ns)


_new_tuple = tuple.__new__


def _byte_view(buffer: Any) -> Buffer:
    """bytes/bytearray as they are, anything else with the buffer protocol as a flat memoryview of bytes."""
    if type(buffer) is bytes or type(buffer) is bytearray:
        return buffer
    try:
        view = buffer if type(buffer) is memoryview else memoryview(buffer)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
    except TypeError as e:
        raise CodecError(f"cannot use {type(buffer).__name__} as a byte buffer: {e}") from None
    return view


def _message_class(
    spec: MessageSpec,
    schema_id: int,
    schema_version: int,
    wire_attrs: tuple[str, ...],
    var_attrs: tuple[str, ...],
    constants: dict[str, Any],
    declared: type[Message] | None = None,
) -> type[Message]:
    """The per-message Message subclass: tuple layout (*fixed, *groups, *var, block_length, version,
    encoded_length). `declared` is a class declared for this message (`messages.py`, generated from the same
    schema): it gets the layout's attributes, rather than a class being made at run time."""
    group_attrs = tuple(g.attr for g in spec.groups)
    attrs = (*wire_attrs, *group_attrs, *var_attrs)
    n = len(attrs)
    ns: dict[str, Any] = {
        "__slots__": (),
        "__doc__": spec.description or f"Decoded {spec.name} (template id {spec.template_id}).",
        "_spec": spec,
        "_attrs": attrs,
        "_n": n,
        "_constants": dict(constants),
        "_schema_id": schema_id,
        "_schema_version": schema_version,
        "_group_attrs": group_attrs,
        "name": spec.name,
        "template_id": spec.template_id,
        "schema_id": schema_id,
        "block_length": property(operator.itemgetter(n), doc="acting block length from the header"),
        "version": property(operator.itemgetter(n + 1), doc="acting schema version from the header"),
        "encoded_length": property(operator.itemgetter(n + 2), doc="bytes consumed by this message"),
    }
    # Fields after metadata: a field named like a metadata attribute (e.g. `version`) takes precedence.
    for i, attr in enumerate(attrs):
        ns[attr] = property(operator.itemgetter(i))
    ns.update(constants)
    if declared is None:
        return type(spec.name, (Message,), ns)
    if declared.__name__ != spec.name or declared.__dict__.get("TEMPLATE_ID") != spec.template_id:
        raise SchemaError(f"class {declared.__name__} is not declared for message {spec.name} ({spec.template_id})")
    for key, value in ns.items():
        if key not in ("__slots__", "__doc__"):
            setattr(declared, key, value)
    return declared


# --------------------------------------------------------------------------------------------------------------
# Compiled layouts
# --------------------------------------------------------------------------------------------------------------


class _Block:
    """The precomputed layout of a fixed block with what follows it: a message's root or a group's entries."""

    __slots__ = (
        "array_fields",
        "attr_set",
        "block_length",
        "block_struct",
        "cls",
        "constants",
        "defaults",
        "field_structs",
        "group_layouts",
        "label",
        "max_since",
        "name",
        "nulls",
        "text_fields",
        "var_attrs",
        "var_encode",
        "var_fields",
        "var_layouts",
        "wire_attrs",
        "wire_fields",
    )

    cls: type[Message] | type[GroupEntry]

    def __init__(
        self,
        name: str,
        path: str,
        fields: tuple[FieldSpec, ...],
        groups: tuple[GroupSpec, ...],
        var_fields: tuple[VarFieldSpec, ...],
        block_length: int,
        order: str,
    ) -> None:
        self.label = name  # "message Car" / "group Car.fuelFigures", for error texts
        self.name = path
        self.block_length = block_length
        wire = tuple(f for f in fields if not f.is_constant)
        self.wire_fields = wire
        self.wire_attrs = tuple(f.attr for f in wire)
        # An absent array decodes as `length` null elements, like Java's generated array getters.
        self.nulls = tuple((f.null_value,) * f.length if f.is_array else f.null_value for f in wire)
        self.max_since = max((f.since_version for f in wire), default=0)
        fmt = []
        cursor = 0
        for f in wire:
            if f.offset > cursor:
                fmt.append(f"{f.offset - cursor}x")
            fmt.append(f.struct_format)
            cursor = f.offset + f.size
        if block_length > cursor:
            fmt.append(f"{block_length - cursor}x")
        self.block_struct = struct.Struct(order + "".join(fmt))
        self.field_structs = tuple(struct.Struct(order + f.struct_format) for f in wire)
        # Arrays unpack as `length` flat values: (field index, length) to regroup them into tuples.
        self.array_fields = tuple((i, f.length) for i, f in enumerate(wire) if f.is_array)
        self.defaults = tuple((f.attr, f.default) for f in wire)
        self.text_fields = tuple(i for i, f in enumerate(wire) if f.text_encoding is not None)
        self.constants = {f.attr: f.constant for f in fields if f.is_constant}
        self.var_fields = var_fields
        self.var_attrs = tuple(v.attr for v in var_fields)
        # varData given as str is encoded UTF-8; varAscii as its characterEncoding.
        self.var_encode = tuple((v.attr, b"", v.text_encoding or "utf-8", v.max_length) for v in var_fields)
        layouts = []
        for v in var_fields:
            st = struct.Struct(order + PRIMITIVES[v.length_primitive].code)
            layouts.append(
                (
                    st.unpack_from,
                    st.pack,
                    st.pack_into,
                    v.length_size,
                    v.max_length,
                    v.text_encoding,
                    v.since_version,
                    v.attr,
                )
            )
        self.var_layouts = tuple(layouts)
        self.group_layouts = tuple(_GroupCompiled(g, path, order) for g in groups)
        group_attrs = tuple(g.attr for g in groups)
        self.attr_set = frozenset((*self.wire_attrs, *group_attrs, *self.var_attrs, *self.constants))

    def regroup(self, flat: Sequence[Any]) -> list[Any]:
        """Block values as unpacked by `block_struct` (arrays as flat runs) -> one value per wire field."""
        out: list[Any] = list(flat[: self.array_fields[0][0]])
        i = len(out)
        arrays = dict(self.array_fields)
        for k in range(len(out), len(self.wire_fields)):
            length = arrays.get(k)
            if length is None:
                out.append(flat[i])
                i += 1
            else:
                out.append(tuple(flat[i : i + length]))
                i += length
        return out

    def flatten(self, values: Sequence[Any]) -> list[Any]:
        """One value per wire field -> `block_struct` arguments (each array as its `length` values)."""
        out: list[Any] = []
        arrays = dict(self.array_fields)
        for k, v in enumerate(values):
            if k in arrays:
                out.extend(self.array_values(k, v))
            else:
                out.append(v)
        return out

    def array_values(self, k: int, v: Any) -> Sequence[Any]:
        """The `length` values of array field `k` from a sequence of exactly that many (None: all null/zero)."""
        f = self.wire_fields[k]
        if v is None:
            return (f.null_value if f.optional else 0,) * f.length
        if isinstance(v, (str, bytes, bytearray)) or not isinstance(v, Sequence):
            try:
                v = list(v)
            except TypeError:
                raise CodecError(
                    f"field {f.attr} of {self.label} takes a sequence of {f.length} {f.primitive_type} values, "
                    f"not {type(v).__name__}"
                ) from None
        if len(v) != f.length:
            raise CodecError(
                f"field {f.attr} of {self.label} is an array of {f.length} {f.primitive_type}, got {len(v)} values"
            )
        return cast(Sequence[Any], v)


class _Compiled(_Block):
    """Everything encode/decode needs for one message, precomputed."""

    __slots__ = ("full_struct", "header_values", "spec", "template_id")

    cls: type[Message]

    def __init__(
        self,
        spec: MessageSpec,
        order: str,
        header_fmt: str,
        header_idx: tuple[int, int, int, int],
        schema_id: int,
        schema_version: int,
        declared: type[Message] | None = None,
    ) -> None:
        super().__init__(
            f"message {spec.name}", spec.name, spec.fields, spec.groups, spec.var_fields, spec.block_length, order
        )
        self.spec = spec
        self.template_id = spec.template_id
        self.full_struct = struct.Struct(order + header_fmt + self.block_struct.format[1:])
        header_values = [0] * len(struct.unpack(order + header_fmt, bytes(struct.calcsize(order + header_fmt))))
        for i, value in zip(header_idx, (spec.block_length, spec.template_id, schema_id, schema_version), strict=True):
            header_values[i] = value
        self.header_values = tuple(header_values)
        self.cls = _message_class(
            spec, schema_id, schema_version, self.wire_attrs, self.var_attrs, self.constants, declared
        )


class _GroupCompiled(_Block):
    """A group's dimension codec and its entries' layout (nested groups recursively)."""

    __slots__ = ("count_index", "dimension_size", "dimension_struct", "length_index", "max_count", "since", "spec")

    cls: type[GroupEntry]

    def __init__(self, spec: GroupSpec, owner: str, order: str) -> None:
        path = f"{owner}.{spec.name}"
        super().__init__(f"group {path}", path, spec.fields, spec.groups, spec.var_fields, spec.block_length, order)
        self.spec = spec
        self.since = spec.since_version
        self.max_count = spec.max_count
        self.dimension_size = spec.dimension_size
        # The dimension composite as one struct: blockLength, numInGroup in offset order, anything else is padding.
        members = sorted(
            [(spec.block_length_offset, spec.block_length_primitive), (spec.count_offset, spec.count_primitive)]
        )
        fmt, cursor = [], 0
        for offset, primitive in members:
            if offset > cursor:
                fmt.append(f"{offset - cursor}x")
            fmt.append(PRIMITIVES[primitive].code)
            cursor = offset + PRIMITIVES[primitive].size
        if spec.dimension_size > cursor:
            fmt.append(f"{spec.dimension_size - cursor}x")
        self.dimension_struct = struct.Struct(order + "".join(fmt))
        first_is_length = members[0][0] == spec.block_length_offset
        self.length_index, self.count_index = (0, 1) if first_is_length else (1, 0)
        attrs = (*self.wire_attrs, *(g.attr for g in spec.groups), *self.var_attrs)
        self.cls = _entry_class(spec, path, attrs, self.constants)


def _partial_block(c: _Block, buffer: Buffer, at: int, block_length: int, version: int) -> list[Any]:
    """Fixed fields of a block shorter than known or of an older acting version: absent fields are null."""
    return [
        (st.unpack_from(buffer, at + f.offset) if f.is_array else st.unpack_from(buffer, at + f.offset)[0])
        if f.offset + f.size <= block_length and f.since_version <= version
        else null
        for f, st, null in zip(c.wire_fields, c.field_structs, c.nulls, strict=True)
    ]


def _decode_group(g: _GroupCompiled, buffer: Buffer, pos: int, end: int, version: int) -> tuple[Any, int]:
    """The entries of group `g` whose dimension header is at `pos`, and the position after them.

    A loop per entry: this is the per-message Python codec; the Spark reads decode groups vectorised
    (`aeron_archive_spark.archive.tables.sbe.decode`).
    """
    if g.since > version:
        return (), pos  # added after the sender's version: not on the wire
    if pos + g.dimension_size > end:
        raise CodecError(
            f"buffer too short for the dimension of {g.label} at offset {pos}: {end - pos} bytes remain, "
            f"need {g.dimension_size}"
        )
    dimension = g.dimension_struct.unpack_from(buffer, pos)
    block_length, count = dimension[g.length_index], dimension[g.count_index]
    pos += g.dimension_size
    if pos + count * block_length > end:
        raise CodecError(
            f"{g.label}: {count} entries of {block_length} bytes at offset {pos} exceed the remaining {end - pos} bytes"
        )
    complete = block_length >= g.block_length and version >= g.max_since
    entries = []
    for _ in range(count):
        if pos + block_length > end:
            raise CodecError(f"buffer too short for an entry of {g.label} at offset {pos}")
        if complete:
            values: Any = g.block_struct.unpack_from(buffer, pos)
            values = g.regroup(values) if g.array_fields else list(values)
        else:
            values = _partial_block(g, buffer, pos, block_length, version)
        for i in g.text_fields:
            v = values[i]
            if isinstance(v, bytes):
                values[i] = v.split(b"\0", 1)[0].decode(g.wire_fields[i].text_encoding or "ascii", "replace")
        pos += block_length
        for nested in g.group_layouts:
            nested_entries, pos = _decode_group(nested, buffer, pos, end, version)
            values.append(nested_entries)
        if g.var_layouts:
            pos = _decode_var(g, buffer, pos, end, version, values)
        entries.append(_new_tuple(g.cls, values))
    return tuple(entries), pos


def _decode_var(c: _Block, buffer: Buffer, pos: int, end: int, version: int, values: list[Any]) -> int:
    """Append the var fields of `c` at `pos` to `values`; the position after them."""
    for unpack_len, _pack, _pack_into, len_size, max_len, encoding, since, attr in c.var_layouts:
        if since > version:
            values.append("" if encoding else b"")
            continue
        if pos + len_size > end:
            raise CodecError(
                f"buffer too short for the length of var field {attr} of {c.label} at offset {pos}: "
                f"{end - pos} bytes remain"
            )
        n = unpack_len(buffer, pos)[0]
        pos += len_size
        if n > max_len:
            raise CodecError(f"var field {attr} of {c.label} length {n} exceeds the maximum {max_len}")
        if pos + n > end:
            raise CodecError(
                f"var field {attr} of {c.label} length {n} exceeds the remaining {end - pos} bytes at offset {pos}"
            )
        chunk = buffer[pos : pos + n]
        values.append(str(chunk, encoding, "replace") if encoding else bytes(chunk))
        pos += n
    return pos


# --------------------------------------------------------------------------------------------------------------
# Codec
# --------------------------------------------------------------------------------------------------------------


class SbeCodec:
    """Encoder/decoder for every message of one SBE schema (fixed block, repeating groups, var fields).

    `unsupported` maps the template id of each message the codec refused to (name, reason); the other messages of
    the schema work (see `SchemaParser.messages`).
    """

    def __init__(self, root: ET.Element, source: str = "<xml>", declared: Sequence[type[Message]] = ()) -> None:
        """`declared`: classes declared for this schema's messages (see `_message_class`), by message name."""
        declared_by_name = {cls.__name__: cls for cls in declared}
        parser = SchemaParser(root)
        self.source = source
        self.schema_id: int = parser.schema_id
        self.schema_version: int = parser.version
        self.package: str = parser.package
        self.semantic_version: str = parser.semantic_version
        self.byte_order: str = parser.order
        header_fmt, self._header_idx, self.header_length = parser.header_layout()
        self._header_struct = struct.Struct(parser.order + header_fmt)
        self._header_identity = (
            self._header_idx == (0, 1, 2, 3) and len(self._header_struct.unpack(bytes(self.header_length))) == 4
        )
        specs, self.unsupported = parser.messages()
        for template_id, (name, reason) in self.unsupported.items():
            log.warning("SBE schema %s: message %s (id %d) is not supported: %s", source, name, template_id, reason)
        self._by_id: dict[int, _Compiled] = {}
        self._by_name: dict[str, _Compiled] = {}
        for spec in specs:
            if spec.template_id in self._by_id:
                raise SchemaError(
                    f"template id {spec.template_id} used by both {self._by_id[spec.template_id].name} and {spec.name}"
                )
            if spec.name in self._by_name:
                raise SchemaError(f"message name {spec.name!r} defined twice")
            compiled = _Compiled(
                spec,
                parser.order,
                header_fmt,
                self._header_idx,
                self.schema_id,
                self.schema_version,
                declared_by_name.pop(spec.name, None),
            )
            self._by_id[spec.template_id] = compiled
            self._by_name[spec.name] = compiled
        if declared_by_name:
            raise SchemaError(f"classes declared for messages the schema lacks: {', '.join(sorted(declared_by_name))}")
        self._lookup: dict[Any, _Compiled] = {**self._by_name, **self._by_id}
        for type_name, elem in parser.raw_types.items():
            if local_name(elem.tag) == "enum":
                parser.resolve(type_name, "enum")
        self.enums: dict[str, EnumSpec] = {td.name: td.enum for td in parser.types.values() if td.enum is not None}
        log.debug(
            "SBE schema %s id=%d version=%d: %d messages", source, self.schema_id, self.schema_version, len(specs)
        )

    # ---- construction ----

    @classmethod
    def from_xml(cls, path_or_text: str | bytes | Path, declared: Sequence[type[Message]] = ()) -> SbeCodec:
        """Build a codec from a schema file path or from the XML text itself (anything starting with '<')."""
        if isinstance(path_or_text, bytes):
            text, source = path_or_text, "<bytes>"
        elif isinstance(path_or_text, str) and path_or_text.lstrip().startswith("<"):
            text, source = path_or_text.encode(), "<text>"
        else:
            path = Path(path_or_text)
            try:
                text, source = path.read_bytes(), str(path)
            except OSError as e:
                raise SchemaError(f"cannot read SBE schema {path}: {e}") from e
        try:
            root = ET.fromstring(text)
            if root.find(f".//{XINCLUDE_TAG}") is not None:
                # Shared type files, as in SBE's own examples; relative hrefs resolve against the schema's path.
                base = source if not source.startswith("<") else None
                ElementInclude.include(root, base_url=base)
        except ET.ParseError as e:
            raise SchemaError(f"SBE schema {source} is not well-formed XML: {e}") from e
        except (OSError, ElementInclude.FatalIncludeError) as e:
            raise SchemaError(f"SBE schema {source}: cannot resolve xi:include: {e}") from e
        return cls(root, source, declared)

    # ---- metadata ----

    def message(self, name_or_template_id: str | int) -> MessageSpec:
        return self._resolve(name_or_template_id).spec

    @property
    def messages(self) -> tuple[MessageSpec, ...]:
        return tuple(c.spec for c in self._by_id.values())

    def template_id(self, name: str) -> int:
        return self._resolve(name).template_id

    def numpy_dtype(self, message: str | int) -> numpy.dtype:
        """Structured dtype of the message's fixed block (no header), with explicit offsets and byte order.

        Lets callers view many equally sized blocks as one array, e.g. catalog descriptors or fixed messages.
        Arrays of numbers are subarray fields of shape (length,).
        """
        c = self._resolve(message)
        return self.block_dtype(c.wire_fields, c.block_length)

    def block_dtype(self, fields: Sequence[FieldSpec], block_length: int) -> numpy.dtype:
        """Structured dtype of a block holding `fields` (a message's or a `GroupSpec`'s; constants skipped)."""
        import numpy as np

        order = self.byte_order
        names: list[str] = []
        formats: list[Any] = []
        offsets: list[int] = []
        for f in fields:
            if f.is_constant:
                continue
            names.append(f.attr)
            if f.struct_format.endswith("s"):
                formats.append(f"S{f.length}")
            elif f.is_array:
                formats.append((order + PRIMITIVES[f.primitive_type].numpy, (f.length,)))
            else:
                formats.append(order + PRIMITIVES[f.primitive_type].numpy)
            offsets.append(f.offset)
        return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": block_length})

    def _resolve(self, key: str | int) -> _Compiled:
        try:
            return self._lookup[key]
        except (KeyError, TypeError):
            for template_id, (name, reason) in self.unsupported.items():
                if key in (template_id, name):
                    raise CodecError(f"message {name} (id {template_id}) is not supported: {reason}") from None
            raise CodecError(f"unknown message {key!r} in schema {self.schema_id}") from None

    # ---- header ----

    def peek_header(self, buffer: Buffer, offset: int = 0) -> MessageHeader:
        """The message header alone, e.g. to dispatch on template id before a full decode."""
        buffer = _byte_view(buffer)
        end = self._end(buffer, offset, None)
        if end - offset < self.header_length:
            raise CodecError(
                f"buffer too short for message header at offset {offset}: {end - offset} bytes, "
                f"need {self.header_length}"
            )
        raw = self._header_struct.unpack_from(buffer, offset)
        i = self._header_idx
        return MessageHeader(raw[i[0]], raw[i[1]], raw[i[2]], raw[i[3]])

    # ---- decode ----

    def decode(self, buffer: Buffer, offset: int = 0, length: int | None = None) -> Message:
        """Decode the message at `offset` (header included); `length` bounds the bytes that belong to it."""
        if type(buffer) is not bytes:
            buffer = _byte_view(buffer)
        end = self._end(buffer, offset, length)
        if end - offset < self.header_length:
            raise CodecError(
                f"buffer too short for message header at offset {offset}: {end - offset} bytes, "
                f"need {self.header_length}"
            )
        raw = self._header_struct.unpack_from(buffer, offset)
        if self._header_identity:
            block_length, template_id, schema_id, version = raw
        else:
            i = self._header_idx
            block_length, template_id, schema_id, version = raw[i[0]], raw[i[1]], raw[i[2]], raw[i[3]]
        if schema_id != self.schema_id:
            raise CodecError(
                f"schema id {schema_id} != {self.schema_id} (template id {template_id} at offset {offset})"
            )
        c = self._by_id.get(template_id)
        if c is None:
            if template_id in self.unsupported:
                self._resolve(template_id)  # raises, with the reason
            raise CodecError(f"unknown template id {template_id} in schema {self.schema_id} at offset {offset}")
        return self._decode_body(c, buffer, offset, offset + self.header_length, end, block_length, version)

    def decode_body(
        self,
        message: str | int,
        buffer: Buffer,
        offset: int = 0,
        length: int | None = None,
        *,
        block_length: int | None = None,
        version: int | None = None,
    ) -> Message:
        """Decode a block stored without a message header (the catalog stores descriptors this way).

        `block_length`/`version` default to the schema's; `encoded_length` then excludes any header.
        """
        c = self._resolve(message)
        buffer = _byte_view(buffer)
        end = self._end(buffer, offset, length)
        return self._decode_body(
            c,
            buffer,
            offset,
            offset,
            end,
            c.block_length if block_length is None else block_length,
            self.schema_version if version is None else version,
        )

    def _end(self, buffer: Buffer, offset: int, length: int | None) -> int:
        size = len(buffer)  # a byte count: _byte_view made any memoryview flat and byte-formatted
        if offset < 0 or offset > size:
            raise CodecError(f"offset {offset} is outside the buffer of {size} bytes")
        if length is None:
            return size
        if length < 0 or offset + length > size:
            raise CodecError(f"length {length} at offset {offset} exceeds the buffer of {size} bytes")
        return offset + length

    def _decode_body(
        self, c: _Compiled, buffer: Buffer, start: int, body: int, end: int, block_length: int, version: int
    ) -> Message:
        block_end = body + block_length
        if block_end > end:
            raise CodecError(
                f"buffer too short for block of message {c.name}: block length {block_length} at "
                f"offset {body} needs {block_length} bytes, {end - body} available"
            )
        if block_length >= c.block_length and version >= c.max_since:
            values: Any = c.block_struct.unpack_from(buffer, body)
            if c.array_fields:
                values = c.regroup(values)
        else:
            values = _partial_block(c, buffer, body, block_length, version)
        if c.text_fields:
            values = list(values)
            for i in c.text_fields:
                v = values[i]
                if isinstance(v, bytes):
                    values[i] = v.split(b"\0", 1)[0].decode(c.wire_fields[i].text_encoding or "ascii", "replace")
        pos = block_end
        if not c.var_layouts and not c.group_layouts:
            return _new_tuple(c.cls, (*values, block_length, version, pos - start))
        values = list(values)
        append = values.append
        for g in c.group_layouts:
            entries, pos = _decode_group(g, buffer, pos, end, version)
            append(entries)
        if c.var_layouts:
            pos = _decode_var(c, buffer, pos, end, version, values)  # errors name "message <name>" (its label)
        append(block_length)
        append(version)
        append(pos - start)
        return _new_tuple(c.cls, values)

    # ---- encode ----

    def encode(self, message: str | int, /, **fields: Any) -> bytes:
        """Header + fixed block + groups + var fields; omitted fields take their defaults (see FieldSpec.default).

        A group takes a sequence of entries, each a mapping of its fields (or a decoded `GroupEntry`); an omitted
        or None group is empty. An array field takes a sequence of exactly `length` numbers.
        """
        c = self._resolve(message)
        values, var_data, groups = self._prepare(c, fields)
        try:
            head = c.full_struct.pack(*c.header_values, *(c.flatten(values) if c.array_fields else values))
        except struct.error:
            head = self._pack_slow(c, c.full_struct, (*c.header_values, *self._coerce(c, values)))
        if not var_data and not groups:
            return head
        parts = [head, groups]
        for layout, data in zip(c.var_layouts, var_data, strict=True):
            parts.append(layout[1](len(data)))
            parts.append(data)
        return b"".join(parts)

    def encode_message(self, message: Message) -> bytes:
        """`encode` of a message built with its class's `of` (or a decoded one): its fields, its template."""
        return self.encode(message.template_id, **dict(zip(message._attrs, message, strict=False)))

    def encode_body(self, message: str | int, /, **fields: Any) -> bytes:
        """Like `encode` without the message header (the catalog's on-disk form)."""
        c = self._resolve(message)
        return self._encode_block(c, fields)

    def encode_into(self, buffer: bytearray | memoryview, offset: int, message: str | int, /, **fields: Any) -> int:
        """Encode into a preallocated writable buffer at `offset`; returns the encoded length.

        Nothing is written unless the whole message fits.
        """
        c = self._resolve(message)
        values, var_data, groups = self._prepare(c, fields)
        total = c.full_struct.size + len(groups)
        for layout, data in zip(c.var_layouts, var_data, strict=True):
            total += layout[3] + len(data)
        if type(buffer) is not bytearray:
            view = _byte_view(buffer)  # a memoryview, or bytes passed in despite the annotation
            if isinstance(view, bytes) or (isinstance(view, memoryview) and view.readonly):
                raise CodecError(f"cannot encode {c.name} into a read-only buffer")
            buffer = view
        size = len(buffer)
        if offset < 0 or offset + total > size:
            raise CodecError(
                f"buffer too small to encode {c.name}: need {total} bytes at offset {offset}, buffer holds {size}"
            )
        try:
            c.full_struct.pack_into(
                buffer, offset, *c.header_values, *(c.flatten(values) if c.array_fields else values)
            )
        except struct.error:
            head = self._pack_slow(c, c.full_struct, (*c.header_values, *self._coerce(c, values)))
            buffer[offset : offset + len(head)] = head
        pos = offset + c.full_struct.size
        if groups:
            buffer[pos : pos + len(groups)] = groups
            pos += len(groups)
        for layout, data in zip(c.var_layouts, var_data, strict=True):
            n = len(data)
            layout[2](buffer, pos, n)
            pos += layout[3]
            buffer[pos : pos + n] = data
            pos += n
        return total

    def _encode_block(self, c: _Block, fields: dict[str, Any]) -> bytes:
        """Block + groups + var fields of a message body or of one group entry."""
        values, var_data, groups = self._prepare(c, fields)
        try:
            block = c.block_struct.pack(*(c.flatten(values) if c.array_fields else values))
        except struct.error:
            block = self._pack_slow(c, c.block_struct, self._coerce(c, values))
        parts: list[Any] = [block, groups]
        for layout, data in zip(c.var_layouts, var_data, strict=True):
            parts.append(layout[1](len(data)))
            parts.append(data)
        return b"".join(parts)

    def _encode_group(self, g: _GroupCompiled, entries: Any) -> bytes:
        """Dimension header (the schema's entry block length, the entry count) then each entry."""
        if entries is None:
            entries = ()
        elif isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise CodecError(f"{g.label} takes a sequence of entries, not {type(entries).__name__}")
        count = len(entries)
        if count > g.max_count:
            raise CodecError(f"{g.label} holds at most {g.max_count} entries, got {count}")
        dimension = [0, 0]
        dimension[g.length_index] = g.block_length
        dimension[g.count_index] = count
        parts = [g.dimension_struct.pack(*dimension)]
        for i, entry in enumerate(entries):
            if isinstance(entry, GroupEntry):
                entry_fields = dict(zip(entry._attrs, entry, strict=True))
            elif isinstance(entry, Mapping):
                entry_fields = dict(entry)
            else:
                raise CodecError(f"entry {i} of {g.label} is a {type(entry).__name__}, not a mapping of its fields")
            parts.append(self._encode_block(g, entry_fields))
        return b"".join(parts)

    @staticmethod
    def _pack_slow(c: _Block, st: struct.Struct, values: Sequence[Any]) -> bytes:
        try:
            return st.pack(*values)
        except struct.error as e:
            raise CodecError(f"cannot encode {c.label}: {e}") from None

    def _prepare(self, c: _Block, fields: dict[str, Any]) -> tuple[list[Any], list[bytes], bytes]:
        """Fixed values in wire order (defaults filled in), the encoded bytes of each var field, and the encoded
        groups (dimension headers and entries, b"" without groups)."""
        pop = fields.pop
        values = [pop(attr, default) for attr, default in c.defaults]
        if c.text_fields:
            for i in c.text_fields:
                values[i] = self._fixed_text(c, i, values[i])
        groups = b""
        if c.group_layouts:
            groups = b"".join(self._encode_group(g, pop(g.spec.attr, None)) for g in c.group_layouts)
        var_data: list[bytes] = []
        for attr, default, encoding, max_len in c.var_encode:
            value = pop(attr, default)
            if type(value) is str:
                try:
                    data = value.encode(encoding)
                except UnicodeEncodeError as e:
                    raise CodecError(f"var field {attr} of {c.label}: {e}") from None
            elif type(value) is bytes:
                data = value
            else:
                data = self._var_bytes(c, attr, value, encoding)
            if len(data) > max_len:
                raise CodecError(f"var field {attr} of {c.label} length {len(data)} exceeds the maximum {max_len}")
            var_data.append(data)
        if fields:
            self._check_extra(c, fields)
        return values, var_data, groups

    @staticmethod
    def _var_bytes(c: _Block, attr: str, value: Any, encoding: str) -> bytes:
        if value is None:
            return b""
        if isinstance(value, str):  # str subclass
            return SbeCodec._var_bytes(c, attr, str(value).encode(encoding), encoding)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise CodecError(f"var field {attr} of {c.label} takes str or bytes, not {type(value).__name__}")

    @staticmethod
    def _check_extra(c: _Block, extra: dict[str, Any]) -> None:
        for attr, value in extra.items():
            if attr in c.constants:
                if value != c.constants[attr]:
                    raise CodecError(f"field {attr} of {c.label} is the constant {c.constants[attr]!r}, got {value!r}")
                continue
            known = ", ".join(sorted(c.attr_set))
            raise CodecError(f"unknown field {attr!r} for {c.label} (fields: {known})")

    @staticmethod
    def _fixed_text(c: _Block, i: int, value: Any) -> bytes:
        f = c.wire_fields[i]
        if isinstance(value, str):
            try:
                value = value.encode(f.text_encoding or "ascii")
            except UnicodeEncodeError as e:
                raise CodecError(f"field {f.attr} of {c.label}: {e}") from None
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise CodecError(f"field {f.attr} of {c.label} takes str or bytes, not {type(value).__name__}")
        if len(value) > f.length:
            raise CodecError(f"field {f.attr} of {c.label} holds {f.length} bytes, got {len(value)}")
        return bytes(value)

    @staticmethod
    def _coerce(c: _Block, values: list[Any]) -> list[Any]:
        """Slow path after struct rejected a value: map enum names, then name the offending field.

        Returns `block_struct` arguments (arrays flattened)."""
        out: list[Any] = list(values)
        for i, (f, v) in enumerate(zip(c.wire_fields, values, strict=True)):
            if f.struct_format.endswith("s"):
                continue
            if f.is_array:
                out[i] = tuple(SbeCodec._coerce_value(c, f, x) for x in c.array_values(i, v))
            else:
                out[i] = SbeCodec._coerce_value(c, f, v)
        return c.flatten(out) if c.array_fields else out

    @staticmethod
    def _coerce_value(c: _Block, f: FieldSpec, v: Any) -> Any:
        if isinstance(v, str) and f.enum is not None:
            if v not in f.enum.values:
                raise CodecError(
                    f"field {f.attr} of {c.label}: {v!r} is not a {f.enum.name} value ({', '.join(f.enum.values)})"
                )
            v = f.enum.values[v]
        if f.primitive_type in ("float", "double"):
            if not isinstance(v, (int, float)):
                raise CodecError(f"field {f.attr} of {c.label} takes a number, not {type(v).__name__}")
            return v
        if not isinstance(v, int):
            try:
                v = operator.index(v)
            except TypeError:
                raise CodecError(f"field {f.attr} of {c.label} takes an int, not {type(v).__name__} {v!r}") from None
        bits = 8 * PRIMITIVES[f.primitive_type].size
        unsigned = f.primitive_type.startswith("u") or f.primitive_type == "char"
        lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if not lo <= v <= hi:
            raise CodecError(f"field {f.attr} of {c.label} value {v} does not fit {f.primitive_type}")
        return v

    def __repr__(self) -> str:
        return (
            f"SbeCodec(package={self.package!r}, schema_id={self.schema_id}, version={self.schema_version}, "
            f"messages={len(self._by_id)})"
        )
