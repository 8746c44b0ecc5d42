"""Requests sent without waiting on one control session, and their responses matched by correlation id.

Java's archive client offers two ways to talk to an archive: the synchronous calls of `AeronArchive`, and the
asynchronous pieces beneath them (`archiveProxy()` sends a request with a correlation id of the caller's,
`controlResponsePoller()` reads the response stream), which `ReplayMerge` and the archive's own
`ReplicationSession` drive as state machines, matching each response to the request it answers by correlation id.
`ControlResponses` is that second way for a replay reader: it sends replay and stop requests without waiting, so
several replays are set up by the archive while the first is read, and files every response on the session by
the request it answers.

One reader owns the session (a pool lease) while it uses this; the synchronous calls, which drop answers they did
not ask for, are not mixed in. What each request is owed:
- its answer, the first ControlResponse with its correlation id: OK with the replay session id, or an ERROR;
- for a replay that is being read (`watch`), a later ERROR with the same correlation id, which is how the archive
  reports a replay that fails after its OK: `poll` raises it;
- for a replay asked for ahead and not yet read, that later ERROR is kept (`watch` returns it: the reader then
  asks again rather than wait for an image that will never come).
Responses to requests that are not (or no longer) filed here were abandoned or released: logged and dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.client.aeron_archive import replay_request
from aeron_archive_spark.archive.codecs import Message
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import NULL_VALUE, ControlResponseCode
from aeron_archive_spark.archive.exceptions import ArchiveError, ArchiveTimeoutError, ErrorCode

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive, RequestIds
    from aeron_archive_spark.archive.client.archive_proxy import ArchiveProxy

log = logging.getLogger(__name__)

# Waiting for an answer: empty polls that only yield the CPU, then sleeps of this long.
ANSWER_WAIT_YIELDS = 3
ANSWER_WAIT_SLEEP_S = 0.0001


@dataclass(slots=True)
class _Filed:
    """One request's state: its answer once it came, a failure reported after it, whether a reader reads it."""

    name: str
    answer: Any = None
    failure: str | None = None
    watched: bool = False


