"""The generated cffi module (`archive/native/aeron_cdefs_abi.py`) against the declarations it is made from.

`ffi` loads the generated module so that no process pays pycparser at start; if someone changes a declaration in
`aeron_cdefs.py` and forgets to regenerate, these tests name what differs.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from aeron_archive_spark.archive.native import aeron_cdefs

ffi_module = importlib.import_module("aeron_archive_spark.archive.native.ffi")


@pytest.fixture(scope="module")
def parsed() -> Any:
    return aeron_cdefs.parsed()


@pytest.fixture(scope="module")
def generated() -> Any:
    module = importlib.import_module(f"aeron_archive_spark.archive.native.{aeron_cdefs.ABI_MODULE}")
    return module.ffi


def _key(ffi: Any, ctype: Any) -> object:
    """A ctype as a comparable value. The two FFIs name a struct differently (the parsed one by a typedef, the
    generated one by its tag), so structs are named by their tag, found by identity among the declared structs."""
    kind = ctype.kind
    if kind == "pointer":
        return ("*", _key(ffi, ctype.item))
    if kind == "array":
        return ("[]", ctype.length, _key(ffi, ctype.item))
    if kind == "function":
        return ("fn", _key(ffi, ctype.result), tuple(_key(ffi, a) for a in ctype.args), ctype.ellipsis)
    if kind == "struct":
        tags = {id(ffi.typeof(f"struct {tag}")): tag for tag in ffi.list_types()[1]}
        return ("struct", tags.get(id(ctype), ctype.cname))
    if kind == "enum":
        return ("enum", tuple(sorted(ctype.elements.items())))
    return ctype.cname


def _layout(ffi: Any, name: str) -> object:
    """A declared type: its kind, and for a struct whose fields are declared, its size and each field's offset."""
    ctype = ffi.typeof(name)
    while ctype.kind == "pointer":
        ctype = ctype.item
    if ctype.kind == "struct":
        try:
            size = ffi.sizeof(ctype)  # first: the generated module completes a struct's fields lazily, on use
        except Exception:  # opaque, declared and never defined (ValueError parsed, ffi.error generated)
            return ("opaque", _key(ffi, ctype))
        return (size, [(f, _key(ffi, v.type), v.offset) for f, v in ctype.fields])
    return _key(ffi, ctype)


def test_the_process_uses_the_generated_module(generated: Any) -> None:
    assert ffi_module.ffi is generated


def test_the_generated_module_declares_the_same_types_with_the_same_layouts(parsed: Any, generated: Any) -> None:
    assert generated.list_types() == parsed.list_types()
    typedefs, structs, unions = parsed.list_types()
    for name in typedefs:
        assert _layout(generated, name) == _layout(parsed, name), name
    for name in structs:
        assert _layout(generated, f"struct {name}") == _layout(parsed, f"struct {name}"), name
    assert not unions


def test_the_generated_module_declares_the_same_functions_and_constants(parsed: Any, generated: Any) -> None:
    path = ffi_module.extension_path()
    lib_parsed, lib_generated = parsed.dlopen(path), generated.dlopen(path)
    assert dir(lib_generated) == dir(lib_parsed)
    for name in dir(lib_parsed):
        mine, theirs = getattr(lib_parsed, name), getattr(lib_generated, name)
        if isinstance(mine, int):
            assert theirs == mine, name
        else:
            assert _key(generated, generated.typeof(theirs)) == _key(parsed, parsed.typeof(mine)), name


def test_header_values_keep_aeronc_pack_4_layout(generated: Any) -> None:
    """aeronc.h declares these under `#pragma pack(4)`: a `size_t` after the 32-byte frame and an int32 sits at 36."""
    assert generated.sizeof("aeron_header_values_frame_t") == 32
    assert generated.offsetof("aeron_header_values_frame_t", "reserved_value") == 24
    assert generated.offsetof("aeron_header_values_t", "initial_term_id") == 32
    assert generated.offsetof("aeron_header_values_t", "position_bits_to_shift") == 36
    assert generated.sizeof("aeron_header_values_t") == 44


def test_without_the_generated_module_the_declarations_are_parsed(parsed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree without the generated module (or one written by a cffi this one cannot read) still works."""
    real_import = importlib.import_module

    def failing_import(name: str, package: str | None = None) -> Any:
        if name.endswith(aeron_cdefs.ABI_MODULE):
            raise ImportError(f"no {name}")
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", failing_import)
    fallback = ffi_module._load_ffi()
    assert fallback is not ffi_module.ffi
    assert fallback.list_types() == parsed.list_types()
    assert fallback.offsetof("aeron_header_values_t", "position_bits_to_shift") == 36
