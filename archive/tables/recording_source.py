"""`RecordingSource`: what the driver-side planner asks of "where the recordings are", for both locations.

- `DiskRecordingSource` (`archiveDir`): the catalog is opened read-only afresh for every question (it is small and
  memory-mapped; the archive may be writing it), never written. An active recording's end is its `rec-pos` counter
  when a media driver is reachable on this host (`aeronDir`, or the default directory if a driver runs there);
  otherwise it is the end of the last complete frame found by scanning forward in its last segment file. That scan
  is safe because the recorder appends whole blocks with one `pwrite` each and executors read the range only
  after planning, but it cannot tell an idle live recording from a stopped one until the catalog says so.
- `RemoteRecordingSource` (running archive): descriptors and positions through the control protocol; an active
  recording's end is read from its `rec-pos` counter when the archive's counters are visible in the local media
  driver (same host), else with `RecordingPositionRequest`.

Connections: counter reads and planning requests go through the process's connection pool
(`archive.client.pool`), on the host's media driver only (the counters of an embedded driver never show the
archive's recordings, and the planner must fail clearly when `aeronDir` names no driver). A remote source leases a
control session per question and hands it back at once, so the replays of its boundary scans (which follow the
replay path's own driver rule) and later questions reuse it; between micro-batches nothing is held but what the
pool keeps idle.

Both clamp an active recording's end to a message boundary: an end offset must never fall inside a fragmented
message, because the next micro-batch starts there. `boundary_at_or_before` scans forward from a known boundary
(or a term start, which Aeron's appenders never let a message straddle) through the same `ChunkSource` executors
use, and results are cached per recording, so a trigger re-reads at most the new tail. A stopped recording needs
no scan when planning (`planning_end`): its stop is a frame boundary, and the reader of a range ending there drops
a message left open by a crash or truncation (`ReadRange.ends_at_stop`), so planning a read of a thousand stopped
recordings through an archive costs one listing, not a replay each.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from aeron_archive_spark.archive import recording_pos
from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.connection import default_aeron_dir
from aeron_archive_spark.archive.client.host import requires_host_driver
from aeron_archive_spark.archive.client.pool import ConnectionPool, NoMediaDriverError, connection_pool
from aeron_archive_spark.archive.constants import (
    CATALOG_FILE_NAME,
    NULL_COUNTER_ID,
    NULL_POSITION,
)
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import (
    ArchiveDisconnectedError,
    ArchiveError,
    ArchiveTimeoutError,
    ErrorCode,
)
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.frames import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    ScanStop,
    scan_frames,
)
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.storage.time_index import TimeIndexError
from aeron_archive_spark.archive.storage.time_index_search import (
    RecordingGeometry,
    RecordingTimeIndex,
    TimeIndexUnavailable,
)
from aeron_archive_spark.archive.tables.chunks import ChunkSource, DiskChunkSource
from aeron_archive_spark.archive.tables.field_times import FieldTimeSeek
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.payload import payload_decoder
from aeron_archive_spark.archive.tables.ranges import (
    ReadLocation,
    ReadRange,
    RecordingFacts,
    RunningArchive,
    SegmentFiles,
)
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource

log = logging.getLogger(__name__)

T = TypeVar("T")

# Boundary scans need only the frames near one position: small chunks keep them cheap.
_SCAN_CHUNK = 256 * 1024
_TAIL_CHUNK = 1024 * 1024
_NS_PER_MS = 1_000_000
_BY_POSITION = (
    "; read it by position (startingPosition/endingPosition) instead, or, with sbeSchema, name the messages' own "
    "time field in timestampField"
)


class RecordingNotFoundError(LookupError):
    """A selected recording does not exist (or no longer exists) at the location."""


class TimeIndexMissingError(ValueError):
    """A time falls where a recording's recorded times are unknown: it has no time index (recorded by Java's
    archive, with the index off, or before it existed), or the index begins after the time."""


class RecordingSource(ABC):
    """Descriptors, ends and start positions of the selected recordings at one location."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # recording id -> (recorded end, safe end) of the last clamp: a trigger re-scans only when the end moved.
        self._clamped: dict[int, tuple[int, int]] = {}

    # -- location specific -----------------------------------------------------------------------------------

    @abstractmethod
    def describe(self) -> str:
        """The location, for messages."""

    @abstractmethod
    def list_selected(self, from_id: int = 0) -> dict[int, RecordingDescriptor]:
        """Fresh descriptors of the selected recordings that exist, by id (ids the selection names may be missing);
        only those with an id >= `from_id` (recording ids only grow: newer recordings)."""

    @abstractmethod
    def find_recordings(self, ids: Iterable[int]) -> dict[int, RecordingDescriptor]:
        """Fresh descriptors of those of `ids` that exist (selected or not), by id."""

    def refresh(self, ids: Iterable[int], from_id: int | None) -> dict[int, RecordingDescriptor]:
        """`find_recordings(ids)`, plus `list_selected(from_id)` unless `from_id` is None (one question each)."""
        found = self.find_recordings(ids)
        if from_id is not None:
            found.update(self.list_selected(from_id))
        return found

    @abstractmethod
    def recorded_end(self, descriptor: RecordingDescriptor) -> int:
        """How far the recording is recorded now: its stop position, or an active recording's live position."""

    @abstractmethod
    def chunk_source(self) -> ChunkSource:
        """The reader used for boundary scans on the driver (the same kind executors use)."""

    @abstractmethod
    def location(self) -> ReadLocation:
        """Where the ranges planned from this source read their recordings."""

    def placements(self, limits: Mapping[int, int]) -> dict[int, ReadLocation] | None:
        """Where each recording's ranges up to its limit (recording id -> limit) are read, when that differs per
        recording (copies on several archives); None when every range reads `location()`."""
        return None

    @abstractmethod
    def _position_at_time(self, descriptor: RecordingDescriptor, time_ns: int, end: int) -> int | None:
        """The first position below `end` recorded at or after `time_ns` per the location's time index; None when
        none is; `TimeIndexMissingError` when the index cannot tell."""

    def close(self) -> None:  # noqa: B027 - optional: most sources hold nothing that needs releasing
        """Release what the source holds (connections and clients belong to the pool, not to sources)."""

    # -- generic ---------------------------------------------------------------------------------------------

    def position_at_time(self, descriptor: RecordingDescriptor, time_ns: int, end: int) -> int | None:
        """Where a read by time starts or ends: the first position below `end` whose message the archive recorded
        at or after `time_ns` (epoch ns), None when no message up to `end` was.

        The time index decides. Without one (Java's recordings, or the index off): with `timestampField`, the
        messages' own time field (`field_times`); else the catalog still answers the ends, a time at or before the
        recording's start timestamp being its start position and one after a stopped recording's stop timestamp
        having no message, and any other time is an error naming the recording and what to do.
        """
        try:
            position = self._position_at_time(descriptor, time_ns, end)
        except TimeIndexMissingError:
            options = self.options
            if options.timestamp_field is not None:
                return self._position_by_field(descriptor, time_ns, end)
            if time_ns <= descriptor.start_timestamp * _NS_PER_MS:
                return descriptor.start_position
            if not descriptor.is_active and time_ns >= (descriptor.stop_timestamp + 1) * _NS_PER_MS:
                return None
            raise
        return position if position is not None and position < end else None

    def _position_by_field(self, descriptor: RecordingDescriptor, time_ns: int, end: int) -> int | None:
        decoder = payload_decoder(self.options)
        assert decoder is not None and self.options.timestamp_field is not None  # options demand sbeSchema
        seek = FieldTimeSeek(
            descriptor,
            end,
            self.chunk_source(),
            self.location(),
            decoder,
            self.options.timestamp_field,
            self.options.timestamp_field_unit_ns,
        )
        return seek.position_at_or_after(time_ns)

    def selected(self) -> dict[int, RecordingDescriptor]:
        """The selected recordings by id, ascending; explicitly named ids that do not exist raise."""
        found = self.list_selected()
        ids = self.options.selection.recording_ids
        if ids is not None:
            missing = [rid for rid in ids if rid not in found]
            if missing:
                raise RecordingNotFoundError(f"recording {missing[0]} not found in the {self.describe()}")
        return dict(sorted(found.items()))

    def safe_end(self, descriptor: RecordingDescriptor, known_boundary: int | None = None) -> int:
        """The recorded end clamped back to the end of the last complete message."""
        rid = descriptor.recording_id
        raw = self.recorded_end(descriptor)
        if raw <= descriptor.start_position:
            return descriptor.start_position
        cached = self._clamped.get(rid)
        if cached is not None and cached[0] == raw:
            return cached[1]
        floor = descriptor.start_position
        for hint in (known_boundary, cached[1] if cached else None):
            if hint is not None and floor < hint <= raw:
                floor = hint
        safe = self.boundary_at_or_before(descriptor, raw, floor, raw)
        self._clamped[rid] = (raw, safe)
        if safe != raw:
            log.debug("recording %d: end %d clamped to message boundary %d", rid, raw, safe)
        return safe

    def planning_end(self, descriptor: RecordingDescriptor, known_boundary: int | None = None) -> int:
        """Where a read of the recording may end now: a stopped recording's stop position as it is, else `safe_end`.

        A stop is always a frame boundary; a message still open there (cut short by a crash or a truncation) can
        never be completed, since an extension starts a new message at the stop. Ranges planned up to a stop are
        marked `ends_at_stop` (see `stopped_positions`) and their reader drops such a message, so no stopped
        recording's frames are looked at while planning: no replay per recording through an archive. An active
        recording's live end may fall inside a message that is still being written, so it is clamped.
        """
        if not descriptor.is_active:
            return max(descriptor.stop_position, descriptor.start_position)
        return self.safe_end(descriptor, known_boundary)

    def _partition(self, descriptor: RecordingDescriptor, start: int, end: int, limit: int) -> ReadRange:
        return ReadRange(-1, RecordingFacts.of(descriptor), start, end, limit, self.location())

    def _chunks(self, descriptor: RecordingDescriptor, start: int, limit: int) -> Iterator[tuple[memoryview, int]]:
        return self.chunk_source().iter_chunks(self._partition(descriptor, start, limit, limit))

    def boundary_at_or_before(self, descriptor: RecordingDescriptor, cut: int, floor: int, limit: int) -> int:
        """The last message boundary <= `cut`, not below `floor` (itself a boundary); `limit` bounds reads.

        Scans from the start of `cut`'s term (a message boundary in practice: Aeron never lets a message straddle
        terms) and steps back a term at a time while that finds none, down to `floor`.
        """
        if cut <= floor:
            return floor
        term_length = descriptor.term_buffer_length
        term_start = (cut - 1) - ((cut - 1) & (term_length - 1))
        while True:
            begin = max(floor, term_start)
            found = _last_boundary(self._chunks(descriptor, begin, limit), begin, cut, begin == floor)
            if found is not None:
                return found
            if begin == floor:
                return floor
            term_start -= term_length

    def first_boundary_after(self, descriptor: RecordingDescriptor, start: int, limit: int) -> int:
        """The end of the first complete message after `start` (a boundary), or `limit` if none ends before it."""
        if start >= limit:
            return limit
        found = _first_boundary(self._chunks(descriptor, start, limit), start)
        return limit if found is None or found > limit else found


