"""One span read through a running archive: its bounded replays, their image, frames copied into chunks.

The span's read, step by step:

1. a control session is leased from this process's connection pool (`archive.client.pool`: on the host's media
   driver, or one embedded driver; a session returned by an earlier read of the same archive is reused) and kept
   for the whole read, since replay errors arrive on it; or, for a span whose replay was asked for ahead
   (`read_ahead`), the read-ahead's session and subscription are used;
2. `[start, end + SLACK)` (capped at `limit`) is replayed on the connection's replay channel and stream. The
   archive sends every frame that *starts* before the replay limit whole, so unfragmented messages never need
   more. If the caller still iterates when that replay is done (the last message is fragmented past the bound),
   the read replays on from the exact position reached, in growing steps (`CONTINUATION_LENGTH`, doubling) up to
   `limit`;
3. the replay image is block-polled and whole frames copied into a reusable chunk buffer (the zero-copy block is
   only valid inside the poll callback), yielding `(chunk, position, scan)` with the position computed from each
   block's term id / term offset and the image's initial term id and term length (replay positions equal
   recording positions); a gap or overlap is an error, never silently skipped. Replay rewrites every frame's
   session id and stream id to its own; they are put back (the recording's values) so chunks equal the segment
   files, and the frame scan that does it goes along with the chunk, sparing a decoder a second walk. A chunk is
   handed over when it is half full and the image has nothing more yet, when it is full, when no block came for
   `HAND_OVER_WAIT_S` or the image ended, or when the replay is done (before any continuation replay is asked
   for, so a caller that has its last message stops without one); waiting for the replay, the reader sleeps after
   a few empty polls rather than spinning, leaving the CPU to the archive's replayer.

Back pressure: the image is polled only when the caller asks for the next chunk, so a slow consumer
back-pressures the archive's replay publication (flow control), never drops data. Liveness: if no frame arrives for
the message timeout (`messageTimeout`) while the caller waits, or the replay image ends early, the read fails
naming the recording, position, replay channel and archive. Cleanup: the active replay is stopped and the
subscription closed in a `finally`, also when the caller stops iterating early; the control session goes back to
the pool, unless the read failed (or the replay could not be stopped), which closes it.

Channels: with a UDP endpoint of port 0 (the default `aeron:udp?endpoint=localhost:0`; `aeron:ipc` is the default
when the archive is reached over IPC) the subscription is added first and its bound port resolved before the replay
request (one ephemeral port per read, so only this replay arrives there); otherwise (IPC, a fixed port) the
subscription is added after the answer, filtered with `session-id=(int)replaySessionId`, so concurrent reads on the
same driver never see (or slow down) each other's replays. See `archive.client.pool` for remote hosts (`0.0.0.0`
endpoints).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from aeron_archive_spark.archive.channel import ChannelUri, add_session_id
from aeron_archive_spark.archive.client.host import localize_channel
from aeron_archive_spark.archive.client.pool import ArchiveConnectError, ArchiveLease, ConnectionPool
from aeron_archive_spark.archive.client.replay.responses import ControlResponses
from aeron_archive_spark.archive.client.replay.span import ReplaySpan, has_wildcard_port
from aeron_archive_spark.archive.client.replay.via_response import ResponseChannelReplay
from aeron_archive_spark.archive.client.response_replay import is_response_channel
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.native import NativeAeronError
from aeron_archive_spark.archive.storage.frames import (
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    TERM_OFFSET_FIELD_OFFSET,
    TYPE_FIELD_OFFSET,
    FrameScan,
    ScanStop,
    compute_position,
    rewrite_scan_session_and_stream,
    rewrite_session_and_stream,
    scan_frames,
    to_int32,
)

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.replay.read_ahead import ReplayReadAhead
    from aeron_archive_spark.archive.native import AeronClient, Image, Subscription

log = logging.getLogger(__name__)

# First continuation replay length (doubles each time), for messages fragmented far past the span's end.
CONTINUATION_LENGTH = 1024 * 1024
# How often the control session is polled while fetching: replay errors arrive there, and polling keeps the
# archive's control response publication drained.
CONTROL_POLL_INTERVAL_S = 0.2
# A chunk is handed over once it holds half the buffer, or when no block came for this long (the replay paused:
# never in a healthy replay, whose blocks come every millisecond or so; well within the stall timeout).
HAND_OVER_WAIT_S = 0.05
# Waiting for the replay: empty polls before sleeping, the sleep, and the longer sleep after IDLE_LONG_AFTER polls.
IDLE_SPINS = 3
IDLE_SLEEP_S = 0.0001
IDLE_LONG_AFTER = 2000
IDLE_LONG_SLEEP_S = 0.001
# Waiting for the replay image: this many sleeps of IDLE_SLEEP_S, then sleeps of IMAGE_WAIT_SLEEP_S.
IMAGE_WAIT_SHORT_SLEEPS = 50
IMAGE_WAIT_SLEEP_S = 0.0005
# How long to wait for the archive's error response once a replay image ended early.
ERROR_GRACE_S = 1.0

_TERM_OFFSET = struct.Struct("<i")


class ReplayFetchError(RuntimeError):
    """A replay read failed; the text names the recording, the position, the replay channel and the archive."""


class ReplayFetch:
    """The state of one span's read: control session, current replay, subscription, chunk buffer."""

    def __init__(
        self,
        span: ReplaySpan,
        chunk_length: int,
        stall_timeout_s: float | None,
        pool: ConnectionPool,
        ahead: ReplayReadAhead | None = None,
    ) -> None:
        """`ahead`: the read-ahead holding this span; its session and subscription are used (not owned)."""
        self.span = span
        self.ahead = ahead
        self.recording_id = span.recording_id
        self.start = span.start
        self.limit = span.limit
        connection = self.connection = span.connection
        self.timeout_s = stall_timeout_s if stall_timeout_s is not None else connection.message_timeout_ms / 1000.0
        self.channel = localize_channel(connection.replay_channel, connection.control_channel)
        self.stream_id = connection.replay_stream_id
        # Subscribed before the replay request, the image told apart by session id: a wildcard port bound per read,
        # or a read-ahead's shared subscription (`connect`); else subscribed after the OK, filtered by session id.
        self.subscribes_first = has_wildcard_port(self.channel)
        self.chunk_length = chunk_length
        self.pool = pool
        self.lease: ArchiveLease | None = None
        self.client: AeronClient | None = None
        self.responses: ControlResponses | None = None
        self.subscription: Subscription | None = None
        self.request_channel = self.channel
        self.replay_session_id: int | None = None
        self.correlation_id: int | None = None  # of the active replay's request (its failures carry it)
        self.replay_active = False
        self.ahead_taken = False  # the read-ahead's replay is the first one only
        # Over a response channel (`responseChannels`) each replay gets a subscription of its own, asked for as
        # `via_response` does; `_response` is the set-up of the current one until its image came.
        self.response_mode = is_response_channel(self.channel)
        self._response: ResponseChannelReplay | None = None
        self.position = self.start  # next byte expected
        self._next_control_poll = 0.0

    # ---- description for errors ------------------------------------------------------------------------------

    def where(self, position: int | None = None) -> str:
        at = self.position if position is None else position
        driver = self.client.aeron_dir if self.client is not None else self.connection.aeron_dir or "default"
        return (
            f"recording {self.recording_id} at position {at} ({self.span.describe()}; replay channel "
            f"{self.request_channel} stream {self.stream_id}; archive control channel "
            f"{self.connection.control_channel} stream {self.connection.control_stream_id}; media driver {driver})"
        )

    def _mtu_hint(self) -> str:
        """What to try when a replay asked for larger datagrams (`replayMtu`) never connects or stalls: a network
        that drops IP fragments, or a receiving media driver whose window or socket buffer is below the MTU."""
        mtu = ChannelUri.parse(self.request_channel).get("mtu")
        if mtu is None:
            return ""
        return (
            f" (the replay was asked for datagrams of mtu={mtu}: if IP fragments are dropped between the archive "
            "and this host, or this host's media driver has a receiver window or socket buffer below that, read "
            "with replayMtu=recording)"
        )

    # ---- lifecycle --------------------------------------------------------------------------------------------

    def connect(self) -> None:
        """Lease a control session (the pool localizes a `0.0.0.0` response endpoint), then bind the replay port;
        or, for a span read ahead, use the read-ahead's session and subscription."""
        if self.ahead is not None:
            try:
                self.responses = self.ahead.open(self.timeout_s)
            except Exception as ex:
                reason = ex.reason if isinstance(ex, ArchiveConnectError) else ex
                raise ReplayFetchError(f"cannot reach the archive to replay {self.where()}: {reason}") from ex
            self.subscription = self.ahead.subscription
            self.client = self.responses.archive.aeron
            self.request_channel = self.ahead.request_channel
            self.stream_id = self.ahead.stream_id  # a read-ahead on IPC may use a stream id of its own
            self.subscribes_first = self.ahead.shared_subscription
            return
        self.lease = self.pool.archive(self.connection, purpose="replay")
        try:
            archive = self.lease.acquire()
        except Exception as ex:
            reason = ex.reason if isinstance(ex, ArchiveConnectError) else ex
            raise ReplayFetchError(f"cannot reach the archive to replay {self.where()}: {reason}") from ex
        self.responses = ControlResponses(archive)
        self.client = archive.aeron
        if self.subscribes_first:
            # One ephemeral port per read: bind first, then tell the archive the resolved endpoint.
            self.subscription = self._add_subscription(self.channel)
            resolved = self.subscription.try_resolve_channel_endpoint_port(timeout_s=self.timeout_s)
            if resolved is None:
                raise ReplayFetchError(
                    f"could not resolve the port of replay channel {self.channel} within "
                    f"{self.timeout_s:.1f}s for {self.where()}"
                )
            self.request_channel = resolved

    def _add_subscription(self, channel: str) -> Subscription:
        assert self.client is not None
        try:
            return self.client.add_subscription(channel, self.stream_id)
        except Exception as ex:
            raise ReplayFetchError(
                f"cannot subscribe to replay channel {channel} stream {self.stream_id} for {self.where()}: {ex}"
            ) from ex

    def start_replay(self, position: int, length: int) -> Image:
        """Start a replay of `[position, position + length)` and return its image once connected."""
        responses = self.responses
        assert responses is not None
        ahead, self.ahead_taken = self.ahead if not self.ahead_taken else None, True
        subscribed: Subscription | None = None
        try:
            taken = ahead.take(self.span, position, length, self.timeout_s) if ahead is not None else None
            if taken is None and self.response_mode:
                self.replay_session_id, self.correlation_id, subscribed = self._replay_via_response(position, length)
            elif taken is None:
                self.replay_session_id, self.correlation_id = responses.replay(
                    self.recording_id, position, length, self.request_channel, self.stream_id, self.timeout_s
                )
            else:
                self.replay_session_id, self.correlation_id, subscribed = taken
        except ArchiveError as ex:
            raise ReplayFetchError(
                f"the archive refused to replay {length} bytes of {self.where(position)}: {ex}"
            ) from ex
        self.replay_active = True
        session_id = to_int32(self.replay_session_id)
        if not self.subscribes_first:
            if self.subscription is not None:
                self.subscription.close()
            # Subscribed ahead by the read-ahead (this fetch owns it now), or subscribe now.
            self.subscription = subscribed or self._add_subscription(add_session_id(self.channel, session_id))
        assert self.subscription is not None
        deadline = time.monotonic() + self.timeout_s
        waits = 0
        while True:
            image = self.subscription.image_by_session_id(session_id)
            self._advance_ahead()  # replays asked for ahead go on with their set-up meanwhile
            if image is not None:
                if self._response is not None:  # its image came: the request publication can go
                    self._response.close()
                    self._response = None
                log.debug(
                    "replay %d of recording %d connected: [%d, %d) on %s",
                    self.replay_session_id,
                    self.recording_id,
                    position,
                    position + length,
                    self.request_channel,
                )
                return image
            self._poll_control(force=False)
            if time.monotonic() > deadline:
                raise ReplayFetchError(
                    f"replay image (session {session_id}) did not connect within "
                    f"{self.timeout_s:.1f}s for {self.where(position)}{self._mtu_hint()}"
                )
            # The image usually comes with the subscription or within ~0.1 ms: short sleeps first (in flight).
            waits += 1
            time.sleep(IDLE_SLEEP_S if waits < IMAGE_WAIT_SHORT_SLEEPS else IMAGE_WAIT_SLEEP_S)

    def _replay_via_response(self, position: int, length: int) -> tuple[int, int, Subscription]:
        """A replay over a response channel (`via_response`), driven until the archive accepted it:
        `(replay_session_id, correlation_id, its subscription)`, the replay watched. A refusal raises
        `ArchiveError`; no answer within the timeout `ReplayFetchError`."""
        responses = self.responses
        assert responses is not None
        setup = self._response = ResponseChannelReplay(
            responses, self.recording_id, position, length, self.request_channel, self.stream_id
        )
        deadline = time.monotonic() + self.timeout_s
        waits = 0
        try:
            while (replay_session_id := setup.poll()) is None:
                if time.monotonic() > deadline:
                    raise ReplayFetchError(
                        f"no answer to a replay over a response channel within {self.timeout_s:.1f}s for "
                        f"{self.where(position)}: the archive may not support response channels (Java's before "
                        "1.46 do not), or its response control port may be unreachable (option responseChannels)"
                    )
                waits += 1
                time.sleep(0 if waits <= IDLE_SPINS else IDLE_SLEEP_S)
        except NativeAeronError as ex:
            raise ReplayFetchError(
                f"the media driver refused a replay's response channel {self.request_channel} for "
                f"{self.where(position)}: {ex}"
            ) from ex
        assert setup.correlation_id is not None
        responses.watch(setup.correlation_id)
        return replay_session_id, setup.correlation_id, setup.take_subscription()

    def _poll_control(self, force: bool) -> None:
        """Drain the control session (pings, signals, answers to replays asked for ahead); a failure of this
        read's replay raises."""
        now = time.monotonic()
        if not force and now < self._next_control_poll:
            return
        self._next_control_poll = now + CONTROL_POLL_INTERVAL_S
        assert self.responses is not None
        try:
            self.responses.poll()
        except ArchiveError as ex:
            raise ReplayFetchError(f"the archive failed or went away during the replay of {self.where()}: {ex}") from ex
        self._advance_ahead()

    def _advance_ahead(self) -> None:
        """Let the replays asked for ahead go on with their set-up (over response channels they need the reader to
        send their requests); a failure of this read's replay reported meanwhile raises."""
        if self.ahead is None:
            return
        try:
            self.ahead.advance()
        except ArchiveError as ex:
            raise ReplayFetchError(f"the archive failed or went away during the replay of {self.where()}: {ex}") from ex

    def _replay_done(self) -> None:
        """The active replay ended (it sent all it was asked for, or failed): nothing more comes for it."""
        self.replay_active = False
        if self.correlation_id is not None and self.responses is not None:
            self.responses.release(self.correlation_id)
        self.correlation_id = None

    def close(self, failed: bool) -> None:
        """Stop the replay if it is still running, close the subscription, end the lease of the control session.

        The session goes back to the pool after a read that completed or was stopped early by the caller; after a
        failure, or if the replay could not be stopped, its state is unknown and the pool closes it.
        """
        responses, self.responses = self.responses, None
        lease, self.lease = self.lease, None
        evict = failed
        setup, self._response = self._response, None
        if setup is not None:
            setup.close()
        try:
            if responses is not None and self.replay_active and self.replay_session_id is not None:
                try:
                    if self.correlation_id is not None:
                        responses.release(self.correlation_id)  # stopped on purpose: not a failure
                    responses.stop_replay(self.replay_session_id, self.connection.message_timeout_ms / 1000.0)
                    log.debug(
                        "stopped replay %d of recording %d at position %d",
                        self.replay_session_id,
                        self.recording_id,
                        self.position,
                    )
                except Exception as ex:
                    evict = True
                    log.warning("could not stop replay %d of %s: %s", self.replay_session_id, self.where(), ex)
                self.replay_active = False
                self.correlation_id = None
        finally:
            if self.subscription is not None:
                # A read-ahead's shared subscription serves its other spans: it closes it itself.
                if self.ahead is None or self.subscription is not self.ahead.subscription:
                    self.subscription.close()
                self.subscription = None
            if lease is not None:
                lease.release(evict=evict)
            elif evict and self.ahead is not None:
                self.ahead.mark_failed()

    # ---- fetching ---------------------------------------------------------------------------------------------

    def chunks(self) -> Iterator[tuple[memoryview, int, FrameScan]]:
        self.connect()
        # No chunk ever holds more than the span's bytes (or a PAD header past them): a small span allocates, and
        # zeroes, that much rather than a whole chunk. The header of a PAD longer than what is left of the chunk
        # always fits in the room kept after it.
        capacity = min(self.chunk_length, self.limit - self.start)
        buffer = bytearray(capacity + HEADER_LENGTH)
        view = memoryview(buffer)
        fill = 0
        chunk_position = self.position
        segment_limit = self.span.first_replay_limit()
        continuation = CONTINUATION_LENGTH
        # Caught up with the replay, a chunk is handed over once it holds this much (or the replay is done or
        # paused): the decoder's and Spark's costs per batch stay small next to its rows, no small batch is merged.
        hand_over = max(1, self.chunk_length // 2)
        cut = False
        while True:
            image = self.start_replay(self.position, segment_limit - self.position)

            def on_block(
                block: memoryview,
                _session_id: int,
                term_id: int,
                bits: int = image.position_bits_to_shift,
                initial_term_id: int = image.initial_term_id,
            ) -> None:
                nonlocal fill, cut
                term_offset = _TERM_OFFSET.unpack_from(block, TERM_OFFSET_FIELD_OFFSET)[0]
                block_position = compute_position(term_id, term_offset, bits, initial_term_id)
                if block_position != self.position:
                    raise ReplayFetchError(
                        f"replay delivered frames at position {block_position}, expected "
                        f"{self.position}, for {self.where()}"
                    )
                n = len(block)
                if fill + n > capacity:
                    # Only a PAD frame comes whole past the poll's length limit (it may be long, wherever it lies
                    # in its term): keep its header and end the chunk there, as the chunk contract allows.
                    if block[TYPE_FIELD_OFFSET] != HDR_TYPE_PAD:
                        raise ReplayFetchError(
                            f"replay delivered a {n}-byte block of data frames beyond the "
                            f"requested length at {self.where()}"
                        )
                    view[fill : fill + HEADER_LENGTH] = block[:HEADER_LENGTH]
                    fill += HEADER_LENGTH
                    cut = True
                else:
                    view[fill : fill + n] = block
                    fill += n
                self.position += n

            last_progress = time.monotonic()
            idle = 0
            cut = False
            while self.position < segment_limit:
                space = min(capacity - fill, self.limit - self.position)
                got = image.block_poll(on_block, space) if space > 0 else 0
                if cut:  # a PAD frame was cut short: the next chunk starts after it
                    if fill > 0:
                        yield self.as_recorded(view[:fill], chunk_position)
                    chunk_position, fill, cut = self.position, 0, False
                    last_progress = time.monotonic()
                    continue
                if got > 0:
                    idle = 0
                    last_progress = time.monotonic()
                    self._poll_control(force=False)
                    continue
                if fill > 0 and (
                    fill >= hand_over
                    or space <= 0
                    or time.monotonic() - last_progress > HAND_OVER_WAIT_S
                    or image.is_end_of_stream
                    or image.is_closed
                ):
                    # Enough for a batch, or the buffer is full, or the replay paused or ended: what came so far
                    # may be all the caller needs (its last message), so a pause or an early end never holds it.
                    yield self.as_recorded(view[:fill], chunk_position)
                    chunk_position, fill = self.position, 0
                    last_progress = time.monotonic()  # time spent by the consumer is not a stall
                    continue
                self._poll_control(force=False)
                if image.is_end_of_stream or image.is_closed:
                    self._replay_ended_early(image)
                if time.monotonic() - last_progress > self.timeout_s:
                    raise ReplayFetchError(
                        f"replay stalled: no data for {self.timeout_s:.1f}s at {self.where()}{self._mtu_hint()}"
                    )
                idle += 1
                if idle > IDLE_SPINS:
                    # The replay is written by another thread or process, a block at a time: spinning on an empty
                    # image would only take CPU from it (two cores are common), and Python cannot sleep < ~60 us.
                    time.sleep(IDLE_SLEEP_S if idle < IDLE_LONG_AFTER else IDLE_LONG_SLEEP_S)
            # This replay sent everything it was asked for and ends by itself.
            self._replay_done()
            image.close()
            if fill > 0:
                # Hand over what it sent before replaying on: the caller usually stops here, having its last
                # message whole (a continuation replay is only for a message fragmented past the bound).
                yield self.as_recorded(view[:fill], chunk_position)
                chunk_position, fill = self.position, 0
            if self.position >= self.limit:
                break
            segment_limit = min(self.limit, self.position + continuation)
            continuation *= 2
            log.debug(
                "recording %d: continuing the replay at position %d to %d",
                self.recording_id,
                self.position,
                segment_limit,
            )

    def as_recorded(self, chunk: memoryview, position: int) -> tuple[memoryview, int, FrameScan]:
        """`(chunk, position, scan)`, the recording's session id and stream id put back into every frame header
        (replay rewrote them).

        Chunks then hold the frames exactly as the segment files do (bar a CRC kept in the session id field by
        recordings made with record checksums), whichever path read them; one vectorised scan and scatter. The
        scan (`stop_at_padding=False`, exactly `chunk`) goes along, so the decoder does not walk the chunk again.
        """
        span = self.span
        scan = scan_frames(chunk, 0, len(chunk), stop_at_padding=False)
        if scan.stop_reason is ScanStop.INCOMPLETE and len(chunk) - scan.stop_offset >= HEADER_LENGTH:
            offsets = np.append(scan.offsets, scan.stop_offset)  # a PAD frame cut after its header
            rewrite_session_and_stream(chunk, offsets, span.session_id, span.stream_id)
        else:  # strided stores when the frames are one fixed length (4 MiB of 1 KiB messages: 24 us, not 92)
            rewrite_scan_session_and_stream(chunk, scan, span.session_id, span.stream_id)
        return chunk, position, scan

    def _replay_ended_early(self, image: Image) -> None:
        """The replay image went away before the requested range: report the archive's reason if it sends one."""
        self.replay_active = False  # nothing to stop; its failure, if the archive reports one, raises from the poll
        deadline = time.monotonic() + ERROR_GRACE_S
        while time.monotonic() < deadline:
            self._poll_control(force=True)
            time.sleep(0.01)
        self._replay_done()
        state = "ended (end of stream)" if image.is_end_of_stream else "closed"
        raise ReplayFetchError(
            f"replay image {state} before the requested range was delivered, at {self.where()}; "
            "the archive may have stopped, or the recording been truncated"
        )
