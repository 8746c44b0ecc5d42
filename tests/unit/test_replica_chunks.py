"""`ReplicaChunkSource` against fake replays: which copy a range starts on, where the next copy takes over after a
failure (past the last whole frame, or past a PAD cut after its header), the recording id each copy is asked for,
and the error when no copy can serve."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.replay import ReplayFetchError
from aeron_archive_spark.archive.storage.frames import HDR_TYPE_DATA, HDR_TYPE_PAD, FrameScan, align, scan_frames
from aeron_archive_spark.archive.tables.ranges import Copy, ReadRange, RecordingFacts, Replicas, RunningArchive
from aeron_archive_spark.archive.tables import replica_chunks
from aeron_archive_spark.archive.tables.replica_chunks import ReplicaChunkSource, next_position

FACTS = RecordingFacts(
    recording_id=7,
    start_position=0,
    term_length=65536,
    segment_length=131072,
    initial_term_id=0,
    session_id=5,
    stream_id=9,
    mtu_length=1408,
)
A = RunningArchive(ConnectionOptions(control_channel="aeron:udp?endpoint=a:8010"))
B = RunningArchive(ConnectionOptions(control_channel="aeron:udp?endpoint=b:8010"))
C = RunningArchive(ConnectionOptions(control_channel="aeron:udp?endpoint=c:8010"))
COPIES = Replicas((Copy(A, 7), Copy(B, 3), Copy(C, 11)))


@pytest.fixture(autouse=True)
def no_failures_remembered():
    replica_chunks._failed_at.clear()
    yield
    replica_chunks._failed_at.clear()


def frame(length: int, kind: int = HDR_TYPE_DATA) -> bytes:
    """A frame of `length` (header included), padded to its 32-byte alignment."""
    header = length.to_bytes(4, "little", signed=True) + bytes([0, 0xC0]) + kind.to_bytes(2, "little")
    return header + bytes(align(length, 32) - len(header))


def chunks_of(data: bytes, position: int, size: int) -> list[tuple[memoryview, int, FrameScan]]:
    """`data` (whole frames from `position`) cut into chunks of about `size` bytes at frame boundaries."""
    out = []
    offset = 0
    while offset < len(data):
        scan = scan_frames(memoryview(data)[offset:], 0, min(size, len(data) - offset), stop_at_padding=False)
        end = scan.stop_offset or min(size, len(data) - offset)
        piece = memoryview(data)[offset : offset + end]
        out.append((piece, position + offset, scan_frames(piece, 0, len(piece), stop_at_padding=False)))
        offset += end
    return out


class FakeReplays:
    """Stands for `ReplayChunkSource`: each archive serves `data` from the asked start, failing after `fail_after`
    chunks (None: never)."""

    def __init__(self, data: bytes, fail_after: dict[str, int | None]) -> None:
        self.data = data
        self.fail_after = fail_after
        self.asked: list[tuple[str, int, int]] = []  # (archive, recording id, start)
        self.read_ahead_ranges: list[ReadRange] = []

    def read_ahead(self, ranges: list[ReadRange]) -> None:
        self.read_ahead_ranges = list(ranges)

    def close(self, failed: bool = False) -> None:
        pass

    def iter_scanned_chunks(self, r: ReadRange) -> Iterator[tuple[memoryview, int, FrameScan]]:
        assert isinstance(r.location, RunningArchive)
        name = r.location.connection.control_channel
        self.asked.append((name, r.recording_id, r.start))
        failing = self.fail_after[name]
        if failing == 0:
            raise ConnectionError(f"{name} is down")
        for n, item in enumerate(chunks_of(self.data[r.start : r.limit], r.start, 1024)):
            if failing is not None and n == failing:
                raise ReplayFetchError(f"replay stalled at {name}")
            yield item


def source_with(replays: FakeReplays) -> ReplicaChunkSource:
    source = ReplicaChunkSource()
    source._replays = replays  # type: ignore[assignment]
    return source


def data_frames(n: int) -> bytes:
    return b"".join(frame(100 + 37 * (i % 20)) for i in range(n))


def read(source: ReplicaChunkSource, r: ReadRange) -> bytes:
    out = bytearray()
    for chunk, position in source.iter_chunks(r):
        assert position == r.start + len(out)
        out += chunk
    return bytes(out)


def test_a_range_reads_its_first_copy_by_its_index_and_others_only_on_failure():
    data = data_frames(200)
    replays = FakeReplays(
        data,
        {A.connection.control_channel: None, B.connection.control_channel: None, C.connection.control_channel: None},
    )
    source = source_with(replays)
    for index, first in ((0, "a"), (1, "b"), (2, "c"), (3, "a")):
        r = ReadRange(index, FACTS, 0, len(data), len(data), COPIES)
        replays.asked.clear()
        assert read(source, r) == data
        assert len(replays.asked) == 1 and f"endpoint={first}:" in replays.asked[0][0]
    assert [rid for _, rid, _ in replays.asked] == [7]


def test_a_copy_that_fails_mid_range_hands_over_at_the_position_it_reached_under_the_next_copys_id():
    data = data_frames(300)
    replays = FakeReplays(
        data, {A.connection.control_channel: 3, B.connection.control_channel: None, C.connection.control_channel: None}
    )
    r = ReadRange(0, FACTS, 0, len(data), len(data), COPIES)
    assert read(source_with(replays), r) == data
    (first, _, start_a), (second, rid_b, start_b) = replays.asked
    assert "endpoint=a:" in first and "endpoint=b:" in second and rid_b == 3
    assert start_a == 0 and 0 < start_b < len(data) and start_b % 32 == 0


def test_every_copy_failing_raises_naming_each_one():
    data = data_frames(50)
    replays = FakeReplays(
        data, {A.connection.control_channel: 0, B.connection.control_channel: 1, C.connection.control_channel: 0}
    )
    r = ReadRange(4, FACTS, 0, len(data), len(data), COPIES)
    with pytest.raises(ReplayFetchError) as info:
        read(source_with(replays), r)
    text = str(info.value)
    assert "recording 7 partition 4" in text
    for name in ("endpoint=a:", "endpoint=b:", "endpoint=c:"):
        assert name in text


def test_a_partitions_ranges_follow_its_first_range_onto_one_copy_and_are_read_ahead_there():
    data = data_frames(100)
    replays = FakeReplays(
        data,
        {A.connection.control_channel: None, B.connection.control_channel: None, C.connection.control_channel: None},
    )
    source = source_with(replays)
    ranges = [ReadRange(i, FACTS, 0, len(data), len(data), COPIES) for i in (4, 5, 6)]
    source.read_ahead(ranges)
    assert [r.location for r in replays.read_ahead_ranges] == [B, B, B]
    assert [r.recording_id for r in replays.read_ahead_ranges] == [3, 3, 3]
    for r in ranges:
        read(source, r)
    assert {name for name, _, _ in replays.asked} == {B.connection.control_channel}


def test_the_next_chunk_starts_past_a_pad_cut_after_its_header():
    data = frame(96) + frame(4096, HDR_TYPE_PAD)[:32]
    scan = scan_frames(memoryview(data), 0, len(data), stop_at_padding=False)
    assert next_position(memoryview(data), 1024, scan) == 1024 + 96 + 4096
    whole = frame(96) + frame(64)
    scan = scan_frames(memoryview(whole), 0, len(whole), stop_at_padding=False)
    assert next_position(memoryview(whole), 0, scan) == 96 + 64


def test_a_range_placed_on_one_archive_is_refused():
    r = ReadRange(0, FACTS, 0, 64, 64, A)
    with pytest.raises(ValueError, match="not copies on several archives"):
        list(ReplicaChunkSource().iter_chunks(r))


def test_an_archive_that_failed_is_tried_last_by_later_reads_of_the_process_for_a_while():
    data = data_frames(100)
    replays = FakeReplays(
        data, {A.connection.control_channel: 0, B.connection.control_channel: None, C.connection.control_channel: None}
    )
    source = source_with(replays)
    read(source, ReadRange(0, FACTS, 0, len(data), len(data), COPIES))
    assert [name[-6:-5] for name, _, _ in replays.asked] == ["a", "b"]
    replays.asked.clear()
    read(source, ReadRange(3, FACTS, 0, len(data), len(data), COPIES))  # index 3 starts on A, which failed
    assert [name[-6:-5] for name, _, _ in replays.asked] == ["b"]
    later = replica_chunks.time.monotonic() + replica_chunks.AVOID_FAILED_S + 1
    assert replica_chunks.prefer_answering(COPIES.copies, now=later) == COPIES.copies
