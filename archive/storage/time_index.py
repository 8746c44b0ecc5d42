"""The time index: when the archive recorded each byte of a recording, kept beside its segment files.

Java's archive knows only a recording's start and stop timestamps. Ours also keeps, per segment file
`<id>-<base>.rec`, a companion `<id>-<base>.tix` of samples `(epoch ns, position)`, appended by the recorder:

- A sample `(t, p)` says: the recorder's duty cycle that wrote the bytes from `p` on began at wall-clock time `t`.
- The recorder appends one when a block is about to be written and at least `interval_ns` have passed since the
  previous sample; also for the first block after the writer opens (a new recording, an extension, a restart) and
  for the first block of every segment, so each `.tix` file is complete on its own and goes wherever its segment
  goes (purged, deleted, truncated, migrated) without touching another file.
- The recorded time of a byte at `x` is therefore the time `t_k` of the last sample with `p_k <= x`, and the true
  start of the duty cycle that wrote it lies in `[t_k, t_k + interval)`: the bound is the interval. Times never
  decrease along a recording's positions: a wall clock stepping back is held at the last sample's time.

Layout (little-endian): a 32-byte header (magic `AATIMIDX`, version int32, header length int32, interval ns int64
of the widest interval any writer used, 8 reserved bytes), then samples of two int64s. Samples are appended with
one `pwrite` each; after a kill -9 a torn last sample is ignored by readers and cut by the next writer, and samples
past the recording's recovered stop position are ignored (cut when the recording is extended). Java's archive and
ArchiveTool only look at `.rec` (and `.del`) names, so the files never disturb them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aeron_archive_spark.archive.constants import DELETE_SUFFIX, RECORDING_SEGMENT_SUFFIX

log = logging.getLogger(__name__)

TIME_INDEX_SUFFIX = ".tix"
MAGIC = b"AATIMIDX"
VERSION = 1
HEADER = struct.Struct("<8sii q 8x")
HEADER_LENGTH = HEADER.size  # 32
SAMPLE = struct.Struct("<qq")
SAMPLE_LENGTH = SAMPLE.size  # 16
INTERVAL_DEFAULT_NS = 10_000_000  # 10 ms: the bound on a recorded time, settable per archive

_SAMPLE_DTYPE = np.dtype([("time_ns", "<i8"), ("position", "<i8")])
# Ranges of a TimeIndexesRequest (this project's control request 1004), and the interval of the message that
# closes a range the archive cannot date (docs/control-protocol.md).
RANGE_DTYPE = np.dtype([("recording_id", "<i8"), ("from_position", "<i8"), ("to_position", "<i8")])
NO_INDEX_INTERVAL = -1


def time_index_file_name(recording_id: int, base_position: int) -> str:
    return f"{recording_id}-{base_position}{TIME_INDEX_SUFFIX}"


def companion_name(segment_name: str) -> str | None:
    """The `.tix` name beside a segment file name (`X.rec` or `X.rec.del`), None for any other name."""
    name = segment_name[: -len(DELETE_SUFFIX)] if segment_name.endswith(DELETE_SUFFIX) else segment_name
    if not name.endswith(RECORDING_SEGMENT_SUFFIX):
        return None
    return name[: -len(RECORDING_SEGMENT_SUFFIX)] + TIME_INDEX_SUFFIX


def remove_companion(archive_dir: str | os.PathLike[str], segment_name: str) -> bool:
    """Delete the time index file of a segment file being deleted; True if one was there."""
    name = companion_name(segment_name)
    if name is None:
        return False
    try:
        os.remove(os.path.join(os.fspath(archive_dir), name))
        return True
    except FileNotFoundError:
        return False


def move_companion(archive_dir: str | os.PathLike[str], src_segment: str, dst_segment: str) -> None:
    """Rename a segment's time index along with the segment (MigrateSegments gives segments a new recording)."""
    src, dst = companion_name(src_segment), companion_name(dst_segment)
    if src is None or dst is None:
        return
    directory = os.fspath(archive_dir)
    with contextlib.suppress(FileNotFoundError):
        os.replace(os.path.join(directory, src), os.path.join(directory, dst))


def cut_time_index(archive_dir: str | os.PathLike[str], recording_id: int, base_position: int, position: int) -> None:
    """Drop a segment's samples at or past `position`: the segment was truncated there."""
    path = os.path.join(os.fspath(archive_dir), time_index_file_name(recording_id, base_position))
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        if size >= HEADER_LENGTH:
            os.ftruncate(fd, TimeIndexWriter._kept_length(fd, size, position))
    finally:
        os.close(fd)


