"""The one FFI module over the Aeron C API: cffi ABI-mode bindings to pyaeron's extension plus thin wrappers.

See docs/architecture.md ("aeron_archive_spark.archive.native") for the contract. Hot paths (block poll,
offer_block) move whole blocks through zero-copy memoryviews; everything else returns promptly or raises
NativeAeronError.

Import from this package; its modules are, lowest first: `ffi` (C declarations, result codes, errors), `callbacks`
(cffi trampolines), `handles` (the locked native-side owners of C pointers and their closed check), one module per
wrapped type (`subscription` with `Image`, `publications`, `counters`), `client` (AeronClient, which adds them all)
and `driver` (the embedded media driver).
"""

from ..constants import (
    COUNTER_MAX_KEY_LENGTH,
    COUNTER_MAX_LABEL_LENGTH,
    COUNTER_RECORD_ALLOCATED,
    COUNTER_RECORD_RECLAIMED,
    COUNTER_RECORD_UNUSED,
)
from .callbacks import BlockHandler, ControlledAction, FragmentHandler, HeaderValues
from .client import AeronClient, PendingExclusivePublication, PendingSubscription
from .counters import Counter, CounterInfo, CountersReader
from .driver import EmbeddedMediaDriver, default_driver_parent
from .ffi import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    PUBLICATION_CLOSED,
    PUBLICATION_ERROR,
    NativeAeronError,
    ffi,
    get_lib,
    version,
)
from .fork import abandon_after_fork
from .publications import ExclusivePublication, Publication
from .subscription import Image, ImageHandler, PendingDestination, Subscription
from .term_appender import TermAppender

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
    "PendingDestination",
    "PendingExclusivePublication",
    "PendingSubscription",
    "Publication",
    "Subscription",
    "TermAppender",
    "abandon_after_fork",
    "default_driver_parent",
    "ffi",
    "get_lib",
    "version",
]
