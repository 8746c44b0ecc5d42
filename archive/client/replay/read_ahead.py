"""Read-ahead for small spans read through an archive: their replays asked for before they are consumed.

A partition of many small recordings (packed by `archive.tables.planning.pack_ranges`) read one replay after the
other pays each replay's set-up in full, one round trip after another: a control session leased, a subscription
added and its port resolved, the request and its answer, the image, the close; about 2 ms per span, almost all
of it waiting. `ReplayReadAhead` keeps several replays in flight instead, as Java's asynchronous client allows. It
leases one control session and binds one replay subscription for all of a partition's small spans, sends the next
spans' replay requests without waiting for their answers (`ControlResponses`, which matches each answer to its
request by correlation id), and hands each span, when its turn comes, the replay that is by then set up and usually
already sent. The archive serves the requests in order on that session; the spans are still read strictly in
order, each from its own image.

Which spans: those whose first replay (`ReplaySpan.first_replay_limit`) is at most `READ_AHEAD_MAX_BYTES`. One
subscription serves them all where this reader can have a place of its own:
- on a replay channel with a wildcard UDP port (`endpoint=host:0`, the default `aeron:udp?endpoint=localhost:0`,
  and the cluster's `0.0.0.0:0`): the port is this reader's alone;
- on IPC with the default `replayStreamId`: the replays go to a stream id of this reader's own, drawn at random
  from `[PRIVATE_STREAM_ID_MIN, 2**31)` (`private_replay_stream_id`), since an IPC subscription has no port to
  tell readers apart.
Every image there is then one of this reader's replays, told apart by session id, and it is subscribed before
the replay starts, so the archive sends at once. Elsewhere (IPC with a `replayStreamId` of the user's choice, a
fixed UDP port), a subscription without a session filter would also join other readers' replays and hold them
back, so each replay gets its own, filtered by its session id: its add is started as soon as the replay's
answer is seen (`async_add_subscription`), and the span takes it over, already added, when its turn comes; the
replay waits for it (as for any client that subscribes after the OK, within the archive's connect timeout).

How much is in flight: at most `READ_AHEAD_REPLAYS` replays, and at most `READ_AHEAD_LOG_BYTES` of log buffers
(three terms of the recording's term length, on each side of the hop): recordings with large terms get fewer
replays ahead, never fewer than one.

Failure: an error answer to a request sent ahead is not reported here; the span then asks again the usual way,
which fails with the full description if the archive still refuses. If the archive's concurrent replay limit
refused it (other readers share the limit), the replays asked for ahead of it are stopped and asked for again
later, the number asked for ahead is halved (growing back by one after each window's worth of ranges read without
a refusal), and the refused one is asked for again every few milliseconds, up to the message timeout, while the
archive closes the replays this reader finished or stopped: the read backs off rather than failing over its own
read-ahead. `close` stops every replay
still in flight (waiting up to the message timeout for the answers still to come), closes the subscription and
ends the lease; after a failure the control session is closed rather than returned to the pool.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.channel import ChannelUri, add_session_id
from aeron_archive_spark.archive.client.connection import REPLAY_STREAM_ID_DEFAULT
from aeron_archive_spark.archive.client.host import localize_channel
from aeron_archive_spark.archive.client.pool import ArchiveLease, ConnectionPool
from aeron_archive_spark.archive.client.replay.responses import (
    ANSWER_WAIT_SLEEP_S,
    ANSWER_WAIT_YIELDS,
    ControlResponses,
)
from aeron_archive_spark.archive.client.replay.span import ReplaySpan, has_wildcard_port
from aeron_archive_spark.archive.client.replay.via_response import ResponseChannelReplay
from aeron_archive_spark.archive.client.response_replay import is_response_channel
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.native import NativeAeronError
from aeron_archive_spark.archive.storage.frames import to_int32

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.archive.native import PendingSubscription, Subscription

log = logging.getLogger(__name__)

# At most this many replays asked for ahead of the one being read.
READ_AHEAD_REPLAYS = 8
# ... over response channels, where each replay's image comes ~100 ms after it was asked for (the response
# publication's setup, see `via_response`): enough in flight to hide that behind the reads of the spans before it,
# within the archive's default concurrent replay limit (20; refusals halve it, as for any reader).
RESPONSE_READ_AHEAD_REPLAYS = 16
# A span is read ahead only if its first replay is at most this long: small ranges, whose set-up outweighs them.
READ_AHEAD_MAX_BYTES = 1024 * 1024
# At most this much log buffer (3 terms per replay, counted once) in flight for replays asked for ahead.
READ_AHEAD_LOG_BYTES = 64 * 1024 * 1024
# A replay asked for ahead whose own subscription (no shared one) is not there this long after the request is
# asked for again: the archive fails a replay that nobody subscribes to within its connect timeout (5 s default).
UNSUBSCRIBED_STALE_S = 1.0
# Refused by the archive's concurrent replay limit: wait this long before asking again (up to the message timeout).
LIMIT_RETRY_SLEEP_S = 0.005
# Waiting for an abandoned subscription's add to settle: sleep between polls.
SETTLE_SLEEP_S = 0.0001
# A read-ahead's own IPC replay stream id is drawn from [PRIVATE_STREAM_ID_MIN, 2**31): far from the small stream
# ids applications choose; two readers on one media driver draw the same one with odds ~k**2 / 2**31.
PRIVATE_STREAM_ID_MIN = 1 << 30


def private_replay_stream_id() -> int:
    """A stream id for one reader's IPC replays (see the module docstring), from the OS's randomness."""
    return PRIVATE_STREAM_ID_MIN + secrets.randbelow((1 << 31) - PRIVATE_STREAM_ID_MIN)


@dataclass
class _Requested:
    """A replay asked for ahead: its span, its length, the request's correlation id and, once answered, the
    replaySessionId (None while unanswered, -1 if refused; `refused_for_limit`: by the concurrent replay limit)."""

    span: ReplaySpan
    length: int
    correlation_id: int
    replay_session_id: int | None = None
    refused_for_limit: bool = False
    subscribing: PendingSubscription | None = None  # no shared subscription: its own, being added
    subscribed: Subscription | None = None  # ... and once added
    sent_at: float = 0.0  # time.monotonic() when asked for
    # Over a response channel: its set-up (token, subscription, request publication); `correlation_id` is -1 until
    # its replay request was sent.
    response: ResponseChannelReplay | None = None


class ReplayReadAhead:
    """Replays of a partition's small spans, asked for ahead (see the module docstring). One reader thread."""

    def __init__(
        self,
        spans: Sequence[ReplaySpan],
        pool: ConnectionPool,
        max_replays: int | None = None,
        max_log_bytes: int = READ_AHEAD_LOG_BYTES,
    ) -> None:
        """`spans`: the partition's spans in reading order; those not read ahead (large, or of another archive
        than the first small one) are left to the caller. `max_replays`: how many ahead at most (default
        `READ_AHEAD_REPLAYS`, over response channels `RESPONSE_READ_AHEAD_REPLAYS`)."""
        self._pending: deque[ReplaySpan] = deque(s for s in spans if self.covers(s))
        self.connection: ConnectionOptions | None = self._pending[0].connection if self._pending else None
        self._pending = deque(s for s in self._pending if s.connection == self.connection)
        self._held = {id(s) for s in self._pending}  # spans not yet handed out (by identity: spans may be equal)
        self._pool = pool
        self._max_replays = max(1, max_replays if max_replays is not None else READ_AHEAD_REPLAYS)
        self._max_replays_given = max_replays is not None
        self._window_cap = self._max_replays
        self._taken_since_back_off = 0
        self._max_log_bytes = max_log_bytes
        self._in_flight: deque[_Requested] = deque()
        self._abandoned: list[PendingSubscription] = []  # subscriptions to close when their add completes
        self.shared_subscription = False  # one subscription for every replay (see the module docstring)
        self.response_mode = False  # replays over a response channel, each set up by a `ResponseChannelReplay`
        self._closing: list[ResponseChannelReplay] = []  # taken: their request publications close once connected
        self._lease: ArchiveLease | None = None
        self.responses: ControlResponses | None = None
        self.subscription: Subscription | None = None
        self.channel = ""
        self.request_channel = ""
        self.stream_id = 0
        self._failed = False

    @staticmethod
    def covers(span: ReplaySpan) -> bool:
        """Whether this span is one to read ahead: small."""
        return span.start < span.limit and span.first_replay_limit() - span.start <= READ_AHEAD_MAX_BYTES

    def __len__(self) -> int:
        """Spans still to be handed out: asked for, or not yet."""
        return len(self._pending) + len(self._in_flight)

    def holds(self, span: ReplaySpan) -> bool:
        return id(span) in self._held

    @property
    def _timeout_s(self) -> float:
        return self.connection.message_timeout_ms / 1000.0 if self.connection is not None else 5.0

    # ---- connection -------------------------------------------------------------------------------------------

    def open(self, resolve_timeout_s: float) -> ControlResponses:
        """Lease the control session and bind the replay port (once); returns the session's `ControlResponses`,
        which the spans read share. Raises what leasing or binding raises; `ArchiveConnectError` when the archive
        cannot be reached, `TimeoutError` when the port is not bound."""
        if self.responses is not None:
            return self.responses
        assert self.connection is not None, "nothing to read ahead"
        connection = self.connection
        self._lease = self._pool.archive(connection, purpose="replay")
        archive = self._lease.acquire()
        responses = self.responses = ControlResponses(archive)
        self.channel = localize_channel(connection.replay_channel, connection.control_channel)
        self.stream_id = connection.replay_stream_id
        self.request_channel = self.channel
        if is_response_channel(self.channel):
            # Every replay on a subscription of its own, bound to it by the archive's response setup.
            self.response_mode = True
            if not self._max_replays_given:
                self._max_replays = self._window_cap = RESPONSE_READ_AHEAD_REPLAYS
            return responses
        if ChannelUri.parse(self.channel).is_ipc and self.stream_id == REPLAY_STREAM_ID_DEFAULT:
            self.stream_id = private_replay_stream_id()
            self.shared_subscription = True
            self.subscription = archive.aeron.add_subscription("aeron:ipc", self.stream_id)
            return responses
        if not has_wildcard_port(self.channel):
            return responses  # each span subscribes to its own replay (see the module docstring)
        self.shared_subscription = True
        self.subscription = archive.aeron.add_subscription(self.channel, self.stream_id)
        resolved = self.subscription.try_resolve_channel_endpoint_port(timeout_s=resolve_timeout_s)
        if resolved is None:
            raise TimeoutError(f"the port of replay channel {self.channel} was not bound within {resolve_timeout_s}s")
        self.request_channel = resolved
        return responses

    # ---- handing out -----------------------------------------------------------------------------------------

    def take(
        self, span: ReplaySpan, position: int, length: int, timeout_s: float
    ) -> tuple[int, int, Subscription | None] | None:
        """`span`'s replay of `[position, position + length)`, asked for ahead, or None if it was not (the caller
        then asks itself): `(replay_session_id, correlation_id, subscription)`, the replay watched from now on
        (see `ControlResponses.watch`); without a shared subscription the subscription to it, which the caller
        then owns (None on a shared subscription: the read-ahead's `subscription`). Spans before it that were
        never taken are given up (their replays stopped). Asks for the next spans before it returns, so they are
        set up while this one is read.
        """
        if not self.holds(span):
            return None
        while self._in_flight and self._in_flight[0].span is not span:
            self._give_up(self._in_flight.popleft())
        while self._pending and not self._in_flight:
            head = self._pending[0]
            if head is span:
                break
            self._held.discard(id(self._pending.popleft()))
        if not self._in_flight:
            self._request_more(span)
        requested = self._in_flight.popleft()
        self._held.discard(id(requested.span))
        self._request_more(None)
        if requested.span is not span or position != span.start or length != requested.length:
            self._give_up(requested)
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            replay_session_id = self._await_answer(requested, max(0.0, deadline - time.monotonic()))
            if replay_session_id is None:
                return None
            if replay_session_id >= 0:
                break
            if not requested.refused_for_limit or time.monotonic() > deadline:
                return None  # the caller asks itself, and reports the archive's refusal
            if self._in_flight or self._max_replays > 1:
                self._back_off()
            # Replays this reader finished or stopped free their places within a few of the archive's duty cycles.
            time.sleep(LIMIT_RETRY_SLEEP_S)
            requested = self._send(span)
        assert self.responses is not None
        failed = self.responses.watch(requested.correlation_id)  # its failures are the reader's from now on
        if failed is not None:  # it failed before its turn (truncated, purged, not connected in time): ask again
            log.debug("replay of recording %d asked for ahead failed: %s; asking again", span.recording_id, failed)
            self._give_up(requested, failed=True)
            return None
        self._grow()
        try:
            self._subscribe_answered()
        except ArchiveError as ex:
            if ex.correlation_id != requested.correlation_id:
                raise
            # This span's replay, watched from now on, failed before its turn (left without a subscriber beyond
            # the archive's connect timeout while the consumer paused): ask again, as for a failure seen at `watch`.
            log.debug("replay of recording %d asked for ahead failed: %s; asking again", span.recording_id, ex)
            self._give_up(requested, failed=True)
            return None
        if requested.response is not None:
            own = requested.response.take_subscription()
            self._closing.append(requested.response)
            return replay_session_id, requested.correlation_id, own
        if self.shared_subscription:
            return replay_session_id, requested.correlation_id, None
        if requested.subscribed is None and time.monotonic() - requested.sent_at > UNSUBSCRIBED_STALE_S:
            # Left without a subscriber this long (the consumer paused), the replay may have failed its connect
            # timeout in the archive: ask again rather than wait for an image that may never come.
            self._give_up(requested)
            return None
        subscription = self._await_subscription(requested, timeout_s)
        if subscription is None:
            self._give_up(requested)
            return None
        return replay_session_id, requested.correlation_id, subscription

    def _grow(self) -> None:
        """One more replay asked for ahead after a window's worth of spans taken without a refusal (to the cap)."""
        if self._max_replays >= self._window_cap:
            return
        self._taken_since_back_off += 1
        if self._taken_since_back_off >= self._max_replays:
            self._max_replays += 1
            self._taken_since_back_off = 0

    def _subscribe_answered(self) -> None:
        """No shared subscription: collect the answers that came for the replays in flight and start adding each
        one's own subscription, so it is there (and the replay under way) when its turn comes."""
        if self.responses is not None and self.response_mode:
            for requested in self._in_flight:
                if requested.replay_session_id is None:
                    self._collect_answer(requested)
            self._closing = [setup for setup in self._closing if not setup.close_request_if_connected()]
            return
        if self.shared_subscription or self.responses is None:
            return
        for requested in self._in_flight:
            if requested.replay_session_id is None:
                self._collect_answer(requested)
            if requested.replay_session_id is not None and requested.replay_session_id >= 0:
                self._start_subscribing(requested)
            if requested.subscribing is not None and requested.subscribed is None:
                try:
                    requested.subscribed = requested.subscribing.poll()
                except NativeAeronError as ex:
                    log.debug("subscribing to replay %d ahead failed: %s", requested.replay_session_id, ex)
                    requested.subscribing = None
        for pending in list(self._abandoned):
            self._settle(pending)

    def advance(self) -> None:
        """Over response channels, go on with the set-up of the replays in flight (each needs its request sent
        once its token and request publication are there) and close the request publications whose replays
        connected: the reader calls this while it waits and reads, so their ~100 ms set-up overlaps its work.
        Otherwise nothing (the archive sets those replays up by itself)."""
        if self.response_mode:
            self._subscribe_answered()

    def _start_subscribing(self, requested: _Requested) -> None:
        if requested.subscribing is not None or self.shared_subscription or self.responses is None:
            return
        assert requested.replay_session_id is not None
        channel = add_session_id(self.channel, to_int32(requested.replay_session_id))
        try:
            requested.subscribing = self.responses.archive.aeron.async_add_subscription(channel, self.stream_id)
        except NativeAeronError as ex:
            log.debug("could not start subscribing to %s ahead: %s", channel, ex)

    def _await_subscription(self, requested: _Requested, timeout_s: float) -> Subscription | None:
        """The subscription to `requested`'s replay (added now if its add was not started), or None if the driver
        refused it or did not answer in time (the caller then asks and subscribes itself)."""
        self._start_subscribing(requested)
        pending, requested.subscribing = requested.subscribing, None
        if pending is None:
            return None
        if requested.subscribed is not None:
            subscribed, requested.subscribed = requested.subscribed, None
            return subscribed
        deadline = time.monotonic() + timeout_s
        polls = 0
        try:
            while True:
                subscription = pending.poll()
                if subscription is not None:
                    return subscription
                if time.monotonic() > deadline:
                    break
                polls += 1
                time.sleep(0 if polls <= ANSWER_WAIT_YIELDS else ANSWER_WAIT_SLEEP_S)
        except NativeAeronError as ex:
            log.debug("subscribing to replay %d ahead failed: %s", requested.replay_session_id, ex)
            return None
        self._abandon(pending)
        return None

    def _abandon(self, pending: PendingSubscription) -> None:
        pending.abandon()
        self._settle(pending)

    def _settle(self, pending: PendingSubscription) -> None:
        """Poll an abandoned add once; drop it once the driver answered (the subscription was closed then)."""
        with contextlib.suppress(NativeAeronError):  # a refused add has nothing to close
            pending.poll()
        if pending.is_done:
            if pending in self._abandoned:
                self._abandoned.remove(pending)
        elif pending not in self._abandoned:
            self._abandoned.append(pending)

    def _back_off(self) -> None:
        """The archive's concurrent replay limit was reached: stop what was asked for ahead and put those spans
        back, and halve how many replays are asked for ahead (it grows again by one after each window's worth of
        spans read without a refusal: other readers share the limit, and their reads end)."""
        self._max_replays = max(1, self._max_replays // 2)
        self._taken_since_back_off = 0
        back = []
        while self._in_flight:
            requested = self._in_flight.pop()
            self._give_up(requested)
            back.append(requested.span)
        self._pending.extendleft(back)  # popped last first, so this restores the order
        self._held.update(id(s) for s in back)
        log.info(
            "the archive's concurrent replay limit was reached: now at most %d replays asked for ahead",
            self._max_replays,
        )

    def _request_more(self, must: ReplaySpan | None) -> None:
        """Ask for replays of the next spans while the window and the log budget allow (`must`: at least that
        one, whatever the budget)."""
        log_bytes = sum(3 * q.span.term_length for q in self._in_flight)
        while self._pending and len(self._in_flight) < self._max_replays:
            candidate = self._pending[0]
            cost = 3 * candidate.term_length
            if candidate is not must and self._in_flight and log_bytes + cost > self._max_log_bytes:
                return
            self._pending.popleft()
            self._in_flight.append(self._send(candidate))
            log_bytes += cost
            if candidate is must:
                must = None

    def _send(self, span: ReplaySpan) -> _Requested:
        assert self.responses is not None
        length = span.first_replay_limit() - span.start
        if self.response_mode:
            setup = ResponseChannelReplay(
                self.responses, span.recording_id, span.start, length, self.request_channel, self.stream_id
            )
            return _Requested(span, length, -1, sent_at=time.monotonic(), response=setup)
        correlation_id = self.responses.send_replay(
            span.recording_id, span.start, length, self.request_channel, self.stream_id
        )
        return _Requested(span, length, correlation_id, sent_at=time.monotonic())

    def _collect_answer(self, requested: _Requested) -> int | None:
        """File the answer to `requested` if it came (one poll) and return it: its replay session id, or -1 if
        refused; None while unanswered."""
        assert self.responses is not None
        if requested.response is not None:
            return self._collect_response_answer(requested, requested.response)
        try:
            requested.replay_session_id = self.responses.answer(requested.correlation_id)
        except ArchiveError as ex:
            if ex.correlation_id != requested.correlation_id:
                raise  # the failure of another request (the replay being read, which `poll` watches): not this one's
            requested.refused_for_limit = ex.error_code == ErrorCode.MAX_REPLAYS
            log.debug(
                "replay of recording %d asked for ahead was refused (%s); asking again", requested.span.recording_id, ex
            )
            requested.replay_session_id = -1
        return requested.replay_session_id

    def _collect_response_answer(self, requested: _Requested, setup: ResponseChannelReplay) -> int | None:
        """`_collect_answer` over a response channel: the set-up goes on as far as it can."""
        try:
            answer = setup.poll()
        except (ArchiveError, NativeAeronError) as ex:
            if isinstance(ex, ArchiveError) and not setup.owns(ex.correlation_id):
                raise  # the failure of another request (the replay being read, which `poll` watches): not this one's
            requested.refused_for_limit = isinstance(ex, ArchiveError) and ex.error_code == ErrorCode.MAX_REPLAYS
            log.debug(
                "replay of recording %d asked for ahead over a response channel failed (%s); asking again",
                requested.span.recording_id,
                ex,
            )
            setup.close()
            requested.replay_session_id = -1
            return -1
        if answer is not None:
            assert setup.correlation_id is not None
            requested.correlation_id = setup.correlation_id
            requested.replay_session_id = answer
        return requested.replay_session_id

    def _await_answer(self, requested: _Requested, timeout_s: float) -> int | None:
        """The replaySessionId answered for `requested`; -1 if the archive refused it (logged), None if no answer
        came in time (the caller then asks itself, and fails with the full description if the archive is gone)."""
        deadline = time.monotonic() + timeout_s
        polls = 0
        answer = requested.replay_session_id
        while answer is None:
            answer = self._collect_answer(requested)
            if answer is not None:
                break
            if time.monotonic() > deadline:
                assert self.responses is not None
                if requested.response is not None:
                    requested.response.close()
                else:
                    self.responses.release(requested.correlation_id)
                self._failed = True  # an answer may still come and start a replay nobody reads: end the session
                return None
            polls += 1
            time.sleep(0 if polls <= ANSWER_WAIT_YIELDS else ANSWER_WAIT_SLEEP_S)
        return answer

    def _give_up(self, requested: _Requested, failed: bool = False) -> None:
        """Stop a replay asked for ahead that will not be read (its answer awaited first, to know its id);
        `failed`: the archive already ended it, nothing to stop."""
        self._held.discard(id(requested.span))
        if requested.subscribing is not None:
            self._abandon(requested.subscribing)
            requested.subscribing = None
        if self.responses is None:
            if requested.response is not None:
                requested.response.close()
            return
        unsent = requested.response is not None and requested.response.correlation_id is None
        # A response-channel replay whose request is not out yet has no replay to stop: closing its set-up is all
        # (the archive lets the token expire); finishing the set-up only to stop it would start a replay, one
        # request publication's connect after another.
        replay_session_id = None if failed or unsent else self._await_answer(requested, self._timeout_s)
        if requested.response is not None:
            requested.response.close()  # its subscription, publication and filed answers
        self.responses.release(requested.correlation_id)  # stopped on purpose: whatever else comes is dropped
        if replay_session_id is None or replay_session_id < 0:
            return
        try:
            self.responses.stop_replay(replay_session_id, self._timeout_s)
        except Exception as ex:
            self._failed = True
            log.warning(
                "could not stop replay %d of recording %d: %s", replay_session_id, requested.span.recording_id, ex
            )

    def mark_failed(self) -> None:
        """The shared control session's state is unknown (a replay could not be stopped): close it at the end."""
        self._failed = True

    # ---- close ------------------------------------------------------------------------------------------------

    def close(self, failed: bool = False) -> None:
        """Stop the replays still in flight, close the subscription, end the lease (closing the control session
        after a failure, or if a replay could not be stopped)."""
        self._pending.clear()
        self._held.clear()
        try:
            if not failed:
                while self._in_flight:
                    self._give_up(self._in_flight.popleft())
        finally:
            for requested in self._in_flight:
                if requested.subscribing is not None:
                    self._abandon(requested.subscribing)
                if requested.response is not None:
                    requested.response.close()
            self._in_flight.clear()
            for setup in self._closing:
                setup.close()
            self._closing.clear()
            deadline = time.monotonic() + 1.0  # the driver answers adds within a millisecond or so
            while self._abandoned and time.monotonic() < deadline:
                for pending in list(self._abandoned):
                    self._settle(pending)
                time.sleep(SETTLE_SLEEP_S)
            self._abandoned.clear()  # any left are closed with the client
            subscription, self.subscription = self.subscription, None
            lease, self._lease = self._lease, None
            self.responses = None
            if subscription is not None:
                subscription.close()
            if lease is not None:
                lease.release(evict=failed or self._failed)
