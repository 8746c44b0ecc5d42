"""Many small recordings: packing ranges into partitions (Spark's small-file rule), ends planned without a look at
stopped recordings' frames, and readers that drop a message a stop left open."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import random

import pytest
from unit.test_connector_boundaries import FakeSource
from unit.test_connector_decode import SCHEMA, TERM, Stream, random_stream

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.tables.planning import pack_ranges, plan_ranges
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, SegmentFiles
from aeron_archive_spark.archive.tables.read import read_batches, read_ranges
from aeron_archive_spark.archive.tables.recording_source import stopped_positions
from aeron_archive_spark.connector.source.partition import AeronArchivePartition, plan_partitions

MB = 1024 * 1024


def facts(rid: int) -> RecordingFacts:
    return RecordingFacts(rid, 0, TERM, 4 * TERM, 0, 1, 2, 1408)


def ranges_of(sizes: list[int]) -> list[ReadRange]:
    return [ReadRange(i, facts(i), 0, size, size, SegmentFiles("/dir")) for i, size in enumerate(sizes)]


def spark_file_partitions(sizes: list[int], max_bytes: int, open_cost: int) -> list[list[int]]:
    """Spark's `FilePartition.getFilePartitions`, transcribed: indexes of the files of each partition."""
    partitions, current, current_size = [], [], 0
    for index, size in sorted(enumerate(sizes), key=lambda item: (-item[1], item[0])):
        if current_size + size > max_bytes:
            if current:
                partitions.append(current)
            current, current_size = [], 0
        current.append(index)
        current_size += size + open_cost
    if current:
        partitions.append(current)
    return partitions


# -- pack_ranges -------------------------------------------------------------------------------------------------


def test_a_thousand_small_ranges_pack_into_one_partition_in_recording_order():
    packed = pack_ranges(ranges_of([512] * 1000), 64 * MB, 4096)
    assert len(packed) == 1
    assert [r.recording_id for r in packed[0]] == list(range(1000))


def test_the_open_cost_caps_how_many_ranges_share_a_partition():
    # each range weighs 1 KiB + 4 MiB: 16 fit in 64 MiB (the 17th would take the partition over)
    packed = pack_ranges(ranges_of([1024] * 100), 64 * MB, 4 * MB)
    assert [len(p) for p in packed] == [16] * 6 + [4]
    assert [r.index for p in packed for r in p] == list(range(100))


def test_full_ranges_stay_alone_and_small_ones_fill_up_in_order():
    sizes = [64 * MB, 1000, 64 * MB, 2000, 30 * MB, 3000, 40 * MB]
    packed = pack_ranges(ranges_of(sizes), 64 * MB, 4 * MB)
    # largest first: 0, 2 and 6 each open a partition (the next does not fit), 4 too; 5, 3, 1 join 4
    assert [[r.index for r in p] for p in packed] == [[0], [1, 3, 4, 5], [2], [6]]


def test_packing_follows_sparks_file_partition_rule():
    rng = random.Random(11)
    for _ in range(300):
        sizes = [rng.choice([0, 32, 4096, rng.randrange(1, 70 * MB)]) for _ in range(rng.randrange(1, 40))]
        max_bytes = rng.choice([MB, 16 * MB, 64 * MB])
        open_cost = rng.choice([1, 4096, 4 * MB])
        packed = pack_ranges(ranges_of(sizes), max_bytes, open_cost)
        expected = spark_file_partitions(sizes, max_bytes, open_cost)
        assert sorted(sorted(r.index for r in p) for p in packed) == sorted(sorted(p) for p in expected)
        assert packed == pack_ranges(ranges_of(sizes), max_bytes, open_cost)  # pure
        flat = [r.index for p in packed for r in p]
        assert sorted(flat) == list(range(len(sizes)))  # every range exactly once
        for p in packed:
            assert [r.index for r in p] == sorted(r.index for r in p)
            assert len(p) == 1 or sum(r.size for r in p) + open_cost * (len(p) - 1) <= max_bytes
        assert [p[0].index for p in packed] == sorted(p[0].index for p in packed)


