"""Searching one recording's time index in place, for an archive answering requests about it.

`time_index.read_time_index` reads every `.tix` file of a recording: right for a read that dates a whole range,
wrong for an archive asked "where does 09:30 begin?" about a recording of several months (thousands of files,
millions of samples) on every Spark plan. `RecordingTimeIndex` uses what the layout guarantees instead:

- The files are named by their segment's base position, and the bases follow from the catalog (start position,
  term and segment lengths), so no directory is listed: a file is found by its name.
- Each file's first sample dates its segment's first recorded byte, and times never decrease along positions, so
  a time is found by a binary search over the files' first samples, then a binary search within one file
  (16-byte `pread`s), never by reading samples that cannot hold the answer.
- Only samples below the recording's limit (its recorded position while active, else its stop position) count:
  one at or past it describes bytes not (yet) recorded.

A missing file between indexed ones (the index was off for a while) is stepped over by probing names upwards; a
recording whose first segments predate the index costs one `stat` per such segment, the only linear part.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aeron_archive_spark.archive.constants import NULL_POSITION
from aeron_archive_spark.archive.storage.segments import segment_file_base_position
from aeron_archive_spark.archive.storage.time_index import (
    HEADER,
    HEADER_LENGTH,
    MAGIC,
    SAMPLE,
    SAMPLE_LENGTH,
    VERSION,
    TimeIndexError,
    is_unwritten_header,
    time_index_file_name,
)

log = logging.getLogger(__name__)

SAMPLE_DTYPE = np.dtype([("time_ns", "<i8"), ("position", "<i8")])


class TimeIndexUnavailable(ValueError):
    """The recording's index cannot answer: it has none, or the time falls before the index began."""


@dataclass(frozen=True, slots=True)
class RecordingGeometry:
    """What names and bounds a recording's index files: its id, start, limit and segment layout."""

    recording_id: int
    start_position: int
    limit_position: int  # the recorded position of an active recording, else its stop position
    term_length: int
    segment_length: int

    def base_of(self, position: int) -> int:
        return segment_file_base_position(self.start_position, position, self.term_length, self.segment_length)

    def bases(self) -> list[int]:
        """Every segment base from the start's to the one holding the last recorded byte (the start's if none)."""
        last = self.base_of(max(self.limit_position - 1, self.start_position))
        return list(range(self.base_of(self.start_position), last + 1, self.segment_length))


