"""Archive error codes and the exception carrying them, shared by server, client and tools.

The numeric codes are Aeron's (`io.aeron.archive.client.ArchiveException`), so an ERROR ControlResponse from
this archive means the same thing to a Java client, and vice versa.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    GENERIC = 0
    ACTIVE_LISTING = 1
    ACTIVE_RECORDING = 2
    ACTIVE_SUBSCRIPTION = 3
    UNKNOWN_SUBSCRIPTION = 4
    UNKNOWN_RECORDING = 5
    UNKNOWN_REPLAY = 6
    MAX_REPLAYS = 7
    MAX_RECORDINGS = 8
    INVALID_EXTENSION = 9
    AUTHENTICATION_REJECTED = 10
    STORAGE_SPACE = 11
    UNKNOWN_REPLICATION = 12
    UNAUTHORISED_ACTION = 13
    REPLICATION_CONNECTION_FAILURE = 14
    EMPTY_RECORDING = 15
    INVALID_POSITION = 16

    @classmethod
    def name_of(cls, code: int) -> str:
        try:
            return cls(code).name
        except ValueError:
            return f"UNKNOWN_ERROR_CODE({code})"


class ArchiveError(Exception):
    """An archive operation failed; `error_code` is the Aeron archive error code."""

    def __init__(self, message: str, error_code: int = ErrorCode.GENERIC, correlation_id: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = int(error_code)
        self.correlation_id = correlation_id

    @property
    def error_code_name(self) -> str:
        return ErrorCode.name_of(self.error_code)

    def __str__(self) -> str:
        suffix = f", correlationId={self.correlation_id}" if self.correlation_id != -1 else ""
        return f"{self.error_code_name}: {self.message}{suffix}"

    def __reduce__(self) -> tuple[type[ArchiveError], tuple[str, int, int]]:
        # Keep code and correlation id across pickling (Spark executors).
        return (self.__class__, (self.message, self.error_code, self.correlation_id))


class ArchiveTimeoutError(ArchiveError, TimeoutError):
    """No response from the archive within the message timeout."""


class ArchiveDisconnectedError(ArchiveError):
    """The session's control response stream lost its image: the archive went away (or restarted)."""
