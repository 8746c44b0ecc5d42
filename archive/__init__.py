"""A Python Aeron Archive: record Aeron streams to disk, replay, extend, truncate and query them.

Byte-compatible with Aeron Archive 1.52/1.53 directories (segment files, `archive.catalog`) and its SBE
control protocol (schema id 101). The client is imported lazily so that `import archive` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from archive.constants import SourceLocation
from archive.descriptor import RecordingDescriptor
from archive.exceptions import ArchiveError, ErrorCode

if TYPE_CHECKING:
    from archive.client.aeron_archive import AeronArchive
    from archive.server.archive import Archive
    from archive.server.context import ArchiveContext

__all__ = ["AeronArchive", "Archive", "ArchiveContext", "ArchiveError", "ErrorCode", "RecordingDescriptor",
           "SourceLocation"]

_LAZY = {
    "AeronArchive": "archive.client.aeron_archive",
    "Archive": "archive.server.archive",
    "ArchiveContext": "archive.server.context",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'archive' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(module), name)