def test_plan_partitions_cuts_big_recordings_and_packs_small_ones_and_pickles():
    planned = [(facts(1), 0, 10 * TERM, 10 * TERM), (facts(2), 0, 100, 100), (facts(3), 64, 4096, 8192)]
    parts = plan_partitions(planned, 4 * TERM, 4096, SegmentFiles("/dir"), {1: 10 * TERM, 3: 4096})
    pieces = [[(r.recording_id, r.start, r.end, r.limit, r.ends_at_stop) for r in p.read_ranges] for p in parts]
    assert pieces == [
        [(1, 0, 4 * TERM, 10 * TERM, True)],
        [(1, 4 * TERM, 8 * TERM, 10 * TERM, True)],
        [(1, 8 * TERM, 10 * TERM, 10 * TERM, True), (2, 0, 100, 100, False), (3, 64, 4096, 8192, False)],
    ]
    again = pickle.loads(pickle.dumps(parts))
    assert again == parts and all(isinstance(p, AeronArchivePartition) for p in again)
    assert parts[0].read_range.end == 4 * TERM
    with pytest.raises(ValueError):
        _ = parts[2].read_range  # several ranges: no single one
    assert "3 ranges of 3 recordings 1..3" in repr(parts[2])


def test_plan_ranges_marks_only_ranges_whose_limit_is_the_stop():
    parts = plan_ranges([(facts(1), 0, 100, 200), (facts(2), 0, 100, 100)], TERM, SegmentFiles("/d"), {1: 300, 2: 100})
    assert [r.ends_at_stop for r in parts] == [False, True]
    assert not any(r.ends_at_stop for r in plan_ranges([(facts(1), 0, 100, 100)], TERM, SegmentFiles("/d")))


# -- ends without a look at the frames ---------------------------------------------------------------------------


def descriptor_with_stop(source: FakeSource, stop: int):
    return dataclasses.replace(source.descriptor(), stop_position=stop)


def test_a_stopped_recordings_planning_end_is_its_stop_with_no_read_even_inside_a_message():
    s = Stream()
    s.add(b"a" * 100)
    big = s.add(bytes(10_000))
    cut = big + 3 * 1408  # a crash left the big message incomplete: the stop is a frame boundary inside it
    source = FakeSource(s, end=cut)
    d = descriptor_with_stop(source, cut)
    assert source.planning_end(d) == cut
    assert source.reads == 0
    assert source.safe_end(d) == big  # the exact boundary is still there for those who need it (export)
    assert source.reads > 0


def test_an_active_recordings_planning_end_is_clamped_to_a_message_boundary():
    s = Stream()
    s.add(b"a" * 100)
    big = s.add(bytes(10_000))
    source = FakeSource(s, end=big + 3 * 1408)  # the recorder is in the middle of the big message
    d = source.descriptor()
    assert d.is_active
    assert source.planning_end(d) == big
    assert source.reads > 0


def test_an_empty_recordings_planning_end_is_its_start():
    s = Stream(start=TERM)
    source = FakeSource(s)
    assert source.planning_end(descriptor_with_stop(source, TERM)) == TERM
    assert source.planning_end(source.descriptor()) == TERM
    assert source.reads == 0


def test_stopped_positions_lists_only_stopped_recordings():
    s = Stream()
    s.add(b"x")
    source = FakeSource(s)
    active = source.descriptor()
    stopped = descriptor_with_stop(source, s.position)
    assert stopped_positions([active]) == {}
    assert stopped_positions([stopped]) == {5: s.position}


# -- the reader drops a message left open at a stop -------------------------------------------------------------


class StreamChunks:
    def __init__(self, stream: Stream, chunk: int = 4096) -> None:
        self.stream = stream
        self.chunk = chunk
        self.reads = 0

    def iter_chunks(self, partition: ReadRange):
        self.reads += 1
        return self.stream.chunks(partition.start, partition.limit, self.chunk)


def rows(batches) -> list[tuple[int, bytes]]:
    out = []
    for batch in batches:
        assert batch.schema.equals(SCHEMA)
        out += zip(batch.column("position").to_pylist(), batch.column("value").to_pylist(), strict=True)
    return out


def cut_stream() -> tuple[Stream, int, int]:
    """A stream whose last message (fragmented over ~8 frames, across 4 KiB chunks) is cut after 5 fragments."""
    s = Stream(straddle=False)
    for i in range(30):
        s.add(bytes([i]) * 700)
    big = s.add(bytes(11_000))
    frames = [f for f in s.frames if f[0] >= big]
    stop = frames[5][0]
    return s, big, stop


