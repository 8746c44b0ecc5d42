"""SBE XML schemas read into message layouts: the specs (`MessageSpec`, `FieldSpec`, ...) the codec compiles.

The schema is parsed with the standard library's `xml.etree`, not with the `sbe` package (sbe-python). Re-checked
on 2026-11-28 against its current release, 0.4.3 (December 2024, still the latest on PyPI): parsing the Aeron
Archive schema still fails with `KeyError: 'int32'` (it knows only uint8/uint16/char enum encodings, and every
enum of schema 101 is int32), and it still reads `sinceVersion` without applying it, and neither `offset` nor
field-level `presence`, the attributes that decide the wire layout and compatibility. The other SBE packages on
PyPI are an MDP 3.0-only decoder (sbedecoder 0.1.10, 2019) and an early sketch (pysbe 0.1.0, 2018). See
docs/sbe.md.

What this reads: primitive, named simple, enum, set, char/uint8/int8 and other primitive arrays, constant and
composite (flattened to `<field>_<member>`) types, `data` fields, repeating groups (nested, with var data) and
xi:include. A message the codec cannot represent is refused alone (`SchemaParser.messages`).
"""

from __future__ import annotations

import codecs
import logging
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple, cast

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

# SBE's default maximum for a variable-length field's length (2^30), used when the schema gives no maxValue.
DEFAULT_MAX_VAR_LENGTH = 1 << 30


class CodecError(ValueError):
    """A message could not be encoded or decoded; the text names the message, field and offsets involved."""


class SchemaError(CodecError):
    """The XML schema is malformed or uses a feature this codec does not support."""


class Primitive(NamedTuple):
    code: str  # struct format character
    size: int
    null: int | float
    min: int | float
    max: int | float
    numpy: str  # numpy kind+size without byte order


PRIMITIVES: dict[str, Primitive] = {
    "char": Primitive("s", 1, 0, 0x20, 0x7E, "S1"),
    "int8": Primitive("b", 1, -(1 << 7), -(1 << 7) + 1, (1 << 7) - 1, "i1"),
    "uint8": Primitive("B", 1, (1 << 8) - 1, 0, (1 << 8) - 2, "u1"),
    "int16": Primitive("h", 2, -(1 << 15), -(1 << 15) + 1, (1 << 15) - 1, "i2"),
    "uint16": Primitive("H", 2, (1 << 16) - 1, 0, (1 << 16) - 2, "u2"),
    "int32": Primitive("i", 4, -(1 << 31), -(1 << 31) + 1, (1 << 31) - 1, "i4"),
    "uint32": Primitive("I", 4, (1 << 32) - 1, 0, (1 << 32) - 2, "u4"),
    "int64": Primitive("q", 8, -(1 << 63), -(1 << 63) + 1, (1 << 63) - 1, "i8"),
    "uint64": Primitive("Q", 8, (1 << 64) - 1, 0, (1 << 64) - 2, "u8"),
    "float": Primitive("f", 4, math.nan, -math.inf, math.inf, "f4"),
    "double": Primitive("d", 8, math.nan, -math.inf, math.inf, "f8"),
}

XINCLUDE_TAG = "{http://www.w3.org/2001/XInclude}include"
_HEADER_FIELDS = ("blockLength", "templateId", "schemaId", "version")
_RESERVED_ATTRS = frozenset({"as_dict", "header", "_spec", "_attrs", "_n", "_constants", "_schema_id"})

_CAMEL_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """`fileIoMaxLength` -> `file_io_max_length`; the attribute/keyword name of a schema field."""
    return _CAMEL_2.sub(r"\1_\2", _CAMEL_1.sub(r"\1_\2", name)).lower()


