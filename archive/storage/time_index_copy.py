"""Giving a replica its source's times: rewriting a range of a recording's `.tix` files from another archive's samples.

A replica's recorder dates what it writes by its own clock, when the replay reached it; the user asked when the
*source* recorded it. A replication from an archive that answers the time index therefore fetches the source's
samples for the range it replicated and `copy_time_index` rewrites the replica's files with them, keeping the layout
`time_index` guarantees (one file per segment, each file's first sample at its segment's first recorded byte, times
never decreasing), so every reader and `RecordingTimeIndex` work on a replica as on any recording.

Each file is rewritten whole: the replica's own samples below the range (an extension keeps what it had), the
source's in the range (its governing sample moved to the range's or segment's first byte, as a source reader would
date it), the replica's own at or past the range's end (an extension made since, or samples a crash left past the
stop, which readers ignore). A file is written to `<name>.tmp`, synced and renamed over the old one: a kill -9
leaves the old file or the new one, never a torn one (a stale `.tmp`, which no reader lists, is overwritten by the
next copy). Files go in position order, and a replica's own times are never earlier than the source's for the same
bytes (it recorded them later), so after a crash between two renames the index still never goes back in time.

The caller (the conductor, on its thread) passes `writable_limit`: nothing at or past it is touched, so no file the
recorder may still append to is ever replaced (for a recording being recorded, the base of the segment it writes).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aeron_archive_spark.archive.storage.time_index import (
    HEADER,
    HEADER_LENGTH,
    MAGIC,
    VERSION,
    TimeIndex,
    read_samples,
    time_index_file_name,
)
from aeron_archive_spark.archive.storage.time_index_search import SAMPLE_DTYPE, RecordingGeometry

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"


class TimeIndexCopyRefused(ValueError):
    """The source's samples cannot date the range without breaking the index's rules (the replica keeps its own)."""


@dataclass(frozen=True, slots=True)
class _Rewrite:
    base: int
    path: str
    interval_ns: int
    samples: npt.NDArray[np.void]


def copy_time_index(
    archive_dir: str | os.PathLike[str],
    geometry: RecordingGeometry,
    from_position: int,
    to_position: int,
    source: TimeIndex,
    writable_limit: int,
) -> int:
    """Date the replica's positions `[from, to)` (clipped to its start and to `writable_limit`) by `source`, the
    samples another archive gave for the same recording's bytes (`AeronArchive.time_index`). Returns the number of
    files rewritten; raises `TimeIndexCopyRefused` before writing anything if the source's samples do not date the
    whole range or would make times go back, and `TimeIndexError` for a replica file that is not a time index."""
    directory = os.fspath(archive_dir)
    low = max(from_position, geometry.start_position)
    high = min(to_position, writable_limit)
    if low >= high:
        return 0
    positions = np.asarray(source.positions, dtype=np.int64)
    times = np.asarray(source.times_ns, dtype=np.int64)
    if len(positions) == 0 or int(positions[0]) > low:
        first = "no sample" if len(positions) == 0 else f"its first sample at position {int(positions[0])}"
        raise TimeIndexCopyRefused(
            f"the source's time index does not date position {low} ({first}): its times there are unknown"
        )
    rewrites = _plan(directory, geometry, low, high, times, positions, source.interval_ns)
    # Times must not go back: from the replica's last sample before the first rewritten file, through every file.
    floor = _time_before(directory, geometry, geometry.base_of(low))
    for rewrite in rewrites:
        file_times = rewrite.samples["time_ns"]
        if len(file_times) and (int(file_times[0]) < floor or bool(np.any(np.diff(file_times) < 0))):
            raise TimeIndexCopyRefused(
                f"the source's times would go back in time in {rewrite.path} (the replica's earlier bytes are dated "
                f"{floor} ns or later)"
            )
        if len(file_times):
            floor = int(file_times[-1])
    for rewrite in rewrites:
        _replace(rewrite)
    if rewrites:
        _sync_directory(directory)
    log.info(
        "recording %d: positions [%d, %d) now dated by the source's time index (%d files)",
        geometry.recording_id,
        low,
        high,
        len(rewrites),
    )
    return len(rewrites)


def _plan(
    directory: str,
    geometry: RecordingGeometry,
    low: int,
    high: int,
    times: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64],
    interval_ns: int,
) -> list[_Rewrite]:
    """The new content of every file the range touches, in position order."""
    out = []
    last_base = geometry.base_of(high - 1)
    for base in range(geometry.base_of(low), last_base + 1, geometry.segment_length):
        seg_low, seg_high = max(base, low), min(base + geometry.segment_length, high)
        path = os.path.join(directory, time_index_file_name(geometry.recording_id, base))
        own, own_interval = _existing(path)
        own_positions = own["position"]
        below = own[own_positions < seg_low]
        above = own[own_positions >= seg_high]
        # The sample that governs the segment's first byte of the range, moved to it; then the later ones in it.
        first = int(np.searchsorted(positions, seg_low, side="right")) - 1
        end = int(np.searchsorted(positions, seg_high, side="left"))
        copied = np.empty(end - first, dtype=SAMPLE_DTYPE)
        copied["time_ns"] = times[first:end]
        copied["position"] = positions[first:end]
        copied["position"][0] = seg_low
        if len(below) and int(below["time_ns"][-1]) == int(copied["time_ns"][0]):
            copied = copied[1:]  # the replica's last sample already dates seg_low so (an earlier copy's)
        kept_own = len(below) > 0 or len(above) > 0
        interval = max(interval_ns, own_interval if kept_own else 0) or own_interval
        out.append(_Rewrite(base, path, interval, np.concatenate([below, copied, above])))
    return out


def _existing(path: str) -> tuple[npt.NDArray[np.void], int]:
    """A replica file's samples and header interval (none, 0 if it has no file); `TimeIndexError` if it is not
    a time index."""
    try:
        samples = read_samples(path)
        with open(path, "rb") as file:
            header = file.read(HEADER_LENGTH)
    except FileNotFoundError:
        return np.empty(0, dtype=SAMPLE_DTYPE), 0
    return samples.astype(SAMPLE_DTYPE), int(HEADER.unpack(header)[3])


def _time_before(directory: str, geometry: RecordingGeometry, position: int) -> int:
    """The time of the replica's last sample below `position` (the range must not start earlier), or the lowest
    int64 if it has none; files are read from `position`'s segment down, usually just that one."""
    base = geometry.base_of(position)
    first_base = geometry.base_of(geometry.start_position)
    while base >= first_base:
        path = os.path.join(directory, time_index_file_name(geometry.recording_id, base))
        try:
            samples = read_samples(path)
        except FileNotFoundError:
            samples = np.empty(0, dtype=SAMPLE_DTYPE)
        earlier = samples["time_ns"][samples["position"] < position]
        if len(earlier):
            return int(earlier.max())
        base -= geometry.segment_length
    return int(np.iinfo(np.int64).min)


def _replace(rewrite: _Rewrite) -> None:
    """Write the file beside its final name, sync it, rename it over the old one (atomic on POSIX)."""
    temp = rewrite.path + TEMP_SUFFIX
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, HEADER.pack(MAGIC, VERSION, HEADER_LENGTH, rewrite.interval_ns))
        data = rewrite.samples.tobytes()
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], HEADER_LENGTH + written)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, rewrite.path)


def _sync_directory(directory: str) -> None:
    """Make the renames durable (a power loss, not just a killed process)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
