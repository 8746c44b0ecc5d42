"""A logger wrapper that writes at most one line per interval for each kind of fault, and counts the rest.

The archive listens on a public port, so a hostile or broken peer can make the same fault happen thousands of
times a second (malformed control messages, requests for unknown sessions, refused channels). Logging each one
would flood the log and, with a traceback each, cost more than handling the message. Each call names a `kind`
(a fixed string chosen by the caller, never text taken from the wire, so the table stays small); the first
occurrence of a kind in an interval is written, later ones in the same interval are only counted, and the count
is reported on the next line of that kind or by `flush` once the interval has passed, so nothing is hidden.

The clock is injected (nanoseconds, `time.monotonic_ns` by default) so tests can drive it. `burst` lets a log of
ordinary events (control sessions connecting and closing) write up to that many lines per interval and kind
before it starts counting, so normal traffic is logged line by line and only a flood is summarised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_INTERVAL_NS = 1_000_000_000
# Kinds are fixed strings from the code; the cap only guards against a caller that puts input into a kind.
MAX_KINDS = 1024


@dataclass
class _KindState:
    last_logged_ns: int  # start of the current interval: when its first line was written
    suppressed: int = 0
    level: int = logging.WARNING
    written: int = 0  # lines written in the current interval


class RateLimitedLog:
    """Writes through `logger`, at most once per `interval_ns` for each kind; see the module docstring."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_ns: int = DEFAULT_INTERVAL_NS,
        clock: Callable[[], int] = time.monotonic_ns,
        burst: int = 1,
    ) -> None:
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self._logger = logger
        self._interval_ns = interval_ns
        self._burst = burst
        self._clock = clock
        self._kinds: dict[str, _KindState] = {}
        self._pending = 0  # suppressed lines not reported yet, over all kinds

    @property
    def pending(self) -> int:
        """Suppressed lines not reported yet: `flush` has nothing to do while this is 0."""
        return self._pending

    @property
    def logger(self) -> logging.Logger:
        return self._logger

    def suppressed(self, kind: str) -> int:
        """Lines of `kind` counted but not yet written or reported."""
        state = self._kinds.get(kind)
        return state.suppressed if state is not None else 0

    def log(self, kind: str, level: int, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Write `msg % args` unless a line of `kind` was written less than an interval ago; True if written.

        The arguments are only formatted when the line is written, so a suppressed call costs a dict lookup.
        `exc_info` (a traceback) is only attached to written lines.
        """
        if not self._logger.isEnabledFor(level):
            return False
        now = self._clock()
        state = self._kinds.get(kind)
        in_interval = state is not None and now - state.last_logged_ns < self._interval_ns
        if state is not None and in_interval and state.written >= self._burst:
            state.suppressed += 1
            state.level = max(state.level, level)
            self._pending += 1
            return False
        if state is None:
            if len(self._kinds) >= MAX_KINDS:
                self._kinds.clear()  # never grow without bound; at worst a few extra lines are written
                self._pending = 0
            state = self._kinds[kind] = _KindState(now, level=level)
        elif not in_interval:
            state.last_logged_ns, state.written = now, 0
        suppressed, state.suppressed = state.suppressed, 0
        state.written += 1
        state.level = level
        self._pending -= suppressed
        if suppressed:
            self._logger.log(level, msg + " (%d more like this suppressed)", *args, suppressed, exc_info=exc_info)
        else:
            self._logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, kind: str, msg: str, *args: Any, exc_info: Any = None) -> bool:
        return self.log(kind, logging.WARNING, msg, *args, exc_info=exc_info)

    def info(self, kind: str, msg: str, *args: Any) -> bool:
        return self.log(kind, logging.INFO, msg, *args)

    def error(self, kind: str, msg: str, *args: Any, exc_info: Any = None) -> bool:
        return self.log(kind, logging.ERROR, msg, *args, exc_info=exc_info)

    def flush(self) -> int:
        """Report the kinds whose suppressed lines are at least an interval old; returns the lines written.

        Meant for a duty cycle: it costs one clock read and a scan of the (few) kinds, and writes at most one
        line per kind per interval, so a fault that stops is still reported with its final count.
        """
        if not self._pending:
            return 0
        now = self._clock()
        written = 0
        for kind, state in self._kinds.items():
            if state.suppressed and now - state.last_logged_ns >= self._interval_ns:
                self._logger.log(
                    state.level,
                    "%s: %d more like this suppressed in the last %.1fs",
                    kind,
                    state.suppressed,
                    (now - state.last_logged_ns) / 1e9,
                )
                self._pending -= state.suppressed
                state.suppressed = 0
                state.last_logged_ns, state.written = now, 1
                written += 1
        return written
