"""Archive configuration (Aeron's `Archive.Context`), validated once in `conclude()` before anything starts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive.channel import ChannelError, ChannelUri
from aeron_archive_spark.archive.server.authenticator import Authenticator, CredentialsAuthenticator
from aeron_archive_spark.archive.server.authorisation import (
    ALLOW_ALL,
    AuthorisationService,
    ReadOnlyAuthorisationService,
)
from aeron_archive_spark.archive.server.retention import RetentionLimits, RetentionOverride
from aeron_archive_spark.archive.storage.mark_file import (
    ERROR_BUFFER_LENGTH_DEFAULT,
    HEADER_LENGTH,
    LIVENESS_TIMEOUT_MS,
)
from aeron_archive_spark.archive.storage.time_index import INTERVAL_DEFAULT_NS as TIME_INDEX_INTERVAL_DEFAULT_NS


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def epoch_time_ms() -> int:
    """Wall-clock milliseconds since the epoch: what Aeron's `EpochClock` gives (catalog timestamps, auth)."""
    return time.time_ns() // 1_000_000


@dataclass
class ArchiveContext:
    archive_dir: str
    aeron_dir: str | None = None  # None: start an embedded media driver
    control_channel: str | None = c.CONTROL_CHANNEL_DEFAULT  # None disables the UDP control endpoint
    control_stream_id: int = c.CONTROL_STREAM_ID_DEFAULT
    local_control_channel: str = c.LOCAL_CONTROL_CHANNEL_DEFAULT
    local_control_stream_id: int = c.LOCAL_CONTROL_STREAM_ID_DEFAULT
    recording_events_enabled: bool = False
    recording_events_channel: str = c.RECORDING_EVENTS_CHANNEL_DEFAULT
    recording_events_stream_id: int = c.RECORDING_EVENTS_STREAM_ID_DEFAULT
    segment_file_length: int = c.SEGMENT_FILE_LENGTH_DEFAULT
    file_io_max_length: int = c.FILE_IO_MAX_LENGTH_DEFAULT
    file_sync_level: int = 0
    catalog_file_sync_level: int = 0
    record_checksum: str | None = None
    replay_checksum: str | None = None
    # Replays read segment files straight into the replay publication's term (one copy, see
    # native/term_appender.py); False goes through the C client's offer_block (a read buffer, then a second copy).
    replay_into_term: bool = True
    # Replays at most this long copy through offer_block even with `replay_into_term`: mapping the publication's
    # log buffer costs more than the copy it saves on a few frames (a small recording of many).
    replay_into_term_min_length: int = 64 * 1024
    catalog_capacity: int = c.CATALOG_CAPACITY_DEFAULT
    max_concurrent_recordings: int = c.MAX_CONCURRENT_RECORDINGS_DEFAULT
    max_concurrent_replays: int = c.MAX_CONCURRENT_REPLAYS_DEFAULT
    connect_timeout_ns: int = c.CONNECT_TIMEOUT_NS_DEFAULT
    session_liveness_check_interval_ns: int = c.SESSION_LIVENESS_CHECK_INTERVAL_NS_DEFAULT
    replay_linger_timeout_ns: int = c.REPLAY_LINGER_TIMEOUT_NS_DEFAULT
    low_storage_space_threshold: int = c.LOW_STORAGE_SPACE_THRESHOLD_DEFAULT
    # Replication (this archive copying from another): the channel the source's replays come in on when a request
    # names none (Java's `aeron.archive.replication.channel`, which Java requires; ours defaults to a port of its
    # own on localhost: set this archive's host for replicas on other hosts), the control response channel and
    # stream toward source archives (default: IPC for an IPC source, else a port of its own at this archive's
    # control host), and the timeout of each replication step (Java: the archive client's message timeout).
    replication_channel: str = c.REPLICATION_CHANNEL_DEFAULT
    replication_response_channel: str | None = None
    replication_response_stream_id: int = c.CONTROL_RESPONSE_STREAM_ID_DEFAULT
    replication_timeout_ns: int = c.REPLICATION_TIMEOUT_NS_DEFAULT
    archive_id: int | None = None  # None: the Aeron client id, as in Java
    # Retention (beyond Java, as Kafka's retention.ms / retention.bytes; `server.retention`): each recording kept
    # within these limits by purging whole segments from its start, checked this often; overrides by stream id
    # (and channel fragment), the first match winning.
    retention: RetentionLimits = field(default_factory=RetentionLimits)
    retention_overrides: tuple[RetentionOverride, ...] = ()
    retention_check_interval_ms: int = 10_000
    # The time index (beyond Java; `storage.time_index`): the recorder samples (wall-clock time, position) at most
    # this often while data arrives, so every byte's recorded time is known to within it; 0 turns it off.
    time_index_interval_ns: int = TIME_INDEX_INTERVAL_DEFAULT_NS
    # Who may connect and what they may do (Aeron's authenticator and authorisation service suppliers); the
    # defaults accept everyone and allow everything. `require_credentials` sets both for the two-secret scheme.
    authenticator: Authenticator = field(default_factory=Authenticator)
    authorisation_service: AuthorisationService = ALLOW_ALL
    # `HOST:PORT` of a Prometheus endpoint (`server.metrics`; port 0: any free one); None, the default, serves none.
    metrics_address: str | None = None
    client_name: str = "aeron-archive-py"
    # archive-mark.dat (`storage.mark_file`, Java's ArchiveMarkFile): where it goes (Java's markFileDir; None: the
    # archive directory), its error log's size (Java's errorBufferLength, at least 1 MiB), and how old its holder's
    # activity timestamp must be before a start takes the directory over (Java's fixed LIVENESS_TIMEOUT_MS, 10 s;
    # settable here so that tests of a dead holder need not wait that long).
    mark_file_dir: str | None = None
    error_buffer_length: int = ERROR_BUFFER_LENGTH_DEFAULT
    mark_file_liveness_timeout_ms: int = LIVENESS_TIMEOUT_MS
    delete_archive_on_start: bool = False
    # Clocks (Aeron's `nanoClock` / `epochClock`), injectable so tests can step time: the agents read `nano_clock`
    # once per duty cycle and hand that time to their sessions; nothing in the server calls `time.*` for a deadline.
    nano_clock: Callable[[], int] = field(default=time.monotonic_ns)  # monotonic ns: deadlines, timeouts, I/O time
    epoch_clock: Callable[[], int] = field(default=epoch_time_ms)  # wall-clock ms: catalog timestamps, auth
    epoch_clock_ns: Callable[[], int] = field(default=time.time_ns)  # wall-clock ns: the time index's samples

    def require_credentials(
        self, read_write_secret: bytes | str, read_only_secret: bytes | str | None = None
    ) -> ArchiveContext:
        """Accept only clients presenting one of the secrets: the read-write one may do everything, the read-only
        one may list, query positions and replay (`authorisation.READ_ONLY_ACTIONS`)."""
        self.authenticator = CredentialsAuthenticator(read_write_secret, read_only_secret)
        self.authorisation_service = ReadOnlyAuthorisationService()
        return self

    def conclude(self) -> ArchiveContext:
        """Validate every setting, naming the bad one, before any thread or file is touched."""
        if not self.archive_dir:
            raise ValueError("archive_dir must be set")
        self.archive_dir = os.path.abspath(self.archive_dir)
        if self.mark_file_dir is not None:
            self.mark_file_dir = os.path.abspath(self.mark_file_dir)
        if not ERROR_BUFFER_LENGTH_DEFAULT <= self.error_buffer_length <= (1 << 31) - 1 - HEADER_LENGTH:
            raise ValueError(f"invalid errorBufferLength={self.error_buffer_length} (at least 1 MiB, as Java's)")
        if self.mark_file_liveness_timeout_ms <= 0:
            raise ValueError(f"mark_file_liveness_timeout_ms must be > 0: {self.mark_file_liveness_timeout_ms}")
        seg = self.segment_file_length
        if not _is_power_of_two(seg) or not c.SEGMENT_FILE_LENGTH_MIN <= seg <= c.SEGMENT_FILE_LENGTH_MAX:
            raise ValueError(f"segment_file_length must be a power of 2 in [64 KiB, 1 GiB]: {seg}")
        io_max = self.file_io_max_length
        if not _is_power_of_two(io_max) or io_max < c.FILE_IO_MAX_LENGTH_MIN:
            raise ValueError(f"file_io_max_length must be a power of 2 and >= 64 KiB: {io_max}")
        for name in ("file_sync_level", "catalog_file_sync_level"):
            if getattr(self, name) not in (0, 1, 2):
                raise ValueError(f"{name} must be 0, 1 or 2: {getattr(self, name)}")
        if self.catalog_file_sync_level < self.file_sync_level:
            raise ValueError(
                f"catalog_file_sync_level ({self.catalog_file_sync_level}) must be >= "
                f"file_sync_level ({self.file_sync_level})"
            )
        for name in ("control_channel", "local_control_channel"):
            value = getattr(self, name)
            if value is not None:
                try:
                    uri = ChannelUri.parse(value)
                except ChannelError as ex:
                    raise ValueError(f"{name}: {ex}") from None
                if name == "control_channel" and not uri.is_udp:
                    raise ValueError(f"control_channel must be a UDP channel: {value}")
        if self.recording_events_enabled:
            ChannelUri.parse(self.recording_events_channel)
        if self.max_concurrent_recordings < 1 or self.max_concurrent_replays < 1:
            raise ValueError("max_concurrent_recordings and max_concurrent_replays must be >= 1")
        if self.time_index_interval_ns < 0:
            raise ValueError(
                f"time_index_interval_ns must be >= 0 (0 turns the time index off): {self.time_index_interval_ns}"
            )
        if self.catalog_capacity < 32:
            raise ValueError(f"catalog_capacity must be >= 32: {self.catalog_capacity}")
        if self.metrics_address is not None:
            from aeron_archive_spark.archive.server.metrics import parse_address

            parse_address(self.metrics_address)  # raises ValueError naming metrics_address
        for name in ("record_checksum", "replay_checksum"):
            value = getattr(self, name)
            if value:
                from aeron_archive_spark.archive.storage.checksums import checksum_for_name

                checksum_for_name(value)  # raises ValueError naming the unknown checksum
        return self
