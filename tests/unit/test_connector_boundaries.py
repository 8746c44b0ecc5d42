"""Message-boundary scans used to clamp end offsets (never inside a fragmented message) and to cut by bytes."""

from __future__ import annotations

import random

import pytest

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.ranges import SegmentFiles
from aeron_archive_spark.archive.tables.recording_source import TimeIndexMissingError, RecordingSource
from unit.test_connector_decode import INITIAL_TERM_ID, SESSION_ID, STREAM_ID, TERM, Stream, random_stream


class FakeSource(RecordingSource):
    """A RecordingSource over a synthetic stream whose recorded end can be moved."""

    def __init__(self, stream: Stream, end: int | None = None) -> None:
        super().__init__(SourceOptions.parse({"archiveDir": "/x", "recordingId": "5"}))
        self.stream = stream
        self.end = stream.position if end is None else end
        self.reads = 0

    def describe(self) -> str:
        return "fake"

    def list_selected(self, from_id=0):
        return {5: self.descriptor()} if from_id <= 5 else {}

    def find_recordings(self, ids):
        return {5: self.descriptor()} if 5 in ids else {}

    def descriptor(self) -> RecordingDescriptor:
        s = self.stream
        return RecordingDescriptor(0, 0, 5, 0, -1, s.start, -1, INITIAL_TERM_ID, 4 * TERM, TERM, 1408, SESSION_ID,
                                   STREAM_ID, "aeron:ipc", "aeron:ipc", "src")

    def recorded_end(self, descriptor):
        return self.end

    def chunk_source(self):
        outer = self

        class Chunks:
            def iter_chunks(self, partition):
                outer.reads += 1
                return outer.stream.chunks(partition.start, partition.limit, 4096)

        return Chunks()

    def location(self):
        return SegmentFiles("/x")

    def _position_at_time(self, descriptor, time_ns, end):
        raise TimeIndexMissingError("the fake source has no time index")


def message_boundaries(s: Stream) -> list[int]:
    """Positions where no message is open: each message start, and the end of the stream."""
    return [m[0] for m in s.messages] + [s.position]


@pytest.mark.parametrize("straddle", [True, False])
def test_boundary_at_or_before_is_the_last_message_end_not_above_the_cut(straddle):
    s = random_stream(21, 150, straddle)
    source = FakeSource(s)
    d = source.descriptor()
    bounds = message_boundaries(s)
    rng = random.Random(4)
    for _ in range(150):
        cut = rng.randrange(32, s.position + 1, 32)
        got = source.boundary_at_or_before(d, cut, 0, s.position)
        expected = max(b for b in bounds if b <= cut)
        # trailing padding after a message also counts as a boundary (the next message starts past it)
        assert got == expected or (got > expected and not any(expected < m[0] < got for m in s.messages)), (cut,)
        assert got <= cut


def test_first_boundary_after_is_the_end_of_the_next_whole_message():
    s = random_stream(22, 60)
    source = FakeSource(s)
    d = source.descriptor()
    for i, (position, _, _) in enumerate(s.messages[:-1]):
        got = source.first_boundary_after(d, position, s.position)
        assert got <= s.messages[i + 1][0]
        assert not any(position < m[0] < got for m in s.messages)
    assert source.first_boundary_after(d, s.position, s.position) == s.position


def test_safe_end_clamps_a_live_end_inside_a_fragmented_message_back_to_its_start_and_caches():
    s = Stream()
    s.add(b"a" * 100)
    s.add(b"b" * 100)
    big = s.add(bytes(10_000))
    source = FakeSource(s, end=big + 3 * 1408)  # the recorder is in the middle of the big message
    d = source.descriptor()
    assert source.safe_end(d) == big
    reads = source.reads
    assert source.safe_end(d) == big and source.reads == reads  # same recorded end: cached
    source.end = s.position
    assert source.safe_end(d) == s.position


def test_safe_end_of_an_empty_recording_is_its_start():
    s = Stream(start=TERM)
    source = FakeSource(s)
    assert source.safe_end(source.descriptor()) == TERM
