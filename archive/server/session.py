"""The contract shared by every long-running archive operation (Aeron's `Session` interface)."""

from __future__ import annotations

from typing import Protocol


class Session(Protocol):
    """One long-running operation with an explicit state machine, driven by `do_work` on one agent thread."""

    def do_work(self) -> int:
        """Advance the state machine; return the amount of work done (0 lets the agent idle)."""

    def is_done(self) -> bool: ...

    def abort(self, reason: str = "") -> None:
        """Ask the session to stop; it finishes on its own thread at its next `do_work`."""

    def close(self) -> None: ...

    @property
    def session_id(self) -> int: ...
