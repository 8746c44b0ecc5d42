"""`archive-mark.dat`: the file that marks an archive directory as held by a running archive (Java's
`ArchiveMarkFile` over Agrona's `MarkFile`, Aeron 1.53), its format, reading it offline, and holding it.

Layout (little-endian), as Java writes it:

    0     SBE message header: blockLength=128, templateId=200, schemaId=100, version=2
    8     MarkFileHeader (schema 100, `aeron-archive-mark-codecs.xml`), 128 bytes:
            +0 version int32 (semantic version 3.1.0, written last: 0 while the archive starts)
            +8 activityTimestamp int64 (epoch ms; the conductor writes it every second; -1 once closed)
            +16 startTimestamp, +24 pid int64, +32 controlStreamId, +36 localControlStreamId,
            +40 eventsStreamId int32, +44 headerLength int32 (8192), +48 errorBufferLength int32, +56 archiveId int64
    136   var data, each a uint32 length then US-ASCII: controlChannel, localControlChannel, eventsChannel,
          aeronDirectory
    8192  the error log (Agrona's DistinctErrorLog, `storage.error_log`), errorBufferLength bytes (1 MiB)
          file length: 8192 + errorBufferLength aligned to the media driver's file page size (4 KiB)

A file from before the message header (Aeron < 1.44, "legacy") has the header at offset 0; it is read and, on
start, replaced as Java does. Liveness is Java's rule: an archive holds the directory while its activity timestamp
is less than 10 s old (`LIVENESS_TIMEOUT_MS`); a start over a stale file takes it over, saving the errors it held to
`archive-<time>-error.log` beside it first, and marks it "activation in progress" (timestamp Long.MAX_VALUE) until
ready. A clean close leaves the file with timestamp -1.

On top of Java's rule (see `ArchiveMarkFile.acquire` and docs/compatibility.md): an exclusive `flock` held for the
archive's life (two of ours starting at the same instant cannot both win; the kernel drops it when the process
dies, so it never keeps a dead holder's directory), and a record of the holding process past Java's header
(`OWNER_RECORD_OFFSET`, inside the 8 KiB Java leaves unused) that lets a restart on the same host take over at once
from one of ours proven dead (a kill -9), instead of waiting out the 10 s.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import mmap
import os
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from datetime import datetime

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import compose_semantic_version, semantic_version_string
from aeron_archive_spark.archive.storage.error_log import (
    DistinctErrorLog,
    ErrorObservation,
    exception_text,
    format_error_log,
    read_error_log,
)

log = logging.getLogger(__name__)

if sys.byteorder != "little":  # Aeron's files are little-endian; the atomic stores below are native
    raise ImportError("archive-mark.dat is little-endian: this module needs a little-endian machine")

FILENAME = "archive-mark.dat"
LINK_FILENAME = "archive-mark.lnk"
ERROR_FILE_PREFIX = "archive"

MAJOR_VERSION = 3
MINOR_VERSION = 1
PATCH_VERSION = 0
SEMANTIC_VERSION = compose_semantic_version(MAJOR_VERSION, MINOR_VERSION, PATCH_VERSION)
HEADER_LENGTH = 8 * 1024
ERROR_BUFFER_LENGTH_DEFAULT = 1024 * 1024
FILE_PAGE_SIZE_DEFAULT = 4096
UPDATE_INTERVAL_MS = 1000  # Java's MARK_FILE_UPDATE_INTERVAL_MS
LIVENESS_TIMEOUT_MS = 10 * UPDATE_INTERVAL_MS  # Java's LIVENESS_TIMEOUT_MS
ACTIVATION_IN_PROGRESS_TIMESTAMP = (1 << 63) - 1  # Agrona's MarkFile.ACTIVATION_IN_PROGRESS_TIMESTAMP
NULL_VALUE = -1

# Schema 100 (aeron-archive-mark-codecs.xml); tests check these against the XML.
SCHEMA_ID = 100
SCHEMA_VERSION = 2
TEMPLATE_ID = 200
BLOCK_LENGTH = 128
MESSAGE_HEADER_LENGTH = 8
FIELD_OFFSETS = {
    "version": 0,
    "activityTimestamp": 8,
    "startTimestamp": 16,
    "pid": 24,
    "controlStreamId": 32,
    "localControlStreamId": 36,
    "eventsStreamId": 40,
    "headerLength": 44,
    "errorBufferLength": 48,
    "archiveId": 56,
}
VAR_DATA_FIELDS = ("controlChannel", "localControlChannel", "eventsChannel", "aeronDirectory")
VERSION_OFFSET = MESSAGE_HEADER_LENGTH + FIELD_OFFSETS["version"]
ACTIVITY_TIMESTAMP_OFFSET = MESSAGE_HEADER_LENGTH + FIELD_OFFSETS["activityTimestamp"]

_MESSAGE_HEADER = struct.Struct("<HHHH")
_FIXED_PADDED = struct.Struct("<i4xqqqiiiii4xq")  # version .. archiveId: 64 bytes, padding at 4 and 52
_VAR_LENGTH = struct.Struct("<I")

# The holder's record (ours, beyond Java): in the header's unused space, bound to the header's pid and start time,
# so a Java archive that takes the file over (rewriting those) leaves a record that no longer counts.
OWNER_RECORD_OFFSET = HEADER_LENGTH - 64
_OWNER_MAGIC = b"AAS\x00MRK1"
_OWNER = struct.Struct("<8sqqqq16sq")  # magic, pid, process start (ticks), pid ns dev, pid ns inode, boot id, start


class MarkFileError(ValueError):
    """A mark file that cannot be read: missing, short, torn, or of another major version; the text names it."""


class MarkFileActiveError(ArchiveError):
    """Another archive holds the directory (Java's "active mark file detected")."""

    def __str__(self) -> str:  # a start's refusal, not a control response: no error code to show
        return self.message


@dataclass(frozen=True)
class MarkFileHeader:
    """The header of an archive's mark file, with Java's field names in `to_json_dict`."""

    version: int
    activity_timestamp: int
    start_timestamp: int
    pid: int
    control_stream_id: int
    local_control_stream_id: int
    events_stream_id: int
    header_length: int
    error_buffer_length: int
    archive_id: int
    control_channel: str = ""
    local_control_channel: str = ""
    events_channel: str = ""
    aeron_directory: str = ""
    # Where the header starts in the file: 8 (after the message header), or 0 in a legacy file.
    header_offset: int = MESSAGE_HEADER_LENGTH
    acting_version: int = SCHEMA_VERSION
    acting_block_length: int = BLOCK_LENGTH

    @property
    def version_text(self) -> str:
        return semantic_version_string(self.version)

    @property
    def is_ready(self) -> bool:
        """Version written (Java's signalReady); 0 while the archive that created it is still starting."""
        return self.version != 0

    def to_json_dict(self) -> dict[str, object]:
        names = {
            "activity_timestamp": "activityTimestamp",
            "start_timestamp": "startTimestamp",
            "control_stream_id": "controlStreamId",
            "local_control_stream_id": "localControlStreamId",
            "events_stream_id": "eventsStreamId",
            "header_length": "headerLength",
            "error_buffer_length": "errorBufferLength",
            "archive_id": "archiveId",
            "control_channel": "controlChannel",
            "local_control_channel": "localControlChannel",
            "events_channel": "eventsChannel",
            "aeron_directory": "aeronDirectory",
            "header_offset": "headerOffset",
            "acting_version": "schemaVersion",
            "acting_block_length": "blockLength",
        }
        out: dict[str, object] = {names.get(k, k): v for k, v in asdict(self).items()}
        out["versionText"] = self.version_text
        return out

    def java_string(self) -> str:
        """As Java's generated `MarkFileHeaderDecoder.toString()` (what `ArchiveTool describe` prints)."""
        version = (
            str(SCHEMA_VERSION) if self.acting_version == SCHEMA_VERSION else f"{self.acting_version}/{SCHEMA_VERSION}"
        )
        return (
            f"[MarkFileHeader](sbeTemplateId={TEMPLATE_ID}|sbeSchemaId={SCHEMA_ID}|sbeSchemaVersion={version}|"
            f"sbeBlockLength={self.acting_block_length}):version={self.version}|"
            f"activityTimestamp={self.activity_timestamp}|startTimestamp={self.start_timestamp}|pid={self.pid}|"
            f"controlStreamId={self.control_stream_id}|localControlStreamId={self.local_control_stream_id}|"
            f"eventsStreamId={self.events_stream_id}|headerLength={self.header_length}|"
            f"errorBufferLength={self.error_buffer_length}|archiveId={self.archive_id}|"
            f"controlChannel='{self.control_channel}'|localControlChannel='{self.local_control_channel}'|"
            f"eventsChannel='{self.events_channel}'|aeronDirectory='{self.aeron_directory}'"
        )


@dataclass(frozen=True)
class MarkFileContents:
    """An archive's mark file read offline: the header and the errors its archive recorded."""

    path: str
    file_length: int
    header: MarkFileHeader
    errors: list[ErrorObservation] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "fileLength": self.file_length,
            "header": self.header.to_json_dict(),
            "errors": [e.to_json_dict() for e in self.errors],
        }


