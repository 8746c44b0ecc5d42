"""Replay tokens: how a replay over a response channel finds the control session that asked for it.

A replay whose channel is a response channel (`control-mode=response`) must be asked for on a publication of the
requester's own (the replay publication answers that publication's image), not on its control session's. So the
requester first asks its control session for a token (ReplayTokenRequest), then sends the replay request with it
on the new publication; the token names the control session and the recording (Java 1.53's
`ArchiveConductor.generateReplayToken` / `getReplaySession` / `removeReplayTokensForSession` /
`checkReplayTokens`).

A token is a random 64-bit value other than -1 (Aeron's null value) not in use, valid for the archive's connect
timeout from its issue, for its recording only, and any number of times within that life; it goes when it expires
or when its control session closes. Time comes in as `now_ns` (the conductor's duty-cycle clock).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NULL_TOKEN = -1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class _Grant:
    control_session_id: int
    recording_id: int
    deadline_ns: int


class ReplayTokens:
    """The tokens in force (see the module docstring)."""

    def __init__(self, lifetime_ns: int, rng: random.Random | None = None) -> None:
        self._lifetime_ns = lifetime_ns
        self._rng = rng if rng is not None else random.SystemRandom()
        self._grants: dict[int, _Grant] = {}

    def __len__(self) -> int:
        return len(self._grants)

    def generate(self, control_session_id: int, recording_id: int, now_ns: int) -> int:
        """A new token for `recording_id`, owned by the control session `control_session_id`."""
        token = NULL_TOKEN
        while token == NULL_TOKEN or token in self._grants:
            token = self._rng.randint(_INT64_MIN, _INT64_MAX)
        self._grants[token] = _Grant(control_session_id, recording_id, now_ns + self._lifetime_ns)
        return token

    def control_session_id(self, token: int, recording_id: int, now_ns: int) -> int | None:
        """The control session a token belongs to, if it is in force and was given for `recording_id`."""
        grant = self._grants.get(token)
        if grant is None or grant.recording_id != recording_id or now_ns >= grant.deadline_ns:
            return None
        return grant.control_session_id

    def describe_refusal(self, token: int, recording_id: int, now_ns: int) -> str:
        """Why `control_session_id` refused the token: Java's text, then what was wrong with it."""
        grant = self._grants.get(token)
        if grant is None:
            why = "no such token (never issued, expired or its control session closed)"
        elif grant.recording_id != recording_id:
            why = f"the token was issued for recordingId={grant.recording_id}, not recordingId={recording_id}"
        else:
            why = f"the token expired {(now_ns - grant.deadline_ns) // 1_000_000} ms ago"
        return f"Unknown session or token timeout for replayToken={token}: {why}"

    def remove_session(self, control_session_id: int) -> None:
        """The control session closed: its tokens go with it."""
        for token in [t for t, g in self._grants.items() if g.control_session_id == control_session_id]:
            del self._grants[token]

    def expire(self, now_ns: int) -> None:
        """Drop every token whose life is over."""
        if self._grants:
            for token in [t for t, g in self._grants.items() if g.deadline_ns <= now_ns]:
                del self._grants[token]