def stopped_positions(descriptors: Iterable[RecordingDescriptor]) -> dict[int, int]:
    """Recording id -> stop position of the stopped ones: `plan_ranges`' `stops`."""
    return {d.recording_id: d.stop_position for d in descriptors if not d.is_active}


def _last_boundary(
    chunks: Iterator[tuple[memoryview, int]], begin: int, cut: int, begin_is_boundary: bool
) -> int | None:
    """The last position <= `cut` where no message is open, scanning frames from `begin`.

    A boundary is the end of a DATA frame with the END flag, or the end of padding while no message is open.
    """
    boundary: int | None = begin if begin_is_boundary else None
    open_: bool | None = False if begin_is_boundary else None
    try:
        for chunk, position in chunks:
            if position >= cut:
                break
            if open_ is False:
                boundary = position  # no message open: the next chunk (after any padding) starts at a boundary
            scan = scan_frames(chunk, 0, len(chunk), stop_at_padding=False)
            if scan.count:
                ends = position + scan.offsets + scan.aligned_lengths
                n = int(np.searchsorted(ends, cut, side="right"))
                if n:
                    types = scan.types[:n]
                    flags = scan.flags[:n]
                    data = types == HDR_TYPE_DATA
                    closing = np.flatnonzero(data & ((flags & END_FRAG_FLAG) != 0))
                    if closing.size:
                        last = int(closing[-1])
                        boundary, open_ = int(ends[last]), False
                        after = np.flatnonzero(data[last + 1 :])
                        if after.size:
                            first = last + 1 + int(after[0])
                            boundary = int(ends[first - 1])  # past any padding before the next message
                            open_ = True
                        elif last + 1 < n:
                            boundary = int(ends[n - 1])  # only padding after the last complete message
                    elif open_ is False:
                        first_data = np.flatnonzero(data)
                        if first_data.size:
                            if first_data[0] > 0:
                                boundary = int(ends[first_data[0] - 1])
                            open_ = True
                        else:
                            boundary = int(ends[n - 1])
                    elif open_ is None and bool((data & ((flags & BEGIN_FRAG_FLAG) != 0)).any()):
                        open_ = True
                if n < scan.count:
                    break
            if scan.stop_reason is ScanStop.ZERO_LENGTH:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return boundary


