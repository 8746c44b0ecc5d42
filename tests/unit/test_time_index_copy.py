"""`storage.time_index_copy`: a replica's `.tix` files rewritten from its source's samples.

Both indexes are written by `TimeIndexWriter` as the recorder writes them (the source early, the replica later, by
other clocks); after the copy the replica's files hold the source's samples for the range, one file per segment with
its first sample at the segment's first byte, its own samples outside the range, and nothing else changes.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from aeron_archive_spark.archive.server.time_index_session import MAX_SAMPLES_PER_MESSAGE
from aeron_archive_spark.archive.storage import time_index_copy
from aeron_archive_spark.archive.storage.time_index import (
    TimeIndex,
    TimeIndexWriter,
    read_samples,
    read_time_index,
    time_index_file_name,
)
from aeron_archive_spark.archive.storage.time_index_copy import TimeIndexCopy, TimeIndexCopyRefused, copy_time_index
from aeron_archive_spark.archive.storage.time_index_search import RecordingGeometry, RecordingTimeIndex

MS = 1_000_000
TERM = 65536
SEGMENT = 2 * TERM
START = 0
STOP = 3 * SEGMENT + 8192  # four segments, the last partly written
BLOCK = 4096
SOURCE_T0 = 1_764_000_000_000 * MS
REPLICA_T0 = SOURCE_T0 + 3_600_000 * MS  # replicated an hour later


def write_index(directory: Path, t0: int, start: int, stop: int, *, step_ns: int = 4 * MS,
                interval_ns: int = 10 * MS, recording_id: int = 0) -> None:
    """Samples as the recorder takes them for blocks of BLOCK bytes over [start, stop), a block every `step_ns`."""
    now = [t0]
    writer = TimeIndexWriter(directory, recording_id, interval_ns, clock=lambda: now[0])
    base = start - start % SEGMENT
    writer.open(base, start)
    for position in range(start, stop, BLOCK):
        if position % SEGMENT == 0 and position != base:
            base = position
            writer.roll(base)
        writer.on_block(position)
        now[0] += step_ns
    writer.close()


def geometry(limit: int = STOP) -> RecordingGeometry:
    return RecordingGeometry(0, START, limit, TERM, SEGMENT)


def source_index(directory: Path, low: int, high: int) -> TimeIndex:
    """What the source archive answers to TimeIndexRequest(low, high): the governing sample moved to `low`."""
    return read_time_index(directory, 0, low, high)


def file_samples(directory: Path, base: int) -> list[tuple[int, int]]:
    samples = read_samples(str(directory / time_index_file_name(0, base)))
    return list(zip(samples["time_ns"].tolist(), samples["position"].tolist(), strict=True))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    source, replica = tmp_path / "source", tmp_path / "replica"
    source.mkdir()
    replica.mkdir()
    write_index(source, SOURCE_T0, START, STOP, step_ns=3 * MS)
    return source, replica


def test_a_whole_replica_gets_the_source_s_files_sample_for_sample(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    written = copy_time_index(replica, geometry(), START, STOP, source_index(source, START, STOP), STOP)
    assert written == 4
    for base in range(0, STOP, SEGMENT):
        assert file_samples(replica, base) == file_samples(source, base)
        assert file_samples(replica, base)[0][1] == base
    theirs, ours = read_time_index(source, 0, START, STOP), read_time_index(replica, 0, START, STOP)
    assert ours.times_ns.tolist() == theirs.times_ns.tolist() and ours.positions.tolist() == theirs.positions.tolist()
    assert ours.interval_ns == theirs.interval_ns
    assert not [name for name in os.listdir(replica) if name.endswith(time_index_copy.TEMP_SUFFIX)]


def test_a_replica_without_files_gets_them(dirs):
    source, replica = dirs
    copy_time_index(replica, geometry(), START, STOP, source_index(source, START, STOP), STOP)
    assert read_time_index(replica, 0).positions.tolist() == read_time_index(source, 0).positions.tolist()


def test_an_extension_keeps_the_replica_s_samples_below_it_and_dates_the_new_part_by_the_source(tmp_path):
    source, replica = tmp_path / "s", tmp_path / "r"
    source.mkdir()
    replica.mkdir()
    write_index(source, SOURCE_T0, START, STOP)
    old_stop = SEGMENT + 3 * BLOCK  # the first replication stopped inside the second segment
    write_index(replica, SOURCE_T0, START, old_stop)  # its part dated by the source already
    write_index(replica, REPLICA_T0, old_stop, STOP)  # the extension, recorded later by the replica
    before = file_samples(replica, 0)
    copy_time_index(replica, geometry(), old_stop, STOP, source_index(source, old_stop, STOP), STOP)
    assert file_samples(replica, 0) == before  # below the range: untouched
    assert file_samples(replica, SEGMENT) == file_samples(source, SEGMENT)
    assert read_time_index(replica, 0).times_ns.tolist() == read_time_index(source, 0).times_ns.tolist()


def test_a_segment_the_recorder_may_still_write_is_left_alone(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    last = 3 * SEGMENT
    own_last = file_samples(replica, last)
    written = copy_time_index(replica, geometry(), START, STOP, source_index(source, START, STOP), last)
    assert written == 3 and file_samples(replica, last) == own_last
    assert file_samples(replica, 2 * SEGMENT) == file_samples(source, 2 * SEGMENT)


def test_samples_past_the_range_stay(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    to = SEGMENT + 5 * BLOCK
    copy_time_index(replica, geometry(), START, to, source_index(source, START, to), STOP)
    got = file_samples(replica, SEGMENT)
    assert [p for _, p in got if p < to] == [p for _, p in file_samples(source, SEGMENT) if p < to]
    assert [s for s in got if s[1] >= to] == [s for s in file_samples(replica, SEGMENT) if s[1] >= to]
    times = read_time_index(replica, 0).times_ns
    assert bool(np.all(np.diff(times) >= 0))


def test_a_source_whose_index_begins_after_the_range_is_refused_without_writing(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    before = {base: file_samples(replica, base) for base in range(0, STOP, SEGMENT)}
    late = source_index(source, SEGMENT, STOP)  # dates nothing before SEGMENT
    with pytest.raises(TimeIndexCopyRefused, match="does not date position 0"):
        copy_time_index(replica, geometry(), START, STOP, late, STOP)
    assert {base: file_samples(replica, base) for base in range(0, STOP, SEGMENT)} == before


def test_times_that_would_go_back_are_refused_without_writing(tmp_path):
    source, replica = tmp_path / "s", tmp_path / "r"
    source.mkdir()
    replica.mkdir()
    write_index(source, SOURCE_T0, START, STOP)
    old_stop = SEGMENT
    write_index(replica, REPLICA_T0, START, old_stop)  # the first part dated by the replica (a Java source then)
    write_index(replica, REPLICA_T0 + 60_000 * MS, old_stop, STOP)
    before = file_samples(replica, SEGMENT)
    with pytest.raises(TimeIndexCopyRefused, match="back in time"):
        copy_time_index(replica, geometry(), old_stop, STOP, source_index(source, old_stop, STOP), STOP)
    assert file_samples(replica, SEGMENT) == before


def test_a_crash_between_two_renames_leaves_whole_files_and_times_that_never_go_back(dirs, monkeypatch):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    real_replace, renames = os.replace, []

    def replace_then_die(src: str, dst: str) -> None:
        if len(renames) == 2:
            raise KeyboardInterrupt("killed")  # the process dies between the second and third rename
        renames.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(time_index_copy.os, "replace", replace_then_die)
    monkeypatch.setattr(time_index_copy.TimeIndexCopy, "close", lambda self: None)  # a kill -9 cleans nothing up
    with pytest.raises(KeyboardInterrupt):
        copy_time_index(replica, geometry(), START, STOP, source_index(source, START, STOP), STOP)
    assert file_samples(replica, 0) == file_samples(source, 0)
    assert file_samples(replica, SEGMENT) == file_samples(source, SEGMENT)
    assert file_samples(replica, 2 * SEGMENT)[0] == (REPLICA_T0 + 2 * SEGMENT // BLOCK * 4 * MS, 2 * SEGMENT)
    times = read_samples(str(replica / time_index_file_name(0, 0)))["time_ns"]
    index = read_time_index(replica, 0)
    assert bool(np.all(np.diff(index.times_ns) >= 0)) and len(times) > 0
    # the temp file left behind is not an index file and the next copy overwrites it
    assert (replica / (time_index_file_name(0, 2 * SEGMENT) + time_index_copy.TEMP_SUFFIX)).exists()
    monkeypatch.undo()
    copy_time_index(replica, geometry(), START, STOP, source_index(source, START, STOP), STOP)
    assert read_time_index(replica, 0).times_ns.tolist() == read_time_index(source, 0).times_ns.tolist()
    assert not [name for name in os.listdir(replica) if name.endswith(time_index_copy.TEMP_SUFFIX)]


# -- in bounded steps, as a replication drives it ------------------------------------------------------------------


def answer_from(source: Path, copy: TimeIndexCopy, low: int, high: int) -> None:
    """What the source's archive sends for TimeIndexRequest(low, high): its `RecordingTimeIndex.samples`, 256 a
    message (`TimeIndexSession`), then the count."""
    index = RecordingTimeIndex(source, geometry())
    count = 0
    for chunk in index.samples(low, high, MAX_SAMPLES_PER_MESSAGE):
        copy.on_samples(chunk, index.interval_ns)
        count += len(chunk)
    copy.on_step_end(count)


def run(copy: TimeIndexCopy, source: Path) -> list[tuple[int, int]]:
    """Drive the copy as the replication does, a request answered whenever one is wanted; each call's
    (samples written, files renamed)."""
    calls = []
    while not copy.is_done:
        request = copy.next_request()
        if request is not None:
            answer_from(source, copy, *request)
        samples, files = copy.samples_written, copy.files_written
        copy.do_work()
        calls.append((copy.samples_written - samples, copy.files_written - files))
    return calls


def test_a_copy_in_steps_of_one_segment_gives_the_source_s_files_renaming_one_file_per_call(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    copy = TimeIndexCopy(replica, geometry(), START, STOP, lambda: (START, STOP), step_segments=1)
    asked = []
    real_next = copy.next_request

    def next_request() -> tuple[int, int] | None:
        request = real_next()
        if request is not None:
            asked.append(request)
        return request

    copy.next_request = next_request  # type: ignore[method-assign]
    calls = run(copy, source)
    copy.close()
    assert asked == [(0, SEGMENT), (SEGMENT, 2 * SEGMENT), (2 * SEGMENT, 3 * SEGMENT), (3 * SEGMENT, STOP)]
    assert max(files for _, files in calls) == 1 and copy.files_written == 4
    for base in range(0, STOP, SEGMENT):
        assert file_samples(replica, base) == file_samples(source, base)
    assert not [name for name in os.listdir(replica) if name.endswith(time_index_copy.TEMP_SUFFIX)]
    assert [name for name in os.listdir(replica) if not name.endswith(".tix")] == []  # the spools are gone


def test_a_dense_file_is_copied_a_chunk_per_call_in_bounded_memory(tmp_path):
    """Samples far denser than a busy recording's at 10 ms: 8192 a file (two chunks), 48k (768 KB) over the range;
    each call copies at most a chunk and the copy's peak allocation stays a small constant (~0.15 MB measured)."""
    source, replica = tmp_path / "s", tmp_path / "r"
    source.mkdir()
    replica.mkdir()
    dense = 1 << 22  # a 4 MiB segment...
    g = RecordingGeometry(0, 0, 6 * dense, TERM, dense)
    now = [SOURCE_T0]
    writer = TimeIndexWriter(source, 0, 1, clock=lambda: now[0])
    writer.open(0, 0)
    for position in range(0, 6 * dense, 512):  # ... sampled every 512 bytes
        if position % dense == 0 and position:
            writer.roll(position)
        writer.on_block(position)
        now[0] += 1000
    writer.close()
    copy = TimeIndexCopy(replica, g, 0, 6 * dense, lambda: (0, 6 * dense), step_segments=2)
    index = RecordingTimeIndex(source, g)
    tracemalloc.start()
    try:
        while not copy.is_done:
            request = copy.next_request()
            if request is not None:
                count = 0
                for chunk in index.samples(*request, MAX_SAMPLES_PER_MESSAGE):
                    copy.on_samples(chunk, index.interval_ns)
                    count += len(chunk)
                copy.on_step_end(count)
            before = copy.samples_written
            copy.do_work()
            assert copy.samples_written - before <= time_index_copy.CHUNK_SAMPLES
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        copy.close()
    assert copy.samples_written == 6 * dense // 512 and copy.files_written == 6
    assert peak < 256 * 1024, peak
    theirs, ours = read_time_index(source, 0), read_time_index(replica, 0)
    assert ours.times_ns.tolist() == theirs.times_ns.tolist() and ours.positions.tolist() == theirs.positions.tolist()


