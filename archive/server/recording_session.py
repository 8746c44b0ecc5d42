"""Records one Image into segment files: INIT → RECORDING → INACTIVE → STOPPED (Aeron's `RecordingSession`).

Runs on the recorder thread. Each duty cycle block-polls the image straight into `RecordingWriter` (one
`pwrite` per block, no per-message Python work) and then publishes the new position on the rec-pos counter.
The write time it reports comes from the injected `nano_clock`, so a test can supply the image, the counter and
the clock while the writer and its segment files stay real.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.counters import WorkerTotals

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import Counter, Image
    from aeron_archive_spark.archive.server.recording_events_proxy import RecordingEventsProxy
    from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter

log = logging.getLogger(__name__)


class RecordingSessionState(Enum):
    INIT = 0
    RECORDING = 1
    INACTIVE = 2
    STOPPED = 3


class RecordingSession:
    def __init__(
        self,
        *,
        correlation_id: int,
        recording_id: int,
        start_position: int,
        join_position: int,
        stream_id: int,
        original_channel: str,
        image: Image,
        position: Counter,
        writer: RecordingWriter,
        block_length_limit: int,
        events: RecordingEventsProxy | None,
        totals: WorkerTotals,
        subscription_id: int,
        control_session_id: int,
        auto_stop: bool,
        nano_clock: Callable[[], int],
    ) -> None:
        self.correlation_id = correlation_id
        self.recording_id = recording_id
        self.start_position = start_position
        self.join_position = join_position
        self.stream_id = stream_id
        self.original_channel = original_channel
        self.image = image
        self.position = position
        self.subscription_id = subscription_id
        self.control_session_id = control_session_id
        self.auto_stop = auto_stop
        self._writer = writer
        self._limit = block_length_limit
        self._events = events
        self._totals = totals
        self._nano_clock = nano_clock
        self._progress_position = join_position
        self.state = RecordingSessionState.INIT
        self.error: ArchiveError | None = None
        self._abort_requested = False
        self.recorded_position = join_position

    @property
    def session_id(self) -> int:
        return self.recording_id

    def is_done(self) -> bool:
        return self.state is RecordingSessionState.STOPPED

    def abort(self, reason: str = "") -> None:
        self._abort_requested = True

    def _set_state(self, state: RecordingSessionState) -> None:
        log.debug("recording %d: %s -> %s", self.recording_id, self.state.name, state.name)
        self.state = state

    def do_work(self, now_ns: int) -> int:
        if self._abort_requested and self.state in (RecordingSessionState.INIT, RecordingSessionState.RECORDING):
            self._set_state(RecordingSessionState.INACTIVE)
        state = self.state
        if state is RecordingSessionState.INIT:
            return self._init()
        if state is RecordingSessionState.RECORDING:
            return self._record()
        if state is RecordingSessionState.INACTIVE:
            self._stop()
            return 1
        return 0

    def _init(self) -> int:
        try:
            self._writer.init()
        except ArchiveError as ex:
            self.error = ex
            self._stop()
            return 1
        except OSError as ex:
            self.error = ArchiveError(
                f"recording {self.recording_id}: cannot open segment file: {ex}", ErrorCode.GENERIC
            )
            self._stop()
            return 1
        if self._events is not None:
            self._events.started(
                self.recording_id,
                self.join_position,
                self.image.session_id,
                self.stream_id,
                self.original_channel,
                self.image.source_identity,
            )
        self._set_state(RecordingSessionState.RECORDING)
        return 1

    def _on_block(self, block: memoryview, session_id: int, term_id: int) -> None:
        self._writer.on_block(block)

    def _record(self) -> int:
        before = self._nano_clock()
        try:
            consumed = self.image.block_poll(self._on_block, self._limit)
        except ArchiveError as ex:
            self.error = ex
            self._set_state(RecordingSessionState.INACTIVE)
            return 1
        except Exception as ex:  # any failure ends the recording, reported to its client
            self.error = ArchiveError(
                f"recording {self.recording_id} failed at position {self._writer.position}: {ex}", ErrorCode.GENERIC
            )
            self._set_state(RecordingSessionState.INACTIVE)
            return 1
        if consumed > 0:
            elapsed = self._nano_clock() - before
            position = self._writer.position
            self.recorded_position = position
            self.position.set(position)
            totals = self._totals
            totals.total_bytes += consumed
            totals.total_time_ns += elapsed
            totals.max_time_ns = max(totals.max_time_ns, elapsed)
            if (
                self._events is not None
                and position > self._progress_position
                and self._events.progress(self.recording_id, self.join_position, position)
            ):
                self._progress_position = position
            return consumed
        if self.image.is_end_of_stream or self.image.is_closed:
            self._set_state(RecordingSessionState.INACTIVE)
            return 1
        return 0

    def _stop(self) -> None:
        try:
            self._writer.close()
        except Exception as ex:  # the catalog must still be updated, so never let close failures escape
            log.warning("recording %d: error closing writer: %s", self.recording_id, ex)
        self.recorded_position = self._writer.position
        if self._events is not None:
            self._events.stopped(self.recording_id, self.join_position, self.recorded_position)
        self._set_state(RecordingSessionState.STOPPED)

    def close(self) -> None:
        """Releases the image (subscription-owned resources are closed by the conductor)."""
        self.image.close()