def _first_boundary(chunks: Iterator[tuple[memoryview, int]], start: int) -> int | None:
    open_ = False
    try:
        for chunk, position in chunks:
            if position > start and not open_:
                return position  # the previous chunk ended with padding: this one starts a message
            scan = scan_frames(chunk, 0, len(chunk), stop_at_padding=False)
            if scan.count:
                ends = position + scan.offsets + scan.aligned_lengths
                data = scan.types == HDR_TYPE_DATA
                closing = np.flatnonzero(data & ((scan.flags & END_FRAG_FLAG) != 0))
                if not open_:
                    pads = np.flatnonzero(scan.types == HDR_TYPE_PAD)
                    first_data = np.flatnonzero(data)
                    if pads.size and (not first_data.size or pads[0] < first_data[0]):
                        return int(ends[pads[0]])
                if closing.size:
                    return int(ends[closing[0]])
                if data.any():
                    open_ = True
            if scan.stop_reason is ScanStop.ZERO_LENGTH:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return None


# ---------------------------------------------------------------------------------------------------------------


class _Counters:
    """rec-pos counter reads through the pool's client on this host's media driver (absent when none runs here)."""

    def __init__(self, pool: ConnectionPool, aeron_dir: str | None, required: bool) -> None:
        self._pool = pool
        self._aeron_dir = aeron_dir
        self._required = required
        self._failed = False
        self._ids: dict[int, int] = {}

    def reader(self) -> Any:
        """The counters of the driver in `aeronDir` (else the default directory), or None if no driver runs there.

        Asked of the pool each time (a dictionary lookup), so a client the pool replaced is never used.
        """
        if self._failed:
            return None
        directory = self._aeron_dir or default_aeron_dir()
        if not self._required and not os.path.exists(os.path.join(directory, "cnc.dat")):
            self._failed = True
            return None
        try:
            return self._pool.client(directory, host_driver_only=True).counters_reader
        except Exception as ex:
            if self._required:
                detail = "" if isinstance(ex, NoMediaDriverError) else f": {ex}"
                raise OptionError(f"option aeronDir: no media driver reachable at {directory}{detail}") from ex
            log.debug("no media driver at %s, active recordings are tailed by scanning: %s", directory, ex)
            self._failed = True
            return None

    def position(self, descriptor: RecordingDescriptor, archive_id: int = -1) -> int | None:
        """The live rec-pos of an active recording, or None if no matching counter is allocated."""
        reader = self.reader()
        if reader is None:
            return None
        rid = descriptor.recording_id
        counter_id = self._ids.get(rid, NULL_COUNTER_ID)
        if counter_id == NULL_COUNTER_ID or not recording_pos.is_active(reader, counter_id, rid):
            counter_id = recording_pos.find_counter_id_by_recording(reader, rid, archive_id)
            if counter_id == NULL_COUNTER_ID:
                return None
            key = recording_pos.decode_key(reader.key(counter_id))
            if key[1] != descriptor.session_id or key[2] != descriptor.source_identity[: len(key[2])]:
                return None  # another archive's recording with the same id on this driver
            self._ids[rid] = counter_id
        value = int(reader.get(counter_id))
        if not recording_pos.is_active(reader, counter_id, rid):
            return None  # freed (recording stopped) while reading: the caller falls back to the descriptor
        return value

    def close(self) -> None:
        """Forget counter ids (the client is the pool's, not closed here)."""
        self._ids.clear()


