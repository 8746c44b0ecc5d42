"""The archive's answers from its time index (this project's requests, beyond Aeron's schema): PositionAtTime and
TimeIndex, for a client that has no access to the archive's disk (the Spark source on another host).

Both run on the conductor, as Aeron's listings do: a PositionAtTime is a few small `pread`s (a binary search over
the recording's `.tix` files, then within one: `storage.time_index_search`), answered at once. A TimeIndex answer
can be long (one sample per 10 ms of a busy recording), so `TimeIndexSession` streams it as a listing streams
descriptors: at most `MAX_MESSAGES_PER_WORK_CYCLE` messages of at most `MAX_SAMPLES_PER_MESSAGE` samples per duty
cycle, pausing while the client's responses are queued, then OK with the count. Each message is well under the
smallest response publication's max message length (64 KiB term / 8), so it is always offered whole.

Errors are the conductor's usual `ArchiveError`s, which the control session answers: UNKNOWN_RECORDING for an
unknown recording, GENERIC naming the recording for one without an index or a time before its index began.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator

import numpy as np
import numpy.typing as npt

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.conductor_port import ControlResponder
from aeron_archive_spark.archive.server.listing_session import ListingSession
from aeron_archive_spark.archive.storage.time_index import (
    NO_INDEX_INTERVAL,
    RANGE_DTYPE,
    SAMPLE_LENGTH,
    TimeIndexError,
)
from aeron_archive_spark.archive.storage.time_index_search import RecordingTimeIndex, TimeIndexUnavailable

log = logging.getLogger(__name__)

# 256 samples: a 4140-byte TimeIndexSamples (8 header + 32 block + 4 length + 4096), half the 8 KiB max message of
# the smallest (64 KiB) response term, so a client's own term length never matters.
MAX_SAMPLES_PER_MESSAGE = 256
MAX_MESSAGES_PER_WORK_CYCLE = 16


def refusal(ex: TimeIndexUnavailable | TimeIndexError) -> ArchiveError:
    """The error a client gets when the index cannot answer: the reason, naming the recording (or the file)."""
    return ArchiveError(str(ex), ErrorCode.GENERIC)


def position_at_time(index: RecordingTimeIndex, time_ns: int) -> int:
    """The OK's relevantId for a PositionAtTime request, or `ArchiveError` naming why there is none."""
    try:
        return index.position_at_or_after(time_ns)
    except (TimeIndexUnavailable, TimeIndexError) as ex:
        raise refusal(ex) from ex


class TimeIndexSession(ListingSession):
    """One TimeIndex answer: TimeIndexSamples messages (at least one, so that the interval is told even when no
    sample dates the range; each carries the widest interval of the files read so far, and the client keeps the
    widest), then OK(relevantId = the number of samples). The samples are read as they are sent,
    never all at once; a file that turns out not to be an index mid-way ends the answer with an error."""

    def __init__(
        self,
        control_session: ControlResponder,
        correlation_id: int,
        index: RecordingTimeIndex,
        from_position: int,
        to_position: int,
    ) -> None:
        super().__init__(control_session, correlation_id)
        self._index = index
        self._recording_id = index.geometry.recording_id
        self._chunks: Generator[npt.NDArray[np.void]] = index.samples(
            from_position, to_position, MAX_SAMPLES_PER_MESSAGE
        )
        self._pending: bytes | None = None
        self._messages = 0
        self._count = 0
        try:  # the first read: an index that cannot answer is refused as the request's answer, before any message
            self._pending = self._next_chunk()
        except (TimeIndexUnavailable, TimeIndexError) as ex:
            self._done = True
            raise refusal(ex) from ex

    def _next_chunk(self) -> bytes | None:
        chunk = next(self._chunks, None)
        if chunk is None:
            return None
        self._count += len(chunk)
        return chunk.tobytes()

    def do_work(self, now_ns: int) -> int:
        if self._done:
            return 0
        work = 0
        while work < MAX_MESSAGES_PER_WORK_CYCLE:
            if self._pending is None and self._messages > 0:
                self._control_session.send_ok(self._correlation_id, self._count)
                self._done = True
                return work + 1
            samples = self._pending if self._pending is not None else b""
            if not self._control_session.send_time_index_samples(
                self._correlation_id, self._recording_id, self._index.interval_ns, samples
            ):
                return work  # back-pressured: offer the same samples next cycle
            self._messages += 1
            work += 1
            assert len(samples) % SAMPLE_LENGTH == 0
            try:
                self._pending = self._next_chunk()
            except (TimeIndexUnavailable, TimeIndexError) as ex:
                self._control_session.send_error(self._correlation_id, ErrorCode.GENERIC, str(ex))
                self._done = True
                return work
        return work

    def close(self) -> None:
        self._done = True
        self._chunks.close()  # the file it was reading

    def abort(self, reason: str = "") -> None:
        self.close()