def test_a_message_left_open_at_the_stop_is_dropped_with_a_warning(caplog):
    s, big, stop = cut_stream()
    whole = [(p, v) for p, v, _ in s.messages if p < big]
    r = ReadRange(0, s.facts(), 0, stop, stop, SegmentFiles("/nowhere"), ends_at_stop=True)
    with caplog.at_level(logging.WARNING):
        assert rows(read_batches(r, SCHEMA, None, StreamChunks(s))) == whole
    assert f"the message beginning at position {big} is incomplete at the recording's stop position {stop}" in (
        caplog.text
    )
    # the same range not ending at a stop: the open message is an error, as before
    strict = ReadRange(0, s.facts(), 0, stop, stop, SegmentFiles("/nowhere"))
    with pytest.raises(ArchiveError, match=rf"the message beginning at position {big} is incomplete"):
        rows(read_batches(strict, SCHEMA, None, StreamChunks(s)))


def test_pieces_of_a_recording_cut_at_its_stop_give_each_message_once():
    s, big, stop = cut_stream()
    whole = [(p, v) for p, v, _ in s.messages if p < big]
    for max_bytes in (1, 2 * TERM, 64 * MB):
        planned = plan_ranges([(s.facts(), 0, stop, stop)], max_bytes, SegmentFiles("/nowhere"), {5: stop})
        got = []
        for r in planned:
            got += rows(read_batches(r, SCHEMA, None, StreamChunks(s)))
        assert got == whole, max_bytes


def test_read_ranges_reads_in_order_and_merges_small_batches(monkeypatch):
    streams = [random_stream(40 + i, 5, straddle=False) for i in range(50)]
    # each stream is recording 5 in the fixture; give each its own id through its facts
    ranges = []
    expected = []
    for i, s in enumerate(streams):
        f = s.facts()
        ranges.append(ReadRange(i, dataclasses.replace(f, recording_id=100 + i), s.start, s.position, s.position,
                                SegmentFiles("/nowhere"), ends_at_stop=True))
        expected += [(100 + i, p, v) for p, v, _ in s.messages]
    sources = {100 + i: s for i, s in enumerate(streams)}

    class Chunks:
        def iter_chunks(self, partition: ReadRange):
            return sources[partition.recording_id].chunks(partition.start, partition.limit, 4096)

    monkeypatch.setattr("aeron_archive_spark.archive.tables.read.open_chunk_source", lambda _r: Chunks())
    batches = list(read_ranges(ranges, SCHEMA, None))
    assert len(batches) < 5  # 50 recordings' small batches merged
    got = [(b.column("recordingId")[i].as_py(), b.column("position")[i].as_py(), b.column("value")[i].as_py())
           for b in batches for i in range(b.num_rows)]
    assert got == expected


def test_small_ranges_decoded_together_give_the_same_table_as_each_range_alone(monkeypatch):
    """Small ranges' messages are kept as lists (`DecodedRows`) and built into Arrow once per merged batch:
    every column, the schema and the row order must be what the ranges give one by one, whatever their mix
    (a few whole messages, more than a few, fragmented ones, none)."""
    import pyarrow as pa

    from aeron_archive_spark.archive.tables import decode

    rng = random.Random(7)
    streams, ranges = [], []
    for i in range(60):
        s = Stream(straddle=False)
        kind = i % 4
        count = {0: rng.randint(1, 16), 1: rng.randint(17, 40), 2: rng.randint(1, 6), 3: 0}[kind]
        for j in range(count):
            size = rng.choice([0, 1, 12, 13, 100, 700]) if kind != 2 else rng.choice([100, 3000, 5000])
            s.add(rng.randbytes(size), reserved=rng.randrange(-(1 << 63), 1 << 63))
        streams.append(s)
        f = dataclasses.replace(s.facts(), recording_id=500 + i, session_id=1000 + i)  # frames set the stream
        ranges.append(ReadRange(i, f, s.start, s.position, s.position, SegmentFiles("/nowhere"), ends_at_stop=True))
    sources = {500 + i: s for i, s in enumerate(streams)}

    class Chunks:
        def iter_chunks(self, partition: ReadRange):
            return sources[partition.recording_id].chunks(partition.start, partition.limit, 4096)

    monkeypatch.setattr("aeron_archive_spark.archive.tables.read.open_chunk_source", lambda _r: Chunks())
    built: list[int] = []
    rows_batch = decode._rows_batch
    monkeypatch.setattr(decode, "_rows_batch", lambda rows: (built.append(len(rows)), rows_batch(rows))[1])
    together = pa.Table.from_batches(list(read_ranges(ranges, SCHEMA, None)), schema=SCHEMA)
    assert built and sum(built) >= 15  # the small ranges did go the deferred way
    alone = pa.Table.from_batches(
        [b for r in ranges for b in read_batches(r, SCHEMA, None, Chunks())], schema=SCHEMA
    )
    assert together.num_rows == alone.num_rows == sum(len(s.messages) for s in streams)
    assert together.equals(alone)
    assert together.column("sessionId").to_pylist()[:1] == [1000]  # the recording's, not the frames'