def test_a_file_a_recorder_may_now_append_to_is_not_replaced_and_the_copy_ends_before_it(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    limits = [(START, STOP)]
    copy = TimeIndexCopy(replica, geometry(), START, STOP, lambda: limits[0], step_segments=4)
    answer_from(source, copy, *copy.next_request())  # type: ignore[misc]
    copy.do_work()
    copy.do_work()
    assert copy.files_written == 2
    own_last = file_samples(replica, 3 * SEGMENT)
    limits[0] = (START, 3 * SEGMENT)  # an extension began recording into the stop's segment
    copy.do_work()
    with pytest.raises(TimeIndexCopyRefused, match="changed under the copy"):
        copy.do_work()
    copy.close()
    assert copy.files_written == 3 and copy.dated_to == 3 * SEGMENT
    assert file_samples(replica, 3 * SEGMENT) == own_last
    assert not [name for name in os.listdir(replica) if name.endswith(time_index_copy.TEMP_SUFFIX)]


def test_a_step_whose_samples_did_not_all_come_is_refused_before_it_is_written(dirs):
    source, replica = dirs
    write_index(replica, REPLICA_T0, START, STOP)
    before = {base: file_samples(replica, base) for base in range(0, STOP, SEGMENT)}
    copy = TimeIndexCopy(replica, geometry(), START, STOP, lambda: (START, STOP))
    low, high = copy.next_request()  # type: ignore[misc]
    chunk = next(RecordingTimeIndex(source, geometry()).samples(low, high, MAX_SAMPLES_PER_MESSAGE))
    copy.on_samples(chunk, 10 * MS)
    with pytest.raises(TimeIndexCopyRefused, match="received, the source sent"):
        copy.on_step_end(len(chunk) + 5)
    copy.close()
    assert {base: file_samples(replica, base) for base in range(0, STOP, SEGMENT)} == before


def test_a_source_segment_without_samples_is_dated_by_the_sample_before_it(dirs):
    """The source's index was off for a while (one segment has no `.tix`): the replica's file of that segment
    holds the governing sample moved to its first byte, and the copy goes on (it once failed on an empty part)."""
    source, replica = dirs
    os.remove(source / time_index_file_name(0, SEGMENT))
    write_index(replica, REPLICA_T0, START, STOP)
    index = source_index(source, START, STOP)
    written = copy_time_index(replica, geometry(), START, STOP, index, STOP)
    assert written == 4
    before = file_samples(source, 0)[-1]
    assert file_samples(replica, SEGMENT) == [(before[0], SEGMENT)]
    for base in (0, 2 * SEGMENT, 3 * SEGMENT):
        assert file_samples(replica, base) == file_samples(source, base)
    times = read_time_index(replica, 0, START, STOP).times_ns
    assert bool(np.all(np.diff(times) >= 0))


def test_an_extension_already_dated_by_the_replica_s_last_sample_copies_nothing_more(dirs):
    """The extension's first byte is dated by the replica's own last sample with the source's time (an earlier
    copy's): the part left to copy is empty, and the copy ends well."""
    source, replica = dirs
    copy_time_index(replica, geometry(), START, SEGMENT + BLOCK, source_index(source, START, SEGMENT + BLOCK),
                    STOP)
    before = read_time_index(replica, 0, START, STOP).positions.tolist()
    copy_time_index(replica, geometry(), SEGMENT + BLOCK, SEGMENT + BLOCK + 32,
                    source_index(source, SEGMENT + BLOCK, SEGMENT + BLOCK + 32), STOP)
    assert read_time_index(replica, 0, START, STOP).positions.tolist()[: len(before)] == before