# --------------------------------------------------------------------------------------------------------------
# Public metadata
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnumSpec:
    """An SBE enum: decoded values stay ints; `python_type` maps them to names when wanted."""

    name: str
    primitive_type: str
    values: Mapping[str, int]
    null_value: int
    python_type: type[IntEnum]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One fixed-block field (composites are flattened into one FieldSpec per leaf member).

    `offset`/`size` are relative to the start of the block; constant fields have size 0 and no wire bytes.
    `null_value` is what the field decodes as when it is absent (declared nullValue of an optional type,
    else the primitive's SBE null); `default` is what `encode` writes when the caller omits the field.
    """

    name: str
    attr: str
    id: int
    type_name: str
    primitive_type: str
    offset: int
    size: int
    length: int
    optional: bool
    null_value: Any
    default: Any
    min_value: int | float
    max_value: int | float
    since_version: int
    struct_format: str
    enum: EnumSpec | None = None
    set_choices: Mapping[str, int] | None = None
    constant: Any = None
    text_encoding: str | None = None

    @property
    def is_constant(self) -> bool:
        return self.constant is not None

    @property
    def is_array(self) -> bool:
        """A fixed array of a primitive other than char/int8/uint8 (those are str/bytes): decodes as a tuple."""
        return self.length != 1 and not self.struct_format.endswith("s")


@dataclass(frozen=True, slots=True)
class VarFieldSpec:
    """A variable-length (`data`) field: a length prefix then that many bytes, in schema order after the block."""

    name: str
    attr: str
    id: int
    type_name: str
    length_primitive: str
    length_size: int
    max_length: int
    text_encoding: str | None
    since_version: int

    @property
    def is_text(self) -> bool:
        return self.text_encoding is not None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A repeating group: a dimension header (entry block length + entry count) then that many entries.

    Each entry on the wire is its fixed block (the *acting* block length from the dimension header, which a newer
    sender may make longer than `block_length`), then its nested groups in schema order, then its var fields. A
    group whose `since_version` is newer than the message's acting version is absent from the wire (no entries).
    `dimension_*` describe the dimension composite (any unsigned blockLength/numInGroup members, with padding).
    """

    name: str
    attr: str
    id: int
    since_version: int
    description: str
    block_length: int
    dimension_type: str
    dimension_size: int
    block_length_primitive: str
    block_length_offset: int
    count_primitive: str
    count_offset: int
    max_count: int
    fields: tuple[FieldSpec, ...]
    groups: tuple[GroupSpec, ...]
    var_fields: tuple[VarFieldSpec, ...]

    def field(self, attr_or_name: str) -> FieldSpec | VarFieldSpec | GroupSpec:
        return _find_member(self.name, "group", (*self.fields, *self.groups, *self.var_fields), attr_or_name)


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """A message's layout: template id, block length, fixed fields in offset order, groups and var fields in wire
    order."""

    name: str
    template_id: int
    block_length: int
    since_version: int
    description: str
    fields: tuple[FieldSpec, ...]
    var_fields: tuple[VarFieldSpec, ...]
    groups: tuple[GroupSpec, ...] = ()

    def field(self, attr_or_name: str) -> FieldSpec | VarFieldSpec | GroupSpec:
        return _find_member(self.name, "message", (*self.fields, *self.groups, *self.var_fields), attr_or_name)


def _find_member(
    owner: str, kind: str, members: tuple[FieldSpec | VarFieldSpec | GroupSpec, ...], attr_or_name: str
) -> FieldSpec | VarFieldSpec | GroupSpec:
    for f in members:
        if f.attr == attr_or_name or f.name == attr_or_name:
            return f
    raise KeyError(f"{kind} {owner} has no field {attr_or_name!r}")


# --------------------------------------------------------------------------------------------------------------
# Schema parsing
# --------------------------------------------------------------------------------------------------------------


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2]


def _is_element(node: ET.Element) -> bool:
    """False for comments and processing instructions kept by a tree builder: their tag is the `ET.Comment` /
    `ET.ProcessingInstruction` factory, not a str (typeshed types every child's tag as str, hence `object`)."""
    tag: object = node.tag
    return isinstance(tag, str)


def _int_attr(elem: ET.Element, name: str, default: int | None = None) -> int | None:
    raw = elem.get(name)
    if raw is None:
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise SchemaError(
            f"attribute {name}={raw!r} of <{local_name(elem.tag)} name={elem.get('name')!r}> is not an integer"
        ) from None


def _python_encoding(name: str) -> str:
    """Python codec name for an SBE characterEncoding, checked now so a bad name fails at schema load."""
    normalised = name.strip().upper().replace("_", "-")
    if normalised in ("US-ASCII", "ASCII"):
        return "ascii"
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        raise SchemaError(f"unknown characterEncoding {name!r}") from None


