"""The Aeron Archive control protocol's codec: schema 101 from `aeron-archive-codecs.xml`, decoding into `messages`.

Apart from `codec` (any SBE schema) and `messages` (generated from this one), so that neither imports the other's
importer: `messages` needs `codec`'s `Message`, and the archive's codec needs both.
"""

from __future__ import annotations

import functools
from importlib import resources

from .codec import SbeCodec
from .messages import MESSAGE_CLASSES

ARCHIVE_SCHEMA_FILE = "aeron-archive-codecs.xml"


@functools.cache
def load_archive_codec() -> SbeCodec:
    """The Aeron Archive control protocol codec (schema 101), parsed once per process; it decodes into the classes
    of `messages` (generated from the same schema)."""
    return SbeCodec.from_xml(_schema_text(), MESSAGE_CLASSES)


def load_archive_codec_without_classes() -> SbeCodec:
    """The same schema with classes made at run time: what `generate` declares `messages` from."""
    return SbeCodec.from_xml(_schema_text())


def _schema_text() -> bytes:
    return resources.files(__package__).joinpath(ARCHIVE_SCHEMA_FILE).read_bytes()
