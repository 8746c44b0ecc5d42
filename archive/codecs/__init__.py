"""Aeron Archive control protocol (SBE schema 101, version 14) and a general schema-driven SBE codec.

`CODEC` is the archive codec, built once at import from `aeron-archive-codecs.xml`; template ids are in
`aeron_archive_spark.archive.codecs.templates`.
"""

from __future__ import annotations

from . import templates
from .archive_codec import load_archive_codec
from .codec import (
    CodecError,
    EnumSpec,
    FieldSpec,
    GroupEntry,
    GroupSpec,
    Message,
    MessageHeader,
    MessageSpec,
    SbeCodec,
    SchemaError,
    VarFieldSpec,
    snake_case,
)

CODEC: SbeCodec = load_archive_codec()

__all__ = [
    "CODEC",
    "CodecError",
    "EnumSpec",
    "FieldSpec",
    "GroupEntry",
    "GroupSpec",
    "Message",
    "MessageHeader",
    "MessageSpec",
    "SbeCodec",
    "SchemaError",
    "VarFieldSpec",
    "load_archive_codec",
    "snake_case",
    "templates",
]
