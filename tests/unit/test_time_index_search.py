"""`storage.time_index_search`: a recording's index searched in place (what the archive answers PositionAtTime and
TimeIndex requests from) agrees with reading the whole index, reads a handful of samples, and says when it cannot
answer (no index, a time before the index began)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from aeron_archive_spark.archive.constants import NULL_POSITION
from aeron_archive_spark.archive.storage import time_index_search
from aeron_archive_spark.archive.storage.time_index import (
    TimeIndexError,
    TimeIndexWriter,
    read_time_index,
    time_index_file_name,
)
from aeron_archive_spark.archive.storage.time_index_search import (
    RecordingGeometry,
    RecordingTimeIndex,
    TimeIndexUnavailable,
)

TERM = 1024
SEGMENT = 4096
MS = 1_000_000
T0 = 1_764_000_000_000 * MS
RID = 3


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def write_index(directory: Path, samples: list[tuple[int, int]], start: int, *, interval: int = 10 * MS) -> None:
    """Samples (time, position) written as the recorder writes them: a file per segment of the positions."""
    clock = Clock()
    writer = TimeIndexWriter(directory, RID, interval, clock=clock)
    geometry = RecordingGeometry(RID, start, 1 << 40, TERM, SEGMENT)
    base = None
    for time_ns, position in samples:
        segment = geometry.base_of(position)
        if base is None:
            writer.open(segment, position)
        elif segment != base:
            writer.roll(segment)
        base = segment
        clock.now = time_ns
        writer._force = True  # every given sample is written, due or not
        writer.on_block(position)
    writer.close()


def random_samples(rng: random.Random, start: int, count: int) -> list[tuple[int, int]]:
    """Increasing positions from `start` (each segment's first sample at its first byte), times with ties."""
    out = []
    position, time_ns = start, T0
    base = None
    geometry = RecordingGeometry(RID, start, 1 << 40, TERM, SEGMENT)
    for _ in range(count):
        segment = geometry.base_of(position)
        if segment != base and base is not None:
            position = max(position, segment)  # the recorder's first sample of a segment is at its base
        base = segment
        out.append((time_ns, position))
        position += rng.choice([32, 64, 96, 1024, 2048])
        if geometry.base_of(position) != segment:
            position = geometry.base_of(position)
        time_ns += rng.choice([0, 1, 5 * MS, 20 * MS])
    return out


def search(directory: Path, start: int, limit: int) -> RecordingTimeIndex:
    return RecordingTimeIndex(directory, RecordingGeometry(RID, start, limit, TERM, SEGMENT))


def concatenated(index: RecordingTimeIndex, low: int, high: int, chunk: int = 7) -> np.ndarray:
    parts = list(index.samples(low, high, chunk))
    assert all(0 < len(p) <= chunk for p in parts)
    return np.concatenate(parts) if parts else np.empty(0, dtype=time_index_search.SAMPLE_DTYPE)


@pytest.mark.parametrize("seed", range(8))
def test_agrees_with_reading_the_whole_index(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    start = rng.choice([0, 64, 4096 + 96])
    samples = random_samples(rng, start, 200)
    write_index(tmp_path, samples, start)
    last = samples[-1][1]
    for limit in (last + 32, last, samples[len(samples) // 2][1] + 1):
        layout = RecordingGeometry(RID, start, limit, TERM, SEGMENT)
        # a purge moves the start to a segment boundary (PurgeSegments refuses any other), keeping the layout
        for purged_start in (start, max(start, layout.base_of(rng.randrange(start, limit)))):
            whole = read_time_index(tmp_path, RID, purged_start, limit)
            index = search(tmp_path, purged_start, limit)
            for _ in range(40):
                t = rng.randrange(T0 - 10 * MS, samples[-1][0] + 30 * MS)
                expected = whole.position_at_or_after(t)
                assert index.position_at_or_after(t) == (NULL_POSITION if expected is None else expected), t
            for _ in range(20):
                low = rng.randrange(purged_start, limit + 1)
                high = rng.randrange(low, limit + 64)
                got = concatenated(search(tmp_path, purged_start, limit), low, high)
                reference = read_time_index(tmp_path, RID, low, min(high, limit)) if low < min(high, limit) else None
                if reference is None:
                    assert len(got) == 0
                else:
                    assert got["position"].tolist() == reference.positions.tolist(), (low, high)
                    assert got["time_ns"].tolist() == reference.times_ns.tolist(), (low, high)


def test_a_long_recording_is_searched_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big_segment = 1 << 20
    samples = [(T0 + i * MS, i * 32) for i in range(200_000)]  # about 6 segments, 33 000 samples a file
    clock = Clock()
    writer = TimeIndexWriter(tmp_path, RID, MS, clock=clock)
    writer.open(0, 0)
    base = 0
    for time_ns, position in samples:
        if position - position % big_segment != base:
            base = position - position % big_segment
            writer.roll(base)
        clock.now = time_ns
        writer.on_block(position)
    writer.close()
    reads = []
    real_pread = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        reads.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting)
    index = RecordingTimeIndex(tmp_path, RecordingGeometry(RID, 0, samples[-1][1] + 32, TERM, big_segment))
    assert index.position_at_or_after(T0 + 123_456 * MS) == 123_456 * 32
    assert sum(reads) < 3000, (len(reads), sum(reads))  # the whole index is 3.2 MB


def test_a_time_before_the_index_began_is_refused(tmp_path: Path) -> None:
    # positions [0, 8192) were recorded without the index (Java's archive, or with it off), then it began
    write_index(tmp_path, [(T0, 8192), (T0 + 10 * MS, 8300), (T0 + 20 * MS, 12288)], 8192)
    index = search(tmp_path, 0, 13000)
    with pytest.raises(TimeIndexUnavailable, match=r"recording 3: .*positions \[0, 8192\) were recorded before"):
        index.position_at_or_after(T0)
    assert index.position_at_or_after(T0 + 1) == 8300
    assert index.position_at_or_after(T0 + 20 * MS) == 12288
    assert index.position_at_or_after(T0 + 21 * MS) == NULL_POSITION
    # a purge past the unindexed prefix makes every time answerable again
    assert search(tmp_path, 8192, 13000).position_at_or_after(T0 - 1) == 8192
    # a range over the prefix: samples from the index's first on (the prefix stays undated)
    assert concatenated(search(tmp_path, 0, 13000), 100, 9000)["position"].tolist() == [8192, 8300]


def test_no_index_is_named_and_an_index_without_samples_yet_answers_null(tmp_path: Path) -> None:
    index = search(tmp_path, 0, 3 * SEGMENT)
    with pytest.raises(TimeIndexUnavailable, match="recording 3 has no time index"):
        index.position_at_or_after(T0)
    with pytest.raises(TimeIndexUnavailable, match="recording 3 has no time index"):
        list(search(tmp_path, 0, 3 * SEGMENT).samples(0, -1, 8))
    with pytest.raises(TimeIndexUnavailable, match="recording 3 has no time index"):
        list(search(tmp_path, 0, 3 * SEGMENT).samples(100, 50, 8))
    writer = TimeIndexWriter(tmp_path, RID, 10 * MS, clock=Clock())
    writer.open(0, 0)  # a recording just started: its file, no sample yet
    writer.close()
    assert search(tmp_path, 0, 0).position_at_or_after(T0) == NULL_POSITION
    assert list(search(tmp_path, 0, 0).samples(0, -1, 8)) == []


def test_samples_at_or_past_the_limit_do_not_count(tmp_path: Path) -> None:
    write_index(tmp_path, [(T0, 0), (T0 + MS, 100), (T0 + 2 * MS, 200)], 0)
    index = search(tmp_path, 0, 200)  # the block at 200 was not recorded (yet)
    assert index.position_at_or_after(T0 + 2 * MS) == NULL_POSITION
    assert concatenated(search(tmp_path, 0, 200), 0, -1)["position"].tolist() == [0, 100]
    assert search(tmp_path, 0, 201).position_at_or_after(T0 + 2 * MS) == 200


def test_a_gap_in_the_index_is_stepped_over(tmp_path: Path) -> None:
    samples = [(T0 + k * 10 * MS, k * SEGMENT) for k in range(6)]
    write_index(tmp_path, samples, 0)
    os.remove(tmp_path / time_index_file_name(RID, 2 * SEGMENT))  # recorded with the index off for a while
    os.remove(tmp_path / time_index_file_name(RID, 3 * SEGMENT))
    index = search(tmp_path, 0, 6 * SEGMENT)
    assert index.position_at_or_after(T0 + 15 * MS) == 4 * SEGMENT
    assert index.position_at_or_after(T0 + 41 * MS) == 5 * SEGMENT
    assert index.position_at_or_after(T0 + 5 * MS) == SEGMENT
    dated = concatenated(search(tmp_path, 0, 6 * SEGMENT), 3 * SEGMENT + 10, -1)
    assert dated["position"].tolist() == [3 * SEGMENT + 10, 4 * SEGMENT, 5 * SEGMENT]
    assert dated["time_ns"].tolist() == [T0 + 10 * MS, T0 + 40 * MS, T0 + 50 * MS]


def test_a_file_that_is_not_an_index_is_named(tmp_path: Path) -> None:
    (tmp_path / time_index_file_name(RID, 0)).write_bytes(b"x" * 64)
    with pytest.raises(TimeIndexError, match=r"3-0\.tix"):
        search(tmp_path, 0, 100).position_at_or_after(T0)


def test_interval_is_the_widest_of_the_files_read(tmp_path: Path) -> None:
    write_index(tmp_path, [(T0, 0), (T0 + MS, SEGMENT)], 0, interval=5 * MS)
    index = search(tmp_path, 0, SEGMENT + 1)
    concatenated(index, 0, -1)
    assert index.interval_ns == 5 * MS


def test_hints_spare_later_requests_the_probes_of_an_unindexed_prefix(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A recording whose first 200 segments predate the index, and one with none: the first request probes each
    segment's file; what it learns (IndexHints) lets later ones skip them, with the same answers; invalidated,
    the hints are learned again."""
    from aeron_archive_spark.archive.storage.time_index_search import IndexHints

    prefix = 200 * SEGMENT
    write_index(tmp_path, [(T0 + i * MS, prefix + i * 512) for i in range(40)], 0)
    probes = []
    real_open = RecordingTimeIndex._open

    def counting(self: RecordingTimeIndex, k: int):  # type: ignore[no-untyped-def]
        probes.append(k)
        return real_open(self, k)

    monkeypatch.setattr(RecordingTimeIndex, "_open", counting)
    hints = IndexHints()
    limit = prefix + 40 * 512

    def ask() -> tuple[int, list[int]]:
        index = RecordingTimeIndex(tmp_path, RecordingGeometry(RID, 0, limit, TERM, SEGMENT), hints)
        found = index.position_at_or_after(T0 + 10 * MS + 1)
        positions = concatenated(RecordingTimeIndex(tmp_path, RecordingGeometry(RID, 0, limit, TERM, SEGMENT),
                                                    hints), prefix + 100, limit)["position"].tolist()
        return found, positions

    first = ask()
    cold = len(probes)
    probes.clear()
    assert ask() == first and len(probes) <= 12 < cold // 10  # only the indexed files
    hints.invalidate()
    probes.clear()
    assert ask() == first and len(probes) >= cold - 5

    # a recording with no index at all: refused, then refused at once
    other = RecordingGeometry(RID + 1, 0, 300 * SEGMENT, TERM, SEGMENT)
    with pytest.raises(TimeIndexUnavailable):
        RecordingTimeIndex(tmp_path, other, hints).position_at_or_after(T0)
    probes.clear()
    with pytest.raises(TimeIndexUnavailable):
        RecordingTimeIndex(tmp_path, other, hints).position_at_or_after(T0)
    with pytest.raises(TimeIndexUnavailable):
        list(RecordingTimeIndex(tmp_path, other, hints).samples(0, -1, 8))
    assert probes == []