# -- reading ----------------------------------------------------------------------------------------------------------


def header_offset(buffer: bytes | bytearray | memoryview) -> int:
    """8 where the file starts with schema 100's message header for template 200 (Aeron >= 1.44), else 0."""
    if len(buffer) < MESSAGE_HEADER_LENGTH:
        return 0
    _, template_id, schema_id, _ = _MESSAGE_HEADER.unpack_from(buffer, 0)
    return MESSAGE_HEADER_LENGTH if template_id == TEMPLATE_ID and schema_id == SCHEMA_ID else 0


def decode_header(
    buffer: bytes | bytearray | memoryview, where: str = FILENAME, with_strings: bool = True
) -> MarkFileHeader:
    """The header in `buffer` (the file from offset 0). MarkFileError names `where` if it is short or torn.

    Fields a file's schema version predates read as SBE's null values, as Java's decoder gives them: a legacy file
    (no message header) acts as version 1 when it has a headerLength, else 0; archiveId is since version 2."""
    offset = header_offset(buffer)
    if offset:
        block_length, _, _, acting_version = _MESSAGE_HEADER.unpack_from(buffer, 0)
    else:
        block_length, acting_version = BLOCK_LENGTH, 0
    if len(buffer) < offset + _FIXED_PADDED.size:
        raise MarkFileError(
            f"{where} is {len(buffer)} bytes: too short for the mark file header ({offset + _FIXED_PADDED.size})"
        )
    values = list(_FIXED_PADDED.unpack_from(buffer, offset))
    if not offset:
        acting_version = 1 if values[7] > 0 else 0
    if acting_version < 1:
        values[7] = values[8] = 0  # headerLength, errorBufferLength: length_t's null value
    if acting_version < 2:
        values[9] = NULL_VALUE  # archiveId_t's null value
    strings = ["", "", "", ""]
    if with_strings:
        cursor = offset + block_length
        limit = len(buffer) if values[7] <= 0 else min(len(buffer), values[7])
        for i, name in enumerate(VAR_DATA_FIELDS):
            if cursor + _VAR_LENGTH.size > limit:
                raise MarkFileError(f"{where}: the header is torn at {name} (offset {cursor}, limit {limit})")
            (length,) = _VAR_LENGTH.unpack_from(buffer, cursor)
            cursor += _VAR_LENGTH.size
            if cursor + length > limit:
                raise MarkFileError(f"{where}: the header is torn: {name} of {length} bytes at {cursor} passes {limit}")
            strings[i] = bytes(buffer[cursor : cursor + length]).decode("ascii", "replace")
            cursor += length
    version, activity, start, pid, control_id, local_id, events_id, header_length, error_length, archive_id = values
    control, local, events, aeron_dir = strings
    return MarkFileHeader(
        version, activity, start, pid, control_id, local_id, events_id, header_length, error_length, archive_id,
        control, local, events, aeron_dir, header_offset=offset, acting_version=acting_version,
        acting_block_length=block_length,
    )  # fmt: skip


