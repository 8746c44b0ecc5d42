"""The time index (`storage.time_index`): samples written by the recording writer with a stepped clock, read back,
and kept true through crashes (torn tails, samples past the recovered stop), extension, truncation, purge and
segment migration."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from aeron_archive_spark.archive.storage import segments
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.time_index import (
    HEADER_LENGTH,
    SAMPLE_LENGTH,
    TimeIndexError,
    TimeIndexWriter,
    companion_name,
    read_time_index,
    time_index_file_name,
)
from tests.unit.storage_helpers import SEGMENT_LENGTH, TERM_LENGTH, StreamBuilder, make_descriptor

MS = 1_000_000
T0 = 1_764_000_000_000 * MS  # a wall-clock time in 2025, in ns


class SteppedClock:
    """Wall-clock ns that advances by `step` on every read."""

    def __init__(self, start: int = T0, step: int = 4 * MS) -> None:
        self.now = start - step
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def record(
    tmp_path: Path,
    builder: StreamBuilder,
    clock: SteppedClock,
    *,
    interval_ns: int = 10 * MS,
    join: int | None = None,
    block_limit: int = 4096,
) -> list[tuple[int, int]]:
    """Write the builder's blocks through a RecordingWriter with a time index; returns (position, clock time when
    the block was offered) for each block."""
    start = builder.start_position
    join_position = start if join is None else join
    index = TimeIndexWriter(tmp_path, 0, interval_ns, clock=clock)
    writer = RecordingWriter(tmp_path, 0, start, join_position, TERM_LENGTH, SEGMENT_LENGTH, time_index=index)
    writer.init()
    offered = []
    for position, block in builder.blocks(block_limit):
        if position < join_position:
            continue
        writer.on_block(memoryview(block))
        offered.append((position, clock.now))
    writer.close()
    return offered


def test_every_block_is_dated_within_the_interval(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 1500)  # ~3 segments
    clock = SteppedClock(step=3 * MS)
    offered = record(tmp_path, builder, clock, interval_ns=10 * MS)
    index = read_time_index(tmp_path, 0, builder.start_position, builder.position)
    assert index.interval_ns == 10 * MS
    positions = np.array([p for p, _ in offered], dtype=np.int64)
    written_at = np.array([t for _, t in offered], dtype=np.int64)
    recorded = index.times_at(positions)
    assert np.all(recorded <= written_at)
    assert np.all(written_at - recorded < 10 * MS)
    assert np.all(np.diff(recorded) >= 0)
    # one sample every ~4 blocks (3 ms per block, 10 ms interval) plus one per segment: far fewer than blocks
    assert len(offered) // 5 < len(index.positions) < len(offered) // 3 + 4


def test_each_segment_has_its_own_complete_file(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 1500)
    record(tmp_path, builder, SteppedClock())
    bases = [f.base_position for f in segments.segment_files(tmp_path, 0)]
    assert len(bases) >= 3
    for base in bases:
        assert (tmp_path / time_index_file_name(0, base)).exists()
    # the first sample of every segment's file is the segment's first byte, so deleting earlier files loses no date
    for base in bases[1:]:
        raw = (tmp_path / time_index_file_name(0, base)).read_bytes()
        if len(raw) > HEADER_LENGTH:
            assert struct.unpack_from("<qq", raw, HEADER_LENGTH)[1] == base


def test_start_after_a_purge_is_dated_by_its_segments_own_samples(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 1500)
    offered = record(tmp_path, builder, SteppedClock())
    first = segments.segment_files(tmp_path, 0)[0]
    segments.delete_segment_file(tmp_path, first.name)
    assert not (tmp_path / time_index_file_name(0, first.base_position)).exists()
    new_start = first.base_position + SEGMENT_LENGTH
    index = read_time_index(tmp_path, 0, new_start, builder.position)
    assert index.first_position == new_start
    after = [(p, t) for p, t in offered if p >= new_start]
    recorded = index.times_at(np.array([p for p, _ in after], dtype=np.int64))
    assert np.all(recorded >= 0) and np.all(np.array([t for _, t in after]) - recorded < 10 * MS)


def test_position_at_or_after_a_time(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([500] * 600)
    offered = record(tmp_path, builder, SteppedClock(step=5 * MS))
    index = read_time_index(tmp_path, 0, builder.start_position, builder.position)
    t_mid = offered[len(offered) // 2][1]
    p = index.position_at_or_after(t_mid)
    assert p is not None
    # every block at or after p was written at or after t_mid - interval, every block before p before t_mid
    for position, written in offered:
        if position < p:
            assert written < t_mid + 10 * MS
        else:
            assert written >= t_mid
    assert index.position_at_or_after(offered[-1][1] + 1) is None
    assert index.position_at_or_after(0) == builder.start_position


def test_a_torn_sample_and_samples_past_the_stop_are_ignored_then_cut(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 300)
    record(tmp_path, builder, SteppedClock())
    name = time_index_file_name(0, builder.start_position)
    path = tmp_path / name
    whole = path.stat().st_size
    with open(path, "ab") as f:  # a kill -9 in the middle of a sample's write
        f.write(b"\x01" * (SAMPLE_LENGTH // 2))
    index = read_time_index(tmp_path, 0, builder.start_position, builder.position)
    assert len(index.positions) == (whole - HEADER_LENGTH) // SAMPLE_LENGTH

    # the catalog recovered a lower stop position (the last blocks were lost): later samples are not served ...
    stop = int(index.positions[len(index.positions) // 2])
    cut = read_time_index(tmp_path, 0, builder.start_position, stop)
    assert int(cut.positions[-1]) < stop
    # ... and an extension from that stop cuts them (and the torn tail) before it appends
    writer = TimeIndexWriter(tmp_path, 0, 10 * MS, clock=SteppedClock(start=T0 + 10_000 * MS))
    writer.open(builder.start_position, stop)
    writer.on_block(stop)
    writer.close()
    again = read_time_index(tmp_path, 0)
    assert int(again.positions[-1]) == stop
    assert int(again.times_ns[-1]) == T0 + 10_000 * MS
    assert (path.stat().st_size - HEADER_LENGTH) % SAMPLE_LENGTH == 0


def test_times_never_decrease_when_the_wall_clock_steps_back(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 400)
    clock = SteppedClock(step=6 * MS)
    index_writer = TimeIndexWriter(tmp_path, 0, 10 * MS, clock=clock)
    writer = RecordingWriter(tmp_path, 0, 0, 0, TERM_LENGTH, SEGMENT_LENGTH, time_index=index_writer)
    writer.init()
    for n, (_, block) in enumerate(builder.blocks(4096)):
        if n == 10:
            clock.now -= 1_000 * MS  # NTP stepped the clock back a second
        writer.on_block(memoryview(block))
    writer.close()
    index = read_time_index(tmp_path, 0)
    assert np.all(np.diff(index.times_ns) >= 0)


def test_extension_after_a_restart_continues_the_index(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 800)
    stop = builder.position
    half = [p for p, _ in builder.blocks(4096)][len(list(builder.blocks(4096))) // 2]
    record(tmp_path, builder, SteppedClock(), join=None)  # whole recording once
    # truncate to the middle (files of later segments deleted, the cut segment's samples cut), then extend
    files = segments.truncate_segment_files(tmp_path, _extent(builder, stop), half)
    for name in files:
        segments.delete_segment_file(tmp_path, name)
    truncated = read_time_index(tmp_path, 0)
    assert int(truncated.positions[-1]) < half
    later = SteppedClock(start=T0 + 3_600_000 * MS)
    record(tmp_path, builder, later, join=half)
    index = read_time_index(tmp_path, 0, 0, stop)
    k = int(np.searchsorted(index.positions, half))
    assert int(index.positions[k]) == half and int(index.times_ns[k]) >= T0 + 3_600_000 * MS
    assert np.all(np.diff(index.times_ns) >= 0)


def test_migrated_segments_take_their_time_index_along(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 300)
    record(tmp_path, builder, SteppedClock())
    base = builder.start_position
    segments.move_segment_files(tmp_path, ((segments.segment_file_name(0, base), segments.segment_file_name(5, base)),))
    assert (tmp_path / time_index_file_name(5, base)).exists()
    assert read_time_index(tmp_path, 0).is_empty
    assert not read_time_index(tmp_path, 5).is_empty


def test_a_file_that_is_not_a_time_index_is_named(tmp_path: Path) -> None:
    (tmp_path / time_index_file_name(3, 0)).write_bytes(b"x" * 64)
    with pytest.raises(TimeIndexError, match="3-0.tix"):
        read_time_index(tmp_path, 3)
    assert companion_name("3-0.rec") == "3-0.tix"
    assert companion_name("3-0.rec.del") == "3-0.tix"
    assert companion_name("archive.catalog") is None


def test_an_unwritable_index_never_stops_the_recording(tmp_path: Path) -> None:
    builder = StreamBuilder().append_many([200] * 100)
    index_writer = TimeIndexWriter(tmp_path / "missing-dir", 0, 10 * MS, clock=SteppedClock())
    writer = RecordingWriter(tmp_path, 0, 0, 0, TERM_LENGTH, SEGMENT_LENGTH, time_index=index_writer)
    writer.init()
    for _, block in builder.blocks(4096):
        writer.on_block(memoryview(block))
    writer.close()
    assert writer.position == builder.position
    assert index_writer.samples_written == 0
    assert not os.path.exists(tmp_path / "missing-dir")


def _extent(builder: StreamBuilder, stop: int) -> segments.RecordingExtent:
    return make_descriptor(start_position=builder.start_position, stop_position=stop)



def test_merged_rows_of_several_recordings_are_each_dated_by_their_own_index() -> None:
    from aeron_archive_spark.archive.storage.time_index import TimeIndex
    from aeron_archive_spark.archive.tables.decode import DecodedRows, merge_decoded

    def index(rid: int, base_ns: int) -> TimeIndex:
        return TimeIndex(rid, np.array([base_ns, base_ns + 5_000], dtype=np.int64),
                         np.array([0, 64], dtype=np.int64), 10 * MS)

    rows = [
        DecodedRows(1, 0, 0, [0, 64], [0, 0], [1, 1], b"ab", index(1, 1_000_000)),
        DecodedRows(2, 0, 0, [0], [0], [1], b"c", None),  # no index: null
        DecodedRows(3, 0, 0, [32, 96], [0, 0], [1, 1], b"de", index(3, 9_000_000)),
    ]
    batch = merge_decoded(rows)
    micros = batch.column("timestamp").cast("int64").to_pylist()
    assert micros == [1_000, 1_005, None, 9_000, 9_005]


def test_opening_reads_nothing_for_a_new_recording_and_little_for_an_extension(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`open` runs on the recorder thread: no directory listing, no whole file read, whatever the archive holds."""
    builder = StreamBuilder().append_many([200] * 1500)
    record(tmp_path, builder, SteppedClock())
    listings = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda d: listings.append(d) or real_listdir(d))
    fresh = TimeIndexWriter(tmp_path, 9, 10 * MS, clock=SteppedClock())
    fresh.open(0, 0, SEGMENT_LENGTH, 0)
    fresh.close()
    stop = builder.position
    base = stop - stop % SEGMENT_LENGTH
    later = SteppedClock(start=T0 - 1_000 * MS)  # a clock behind the recording's last sample: held
    extension = TimeIndexWriter(tmp_path, 0, 10 * MS, clock=later)
    extension.open(base, stop, SEGMENT_LENGTH, 0)
    extension.on_block(stop)
    extension.close()
    assert listings == []
    index = read_time_index(tmp_path, 0)
    assert int(index.positions[-1]) == stop and bool(np.all(np.diff(index.times_ns) >= 0))


