"""Agrona's distinct error log (`DistinctErrorLog`, `ErrorLogReader`): the format of the error buffer in
`archive-mark.dat` (and in a media driver's `cnc.dat`), written and read as Agrona 2.6 does.

A record per distinct error, 8-byte aligned, one after the other from offset 0 of the buffer:

    0  int32 length        (of the whole record, written last: a reader stops at a zero length)
    4  int32 observationCount
    8  int64 lastObservationTimestamp   (epoch ms)
   16  int64 firstObservationTimestamp  (epoch ms)
   24  text  the encoded error (UTF-8 as read; the archive writes US-ASCII), length - 24 bytes

An error seen again (same type, message and stack, causes included) only counts up and moves its last timestamp,
so a fault repeated at line rate costs no space; a new one that does not fit is not recorded (`record` says so).
Python exceptions are encoded in the shape of Java's `printStackTrace` (`Type: message`, then `\\tat` lines, then
`Caused by:`) so that Java's `ArchiveTool errors` and ours print the same kind of text whichever archive wrote it.
"""

from __future__ import annotations

import struct
import threading
import traceback
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

LENGTH_OFFSET = 0
OBSERVATION_COUNT_OFFSET = 4
LAST_OBSERVATION_TIMESTAMP_OFFSET = 8
FIRST_OBSERVATION_TIMESTAMP_OFFSET = 16
ENCODED_ERROR_OFFSET = 24
RECORD_ALIGNMENT = 8

_INT = struct.Struct("<i")
_LONG = struct.Struct("<q")
_MAX_CAUSES = 16  # Java follows the cause chain to its end; a bound keeps a cycle from looping


@dataclass(frozen=True)
class ErrorObservation:
    """One distinct error: how often it was seen, when first and last (epoch ms), and its text."""

    observation_count: int
    first_observation_timestamp: int
    last_observation_timestamp: int
    text: str

    def to_json_dict(self) -> dict[str, object]:
        return {
            "observationCount": self.observation_count,
            "firstObservationTimestamp": self.first_observation_timestamp,
            "lastObservationTimestamp": self.last_observation_timestamp,
            "firstObservation": java_date(self.first_observation_timestamp),
            "lastObservation": java_date(self.last_observation_timestamp),
            "text": self.text,
        }


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) & -alignment


def has_errors(buffer: bytes | bytearray | memoryview) -> bool:
    """ErrorLogReader.hasErrors: a first record has been written."""
    return len(buffer) >= 4 and _INT.unpack_from(buffer, LENGTH_OFFSET)[0] > 0


def read_error_log(buffer: bytes | bytearray | memoryview, since_timestamp: int = 0) -> list[ErrorObservation]:
    """Every record last observed at or after `since_timestamp`, in buffer order (ErrorLogReader.read).

    As Java's reader, it stops at the first zero (or negative) length and clips a length that runs past the
    buffer, so a log being written or torn by a crash reads as the records complete so far."""
    observations = []
    capacity = len(buffer)
    offset = 0
    while offset <= capacity - ENCODED_ERROR_OFFSET:
        length = min(_INT.unpack_from(buffer, offset + LENGTH_OFFSET)[0], capacity - offset)
        if length <= 0:
            break
        last = _LONG.unpack_from(buffer, offset + LAST_OBSERVATION_TIMESTAMP_OFFSET)[0]
        if last >= since_timestamp:
            text_end = offset + max(length, ENCODED_ERROR_OFFSET)
            observations.append(
                ErrorObservation(
                    _INT.unpack_from(buffer, offset + OBSERVATION_COUNT_OFFSET)[0],
                    _LONG.unpack_from(buffer, offset + FIRST_OBSERVATION_TIMESTAMP_OFFSET)[0],
                    last,
                    bytes(buffer[offset + ENCODED_ERROR_OFFSET : text_end]).decode("utf-8", "replace"),
                )
            )
        offset += _align(length, RECORD_ALIGNMENT)
    return observations


