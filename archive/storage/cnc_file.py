"""What the archive's tools read from a media driver's `cnc.dat` (Aeron's `CncFileDescriptor`, CnC version 0.2.x):
its file page size (the mark file's length is aligned to it, as Java's archive does) and its distinct error log
(`ArchiveTool errors` prints it after the archive's). Read with plain file reads: nothing is mapped or written.

Metadata at the start of the file (ints and longs, little-endian), then the buffers one after the other from
offset 128: to-driver, to-clients, counters metadata, counters values, error log.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from aeron_archive_spark.archive.storage.error_log import ErrorObservation, read_error_log

CNC_FILE = "cnc.dat"
META_DATA_LENGTH = 128
CNC_MAJOR_VERSION = 0
_METADATA = struct.Struct("<iiiiiiqqqi")  # version, 5 buffer lengths, liveness timeout, start, pid, page size


@dataclass(frozen=True)
class CncMetadata:
    version: int
    to_driver_buffer_length: int
    to_clients_buffer_length: int
    counters_metadata_buffer_length: int
    counters_values_buffer_length: int
    error_log_buffer_length: int
    client_liveness_timeout_ns: int
    start_timestamp: int
    pid: int
    file_page_size: int

    @property
    def error_log_offset(self) -> int:
        return (
            META_DATA_LENGTH
            + self.to_driver_buffer_length
            + self.to_clients_buffer_length
            + self.counters_metadata_buffer_length
            + self.counters_values_buffer_length
        )


class CncFileError(ValueError):
    """cnc.dat is missing, not ready or of another major version; the text names the file."""


def read_cnc_metadata(aeron_dir: str) -> CncMetadata:
    path = os.path.join(aeron_dir, CNC_FILE)
    try:
        with open(path, "rb") as f:
            head = f.read(_METADATA.size)
    except OSError as ex:
        raise CncFileError(f"cannot read {path}: {ex.strerror}") from None
    if len(head) < _METADATA.size:
        raise CncFileError(f"{path} is {len(head)} bytes: too short for the CnC metadata")
    metadata = CncMetadata(*_METADATA.unpack(head))
    if metadata.version == 0:
        raise CncFileError(f"{path} is not ready (version 0: its driver is starting)")
    if metadata.version >> 16 != CNC_MAJOR_VERSION:
        raise CncFileError(f"{path} has CnC major version {metadata.version >> 16}, not {CNC_MAJOR_VERSION}")
    return metadata


def driver_file_page_size(aeron_dir: str) -> int | None:
    """The page size the driver in `aeron_dir` aligns its files to, or None where its cnc.dat cannot be read."""
    try:
        size = read_cnc_metadata(aeron_dir).file_page_size
    except CncFileError:
        return None
    return size if size > 0 else None


def driver_errors(aeron_dir: str) -> list[ErrorObservation]:
    """The driver's distinct error log; CncFileError names what is missing."""
    metadata = read_cnc_metadata(aeron_dir)
    path = os.path.join(aeron_dir, CNC_FILE)
    with open(path, "rb") as f:
        f.seek(metadata.error_log_offset)
        buffer = f.read(metadata.error_log_buffer_length)
    return read_error_log(buffer)
