"""A Python Aeron Archive: record Aeron streams to disk, replay, extend, truncate and query them.

Byte-compatible with Aeron Archive 1.52/1.53 directories (segment files, `archive.catalog`) and its SBE
control protocol (schema id 101). The client is imported lazily so that `import aeron_archive_spark.archive`
stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.constants import SourceLocation
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

__all__ = [
    "AeronArchive",
    "Archive",
    "ArchiveContext",
    "ArchiveError",
    "ErrorCode",
    "RecordingDescriptor",
    "SourceLocation",
]

_LAZY = {
    "AeronArchive": "aeron_archive_spark.archive.client.aeron_archive",
    "Archive": "aeron_archive_spark.archive.server.archive",
    "ArchiveContext": "aeron_archive_spark.archive.server.context",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aeron_archive_spark.archive' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