class SampleFile:
    """One open `.tix` file: its interval, and its samples below the limit, read one or a run at a time (also what
    `time_index_copy` reads a replica's own samples with: a binary search and bounded runs, never the whole file)."""

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            raw = os.pread(self._fd, HEADER_LENGTH, 0)
            if is_unwritten_header(raw):  # a crash between creating the file and writing its header: no samples
                self.interval_ns = 0
                self.count = 0
                return
            magic, version, header_length, interval_ns = HEADER.unpack(raw)
            if magic != MAGIC or header_length != HEADER_LENGTH or version != VERSION:
                raise TimeIndexError(f"time index {path}: not a version {VERSION} time index file")
            self.interval_ns = int(interval_ns)
            whole = (os.fstat(self._fd).st_size - HEADER_LENGTH) // SAMPLE_LENGTH
            self.count = self._lower_bound(0, max(whole, 0), limit, 1)  # samples at or past the limit never count
        except BaseException:
            os.close(self._fd)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> SampleFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sample(self, index: int) -> tuple[int, int]:
        time_ns, position = SAMPLE.unpack(os.pread(self._fd, SAMPLE_LENGTH, HEADER_LENGTH + index * SAMPLE_LENGTH))
        return int(time_ns), int(position)

    def _lower_bound(self, low: int, high: int, key: int, field: int) -> int:
        """The first index in [low, high) whose time (field 0) or position (field 1) is >= key."""
        while low < high:
            middle = (low + high) // 2
            if self.sample(middle)[field] < key:
                low = middle + 1
            else:
                high = middle
        return low

    def first_time_at_or_after(self, time_ns: int) -> int:
        """The index of the first sample whose time is >= `time_ns` (`count` if none)."""
        return self._lower_bound(0, self.count, time_ns, 0)

    def last_at_or_before(self, position: int) -> int:
        """The index of the last sample at or before `position` (-1 if none)."""
        return self._lower_bound(0, self.count, position + 1, 1) - 1

    def first_after(self, position: int) -> int:
        return self._lower_bound(0, self.count, position + 1, 1)

    def read(self, begin: int, end: int) -> npt.NDArray[np.void]:
        raw = os.pread(self._fd, (end - begin) * SAMPLE_LENGTH, HEADER_LENGTH + begin * SAMPLE_LENGTH)
        return np.frombuffer(raw, dtype=SAMPLE_DTYPE, count=len(raw) // SAMPLE_LENGTH)


NO_INDEX_BASE = (1 << 63) - 1  # a hint: no file of the recording is indexed


class IndexHints:
    """What searches learned of recordings' indexes (the lowest segment base with a `.tix` file, or none at all),
    kept by the archive between requests so that a recording made before the index existed (or by Java's archive)
    is not probed file by file on every request. Valid while no index file appears below what was learned: the
    archive calls `invalidate()` whenever one may (a recording or an extension starts, segments are attached or
    migrated, a replica's index is copied). Files only ever disappear otherwise, which keeps the hints true."""

    def __init__(self) -> None:
        self._lowest: dict[int, int] = {}

    def lowest(self, recording_id: int) -> int | None:
        return self._lowest.get(recording_id)

    def learn(self, recording_id: int, base: int) -> None:
        self._lowest[recording_id] = base

    def invalidate(self) -> None:
        self._lowest.clear()


class RecordingTimeIndex:
    """One recording's time index as an archive searches it (see the module docstring); raises
    `TimeIndexUnavailable` where the index cannot answer and `TimeIndexError` for a file that is not an index."""

    def __init__(
        self, archive_dir: str | os.PathLike[str], geometry: RecordingGeometry, hints: IndexHints | None = None
    ) -> None:
        self._dir = os.fspath(archive_dir)
        self.geometry = geometry
        self._bases = geometry.bases()
        self._firsts: dict[int, tuple[int, int] | None] = {}
        self._any_file = False
        self.interval_ns = 0  # the widest interval of the files read so far: the bound on the times they give
        self._hints = hints
        # No file below this k (what an earlier search of this recording found): probes start here.
        lowest = hints.lowest(geometry.recording_id) if hints is not None else None
        self._floor = 0 if lowest is None else max(0, min(len(self._bases), self._k_of_base(lowest)))

    def _k_of_base(self, base: int) -> int:
        if base == NO_INDEX_BASE:
            return len(self._bases)
        return (base - self._bases[0]) // self.geometry.segment_length

    def _learned(self, k: int | None) -> None:
        """A search from file 0 found the lowest indexed file `k` (None: none at all): kept for later requests."""
        if self._hints is None:
            return
        self._hints.learn(self.geometry.recording_id, NO_INDEX_BASE if k is None else self._bases[k])

    def _path(self, k: int) -> str:
        return os.path.join(self._dir, time_index_file_name(self.geometry.recording_id, self._bases[k]))

    def _open(self, k: int) -> SampleFile | None:
        try:
            opened = SampleFile(self._path(k), self.geometry.limit_position)
        except FileNotFoundError:
            return None
        self._any_file = True
        self.interval_ns = max(self.interval_ns, opened.interval_ns)
        return opened

    def _first(self, k: int) -> tuple[int, int] | None:
        """The (time, position) of file k's first sample below the limit; None if it has none or is missing."""
        if k not in self._firsts:
            opened = self._open(k)
            if opened is None:
                self._firsts[k] = None
            else:
                with opened:
                    self._firsts[k] = opened.sample(0) if opened.count else None
        return self._firsts[k]

    def _first_indexed(self, low: int, high: int | None = None) -> int | None:
        """The lowest k in [low, high] whose file has a sample below the limit."""
        top = len(self._bases) - 1 if high is None else high
        for k in range(max(low, self._floor), top + 1):
            if self._first(k) is not None:
                return k
        return None

    def _k(self, position: int) -> int:
        return (self.geometry.base_of(position) - self._bases[0]) // self.geometry.segment_length

    def _check_indexed(self, low: int) -> None:
        """Raise unless some file of the recording exists (probing from file `low` up if none was seen yet)."""
        if self._any_file:
            return
        found = self._first_indexed(low)
        exists = self._seen_file()
        if low <= self._floor and (found is not None or not exists):
            self._learned(found)
        if not exists:
            raise self._unavailable()

    def _seen_file(self) -> bool:
        """Whether any of the recording's files was opened (a probe sets it)."""
        return self._any_file

    def _unavailable(self) -> TimeIndexUnavailable:
        return TimeIndexUnavailable(
            f"recording {self.geometry.recording_id} has no time index (recorded by a Java archive, before the "
            f"time index, or with it off): its times cannot be resolved to positions"
        )

    def position_at_or_after(self, time_ns: int) -> int:
        """The first position whose recorded time is >= `time_ns` (never before the start), or NULL_POSITION when
        every sample is earlier (or the index has none yet)."""
        start = self.geometry.start_position
        k0 = self._first_indexed(0)
        if k0 is not None or not self._any_file:
            self._learned(k0)
        if k0 is None:
            if self._any_file:
                return NULL_POSITION  # indexed, but nothing below the limit yet: every sample (none) is earlier
            raise self._unavailable()
        first = self._first(k0)
        assert first is not None
        first_time, first_position = first
        if time_ns <= first_time:
            if first_position > start:
                raise TimeIndexUnavailable(
                    f"recording {self.geometry.recording_id}: time {time_ns} ns is at or before its time index's "
                    f"first sample (position {first_position}, time {first_time} ns), and positions "
                    f"[{start}, {first_position}) were recorded before the index began, so their times are unknown"
                )
            return start
        # The last file whose first sample is earlier than the time holds the answer, or the next file's first does.
        low, high = k0, len(self._bases) - 1
        while low < high:
            middle = (low + high + 1) // 2
            found = self._first_indexed(middle, high)
            first = None if found is None else self._first(found)
            if found is not None and first is not None and first[0] < time_ns:
                low = found
            else:
                high = middle - 1
        opened = self._open(low)
        if opened is not None:
            with opened:
                at = opened.first_time_at_or_after(time_ns)
                if at < opened.count:
                    return max(opened.sample(at)[1], start)
        following = self._first_indexed(low + 1)
        if following is None:
            return NULL_POSITION
        first = self._first(following)
        assert first is not None
        return max(first[1], start)

    def samples(self, from_position: int, to_position: int, chunk: int) -> Generator[npt.NDArray[np.void]]:
        """The samples that date `[from, to)` (`to` < 0: up to the limit), at most `chunk` at a time: the
        governing sample of `from` first, moved to `from` (as `read_time_index` does), then every later one below
        `to`; times never decrease. Positions before the index's first sample have no governing sample: the
        samples then begin after them. `interval_ns` grows as files are read. Raises `TimeIndexUnavailable`
        (before yielding anything) if the recording has no index at all."""
        if chunk < 2:
            raise ValueError(f"chunk must hold the governing sample and one more: {chunk}")
        g = self.geometry
        low = max(from_position, g.start_position)
        high = g.limit_position if to_position < 0 else min(to_position, g.limit_position)
        if low >= high:
            self._check_indexed(0)
            return
        k_from, k_to = self._k(low), self._k(high - 1)
        floor = np.iinfo(np.int64).min
        governing: npt.NDArray[np.void] | None = None
        for k in range(k_from, self._floor - 1, -1):  # the governing sample: in `from`'s file, else an earlier one
            opened = self._open(k)
            if opened is None:
                continue
            with opened:
                at = opened.last_at_or_before(low) if k == k_from else opened.count - 1
                if at >= 0:
                    governing = opened.read(at, at + 1).copy()
                    break
        if governing is None:
            self._check_indexed(k_from)
        if governing is not None:
            governing["position"][0] = low
            floor = int(governing["time_ns"][0])
        pending = governing
        for k in range(k_from, k_to + 1):
            opened = self._open(k)
            if opened is None:
                continue
            with opened:
                begin = opened.first_after(low) if k == k_from else 0
                end = opened.first_after(high - 1)
                while begin < end:
                    take = chunk - (0 if pending is None else len(pending))
                    part = opened.read(begin, min(end, begin + take))
                    begin += len(part)
                    if pending is not None:
                        part = np.concatenate([pending, part])
                        pending = None
                    part = part.copy()
                    times = np.maximum.accumulate(np.maximum(part["time_ns"], floor))
                    part["time_ns"] = times
                    floor = int(times[-1])
                    yield part
        if pending is not None:
            yield pending
