"""Giving a replica its source's times: rewriting a range of a recording's `.tix` files from another archive's samples.

A replica's recorder dates what it writes by its own clock, when the replay reached it; the user asked when the
*source* recorded it. A replication from an archive that answers the time index therefore fetches the source's
samples for the range it replicated and `TimeIndexCopy` rewrites the replica's files with them, keeping the layout
`time_index` guarantees (one file per segment, each file's first sample at its segment's first recorded byte, times
never decreasing), so every reader and `RecordingTimeIndex` work on a replica as on any recording.

Each file is rewritten whole: the replica's own samples below the range (an extension keeps what it had), the
source's in the range (its governing sample moved to the range's or segment's first byte, as a source reader would
date it), the replica's own at or past the range's end (an extension made since, or samples a crash left past the
stop, which readers ignore). A file is written to `<name>.tmp`, synced (when the archive syncs its files:
`file_sync_level` > 0) and renamed over the old one: a kill -9 leaves the old file or the new one, never a torn one
(a stale `.tmp`, which no reader lists, is overwritten by the next copy and removed by `delete-orphaned-segments`).
Files go in position order, and a replica's own times are never earlier than the source's for the same bytes (it
recorded them later), so after a crash between two renames, or a copy given up half-way, the index still never goes
back in time.

Bounded, for recordings of months (a busy one has ~6 MB of samples an hour at the default 10 ms interval):

- **Steps.** The range is asked of the source `step_segments` segments at a time (`next_request`), at most two steps
  held at once: one being written while the next one's answer arrives. Each answer is spooled, as it arrives, to an
  unnamed temporary file in the archive directory (gone with the process, whatever kills it), and only a step
  whose answer is complete (its count checked: `on_step_end`) is written into the replica's files.
- **Work per call.** `do_work` copies at most `CHUNK_SAMPLES` samples and renames (and syncs) at most one file, so
  a caller on a duty cycle (the conductor) is never held for more than 64 KiB of copying and one file's rename (and
  fsync), however many segments or samples the range has.
- **Memory.** One chunk being copied (64 KiB, plus its checks) and the one message being spooled: about 0.2 MB at
  peak whatever the range's length; a replica's own samples are read by binary search and in chunks, never whole.

Refusals (`TimeIndexCopyRefused`): the source cannot date the range's first byte (its index begins later, or it
sent no sample), or its times would go back (below the replica's own earlier samples: an extension of a replica
dated by itself). Both are found before the first file is replaced, so nothing is written; a refusal further on (a
source sending samples out of order), a replica file that is not an index (`TimeIndexError`), or a disk error
leave the files already renamed with the source's times and the rest with the replica's own: as a crash does.

The caller passes `limits`, read again before each file is begun and before it is renamed: the replica's start
position and the position from which a recorder may append (for a recording being recorded, the base of the segment
it writes; else its stop). A file outside them (an extension started, a truncation or purge happened meanwhile)
ends the copy there (a refusal), so no file the recorder may still append to is ever replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from aeron_archive_spark.archive.storage.time_index import (
    HEADER,
    HEADER_LENGTH,
    MAGIC,
    SAMPLE_LENGTH,
    VERSION,
    TimeIndex,
    time_index_file_name,
)
from aeron_archive_spark.archive.storage.time_index_search import SAMPLE_DTYPE, RecordingGeometry, SampleFile

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
# Segments asked of the source per request: few round trips on small segments, a bounded spool on large ones.
STEP_SEGMENTS = 16
# Samples copied per `do_work` (64 KiB): the bound on a call's copying and on the copy's memory.
CHUNK_SAMPLES = 4096
_NO_TIME = int(np.iinfo(np.int64).min)
_ALL = int(np.iinfo(np.int64).max)

type Limits = Callable[[], tuple[int, int]]
type _Reader = Callable[[int, int], npt.NDArray[np.void]]


class TimeIndexCopyRefused(ValueError):
    """The source's samples cannot date the range without breaking the index's rules (the replica keeps its own)."""


@dataclass(slots=True)
class _Step:
    """One request's range and its answer, spooled to an unnamed file as it arrives."""

    low: int
    high: int
    spool: BinaryIO
    count: int = 0
    last_position: int = -1  # of the last sample spooled
    ended: bool = False
    cursor: int = 0  # the first spooled sample not yet written into a file
    next_base: int = -1  # the next file to write (-1: the step's first)

    def read(self, begin: int, end: int) -> npt.NDArray[np.void]:
        raw = os.pread(self.spool.fileno(), (end - begin) * SAMPLE_LENGTH, begin * SAMPLE_LENGTH)
        return np.frombuffer(raw, dtype=SAMPLE_DTYPE, count=len(raw) // SAMPLE_LENGTH)

    def position_at(self, index: int) -> int:
        return int(self.read(index, index + 1)["position"][0])

    def first_at_or_after(self, position: int) -> int:
        """The index of the first spooled sample at or past `position` (`count` if none), by binary search."""
        low, high = self.cursor, self.count
        while low < high:
            middle = (low + high) // 2
            if self.position_at(middle) < position:
                low = middle + 1
            else:
                high = middle
        return low


@dataclass(slots=True)
class _FileRewrite:
    """One file being written beside its name: the parts of its new content still to copy, in order."""

    base: int
    seg_low: int
    seg_high: int
    path: str
    fd: int
    own: SampleFile | None
    parts: deque[tuple[_Reader, int, int]] = field(default_factory=deque)

    @property
    def temp(self) -> str:
        return self.path + TEMP_SUFFIX

    def close(self, remove: bool) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.own is not None:
            self.own.close()
            self.own = None
        if remove:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.temp)


