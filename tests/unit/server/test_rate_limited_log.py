"""RateLimitedLog: one line per kind per interval, suppressed lines counted and reported, driven by a fake clock."""

from __future__ import annotations

import logging

import pytest

from aeron_archive_spark.archive.server.rate_limited_log import MAX_KINDS, RateLimitedLog
from tests.unit.server.fakes import SECOND, FakeClock

LOGGER = "tests.rate_limited"


@pytest.fixture
def rig(caplog: pytest.LogCaptureFixture) -> tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    return RateLimitedLog(logging.getLogger(LOGGER), clock=clock), clock, caplog


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_the_first_line_of_a_kind_is_written_and_repeats_within_the_interval_are_counted(
        rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, clock, caplog = rig
    assert log.warning("bad", "bad message %d", 1)
    for i in range(1000):
        assert not log.warning("bad", "bad message %d", i)
    assert lines(caplog) == ["bad message 1"]
    assert log.suppressed("bad") == 1000 and log.pending == 1000
    clock.advance(SECOND)
    assert log.warning("bad", "bad message %d", 2)
    assert lines(caplog)[-1] == "bad message 2 (1000 more like this suppressed)"
    assert log.pending == 0


def test_kinds_are_limited_independently(rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, _, caplog = rig
    for _ in range(10):
        log.warning("a", "fault a")
        log.info("b", "fault b")
    assert lines(caplog) == ["fault a", "fault b"]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]


def test_flush_reports_the_count_of_a_fault_that_stopped_once_the_interval_has_passed(
        rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, clock, caplog = rig
    for _ in range(5):
        log.error("bad", "bad")
    assert log.flush() == 0  # not an interval yet
    clock.advance(SECOND // 2)
    assert log.flush() == 0
    clock.advance(SECOND // 2)
    assert log.flush() == 1
    assert lines(caplog) == ["bad", "bad: 4 more like this suppressed in the last 1.0s"]
    assert caplog.records[-1].levelno == logging.ERROR
    clock.advance(10 * SECOND)
    assert log.flush() == 0 and log.pending == 0  # nothing new to report


def test_a_traceback_is_attached_only_to_written_lines(
        rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, _, caplog = rig
    error = RuntimeError("boom")
    for _ in range(100):
        log.warning("bug", "failed", exc_info=error)
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


def test_arguments_of_suppressed_lines_are_not_formatted(
        rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, _, _ = rig
    formatted = []

    class Spy:
        def __str__(self) -> str:
            formatted.append(1)
            return "spy"

    for _ in range(100):
        log.warning("k", "%s", Spy())
    assert 1 <= len(formatted) < 10  # the log handlers format the one written line; never each of the 100


def test_disabled_levels_cost_nothing_and_write_nothing(
        rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, clock, caplog = rig
    caplog.set_level(logging.WARNING, logger=LOGGER)
    readings = clock.readings
    assert not log.info("k", "quiet")
    assert clock.readings == readings and lines(caplog) == [] and log.pending == 0


def test_the_table_of_kinds_stays_bounded(rig: tuple[RateLimitedLog, FakeClock, pytest.LogCaptureFixture]) -> None:
    log, _, _ = rig
    for i in range(3 * MAX_KINDS):
        log.info(f"kind {i}", "x")
        log.info(f"kind {i}", "x")
    assert len(log._kinds) <= MAX_KINDS


def test_a_burst_writes_that_many_lines_per_interval_before_counting(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    events = RateLimitedLog(logging.getLogger(LOGGER), clock=clock, burst=3)
    for n in range(5):
        events.info("closed", "session %d closed", n)
    assert lines(caplog) == ["session 0 closed", "session 1 closed", "session 2 closed"]
    assert events.suppressed("closed") == 2
    clock.advance(SECOND)
    events.info("closed", "session %d closed", 5)  # a new interval: written, with the count of the last one
    events.info("closed", "session %d closed", 6)
    assert lines(caplog)[3:] == ["session 5 closed (2 more like this suppressed)", "session 6 closed"]
    with pytest.raises(ValueError, match="burst"):
        RateLimitedLog(logging.getLogger(LOGGER), burst=0)
