"""The archive client: `AeronArchive` and the pieces it is built from."""

from aeron_archive_spark.archive.client.aeron_archive import (
    AeronArchive,
    RecordingSignalEvent,
    RecordingSubscriptionDescriptor,
)
from aeron_archive_spark.archive.client.connection import (
    ConnectionOptions,
    default_aeron_dir,
)

__all__ = [
    "AeronArchive",
    "ConnectionOptions",
    "RecordingSignalEvent",
    "RecordingSubscriptionDescriptor",
    "default_aeron_dir",
]