def resolve_mark_file_dir(archive_dir: str) -> str:
    """Where the directory's mark file is: the folder `archive-mark.lnk` names (Java's markFileDir elsewhere),
    else the archive directory itself (ArchiveTool's `resolveMarkFileDir`)."""
    link = os.path.join(archive_dir, LINK_FILENAME)
    try:
        with open(link, "rb") as f:
            return f.read().decode("ascii").strip()
    except FileNotFoundError:
        return archive_dir


def mark_file_path(archive_dir: str) -> str:
    return os.path.join(resolve_mark_file_dir(archive_dir), FILENAME)


def read_mark_file(archive_dir: str, wait_s: float = 0.0) -> MarkFileContents:
    """The mark file of `archive_dir` (through its link file if any), read without mapping or writing it.

    With `wait_s`, waits that long for an archive that is creating it to write its version and a timestamp, as
    ArchiveTool does (5 s); a file still not ready then is read as it is. MarkFileError says what is wrong."""
    path = mark_file_path(archive_dir)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise MarkFileError(f"no {FILENAME} in {os.path.dirname(path)}: no archive has run there") from None
        except OSError as ex:
            raise MarkFileError(f"cannot read {path}: {ex.strerror}") from None
        header = decode_header(data, path)
        if (header.is_ready and header.activity_timestamp != 0) or time.monotonic() >= deadline:
            break
        time.sleep(0.016)
    major = header.version >> 16
    if header.version and major != MAJOR_VERSION:
        raise MarkFileError(f"mark file ({path}) major version {major} does not match software: {MAJOR_VERSION}")
    errors: list[ErrorObservation] = []
    if header.header_length > 0 and header.error_buffer_length > 0:
        errors = read_error_log(
            memoryview(data)[header.header_length : header.header_length + header.error_buffer_length]
        )
    return MarkFileContents(path, len(data), header, errors)


