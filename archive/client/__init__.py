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
from aeron_archive_spark.archive.client.replay_merge import ReplayMerge
from aeron_archive_spark.archive.client.replication_params import ReplicationParams

__all__ = [
    "AeronArchive",
    "ConnectionOptions",
    "RecordingSignalEvent",
    "RecordingSubscriptionDescriptor",
    "ReplayMerge",
    "ReplicationParams",
    "default_aeron_dir",
]