class DiskRecordingSource(RecordingSource):
    """Recordings in `archiveDir`, read straight from the catalog and segment files."""

    def __init__(self, options: SourceOptions, pool: ConnectionPool | None = None) -> None:
        super().__init__(options)
        assert isinstance(options.location, SegmentFiles)
        self.archive_dir = options.location.archive_dir
        if not os.path.isfile(os.path.join(self.archive_dir, CATALOG_FILE_NAME)):
            raise OptionError(f"option archiveDir: no {CATALOG_FILE_NAME} in {self.archive_dir}")
        self._counters = _Counters(
            pool if pool is not None else connection_pool(), options.aeron_dir, required=options.aeron_dir is not None
        )
        self._tail: dict[int, int] = {}
        self._chunk_source = DiskChunkSource(_SCAN_CHUNK)
        # recording id -> (entry bytes, descriptor): listings decode only entries that changed since the last one
        self._decoded: dict[int, tuple[bytes, RecordingDescriptor]] = {}

    def describe(self) -> str:
        return f"archive directory {self.archive_dir} (archiveDir)"

    def _catalog(self) -> Catalog:
        try:
            return Catalog(self.archive_dir, writable=False)
        except ArchiveError as ex:
            raise OptionError(f"option archiveDir: cannot read the catalog of {self.archive_dir}: {ex}") from ex

    def list_selected(self, from_id: int = 0) -> dict[int, RecordingDescriptor]:
        with self._catalog() as catalog:
            return self._selected_in(catalog, from_id)

    def find_recordings(self, ids: Iterable[int]) -> dict[int, RecordingDescriptor]:
        with self._catalog() as catalog:
            return self._found_in(catalog, ids)

    def refresh(self, ids: Iterable[int], from_id: int | None) -> dict[int, RecordingDescriptor]:
        with self._catalog() as catalog:  # opening a catalog reads every entry's header: once for both
            found = self._found_in(catalog, ids)
            if from_id is not None:
                found.update(self._selected_in(catalog, from_id))
            return found

    def _found_in(self, catalog: Catalog, ids: Iterable[int]) -> dict[int, RecordingDescriptor]:
        found = (catalog.find_cached(rid, self._decoded) for rid in ids)
        return {d.recording_id: d for d in found if d is not None}

    def _selected_in(self, catalog: Catalog, from_id: int) -> dict[int, RecordingDescriptor]:
        selection = self.options.selection
        if selection.recording_ids is not None:
            return self._found_in(catalog, (rid for rid in selection.recording_ids if rid >= from_id))
        assert selection.channel is not None and selection.stream_id is not None
        # Matched on the entries' bytes, as the archive's ListRecordingsForUri does: only matches are decoded,
        # and only when their entry changed since this source last decoded it.
        fragment = selection.channel.encode("ascii", errors="replace")
        matched: dict[int, RecordingDescriptor] = {}
        for rid in catalog.recording_ids(max(from_id, 0)):
            if catalog.matches_uri(rid, selection.stream_id, fragment):
                descriptor = catalog.find_cached(rid, self._decoded)
                if descriptor is not None:
                    matched[rid] = descriptor
        if from_id <= 0:  # a full listing: forget what no longer exists
            for rid in [rid for rid in self._decoded if rid not in matched]:
                del self._decoded[rid]
        return matched

    def recorded_end(self, descriptor: RecordingDescriptor) -> int:
        if not descriptor.is_active:
            # Only a stopped recording can be truncated: a tail scanned earlier must not outlive a truncation
            # (an extension would then be scanned from past its first frames).
            rid = descriptor.recording_id
            if self._tail.get(rid, descriptor.stop_position) > descriptor.stop_position:
                self._tail[rid] = descriptor.stop_position
            return descriptor.stop_position
        live = self._counters.position(descriptor)
        if live is not None:
            return live
        with self._catalog() as catalog:  # stopped meanwhile?
            fresh = catalog.find(descriptor.recording_id)
        if fresh is not None and not fresh.is_active:
            return fresh.stop_position
        return self._scan_tail(descriptor)

    def _scan_tail(self, descriptor: RecordingDescriptor) -> int:
        """End of the last complete frame, scanning forward from the last known end (or the start)."""
        rid = descriptor.recording_id
        position = max(self._tail.get(rid, descriptor.start_position), descriptor.start_position)
        buffer = bytearray(_TAIL_CHUNK)
        with RecordingReader.for_descriptor(self.archive_dir, descriptor) as reader:
            while True:
                if not reader.segment_exists(position):
                    break
                n = reader.read_into(buffer, position, _TAIL_CHUNK)
                if n <= 0:
                    break
                scan = scan_frames(memoryview(buffer)[:n], 0, n, stop_at_padding=False)
                position += scan.stop_offset
                if scan.stop_reason is ScanStop.ZERO_LENGTH or scan.stop_offset == 0:
                    break  # not written yet, or a frame not wholly written
        self._tail[rid] = position
        return position

    def _position_at_time(self, descriptor: RecordingDescriptor, time_ns: int, end: int) -> int | None:
        geometry = RecordingGeometry(
            descriptor.recording_id,
            descriptor.start_position,
            end,
            descriptor.term_buffer_length,
            descriptor.segment_file_length,
        )
        try:  # the archive's own search (`PositionAtTimeRequest`): both read paths answer and fail alike
            position = RecordingTimeIndex(self.archive_dir, geometry).position_at_or_after(time_ns)
        except (TimeIndexUnavailable, TimeIndexError) as ex:
            raise TimeIndexMissingError(f"{ex}{_BY_POSITION}") from ex
        return None if position == NULL_POSITION else position

    def chunk_source(self) -> ChunkSource:
        return self._chunk_source

    def location(self) -> ReadLocation:
        return SegmentFiles(self.archive_dir)

    def close(self) -> None:
        self._counters.close()