# -- liveness ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Liveness:
    """What a start concludes about the archive that last held a mark file."""

    live: bool
    reason: str


def judge_holder(
    header: MarkFileHeader | None,
    now_ms: int,
    timeout_ms: int,
    file_mtime_ms: int,
    holder_exited: bool | None = None,
) -> Liveness:
    """Java's rule (Agrona's `mapNewOrExistingMarkFile`): live while `now - activityTimestamp < timeout`, with what
    this archive adds where Java would refuse forever or wait needlessly.

    - `holder_exited` True (our record of the holder, on this host, names a process that is gone): not live.
    - A file still being created (too short, version 0) or activated (timestamp Long.MAX_VALUE) has no activity
      time: Java refuses such a file for ever (a crash at that moment leaves the directory unusable until an
      operator deletes it); here its modification time stands in for it, so it is taken over once that is stale.
    - Timestamp -1: closed cleanly. Otherwise the activity timestamp's age decides.
    """
    if holder_exited:
        pid = header.pid if header is not None else "?"
        return Liveness(False, f"its holder (pid {pid}) has exited")
    if header is None or not header.is_ready or header.activity_timestamp in (0, ACTIVATION_IN_PROGRESS_TIMESTAMP):
        state = "created" if header is None or not header.is_ready else "activated"
        age = now_ms - file_mtime_ms
        if age < timeout_ms:
            return Liveness(True, f"an archive is starting (the file is being {state}; modified {age} ms ago)")
        return Liveness(False, f"a start that never finished (the file was left being {state} {age} ms ago)")
    if header.activity_timestamp == NULL_VALUE:
        return Liveness(False, "its archive closed cleanly")
    age = now_ms - header.activity_timestamp
    if age < timeout_ms:
        return Liveness(True, f"last activity {_iso(header.activity_timestamp)} ({age} ms ago)")
    return Liveness(False, f"its last activity is {age} ms old (timeout {timeout_ms} ms)")


