"""Time flows from the context's clocks through the agent loop into `do_work(now_ns)` of every session."""

from __future__ import annotations

import threading
import time

from aeron_archive_spark.archive.server.agent import Agent, SessionWorker
from aeron_archive_spark.archive.server.context import ArchiveContext, epoch_time_ms
from aeron_archive_spark.archive.server.session import Session
from tests.unit.server.fakes import FakeClock


class ScriptedSession:
    """Records the times it is run at; done after `cycles` cycles, or raises when told to."""

    def __init__(self, session_id: int, cycles: int = 1_000, error: Exception | None = None) -> None:
        self._session_id = session_id
        self.cycles = cycles
        self.error = error
        self.seen: list[int] = []
        self.aborted: list[str] = []

    @property
    def session_id(self) -> int:
        return self._session_id

    def do_work(self, now_ns: int) -> int:
        self.seen.append(now_ns)
        if self.error is not None:
            raise self.error
        if self.aborted:
            self.cycles = len(self.seen)
        return 1

    def is_done(self) -> bool:
        return len(self.seen) >= self.cycles

    def abort(self, reason: str = "") -> None:
        self.aborted.append(reason)

    def close(self) -> None:
        pass


def test_the_context_defaults_to_the_system_clocks_and_keeps_injected_ones(tmp_path: object) -> None:
    ctx = ArchiveContext(archive_dir=str(tmp_path))
    before = time.monotonic_ns()
    assert before <= ctx.nano_clock() <= time.monotonic_ns()
    assert abs(ctx.epoch_clock() - time.time() * 1000) < 1_000
    assert abs(epoch_time_ms() - time.time() * 1000) < 1_000
    nano, epoch = FakeClock(5), FakeClock(7)
    ctx = ArchiveContext(archive_dir=str(tmp_path), nano_clock=nano, epoch_clock=epoch).conclude()
    assert (ctx.nano_clock(), ctx.epoch_clock()) == (5, 7)


def test_a_session_worker_runs_every_session_at_the_cycle_time_and_hands_back_finished_ones() -> None:
    finished: list[Session] = []
    errors: list[BaseException] = []
    worker = SessionWorker("worker", errors.append, finished.append, nano_clock=FakeClock())
    short, long = ScriptedSession(1, cycles=2), ScriptedSession(2)
    worker.add_session(short)
    worker.add_session(long)
    worker.do_work(100)
    worker.do_work(250)
    worker.do_work(400)
    assert short.seen == [100, 250]
    assert long.seen == [100, 250, 400]
    assert finished == [short]
    assert errors == []


def test_a_failing_session_is_reported_aborted_and_does_not_stop_the_others() -> None:
    finished: list[Session] = []
    errors: list[BaseException] = []
    worker = SessionWorker("worker", errors.append, finished.append, nano_clock=FakeClock())
    failing, healthy = ScriptedSession(1, error=RuntimeError("disk on fire")), ScriptedSession(2)
    worker.add_session(failing)
    worker.add_session(healthy)
    worker.do_work(10)
    assert [str(e) for e in errors] == ["disk on fire"]
    assert failing.aborted == ["disk on fire"]
    assert healthy.seen == [10]


def test_closing_a_worker_aborts_its_sessions_and_runs_them_to_done_on_its_clock() -> None:
    finished: list[Session] = []
    clock = FakeClock(now=7_000, step=1)
    worker = SessionWorker("worker", lambda ex: None, finished.append, nano_clock=clock)
    running, queued = ScriptedSession(1), ScriptedSession(2)
    worker.add_session(running)
    worker.do_work(5_000)
    worker.add_session(queued)
    worker.on_close()
    assert running.aborted == ["archive closing"]
    assert queued.aborted == ["archive closing"]
    assert running.seen == [5_000, 7_000]
    assert queued.seen == [7_001]
    assert finished == [running, queued]


