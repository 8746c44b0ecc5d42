"""Replays a recording onto an exclusive publication: INIT → REPLAY → INACTIVE → DONE (Aeron's `ReplaySession`).

Runs on the replayer thread. Each duty cycle reads at most one replay buffer (never across a term), finds the
whole frames in it with a bulk frame scan, rewrites their session/stream ids in bulk, and appends them as one
block. The publication was created at the recording's `init-term-id`/`term-id`/`term-offset`, so replay positions
equal recording positions.

PAD frames are frames like any other, wherever they lie in their term (the one closing a term, and those a
publisher's `appendPadding` or a receiver's gap fill leaves in the middle): their length says where the next frame
starts, and each reaches the replay publication as padding at its recorded position, as Java's `ReplaySession`
appends it. A PAD travels inside the block when it can; alone (`append_padding`) when its body was not read or,
through the C client, when it would be the block's first frame (`offer_block` wants a DATA frame first). A PAD
longer than the C client's `append_padding` accepts moves the replay onto its own term appender. Beyond Java's
header checks, a PAD whose body holds non-zero bytes fails the replay: recorders write only a PAD's header, so that
is a DATA frame whose type was hit (see `frames.pad_body_is_clear`).

Any failure during the replay (a damaged recording, an I/O error, an error of the C client) ends the replay with an
error for its control session: a replay never ends silently short of its stop position.

The session reaches its control session only through two callbacks: `send_ok` (called on the replayer thread, so
the conductor's callback must enqueue) and `send_error`, which the conductor triggers through
`send_pending_error` once the finished session is handed back, as Aeron's `sendPendingError` does. Time comes
from `do_work(now_ns)` and, for the read-time statistics, the injected `nano_clock`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from aeron_archive_spark.archive.constants import COUNTER_RECORD_ALLOCATED as RECORD_ALLOCATED
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.native import MAX_POSITION_EXCEEDED, NOT_CONNECTED, PUBLICATION_CLOSED
from aeron_archive_spark.archive.server.counters import WorkerTotals
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.archive.storage.checksums import Checksum, first_checksum_mismatch, frame_checksum
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import CountersReader, ExclusivePublication, TermAppender

log = logging.getLogger(__name__)

_Scan = frames.FrameScan | frames.HeadedScan | frames.UniformHeadedScan


class ReplaySessionState(Enum):
    INIT = 0
    REPLAY = 1
    INACTIVE = 2
    DONE = 3


def replay_buffer_length(file_io_max_length: int, replay_length: int, mtu_length: int) -> int:
    """The read buffer a replay of `replay_length` bytes needs: `file_io_max_length`, or less for a short replay.

    A replay sends whole every frame that starts before its limit, so it never reads more than its length plus
    one frame (at most `mtu_length`, aligned); a small replay then allocates, and zeroes, a few KiB rather than
    the 1 MiB default. Never less than one frame, the least `fileIoMaxLength` may be.
    """
    needed = max(replay_length, 0) + mtu_length + frames.FRAME_ALIGNMENT
    return min(file_io_max_length, needed)


class LimitCounter:
    """A counter the replay may not pass (bounded replay, or a live recording's rec-pos), read by id."""

    def __init__(self, reader: CountersReader, counter_id: int) -> None:
        self._reader = reader
        self.counter_id = counter_id
        self.registration_id = reader.registration_id(counter_id)
        self.last_value = reader.get(counter_id)

    def is_closed(self) -> bool:
        return (
            self._reader.state(self.counter_id) != RECORD_ALLOCATED
            or self._reader.registration_id(self.counter_id) != self.registration_id
        )

    def value(self) -> int:
        self.last_value = self._reader.get(self.counter_id)
        return self.last_value

    def slot_still_ours(self) -> bool:
        return self._reader.registration_id(self.counter_id) == self.registration_id


class ReplaySession:
    def __init__(
        self,
        *,
        replay_session_id: int,
        correlation_id: int,
        control_session_id: int,
        recording_id: int,
        replay_position: int,
        replay_length: int,
        start_position: int,
        stop_position: int,
        limit_counter: LimitCounter | None,
        publication: ExclusivePublication,
        reader: RecordingReader,
        buffer: bytearray,
        term_length: int,
        stream_id: int,
        checksum: Checksum | None,
        connect_timeout_ns: int,
        totals: WorkerTotals,
        now_ns: int,
        nano_clock: Callable[[], int],
        send_ok: Callable[[int, int], None],
        send_error: Callable[[int, int, str], None],
        appender: TermAppender | None = None,
        appender_factory: Callable[[], TermAppender | None] | None = None,
    ) -> None:
        """`now_ns` is the conductor's time at the request; the replay must connect within `connect_timeout_ns`.

        `send_ok(correlation_id, replay_session_id)` and `send_error(correlation_id, error_code, message)` answer
        the requesting control session; `nano_clock` times the reads for the replayer's statistics.

        `appender`, the publication's own log mapping, makes the replay read the file straight into the term (one
        copy instead of `pread` + `offer_block`'s two); the conductor does not give one with replay checksums. The
        session closes it. `appender_factory` makes one later, for a PAD that the C client cannot append (see
        `_take_over_with_term_appender`); frames are then checked in the term, before they are published.
        """
        self.replay_session_id = replay_session_id
        self.correlation_id = correlation_id
        self.control_session_id = control_session_id
        self.recording_id = recording_id
        self.replay_position = replay_position
        self.start_position = start_position
        self.stop_position = stop_position
        self.replay_limit = replay_position + replay_length
        self._limit_counter = limit_counter
        self.publication = publication
        self._reader = reader
        self._buffer = buffer
        self._view = memoryview(buffer)
        self._term_length = term_length
        self._stream_id = stream_id
        self._checksum = checksum
        self._appender = appender if checksum is None else None
        if appender is not None and self._appender is None:
            appender.close()
        self._appender_factory = appender_factory
        self._head = bytearray(8)  # the first word of a block read into the term (see term_appender)
        self._first_word = 0
        self._deadline_ns = now_ns + connect_timeout_ns
        self._totals = totals
        self._nano_clock = nano_clock
        self._send_ok = send_ok
        self._send_error = send_error
        self.state = ReplaySessionState.INIT
        self.error: ArchiveError | None = None
        self._abort_reason: str | None = None
        self._revoke = False
        self._ok_sent = False
        # A batch prepared but refused by back pressure is offered again without re-reading the file.
        self._batch_position = -1
        self._batch_length = 0
        self._pad_length = 0
        # True while the publication's window is full, or while the replay waits for its subscriber to connect
        # (due within a millisecond or so of the OK): the replayer then idles in short sleeps (see agent.py).
        self.back_pressured = False

    @property
    def session_id(self) -> int:
        return self.replay_session_id

    def is_done(self) -> bool:
        return self.state is ReplaySessionState.DONE

    def abort(self, reason: str = "") -> None:
        self._abort_reason = reason or "replay aborted"

    def _set_state(self, state: ReplaySessionState) -> None:
        log.debug(
            "replay %d (recording %d): %s -> %s", self.replay_session_id, self.recording_id, self.state.name, state.name
        )
        self.state = state

    def _fail(self, message: str, code: int = ErrorCode.GENERIC) -> int:
        self.error = ArchiveError(message, code, self.correlation_id)
        log.warning("replay %d of recording %d failed: %s", self.replay_session_id, self.recording_id, message)
        self._revoke = True
        self._set_state(ReplaySessionState.INACTIVE)
        return 1

    def do_work(self, now_ns: int) -> int:
        if self._abort_reason is not None and self.state in (ReplaySessionState.INIT, ReplaySessionState.REPLAY):
            self._revoke = True
            self._set_state(ReplaySessionState.INACTIVE)
        state = self.state
        try:
            if state is ReplaySessionState.INIT:
                return self._init(now_ns)
            if state is ReplaySessionState.REPLAY:
                return self._replay()
        except ArchiveError as ex:
            return self._fail(ex.message, ex.error_code)
        except OSError as ex:
            return self._fail(f"recording {self.recording_id}: I/O error at position={self.replay_position}: {ex}")
        except Exception as ex:
            # Whatever stops the replay (a native error of the C client, a bug) must reach the client as an error:
            # escaping to the replayer would only abort the session, and the replay would end silently.
            log.warning(
                "replay %d of recording %d: unexpected error", self.replay_session_id, self.recording_id, exc_info=True
            )
            return self._fail(
                f"replay of recordingId={self.recording_id} failed at position={self.replay_position}: "
                f"{type(ex).__name__}: {ex}"
            )
        if state is ReplaySessionState.INACTIVE:
            try:
                self._close_resources()
            except Exception as ex:  # DONE regardless: a session that cannot close must not be retried forever
                log.warning("replay %d: closing failed", self.replay_session_id, exc_info=True)
                if self.error is None:
                    self.error = ArchiveError(
                        f"replay of recordingId={self.recording_id} failed to close: {type(ex).__name__}: {ex}",
                        ErrorCode.GENERIC,
                        self.correlation_id,
                    )
            finally:
                self._set_state(ReplaySessionState.DONE)
            return 1
        return 0

    @property
    def ok_sent(self) -> bool:
        """Whether the OK response has been handed to the conductor (read by the conductor's idle strategy)."""
        return self._ok_sent

    def confirm_at_once(self, send_ok: Callable[[int, int], None]) -> bool:
        """Conductor thread, before the session goes to the replayer: INIT's first step now, when it can be done.

        If the segment file at the replay position exists and the position is a frame, `send_ok` (the conductor
        sending on the control session directly) confirms the replay now, saving the client the replayer's and
        then the conductor's wake-ups; the replayer then only waits for the connection. Otherwise (a live
        recording's segment not created yet, a position that fails validation, an I/O error) nothing is sent
        and the replayer's INIT does it, failing the replay as usual where it must. Same response, same order.
        """
        try:
            if not self._reader.segment_exists(self.replay_position):
                return False
            if self.replay_position > self.start_position and self.replay_position != self.stop_position:
                self._reader.validate_frame_at(self.replay_position)
        except Exception:  # the replayer's INIT meets it again and reports it as the replay's error
            return False
        send_ok(self.correlation_id, self.replay_session_id)
        self._ok_sent = True
        return True

    def _init(self, now: int) -> int:
        self.back_pressured = False
        if not self._ok_sent:
            if not self._reader.segment_exists(self.replay_position):
                if now > self._deadline_ns:
                    return self._fail(
                        f"recording segment file not created for recordingId={self.recording_id} "
                        f"position={self.replay_position}"
                    )
                return 0
            if self.replay_position > self.start_position and self.replay_position != self.stop_position:
                self._reader.validate_frame_at(self.replay_position)
            self._send_ok(self.correlation_id, self.replay_session_id)
            self._ok_sent = True
        if not self.publication.is_connected:
            if now > self._deadline_ns:
                return self._fail(f"no connection established for replay of recordingId={self.recording_id}")
            self.back_pressured = True  # the client subscribes as soon as it has the OK: look again shortly
            return 0
        self._set_state(ReplaySessionState.REPLAY)
        return 1

    def _refresh_limit(self) -> bool:
        """Aeron's `notExtended` inverted: True when the limit counter moved beyond our stop position.

        Once the counter is closed (recording stopped, bounded counter removed) its last value, if the slot is
        still ours, becomes the replay limit; otherwise the replay ends at what it has already seen.
        """
        counter = self._limit_counter
        if counter is None:
            return False
        if counter.is_closed():
            final = max(counter.last_value, counter.value()) if counter.slot_still_ours() else self.stop_position
            self.replay_limit = min(self.replay_limit, final)
            if final > self.stop_position:
                self.stop_position = final
                return True
            return False
        value = counter.value()
        if value > self.stop_position:
            self.stop_position = value
            return True
        return False

    def _replay(self) -> int:
        self.back_pressured = False
        pub = self.publication
        if not pub.is_connected:
            self._revoke = True
            self._set_state(ReplaySessionState.INACTIVE)
            return 1
        if self.replay_position >= self.replay_limit:
            self._set_state(ReplaySessionState.INACTIVE)
            return 1
        if self.replay_position >= self.stop_position and not self._refresh_limit():
            if self._limit_counter is None or self._limit_counter.is_closed():
                self._set_state(ReplaySessionState.INACTIVE)  # nothing more will be recorded
                return 1
            return 0
        if self._appender is not None:
            return self._replay_into_term(self._appender)
        if pub.available_window <= 0:
            self.back_pressured = True
            return 0
        if self._batch_position != self.replay_position:
            taking_over = self._prepare_batch()
            if taking_over is not None:  # a PAD the C client cannot append: the term appender takes over
                return self._replay_into_term(taking_over)
        work = 0
        if self._batch_length > 0:
            result = pub.offer_block(self._view[: self._batch_length])
            if result < 0:
                return self._on_offer_failure(result)
            self.replay_position += self._batch_length
            self._batch_length = 0
            work += 1
        if self._pad_length > 0:
            result = pub.append_padding(self._pad_length - frames.HEADER_LENGTH)
            if result < 0:
                return self._on_offer_failure(result) + work
            self.replay_position += frames.align(self._pad_length, frames.FRAME_ALIGNMENT)
            self._pad_length = 0
            work += 1
        self._batch_position = -1
        if self.replay_position >= self.replay_limit:
            self._set_state(ReplaySessionState.INACTIVE)
        return work

    def _replay_into_term(self, appender: TermAppender) -> int:
        """One batch read straight into the publication's term at its tail, then published (see term_appender).

        The window is checked first: the driver has cleaned the term only up to where the limit allows, and the
        batch is published in the same cycle, so it is never refused by back pressure once read.
        """
        if appender.available_window <= 0:
            self.back_pressured = True
            return 0
        if not appender.ensure_term():
            return self._on_offer_failure(MAX_POSITION_EXCEEDED)
        if appender.position != self.replay_position:
            raise ArchiveError(
                f"replay publication of recordingId={self.recording_id} is at position={appender.position}, "
                f"the replay at {self.replay_position}",
                ErrorCode.GENERIC,
            )
        self._prepare_batch_in_term(appender)
        work = 0
        if self._batch_length > 0:
            appender.publish_block(self._batch_length, self._first_word)
            self.replay_position += self._batch_length
            self._batch_length = 0
            work += 1
        if self._pad_length > 0:
            appender.append_padding(self._pad_length)
            self.replay_position += frames.align(self._pad_length, frames.FRAME_ALIGNMENT)
            self._pad_length = 0
            work += 1
        if self.replay_position >= self.replay_limit:
            self._set_state(ReplaySessionState.INACTIVE)
        return work

    def _prepare_batch_in_term(self, appender: TermAppender) -> None:
        """`_prepare_batch` with the term as the buffer: read, scan, check, rewrite headers, cut off what is past it.

        Only the block's first word is held back (in `_first_word`); every other byte read is already in the term,
        beyond the tail, where no reader goes before the first word is published. A PAD whose body was not all
        read goes alone after the block; its header is written then, and nothing was read past it.
        """
        position = self.replay_position
        term_offset = appender.term_offset
        length = min(self.stop_position - position, len(self._buffer), self._term_length - term_offset)
        head = self._head
        head[:] = bytes(8)
        region = appender.term_region(length)
        before = self._nano_clock()
        try:
            read = self._reader.read_into(region, position, length, head=head)
        finally:
            region.release()
        self._count_read(read, self._nano_clock() - before)
        self._first_word = int.from_bytes(head, "little", signed=True)
        term = appender.term_buffer()  # dropped with the scan on return (a view of the mapping)
        end = term_offset + read
        scan = frames.scan_frames_with_head(term, self._first_word, term_offset, end, stop_at_padding=False)
        count, batch_length, cap = self._batch_of(scan, position)
        good = self._good_frames(term, scan, count, position, end)
        if good < count:
            count, batch_length = good, scan.end_of(good)
        if self._checksum is not None and count > 0:
            self._check_checksums_in_term(term, scan, count, position, term_offset)
        pad_length = self._trailing_pad(term, scan, count, batch_length, cap, position, term_offset, end)
        scan.rewrite_session_and_stream(term, count, appender.session_id, appender.stream_id)
        if batch_length > 0 and batch_length < read:
            appender.clear_length_at(term_offset + batch_length)  # bytes read past the batch stay unreachable
        self._batch_length = batch_length
        self._pad_length = pad_length

    def _on_offer_failure(self, result: int) -> int:
        if result in (NOT_CONNECTED, PUBLICATION_CLOSED, MAX_POSITION_EXCEEDED):
            self._revoke = result != MAX_POSITION_EXCEEDED
            self._set_state(ReplaySessionState.INACTIVE)
            return 1
        self.back_pressured = True
        return 0  # back pressure / admin action: offer the same prepared batch next cycle

    def _prepare_batch(self) -> TermAppender | None:
        """Read, scan, check and rewrite the next batch into the read buffer; the term appender that takes the
        replay over instead, when the batch starts with a PAD the C client cannot append."""
        position = self.replay_position
        term_offset = position & (self._term_length - 1)
        length = min(self.stop_position - position, len(self._buffer), self._term_length - term_offset)
        before = self._nano_clock()
        read = self._reader.read_into(self._view, position, length)
        self._count_read(read, self._nano_clock() - before)
        scan = frames.scan_frames(self._view, 0, read, stop_at_padding=False)
        count, batch_length, cap = self._batch_of(scan, position)
        good = self._good_frames(self._view, scan, count, position, read)
        if good < count:
            count, batch_length = good, scan.end_of(good)
        if self._checksum is not None and count > 0:
            bad = self._checksum_mismatch(scan.head(count))
            if bad >= 0:
                raise ArchiveError(
                    f"CRC checksum mismatch at position={position + bad} of recordingId={self.recording_id}",
                    ErrorCode.GENERIC,
                )
        pad_length = self._trailing_pad(self._view, scan, count, batch_length, cap, position, term_offset, read)
        if count > 0 and int(scan.types[0]) == frames.HDR_TYPE_PAD:
            # offer_block takes a block whose first frame is DATA: a PAD that starts the batch goes alone.
            count, batch_length, pad_length = 0, 0, int(scan.lengths[0])
        if count > 0:
            frames.rewrite_scan_session_and_stream(
                self._view, scan.head(count), self.publication.session_id, self.publication.stream_id
            )
        if pad_length > 0 and not self._c_client_pads(position + batch_length, pad_length):
            if batch_length == 0:
                return self._take_over_with_term_appender(position, pad_length)
            pad_length = 0  # the next batch starts with it, and moves the replay to the term appender
        self._batch_length = batch_length
        self._pad_length = pad_length
        self._batch_position = position
        return None

    def _c_client_pads(self, position: int, pad_length: int) -> bool:
        """Whether the C client's `append_padding` writes this PAD as one frame (see `ExclusivePublication`).

        It takes at most `max_message_length` bytes after the header anywhere, and a longer PAD only where it
        ends the term (through the appender's own end-of-term padding). Java's `appendPadding` takes up to the max
        framed length, and a receiver's gap fill any length: longer PADs in the middle of a term need the term
        appender.
        """
        if pad_length - frames.HEADER_LENGTH <= self.publication.max_message_length:
            return True
        term_offset = position & (self._term_length - 1)
        return term_offset + frames.align(pad_length, frames.FRAME_ALIGNMENT) == self._term_length

    def _take_over_with_term_appender(self, position: int, pad_length: int) -> TermAppender:
        """From here on, append through the publication's own log mapping (the C publication is not used again)."""
        appender = self._appender_factory() if self._appender_factory is not None else None
        if appender is None:
            raise ArchiveError(
                f"PAD frame at position={position} of recordingId={self.recording_id} with length={pad_length} is "
                f"longer than the Aeron C client's append_padding accepts (max_message_length="
                f"{self.publication.max_message_length}) and the replay publication's log buffer cannot be mapped",
                ErrorCode.GENERIC,
            )
        log.debug(
            "replay %d: a %d-byte PAD at %d moves it to the term appender", self.replay_session_id, pad_length, position
        )
        self._appender = appender
        self._batch_position = -1
        self._batch_length = 0
        self._pad_length = 0
        return appender

    def _count_read(self, read: int, elapsed_ns: int) -> None:
        totals = self._totals
        totals.total_bytes += read
        totals.total_time_ns += elapsed_ns
        totals.max_time_ns = max(totals.max_time_ns, elapsed_ns)

    def _batch_of(self, scan: _Scan, position: int) -> tuple[int, int, int]:
        """(frames, bytes, cap) of the batch a scan at `position` holds: frames that start before the replay limit."""
        cap = min(self.replay_limit - position, frames.TERM_MAX_LENGTH)
        count = scan.count_starting_before(cap)
        return count, scan.end_of(count), cap

    def _good_frames(self, buf: Any, scan: _Scan, count: int, position: int, end: int) -> int:
        """How many of the batch's first `count` frames come before one that is neither DATA nor clean padding.

        The chain itself already holds Java's rules: every frame's length is at least a header and it lies inside
        the read, which never crosses the term or the stop position. The frames before a damaged one are still
        replayed; the replay fails when the damaged one would be the first of a batch.
        """
        start = scan.start
        for offset, length, frame_type in scan.other_frames(count):
            frame_position = position + offset - start
            error: ArchiveError | None = None
            if frame_type != frames.HDR_TYPE_PAD:
                error = ArchiveError(
                    f"corrupt recording: frame of unknown type={frame_type} at position={frame_position} of "
                    f"recordingId={self.recording_id}",
                    ErrorCode.GENERIC,
                )
            elif length < frames.HEADER_LENGTH:
                error = ArchiveError(
                    f"corrupt recording: PAD frame at position={frame_position} of recordingId={self.recording_id} "
                    f"with length={length} is shorter than a frame header",
                    ErrorCode.GENERIC,
                )
            elif not frames.pad_body_is_clear(buf, offset, length, end):
                error = self._damaged_pad(frame_position, length)
            if error is not None:
                if offset == start:
                    raise error
                return int(scan.count_starting_before(offset - start))
        return count

    def _damaged_pad(self, position: int, length: int) -> ArchiveError:
        return ArchiveError(
            f"corrupt recording: PAD frame at position={position} of recordingId={self.recording_id} with "
            f"length={length} holds non-zero bytes after its header (a DATA frame turned into padding?)",
            ErrorCode.GENERIC,
        )

    def _trailing_pad(
        self,
        buf: Any,
        scan: _Scan,
        count: int,
        batch_length: int,
        cap: int,
        position: int,
        term_offset: int,
        end: int,
    ) -> int:
        """The length of a PAD right after the batch whose body the read did not hold whole (0 if none).

        Only its header is needed to append it. It must start before the replay limit, lie inside its term and,
        for a stopped recording, end by the stop position (a recorder counts a PAD's whole length at once). The
        replay fails at one that does not once the frames before it are replayed.
        """
        offset = scan.stop_offset
        pad_follows = (
            count == scan.count
            and scan.stop_reason is frames.ScanStop.INCOMPLETE
            and batch_length < cap
            and end - offset >= frames.HEADER_LENGTH
            and self._stop_frame_type(buf, scan) == frames.HDR_TYPE_PAD
        )
        if not pad_follows:
            if count == 0:
                raise ArchiveError(
                    f"unexpected end of recording at position={position} of recordingId={self.recording_id}",
                    ErrorCode.GENERIC,
                )
            return 0
        length = scan.stop_frame_length
        pad_position = position + batch_length
        aligned = frames.align(length, frames.FRAME_ALIGNMENT)
        past = ""
        if term_offset + batch_length + aligned > self._term_length:
            past = "its term"
        elif self._limit_counter is None and pad_position + aligned > self.stop_position:
            past = f"the stop position={self.stop_position}"
        error: ArchiveError | None = None
        if past:
            error = ArchiveError(
                f"corrupt recording: PAD frame at position={pad_position} of recordingId={self.recording_id} with "
                f"length={length} runs past {past}",
                ErrorCode.GENERIC,
            )
        elif not frames.pad_body_is_clear(buf, offset, length, end):
            error = self._damaged_pad(pad_position, length)
        if error is None:
            return length
        if count == 0:
            raise error
        return 0  # replay the batch before it: the next batch starts at the PAD and fails there

    @staticmethod
    def _stop_frame_type(buf: Any, scan: _Scan) -> int:
        """The type of the frame the scan stopped at (the held first word's, when the scan stopped at its start)."""
        if not isinstance(scan, frames.FrameScan) and scan.stop_offset == scan.start:
            return scan.first_type
        return frames.frame_type_at(buf, scan.stop_offset)

    def _check_checksums_in_term(self, term: Any, scan: _Scan, count: int, position: int, term_offset: int) -> None:
        """The replay's CRC check of the batch's DATA frames where they lie, in the term before publishing.

        A record checksum covers the payload and is kept in the session id field, both in place in the term (only
        the first frame's first word is held apart), so the frames are checked where they were read.
        """
        assert self._checksum is not None
        offsets = scan.offsets[:count].tolist()
        lengths = scan.lengths[:count].tolist()
        types = scan.types[:count].tolist()
        for offset, length, frame_type in zip(offsets, lengths, types, strict=True):
            if frame_type != frames.HDR_TYPE_DATA:
                continue
            stored = frames.frame_session_id_at(term, offset)
            if frame_checksum(self._checksum, term, offset, length) != stored:
                raise ArchiveError(
                    f"CRC checksum mismatch at position={position + offset - term_offset} of "
                    f"recordingId={self.recording_id}",
                    ErrorCode.GENERIC,
                )

    def _checksum_mismatch(self, scan: frames.FrameScan) -> int:
        assert self._checksum is not None
        return first_checksum_mismatch(self._view, scan, self._checksum)

    def _close_resources(self) -> None:
        try:
            self._reader.close()
            if self._appender is not None:
                self._appender.close()
        finally:
            if self._revoke:
                self.publication.revoke()
            else:
                self.publication.close()

    def send_pending_error(self) -> None:
        """Conductor thread, once the replayer has handed the finished session back: report a failure, if any."""
        if self.error is not None:
            self._send_error(self.correlation_id, self.error.error_code, self.error.message)

    def close(self) -> None:
        if self.state is not ReplaySessionState.DONE:
            self._close_resources()
            self.state = ReplaySessionState.DONE