def time_index_ranges(raw: bytes) -> npt.NDArray[np.void]:
    """The (recordingId, fromPosition, toPosition) triples of a TimeIndexesRequest; `ArchiveError` if it holds
    something else."""
    if len(raw) % RANGE_DTYPE.itemsize:
        raise ArchiveError(f"TimeIndexesRequest ranges of {len(raw)} bytes: not (recordingId, from, to) int64 triples")
    return np.frombuffer(raw, dtype=RANGE_DTYPE)


class TimeIndexesSession(ListingSession):
    """One TimeIndexes answer: for each range in order, its samples (TimeIndexSamples messages, none of them empty),
    then one empty TimeIndexSamples closing it (intervalNs: the range's widest interval, or `NO_INDEX_INTERVAL` when the
    recording is unknown or has no index: such a range is answered, not an error, so one recording without an
    index never costs the others theirs); then OK(relevantId = the number of ranges).

    It lets a reader of many small recordings (a Spark partition of hundreds) date them in one round trip instead
    of one TimeIndexRequest each. `index_of` builds a range's `RecordingTimeIndex` (raising `ArchiveError` for an
    unknown recording); files are read as their samples are sent."""

    def __init__(
        self,
        control_session: ControlResponder,
        correlation_id: int,
        ranges: npt.NDArray[np.void],
        index_of: Callable[[int], RecordingTimeIndex],
    ) -> None:
        super().__init__(control_session, correlation_id)
        self._ranges = ranges
        self._index_of = index_of
        self._next_range = 0
        self._current: tuple[int, RecordingTimeIndex, Generator[npt.NDArray[np.void]]] | None = None
        self._pending: bytes | None = None  # samples of the current range not yet sent
        self._closing: tuple[int, int] | None = None  # (recording id, interval) of the empty message to send

    def _open_next(self) -> bool:
        """Start answering the next range; False when none is left."""
        if self._next_range >= len(self._ranges):
            return False
        row = self._ranges[self._next_range]
        self._next_range += 1
        recording_id = int(row["recording_id"])
        try:
            index = self._index_of(recording_id)
            chunks = index.samples(int(row["from_position"]), int(row["to_position"]), MAX_SAMPLES_PER_MESSAGE)
            self._current = (recording_id, index, chunks)
            self._pending = self._next_chunk()
        except (ArchiveError, TimeIndexUnavailable, TimeIndexError) as ex:
            log.debug("time indexes: recording %d not dated: %s", recording_id, ex)
            self._current = None
            self._pending = None
            self._closing = (recording_id, NO_INDEX_INTERVAL)
        return True

    def _next_chunk(self) -> bytes | None:
        assert self._current is not None
        recording_id, index, chunks = self._current
        chunk = next(chunks, None)
        while chunk is not None and len(chunk) == 0:
            chunk = next(chunks, None)
        if chunk is None:
            self._closing = (recording_id, index.interval_ns)
            self._current = None
            return None
        return chunk.tobytes()

    def do_work(self, now_ns: int) -> int:
        work = 0
        while not self._done and work < MAX_MESSAGES_PER_WORK_CYCLE:
            if self._closing is not None:
                recording_id, interval = self._closing
                if not self._control_session.send_time_index_samples(self._correlation_id, recording_id, interval, b""):
                    return work
                self._closing = None
                work += 1
                continue
            if self._pending is not None and self._current is not None:
                recording_id, index, _ = self._current
                if not self._control_session.send_time_index_samples(
                    self._correlation_id, recording_id, index.interval_ns, self._pending
                ):
                    return work
                work += 1
                try:
                    self._pending = self._next_chunk()
                except (TimeIndexUnavailable, TimeIndexError) as ex:
                    self._control_session.send_error(self._correlation_id, ErrorCode.GENERIC, str(ex))
                    self.close()
                    return work
                continue
            if not self._open_next():
                self._control_session.send_ok(self._correlation_id, len(self._ranges))
                self._done = True
                return work + 1
        return work

    def close(self) -> None:
        self._done = True
        if self._current is not None:
            self._current[2].close()
        self._current = None

    def abort(self, reason: str = "") -> None:
        self.close()
