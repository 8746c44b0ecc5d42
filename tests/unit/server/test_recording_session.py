"""RecordingSession state by state: INIT → RECORDING → INACTIVE → STOPPED, with a fake image and rec-pos counter.

The writer and its segment files are real (a temporary archive directory); blocks come from `StreamBuilder`,
cut the way `Image.blockPoll` hands them over, so what lands on disk can be compared byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aeron_archive_spark.archive.exceptions import ErrorCode
from aeron_archive_spark.archive.server.counters import WorkerTotals
from aeron_archive_spark.archive.server.recording_events_proxy import RecordingEventsProxy
from aeron_archive_spark.archive.server.recording_session import RecordingSession, RecordingSessionState
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.segments import segment_file_name
from tests.unit.server.fakes import EventsPublication, FakeClock, FakeCounter, FakeImage
from tests.unit.storage_helpers import SEGMENT_LENGTH, STREAM_ID, TERM_LENGTH, StreamBuilder, frame_bytes

RECORDING_ID = 3
State = RecordingSessionState
WRITE_TIME_NS = 1_500


class Rig:
    def __init__(self, archive_dir: Path, blocks: Iterable[tuple[int, bytes]] = (), join: int = 0,
                 with_events: bool = True) -> None:
        self.archive_dir = archive_dir
        self.writer = RecordingWriter(archive_dir, RECORDING_ID, 0, join, TERM_LENGTH, SEGMENT_LENGTH)
        self.image = FakeImage(blocks)
        self.counter = FakeCounter(value=join)
        self.events_publication = EventsPublication()
        self.totals = WorkerTotals()
        self.clock = FakeClock(step=WRITE_TIME_NS)
        self.session = RecordingSession(
            correlation_id=11, recording_id=RECORDING_ID, start_position=0, join_position=join,
            stream_id=STREAM_ID, original_channel="aeron:ipc?term-length=64k", image=self.image,
            position=self.counter, writer=self.writer, block_length_limit=TERM_LENGTH,
            events=RecordingEventsProxy(self.events_publication) if with_events else None,
            totals=self.totals, subscription_id=21, control_session_id=31, auto_stop=False, nano_clock=self.clock)

    @property
    def state(self) -> RecordingSessionState:
        return self.session.state

    def work(self) -> int:
        return self.session.do_work(0)

    def events(self) -> list[Any]:
        return self.events_publication.messages()

    def segment(self, base: int = 0) -> Path:
        return self.archive_dir / segment_file_name(RECORDING_ID, base)


def stream(messages: int = 20, payload: int = 200) -> StreamBuilder:
    return StreamBuilder().append_many([payload] * messages)


def test_init_opens_the_segment_file_announces_the_recording_and_moves_to_recording(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    assert rig.state is State.INIT
    assert rig.work() == 1
    assert rig.state is State.RECORDING
    assert rig.segment().stat().st_size == SEGMENT_LENGTH
    (started,) = rig.events()
    assert (started.name, started.recording_id, started.start_position, started.session_id, started.stream_id) == (
        "RecordingStarted", RECORDING_ID, 0, rig.image.session_id, STREAM_ID)
    assert started.channel == "aeron:ipc?term-length=64k"
    assert started.source_identity == "aeron:ipc"


def test_init_failure_stops_the_session_with_the_error(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "missing" / "dir")
    rig.work()
    assert rig.state is State.STOPPED
    assert rig.session.is_done()
    assert rig.session.error is not None
    assert rig.session.error.error_code == ErrorCode.GENERIC
    assert "missing" in rig.session.error.message
    assert [e.name for e in rig.events()] == ["RecordingStopped"]


def test_recording_writes_each_block_and_reports_the_position(tmp_path: Path) -> None:
    builder = stream()
    builder.pad_to_term_end()
    builder.append_many([300] * 5)
    blocks = builder.blocks(block_limit=1024)
    rig = Rig(tmp_path, list(blocks))
    rig.work()
    ends = []
    for position, block in blocks:
        assert rig.work() == len(block)
        ends.append(position + len(block))
        assert rig.session.recorded_position == position + len(block)
    assert rig.counter.history == ends
    assert rig.state is State.RECORDING
    assert rig.work() == 0  # nothing more yet: idle, still recording
    assert rig.state is State.RECORDING
    rig.writer.close()
    with open(rig.segment(), "rb") as f:
        assert f.read(builder.position) == builder.expected_bytes(0, builder.position)
    assert rig.totals.total_bytes == builder.position
    assert rig.totals.total_time_ns == WRITE_TIME_NS * len(blocks)
    assert rig.totals.max_time_ns == WRITE_TIME_NS
    progress = [e for e in rig.events() if e.name == "RecordingProgress"]
    assert [e.position for e in progress] == ends


def test_recording_from_a_join_position_writes_at_that_position(tmp_path: Path) -> None:
    builder = StreamBuilder(start_position=4096).append_many([100] * 4)
    rig = Rig(tmp_path, builder.blocks(), join=4096)
    rig.work()
    rig.work()
    assert rig.session.recorded_position == builder.position
    assert rig.counter.value == builder.position
    rig.writer.close()
    with open(rig.segment(), "rb") as f:
        f.seek(4096)
        assert f.read(builder.position - 4096) == builder.expected_bytes(4096, builder.position)


def test_end_of_stream_stops_the_recording_after_the_last_block(tmp_path: Path) -> None:
    builder = stream(messages=3)
    rig = Rig(tmp_path, builder.blocks())
    rig.image.is_end_of_stream = True
    rig.work()
    rig.work()  # the remaining block is still recorded
    assert rig.state is State.RECORDING
    assert rig.work() == 1
    assert rig.state is State.INACTIVE
    assert not rig.writer.is_closed
    rig.work()
    assert rig.state is State.STOPPED
    assert rig.session.is_done()
    assert rig.writer.is_closed
    assert rig.session.recorded_position == builder.position
    assert rig.session.error is None
    stopped = rig.events()[-1]
    assert (stopped.name, stopped.start_position, stopped.stop_position) == (
        "RecordingStopped", 0, builder.position)


def test_a_closed_image_stops_the_recording(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.work()
    rig.image.is_closed = True
    rig.work()
    assert rig.state is State.INACTIVE
    rig.work()
    assert rig.state is State.STOPPED


def test_abort_stops_the_recording_at_the_next_duty_cycle_without_polling(tmp_path: Path) -> None:
    builder = stream(messages=3)
    rig = Rig(tmp_path, builder.blocks())
    rig.work()
    rig.session.abort("recording stopped")
    polls = rig.image.polls
    assert rig.work() == 1
    assert rig.image.polls == polls
    assert rig.state is State.STOPPED
    assert rig.writer.is_closed
    assert rig.session.recorded_position == 0
    assert rig.session.error is None


def test_abort_before_init_stops_without_opening_a_segment(tmp_path: Path) -> None:
    rig = Rig(tmp_path, with_events=False)
    rig.session.abort()
    rig.work()
    assert rig.state is State.STOPPED
    assert not rig.segment().exists()


def test_a_write_error_stops_the_recording_with_the_error_at_the_last_good_position(tmp_path: Path) -> None:
    builder = stream(messages=4)
    blocks = builder.blocks(block_limit=512)
    rig = Rig(tmp_path, blocks)
    rig.work()
    rig.work()
    good = rig.session.recorded_position
    assert good == blocks[0][0] + len(blocks[0][1])
    # The disk refuses the next write: the segment's descriptor now only allows reading (EBADF on pwrite).
    read_only = os.open(rig.segment(), os.O_RDONLY)
    os.dup2(read_only, rig.writer._fd)
    os.close(read_only)
    rig.work()
    assert rig.state is State.INACTIVE
    assert rig.session.error is not None
    assert rig.session.error.error_code == ErrorCode.GENERIC
    assert f"position={good}, recordingId={RECORDING_ID}" in rig.session.error.message
    rig.work()
    assert rig.state is State.STOPPED
    assert rig.session.recorded_position == good
    assert rig.counter.value == good
    assert rig.events()[-1].stop_position == good


def test_a_block_that_crosses_the_segment_end_is_an_error(tmp_path: Path) -> None:
    join = SEGMENT_LENGTH - 64
    too_long = frame_bytes(bytes(100), term_offset=join % TERM_LENGTH, term_id=8)  # 160 bytes > 64 left
    rig = Rig(tmp_path, [(join, too_long)], join=join)
    rig.work()
    rig.work()
    assert rig.state is State.INACTIVE
    assert rig.session.error is not None
    assert "crosses the end of segment" in rig.session.error.message
    rig.work()
    assert rig.state is State.STOPPED
    assert rig.session.recorded_position == join


def test_a_failing_image_poll_stops_the_recording_with_a_generic_error(tmp_path: Path) -> None:
    builder = stream(messages=2)
    rig = Rig(tmp_path, builder.blocks())
    rig.work()
    rig.work()
    rig.image.poll_error = RuntimeError("image gone bad")
    rig.work()
    assert rig.state is State.INACTIVE
    assert rig.session.error is not None
    assert rig.session.error.error_code == ErrorCode.GENERIC
    expected = f"recording {RECORDING_ID} failed at position {builder.position}: image gone bad"
    assert rig.session.error.message == expected
    rig.work()
    assert rig.state is State.STOPPED


def test_close_releases_the_image(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.session.close()
    assert rig.image.closed_by_session