class RemoteRecordingSource(RecordingSource):
    """Recordings of a running archive, through the control protocol (and local counters when visible)."""

    def __init__(self, options: SourceOptions, pool: ConnectionPool | None = None) -> None:
        super().__init__(options)
        assert isinstance(options.location, RunningArchive)
        self.connection = options.location.connection
        self.pool = pool if pool is not None else connection_pool()
        self._chunk_source: ChunkSource | None = None
        self._counters: _Counters | None = None

    def describe(self) -> str:
        return self.connection.describe()

    @contextmanager
    def _archive(self) -> Iterator[AeronArchive]:
        """A leased planner session; errors name the control channel, stream and driver.

        On the host's media driver, or (a UDP control channel and none runs on this host, as on a cluster's
        driver host) on the embedded driver executors use too.
        """
        lease = self.pool.archive(
            self.connection, purpose="planner", host_driver_only=requires_host_driver(self.connection)
        )
        try:
            archive = lease.acquire()
        except NoMediaDriverError as ex:
            raise OptionError(
                f"{ex}: start one there, set aeronDir (or $AERON_DIR), or read segment files directly with archiveDir"
            ) from ex
        with lease:  # a failed request closes the session instead of returning it
            yield archive

    def ask(self, what: str, request: Callable[[AeronArchive], T]) -> T:
        """`request` on a pooled planner session; errors name the archive.

        A session that stops answering (the archive was restarted: the new instance does not know the session,
        and the old response image lingers until its liveness timeout) is closed by its lease and replaced once,
        so a planner recovers by itself from an archive restart; a second failure is reported.
        """
        for attempt in (1, 2):
            try:
                with self._archive() as archive:
                    return request(archive)
            except (ArchiveTimeoutError, ArchiveDisconnectedError) as ex:
                if attempt == 1:
                    log.warning("%s: no answer from the %s (%s); retrying on a new session", what, self.describe(), ex)
                    continue
                raise ArchiveError(f"{what}: no answer from the {self.describe()}: {ex}", ex.error_code) from ex
            except ArchiveError as ex:
                raise ArchiveError(f"{what}: the {self.describe()} answered: {ex}", ex.error_code) from ex
        raise AssertionError("unreachable")

    def list_selected(self, from_id: int = 0) -> dict[int, RecordingDescriptor]:
        selection = self.options.selection
        if selection.recording_ids is not None:
            return self.find_recordings(rid for rid in selection.recording_ids if rid >= from_id)

        def listing(archive: AeronArchive) -> list[RecordingDescriptor]:
            assert selection.channel is not None and selection.stream_id is not None
            return archive.list_recordings_for_uri(max(from_id, 0), 2**31 - 1, selection.channel, selection.stream_id)

        return {d.recording_id: d for d in self.ask("listing recordings", listing)}

    def find_recordings(self, ids: Iterable[int]) -> dict[int, RecordingDescriptor]:
        wanted = list(ids)

        def listing(archive: AeronArchive) -> list[RecordingDescriptor]:
            found = [archive.list_recording(rid) for rid in wanted]
            return [d for d in found if d is not None]

        if not wanted:
            return {}
        return {d.recording_id: d for d in self.ask("listing recordings", listing)}

    def recorded_end(self, descriptor: RecordingDescriptor) -> int:
        if not descriptor.is_active:
            return descriptor.stop_position
        if self._counters is None:
            self._counters = _Counters(self.pool, self.connection.aeron_dir, required=False)
        counters = self._counters

        def position(archive: AeronArchive) -> int:
            live = counters.position(descriptor, archive.archive_id())
            if live is not None:
                return live
            recorded = archive.get_recording_position(descriptor.recording_id)
            if recorded != NULL_POSITION:
                return int(recorded)
            return int(archive.get_stop_position(descriptor.recording_id))

        return self.ask(f"the recorded position of recording {descriptor.recording_id}", position)

    def _position_at_time(self, descriptor: RecordingDescriptor, time_ns: int, end: int) -> int | None:
        rid = descriptor.recording_id

        def lookup(archive: AeronArchive) -> int:
            try:
                return int(archive.position_at_time(rid, time_ns))
            except ArchiveError as ex:
                if ex.error_code != ErrorCode.GENERIC or isinstance(ex, ArchiveDisconnectedError | ArchiveTimeoutError):
                    raise  # unknown recording, or no answer: not about the time index
                raise TimeIndexMissingError(f"{ex.message}{_BY_POSITION}") from ex

        position = self.ask(f"the position of time {time_ns} ns in recording {rid}", lookup)
        return None if position == NULL_POSITION else position

    def chunk_source(self) -> ChunkSource:
        if self._chunk_source is None:
            self._chunk_source = ReplayChunkSource(pool=self.pool)
        return self._chunk_source

    def location(self) -> ReadLocation:
        return RunningArchive(self.connection)

    def close(self) -> None:
        """Nothing to release but cached counter ids: sessions and clients are the pool's."""
        if self._counters is not None:
            self._counters.close()
            self._counters = None
