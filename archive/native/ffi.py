"""cffi ABI-mode declarations for the Aeron C client API (aeronc.h, Aeron 1.53) exported by pyaeron's extension.

pyaeron's Python API has no block poll, offer_block or counters, but its extension module links the whole Aeron C
client and exports every `aeron_*` symbol. We `dlopen` that already-loaded module (so there is exactly one copy of
the C client in the process) and declare only what `aeron_archive_spark.archive.native` uses: the declarations are
in `aeron_cdefs`, and `ffi` comes ready-parsed from the module generated from them.

`ffi` is created at import; `lib` is opened lazily by `get_lib()` so that importing this module never fails just
because pyaeron is missing.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

from . import aeron_cdefs

# Aeron publication result codes (aeronc.h AERON_PUBLICATION_*).
NOT_CONNECTED = -1
BACK_PRESSURED = -2
ADMIN_ACTION = -3
PUBLICATION_CLOSED = -4
MAX_POSITION_EXCEEDED = -5
PUBLICATION_ERROR = -6

# Counter record states and key / label sizes (aeronc.h AERON_COUNTER_*) are in archive/constants.py, shared with
# recording_pos.

# aeron_controlled_fragment_handler_action_t.
ACTION_ABORT = 1
ACTION_BREAK = 2
ACTION_COMMIT = 3
ACTION_CONTINUE = 4


def _load_ffi() -> Any:
    """The generated ABI module's FFI (see aeron_cdefs), or the declarations parsed now if it cannot be loaded
    (missing from a source tree, or written by a cffi this one cannot read)."""
    try:
        module = importlib.import_module(f"{__package__}.{aeron_cdefs.ABI_MODULE}")
        return module.ffi
    except Exception as ex:
        logging.getLogger(__name__).debug("parsing the Aeron C declarations: %s", ex)
        return aeron_cdefs.parsed()


ffi: Any = _load_ffi()

_lib: Any = None
_lib_lock = threading.Lock()


class NativeAeronError(Exception):
    """An Aeron C API call failed; carries `aeron_errcode()` and the `aeron_errmsg()` text of the failing thread."""

    def __init__(self, message: str, errcode: int = 0) -> None:
        super().__init__(message)
        self.errcode = errcode


def extension_path() -> str:
    """Path of pyaeron's extension module, the shared object whose exports we bind to."""
    import pyaeron._pyaeron as ext  # imported first so the .so (and its C client) is loaded exactly once

    return str(ext.__file__)


class _Symbols:
    """The opened library's functions and constants as plain attributes.

    A generated module's `lib` looks each name up through its own `__getattr__` (~100 ns against ~50 ns for an
    attribute, measured); the hot loops call through `lib.<name>` millions of times, so every symbol is read once
    here. The library object is kept, since its functions are only valid while it stays open.
    """

    def __init__(self, library: Any) -> None:
        self._library = library
        for name in dir(library):
            setattr(self, name, getattr(library, name))


def get_lib() -> Any:
    """Open (once) and return the cffi `lib` over pyaeron's extension module."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _Symbols(ffi.dlopen(extension_path()))
    return _lib


def last_error(context: str) -> NativeAeronError:
    """Build a NativeAeronError for the calling thread's last Aeron error, prefixed with what we were doing.

    Must be called on the thread that made the failing call: aeron_errmsg()/aeron_errcode() are thread-local.
    """
    lib = get_lib()
    code = int(lib.aeron_errcode())
    raw = lib.aeron_errmsg()
    detail = ffi.string(raw).decode("utf-8", "replace").strip() if raw != ffi.NULL else ""
    message = f"{context}: {detail}" if detail else f"{context}: (no Aeron error message)"
    return NativeAeronError(f"{message} (errcode={code})", code)


def version() -> str:
    """Full version string of the Aeron C client we are bound to."""
    return str(ffi.string(get_lib().aeron_version_full()).decode())


def __getattr__(name: str) -> Any:
    """Module attribute `lib` opens the library on first access (PEP 562), keeping `from .ffi import lib` lazy-safe."""
    if name == "lib":
        return get_lib()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
