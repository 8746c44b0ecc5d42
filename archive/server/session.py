"""The contract shared by every long-running archive operation (Aeron's `Session` interface)."""

from __future__ import annotations

from typing import Protocol


class Session(Protocol):
    """One long-running operation with an explicit state machine, driven by `do_work` on one agent thread.

    Sessions never read a clock for their state machine: the agent reads it once per duty cycle and passes `now_ns`
    (monotonic nanoseconds) in, so one cycle sees one time and a test can step time by hand.
    """

    def do_work(self, now_ns: int) -> int:
        """Advance the state machine at time `now_ns`; return the amount of work done (0 lets the agent idle)."""

    def is_done(self) -> bool: ...

    def abort(self, reason: str = "") -> None:
        """Ask the session to stop; it finishes on its own thread at its next `do_work`."""

    def close(self) -> None: ...

    @property
    def session_id(self) -> int: ...