class TimeIndexError(ValueError):
    """A `.tix` file that is not a time index (wrong magic, unknown version): named, never silently used."""


def _read_header(fd: int, path: str) -> int:
    """The interval of a time index file's header; raises TimeIndexError naming the file if it is not one."""
    return _parse_header(os.pread(fd, HEADER_LENGTH, 0), path)


def _parse_header(raw: bytes, path: str) -> int:
    if len(raw) < HEADER_LENGTH:
        raise TimeIndexError(f"time index {path}: {len(raw)}-byte header, expected {HEADER_LENGTH}")
    magic, version, header_length, interval_ns = HEADER.unpack_from(raw)
    if magic != MAGIC or header_length != HEADER_LENGTH:
        raise TimeIndexError(f"time index {path}: not a time index file (magic {magic!r})")
    if version != VERSION:
        raise TimeIndexError(f"time index {path}: version {version}, this software reads version {VERSION}")
    return int(interval_ns)


def is_unwritten_header(raw: bytes) -> bool:
    """A header a crash left unwritten (the file created, or its header lost with a power cut): shorter than a
    header, or all zeros. Such a file has no samples; anything else that is not a header is an error."""
    return len(raw) < HEADER_LENGTH or not any(raw[:HEADER_LENGTH])


def read_file(path: str) -> tuple[int, npt.NDArray[np.void]]:
    """(interval ns, whole samples) of one `.tix` file, a torn last sample left out: one open and one read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    if is_unwritten_header(raw):
        return 0, np.empty(0, dtype=_SAMPLE_DTYPE)
    interval = _parse_header(raw, path)
    count = (len(raw) - HEADER_LENGTH) // SAMPLE_LENGTH
    return interval, np.frombuffer(raw, dtype=_SAMPLE_DTYPE, count=count, offset=HEADER_LENGTH)


def read_samples(path: str) -> npt.NDArray[np.void]:
    """The whole samples of one `.tix` file (a torn last sample left out), as a structured array."""
    return read_file(path)[1]


@dataclass(frozen=True)
class TimeIndex:
    """One recording's samples in position order: `positions[k]` was reached at `times_ns[k]`.

    `interval_ns` is the widest interval the samples were taken with: the bound on every recorded time.
    Empty when the recording has no time index (recorded by Java's archive, or before this feature).
    """

    recording_id: int
    times_ns: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]
    interval_ns: int

    @property
    def is_empty(self) -> bool:
        return len(self.positions) == 0

    @property
    def first_position(self) -> int | None:
        """The lowest position whose recorded time is known (bytes before it predate the index)."""
        return int(self.positions[0]) if len(self.positions) else None

    def times_at(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The recorded time (epoch ns) of each position; -1 where it lies before the first sample."""
        k = np.searchsorted(self.positions, positions, side="right") - 1
        if len(k) == 0 or (int(k.min()) >= 0):
            return self.times_ns[k]  # the common case: every position is dated (one gather, no mask)
        out = np.where(k >= 0, self.times_ns[np.maximum(k, 0)], -1)
        return out.astype(np.int64, copy=False)

    def position_at_or_after(self, time_ns: int) -> int | None:
        """The first position whose recorded time is >= `time_ns`, None when every sample is earlier."""
        k = int(np.searchsorted(self.times_ns, time_ns, side="left"))
        return int(self.positions[k]) if k < len(self.positions) else None

    def time_range_ns(self) -> tuple[int, int] | None:
        if self.is_empty:
            return None
        return int(self.times_ns[0]), int(self.times_ns[-1])


def _within(
    samples: npt.NDArray[np.void], start_position: int | None, stop_position: int | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(times, positions) of samples in position order, cut to `[start, stop)`: a sample at or past the stop dates
    nothing recorded; of those at or before the start only the one that governs it is kept, moved to the start."""
    positions = np.ascontiguousarray(samples["position"], dtype=np.int64)
    times = np.ascontiguousarray(samples["time_ns"], dtype=np.int64)
    if stop_position is not None and stop_position >= 0:
        kept = int(np.searchsorted(positions, stop_position, side="left"))
        positions, times = positions[:kept], times[:kept]
    if start_position is not None:
        governing = int(np.searchsorted(positions, start_position, side="right")) - 1
        if governing > 0:
            positions, times = positions[governing:], times[governing:]
        if governing >= 0 and len(positions):
            positions = positions.copy()
            positions[0] = start_position
    if len(times):
        times = np.maximum.accumulate(times)
    return times, positions


def _index_files(archive_dir: str | os.PathLike[str], recording_id: int) -> list[str]:
    """Paths of the recording's `.tix` files in base position order."""
    directory = os.fspath(archive_dir)
    prefix = f"{recording_id}-"
    found: list[tuple[int, str]] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.startswith(prefix) and name.endswith(TIME_INDEX_SUFFIX):
            try:
                found.append((int(name[len(prefix) : -len(TIME_INDEX_SUFFIX)]), name))
            except ValueError:
                continue
    return [os.path.join(directory, name) for _, name in sorted(found)]


def read_time_index(
    archive_dir: str | os.PathLike[str],
    recording_id: int,
    start_position: int | None = None,
    stop_position: int | None = None,
) -> TimeIndex:
    """The recording's samples from every `.tix` file, within `[start, stop)` where given.

    A sample at or past the stop position describes nothing recorded (a crash between the sample and its block, a
    truncation) and is dropped. Samples before the start are kept only as the one that governs the start, so a
    purge that moved the start inside a segment still dates its bytes. A file that is not a time index raises
    `TimeIndexError` naming it.
    """
    return _read_paths(_index_files(archive_dir, recording_id), recording_id, start_position, stop_position)


def read_segment_time_index(
    archive_dir: str | os.PathLike[str],
    recording_id: int,
    base_positions: Iterable[int],
    start_position: int | None = None,
    stop_position: int | None = None,
) -> TimeIndex:
    """`read_time_index` from the `.tix` files of the segments at `base_positions` only, opened by name (no
    directory listing: a read of many small recordings opens one or two files each)."""
    directory = os.fspath(archive_dir)
    paths = [os.path.join(directory, time_index_file_name(recording_id, base)) for base in base_positions]
    return _read_paths(paths, recording_id, start_position, stop_position)


def _read_paths(
    paths: Iterable[str], recording_id: int, start_position: int | None, stop_position: int | None
) -> TimeIndex:
    chunks: list[npt.NDArray[np.void]] = []
    interval = 0
    for path in paths:
        try:
            file_interval, samples = read_file(path)
        except FileNotFoundError:  # none for this segment, or deleted by a purge meanwhile
            continue
        interval = max(interval, file_interval)
        chunks.append(samples)
    samples = np.concatenate(chunks) if chunks else np.empty(0, dtype=_SAMPLE_DTYPE)
    times, positions = _within(samples, start_position, stop_position)
    return TimeIndex(recording_id, times, positions, interval)


def _fsync_directory(directory: str) -> None:
    """A new file's name made durable (as `segments.fsync_directory`, which this module cannot import)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as ex:
        if ex.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _last_time_below(path: str, position: int) -> int | None:
    """The time of a file's last whole sample below `position`; None without one (or without the file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < HEADER_LENGTH + SAMPLE_LENGTH:
            return None
        kept = (TimeIndexWriter._kept_length(fd, size, position) - HEADER_LENGTH) // SAMPLE_LENGTH
        if kept == 0:
            return None
        raw = os.pread(fd, SAMPLE_LENGTH, HEADER_LENGTH + (kept - 1) * SAMPLE_LENGTH)
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(SAMPLE.unpack(raw)[0]) if len(raw) == SAMPLE_LENGTH else None


class TimeIndexWriter:
    """Appends one recording's samples; owned by its `RecordingWriter` on the recorder thread.

    `clock` gives wall-clock epoch nanoseconds (injected so tests step time). The writer never raises out of the
    recorder for its own I/O: a time index that cannot be written is logged once and given up (the recording, which
    matters more, goes on), leaving the samples already written, which stay correct.
    """

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        recording_id: int,
        interval_ns: int = INTERVAL_DEFAULT_NS,
        *,
        clock: Callable[[], int] = time.time_ns,
        sync: bool = False,
    ) -> None:
        """`sync`: make each sample durable as it is written, and each new file's name (the archive's
        `file_sync_level` > 0, under which the recorder syncs every block of data too)."""
        if interval_ns <= 0:
            raise ValueError(f"time index interval must be > 0 ns, got {interval_ns}")
        self._sync = sync
        self._dir = os.fspath(archive_dir)
        self._recording_id = recording_id
        self._interval = interval_ns
        self._clock = clock
        self._fd = -1
        self._offset = 0
        self._last_time = 0
        self._next_due = 0
        self._force = True
        self._failed = False
        self.samples_written = 0

    @property
    def interval_ns(self) -> int:
        return self._interval

    def open(self, base_position: int, join_position: int, segment_length: int = 0, start_position: int = 0) -> None:
        """Open the segment's index for appending at `join_position`: a torn sample and any sample at or past the
        join (left by a crash or a truncation) are cut; the last time kept, so times never decrease.

        Runs on the recorder thread, where every active recording waits for it: a new recording (join at its
        start) reads nothing; an extension reads the last sample before the join, from the join segment's file or
        the nearest earlier one found by name (`segment_length`, `start_position`), a few small `pread`s."""
        self._last_time = (
            self._latest_time(base_position, join_position, segment_length, start_position)
            if join_position > start_position or segment_length <= 0
            else 0
        )
        self._open_file(base_position, join_position)
        self._force = True

    def on_block(self, position: int) -> None:
        """Called before a block is written at `position`: append a sample when due."""
        if self._fd < 0:
            return
        now = self._clock()
        if now < self._next_due and not self._force:
            return
        if now < self._last_time:
            now = self._last_time  # a wall clock stepped back: hold, never decrease
        self._append(now, position)

    def roll(self, base_position: int) -> None:
        """The recording moved to a new segment: its first block samples into a new file."""
        self._close_fd()
        if not self._failed:
            self._open_file(base_position, base_position)
        self._force = True

    def close(self) -> None:
        self._close_fd()

    def _append(self, now: int, position: int) -> None:
        try:
            os.pwrite(self._fd, SAMPLE.pack(now, position), self._offset)
            if self._sync:
                os.fdatasync(self._fd)
        except OSError as ex:
            self._give_up(ex)
            return
        self._offset += SAMPLE_LENGTH
        self._last_time = now
        self._next_due = now + self._interval
        self._force = False
        self.samples_written += 1

    def _open_file(self, base_position: int, join_position: int) -> None:
        path = os.path.join(self._dir, time_index_file_name(self._recording_id, base_position))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as ex:
            self._give_up(ex)
            return
        try:
            size = os.fstat(fd).st_size
            interval = self._interval
            if size >= HEADER_LENGTH:
                try:
                    interval = max(interval, _read_header(fd, path))
                except TimeIndexError as ex:
                    log.warning("%s; rewriting it", ex)
                    size = 0
            keep = self._kept_length(fd, size, join_position) if size >= HEADER_LENGTH else HEADER_LENGTH
            os.ftruncate(fd, keep)
            os.pwrite(fd, HEADER.pack(MAGIC, VERSION, HEADER_LENGTH, interval), 0)
            if self._sync:
                os.fdatasync(fd)
                _fsync_directory(self._dir)
        except OSError as ex:
            os.close(fd)
            self._give_up(ex)
            return
        self._fd = fd
        self._offset = keep

    @staticmethod
    def _kept_length(fd: int, size: int, join_position: int) -> int:
        """The file length that keeps the whole samples below `join_position` (binary search, 8-byte reads)."""
        low, high = 0, (size - HEADER_LENGTH) // SAMPLE_LENGTH
        while low < high:
            middle = (low + high) // 2
            raw = os.pread(fd, 8, HEADER_LENGTH + middle * SAMPLE_LENGTH + 8)
            if len(raw) < 8 or int.from_bytes(raw, "little", signed=True) >= join_position:
                high = middle
            else:
                low = middle + 1
        return HEADER_LENGTH + low * SAMPLE_LENGTH

    def _latest_time(self, base_position: int, join_position: int, segment_length: int, start_position: int) -> int:
        """The newest time sampled before the join (held so times never decrease across a restart): the last
        sample below the join in its segment's file, else the last of the nearest earlier file that has one.
        Without a `segment_length`, the directory is listed instead (tests and tools)."""
        if segment_length > 0:
            directory = self._dir
            base = base_position
            while base + segment_length > start_position:  # down to the segment holding the start
                path = os.path.join(directory, time_index_file_name(self._recording_id, base))
                found = _last_time_below(path, join_position)
                if found is not None:
                    return found
                base -= segment_length
            return 0
        for path in reversed(_index_files(self._dir, self._recording_id)):
            try:
                samples = read_samples(path)
            except (OSError, TimeIndexError):
                continue
            if len(samples):
                return int(samples["time_ns"][-1])
        return 0

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _give_up(self, ex: OSError) -> None:
        if not self._failed:
            log.warning("recording %d: time index stopped: %s", self._recording_id, ex)
        self._failed = True
        self._close_fd()