def holder_liveness(archive_dir: str, now_ms: int | None = None) -> Liveness | None:
    """Whether an archive holds `archive_dir` now, judged from its mark file by its activity (Java's 10 s rule) and
    our holder record; None when the directory has no mark file, or one that no start finished writing: a file of
    another layout (Aeron 1.15's, which Java 1.53 reads as version 0) must not block the tools that migrate it,
    and an archive that is starting is seen by the tools' other check once it maps its catalog.
    What offline tools ask before they write the catalog or segment files."""
    path = mark_file_path(archive_dir)
    try:
        with open(path, "rb") as f:
            data = f.read()
            mtime_ms = os.fstat(f.fileno()).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return None
    try:
        header: MarkFileHeader | None = decode_header(data, path, with_strings=False)
    except MarkFileError:
        header = None
    if header is None or not header.is_ready:
        return None
    exited = holder_exited(data, header)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return judge_holder(header, now, LIVENESS_TIMEOUT_MS, mtime_ms, exited)


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000).astimezone().isoformat(timespec="milliseconds")


def _boot_id() -> bytes | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return bytes.fromhex(f.read().strip().replace("-", ""))[:16]
    except (OSError, ValueError):
        return None


def _pid_namespace() -> tuple[int, int] | None:
    try:
        st = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None if it is gone (or a
    zombie: it will never touch the file again)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def _owner_record(pid: int, start_timestamp: int) -> bytes | None:
    boot, namespace, started = _boot_id(), _pid_namespace(), _process_start(pid)
    if boot is None or namespace is None or started is None:
        return None
    return _OWNER.pack(_OWNER_MAGIC, pid, started, namespace[0], namespace[1], boot, start_timestamp)


def holder_exited(buffer: bytes | bytearray | memoryview, header: MarkFileHeader) -> bool | None:
    """True if the file's holder was one of ours on this host (same boot, same pid namespace) and that process is
    gone; False if it is running; None if that cannot be known (no record, a record that a later holder's header
    overrides, another host or namespace): then only Java's timestamp rule can tell."""
    if len(buffer) < OWNER_RECORD_OFFSET + _OWNER.size:
        return None
    magic, pid, started, ns_dev, ns_ino, boot, start_timestamp = _OWNER.unpack_from(buffer, OWNER_RECORD_OFFSET)
    if magic != _OWNER_MAGIC or pid != header.pid or start_timestamp != header.start_timestamp:
        return None
    if boot != _boot_id() or (ns_dev, ns_ino) != _pid_namespace():
        return None
    return bool(_process_start(pid) != started)


# -- holding ----------------------------------------------------------------------------------------------------------

_open_files: weakref.WeakSet[ArchiveMarkFile] = weakref.WeakSet()
_fork_hook = threading.Lock()
_fork_hook_registered = False


def _forget_in_child() -> None:
    """A forked child does not hold its parent's directory: it closes the inherited descriptor (the flock stays
    with the parent, whose copy is still open) and never writes the file."""
    for mark_file in list(_open_files):
        mark_file._forget_after_fork()


def _register_fork_hook() -> None:
    global _fork_hook_registered
    with _fork_hook:
        if not _fork_hook_registered:
            os.register_at_fork(after_in_child=_forget_in_child)
            _fork_hook_registered = True


def aligned_file_length(error_buffer_length: int, file_page_size: int = FILE_PAGE_SIZE_DEFAULT) -> int:
    """Java's `alignedTotalFileLength`: the header's 8 KiB and the error buffer, aligned to the driver's page."""
    if file_page_size < 4096 or file_page_size & (file_page_size - 1):
        raise ValueError(f"file page size must be a power of 2 >= 4096: {file_page_size}")
    if error_buffer_length < ERROR_BUFFER_LENGTH_DEFAULT or error_buffer_length > (1 << 31) - 1 - HEADER_LENGTH:
        raise ValueError(f"invalid errorBufferLength={error_buffer_length}")  # Java's words
    return (HEADER_LENGTH + error_buffer_length + file_page_size - 1) & -file_page_size


def ensure_mark_file_link(archive_dir: str, mark_file_dir: str) -> None:
    """Agrona's `ensureMarkFileLink`: a mark file elsewhere is named by `archive-mark.lnk` in the archive directory;
    one in the archive directory removes a stale link."""
    archive_path, mark_path = os.path.realpath(archive_dir), os.path.realpath(mark_file_dir)
    link = os.path.join(archive_path, LINK_FILENAME)
    if archive_path == mark_path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
    else:
        with open(link, "wb") as f:
            f.write(mark_path.encode("ascii"))