def java_date(epoch_ms: int) -> str:
    """An epoch-ms time as Java's `SimpleDateFormat("yyyy-MM-dd HH:mm:ss.SSSZ")` prints it, in local time."""
    moment = datetime.fromtimestamp(epoch_ms // 1000).astimezone()
    return f"{moment:%Y-%m-%d %H:%M:%S}.{epoch_ms % 1000:03d}{moment:%z}"


def format_error_log(observations: list[ErrorObservation]) -> str:
    """The log as Aeron's `CommonContext.printErrorLog` prints it (what `ArchiveTool errors` shows)."""
    if not observations:
        return "\n0 distinct errors observed\n"
    lines = []
    for o in observations:
        lines.append("")
        lines.append(
            f"{o.observation_count} observations from {java_date(o.first_observation_timestamp)} "
            f"to {java_date(o.last_observation_timestamp)} for:"
        )
        lines.append(o.text)
    lines.append("")
    lines.append(f"{len(observations)} distinct errors observed.")
    return "\n".join(lines) + "\n"


# -- Python exceptions in Java's shape -------------------------------------------------------------------------------


def _type_name(error: BaseException) -> str:
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _frames(tb: TracebackType | None) -> list[tuple[str, str, int]]:
    """(module.function, file name, line) per frame, innermost first as Java prints them."""
    frames = []
    for frame, line in traceback.walk_tb(tb):
        module = frame.f_globals.get("__name__", "?")
        filename = frame.f_code.co_filename.rsplit("/", 1)[-1]
        frames.append((f"{module}.{frame.f_code.co_qualname}", filename, line))
    frames.reverse()
    return frames


def _chain(error: BaseException) -> list[BaseException]:
    """The error and its causes: `raise ... from` first, else the exception being handled, as Python prints."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < _MAX_CAUSES and all(current is not e for e in chain):
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain


def exception_key(error: BaseException) -> Hashable:
    """What makes two errors the same observation for Agrona: type, message and every stack frame (file, line,
    function) of the error and of each cause; not the object, so the same fault raised again counts up."""
    return tuple((_type_name(e), str(e), tuple(_frames(e.__traceback__))) for e in _chain(error))


def exception_text(error: BaseException) -> str:
    """The error as Java's `Throwable.printStackTrace` writes one: `Type: message`, a `\\tat` line per frame, and
    each cause after `Caused by: `; ends with a newline, as Java's does."""
    lines = []
    for depth, e in enumerate(_chain(error)):
        message = str(e)
        head = f"{_type_name(e)}: {message}" if message else _type_name(e)
        lines.append(head if depth == 0 else f"Caused by: {head}")
        lines.extend(f"\tat {where}({filename}:{line})" for where, filename, line in _frames(e.__traceback__))
    return "\n".join(lines) + "\n"


# -- writing ----------------------------------------------------------------------------------------------------------


class DistinctErrorLog:
    """Agrona's DistinctErrorLog over a writable buffer (the mark file's error region, mapped).

    Thread-safe: the conductor, recorder and replayer threads all report errors. Text is US-ASCII (non-ASCII
    characters become '?'), as Java's archive creates its log. A record's length is written last, so a reader in
    another process (ArchiveTool) sees a record whole or not at all."""

    def __init__(self, buffer: memoryview, clock: Callable[[], int]) -> None:
        if buffer.readonly:
            raise ValueError("the error log's buffer must be writable")
        self._buffer = buffer
        self._clock = clock
        self._lock = threading.Lock()
        self._offsets: dict[Hashable, int] = {}
        self._next_offset = 0

    @property
    def capacity(self) -> int:
        return len(self._buffer)

    def record(self, error: BaseException) -> bool:
        """Record one observation of `error`; False when a new error does not fit (Java then prints it)."""
        return self.record_text(exception_key(error), exception_text(error))

    def record_text(self, key: Hashable, text: str) -> bool:
        """Record one observation of the error `key` identifies, encoded as `text` when it is new."""
        timestamp = self._clock()
        buffer = self._buffer
        with self._lock:
            offset = self._offsets.get(key)
            if offset is None:
                offset = self._new_observation(timestamp, text)
                if offset < 0:
                    return False
                self._offsets[key] = offset
            count = _INT.unpack_from(buffer, offset + OBSERVATION_COUNT_OFFSET)[0]
            _INT.pack_into(buffer, offset + OBSERVATION_COUNT_OFFSET, count + 1)
            _LONG.pack_into(buffer, offset + LAST_OBSERVATION_TIMESTAMP_OFFSET, timestamp)
        return True

    def _new_observation(self, timestamp: int, text: str) -> int:
        offset = self._next_offset
        encoded = text.encode("ascii", "replace")
        length = ENCODED_ERROR_OFFSET + len(encoded)
        remaining = self.capacity - ENCODED_ERROR_OFFSET - offset
        if remaining <= 0 or remaining - len(encoded) < 0:
            return -1
        buffer = self._buffer
        buffer[offset + ENCODED_ERROR_OFFSET : offset + length] = encoded
        _LONG.pack_into(buffer, offset + FIRST_OBSERVATION_TIMESTAMP_OFFSET, timestamp)
        self._next_offset = _align(offset + length, RECORD_ALIGNMENT)
        _INT.pack_into(buffer, offset + LENGTH_OFFSET, length)
        return offset

    def release(self) -> None:
        """Let go of the buffer (so its mapping can close); records after this fail."""
        with self._lock:
            self._buffer.release()
            self._buffer = memoryview(bytearray())
            self._offsets.clear()
            self._next_offset = 0
