"""`ReplayMerge`: replay a recording, then join its live stream, on one multi-destination subscription (Java's
`io.aeron.archive.client.ReplayMerge`, the same states and rules).

A subscriber that starts late wants what was recorded and then what is published, without a gap and without
reading anything twice. The subscription (`control-mode=manual`) gets a replay destination; the archive replays
the recording into it from `start_position`, with an unbounded length, as the same session as the live stream (a
replay keeps the recording's session id), so both transports feed one image. When the replay comes within a
window of the recorded position (a quarter term, at most `LIVE_ADD_MAX_WINDOW`), the live destination is added;
once the image has reached the recorded position with both transports active, the replay destination is removed
and the replay stopped: MERGED. The image then continues on the live stream alone.

Every step is asynchronous: `poll` (or `do_work`) advances the state machine by at most one request and never
waits, so an application polls the merge in its duty cycle as it polls any subscription. Progress is checked: no
step for `merge_progress_timeout_ms` fails the merge (`has_failed`, and the error raises from `poll`). The control
session is the caller's `AeronArchive`, used asynchronously (`send`, `poll_responses`): do not call its
synchronous requests while a merge runs.

Java's rules kept: IPC is refused for every channel (an IPC image cannot have two transports), the subscription
must be `control-mode=manual`, the replay channel gets `linger=0` and `eos=false` (the replay's end of stream must
not end the live image), and a replay destination with port 0 is resolved from the subscription's bound endpoint.
The clock is injected (milliseconds), so the states can be driven with fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import NULL_POSITION, NULL_VALUE, ControlResponseCode
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
    from aeron_archive_spark.archive.native import FragmentHandler, Image, PendingDestination, Subscription

log = logging.getLogger(__name__)

LIVE_ADD_MAX_WINDOW = 32 * 1024 * 1024
REPLAY_REMOVE_THRESHOLD = 0
MERGE_PROGRESS_TIMEOUT_DEFAULT_MS = 5_000
INITIAL_GET_MAX_RECORDED_POSITION_BACKOFF_MS = 8
GET_MAX_RECORDED_POSITION_BACKOFF_MAX_MS = 500
ARCHIVE_POLL_INTERVAL_MS = 100
_UNBOUNDED = (1 << 63) - 1


class ReplayMergeState(Enum):
    RESOLVE_REPLAY_PORT = "RESOLVE_REPLAY_PORT"
    GET_RECORDING_POSITION = "GET_RECORDING_POSITION"
    REPLAY = "REPLAY"
    CATCHUP = "CATCHUP"
    ATTEMPT_LIVE_JOIN = "ATTEMPT_LIVE_JOIN"
    MERGED = "MERGED"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


class ReplayMergeTimeoutError(ArchiveError, TimeoutError):
    """A merge made no progress for its progress timeout."""


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


class ReplayMerge:
    """Replay, then merge onto the live stream (see the module docstring). One thread drives it."""

    def __init__(
        self,
        subscription: Subscription,
        archive: AeronArchive,
        replay_channel: str,
        replay_destination: str,
        live_destination: str,
        recording_id: int,
        start_position: int,
        clock_ms: Callable[[], int] = _epoch_ms,
        merge_progress_timeout_ms: int = MERGE_PROGRESS_TIMEOUT_DEFAULT_MS,
    ) -> None:
        channels = (subscription.channel, replay_channel, replay_destination, live_destination)
        if any(c.startswith("aeron:ipc") for c in channels):
            raise ValueError("IPC merging is not supported")
        if "control-mode=manual" not in subscription.channel:
            raise ValueError(f"Subscription URI must have 'control-mode=manual' uri={subscription.channel}")
        self.subscription = subscription
        self.archive = archive
        self.replay_destination = replay_destination
        self.live_destination = live_destination
        self.recording_id = recording_id
        self.start_position = start_position
        self._clock_ms = clock_ms
        self.merge_progress_timeout_ms = merge_progress_timeout_ms
        replay_uri = ChannelUri.parse(replay_channel).with_params(linger=0, eos="false")
        endpoint = ChannelUri.parse(replay_destination).get("endpoint") or ""
        if endpoint.endswith(":0"):
            self.state = ReplayMergeState.RESOLVE_REPLAY_PORT
        else:
            replay_uri = replay_uri.with_params(endpoint=endpoint)
            self.state = ReplayMergeState.GET_RECORDING_POSITION
        self.replay_channel = str(replay_uri)
        self.replay_session_id = NULL_VALUE
        self.next_target_position = NULL_VALUE
        self.position_of_last_progress = NULL_VALUE
        self.is_live_added = False
        self.is_replay_active = False
        self.image: Image | None = None
        self._active_correlation_id = NULL_VALUE
        now = clock_ms()
        self._time_of_last_progress_ms = now
        self._time_of_next_get_max_recorded_position_ms = now
        self._get_max_recorded_position_backoff_ms = INITIAL_GET_MAX_RECORDED_POSITION_BACKOFF_MS
        self._time_of_last_scheduled_archive_poll_ms = 0
        self._destination_changes: list[PendingDestination] = []
        self._change_destination(subscription.async_add_destination, replay_destination)

    # -- public ----------------------------------------------------------------------------------------------

    @property
    def is_merged(self) -> bool:
        return self.state is ReplayMergeState.MERGED

    @property
    def has_failed(self) -> bool:
        return self.state is ReplayMergeState.FAILED

    def poll(self, handler: FragmentHandler, fragment_limit: int) -> int:
        """Advance the merge, then poll its image (once there) for up to `fragment_limit` fragments."""
        self.do_work()
        return 0 if self.image is None else self.image.poll(handler, fragment_limit)

    def do_work(self) -> int:
        """Advance the merge by what is ready now; raises (and enters FAILED) on an error or no progress."""
        now = self._clock_ms()
        state = self.state
        if state in (ReplayMergeState.MERGED, ReplayMergeState.FAILED, ReplayMergeState.CLOSED):
            self._poll_destination_changes()
            return 0
        try:
            self._poll_destination_changes()
            if state is ReplayMergeState.RESOLVE_REPLAY_PORT:
                work = self._resolve_replay_port(now)
            elif state is ReplayMergeState.GET_RECORDING_POSITION:
                work = self._get_recording_position(now)
            elif state is ReplayMergeState.REPLAY:
                work = self._replay(now)
            elif state is ReplayMergeState.CATCHUP:
                work = self._catchup(now)
            else:
                work = self._attempt_live_join(now)
            self._check_progress(now)
            return work
        except Exception:
            self._set_state(ReplayMergeState.FAILED)
            raise

    def close(self) -> None:
        """Remove the replay destination (unless merged) and stop the replay if it runs; idempotent."""
        state = self.state
        if state is ReplayMergeState.CLOSED:
            return
        try:
            if state is not ReplayMergeState.MERGED:
                self._change_destination(self.subscription.async_remove_destination, self.replay_destination)
            if self.is_replay_active:
                self._stop_replay()
        except Exception as ex:  # the client or the archive went away: nothing left to undo there
            log.debug("replay merge of recording %d: closing: %s", self.recording_id, ex)
        self._set_state(ReplayMergeState.CLOSED)

    def __repr__(self) -> str:
        return (
            f"ReplayMerge(state={self.state.value}, nextTargetPosition={self.next_target_position}, "
            f"positionOfLastProgress={self.position_of_last_progress}, isLiveAdded={self.is_live_added}, "
            f"isReplayActive={self.is_replay_active}, replayChannel={self.replay_channel}, image={self.image})"
        )

    # -- states ----------------------------------------------------------------------------------------------

    def _resolve_replay_port(self, now: int) -> int:
        resolved = self.subscription.resolved_endpoint()
        if resolved is None:
            return 0
        self.replay_channel = str(ChannelUri.parse(self.replay_channel).with_endpoint_wildcard_port_replaced(resolved))
        self._time_of_last_progress_ms = now
        self._set_state(ReplayMergeState.GET_RECORDING_POSITION)
        return 1

    def _get_recording_position(self, now: int) -> int:
        work, answer = self._recorded_position(now)
        if answer is not None and answer != NULL_POSITION:
            self._time_of_last_progress_ms = now
            self._set_state(ReplayMergeState.REPLAY)
        return work

    def _recorded_position(self, now: int) -> tuple[int, int | None]:
        """(work done, the recording's recorded position once the archive answered): asks it when no question
        is out (with backoff), else polls for the answer, which becomes the next target position."""
        if self._active_correlation_id == NULL_VALUE:
            if self._call_get_max_recorded_position(now):
                self._time_of_last_progress_ms = now
                return 1, None
            return 0, None
        answer = self._poll_for_response(self._active_correlation_id)
        if answer is None:
            return 0, None
        self.next_target_position = answer
        self._active_correlation_id = NULL_VALUE
        return 1, answer

    def _replay(self, now: int) -> int:
        if self._active_correlation_id == NULL_VALUE:
            recording_id, position, channel = self.recording_id, self.start_position, self.replay_channel
            stream_id = self.subscription.stream_id
            self._active_correlation_id = self.archive.send(
                lambda ids: m.ReplayRequest.of(
                    **ids,
                    recording_id=recording_id,
                    position=position,
                    length=_UNBOUNDED,
                    replay_stream_id=stream_id,
                    file_io_max_length=NULL_VALUE,
                    replay_token=NULL_VALUE,
                    replay_channel=channel,
                )
            )
            self._time_of_last_progress_ms = now
            return 1
        answer = self._poll_for_response(self._active_correlation_id)
        if answer is None:
            return 0
        self.is_replay_active = True
        self.replay_session_id = answer
        self._time_of_last_progress_ms = now
        self._get_max_recorded_position_backoff_ms = INITIAL_GET_MAX_RECORDED_POSITION_BACKOFF_MS
        self._time_of_next_get_max_recorded_position_ms = now
        self._set_state(ReplayMergeState.CATCHUP)
        return 1

    def _catchup(self, now: int) -> int:
        if self.image is None and self.subscription.is_connected:
            self._time_of_last_progress_ms = now
            image = self.subscription.image_by_session_id(_int32(self.replay_session_id))
            if image is not None:
                self.image = image
                self.position_of_last_progress = image.position
            else:
                self.position_of_last_progress = NULL_VALUE
        image = self.image
        if image is None:
            return 0
        position = image.position
        if position >= self.next_target_position:
            self._time_of_last_progress_ms = now
            self.position_of_last_progress = position
            self._set_state(ReplayMergeState.ATTEMPT_LIVE_JOIN)
            return 1
        if position > self.position_of_last_progress:
            self._time_of_last_progress_ms = now
            self.position_of_last_progress = position
        elif image.is_closed:
            raise ArchiveError(
                f"ReplayMerge Image closed unexpectedly (recording {self.recording_id} at position {position})"
            )
        return 0

    def _attempt_live_join(self, now: int) -> int:
        work, answer = self._recorded_position(now)
        if answer is None or answer == NULL_POSITION:
            return work
        next_state = ReplayMergeState.CATCHUP
        image = self.image
        if image is not None:
            position = image.position
            if self._should_add_live_destination(image, position):
                self._change_destination(self.subscription.async_add_destination, self.live_destination)
                self._time_of_last_progress_ms = now
                self.position_of_last_progress = position
                self.is_live_added = True
            elif self._should_stop_and_remove_replay(image, position):
                self._change_destination(self.subscription.async_remove_destination, self.replay_destination)
                self._stop_replay()
                self._time_of_last_progress_ms = now
                self.position_of_last_progress = position
                next_state = ReplayMergeState.MERGED
        self._set_state(next_state)
        return work

    # -- helpers ---------------------------------------------------------------------------------------------

    def _should_add_live_destination(self, image: Image, position: int) -> bool:
        window = min(image.term_buffer_length >> 2, LIVE_ADD_MAX_WINDOW)
        return not self.is_live_added and self.next_target_position - position <= window

    def _should_stop_and_remove_replay(self, image: Image, position: int) -> bool:
        return (
            self.is_live_added
            and self.next_target_position - position <= REPLAY_REMOVE_THRESHOLD
            and image.active_transport_count >= 2
        )

    def _call_get_max_recorded_position(self, now: int) -> bool:
        if now < self._time_of_next_get_max_recorded_position_ms:
            return False
        recording_id = self.recording_id
        self._active_correlation_id = self.archive.send(
            lambda ids: m.MaxRecordedPositionRequest.of(**ids, recording_id=recording_id)
        )
        self._get_max_recorded_position_backoff_ms = min(
            self._get_max_recorded_position_backoff_ms * 2, GET_MAX_RECORDED_POSITION_BACKOFF_MAX_MS
        )
        self._time_of_next_get_max_recorded_position_ms = now + self._get_max_recorded_position_backoff_ms
        return True

    def _stop_replay(self) -> None:
        replay_session_id = self.replay_session_id
        self.archive.send(lambda ids: m.StopReplayRequest.of(**ids, replay_session_id=replay_session_id))
        self.is_replay_active = False

    def _change_destination(self, change: Callable[[str], PendingDestination], uri: str) -> None:
        self._destination_changes.append(change(uri))

    def _poll_destination_changes(self) -> None:
        """Destinations being added or removed; the media driver refusing one raises."""
        if self._destination_changes:
            self._destination_changes = [c for c in self._destination_changes if not c.poll()]

    def _check_progress(self, now: int) -> None:
        if now > self._time_of_last_progress_ms + self.merge_progress_timeout_ms:
            transports = self.image.active_transport_count if self.image is not None else 0
            raise ReplayMergeTimeoutError(
                f"ReplayMerge no progress: state={self.state.value}, activeTransportCount={transports} "
                f"(recording {self.recording_id}, position {self.position_of_last_progress})",
                ErrorCode.GENERIC,
            )
        if (
            self._active_correlation_id == NULL_VALUE
            and now > self._time_of_last_scheduled_archive_poll_ms + ARCHIVE_POLL_INTERVAL_MS
        ):
            self._time_of_last_scheduled_archive_poll_ms = now
            self._poll_for_response(NULL_VALUE)

    def _poll_for_response(self, correlation_id: int) -> int | None:
        """The relevant id of the OK answering `correlation_id` if it came; an ERROR for this session raises."""
        answer = None
        session_id = self.archive.control_session_id
        for msg in self.archive.poll_responses():
            if not _is_response(msg) or msg.control_session_id != session_id:
                continue
            if msg.code == ControlResponseCode.ERROR:
                raise ArchiveError(
                    f"archive response for correlationId={msg.correlation_id}, error: {msg.error_message}",
                    int(msg.relevant_id),
                    correlation_id=int(msg.correlation_id),
                )
            if msg.correlation_id == correlation_id != NULL_VALUE:
                answer = int(msg.relevant_id)
        return answer

    def _set_state(self, state: ReplayMergeState) -> None:
        log.debug("replay merge of recording %d: %s -> %s", self.recording_id, self.state.value, state.value)
        self.state = state
        self._active_correlation_id = NULL_VALUE


def _is_response(msg: Any) -> bool:
    return bool(getattr(msg, "template_id", None) == t.CONTROL_RESPONSE)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