class ControlResponses:
    """A reader's requests on one leased control session, by correlation id (see the module docstring)."""

    def __init__(self, archive: AeronArchive) -> None:
        self.archive = archive
        self._filed: dict[int, _Filed] = {}

    # ---- sending ----------------------------------------------------------------------------------------------

    def send(self, build: Callable[[RequestIds], Message], via: ArchiveProxy | None = None) -> int:
        """Send the request `build` makes of the session's ids without waiting; returns its correlation id, under
        which its answer is filed (`answer`, `await_answer`) until it is released. `via`: a publication of its own
        to send it on (a replay over a response channel); the answer still comes on this session."""
        request: list[Message] = []

        def keep(ids: RequestIds) -> Message:
            request.append(build(ids))
            return request[0]

        correlation_id = self.archive.send(keep, via)
        self._filed[correlation_id] = _Filed(request[0].name)
        return correlation_id

    def send_replay(
        self,
        recording_id: int,
        position: int,
        length: int,
        channel: str,
        stream_id: int,
        token: int = NULL_VALUE,
        via: ArchiveProxy | None = None,
    ) -> int:
        """Ask for a replay of `[position, position + length)` on (channel, stream_id); returns the correlation id
        its answer (`answer`, `await_answer`) and any later failure carry. Over a response channel, with a replay
        `token` and `via` the request publication that names the replay's subscription (`via_response`)."""
        return self.send(
            lambda ids: replay_request(ids, recording_id, position, length, channel, stream_id, -1, token), via
        )

    def send_replay_token(self, recording_id: int) -> int:
        """Ask for a replay token of `recording_id` (what a replay over a response channel is asked for with); the
        token is the answer's relevant id."""
        return self.send(lambda ids: m.ReplayTokenRequest.of(**ids, recording_id=recording_id))

    def replay(
        self, recording_id: int, position: int, length: int, channel: str, stream_id: int, timeout_s: float
    ) -> tuple[int, int]:
        """Ask for a replay and wait for its answer: `(replay_session_id, correlation_id)`, the replay watched
        (a later failure raises from `poll`) until `release`. A refusal raises `ArchiveError`; no answer within
        `timeout_s` raises `ArchiveTimeoutError` (the request is abandoned)."""
        correlation_id = self.send_replay(recording_id, position, length, channel, stream_id)
        replay_session_id = self.await_answer(correlation_id, timeout_s)
        if replay_session_id is None:
            raise ArchiveTimeoutError(
                f"no response to ReplayRequest within {timeout_s:.1f}s", ErrorCode.GENERIC, correlation_id
            )
        self.watch(correlation_id)
        return replay_session_id, correlation_id

    def stop_replay(self, replay_session_id: int, timeout_s: float) -> None:
        """Stop a replay and wait for the archive's answer (an ERROR raises `ArchiveError`, no answer
        `ArchiveTimeoutError`): what the synchronous `AeronArchive.stop_replay` does, without dropping the answers
        of replays asked for ahead meanwhile."""
        correlation_id = self.send(lambda ids: m.StopReplayRequest.of(**ids, replay_session_id=replay_session_id))
        try:
            if self.await_answer(correlation_id, timeout_s) is None:
                raise ArchiveTimeoutError(
                    f"no response to StopReplayRequest for replay {replay_session_id} within {timeout_s:.1f}s",
                    ErrorCode.GENERIC,
                    correlation_id,
                )
        finally:
            self.release(correlation_id)

    # ---- receiving --------------------------------------------------------------------------------------------

    def poll(self) -> None:
        """Poll the response stream once and file what came. A failure of a watched replay raises `ArchiveError`
        (after everything that came with it is filed)."""
        failure: ArchiveError | None = None
        for msg in self.archive.poll_responses():
            if msg.template_id != t.CONTROL_RESPONSE or msg.control_session_id != self.archive.control_session_id:
                log.debug("control message for no request of this reader: %s", msg)
                continue
            filed = self._filed.get(msg.correlation_id)
            if filed is None:
                log.debug("response to a request this reader abandoned or released: %s", msg)
            elif filed.answer is None:
                filed.answer = msg
            elif msg.code == ControlResponseCode.ERROR:
                if filed.watched:
                    failure = failure or ArchiveError(msg.error_message, msg.relevant_id, msg.correlation_id)
                elif filed.failure is None:
                    filed.failure = str(msg.error_message or f"response code {msg.code}")
        if failure is not None:
            raise failure

    def answer(self, correlation_id: int) -> int | None:
        """The relevant id answered to request `correlation_id` (a replay's session id), or None if no answer yet
        (the stream is polled once then). An ERROR answer raises `ArchiveError` and the request is done; a request
        not filed here raises `KeyError`."""
        filed = self._filed.get(correlation_id)
        if filed is None:
            raise KeyError(f"no request {correlation_id} is awaited on control session {self.control_session_id}")
        if filed.answer is None:
            self.poll()
            if filed.answer is None:
                return None
        msg = filed.answer
        if msg.code == ControlResponseCode.ERROR:
            del self._filed[correlation_id]
            raise ArchiveError(msg.error_message, msg.relevant_id, correlation_id)
        relevant_id: int = msg.relevant_id
        return relevant_id

    def await_answer(self, correlation_id: int, timeout_s: float) -> int | None:
        """`answer`, waited for up to `timeout_s`; None if none came (the request is then abandoned)."""
        deadline = time.monotonic() + timeout_s
        polls = 0
        while True:
            answered = self.answer(correlation_id)
            if answered is not None:
                return answered
            if time.monotonic() > deadline:
                self.release(correlation_id)
                return None
            polls += 1
            time.sleep(0 if polls <= ANSWER_WAIT_YIELDS else ANSWER_WAIT_SLEEP_S)

    def watch(self, correlation_id: int) -> str | None:
        """The replay of `correlation_id` is being read from now on: a failure reported for it raises from `poll`.
        Returns the failure reported while nobody read it (the replay failed before its turn), or None."""
        filed = self._filed[correlation_id]
        filed.watched = True
        return filed.failure

    def release(self, correlation_id: int) -> None:
        """Done with request `correlation_id`: whatever still comes for it is dropped."""
        self._filed.pop(correlation_id, None)

    @property
    def awaited(self) -> int:
        """Requests filed here and not yet released (answered or not)."""
        return len(self._filed)

    @property
    def control_session_id(self) -> int:
        return self.archive.control_session_id