def test_a_file_a_crash_left_without_its_header_has_no_samples(tmp_path: Path) -> None:
    """Created but its header never written (kill -9 at that instant), or zeros after a power cut: no samples,
    not an error, for readers and for the archive's search; the next writer writes it whole."""
    from aeron_archive_spark.archive.storage.time_index_search import RecordingGeometry, RecordingTimeIndex

    (tmp_path / time_index_file_name(0, 0)).write_bytes(b"")
    (tmp_path / time_index_file_name(0, SEGMENT_LENGTH)).write_bytes(bytes(HEADER_LENGTH + SAMPLE_LENGTH))
    assert read_time_index(tmp_path, 0).is_empty
    search = RecordingTimeIndex(tmp_path, RecordingGeometry(0, 0, 2 * SEGMENT_LENGTH, TERM_LENGTH, SEGMENT_LENGTH))
    assert search.position_at_or_after(T0) == -1
    writer = TimeIndexWriter(tmp_path, 0, 10 * MS, clock=SteppedClock())
    writer.open(0, 0, SEGMENT_LENGTH, 0)
    writer.on_block(0)
    writer.close()
    assert read_time_index(tmp_path, 0).positions.tolist() == [0]


def test_with_sync_each_sample_and_each_new_file_is_made_durable(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd))
    writer = TimeIndexWriter(tmp_path, 0, 10 * MS, clock=SteppedClock(step=20 * MS), sync=True)
    writer.open(0, 0, SEGMENT_LENGTH, 0)
    for position in (0, 64, 128):
        writer.on_block(position)
    writer.close()
    assert len(synced) == 1 + 3  # the new file's header, then each sample
    quiet = TimeIndexWriter(tmp_path, 1, 10 * MS, clock=SteppedClock(step=20 * MS))
    quiet.open(0, 0, SEGMENT_LENGTH, 0)
    quiet.on_block(0)
    quiet.close()
    assert len(synced) == 4
