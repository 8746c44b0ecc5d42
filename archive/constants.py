"""Protocol constants and configuration defaults, mirroring `Archive.Configuration` / `AeronArchive.Configuration`."""

from __future__ import annotations

from enum import IntEnum

NULL_VALUE = -1
NULL_POSITION = -1
NULL_TIMESTAMP = -1
NULL_COUNTER_ID = -1

# Replay lengths with special meaning (AeronArchive.REPLAY_ALL_AND_FOLLOW / REPLAY_ALL_AND_STOP).
REPLAY_ALL_AND_FOLLOW = -1
REPLAY_ALL_AND_STOP = -2

# Control protocol (client side defaults offered to users; Java has none since 1.40).
CONTROL_CHANNEL_DEFAULT = "aeron:udp?endpoint=localhost:8010"
CONTROL_STREAM_ID_DEFAULT = 10
LOCAL_CONTROL_CHANNEL_DEFAULT = "aeron:ipc"
LOCAL_CONTROL_STREAM_ID_DEFAULT = 10
CONTROL_RESPONSE_CHANNEL_DEFAULT = "aeron:udp?endpoint=localhost:0"
CONTROL_RESPONSE_STREAM_ID_DEFAULT = 20
RECORDING_EVENTS_CHANNEL_DEFAULT = "aeron:udp?control-mode=dynamic|control=localhost:8030"
RECORDING_EVENTS_STREAM_ID_DEFAULT = 30
CONTROL_TERM_LENGTH_DEFAULT = 64 * 1024
CONTROL_MTU_LENGTH_DEFAULT = 1408

# Protocol semantic version 1.12.0 offered by clients / answered by the archive.
PROTOCOL_MAJOR_VERSION = 1
PROTOCOL_MINOR_VERSION = 12
PROTOCOL_PATCH_VERSION = 0
PROTOCOL_SEMANTIC_VERSION = (PROTOCOL_MAJOR_VERSION << 16) | (PROTOCOL_MINOR_VERSION << 8) | PROTOCOL_PATCH_VERSION

# Archive configuration defaults.
SEGMENT_FILE_LENGTH_DEFAULT = 128 * 1024 * 1024
SEGMENT_FILE_LENGTH_MIN = 64 * 1024
SEGMENT_FILE_LENGTH_MAX = 1024 * 1024 * 1024
FILE_IO_MAX_LENGTH_DEFAULT = 1024 * 1024
FILE_IO_MAX_LENGTH_MIN = 64 * 1024
LOW_STORAGE_SPACE_THRESHOLD_DEFAULT = 128 * 1024 * 1024
CATALOG_CAPACITY_DEFAULT = 1024 * 1024
MAX_CONCURRENT_RECORDINGS_DEFAULT = 20
MAX_CONCURRENT_REPLAYS_DEFAULT = 20
CONNECT_TIMEOUT_NS_DEFAULT = 5_000_000_000
SESSION_LIVENESS_CHECK_INTERVAL_NS_DEFAULT = 1_000_000_000
REPLAY_LINGER_TIMEOUT_NS_DEFAULT = 5_000_000_000
MESSAGE_TIMEOUT_NS_DEFAULT = 10_000_000_000
# Replication: where source replays come in when a request names no channel (Java has no default and requires one),
# and each replication step's timeout (Java: the archive client context's message timeout, 10 s).
REPLICATION_CHANNEL_DEFAULT = "aeron:udp?endpoint=localhost:0"
REPLICATION_TIMEOUT_NS_DEFAULT = MESSAGE_TIMEOUT_NS_DEFAULT
MESSAGE_RETRY_ATTEMPTS_DEFAULT = 3
CONTROL_RESEND_INTERVAL_NS = 200_000_000

CATALOG_FILE_NAME = "archive.catalog"
RECORDING_SEGMENT_SUFFIX = ".rec"
DELETE_SUFFIX = ".del"

# Counter type ids (AeronCounters).
ARCHIVE_RECORDING_POSITION_TYPE_ID = 100
ARCHIVE_ERROR_COUNT_TYPE_ID = 101
ARCHIVE_CONTROL_SESSIONS_TYPE_ID = 102
ARCHIVE_MAX_CYCLE_TIME_TYPE_ID = 103
ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED_TYPE_ID = 104
ARCHIVE_RECORDER_MAX_WRITE_TIME_TYPE_ID = 105
ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID = 106
ARCHIVE_RECORDER_TOTAL_WRITE_TIME_TYPE_ID = 107
ARCHIVE_REPLAYER_MAX_READ_TIME_TYPE_ID = 108
ARCHIVE_REPLAYER_TOTAL_READ_BYTES_TYPE_ID = 109
ARCHIVE_REPLAYER_TOTAL_READ_TIME_TYPE_ID = 110
ARCHIVE_RECORDING_SESSION_COUNT_TYPE_ID = 111
ARCHIVE_REPLAY_SESSION_COUNT_TYPE_ID = 112
ARCHIVE_CONTROL_SESSION_TYPE_ID = 113

# Counter metadata records (aeronc.h AERON_COUNTER_*): record states, and the key / label areas of a record (key: two
# cache lines minus state, type id and free-for-reuse deadline; label: six lines minus its length field). Defined
# here, the lowest layer, because both the FFI (`native`) and `recording_pos` need them.
COUNTER_RECORD_UNUSED = 0
COUNTER_RECORD_ALLOCATED = 1
COUNTER_RECORD_RECLAIMED = -1
COUNTER_MAX_KEY_LENGTH = 112
COUNTER_MAX_LABEL_LENGTH = 380


class SourceLocation(IntEnum):
    LOCAL = 0
    REMOTE = 1


class RecordingSignal(IntEnum):
    START = 0
    STOP = 1
    EXTEND = 2
    REPLICATE = 3
    MERGE = 4
    SYNC = 5
    DELETE = 6
    REPLICATE_END = 7


class RecordingState(IntEnum):
    INVALID = 0
    VALID = 1
    DELETED = 2


class ControlResponseCode(IntEnum):
    OK = 0
    ERROR = 1
    RECORDING_UNKNOWN = 2
    SUBSCRIPTION_UNKNOWN = 3


# This project's archive names the extensions it answers in the text of its OK to a connect (Java's archive leaves
# that text empty, and Java's client reads it only on an error): "features=time-index". Clients ask an archive for
# an extension only if it named it, so a Java archive is never left to ignore a request it does not know.
FEATURES_PREFIX = "features="
TIME_INDEX_FEATURE = "time-index"  # PositionAtTimeRequest, TimeIndexRequest (docs/control-protocol.md)
ARCHIVE_FEATURES = FEATURES_PREFIX + TIME_INDEX_FEATURE
