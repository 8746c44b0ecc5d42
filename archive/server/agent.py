"""Agent threads: a duty-cycle loop with a back-off idle strategy, and session workers (recorder, replayer)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from aeron_archive_spark.archive.server.rate_limited_log import RateLimitedLog
from aeron_archive_spark.archive.server.session import Session

log = logging.getLogger(__name__)

# How long a session worker with no session blocks on its hand-over queue before looking again (a session or a
# close wakes it at once; the bound only keeps a lost wake-up from stalling it).
PARK_TIMEOUT_S = 1.0


class BackoffIdleStrategy:
    """After a cycle with no work: one more cycle at once, then sleeps from `min_sleep_s` doubling to `max_sleep_s`.

    Aeron's agents spin ten times and yield twenty before they park, because a Java or C duty cycle costs
    nanoseconds. A Python duty cycle costs tens of microseconds, and a yield with another thread runnable is a
    context switch, so that ladder made each message of a slow feed cost ~30 cycles: measured on a `serve`
    recording a 500 msg/s UDP feed, the recorder thread alone used 20-29 % of a core (8,000 context switches a
    second); with one spin, no yields and sleeps from 50 us it used 7-10 % (2,000-2,700 a second), and on a
    shared 2-core host that CPU is taken from everything else. Python cannot park for less than ~50 us anyway, so
    the reaction to new work after a quiet spell is what it was: the current sleep, at most `max_sleep_s`. An
    agent with work never idles, so throughput does not depend on these values.

    `trickle_work` is for an agent whose work comes in bytes (the recorder): a cycle that did some work, but less
    than this, is a trickle, and the agent then waits (from `min_sleep_s`, doubling to `trickle_max_sleep_s`)
    instead of polling again at once, so that its next cycle finds a block worth its fixed cost. A UDP image grows
    one datagram at a time, and polling it again at once made the recorder of a 15-20 MB/s stream run ~1 KiB
    cycles back to back; what the recorder cost then was the cycles' fixed Python cost, not the bytes. The wait
    never exceeds `trickle_max_sleep_s`, far below what a publication's window takes to fill, so a trickle cannot
    throttle its sender; a cycle that finds `trickle_work` or more resets the back-off as any work does.

    `idle(0, back_pressured=True)` is for an agent whose work waits on a consumer that is draining (a replay whose
    publication window is full): the window reopens as soon as the subscriber and the driver catch up, typically
    within a millisecond, so sleeps are capped at `back_pressured_max_sleep_s` rather than doubling to
    `max_sleep_s`, for at most `back_pressured_max_idles` idle cycles in a row; after that the consumer is taken to
    be stalled and the ordinary back-off applies. (Measured with a replay onto IPC: sleeps of up to 1 ms left the
    subscriber without data for up to a quarter of a 16 MiB term's 8 MiB window each time the window filled.)
    """

    def __init__(
        self,
        max_spins: int = 1,
        max_yields: int = 0,
        min_sleep_s: float = 0.00005,
        max_sleep_s: float = 0.001,
        back_pressured_max_sleep_s: float = 0.0001,
        back_pressured_max_idles: int = 200,
        trickle_work: int = 0,
        trickle_max_sleep_s: float = 0.0005,
    ) -> None:
        self.max_spins, self.max_yields = max_spins, max_yields
        self.trickle_work, self.trickle_max_sleep_s = trickle_work, trickle_max_sleep_s
        self.min_sleep_s, self.max_sleep_s = min_sleep_s, max_sleep_s
        self.back_pressured_max_sleep_s = back_pressured_max_sleep_s
        self.back_pressured_max_idles = back_pressured_max_idles
        self._count = 0
        self._sleep = min_sleep_s

    def idle(self, work_count: int, back_pressured: bool = False) -> None:
        if work_count > 0:
            self._count = 0
            if work_count >= self.trickle_work:
                self._sleep = self.min_sleep_s
                return
            sleep = min(self._sleep, self.trickle_max_sleep_s)  # a trickle: let the next block grow
            time.sleep(sleep)
            self._sleep = min(sleep * 2, self.trickle_max_sleep_s)
            return
        self._count += 1
        if self._count <= self.max_spins:
            return
        if self._count <= self.max_spins + self.max_yields:
            time.sleep(0)
            return
        if back_pressured and self._count <= self.max_spins + self.max_yields + self.back_pressured_max_idles:
            time.sleep(min(self._sleep, self.back_pressured_max_sleep_s))
        else:
            time.sleep(self._sleep)
        self._sleep = min(self._sleep * 2, self.max_sleep_s)


class Agent(ABC):
    """Runs `do_work` on a dedicated thread until closed; an exception is reported, counted, and survived."""

    def __init__(
        self,
        name: str,
        error_handler: Callable[[BaseException], None],
        idle: BackoffIdleStrategy | None = None,
        nano_clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.name = name
        self._error_handler = error_handler
        self._idle = idle or BackoffIdleStrategy()
        self._nano_clock = nano_clock
        self._running = threading.Event()
        self._thread: threading.Thread | None = None
        self.max_cycle_time_ns = 0
        # A failure that repeats every duty cycle would otherwise write a traceback thousands of times a second.
        self._fault_log = RateLimitedLog(log)

    @abstractmethod
    def do_work(self, now_ns: int) -> int:
        """One duty cycle at time `now_ns`; return the work done so the idle strategy can back off when there is none.

        `now_ns` is read from the agent's clock once per cycle and handed down to every session the agent runs.
        """

    def on_close(self) -> None:  # noqa: B027 - an optional hook, deliberately not abstract
        """Release what the agent owns; runs on the agent thread after the loop ends."""

    def is_back_pressured(self) -> bool:
        """Whether the last cycle found no work only because a consumer has yet to drain (see the idle strategy)."""
        return False

    def is_awaiting(self) -> bool:
        """Whether something this agent started is in flight and its next step, another thread's, is due within a
        millisecond (a replay's hand-back during its set-up): the agent then idles in short sleeps, as when back
        pressured, for a bounded number of idle cycles, instead of backing off to `max_sleep_s`."""
        return False

    def park(self) -> bool:
        """After a cycle without work: block until there can be work again and return True, or return False to
        idle by the idle strategy. For an agent whose only source of work is a hand-over it can wait on."""
        return False

    def wake(self) -> None:  # noqa: B027 - an optional hook, deliberately not abstract
        """Unblock `park` (on close): the agent's thread then sees it is no longer running."""

    def start(self) -> None:
        self._running.set()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        log.debug("%s started", self.name)
        try:
            clock = self._nano_clock
            while self._running.is_set():
                now_ns = clock()
                try:
                    work = self.do_work(now_ns)
                except Exception as ex:  # an agent must survive a failing session
                    self._fault_log.error("error in duty cycle", "%s: error in duty cycle", self.name, exc_info=ex)
                    self._error_handler(ex)
                    work = 1
                self.max_cycle_time_ns = max(self.max_cycle_time_ns, clock() - now_ns)
                if self._fault_log.pending:
                    self._fault_log.flush()
                if work == 0 and self.park():
                    continue
                self._idle.idle(work, work == 0 and (self.is_back_pressured() or self.is_awaiting()))
        finally:
            try:
                self.on_close()
            except Exception as ex:
                log.exception("%s: error on close", self.name)
                self._error_handler(ex)
            log.debug("%s stopped", self.name)

    def close(self, timeout: float = 10.0) -> None:
        self._running.clear()
        self.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("%s did not stop within %.1fs", self.name, timeout)


class SessionWorker(Agent):
    """Runs a set of sessions (Aeron's `SessionWorker`): the recorder and the replayer are two of these.

    Sessions are added from the conductor thread through a queue; finished sessions are handed back to the
    conductor through `on_session_done`, which runs on this worker's thread and must only enqueue.

    With no session at all a worker has nothing to poll, so it blocks on that queue (`park`) instead of waking
    every millisecond: each wake of a sleeping thread cost ~40 us of CPU on the 2-core VMs measured (timer and
    scheduler work, not Python), so an idle `serve`'s recorder and replayer took ~75 ms of CPU a second between
    them, and during a replay the idle recorder's wakes competed with the replayer. A new session now also starts
    at once rather than after the current sleep.
    """

    def __init__(
        self,
        name: str,
        error_handler: Callable[[BaseException], None],
        on_session_done: Callable[[Session], None],
        nano_clock: Callable[[], int] = time.monotonic_ns,
        idle: BackoffIdleStrategy | None = None,
    ) -> None:
        super().__init__(name, error_handler, idle=idle, nano_clock=nano_clock)
        self._sessions: list[Session] = []
        self._incoming: queue.SimpleQueue[Session | None] = queue.SimpleQueue()  # None: a wake-up (close)
        self._on_session_done = on_session_done
        self._back_pressured = False

    def add_session(self, session: Session) -> None:
        self._incoming.put(session)

    def park(self) -> bool:
        if self._sessions:
            return False
        try:
            session = self._incoming.get(timeout=PARK_TIMEOUT_S)
        except queue.Empty:
            return True
        if session is not None:
            self._sessions.append(session)
        return True

    def wake(self) -> None:
        self._incoming.put(None)

    def _take_incoming(self) -> int:
        taken = 0
        while True:
            try:
                session = self._incoming.get_nowait()
            except queue.Empty:
                return taken
            if session is not None:
                self._sessions.append(session)
                taken += 1

    def do_work(self, now_ns: int) -> int:
        work = self._take_incoming()
        done: list[Session] = []
        back_pressured = False
        for session in self._sessions:
            try:
                work += session.do_work(now_ns)
            except Exception as ex:  # one failing session must not stop the others
                self._error_handler(ex)
                session.abort(str(ex))
                work += 1
            if session.is_done():
                done.append(session)
            elif getattr(session, "back_pressured", False):  # a replay whose publication window is full
                back_pressured = True
        for session in done:
            self._sessions.remove(session)
            self._on_session_done(session)
        self._back_pressured = back_pressured
        return work

    def is_back_pressured(self) -> bool:
        return self._back_pressured

    def on_close(self) -> None:
        self._take_incoming()
        for session in self._sessions:
            session.abort("archive closing")
            for _ in range(100):  # let the state machine reach its terminal state (writer closed, counters set)
                if session.is_done():
                    break
                try:
                    session.do_work(self._nano_clock())
                except Exception as ex:  # keep closing the remaining sessions
                    self._error_handler(ex)
                    break
            self._on_session_done(session)
        self._sessions.clear()
