"""On-disk format of the archive: frames, segment files, the catalog, record checksums, writer, reader, verify.

Nothing here needs Aeron: it is plain files, `struct`, `mmap` and numpy, so it is testable on its own and usable by
offline tools (CLI, Spark connector) against a directory written by this archive or by Aeron's Java archive.
"""

from __future__ import annotations

from aeron_archive_spark.archive.storage.catalog import Catalog, CatalogEntry, CatalogIndex, RecoveredRecording
from aeron_archive_spark.archive.storage.checksums import Checksum, Crc32, Crc32c, checksum_for_name
from aeron_archive_spark.archive.storage.frames import FrameScan, ScanStop, scan_frames
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.segments import (
    list_segment_files,
    parse_segment_file_name,
    segment_file_base_position,
    segment_file_name,
    segment_files,
    truncate_segment_files,
)
from aeron_archive_spark.archive.storage.verify import VerifyResult, verify_archive, verify_recording

__all__ = [
    "Catalog",
    "CatalogEntry",
    "CatalogIndex",
    "Checksum",
    "Crc32",
    "Crc32c",
    "FrameScan",
    "RecordingReader",
    "RecordingWriter",
    "RecoveredRecording",
    "ScanStop",
    "VerifyResult",
    "checksum_for_name",
    "list_segment_files",
    "parse_segment_file_name",
    "scan_frames",
    "segment_file_base_position",
    "segment_file_name",
    "segment_files",
    "truncate_segment_files",
    "verify_archive",
    "verify_recording",
]
