"""`rec-pos` counters (type 100): key layout, label, and the lookups of Java's `RecordingPos` helpers.

Key (inside the 112-byte counter key area): recordingId i64 @0, sessionId i32 @8, sourceIdentityLength i32 @12,
sourceIdentity ASCII @16, archiveId i64 @16+L. Java clients find our counters with the same scan.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

from aeron_archive_spark.archive.constants import ARCHIVE_RECORDING_POSITION_TYPE_ID, NULL_COUNTER_ID, NULL_VALUE
from aeron_archive_spark.archive.constants import COUNTER_MAX_KEY_LENGTH as MAX_KEY_LENGTH
from aeron_archive_spark.archive.constants import COUNTER_MAX_LABEL_LENGTH as MAX_LABEL_LENGTH
from aeron_archive_spark.archive.constants import COUNTER_RECORD_ALLOCATED as RECORD_ALLOCATED

MAX_SOURCE_IDENTITY_LENGTH = MAX_KEY_LENGTH - 16 - 8  # 88

_HEAD = struct.Struct("<qii")


class CountersReaderLike(Protocol):
    def state(self, counter_id: int) -> int: ...
    def type_id(self, counter_id: int) -> int: ...
    def key(self, counter_id: int) -> bytes: ...
    def get(self, counter_id: int) -> int: ...
    def registration_id(self, counter_id: int) -> int: ...
    def find_by_type(self, type_id: int) -> list[int]: ...


def encode_key(recording_id: int, session_id: int, source_identity: str, archive_id: int) -> bytes:
    src = source_identity.encode("ascii", "replace")[:MAX_SOURCE_IDENTITY_LENGTH]
    return _HEAD.pack(recording_id, session_id, len(src)) + src + struct.pack("<q", archive_id)


def decode_key(key: bytes) -> tuple[int, int, str, int]:
    """(recordingId, sessionId, sourceIdentity, archiveId) from a counter key."""
    recording_id, session_id, length = _HEAD.unpack_from(key, 0)
    length = max(0, min(length, MAX_SOURCE_IDENTITY_LENGTH))
    source = bytes(key[16 : 16 + length]).decode("ascii", "replace")
    archive_id = struct.unpack_from("<q", key, 16 + length)[0] if len(key) >= 24 + length else NULL_VALUE
    return recording_id, session_id, source, archive_id


def label(recording_id: int, session_id: int, stream_id: int, stripped_channel: str, archive_id: int) -> str:
    head = f"rec-pos: {recording_id} {session_id} {stream_id} "
    tail = f" - archiveId={archive_id}"
    room = MAX_LABEL_LENGTH - len(head) - len(tail)
    return head + stripped_channel[: max(0, room)] + tail


def _scan(reader: CountersReaderLike, match: Callable[[tuple[int, int, str, int]], bool]) -> int:
    for counter_id in reader.find_by_type(ARCHIVE_RECORDING_POSITION_TYPE_ID):
        if match(decode_key(reader.key(counter_id))):
            return counter_id
    return NULL_COUNTER_ID


def find_counter_id_by_recording(reader: CountersReaderLike, recording_id: int, archive_id: int = NULL_VALUE) -> int:
    """The active rec-pos counter of a recording, or NULL_COUNTER_ID; archive_id -1 matches any archive."""
    return _scan(reader, lambda k: k[0] == recording_id and (archive_id == NULL_VALUE or k[3] == archive_id))


def find_counter_id_by_session(reader: CountersReaderLike, session_id: int, archive_id: int = NULL_VALUE) -> int:
    return _scan(reader, lambda k: k[1] == session_id and (archive_id == NULL_VALUE or k[3] == archive_id))


def get_recording_id(reader: CountersReaderLike, counter_id: int) -> int:
    if reader.state(counter_id) != RECORD_ALLOCATED or reader.type_id(counter_id) != ARCHIVE_RECORDING_POSITION_TYPE_ID:
        return NULL_VALUE
    return decode_key(reader.key(counter_id))[0]


def is_active(reader: CountersReaderLike, counter_id: int, recording_id: int) -> bool:
    return get_recording_id(reader, counter_id) == recording_id
