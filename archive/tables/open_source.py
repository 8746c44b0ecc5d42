"""Which `RecordingSource` plans a read: the one for where the options say the recordings are."""

from __future__ import annotations

from aeron_archive_spark.archive.client.pool import ConnectionPool
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.ranges import ArchiveReplicas, SegmentFiles
from aeron_archive_spark.archive.tables.recording_source import (
    DiskRecordingSource,
    RecordingSource,
    RemoteRecordingSource,
)
from aeron_archive_spark.archive.tables.replica_source import ReplicatedRecordingSource


def open_recording_source(options: SourceOptions, pool: ConnectionPool | None = None) -> RecordingSource:
    """The source for `archiveDir`, the running archive, or archives holding copies (`controlChannels`); `pool`
    defaults to `connection_pool()`."""
    if isinstance(options.location, SegmentFiles):
        return DiskRecordingSource(options, pool)
    if isinstance(options.location, ArchiveReplicas):
        return ReplicatedRecordingSource(options, pool)
    return RemoteRecordingSource(options, pool)