def test_a_worker_without_sessions_parks_until_one_is_added_and_wakes_on_close(monkeypatch) -> None:
    """With no session a worker blocks on its hand-over queue: it does not cycle (each wake of a sleeping thread
    costs CPU), a new session starts at once, and closing does not wait for the park's timeout."""
    from aeron_archive_spark.archive.server import agent as agent_module

    monkeypatch.setattr(agent_module, "PARK_TIMEOUT_S", 30.0)
    cycles = 0

    class CountingWorker(SessionWorker):
        def do_work(self, now_ns: int) -> int:
            nonlocal cycles
            cycles += 1
            return super().do_work(now_ns)

    finished: list[Session] = []
    done = threading.Event()
    worker = CountingWorker("worker", lambda ex: None, lambda s: (finished.append(s), done.set()))
    worker.start()
    try:
        time.sleep(0.3)
        assert cycles <= 2  # parked: no 1 ms idle cycles
        session = ScriptedSession(1, cycles=3)
        added = time.monotonic()
        worker.add_session(session)
        assert done.wait(5)
        assert time.monotonic() - added < 0.5 and finished == [session]
        time.sleep(0.2)
        parked_at = cycles
        time.sleep(0.3)
        assert cycles == parked_at  # parked again once the session is done
    finally:
        started = time.monotonic()
        worker.close()
    assert time.monotonic() - started < 2.0 and not worker._thread.is_alive()


def test_the_agent_loop_reads_its_clock_once_per_cycle_and_passes_that_time_down() -> None:
    clock = FakeClock(now=1_000, step=10)
    seen: list[int] = []
    stopped = threading.Event()

    class Counting(Agent):
        def do_work(self, now_ns: int) -> int:
            seen.append(now_ns)
            if len(seen) == 3:
                self._running.clear()
                stopped.set()
            return 1

    agent = Counting("counting", lambda ex: None, nano_clock=clock)
    agent.start()
    assert stopped.wait(5)
    agent.close()
    # Each cycle: one reading for `now`, one to measure the cycle's duration.
    assert seen == [1_000, 1_020, 1_040]
    assert agent.max_cycle_time_ns == 10


def test_idle_strategy_sleeps_briefly_while_a_consumer_drains_then_backs_off(monkeypatch):
    import aeron_archive_spark.archive.server.agent as agent_module
    from aeron_archive_spark.archive.server.agent import BackoffIdleStrategy

    slept: list[float] = []
    monkeypatch.setattr(agent_module.time, "sleep", slept.append)
    idle = BackoffIdleStrategy(max_spins=1, max_yields=1, min_sleep_s=0.00005, max_sleep_s=0.001,
                               back_pressured_max_sleep_s=0.0001, back_pressured_max_idles=5)
    for _ in range(12):
        idle.idle(0, back_pressured=True)
    sleeps = [s for s in slept if s > 0]
    assert sleeps[:5] == [0.00005, 0.0001, 0.0001, 0.0001, 0.0001]  # capped while the window reopens soon
    assert sleeps[5:] == [0.001] * len(sleeps[5:]) and sleeps[5:]  # a stalled consumer: the ordinary back-off
    slept.clear()
    idle.idle(1)  # work resets everything
    for _ in range(8):
        idle.idle(0)
    assert [s for s in slept if s > 0] == [0.00005, 0.0001, 0.0002, 0.0004, 0.0008, 0.001]


def test_idle_strategy_waits_after_a_trickle_and_polls_at_once_after_a_block(monkeypatch):
    import aeron_archive_spark.archive.server.agent as agent_module
    from aeron_archive_spark.archive.server.agent import BackoffIdleStrategy

    slept: list[float] = []
    monkeypatch.setattr(agent_module.time, "sleep", slept.append)
    idle = BackoffIdleStrategy(min_sleep_s=0.00005, max_sleep_s=0.001, trickle_work=1024, trickle_max_sleep_s=0.0004)
    for _ in range(6):
        idle.idle(100)  # a datagram at a time: wait, longer each time, up to the trickle cap
    assert slept == [0.00005, 0.0001, 0.0002, 0.0004, 0.0004, 0.0004]
    slept.clear()
    idle.idle(1024)  # a block worth a cycle: poll again at once, and the next trickle waits the shortest time
    idle.idle(100)
    assert slept == [0.00005]
    slept.clear()
    for _ in range(8):
        idle.idle(0)  # idle long enough to sleep the longest
    slept.clear()
    idle.idle(100)  # the first trickle after a quiet spell waits no longer than the trickle cap
    assert slept == [0.0004]
    slept.clear()
    plain = BackoffIdleStrategy(min_sleep_s=0.00005)  # no trickle rule: any work means poll again at once
    for _ in range(3):
        plain.idle(1)
    assert slept == []
