"""`TimeIndexSession` and `position_at_time` (the archive's answers to this project's TimeIndex and PositionAtTime
requests), driven with a fake control session over real `.tix` files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server import time_index_session as tis
from aeron_archive_spark.archive.server.control_response_proxy import ControlResponseProxy
from aeron_archive_spark.archive.server.time_index_session import TimeIndexSession, position_at_time
from aeron_archive_spark.archive.storage.time_index import TimeIndexWriter, read_time_index
from aeron_archive_spark.archive.storage.time_index_search import (
    SAMPLE_DTYPE,
    RecordingGeometry,
    RecordingTimeIndex,
)

from .fakes import FakeResponder

MS = 1_000_000
T0 = 1_764_000_000_000 * MS
RID = 5
TERM = 64 * 1024
SEGMENT = 128 * 1024
CORRELATION_ID = 41


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def write_index(directory: Path, count: int, step: int = 64) -> int:
    """`count` samples 1 ms apart, one every `step` bytes from 0; returns the position after the last."""
    clock = Clock()
    writer = TimeIndexWriter(directory, RID, MS, clock=clock)
    writer.open(0, 0)
    base = 0
    for i in range(count):
        position = i * step
        if position - position % SEGMENT != base:
            base = position - position % SEGMENT
            writer.roll(base)
        clock.now = T0 + i * MS
        writer.on_block(position)
    writer.close()
    return count * step


def index(directory: Path, limit: int, start: int = 0) -> RecordingTimeIndex:
    return RecordingTimeIndex(directory, RecordingGeometry(RID, start, limit, TERM, SEGMENT))


def samples_sent(responder: FakeResponder) -> np.ndarray:
    parts = [np.frombuffer(r.values[2], dtype=SAMPLE_DTYPE) for r in responder.of_kind("samples")]
    return np.concatenate(parts)


def test_a_long_answer_goes_in_bounded_messages_over_several_cycles_then_ok_with_the_count(tmp_path: Path) -> None:
    limit = write_index(tmp_path, 10_000)
    responder = FakeResponder()
    session = TimeIndexSession(responder, CORRELATION_ID, index(tmp_path, limit), 1000, -1)
    cycles = 0
    while not session.is_done():
        sent = len(responder.responses)
        session.do_work(0)
        cycles += 1
        assert len(responder.responses) - sent <= tis.MAX_MESSAGES_PER_WORK_CYCLE + 1
    assert cycles >= 3
    messages = responder.of_kind("samples")
    assert all(0 < len(r.values[2]) <= 16 * tis.MAX_SAMPLES_PER_MESSAGE for r in messages)
    assert {r.values[:2] for r in messages} == {(RID, MS)}
    assert responder.responses[-1].kind == "ok" and responder.responses[-1].correlation_id == CORRELATION_ID
    got = samples_sent(responder)
    whole = read_time_index(tmp_path, RID, 1000, limit)
    assert got["position"].tolist() == whole.positions.tolist()
    assert got["time_ns"].tolist() == whole.times_ns.tolist()
    assert responder.responses[-1].values == (len(got),)


def test_the_largest_message_fits_the_smallest_response_term() -> None:
    samples = np.zeros(tis.MAX_SAMPLES_PER_MESSAGE, dtype=SAMPLE_DTYPE).tobytes()
    encoded = ControlResponseProxy().time_index_samples(1, 2, 3, 4, samples)
    assert len(encoded) <= 64 * 1024 // 8


def test_back_pressure_pauses_the_answer_and_loses_nothing(tmp_path: Path) -> None:
    limit = write_index(tmp_path, 2000)
    responder = FakeResponder(back_pressured=True)
    session = TimeIndexSession(responder, CORRELATION_ID, index(tmp_path, limit), 0, limit)
    assert session.do_work(0) == 0 and responder.responses == []
    responder.back_pressured = False
    session.do_work(0)
    responder.back_pressured = True
    session.do_work(0)
    responder.back_pressured = False
    while not session.is_done():
        session.do_work(0)
    assert samples_sent(responder)["position"].tolist() == list(range(0, limit, 64))


def test_a_range_no_sample_dates_still_tells_the_interval(tmp_path: Path) -> None:
    limit = write_index(tmp_path, 10)
    responder = FakeResponder()
    session = TimeIndexSession(responder, CORRELATION_ID, index(tmp_path, limit), limit + 100, -1)
    session.do_work(0)
    assert [(r.kind, r.values[:2]) for r in responder.responses] == [("samples", (RID, MS)), ("ok", (0,))]
    assert responder.of_kind("samples")[0].values[2] == b""
    assert session.is_done()


def test_a_recording_without_an_index_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    responder = FakeResponder()
    with pytest.raises(ArchiveError, match="recording 5 has no time index") as refused:
        TimeIndexSession(responder, CORRELATION_ID, index(tmp_path, 4096), 0, -1)
    assert refused.value.error_code == ErrorCode.GENERIC
    assert responder.responses == []
    with pytest.raises(ArchiveError, match="recording 5 has no time index"):
        position_at_time(index(tmp_path, 4096), T0)


def test_position_at_time_answers_from_the_index(tmp_path: Path) -> None:
    limit = write_index(tmp_path, 5000)
    assert position_at_time(index(tmp_path, limit), T0 + 4321 * MS) == 4321 * 64
    assert position_at_time(index(tmp_path, limit), T0 + 4321 * MS - 1) == 4321 * 64
    assert position_at_time(index(tmp_path, limit), T0 + 5000 * MS) == -1
    assert position_at_time(index(tmp_path, 64 * 100), T0 + 200 * MS) == -1  # past the recorded position


def test_an_aborted_answer_sends_nothing_more(tmp_path: Path) -> None:
    limit = write_index(tmp_path, 10_000)
    responder = FakeResponder()
    session = TimeIndexSession(responder, CORRELATION_ID, index(tmp_path, limit), 0, -1)
    session.do_work(0)
    sent = len(responder.responses)
    session.abort("control session closed")
    assert session.is_done() and session.do_work(0) == 0 and len(responder.responses) == sent


def test_several_ranges_each_closed_by_an_empty_message_with_back_pressure(tmp_path: Path) -> None:
    """TimeIndexesSession: each range's samples, then an empty message closing it (NO_INDEX_INTERVAL for a
    recording that cannot be dated, which is not an error), then OK(the number of ranges)."""
    from aeron_archive_spark.archive.server.time_index_session import TimeIndexesSession, time_index_ranges
    from aeron_archive_spark.archive.storage.time_index import NO_INDEX_INTERVAL, RANGE_DTYPE

    limit = write_index(tmp_path, 2000)

    def index_of(recording_id: int) -> RecordingTimeIndex:
        if recording_id == 99:
            raise ArchiveError("unknown recording id: 99", ErrorCode.UNKNOWN_RECORDING)
        return index(tmp_path, limit) if recording_id == RID else RecordingTimeIndex(
            tmp_path, RecordingGeometry(recording_id, 0, 1024, TERM, SEGMENT))  # no files: no index

    asked = [(RID, 0, limit), (99, 0, 64), (7, 0, 1024), (RID, 6400, 12800)]
    ranges = time_index_ranges(np.array(asked, dtype=RANGE_DTYPE).tobytes())
    responder = FakeResponder(back_pressured=True)
    session = TimeIndexesSession(responder, CORRELATION_ID, ranges, index_of)
    assert session.do_work(0) == 0
    while not session.is_done():
        responder.back_pressured = not responder.back_pressured
        session.do_work(0)
    answers: list[tuple[int, int, list[int]]] = []  # (recording id, interval, positions) per range
    current: list[int] = []
    for r in responder.of_kind("samples"):
        if r.values[2]:
            current.extend(np.frombuffer(r.values[2], dtype=SAMPLE_DTYPE)["position"].tolist())
        else:
            answers.append((r.values[0], r.values[1], current))
            current = []
    assert [(rid, interval) for rid, interval, _ in answers] == [
        (RID, MS), (99, NO_INDEX_INTERVAL), (7, NO_INDEX_INTERVAL), (RID, MS)]
    assert answers[0][2] == read_time_index(tmp_path, RID, 0, limit).positions.tolist()
    assert answers[3][2] == read_time_index(tmp_path, RID, 6400, 12800).positions.tolist()
    assert responder.responses[-1].kind == "ok" and responder.responses[-1].values == (4,)
    with pytest.raises(ArchiveError, match="not \\(recordingId, from, to\\) int64 triples"):
        time_index_ranges(b"x" * 25)
