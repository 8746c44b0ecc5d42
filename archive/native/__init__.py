"""The one FFI module over the Aeron C API: cffi ABI-mode bindings to pyaeron's extension plus thin wrappers.

See docs/architecture.md ("aeron_archive_spark.archive.native") for the contract. Hot paths (block poll, offer_block) move whole
blocks through zero-copy memoryviews; everything else returns promptly or raises NativeAeronError.
"""

from .aeron import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    PUBLICATION_CLOSED,
    PUBLICATION_ERROR,
    AeronClient,
    BlockHandler,
    ControlledAction,
    Counter,
    CounterInfo,
    CountersReader,
    ExclusivePublication,
    FragmentHandler,
    HeaderValues,
    Image,
    ImageHandler,
    Publication,
    Subscription,
)
from .driver import EmbeddedMediaDriver
from .ffi import (
    COUNTER_MAX_KEY_LENGTH,
    COUNTER_MAX_LABEL_LENGTH,
    COUNTER_RECORD_ALLOCATED,
    COUNTER_RECORD_RECLAIMED,
    COUNTER_RECORD_UNUSED,
    NativeAeronError,
    ffi,
    get_lib,
    version,
)

__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "COUNTER_MAX_KEY_LENGTH",
    "COUNTER_MAX_LABEL_LENGTH",
    "COUNTER_RECORD_ALLOCATED",
    "COUNTER_RECORD_RECLAIMED",
    "COUNTER_RECORD_UNUSED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "PUBLICATION_CLOSED",
    "PUBLICATION_ERROR",
    "AeronClient",
    "BlockHandler",
    "ControlledAction",
    "Counter",
    "CounterInfo",
    "CountersReader",
    "EmbeddedMediaDriver",
    "ExclusivePublication",
    "FragmentHandler",
    "HeaderValues",
    "Image",
    "ImageHandler",
    "NativeAeronError",
    "Publication",
    "Subscription",
    "ffi",
    "get_lib",
    "version",
]