def test_open_cost_defaults_to_the_cost_of_the_path_and_can_be_set():
    from aeron_archive_spark.connector.source.options import ReadOptions

    assert ReadOptions.parse({"archiveDir": "/x", "recordingId": "1"}, False).open_cost_in_bytes == 128 * 1024
    assert ReadOptions.parse({"recordingId": "1"}, True).open_cost_in_bytes == 256 * 1024
    assert ReadOptions.parse({"recordingId": "1", "openCostInBytes": "1k"}, False).open_cost_in_bytes == 1024


# -- reads that go on after data loss (failOnDataLoss=false) ---------------------------------------------------


class LosingChunks:
    """Serves a stream, but the chunks from `lost_below` down are gone once `after` chunks were handed out (a purge
    under the reader): asking for one raises, as a missing segment file does."""

    def __init__(self, stream: Stream, lost_below: int, after: int) -> None:
        self.stream = stream
        self.lost_below = lost_below
        self.after = after
        self.given = 0

    def iter_chunks(self, partition: ReadRange):
        for chunk, position in self.stream.chunks(partition.start, partition.limit, 4096):
            if self.given >= self.after and position < self.lost_below:
                raise ArchiveError(f"recording segment not found (position {position}: purged or deleted?)")
            self.given += 1
            yield chunk, position


def test_a_read_that_loses_data_under_it_goes_on_with_what_is_left_giving_no_row_twice(monkeypatch):
    s = random_stream(61, 400, straddle=False)
    lost_below = s.start + (s.position - s.start) // 2 // TERM * TERM  # a term boundary mid-way
    r = ReadRange(0, s.facts(), s.start, s.position, s.position, SegmentFiles("/nowhere"), ends_at_stop=True)
    source = LosingChunks(s, lost_below, after=3)
    monkeypatch.setattr("aeron_archive_spark.archive.tables.read.open_chunk_source", lambda _r: source)
    asked = []

    def after_loss(failed: ReadRange, error: Exception):
        asked.append((failed.start, str(error)))
        return failed.surviving(lost_below, failed.limit)

    got = [(p, v) for b in read_ranges([r], SCHEMA, None, after_loss)
           for p, v in zip(b.column("position").to_pylist(), b.column("value").to_pylist(), strict=True)]
    positions = [p for p, _ in got]
    assert positions == sorted(set(positions))  # in order, none twice
    assert [(p, v) for p, v, _ in s.messages if p >= lost_below] == [(p, v) for p, v in got if p >= lost_below]
    assert len(asked) == 1 and "purged or deleted" in asked[0][1]
    # without the hook (failOnDataLoss=true), the failure is raised naming the position
    source.given = 0
    with pytest.raises(ArchiveError, match="purged or deleted"):
        list(read_ranges([r], SCHEMA, None))


def test_a_remainder_that_would_give_rows_again_is_refused(monkeypatch):
    s = random_stream(62, 400, straddle=False)
    r = ReadRange(0, s.facts(), s.start, s.position, s.position, SegmentFiles("/nowhere"), ends_at_stop=True)
    source = LosingChunks(s, s.position, after=5)  # fails past what a remainder from the start would reread
    monkeypatch.setattr("aeron_archive_spark.archive.tables.read.open_chunk_source", lambda _r: source)
    with pytest.raises(ArchiveError, match="purged or deleted"):
        list(read_ranges([r], SCHEMA, None, lambda failed, _e: failed.surviving(s.start + 32, failed.limit)))
    source.given = 0
    with pytest.raises(ArchiveError, match="purged or deleted"):  # "no data loss": the range itself
        list(read_ranges([r], SCHEMA, None, lambda failed, _e: failed))