class ArchiveMarkFile:
    """The mark file a running archive holds: acquired at start (refusing a live holder), its header written, its
    activity timestamp updated by the conductor, its error log fed by the archive's error handler."""

    def __init__(
        self, path: str, fd: int, mapped: mmap.mmap, error_buffer_length: int, epoch_clock: Callable[[], int]
    ) -> None:
        self.path = path
        self._fd = fd
        self._mmap = mapped
        self._epoch_clock = epoch_clock
        self._version = ctypes.c_int32.from_buffer(mapped, VERSION_OFFSET)
        self._timestamp = ctypes.c_int64.from_buffer(mapped, ACTIVITY_TIMESTAMP_OFFSET)
        self._view = memoryview(mapped)
        self.error_log = DistinctErrorLog(self._view[HEADER_LENGTH : HEADER_LENGTH + error_buffer_length], epoch_clock)
        self._lock = threading.Lock()
        self._closed = False
        self.errors_not_recorded = 0  # new errors that found the error log full
        _open_files.add(self)

    @classmethod
    def acquire(
        cls,
        mark_file_dir: str,
        *,
        archive_dir: str | None = None,
        error_buffer_length: int = ERROR_BUFFER_LENGTH_DEFAULT,
        file_page_size: int = FILE_PAGE_SIZE_DEFAULT,
        epoch_clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        liveness_timeout_ms: int = LIVENESS_TIMEOUT_MS,
        lock_wait_s: float = 0.25,
    ) -> ArchiveMarkFile:
        """Create the mark file, or take over one whose holder is gone; MarkFileActiveError if another archive
        (Java's or ours) holds it, naming the directory, the holder's pid and its last activity.

        The flock is tried for `lock_wait_s` (two starts at one instant: the loser of the lock may be about to
        refuse and let go). Held for the archive's life, it refuses at once a live process of ours even before that
        one has written anything; it is only ever an extra refusal for a live process, as the kernel drops it with
        its holder, and a forked child lets its copy go."""
        directory = archive_dir or mark_file_dir
        total_length = aligned_file_length(error_buffer_length, file_page_size)
        os.makedirs(mark_file_dir, exist_ok=True)
        path = os.path.join(mark_file_dir, FILENAME)
        flags = os.O_RDWR | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
        except FileExistsError:
            fd = os.open(path, flags)
            created = False
        try:
            _lock_file(fd, path, directory, lock_wait_s)
            size = os.fstat(fd).st_size
            if not created:
                existing = _read_prefix(fd, size)
                cls._judge(existing, path, directory, epoch_clock(), liveness_timeout_ms, os.fstat(fd).st_mtime_ns)
                cls._save_existing_errors(fd, existing, path, size)
            if size < total_length:
                os.ftruncate(fd, total_length)  # sparse, as Java's SPARSE create (or its map of an existing file)
            mapped = _map(path, total_length)
        except BaseException:
            os.close(fd)  # drops the flock
            raise
        if not created:
            # Java zeroes the old errors (saved above) and, in a legacy file, everything: the header moves by 8.
            clear_from = 0 if header_offset(mapped[:MESSAGE_HEADER_LENGTH]) == 0 else HEADER_LENGTH
            clear_to = HEADER_LENGTH + error_buffer_length
            mapped[clear_from:clear_to] = bytes(clear_to - clear_from)
        mark_file = cls(path, fd, mapped, error_buffer_length, epoch_clock)
        if not created:
            mark_file._timestamp.value = ACTIVATION_IN_PROGRESS_TIMESTAMP  # Java's guard while it activates
        _register_fork_hook()
        _MESSAGE_HEADER.pack_into(mapped, 0, BLOCK_LENGTH, TEMPLATE_ID, SCHEMA_ID, SCHEMA_VERSION)
        start = epoch_clock()
        struct.pack_into("<qq", mapped, MESSAGE_HEADER_LENGTH + FIELD_OFFSETS["startTimestamp"], start, os.getpid())
        # Where the error log is, from the start (Java's encode writes these later): errors of a start that fails
        # before the header is complete are still found by readers.
        struct.pack_into(
            "<ii", mapped, MESSAGE_HEADER_LENGTH + FIELD_OFFSETS["headerLength"], HEADER_LENGTH, error_buffer_length
        )
        record = _owner_record(os.getpid(), start)
        mapped[OWNER_RECORD_OFFSET : OWNER_RECORD_OFFSET + _OWNER.size] = record or bytes(_OWNER.size)
        log.info("%s %s: %s", "created" if created else "took over", path, f"{total_length} bytes")
        if archive_dir is not None:
            ensure_mark_file_link(archive_dir, mark_file_dir)
        return mark_file

    @staticmethod
    def _judge(existing: bytes, path: str, directory: str, now_ms: int, timeout_ms: int, mtime_ns: int) -> None:
        header: MarkFileHeader | None
        try:
            header = decode_header(existing, path, with_strings=False)
        except MarkFileError:
            header = None
        if header is not None and header.version and header.version >> 16 != MAJOR_VERSION:
            raise MarkFileError(  # Java's validateVersion, word for word
                f"mark file ({path}) major version {header.version >> 16} does not match software: {MAJOR_VERSION}"
            )
        exited = holder_exited(existing, header) if header is not None else None
        verdict = judge_holder(header, now_ms, timeout_ms, mtime_ns // 1_000_000, exited)
        if verdict.live:
            pid = f"pid {header.pid}" if header is not None and header.pid else "a process not yet named in it"
            raise MarkFileActiveError(
                f"active mark file detected: {path}: archive directory {directory} is held by {pid}, "
                f"{verdict.reason}; a holder is taken as dead once its activity is {timeout_ms} ms old"
            )
        log.warning("taking over %s: %s", path, verdict.reason)

    @staticmethod
    def _save_existing_errors(fd: int, existing: bytes, path: str, size: int) -> None:
        """Java's `saveExistingErrors`: the previous archive's errors into `archive-<time>-error.log` beside the
        mark file, in printErrorLog's words, before the new archive's log replaces them."""
        try:
            header = decode_header(existing, path, with_strings=False)
        except MarkFileError:
            return
        if header.header_length <= 0 or header.error_buffer_length <= 0 or header.header_length >= size:
            return
        errors = read_error_log(os.pread(fd, min(header.error_buffer_length, size), header.header_length))
        if not errors:
            return
        now = datetime.now().astimezone()
        name = f"{ERROR_FILE_PREFIX}-{now:%Y-%m-%d-%H-%M-%S}-{now.microsecond // 1000:03d}{now:%z}-error.log"
        target = os.path.join(os.path.dirname(path), name)
        with open(target, "w", encoding="ascii", errors="replace") as f:
            f.write(format_error_log(errors))
        log.warning("existing errors saved to: %s", target)

    # -- writing the header -----------------------------------------------------------------------------------------
    def encode(
        self,
        *,
        control_stream_id: int,
        local_control_stream_id: int,
        events_stream_id: int,
        archive_id: int,
        error_buffer_length: int,
        control_channel: str | None,
        local_control_channel: str,
        events_channel: str | None,
        aeron_directory: str,
    ) -> None:
        """Java's `encode(ctx)`: stream ids, lengths, archive id and the four strings (the start time and pid were
        written at acquisition). ArchiveError if they do not fit the 8 KiB header, as Java refuses to start."""
        strings = [(s or "").encode("ascii", "replace") for s in
                   (control_channel, local_control_channel, events_channel, aeron_directory)]  # fmt: skip
        length = MESSAGE_HEADER_LENGTH + BLOCK_LENGTH + sum(_VAR_LENGTH.size + len(s) for s in strings)
        if length > HEADER_LENGTH:
            raise ArchiveError(f"ArchiveMarkFile headerLength={length} > headerLengthCapacity={HEADER_LENGTH}")
        with self._lock:
            if self._closed:
                return
            mapped = self._mmap
            base = MESSAGE_HEADER_LENGTH
            struct.pack_into(
                "<iiiii", mapped, base + FIELD_OFFSETS["controlStreamId"], control_stream_id,
                local_control_stream_id, events_stream_id, HEADER_LENGTH, error_buffer_length,
            )  # fmt: skip
            struct.pack_into("<q", mapped, base + FIELD_OFFSETS["archiveId"], archive_id)
            cursor = base + BLOCK_LENGTH
            for s in strings:
                _VAR_LENGTH.pack_into(mapped, cursor, len(s))
                mapped[cursor + 4 : cursor + 4 + len(s)] = s
                cursor += 4 + len(s)

    def signal_ready(self, activity_timestamp: int) -> None:
        """Java's `signalReady(ts)`: the timestamp, then the version (what readers wait for), then to disk."""
        with self._lock:
            if self._closed:
                return
            self._timestamp.value = activity_timestamp
            self._version.value = SEMANTIC_VERSION
            self._mmap.flush()

    def signal_terminated(self) -> None:
        """Java's `signalTerminated`: timestamp -1, so a start finds the directory free at once."""
        self.signal_ready(NULL_VALUE)

    def update_activity_timestamp(self, now_ms: int) -> None:
        """The proof of life the conductor writes every second (one aligned 8-byte store)."""
        if not self._closed:
            self._timestamp.value = now_ms

    def record_error(self, error: BaseException, key: Hashable | None = None) -> bool:
        """Into the distinct error log; False when a new error does not fit (logged once, as Java prints it).

        `key`: errors that share it count up in one entry (the first one's text), though their texts vary, as
        malformed requests from one client do: they must not fill the log the archive's own errors need."""
        if self._closed:
            return False
        recorded = (
            self.error_log.record(error) if key is None else self.error_log.record_text(key, exception_text(error))
        )
        return recorded or self._full(str(error))

    def _full(self, text: str) -> bool:
        """A new error that does not fit: logged the first time only (a hostile client could otherwise turn every
        malformed packet into a log line once the log is full); the rest are counted."""
        self.errors_not_recorded += 1
        if self.errors_not_recorded == 1:
            log.error("archive error log full: this and later new errors are not recorded in it: %s", text)
        return False

    def header(self) -> MarkFileHeader:
        with self._lock:
            return decode_header(bytes(self._mmap[:HEADER_LENGTH]), self.path)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Unmap and let go of the lock; the file stays (as Java leaves it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.error_log.release()
            self._view.release()
            del self._version, self._timestamp
            self._mmap.close()
            os.close(self._fd)
        _open_files.discard(self)

    def _forget_after_fork(self) -> None:
        if self._closed:
            return
        self._closed = True  # no write from the child; its mapping goes with it
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __enter__(self) -> ArchiveMarkFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _map(path: str, length: int) -> mmap.mmap:
    """The file mapped through a descriptor of its own: mmap keeps a duplicate of the descriptor it maps, and one
    of the locked descriptor would keep the flock alive in a forked child after its parent died."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        return mmap.mmap(fd, length)
    finally:
        os.close(fd)


def _read_prefix(fd: int, size: int) -> bytes:
    """What a start needs to judge an existing file: the header and our record after it."""
    return os.pread(fd, min(size, HEADER_LENGTH), 0)


def _lock_file(fd: int, path: str, directory: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as ex:
            if ex.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    try:
        header: MarkFileHeader | None = decode_header(_read_prefix(fd, os.fstat(fd).st_size), path, False)
    except MarkFileError:
        header = None
    if header is not None and header.pid:
        activity = header.activity_timestamp
        when = (
            "starting"
            if activity in (0, ACTIVATION_IN_PROGRESS_TIMESTAMP) or not header.is_ready
            else f"last activity {_iso(activity)}"
        )
        holder = f"pid {header.pid} ({when})"
    else:
        holder = "a process that is starting"
    raise MarkFileActiveError(
        f"active mark file detected: {path}: archive directory {directory} is held by {holder}, which holds "
        "the file's lock"
    )