def _parse_number(text: str, primitive: str) -> int | float:
    if primitive in ("float", "double"):
        return float(text)
    return int(text, 0) if text.strip().lower().startswith(("0x", "-0x")) else int(text)


@dataclass
class _TypeDef:
    """A resolved `<type>`, `<enum>`, `<set>` or `<composite>` from the schema's types section."""

    kind: str  # "type" | "enum" | "set" | "composite"
    name: str
    elem: ET.Element
    primitive: str = ""
    length: int = 1
    optional: bool = False
    constant: Any = None
    null_value: Any = None
    min_value: Any = None
    max_value: Any = None
    text_encoding: str | None = None
    offset: int | None = None
    enum: EnumSpec | None = None
    set_choices: dict[str, int] | None = None
    members: list[_TypeDef] = field(default_factory=list)


class SchemaParser:
    """Turns the XML into MessageSpecs; every error names the element it comes from."""

    def __init__(self, root: ET.Element) -> None:
        if local_name(root.tag) != "messageSchema":
            raise SchemaError(f"root element is <{local_name(root.tag)}>, expected <messageSchema>")
        self.root = root
        schema_id = _int_attr(root, "id")
        if schema_id is None:
            raise SchemaError("<messageSchema> has no id")
        self.schema_id = schema_id
        self.version = _int_attr(root, "version", 0) or 0
        self.package = root.get("package", "")
        self.semantic_version = root.get("semanticVersion", "")
        byte_order = root.get("byteOrder", "littleEndian")
        if byte_order not in ("littleEndian", "bigEndian"):
            raise SchemaError(f"unknown byteOrder {byte_order!r}")
        self.order = "<" if byte_order == "littleEndian" else ">"
        self.header_type = root.get("headerType", "messageHeader")
        self.raw_types: dict[str, ET.Element] = {}
        for types in root.iter():
            if local_name(types.tag) != "types":
                continue
            for elem in types:
                if not _is_element(elem):
                    continue
                name = elem.get("name")
                if name is None:
                    raise SchemaError(f"<{local_name(elem.tag)}> in <types> has no name")
                self.raw_types[name] = elem
        self.types: dict[str, _TypeDef] = {}

    # ---- types ----

    def resolve(self, name: str, context: str) -> _TypeDef:
        if name in self.types:
            return self.types[name]
        if name in PRIMITIVES:
            td = self._primitive_type(name, ET.Element("type", name=name, primitiveType=name))
        elif name in self.raw_types:
            td = self._parse_type_elem(self.raw_types[name])
        else:
            raise SchemaError(f"{context}: unknown type {name!r}")
        self.types[name] = td
        return td

    def _parse_type_elem(self, elem: ET.Element) -> _TypeDef:
        kind = local_name(elem.tag)
        name = elem.get("name", "")
        if kind == "type":
            return self._primitive_type(name, elem)
        if kind == "enum":
            return self._enum_type(name, elem)
        if kind == "set":
            return self._set_type(name, elem)
        if kind == "composite":
            return self._composite_type(name, elem)
        if kind == "ref":
            inner = self.resolve(elem.get("type", ""), f"<ref name={name!r}>")
            td = _TypeDef(**{**inner.__dict__, "name": name, "elem": elem, "offset": _int_attr(elem, "offset")})
            return td
        raise SchemaError(f"unsupported type element <{kind} name={name!r}>")

    def _primitive_type(self, name: str, elem: ET.Element) -> _TypeDef:
        primitive = elem.get("primitiveType", "")
        if primitive not in PRIMITIVES:
            raise SchemaError(f"type {name!r}: unknown primitiveType {primitive!r}")
        p = PRIMITIVES[primitive]
        length = _int_attr(elem, "length", 1)
        assert length is not None
        presence = elem.get("presence", "required")
        if presence not in ("required", "optional", "constant"):
            raise SchemaError(f"type {name!r}: unknown presence {presence!r}")
        td = _TypeDef("type", name, elem, primitive=primitive, length=length, offset=_int_attr(elem, "offset"))
        encoding = elem.get("characterEncoding")
        if encoding:
            td.text_encoding = _python_encoding(encoding)
        elif primitive == "char":
            td.text_encoding = "ascii"
        td.optional = presence == "optional"
        null_text, min_text, max_text = elem.get("nullValue"), elem.get("minValue"), elem.get("maxValue")
        try:
            td.null_value = _parse_number(null_text, primitive) if null_text else p.null
            td.min_value = _parse_number(min_text, primitive) if min_text else p.min
            td.max_value = _parse_number(max_text, primitive) if max_text else p.max
        except ValueError as e:
            raise SchemaError(f"type {name!r}: bad numeric attribute ({e})") from None
        if presence == "constant":
            text = (elem.text or "").strip()
            value_ref = elem.get("valueRef")
            if value_ref:
                # A constant type may take its value from an enum's validValue (`valueRef="TimeUnit.nanosecond"`)
                # instead of its text, as a field may; the constant is then that value (a char: its character).
                value = self._value_ref(value_ref, f"type {name!r}")
                td.constant = chr(value) if primitive == "char" else value
            elif primitive == "char":
                td.constant = text
            else:
                try:
                    td.constant = _parse_number(text, primitive)
                except ValueError:
                    raise SchemaError(f"constant type {name!r} has non-numeric value {text!r}") from None
        return td

    def _enum_type(self, name: str, elem: ET.Element) -> _TypeDef:
        encoding = elem.get("encodingType", "")
        base = self.resolve(encoding, f"enum {name!r}")
        if base.kind != "type" or base.length != 1 or base.primitive in ("float", "double"):
            raise SchemaError(f"enum {name!r}: encodingType {encoding!r} is not an integer or char primitive")
        primitive = "uint8" if base.primitive == "char" else base.primitive
        values: dict[str, int] = {}
        for vv in elem:
            if not _is_element(vv) or local_name(vv.tag) != "validValue":
                continue
            vname = vv.get("name", "")
            text = (vv.text or "").strip()
            try:
                values[vname] = ord(text) if base.primitive == "char" else int(text)
            except (TypeError, ValueError):
                raise SchemaError(f"enum {name!r}: validValue {vname!r} has bad value {text!r}") from None
        null_text = elem.get("nullValue")
        null = int(null_text) if null_text else base.null_value
        # The functional Enum API returns a new IntEnum subclass; mypy models it only for `Name = IntEnum("Name", ...)`
        # with a literal name and types any other call as an IntEnum member.
        python_type = cast(type[IntEnum], IntEnum(name, values))
        spec = EnumSpec(name, primitive, dict(values), int(null), python_type)
        p = PRIMITIVES[primitive]
        return _TypeDef(
            "enum",
            name,
            elem,
            primitive=primitive,
            null_value=int(null),
            min_value=p.min,
            max_value=p.max,
            enum=spec,
            offset=_int_attr(elem, "offset"),
        )

    def _set_type(self, name: str, elem: ET.Element) -> _TypeDef:
        encoding = elem.get("encodingType", "")
        base = self.resolve(encoding, f"set {name!r}")
        if base.kind != "type" or base.primitive not in ("uint8", "uint16", "uint32", "uint64"):
            raise SchemaError(f"set {name!r}: encodingType {encoding!r} must be an unsigned integer")
        choices: dict[str, int] = {}
        for ch in elem:
            if _is_element(ch) and local_name(ch.tag) == "choice":
                choices[ch.get("name", "")] = int((ch.text or "0").strip())
        p = PRIMITIVES[base.primitive]
        return _TypeDef(
            "set",
            name,
            elem,
            primitive=base.primitive,
            null_value=0,
            min_value=0,
            max_value=(1 << (8 * p.size)) - 1,
            set_choices=choices,
            offset=_int_attr(elem, "offset"),
        )

    def _composite_type(self, name: str, elem: ET.Element) -> _TypeDef:
        td = _TypeDef("composite", name, elem, offset=_int_attr(elem, "offset"))
        for member in elem:
            if not _is_element(member):
                continue
            td.members.append(self._parse_type_elem(member))
        return td

    @staticmethod
    def wire_size(td: _TypeDef) -> int:
        if td.kind == "composite":
            cursor = 0
            for m in td.members:
                if m.offset is not None:
                    cursor = m.offset
                cursor += SchemaParser.wire_size(m)
            return cursor
        if td.constant is not None:
            return 0
        return PRIMITIVES[td.primitive].size * td.length

    # ---- header ----

    def header_layout(self) -> tuple[str, tuple[int, int, int, int], int]:
        """Struct format of the header (without byte order), indices of the 4 standard fields, and its size."""
        td = self.resolve(self.header_type, "message header")
        if td.kind != "composite":
            raise SchemaError(f"header type {self.header_type!r} is not a composite")
        fmt = []
        names = []
        cursor = 0
        for m in td.members:
            integer = (
                m.kind == "type"
                and m.length == 1
                and m.constant is None
                and m.primitive in ("uint8", "uint16", "uint32", "uint64")
            )
            if not integer and m.name in _HEADER_FIELDS:
                what = "a constant" if m.constant is not None else "not one"
                raise SchemaError(
                    f"header member {m.name!r} must be an unsigned integer primitive on the wire, is {what}"
                )
            if m.offset is not None:
                if m.offset < cursor:
                    raise SchemaError(f"header member {m.name!r} offset {m.offset} overlaps the previous member")
                if m.offset > cursor:
                    fmt.append(f"{m.offset - cursor}x")
                cursor = m.offset
            if not integer:
                # Another member of the header (a composite, set, enum, array, constant; SBE allows any): not read,
                # written as zeros, as the SBE project's generated encoders leave it unless the application sets it.
                size = self.wire_size(m)
                if size:
                    fmt.append(f"{size}x")
                cursor += size
                continue
            fmt.append(PRIMITIVES[m.primitive].code)
            names.append(m.name)
            cursor += PRIMITIVES[m.primitive].size
        missing = [n for n in _HEADER_FIELDS if n not in names]
        if missing:
            raise SchemaError(f"header type {self.header_type!r} lacks {', '.join(missing)}")
        block_length, template_id, schema_id, version = (names.index(n) for n in _HEADER_FIELDS)
        return "".join(fmt), (block_length, template_id, schema_id, version), cursor

    # ---- messages ----

    def messages(self) -> tuple[list[MessageSpec], dict[int, tuple[str, str]]]:
        """The schema's messages, and those refused (template id -> (name, reason)).

        A message using a construct this codec cannot represent is refused alone, so the rest of a large exchange
        schema stays usable; only if no message is left is the schema refused (with the first reason).
        """
        specs: list[MessageSpec] = []
        refused: dict[int, tuple[str, str]] = {}
        first: SchemaError | None = None
        for elem in self.root:
            if not (_is_element(elem) and local_name(elem.tag) == "message"):
                continue
            try:
                specs.append(self._message(elem))
            except SchemaError as e:
                template_id = _int_attr(elem, "id")
                if template_id is None:
                    raise
                first = first or e
                refused[template_id] = (elem.get("name") or "", str(e))
        if first is not None and not specs:
            raise first
        return specs, refused

    def _leaf_fields(
        self,
        td: _TypeDef,
        base_name: str,
        attr: str,
        field_id: int,
        offset: int,
        since: int,
        optional: bool,
        context: str,
        out: list[FieldSpec],
    ) -> None:
        if td.kind == "composite":
            cursor = offset
            for m in td.members:
                if m.offset is not None:
                    cursor = offset + m.offset
                self._leaf_fields(
                    m,
                    f"{base_name}.{m.name}",
                    f"{attr}_{snake_case(m.name)}",
                    field_id,
                    cursor,
                    since,
                    optional,
                    context,
                    out,
                )
                cursor += self.wire_size(m)
            return
        p = PRIMITIVES[td.primitive]
        length = td.length
        text = td.text_encoding if length != 1 or td.primitive == "char" else None
        if length < 1 and td.constant is None:
            raise SchemaError(f"{context}: field {base_name!r} has length {length}; only varData may be empty")
        null: Any
        default: Any
        if length != 1 and td.primitive not in ("char", "uint8", "int8"):
            # An array of numbers: `length` values of the primitive, decoded as a tuple.
            text = None
            fmt = f"{length}{p.code}"
            null = td.null_value
            default = td.null_value if optional or td.optional else 0
        elif length != 1 or td.primitive == "char":
            fmt = f"{length}s"
            null = "" if text else b""
            default = null
        else:
            fmt = p.code
            is_optional = optional or td.optional
            null = td.null_value
            default = td.null_value if is_optional else 0
        out.append(
            FieldSpec(
                name=base_name,
                attr=attr,
                id=field_id,
                type_name=td.name,
                primitive_type=td.primitive,
                offset=offset,
                size=0 if td.constant is not None else p.size * length,
                length=length,
                optional=optional or td.optional,
                null_value=null,
                default=default,
                min_value=td.min_value,
                max_value=td.max_value,
                since_version=since,
                struct_format=fmt,
                enum=td.enum,
                set_choices=td.set_choices,
                constant=td.constant,
                text_encoding=text,
            )
        )

    def _message(self, elem: ET.Element) -> MessageSpec:
        name = elem.get("name") or ""
        template_id = _int_attr(elem, "id")
        if not name or template_id is None:
            raise SchemaError(f"<message name={name!r}> needs a name and an id")
        ctx = f"message {name} (id {template_id})"
        fields, groups, var_fields, cursor = self._members(elem, ctx)
        return MessageSpec(
            name=name,
            template_id=template_id,
            block_length=self._block_length(elem, cursor, ctx),
            since_version=_int_attr(elem, "sinceVersion", 0) or 0,
            description=elem.get("description", ""),
            fields=tuple(fields),
            var_fields=tuple(var_fields),
            groups=tuple(groups),
        )

    @staticmethod
    def _block_length(elem: ET.Element, cursor: int, ctx: str) -> int:
        """The declared blockLength (SBE: 0 or absent means computed), never shorter than the fields."""
        block_length = _int_attr(elem, "blockLength", 0) or 0
        if block_length == 0:
            return cursor
        if block_length < cursor:
            raise SchemaError(f"{ctx}: blockLength {block_length} is shorter than its fields ({cursor} bytes)")
        return block_length

    def _members(self, elem: ET.Element, ctx: str) -> tuple[list[FieldSpec], list[GroupSpec], list[VarFieldSpec], int]:
        """Fixed fields, groups and var fields of a message or group, in SBE's order (fields, groups, data), and
        the end of the fixed fields. As in SBE's own parser, `offset="0"` is the same as no offset."""
        fields: list[FieldSpec] = []
        groups: list[GroupSpec] = []
        var_fields: list[VarFieldSpec] = []
        cursor = 0
        for child in elem:
            if not _is_element(child):
                continue
            kind = local_name(child.tag)
            fname = child.get("name") or ""
            fid = _int_attr(child, "id", 0) or 0
            since = _int_attr(child, "sinceVersion", 0) or 0
            if kind == "group":
                if var_fields:
                    raise SchemaError(f"{ctx}: group {fname!r} follows a data field")
                groups.append(self._group(child, ctx))
            elif kind == "field":
                if var_fields or groups:
                    raise SchemaError(f"{ctx}: fixed field {fname!r} follows a group or data field")
                td = self.resolve(child.get("type", ""), f"{ctx} field {fname!r}")
                presence = child.get("presence", "required")
                if presence == "constant":
                    value_ref = child.get("valueRef")
                    constant: Any = self._value_ref(value_ref, ctx) if value_ref else td.constant
                    if constant is None:
                        raise SchemaError(f"{ctx}: constant field {fname!r} has no value")
                    fields.append(
                        FieldSpec(
                            name=fname,
                            attr=snake_case(fname),
                            id=fid,
                            type_name=td.name,
                            primitive_type=td.primitive,
                            offset=cursor,
                            size=0,
                            length=1,
                            optional=False,
                            null_value=constant,
                            default=constant,
                            min_value=constant,
                            max_value=constant,
                            since_version=since,
                            struct_format="",
                            enum=td.enum,
                            constant=constant,
                        )
                    )
                    continue
                offset = _int_attr(child, "offset", 0) or 0
                if offset:
                    if offset < cursor:
                        raise SchemaError(
                            f"{ctx}: field {fname!r} offset {offset} overlaps the previous field (ends at {cursor})"
                        )
                    cursor = offset
                self._leaf_fields(td, fname, snake_case(fname), fid, cursor, since, presence == "optional", ctx, fields)
                cursor += self.wire_size(td)
            elif kind == "data":
                td = self.resolve(child.get("type", ""), f"{ctx} data {fname!r}")
                var_fields.append(self._var_field(td, fname, fid, since, ctx))
            else:
                raise SchemaError(f"{ctx}: unsupported element <{kind}>")
        attrs = [f.attr for f in fields] + [g.attr for g in groups] + [v.attr for v in var_fields]
        dupes = {a for a in attrs if attrs.count(a) > 1}
        if dupes:
            raise SchemaError(f"{ctx}: field names collide in snake_case: {sorted(dupes)}")
        reserved = _RESERVED_ATTRS.intersection(attrs)
        if reserved:
            raise SchemaError(f"{ctx}: field name(s) {sorted(reserved)} clash with Message methods")
        return fields, groups, var_fields, cursor

    def _group(self, elem: ET.Element, parent_ctx: str) -> GroupSpec:
        name = elem.get("name") or ""
        if not name:
            raise SchemaError(f"{parent_ctx}: <group> without a name")
        ctx = f"{parent_ctx} group {name!r}"
        dimension_type = elem.get("dimensionType", "groupSizeEncoding")
        dim = self.resolve(dimension_type, f"{ctx} dimensionType")
        if dim.kind != "composite":
            raise SchemaError(f"{ctx}: dimensionType {dimension_type!r} is not a composite")
        layout: dict[str, tuple[int, _TypeDef]] = {}
        cursor = 0
        for m in dim.members:
            if m.offset is not None:
                cursor = m.offset
            layout[m.name] = (cursor, m)
            cursor += self.wire_size(m)
        for member in ("blockLength", "numInGroup"):
            found = layout.get(member)
            if found is None or found[1].kind != "type" or found[1].length != 1 or found[1].constant is not None:
                raise SchemaError(f"{ctx}: dimensionType {dimension_type!r} needs a {member} member")
            if found[1].primitive not in ("uint8", "uint16", "uint32", "uint64"):
                raise SchemaError(
                    f"{ctx}: {member} of dimensionType {dimension_type!r} is {found[1].primitive}, "
                    "not an unsigned integer"
                )
        (length_offset, length_td), (count_offset, count_td) = layout["blockLength"], layout["numInGroup"]
        fields, groups, var_fields, end = self._members(elem, ctx)
        count_max = count_td.max_value if count_td.elem.get("maxValue") else PRIMITIVES[count_td.primitive].max
        return GroupSpec(
            name=name,
            attr=snake_case(name),
            id=_int_attr(elem, "id", 0) or 0,
            since_version=_int_attr(elem, "sinceVersion", 0) or 0,
            description=elem.get("description", ""),
            block_length=self._block_length(elem, end, ctx),
            dimension_type=dimension_type,
            dimension_size=self.wire_size(dim),
            block_length_primitive=length_td.primitive,
            block_length_offset=length_offset,
            count_primitive=count_td.primitive,
            count_offset=count_offset,
            max_count=int(count_max),
            fields=tuple(fields),
            groups=tuple(groups),
            var_fields=tuple(var_fields),
        )

    def _var_field(self, td: _TypeDef, fname: str, fid: int, since: int, ctx: str) -> VarFieldSpec:
        if td.kind != "composite":
            raise SchemaError(f"{ctx}: data field {fname!r} type {td.name!r} is not a composite")
        members = {m.name: m for m in td.members}
        length, data = members.get("length"), members.get("varData")
        if length is None or data is None or len(td.members) != 2 or td.members[0] is not length:
            raise SchemaError(f"{ctx}: data field {fname!r} type {td.name!r} must be (length, varData)")
        if length.primitive not in ("uint8", "uint16", "uint32"):
            raise SchemaError(f"{ctx}: data field {fname!r} length must be uint8/uint16/uint32")
        p = PRIMITIVES[length.primitive]
        declared_max = length.max_value if length.elem.get("maxValue") else min(p.max, DEFAULT_MAX_VAR_LENGTH)
        text = data.text_encoding
        return VarFieldSpec(
            name=fname,
            attr=snake_case(fname),
            id=fid,
            type_name=td.name,
            length_primitive=length.primitive,
            length_size=p.size,
            max_length=int(declared_max),
            text_encoding=text,
            since_version=since,
        )

    def _value_ref(self, ref: str, ctx: str) -> int:
        enum_name, _, value_name = ref.partition(".")
        td = self.resolve(enum_name, f"{ctx} valueRef {ref!r}")
        if td.enum is None or value_name not in td.enum.values:
            raise SchemaError(f"{ctx}: valueRef {ref!r} does not name an enum value")
        return td.enum.values[value_name]