class TimeIndexCopy:
    """Dates the replica's positions `[from, to)` (clipped to its start and to what no recorder writes) by the
    source's samples, in bounded steps (see the module docstring). The caller asks the source for each range
    `next_request` gives, hands its samples to `on_samples` and its count to `on_step_end`, and calls `do_work`
    until `is_done`; `close` (always) removes whatever was left half-written."""

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        geometry: RecordingGeometry,
        from_position: int,
        to_position: int,
        limits: Limits,
        step_segments: int = STEP_SEGMENTS,
        sync: bool = True,
    ) -> None:
        """`sync`: fsync each file before its rename and the directory after the last (an archive's
        `file_sync_level` above 0); without it a kill -9 still leaves whole files (the page cache outlives the
        process), but a power loss may not, as it may not leave the recorder's own unsynced files whole."""
        if step_segments < 1:
            raise ValueError(f"step_segments must be at least 1: {step_segments}")
        self._dir = os.fspath(archive_dir)
        self._geometry = geometry
        self._limits = limits
        self._step_length = step_segments * geometry.segment_length
        start, writable = limits()
        self.low = max(from_position, geometry.start_position, start)
        self.high = min(to_position, writable)
        self._next_ask = self.low
        self._steps: deque[_Step] = deque()
        self._file: _FileRewrite | None = None
        self._floor = _NO_TIME if self.low >= self.high else self._time_before(geometry.base_of(self.low))
        self._interval_ns = 0
        self.files_written = 0
        self.samples_written = 0
        self.dated_to = self.low  # positions below it (from `low`) are dated by the source now
        self._sync = sync
        self._finished = self.low >= self.high

    # -- the source's side ----------------------------------------------------------------------------------------
    def next_request(self) -> tuple[int, int] | None:
        """The next range `[from, to)` to ask the source for, or None while two steps are held (or all asked)."""
        if self._next_ask >= self.high or len(self._steps) >= 2 or (self._steps and not self._steps[-1].ended):
            return None
        low = self._next_ask
        high = min(self.high, self._geometry.base_of(low) + self._step_length)
        self._next_ask = high
        spool = tempfile.TemporaryFile(dir=self._dir, prefix=".tix-copy-")  # noqa: SIM115 - closed with its step
        self._steps.append(_Step(low, high, spool))
        return low, high

    def on_samples(self, samples: npt.NDArray[np.void], interval_ns: int) -> None:
        """Samples of the awaited step's answer, in position order (spooled, not yet written anywhere)."""
        step = self._receiving()
        self._interval_ns = max(self._interval_ns, interval_ns)  # the widest: the header of every file written
        if len(samples) == 0:
            return
        samples = np.ascontiguousarray(samples, dtype=SAMPLE_DTYPE)
        if step.count == 0:
            first = int(samples["position"][0])
            if first > step.low:
                raise TimeIndexCopyRefused(
                    f"the source's time index does not date position {step.low} (its first sample at position "
                    f"{first}): its times there are unknown"
                )
            samples = samples.copy()
            samples["position"][0] = step.low  # the governing sample, where the source did not move it already
        positions = samples["position"]
        if int(positions[0]) <= step.last_position or bool(np.any(np.diff(positions) <= 0)):
            raise TimeIndexCopyRefused("the source's samples are not in position order")
        if int(positions[-1]) >= step.high:
            raise TimeIndexCopyRefused(f"the source sent a sample at or past position {step.high}, the range's end")
        os.pwrite(step.spool.fileno(), samples.tobytes(), step.count * SAMPLE_LENGTH)
        step.count += len(samples)
        step.last_position = int(positions[-1])

    def on_step_end(self, count: int) -> None:
        """The source's OK for the awaited step: `count` samples, which must all have come."""
        step = self._receiving()
        if count != step.count:
            raise TimeIndexCopyRefused(f"{step.count} time index samples received, the source sent {count}")
        if step.count == 0:
            raise TimeIndexCopyRefused(
                f"the source's time index does not date position {step.low} (no sample): its times there are unknown"
            )
        step.ended = True

    def _receiving(self) -> _Step:
        if not self._steps or self._steps[-1].ended:
            raise RuntimeError("no time index step is awaited")
        return self._steps[-1]

    # -- the replica's files ------------------------------------------------------------------------------------
    @property
    def is_done(self) -> bool:
        return self._next_ask >= self.high and not self._steps and self._file is None and self._finished

    def do_work(self) -> int:
        """Copy at most `CHUNK_SAMPLES` samples of the step whose answer is complete, renaming at most one file;
        returns the work done (0: waiting for the source, or done)."""
        if self._file is None:
            if not self._steps or not self._steps[0].ended:
                if self._next_ask >= self.high and not self._steps and not self._finished:
                    if self._sync:
                        _sync_directory(self._dir)
                    self._finished = True
                    log.debug(
                        "recording %d: positions [%d, %d) now dated by the source's time index (%d files)",
                        self._geometry.recording_id,
                        self.low,
                        self.high,
                        self.files_written,
                    )
                    return 1
                return 0
            self._file = self._begin(self._steps[0])
        rewrite = self._file
        self._copy_chunk(rewrite)
        if not rewrite.parts:
            self._finish(rewrite)
        return 1

    def close(self) -> None:
        """Remove the file being written (its old one stays) and the spools; the copy ends where it got."""
        rewrite, self._file = self._file, None
        if rewrite is not None:
            rewrite.close(remove=True)
        while self._steps:
            self._steps.popleft().spool.close()

    def _begin(self, step: _Step) -> _FileRewrite:
        """Plan the next file of `step`: the replica's own samples below and above the part the step dates, the
        source's in it (the governing one moved to its first byte); open its temp file with its header."""
        g = self._geometry
        base = g.base_of(step.low) if step.next_base < 0 else step.next_base
        seg_low, seg_high = max(base, step.low), min(base + g.segment_length, step.high)
        self._check_limits(seg_low, seg_high)
        path = os.path.join(self._dir, time_index_file_name(g.recording_id, base))
        try:
            own: SampleFile | None = SampleFile(path, _ALL)
        except FileNotFoundError:
            own = None
        try:
            fd = os.open(path + TEMP_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except BaseException:
            if own is not None:
                own.close()
            raise
        rewrite = _FileRewrite(base, seg_low, seg_high, path, fd, own)
        try:
            below_end = above_begin = 0
            own_interval = kept_interval = 0
            last_own_time: int | None = None
            if own is not None:
                below_end, above_begin = own.first_after(seg_low - 1), own.first_after(seg_high - 1)
                own_interval = own.interval_ns
                if below_end > 0:
                    rewrite.parts.append((own.read, 0, below_end))
                    last_own_time = own.sample(below_end - 1)[0]
                if below_end > 0 or above_begin < own.count:
                    kept_interval = own_interval
            end = step.first_at_or_after(seg_high)
            begin = step.cursor
            if begin >= end or step.position_at(begin) != seg_low:
                # No source sample at the first byte: the last one before it governs it, moved there.
                if begin == 0:
                    raise TimeIndexCopyRefused(f"the source's time index does not date position {seg_low}")
                governing = step.read(begin - 1, begin).copy()
                governing["position"][0] = seg_low
                if last_own_time != int(governing["time_ns"][0]):
                    rewrite.parts.append((_constant(governing), 0, 1))
            elif last_own_time == int(step.read(begin, begin + 1)["time_ns"][0]):
                begin += 1  # the replica's last sample already dates the range's first byte so (an earlier copy's)
            if begin < end:  # else nothing of the source's falls in this segment past what dates its first byte
                rewrite.parts.append((step.read, begin, end))
            if own is not None and above_begin < own.count:
                rewrite.parts.append((own.read, above_begin, own.count))
            step.cursor = end
            interval = max(self._interval_ns, kept_interval) or own_interval
            os.write(fd, HEADER.pack(MAGIC, VERSION, HEADER_LENGTH, interval))
        except BaseException:
            rewrite.close(remove=True)
            raise
        step.next_base = base + g.segment_length
        return rewrite

    def _copy_chunk(self, rewrite: _FileRewrite) -> None:
        """Append up to `CHUNK_SAMPLES` of the file's parts to its temp file, checking times never go back."""
        budget = CHUNK_SAMPLES
        while rewrite.parts and budget > 0:
            read, begin, end = rewrite.parts[0]
            if begin >= end:  # an empty part: nothing to copy (never read: times[0] of nothing)
                rewrite.parts.popleft()
                continue
            take = min(end - begin, budget)
            chunk = read(begin, begin + take)
            if len(chunk) < take:
                raise OSError(f"short read copying time index samples into {rewrite.temp}")
            if begin + take >= end:
                rewrite.parts.popleft()
            else:
                rewrite.parts[0] = (read, begin + take, end)
            budget -= take
            times = chunk["time_ns"]
            if int(times[0]) < self._floor or bool(np.any(np.diff(times) < 0)):
                raise TimeIndexCopyRefused(
                    f"the source's times would go back in time in {rewrite.path} (the replica's earlier bytes are "
                    f"dated {self._floor} ns or later)"
                )
            self._floor = int(times[-1])
            data = chunk.tobytes()
            written = 0
            while written < len(data):
                written += os.write(rewrite.fd, data[written:])
            self.samples_written += len(chunk)

    def _finish(self, rewrite: _FileRewrite) -> None:
        """Sync the temp file and rename it over the old one (atomic on POSIX), if no recorder may append to it."""
        self._check_limits(rewrite.seg_low, rewrite.seg_high)
        if self._sync:
            os.fsync(rewrite.fd)
        rewrite.close(remove=False)
        os.replace(rewrite.temp, rewrite.path)
        self._file = None
        self.files_written += 1
        self.dated_to = rewrite.seg_high
        step = self._steps[0]
        if rewrite.seg_high >= step.high:
            self._steps.popleft().spool.close()

    def _check_limits(self, seg_low: int, seg_high: int) -> None:
        start, writable = self._limits()
        if seg_low < start or seg_high > writable:
            raise TimeIndexCopyRefused(
                f"the replica changed under the copy: positions [{seg_low}, {seg_high}) are no longer within "
                f"[{start}, {writable}), its start and what no recorder writes"
            )

    def _time_before(self, base: int) -> int:
        """The time of the replica's last sample in the files before `base` (the range must not start earlier), or
        the lowest int64 if it has none; files are read from the one before `base` down, usually just that one."""
        g = self._geometry
        first_base = g.base_of(g.start_position)
        base -= g.segment_length
        while base >= first_base:
            path = os.path.join(self._dir, time_index_file_name(g.recording_id, base))
            try:
                with SampleFile(path, _ALL) as own:
                    if own.count:
                        return own.sample(own.count - 1)[0]
            except FileNotFoundError:
                pass
            base -= g.segment_length
        return _NO_TIME


def _sync_directory(directory: str) -> None:
    """Make the renames durable (a power loss, not just a killed process)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _constant(samples: npt.NDArray[np.void]) -> _Reader:
    return lambda begin, end: samples[begin:end]


def copy_time_index(
    archive_dir: str | os.PathLike[str],
    geometry: RecordingGeometry,
    from_position: int,
    to_position: int,
    source: TimeIndex,
    writable_limit: int,
    step_segments: int = STEP_SEGMENTS,
) -> int:
    """`TimeIndexCopy` at once, from samples in memory (`AeronArchive.time_index`'s answer for `[from, to)`):
    date the replica's positions `[from, to)` (clipped to its start and to `writable_limit`) by `source`. Returns
    the number of files rewritten; raises `TimeIndexCopyRefused` (before writing anything if the source does not
    date the range's first byte or its times would go back there) and `TimeIndexError` for a replica file that is
    not a time index."""
    positions = np.asarray(source.positions, dtype=np.int64)
    times = np.asarray(source.times_ns, dtype=np.int64)
    copy = TimeIndexCopy(
        archive_dir,
        geometry,
        from_position,
        to_position,
        lambda: (geometry.start_position, writable_limit),
        step_segments,
    )
    try:
        while not copy.is_done:
            request = copy.next_request()
            if request is None:
                copy.do_work()
                continue
            low, high = request
            first = max(int(np.searchsorted(positions, low, side="right")) - 1, 0)
            end = int(np.searchsorted(positions, high, side="left"))
            answer = np.empty(max(end - first, 0), dtype=SAMPLE_DTYPE)
            answer["time_ns"], answer["position"] = times[first:end], positions[first:end]
            if len(answer) and int(answer["position"][0]) < low:
                answer["position"][0] = low  # the governing sample, moved as the source moves it
            for begin in range(0, len(answer), CHUNK_SAMPLES):
                copy.on_samples(answer[begin : begin + CHUNK_SAMPLES], source.interval_ns)
            copy.on_step_end(len(answer))
        return copy.files_written
    finally:
        copy.close()
