"""The archive conductor: the single owner of archive state (Aeron's `ArchiveConductor`).

It owns the catalog, the control sessions, the recording subscriptions, the replay and delete sessions and the
task queue through which the recorder, the replayer and Aeron's image callbacks hand work back. Every request
is validated here, in Aeron's order, and answered with Aeron's error codes and a message naming the recording,
position or parameter at fault.

The conductor is what `ConductorPort` (for control sessions) and `ControlSessionHost` (for the control session
adapter) describe; those sessions import the protocols, never this module. Time is read once per duty cycle from
the context's `nano_clock` and handed to every session's `do_work`; wall-clock timestamps come from `epoch_clock`.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from aeron_archive_spark.archive import recording_pos
from aeron_archive_spark.archive.channel import (
    ChannelError,
    ChannelUri,
    initial_position_params,
    recording_subscription_key,
    replay_mtu_length,
    spy_channel,
    strip_channel,
    udp_endpoint_host,
)
from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.async_connect import AsyncConnect
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.constants import (
    ARCHIVE_RECORDING_POSITION_TYPE_ID,
    COUNTER_RECORD_ALLOCATED,
    NULL_POSITION,
    REPLAY_ALL_AND_FOLLOW,
    REPLAY_ALL_AND_STOP,
    ControlResponseCode,
    RecordingSignal,
    RecordingState,
    SourceLocation,
)
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.native import ExclusivePublication, NativeAeronError, TermAppender
from aeron_archive_spark.archive.native.term_appender import PARTITION_COUNT
from aeron_archive_spark.archive.server.agent import Agent, BackoffIdleStrategy, SessionWorker
from aeron_archive_spark.archive.server.conductor_port import ControlClient
from aeron_archive_spark.archive.server.control_session import ControlSession
from aeron_archive_spark.archive.server.control_session import fault_log as control_session_fault_log
from aeron_archive_spark.archive.server.control_session_adapter import KIND_MALFORMED, ControlSessionAdapter
from aeron_archive_spark.archive.server.counters import ArchiveCounters, WorkerTotals
from aeron_archive_spark.archive.server.create_replay_publication_session import CreateReplayPublicationSession
from aeron_archive_spark.archive.server.delete_segments_session import DeleteSegmentsSession
from aeron_archive_spark.archive.server.list_recording_subscriptions_session import (
    ListRecordingSubscriptionsSession,
    SubscriptionDescriptor,
)
from aeron_archive_spark.archive.server.list_recordings_session import ListRecordingsSession, uri_filter
from aeron_archive_spark.archive.server.rate_limited_log import DEFAULT_INTERVAL_NS, RateLimitedLog
from aeron_archive_spark.archive.server.recording_events_proxy import RecordingEventsProxy
from aeron_archive_spark.archive.server.recording_session import RecordingSession
from aeron_archive_spark.archive.server.replay_session import LimitCounter, ReplaySession, replay_buffer_length
from aeron_archive_spark.archive.server.replay_tokens import ReplayTokens
from aeron_archive_spark.archive.server.replication_session import (
    ReplicaSubscription,
    ReplicationRequest,
    ReplicationSession,
)
from aeron_archive_spark.archive.server.retention import RetentionCheck
from aeron_archive_spark.archive.server.session import Session
from aeron_archive_spark.archive.server.time_index_session import (
    TimeIndexesSession,
    TimeIndexSession,
    position_at_time,
    time_index_ranges,
)
from aeron_archive_spark.archive.storage import segments
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.checksums import Checksum, checksum_for_name
from aeron_archive_spark.archive.storage.frames import FRAME_ALIGNMENT, to_int32
from aeron_archive_spark.archive.storage.mark_file import UPDATE_INTERVAL_MS as MARK_FILE_UPDATE_INTERVAL_MS
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.time_index import TimeIndexWriter
from aeron_archive_spark.archive.storage.time_index_copy import TimeIndexCopy
from aeron_archive_spark.archive.storage.time_index_search import IndexHints, RecordingGeometry, RecordingTimeIndex

if TYPE_CHECKING:
    from aeron_archive_spark.archive.descriptor import RecordingDescriptor
    from aeron_archive_spark.archive.native import AeronClient, Counter, ExclusivePublication, Image, Subscription
    from aeron_archive_spark.archive.server.context import ArchiveContext
    from aeron_archive_spark.archive.storage.mark_file import ArchiveMarkFile

log = logging.getLogger(__name__)

SESSION_EVENT_LINES_PER_SECOND = 20
# Counters of the archive's work are written at most this often while the conductor is busy.
COUNTERS_PUBLISH_INTERVAL_NS = 1_000_000
# A recorder cycle that writes less than this is a trickle: the recorder waits a little before polling again (see
# `BackoffIdleStrategy`). A quarter of Aeron's default 128 KiB receiver window, so the wait never holds a UDP
# sender back; an IPC or a fast UDP feed fills it within one short sleep.
RECORDER_TRICKLE_BYTES = 32 * 1024

type Listing = ListRecordingsSession | ListRecordingSubscriptionsSession | TimeIndexSession | TimeIndexesSession


@dataclass
class RecordingSubscription:
    """One recording subscription and the recording sessions of its images."""

    subscription: Subscription
    key: str
    channel: str
    stripped_channel: str
    stream_id: int
    auto_stop: bool
    control_session_id: int
    correlation_id: int
    extend_recording_id: int | None = None
    sessions: dict[int, RecordingSession] = field(default_factory=dict)
    stopping: bool = False
    images_seen: int = 0

    @property
    def subscription_id(self) -> int:
        return self.subscription.registration_id


class ArchiveConductor(Agent):
    def __init__(
        self,
        ctx: ArchiveContext,
        aeron: AeronClient,
        catalog: Catalog,
        archive_id: int,
        mark_file: ArchiveMarkFile | None = None,
    ) -> None:
        super().__init__("archive-conductor", self._on_agent_error, nano_clock=ctx.nano_clock)
        self.ctx = ctx
        self.aeron = aeron
        self.catalog = catalog
        self.archive_id = archive_id
        # archive-mark.dat: its activity timestamp is this conductor's proof of life, its error log the archive's.
        self.mark_file = mark_file
        self._next_mark_file_update_ns = 0
        self.counters = ArchiveCounters(aeron, archive_id)
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        # Faults a peer can repeat at will are logged at most once a second per kind, with periodic counts.
        self._request_faults = RateLimitedLog(log, clock=ctx.nano_clock)
        # Sessions connecting and closing are ordinary events, logged line by line; only a flood is summarised.
        self._session_events = RateLimitedLog(log, clock=ctx.nano_clock, burst=SESSION_EVENT_LINES_PER_SECOND)
        self._next_fault_flush_ns = 0
        self._counters_stale = False
        self._next_counters_ns = 0
        self._now_ns = ctx.nano_clock()  # this duty cycle's time, for sessions created by its requests
        self._control_sessions: dict[int, ControlSession] = {}
        self._next_control_session_id = random.randint(1, 1 << 30)
        self._subscriptions: dict[str, RecordingSubscription] = {}
        self._recordings: dict[int, RecordingSession] = {}  # active recording sessions by recording id
        self._recording_entries: dict[int, RecordingSubscription] = {}  # their subscriptions, even once stopping
        self._replays: dict[int, ReplaySession] = {}
        # Replays whose publication the media driver is still adding, by a key of their own.
        self._pending_replays: dict[int, CreateReplayPublicationSession] = {}
        self._next_pending_replay = 1
        # Aborted before their publication came: polled until the driver answers, so it can be closed.
        self._abandoned_replays: list[CreateReplayPublicationSession] = []
        # Deletions by recording id (the latest, as Java's map) and every one still running (a migration may add one
        # for a recording that has one already, as Java's does).
        self._delete_sessions: dict[int, DeleteSegmentsSession] = {}
        # Retention (beyond Java): whole segments purged from recordings' starts to keep within the limits.
        retention = RetentionCheck(
            self, ctx.retention, ctx.retention_overrides, ctx.retention_check_interval_ms, ctx.epoch_clock
        )
        self.retention: RetentionCheck | None = retention if retention.is_enabled else None
        self._deletes: list[DeleteSegmentsSession] = []
        # Replications by id (until done or stopped), and every replication session still to be driven and closed.
        self._replications: dict[int, ReplicationSession] = {}
        self._replication_sessions: list[ReplicationSession] = []
        self._listings: list[Listing] = []
        # What time index searches learned of recordings without an index (or with an unindexed prefix), so that
        # those are not probed file by file on every request; forgotten whenever an index file may appear.
        self._index_hints = IndexHints()
        self._replay_id = 1
        # Tokens for replays over response channels, each valid for the connect timeout (Java's).
        self._replay_tokens = ReplayTokens(ctx.connect_timeout_ns)
        # What was given up before the media driver answered (a replication's replay request publication): polled
        # each duty cycle until it is settled (closed), then forgotten.
        self._settling: list[Callable[[], bool]] = []
        self._record_checksum: Checksum | None = checksum_for_name(ctx.record_checksum) if ctx.record_checksum else None
        self._replay_checksum: Checksum | None = checksum_for_name(ctx.replay_checksum) if ctx.replay_checksum else None
        self.recorder_totals = WorkerTotals()
        self.replayer_totals = WorkerTotals()
        self.recorder = SessionWorker(
            "archive-recorder",
            self._on_agent_error,
            self._on_recording_done,
            nano_clock=ctx.nano_clock,
            idle=BackoffIdleStrategy(trickle_work=RECORDER_TRICKLE_BYTES),
        )
        self.replayer = SessionWorker(
            "archive-replayer", self._on_agent_error, self._on_replay_done, nano_clock=ctx.nano_clock
        )
        control_subs: list[Subscription] = []
        if ctx.control_channel:
            control_subs.append(aeron.add_subscription(ctx.control_channel, ctx.control_stream_id))
        if ctx.local_control_channel:
            control_subs.append(aeron.add_subscription(ctx.local_control_channel, ctx.local_control_stream_id))
        self._control_subscriptions = control_subs
        self._adapter = ControlSessionAdapter(self, control_subs, ctx.authorisation_service)
        self._events: RecordingEventsProxy | None = None
        if ctx.recording_events_enabled:
            self._events = RecordingEventsProxy(
                aeron.add_publication(ctx.recording_events_channel, ctx.recording_events_stream_id)
            )
        self._closed = False

    # -- agent -------------------------------------------------------------------------------------------------
    def _on_agent_error(self, ex: BaseException, kind: tuple[str, str] | None = None) -> None:
        """Every error the archive reports (any agent thread): counted, and recorded in the mark file's distinct
        error log (as Java's archive error handler does), where `aeron-archive errors` and ArchiveTool read it;
        errors of one `kind` share one entry (its first text), counted."""
        try:
            self.counters.increment_errors()
        except Exception:
            log.exception("failed to count error")
        if self.mark_file is not None:
            try:
                self.mark_file.record_error(ex, kind)
            except Exception:
                log.exception("failed to record error in the mark file")

    def on_protocol_error(self, message: str, kind: str = KIND_MALFORMED, error: BaseException | None = None) -> None:
        """Count a malformed, misdirected or failing control request; log it rate-limited per kind.

        A traceback is attached (to the lines written) only for unexpected exceptions, not for refusals the
        archive raises on purpose.
        """
        self._request_faults.warning(
            kind, "%s", message, exc_info=error if error is not None and not isinstance(error, ArchiveError) else None
        )
        # Counted, and recorded as one distinct error per kind: texts that vary (session ids, lengths) from a
        # client sending rubbish must not fill the mark file's error log, which the archive's own errors need.
        self._on_agent_error(error if error is not None else ArchiveError(message), ("control request", kind))

    def enqueue(self, task: Callable[[], None]) -> None:
        """Run `task` on the conductor thread (image callbacks, recorder/replayer hand-backs)."""
        self._tasks.put(task)

    def _on_recording_done(self, session: Session) -> None:  # recorder thread: hand back, nothing more
        assert isinstance(session, RecordingSession)
        self._tasks.put(lambda: self._close_recording_session(session))

    def _on_replay_done(self, session: Session) -> None:  # replayer thread: hand back, nothing more
        assert isinstance(session, ReplaySession)
        self._tasks.put(lambda: self._close_replay_session(session))

    def is_awaiting(self) -> bool:
        """A replay being set up hands its OK back through the task queue (see `start_replay`): until it has
        been sent, the conductor idles in short sleeps, so the client gets its answer within ~0.1 ms rather
        than after a back-off of up to 1 ms. Read from the conductor thread; `ok_sent` is set by the replayer
        after it enqueues the OK, so a pending task is checked too."""
        if not self._tasks.empty() or self._pending_replays:
            return True
        return any(not replay.ok_sent for replay in self._replays.values())

    def start(self) -> None:
        self.recorder.start()
        self.replayer.start()
        super().start()

    def _run_tasks(self) -> int:
        """Run what other threads handed over (image callbacks, finished recorder/replayer sessions)."""
        work = 0
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                return work
            try:
                task()
            except Exception as ex:
                log.exception("conductor task failed")
                self._on_agent_error(ex)
            work += 1

    def do_work(self, now_ns: int) -> int:
        self._now_ns = now_ns
        if self.mark_file is not None and now_ns >= self._next_mark_file_update_ns:
            # Java's conductor: the activity timestamp every second (MARK_FILE_UPDATE_INTERVAL_MS), from the
            # epoch clock; a start elsewhere takes the directory as held while it is less than 10 s old.
            self._next_mark_file_update_ns = now_ns + MARK_FILE_UPDATE_INTERVAL_MS * 1_000_000
            self.mark_file.update_activity_timestamp(self.ctx.epoch_clock())
        work = self._run_tasks()
        work += self._adapter.poll()
        done_sessions = []
        for session in self._control_sessions.values():
            work += session.do_work(now_ns)
            if session.is_done():
                done_sessions.append(session)
        for session in done_sessions:
            self._close_control_session(session)
        if self._listings:
            for listing in list(self._listings):
                work += self._listing_work(listing, now_ns)
                if listing.is_done():
                    self._listings.remove(listing)
                    owner = self._control_sessions.get(listing.owner_id)
                    if owner is not None and owner.active_listing is listing:
                        owner.active_listing = None
        if self._pending_replays:
            for pending in list(self._pending_replays.values()):
                work += pending.do_work(now_ns)
        if self._abandoned_replays:
            for abandoned in list(self._abandoned_replays):
                work += abandoned.do_work(now_ns)
                if abandoned.is_settled:
                    self._abandoned_replays.remove(abandoned)
        for delete in list(self._deletes):
            work += delete.do_work(now_ns)
        self._replay_tokens.expire(now_ns)
        if self.retention is not None:
            work += self.retention.do_work(now_ns)
        if self._settling:
            self._settling = [settle for settle in self._settling if not settle()]
        if self._replication_sessions:
            for replication in list(self._replication_sessions):
                work += replication.do_work(now_ns)
                if replication.is_done():
                    self._close_replication(replication)
        if now_ns >= self._next_fault_flush_ns:
            self._next_fault_flush_ns = now_ns + DEFAULT_INTERVAL_NS
            self._request_faults.flush()
            self._session_events.flush()
            control_session_fault_log.flush()
        # Nine counter writes: at most once a millisecond while requests keep coming (a burst of small replays
        # made them a twentieth of the conductor's time), and always on the first quiet cycle after work.
        if work:
            self._counters_stale = True
        if self._counters_stale and (not work or now_ns >= self._next_counters_ns):
            self._counters_stale = False
            self._next_counters_ns = now_ns + COUNTERS_PUBLISH_INTERVAL_NS
            self.counters.publish_recorder(self.recorder_totals)
            self.counters.publish_replayer(self.replayer_totals)
            self.counters.max_cycle_time["conductor"].set(self.max_cycle_time_ns)
            self.counters.max_cycle_time["recorder"].set(self.recorder.max_cycle_time_ns)
            self.counters.max_cycle_time["replayer"].set(self.replayer.max_cycle_time_ns)
        return work

    def _listing_work(self, listing: Listing, now_ns: int) -> int:
        """One listing's duty cycle; a listing that raises ends with an error to its client (once), else it
        would raise again every cycle and its client would wait for the rest of the listing forever."""
        try:
            return listing.do_work(now_ns)
        except Exception as ex:
            listing.abort(f"failed: {ex}")
            self.on_protocol_error(f"listing {listing.session_id} failed: {ex}", "listing failed", ex)
            self._send_error(listing.owner_id, listing.session_id, ErrorCode.GENERIC, f"listing failed: {ex}")
            return 1

    # -- control sessions ----------------------------------------------------------------------------------
    def new_control_session(
        self,
        *,
        correlation_id: int,
        response_stream_id: int,
        version: int,
        response_channel: str,
        credentials: bytes,
        client_info: str,
        image_session_id: int,
        image_correlation_id: int = -1,
    ) -> None:
        """A control session for an AuthConnect (or ConnectRequest). A response channel in response mode
        (`control-mode=response`) answers the request's image: its publication gets
        `response-correlation-id=<image correlation id>`, as Java's `newControlSession` gives it."""
        if ChannelUri.parse(response_channel).get("control-mode") == "response":
            if image_correlation_id == -1:
                self.on_protocol_error(
                    f"response-mode connect on {response_channel} from image session {image_session_id}: the image "
                    "is gone, no response publication can answer it",
                    "response-mode connect",
                )
                return
            response_channel = str(
                ChannelUri.parse(response_channel).with_params(response_correlation_id=image_correlation_id)
            )
        control_session_id = self._next_session_id()
        session = ControlSession(
            self,
            control_session_id,
            correlation_id,
            response_stream_id,
            response_channel,
            version,
            credentials,
            client_info,
            image_session_id,
            self.ctx.authenticator,
            self.ctx.connect_timeout_ns,
            self.ctx.session_liveness_check_interval_ns,
            now_ns=self._now_ns,
            epoch_clock=self.ctx.epoch_clock,
        )
        try:
            session.counter = self.counters.add_control_session_counter(
                control_session_id, client_info, image_session_id
            )
        except Exception as ex:  # the counter only describes the session: connect without it rather than fail
            self.on_protocol_error(
                f"control session {control_session_id}: cannot add its counter: {ex}", "control session counter", ex
            )
        self._control_sessions[control_session_id] = session
        self.counters.control_sessions.set(len(self._control_sessions))
        self._session_events.info(
            "control session connect",
            "control session %d: connect from %s (response %s stream %d)",
            control_session_id,
            client_info or "client",
            response_channel,
            response_stream_id,
        )

    def _next_session_id(self) -> int:
        """Control session ids and replication ids come from one sequence, as Java's `nextSessionId`."""
        session_id = self._next_control_session_id
        self._next_control_session_id += 1
        return session_id

    def control_session(self, control_session_id: int) -> ControlSession | None:
        return self._control_sessions.get(control_session_id)

    def add_response_publication(self, channel: str, stream_id: int) -> ExclusivePublication:
        return self.aeron.add_exclusive_publication(channel, stream_id)

    # -- replay tokens (replays over response channels) ------------------------------------------------------
    def replay_token(self, session: ControlClient, request: m.ReplayTokenRequest) -> None:
        """Java's `generateReplayToken`: given for any recording id (a replay of an unknown one is refused when
        it is asked for), answered OK(relevantId = token)."""
        token = self._replay_tokens.generate(session.control_session_id, request.recording_id, self._now_ns)
        session.send_ok(request.correlation_id, token)

    def token_replay_session(self, replay_token: int, recording_id: int) -> ControlSession:
        control_session_id = self._replay_tokens.control_session_id(replay_token, recording_id, self._now_ns)
        session = None if control_session_id is None else self._control_sessions.get(control_session_id)
        if session is None:
            raise ArchiveError(
                self._replay_tokens.describe_refusal(replay_token, recording_id, self._now_ns), ErrorCode.GENERIC
            )
        return session

    def settle_later(self, settle: Callable[[], bool]) -> None:
        """Call `settle` each duty cycle until it answers True (something given up that the driver has yet to
        answer, closed once it has)."""
        if not settle():
            self._settling.append(settle)

    def _close_control_session(self, session: ControlSession) -> None:
        if session.active_listing is not None:
            session.active_listing.abort()
            if session.active_listing in self._listings:
                self._listings.remove(session.active_listing)
        session.close()
        if session.counter is not None:
            session.counter.close()
            session.counter = None
        self._control_sessions.pop(session.control_session_id, None)
        self._replay_tokens.remove_session(session.control_session_id)
        self.counters.control_sessions.set(len(self._control_sessions))
        self._session_events.info(
            "control session closed", "control session %d closed: %s", session.control_session_id, session.abort_reason
        )

    def _signal(
        self,
        control_session_id: int,
        correlation_id: int,
        recording_id: int,
        subscription_id: int,
        position: int,
        signal: RecordingSignal,
    ) -> None:
        session = self._control_sessions.get(control_session_id)
        if session is not None:
            session.send_signal(correlation_id, recording_id, subscription_id, position, signal)

    # -- helpers -------------------------------------------------------------------------------------------
    def _descriptor(self, recording_id: int) -> RecordingDescriptor:
        descriptor = self.catalog.find(recording_id) if self.catalog.has_recording(recording_id) else None
        if descriptor is None:
            raise ArchiveError(f"unknown recording id: {recording_id}", ErrorCode.UNKNOWN_RECORDING)
        return descriptor

    def _check_storage_space(self) -> None:
        free = shutil.disk_usage(self.ctx.archive_dir).free
        if free <= self.ctx.low_storage_space_threshold:
            raise ArchiveError(
                f"insufficient usable storage for new recording: {free} bytes free, threshold "
                f"{self.ctx.low_storage_space_threshold}",
                ErrorCode.STORAGE_SPACE,
            )

    def _active_recording_count(self) -> int:
        return len(self._recordings) + sum(1 for s in self._subscriptions.values() if not s.sessions)

    # -- recording -----------------------------------------------------------------------------------------
    def start_recording(
        self, session: ControlClient, request: m.StartRecordingRequest | m.StartRecordingRequest2
    ) -> None:
        correlation_id = request.correlation_id
        stream_id = request.stream_id
        source_location = request.source_location
        auto_stop = isinstance(request, m.StartRecordingRequest2) and request.auto_stop == 1
        channel = request.channel
        self._add_recording_subscription(
            session.control_session_id, correlation_id, stream_id, source_location, auto_stop, channel, None
        )

    def extend_recording(
        self, session: ControlClient, request: m.ExtendRecordingRequest | m.ExtendRecordingRequest2
    ) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        stream_id = request.stream_id
        source_location = request.source_location
        auto_stop = isinstance(request, m.ExtendRecordingRequest2) and request.auto_stop == 1
        channel = request.channel
        self._check_extend(recording_id, stream_id)
        self._add_recording_subscription(
            session.control_session_id, correlation_id, stream_id, source_location, auto_stop, channel, recording_id
        )

    def _check_extend(self, recording_id: int, stream_id: int) -> None:
        """What an extension of `recording_id` on `stream_id` is refused for before it subscribes (Java's order)."""
        if self._active_recording_count() >= self.ctx.max_concurrent_recordings:
            raise ArchiveError(
                f"max concurrent recordings reached {self.ctx.max_concurrent_recordings}", ErrorCode.MAX_RECORDINGS
            )
        descriptor = self._descriptor(recording_id)
        if stream_id != descriptor.stream_id:
            raise ArchiveError(
                f"cannot extend recording {recording_id} with streamId={stream_id} for existing "
                f"streamId={descriptor.stream_id}",
                ErrorCode.UNKNOWN_RECORDING,
            )
        if recording_id in self._recordings or descriptor.is_active:
            raise ArchiveError(f"cannot extend active recording {recording_id}", ErrorCode.ACTIVE_RECORDING)
        delete = self._delete_sessions.get(recording_id)
        if delete is not None and delete.max_delete_position >= descriptor.stop_position:
            raise ArchiveError(
                f"cannot extend recording {recording_id} due to an outstanding delete operation", ErrorCode.GENERIC
            )

    def _add_recording_subscription(
        self,
        control_session_id: int,
        correlation_id: int,
        stream_id: int,
        source_location: int,
        auto_stop: bool,
        channel: str,
        extend_recording_id: int | None,
    ) -> RecordingSubscription:
        """Subscribe to record (channel, stream_id), answering OK with the subscription id to the control session
        (unsolicited for a replication, whose id is the correlation id: Java's clients ignore it)."""
        if extend_recording_id is None and self._active_recording_count() >= self.ctx.max_concurrent_recordings:
            raise ArchiveError(
                f"max concurrent recordings reached {self.ctx.max_concurrent_recordings}", ErrorCode.MAX_RECORDINGS
            )
        if source_location not in (SourceLocation.LOCAL, SourceLocation.REMOTE):
            raise ArchiveError(f"invalid sourceLocation={source_location}", ErrorCode.GENERIC)
        self._check_storage_space()
        uri = ChannelUri.parse(channel)
        key = recording_subscription_key(channel, stream_id)
        if key in self._subscriptions:
            raise ArchiveError(
                f"recording exists for streamId={stream_id} channel={channel}", ErrorCode.ACTIVE_SUBSCRIPTION
            )
        stripped = strip_channel(channel)
        # Java subscribes with the stripped channel; ours keeps a `sparse` the request gave, so the recorder of a
        # short-lived publication (a sink's commit over UDP) can ask that its image's log be allocated as it fills
        # rather than whole when the image appears (a driver whose logs are not sparse, as `serve`'s, would
        # otherwise allocate three terms per commit). The stored channels are Java's, without it.
        sparse = uri.get("sparse")
        subscribe_stripped = str(ChannelUri.parse(stripped).with_params(sparse=sparse)) if sparse else stripped
        subscribe_channel = (
            spy_channel(subscribe_stripped)
            if (uri.is_udp and source_location == SourceLocation.LOCAL)
            else subscribe_stripped
        )
        holder: dict[str, RecordingSubscription] = {}

        def on_image(image: Image) -> None:  # C client thread: hand over to the conductor
            self.enqueue(lambda: self._on_image_available(holder["entry"], image))

        subscription = self.aeron.add_subscription(subscribe_channel, stream_id, on_available_image=on_image)
        entry = RecordingSubscription(
            subscription,
            key,
            channel,
            stripped,
            stream_id,
            auto_stop,
            control_session_id,
            correlation_id,
            extend_recording_id,
        )
        holder["entry"] = entry
        self._subscriptions[key] = entry
        self._send_ok(control_session_id, correlation_id, subscription.registration_id)
        log.info(
            "%s recording subscription %d: %s stream %d",
            "extend" if extend_recording_id is not None else "start",
            subscription.registration_id,
            subscribe_channel,
            stream_id,
        )
        return entry

    def _on_image_available(self, entry: RecordingSubscription, image: Image) -> None:
        if self._subscriptions.get(entry.key) is not entry or entry.stopping:
            image.close()
            return
        try:
            if entry.extend_recording_id is not None:
                if image.is_end_of_stream:
                    image.close()  # a lingering image of a closed publication cannot extend anything
                    return
                entry.images_seen += 1
                if entry.images_seen > 1:
                    image.close()  # an extend records exactly one image
                    return
                self._start_extend_session(entry, image)
            else:
                entry.images_seen += 1
                self._start_recording_session(entry, image)
        except Exception as ex:  # a refusal, or a failure (disk, counters): the client hears of it either way
            image.close()
            if isinstance(ex, ArchiveError):
                code, message = ex.error_code, ex.message
            else:
                self.on_protocol_error(f"cannot record image of session {image.session_id}: {ex}", "recording", ex)
                code, message = ErrorCode.GENERIC, f"cannot record session {image.session_id}: {ex}"
            session = self._control_sessions.get(entry.control_session_id)
            if session is not None:
                session.send_error(entry.correlation_id, code, message)
            if entry.extend_recording_id is not None and not entry.sessions:
                self._remove_subscription(entry)

    def _new_position_counter(
        self, recording_id: int, image: Image, stream_id: int, stripped: str, position: int
    ) -> Counter:
        counter = self.aeron.add_counter(
            ARCHIVE_RECORDING_POSITION_TYPE_ID,
            recording_pos.encode_key(recording_id, image.session_id, image.source_identity, self.archive_id),
            recording_pos.label(recording_id, image.session_id, stream_id, stripped, self.archive_id),
        )
        counter.set(position)
        return counter

    def _start_recording_session(self, entry: RecordingSubscription, image: Image) -> None:
        if len(self._recordings) >= self.ctx.max_concurrent_recordings:
            raise ArchiveError(
                f"max concurrent recordings reached {self.ctx.max_concurrent_recordings}", ErrorCode.MAX_RECORDINGS
            )
        join = image.join_position
        term_length = image.term_buffer_length
        segment_length = max(self.ctx.segment_file_length, term_length)
        recording_id = self.catalog.add_new_recording(
            start_position=join,
            start_timestamp=self.ctx.epoch_clock(),
            initial_term_id=image.initial_term_id,
            segment_file_length=segment_length,
            term_buffer_length=term_length,
            mtu_length=image.mtu_length,
            session_id=image.session_id,
            stream_id=entry.stream_id,
            stripped_channel=entry.stripped_channel,
            original_channel=entry.channel,
            source_identity=image.source_identity,
        )
        try:
            self._launch_recording(entry, image, recording_id, join, join, segment_length, RecordingSignal.START)
        except BaseException:
            self.catalog.recording_stopped(recording_id, join, self.ctx.epoch_clock())  # empty, never active
            raise

    def _start_extend_session(self, entry: RecordingSubscription, image: Image) -> None:
        recording_id = entry.extend_recording_id
        assert recording_id is not None
        d = self._descriptor(recording_id)
        problems = []
        if image.join_position != d.stop_position:
            problems.append(f"image.joinPosition={image.join_position} != rec.stopPosition={d.stop_position}")
        if image.initial_term_id != d.initial_term_id:
            problems.append(f"image.initialTermId={image.initial_term_id} != rec.initialTermId={d.initial_term_id}")
        if image.term_buffer_length != d.term_buffer_length:
            problems.append(
                f"image.termBufferLength={image.term_buffer_length} != rec.termBufferLength={d.term_buffer_length}"
            )
        if image.mtu_length != d.mtu_length:
            problems.append(f"image.mtuLength={image.mtu_length} != rec.mtuLength={d.mtu_length}")
        if problems:
            raise ArchiveError(
                f"cannot extend recording {recording_id}: " + ", ".join(problems), ErrorCode.INVALID_EXTENSION
            )
        self.catalog.extend_recording(recording_id, entry.control_session_id, entry.correlation_id, image.session_id)
        try:
            self._launch_recording(
                entry,
                image,
                recording_id,
                d.start_position,
                image.join_position,
                d.segment_file_length,
                RecordingSignal.EXTEND,
            )
        except BaseException:
            self.catalog.recording_stopped(recording_id, d.stop_position, d.stop_timestamp)  # as it was
            raise

    def _time_index_writer(self, recording_id: int) -> TimeIndexWriter | None:
        self._index_hints.invalidate()  # a recording or an extension starts: an index file may appear
        interval = self.ctx.time_index_interval_ns
        if interval <= 0:
            return None
        sync = self.ctx.file_sync_level > 0  # as the recorder syncs the data
        return TimeIndexWriter(self.ctx.archive_dir, recording_id, interval, clock=self.ctx.epoch_clock_ns, sync=sync)

    def _launch_recording(
        self,
        entry: RecordingSubscription,
        image: Image,
        recording_id: int,
        start: int,
        join: int,
        segment_length: int,
        signal: RecordingSignal,
    ) -> None:
        term_length = image.term_buffer_length
        counter = self._new_position_counter(recording_id, image, entry.stream_id, entry.stripped_channel, join)
        try:
            writer = RecordingWriter(
                self.ctx.archive_dir,
                recording_id,
                start,
                join,
                term_length,
                segment_length,
                file_sync_level=self.ctx.file_sync_level,
                catalog_file_sync_level=self.ctx.catalog_file_sync_level,
                checksum=self._record_checksum,
                time_index=self._time_index_writer(recording_id),
            )
        except BaseException:
            counter.close()
            raise
        session = RecordingSession(
            correlation_id=entry.correlation_id,
            recording_id=recording_id,
            start_position=start,
            join_position=join,
            stream_id=entry.stream_id,
            original_channel=entry.channel,
            image=image,
            position=counter,
            writer=writer,
            block_length_limit=min(term_length, self.ctx.file_io_max_length),
            events=self._events,
            totals=self.recorder_totals,
            subscription_id=entry.subscription_id,
            control_session_id=entry.control_session_id,
            auto_stop=entry.auto_stop,
            nano_clock=self.ctx.nano_clock,
        )
        entry.sessions[recording_id] = session
        self._recordings[recording_id] = session
        self._recording_entries[recording_id] = entry
        self.counters.recording_sessions.set(len(self._recordings))
        self._signal(entry.control_session_id, entry.correlation_id, recording_id, entry.subscription_id, join, signal)
        self.recorder.add_session(session)
        log.info(
            "recording %d %s at position %d (session %d, %s)",
            recording_id,
            "started" if signal is RecordingSignal.START else "extended",
            join,
            image.session_id,
            image.source_identity,
        )

    def _close_recording_session(self, session: RecordingSession) -> None:
        recording_id = session.recording_id
        position = session.recorded_position
        self.catalog.recording_stopped(recording_id, position, self.ctx.epoch_clock())
        replication = self._replications.get(session.correlation_id)  # an extension's correlation id: its replication
        copying: ReplicationSession | None = None
        if (
            replication is not None
            and replication.subscription is not None
            and (replication.subscription.registration_id == session.subscription_id)
        ):
            replication.on_replica_stopped(position)  # SYNC (or its error), then REPLICATE_END, before STOP
            if replication.is_done():
                self._close_replication(replication)
            else:
                copying = replication  # dating the replica by the source's time index: STOP after REPLICATE_END
        self._recordings.pop(recording_id, None)
        self.counters.recording_sessions.set(len(self._recordings))
        if session.error is not None:
            self._on_agent_error(session.error)
            control = self._control_sessions.get(session.control_session_id)
            if control is not None:
                control.send_error(session.correlation_id, session.error.error_code, session.error.message)
        stop_ids = (session.control_session_id, session.correlation_id, recording_id, session.subscription_id)
        if copying is not None:
            copying.call_after_close(lambda: self._signal(*stop_ids, position, RecordingSignal.STOP))
        else:
            self._signal(*stop_ids, position, RecordingSignal.STOP)
        session.position.close()
        session.close()
        log.info("recording %d stopped at position %d", recording_id, position)
        entry = self._recording_entries.pop(recording_id, None)
        if entry is not None:
            entry.sessions.pop(recording_id, None)
            if not entry.sessions and (entry.auto_stop or entry.stopping or entry.extend_recording_id is not None):
                self._remove_subscription(entry)

    def _remove_subscription(self, entry: RecordingSubscription) -> None:
        if self._subscriptions.get(entry.key) is entry:
            del self._subscriptions[entry.key]
        entry.stopping = True
        if entry.sessions:
            return  # closed once the last recording session has released its image
        entry.subscription.close()

    def _stop_subscription(self, entry: RecordingSubscription) -> None:
        entry.stopping = True
        if self._subscriptions.get(entry.key) is entry:
            del self._subscriptions[entry.key]
        if entry.sessions:
            for session in entry.sessions.values():
                session.abort("recording stopped")
        else:
            entry.subscription.close()

    def stop_recording(self, session: ControlClient, request: m.StopRecordingRequest) -> None:
        correlation_id = request.correlation_id
        stream_id = request.stream_id
        channel = request.channel
        entry = self._subscriptions.get(recording_subscription_key(channel, stream_id))
        if entry is None:
            raise ArchiveError(
                f"no recording found for streamId={stream_id} channel={channel}", ErrorCode.UNKNOWN_SUBSCRIPTION
            )
        self._stop_subscription(entry)
        session.send_ok(correlation_id, 0)

    def stop_recording_subscription(self, session: ControlClient, request: m.StopRecordingSubscriptionRequest) -> None:
        correlation_id = request.correlation_id
        subscription_id = request.subscription_id
        for entry in self._subscriptions.values():
            if entry.subscription_id == subscription_id:
                self._stop_subscription(entry)
                session.send_ok(correlation_id, 0)
                return
        raise ArchiveError(
            f"no recording subscription found for subscriptionId={subscription_id}", ErrorCode.UNKNOWN_SUBSCRIPTION
        )

    def stop_recording_by_identity(self, session: ControlClient, request: m.StopRecordingByIdentityRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        self._descriptor(recording_id)
        recording = self._recordings.get(recording_id)
        if recording is None:
            session.send_ok(correlation_id, 0)
            return
        entry = self._recording_entries.get(recording_id)
        if entry is not None and len(entry.sessions) == 1:
            self._stop_subscription(entry)
        else:
            recording.abort("stopped by identity")
        session.send_ok(correlation_id, 1)

    def list_recording_subscriptions(
        self, session: ControlClient, request: m.ListRecordingSubscriptionsRequest
    ) -> None:
        correlation_id = request.correlation_id
        pseudo_index = request.pseudo_index
        count = request.subscription_count
        apply_stream_id = request.apply_stream_id == 1
        stream_id = request.stream_id
        channel = request.channel
        if session.active_listing is not None:
            raise ArchiveError("active listing already in progress", ErrorCode.ACTIVE_LISTING)
        if pseudo_index < 0 or pseudo_index >= len(self._subscriptions) or count <= 0:
            # Java's answer to an index outside the subscriptions or a count that asks for nothing; without it a
            # count <= 0 got no response at all.
            session.send_response_code(correlation_id, 0, ControlResponseCode.SUBSCRIPTION_UNKNOWN)
            return
        snapshot = [
            SubscriptionDescriptor(e.subscription_id, e.stream_id, e.stripped_channel)
            for e in self._subscriptions.values()
        ]
        listing = ListRecordingSubscriptionsSession(
            session, correlation_id, pseudo_index, count, apply_stream_id, stream_id, channel, snapshot
        )
        listing.do_work(self._now_ns)  # answered at once: the control session queues what back pressure refuses
        self._start_listing(session, listing)

    # -- queries -------------------------------------------------------------------------------------------
    def _start_listing(self, session: ControlClient, listing: Listing) -> None:
        if not listing.is_done():
            session.active_listing = listing
            self._listings.append(listing)

    def list_recordings(self, session: ControlClient, request: m.ListRecordingsRequest) -> None:
        correlation_id = request.correlation_id
        from_id = request.from_recording_id
        count = request.record_count
        if session.active_listing is not None:
            raise ArchiveError("active listing already in progress", ErrorCode.ACTIVE_LISTING)
        self._start_listing(session, ListRecordingsSession(session, self.catalog, correlation_id, from_id, count))

    def list_recordings_for_uri(self, session: ControlClient, request: m.ListRecordingsForUriRequest) -> None:
        correlation_id = request.correlation_id
        from_id = request.from_recording_id
        count = request.record_count
        stream_id = request.stream_id
        channel = request.channel
        if session.active_listing is not None:
            raise ArchiveError("active listing already in progress", ErrorCode.ACTIVE_LISTING)
        self._start_listing(
            session,
            ListRecordingsSession(
                session, self.catalog, correlation_id, from_id, count, uri_filter(self.catalog, channel, stream_id)
            ),
        )

    def list_recording(self, session: ControlClient, request: m.ListRecordingRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        if session.active_listing is not None:
            raise ArchiveError("active listing already in progress", ErrorCode.ACTIVE_LISTING)
        if self.catalog.has_recording(recording_id):
            session.send_descriptor(correlation_id, self.catalog.descriptor_wire_bytes(recording_id), throttle=False)
        else:
            session.send_response_code(correlation_id, recording_id, ControlResponseCode.RECORDING_UNKNOWN)

    def live_position(self, recording_id: int) -> int:
        recording = self._recordings.get(recording_id)
        return recording.position.get() if recording is not None else NULL_POSITION

    def get_recording_position(self, session: ControlClient, request: m.RecordingPositionRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        self._descriptor(recording_id)
        session.send_ok(correlation_id, self.live_position(recording_id))

    def get_stop_position(self, session: ControlClient, request: m.StopPositionRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        session.send_ok(correlation_id, self._descriptor(recording_id).stop_position)

    def get_start_position(self, session: ControlClient, request: m.StartPositionRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        session.send_ok(correlation_id, self._descriptor(recording_id).start_position)

    def get_max_recorded_position(self, session: ControlClient, request: m.MaxRecordedPositionRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        d = self._descriptor(recording_id)
        live = self.live_position(recording_id)
        session.send_ok(correlation_id, live if live != NULL_POSITION else d.stop_position)

    def find_last_matching_recording(self, session: ControlClient, request: m.FindLastMatchingRecordingRequest) -> None:
        correlation_id = request.correlation_id
        min_recording_id = request.min_recording_id
        session_id = request.session_id
        stream_id = request.stream_id
        channel = request.channel
        if min_recording_id < 0:
            raise ArchiveError(f"minRecordingId={min_recording_id} < 0", ErrorCode.GENERIC)
        found = self.catalog.find_last_matching(min_recording_id, channel, stream_id, session_id)
        session.send_ok(correlation_id, found)

    # -- the time index (ours, beyond Aeron: time_index_session) ----------------------------------------------
    def _time_index(self, recording_id: int) -> RecordingTimeIndex:
        """The recording's index as far as it is recorded (live position of an active recording, else stop)."""
        d = self._descriptor(recording_id)
        limit = self.recorded_position(recording_id)
        geometry = RecordingGeometry(recording_id, d.start_position, limit, d.term_buffer_length, d.segment_file_length)
        return RecordingTimeIndex(self.ctx.archive_dir, geometry, self._index_hints)

    def position_at_time(self, session: ControlClient, request: m.PositionAtTimeRequest) -> None:
        index = self._time_index(request.recording_id)
        session.send_ok(request.correlation_id, position_at_time(index, request.timestamp_ns))

    def time_index(self, session: ControlClient, request: m.TimeIndexRequest) -> None:
        if session.active_listing is not None:
            raise ArchiveError("active listing already in progress", ErrorCode.ACTIVE_LISTING)
        index = self._time_index(request.recording_id)
        listing = TimeIndexSession(session, request.correlation_id, index, request.from_position, request.to_position)
        listing.do_work(self._now_ns)  # a short answer goes at once; a long one goes on each duty cycle
        self._start_listing(session, listing)

    def time_indexes(self, session: ControlClient, request: m.TimeIndexesRequest) -> None:
        if session.active_listing is not None:
            raise ArchiveError("active listing already in progress", ErrorCode.ACTIVE_LISTING)
        ranges = time_index_ranges(request.ranges)
        listing = TimeIndexesSession(session, request.correlation_id, ranges, self._time_index)
        listing.do_work(self._now_ns)
        self._start_listing(session, listing)

    # -- retention (RetentionHost) ---------------------------------------------------------------------------
    def retention_recordings(self) -> Iterator[RecordingDescriptor]:
        return self.catalog.descriptors()

    def replay_positions(self, recording_id: int) -> list[int]:
        """Where running replays of the recording are; a replay still being set up pins the recording's start."""
        positions = [r.replay_position for r in self._replays_of(recording_id)]
        if any(p.recording_id == recording_id for p in self._pending_replays.values()):
            d = self.catalog.find(recording_id)
            if d is not None:
                positions.append(d.start_position)
        return positions

    def segment_last_write_ms(self, recording_id: int, base_position: int) -> int | None:
        path = os.path.join(self.ctx.archive_dir, segments.segment_file_name(recording_id, base_position))
        try:
            return int(os.stat(path).st_mtime_ns // 1_000_000)
        except OSError:
            return None

    # -- replay --------------------------------------------------------------------------------------------
    def _replays_of(self, recording_id: int) -> list[ReplaySession]:
        return [r for r in self._replays.values() if r.recording_id == recording_id]

    def _has_replays(self, recording_id: int) -> bool:
        """Replays of the recording running, or waiting for their publication."""
        return bool(self._replays_of(recording_id)) or any(
            p.recording_id == recording_id for p in self._pending_replays.values()
        )

    def _abort_pending_replays(self, recording_id: int | None, reason: str) -> None:
        """Answer replays still waiting for their publication with an error (all of them for None); each keeps
        being polled until the driver answers, so the publication it may yet get is closed."""
        for key, pending in list(self._pending_replays.items()):
            if recording_id is None or pending.recording_id == recording_id:
                self._pending_replays.pop(key, None)
                pending.abort(reason)
                if not pending.is_settled:
                    self._abandoned_replays.append(pending)

    def start_replay(self, session: ControlClient, request: m.ReplayRequest | m.BoundedReplayRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        position = request.position
        length = request.length
        replay_stream_id = request.replay_stream_id
        replay_channel = request.replay_channel
        limit_counter_id = request.limit_counter_id if isinstance(request, m.BoundedReplayRequest) else -1
        file_io_max_length = request.file_io_max_length
        ctx = self.ctx
        if len(self._replays) + len(self._pending_replays) >= ctx.max_concurrent_replays:
            raise ArchiveError(f"max concurrent replays reached {ctx.max_concurrent_replays}", ErrorCode.MAX_REPLAYS)
        d = self._descriptor(recording_id)
        reader = self.aeron.counters_reader
        limit: LimitCounter | None = None
        if limit_counter_id is not None and limit_counter_id >= 0:
            if limit_counter_id > reader.max_counter_id or reader.state(limit_counter_id) != COUNTER_RECORD_ALLOCATED:
                raise ArchiveError(
                    f"limit counter id {limit_counter_id} is not an allocated counter (recordingId={recording_id})",
                    ErrorCode.GENERIC,
                )
            limit = LimitCounter(reader, limit_counter_id)
        elif recording_id in self._recordings:
            limit = LimitCounter(reader, self._recordings[recording_id].position.counter_id)
        replay_position = d.start_position if position == NULL_POSITION else position
        if position != NULL_POSITION:
            if position & (FRAME_ALIGNMENT - 1):
                raise ArchiveError(
                    f"requested replay start position={position} is not a multiple of "
                    f"FRAME_ALIGNMENT (32) for recordingId={recording_id}",
                    ErrorCode.GENERIC,
                )
            if position < d.start_position:
                raise ArchiveError(
                    _replay_before_start(recording_id, position, d.start_position), ErrorCode.INVALID_POSITION
                )
            if d.stop_position != NULL_POSITION and position >= d.stop_position:
                raise ArchiveError(
                    f"requested replay start position={position} must be less than highest "
                    f"recorded position={d.stop_position} for recordingId={recording_id}",
                    ErrorCode.INVALID_POSITION,
                )
        io_length = ctx.file_io_max_length
        if file_io_max_length is not None and file_io_max_length > 0:
            if file_io_max_length < d.mtu_length:
                raise ArchiveError(
                    f"fileIoMaxLength={file_io_max_length} < mtuLength={d.mtu_length} for recordingId={recording_id}",
                    ErrorCode.GENERIC,
                )
            io_length = min(io_length, file_io_max_length)
        if limit is not None:
            limit_position = limit.value()
            if replay_position > limit_position:
                raise ArchiveError(
                    f"requested replay start position={replay_position} must be less than the "
                    f"limit position={limit_position} for recordingId={recording_id}",
                    ErrorCode.INVALID_POSITION,
                )
            stop_position = limit_position
            max_length = (1 << 63) - 1 - replay_position
        else:
            stop_position = d.stop_position
            max_length = stop_position - replay_position
        if length == REPLAY_ALL_AND_FOLLOW or length == (1 << 63) - 1:
            replay_length = max_length
        elif length == REPLAY_ALL_AND_STOP:
            replay_length = stop_position - replay_position
            if replay_length == 0:
                raise ArchiveError(
                    f"empty recording: recordingId={recording_id} has no data from position={replay_position}",
                    ErrorCode.EMPTY_RECORDING,
                )
        else:
            replay_length = min(length, max_length)
        if replay_length < 0:
            raise ArchiveError(
                f"replay length must be positive: length={length} for recordingId={recording_id}", ErrorCode.GENERIC
            )
        delete = self._delete_sessions.get(recording_id)
        if delete is not None and delete.max_delete_position > d.stop_position and stop_position > d.stop_position:
            raise ArchiveError(
                f"cannot start replay of recording {recording_id} due to an outstanding delete operation",
                ErrorCode.GENERIC,
            )
        buffer_length = replay_buffer_length(io_length, replay_length, d.mtu_length)
        pending = self.aeron.async_add_exclusive_publication(
            self._replay_channel(replay_channel, replay_position, d, replay_length), replay_stream_id
        )
        control_session_id = session.control_session_id
        key = self._next_pending_replay
        self._next_pending_replay += 1

        def on_publication(publication: ExclusivePublication) -> None:
            self._pending_replays.pop(key, None)
            start = self.catalog.start_position(recording_id) if self.catalog.has_recording(recording_id) else None
            if start is None or replay_position < start:
                # Segments were detached (or the recording purged) while the publication was being added.
                publication.close()
                message = (
                    f"unknown recording id: {recording_id}"
                    if start is None
                    else _replay_before_start(recording_id, replay_position, start)
                )
                code = ErrorCode.UNKNOWN_RECORDING if start is None else ErrorCode.INVALID_POSITION
                self._send_error(control_session_id, correlation_id, code, message)
                return
            try:
                self._new_replay_session(
                    session,
                    publication,
                    correlation_id,
                    d,
                    replay_position,
                    replay_length,
                    stop_position,
                    limit,
                    buffer_length,
                    replay_channel,
                    replay_stream_id,
                )
            except Exception as ex:  # answered like a request that raised in line (`fail_request`)
                publication.close()
                self.on_protocol_error(f"replay of recording {recording_id} failed to start: {ex}", "replay", ex)
                self._send_error(control_session_id, correlation_id, ErrorCode.GENERIC, f"ReplayRequest failed: {ex}")

        def on_error(message: str) -> None:
            self._pending_replays.pop(key, None)
            self._send_error(control_session_id, correlation_id, ErrorCode.GENERIC, message)

        self._pending_replays[key] = CreateReplayPublicationSession(
            key, correlation_id, recording_id, pending, on_publication, on_error
        )

    def _new_replay_session(
        self,
        session: ControlClient,
        publication: ExclusivePublication,
        correlation_id: int,
        d: RecordingDescriptor,
        replay_position: int,
        replay_length: int,
        stop_position: int,
        limit: LimitCounter | None,
        buffer_length: int,
        replay_channel: str,
        replay_stream_id: int,
    ) -> None:
        """The replay's publication is there (`CreateReplayPublicationSession`): start the replay, confirm it."""
        ctx = self.ctx
        recording_id = d.recording_id
        replay_session_id = (self._replay_id << 32) | (publication.session_id & 0xFFFFFFFF)
        self._replay_id += 1
        into_term = (
            ctx.replay_into_term and self._replay_checksum is None and replay_length > ctx.replay_into_term_min_length
        )
        appender = self._term_appender(publication) if into_term else None
        control_session_id = session.control_session_id
        replay = ReplaySession(
            replay_session_id=replay_session_id,
            correlation_id=correlation_id,
            control_session_id=control_session_id,
            recording_id=recording_id,
            replay_position=replay_position,
            replay_length=replay_length,
            start_position=d.start_position,
            stop_position=stop_position,
            limit_counter=limit,
            publication=publication,
            reader=RecordingReader(
                ctx.archive_dir,
                recording_id,
                d.start_position,
                d.term_buffer_length,
                d.segment_file_length,
                d.initial_term_id,
                d.stream_id,
            ),
            buffer=bytearray(buffer_length),
            term_length=d.term_buffer_length,
            stream_id=d.stream_id,
            checksum=self._replay_checksum,
            connect_timeout_ns=ctx.connect_timeout_ns,
            totals=self.replayer_totals,
            now_ns=self._now_ns,
            nano_clock=ctx.nano_clock,
            send_ok=lambda corr, rid: self.enqueue(lambda: self._send_ok(control_session_id, corr, rid)),
            send_error=lambda corr, code, message: self._send_error(control_session_id, corr, code, message),
            appender=appender,
            appender_factory=lambda: self._term_appender(publication),
        )
        self._replays[replay_session_id] = replay
        self.counters.replay_sessions.set(len(self._replays))
        replay.confirm_at_once(session.send_ok)
        self.replayer.add_session(replay)
        # DEBUG, not INFO: a Spark read of many small recordings asks for a replay each, hundreds a second, and
        # two INFO lines per replay were about a third of the conductor's busy time under `serve` (Java's archive
        # logs no replay at all). Recordings, far fewer, are logged at INFO.
        log.debug(
            "replay %d of recording %d from %d length %d on %s stream %d",
            replay_session_id,
            recording_id,
            replay_position,
            replay_length,
            replay_channel,
            replay_stream_id,
        )

    def _term_appender(self, publication: ExclusivePublication) -> TermAppender | None:
        """The replay publication's own log mapping (one copy per replayed byte), or None to use `offer_block`.

        Mapping can only fail if the log buffer is not where this process can open it (a driver directory it
        cannot write); the replay then goes through the C client, and the reason is logged.
        """
        try:
            return TermAppender(publication, self.aeron.aeron_dir)
        except NativeAeronError as ex:
            self._request_faults.warning("term-appender", "replays copy through offer_block: %s", ex)
            return None

    def _replay_channel(self, replay_channel: str, position: int, d: RecordingDescriptor, length: int) -> str:
        """The replay publication's channel: the recording's initial position, term length and MTU, as Java's; a
        larger MTU where the replay channel asks for one (`channel.replay_mtu_length`, our extension).

        `sparse`: a replay that will fill its whole log buffer (three terms) gets a non-sparse one, which is what a
        replay through Java's archive gets from its media driver's default (the C driver's default is sparse). The
        driver then allocates the log's pages when it adds the publication, where a full memory filesystem fails
        the add with an error instead of killing the archive with SIGBUS on the first write into a hole mid-replay,
        and the replay's stream no longer pays the first touch of every page. It costs no more pages than the
        replay would touch anyway. Shorter replays (a small range, a catalog look) ask for a sparse log, whatever
        the driver's default: allocating three whole terms up front for them would cost more than the replay. A
        `sparse` given in the replay channel is used as given.
        """
        requested = ChannelUri.parse(replay_channel)
        uri = ChannelUri.parse(strip_channel(replay_channel))
        params: dict[str, object] = {
            k.replace("-", "_"): v
            for k, v in initial_position_params(position, d.initial_term_id, d.term_buffer_length).items()
        }
        try:
            params["mtu"] = replay_mtu_length(replay_channel, d.mtu_length, d.term_buffer_length)
        except ChannelError as ex:
            raise ArchiveError(f"{ex} for recordingId={d.recording_id}", ErrorCode.GENERIC) from None
        params["linger"] = requested.get("linger") or f"{self.ctx.replay_linger_timeout_ns}ns"
        for key in ("eos", "sparse"):
            if requested.get(key) is not None:
                params[key] = requested.get(key)
        if "sparse" not in params:  # whatever the media driver's default
            params["sparse"] = length < PARTITION_COUNT * d.term_buffer_length
        return str(uri.with_params(**params))

    def _send_ok(self, control_session_id: int, correlation_id: int, relevant_id: int) -> None:
        session = self._control_sessions.get(control_session_id)
        if session is not None:
            session.send_ok(correlation_id, relevant_id)

    def _send_error(self, control_session_id: int, correlation_id: int, error_code: int, message: str) -> None:
        session = self._control_sessions.get(control_session_id)
        if session is not None:
            session.send_error(correlation_id, error_code, message)

    def _close_replay_session(self, replay: ReplaySession) -> None:
        self._replays.pop(replay.replay_session_id, None)
        self.counters.replay_sessions.set(len(self._replays))
        replay.close()
        if replay.error is not None:
            self._on_agent_error(replay.error)
            replay.send_pending_error()
        log.debug(
            "replay %d of recording %d done at position %d",
            replay.replay_session_id,
            replay.recording_id,
            replay.replay_position,
        )

    def stop_replay(self, session: ControlClient, request: m.StopReplayRequest) -> None:
        correlation_id = request.correlation_id
        replay_session_id = request.replay_session_id
        replay = self._replays.get(replay_session_id)
        if replay is not None:
            replay.abort("stopped by client")
        session.send_ok(correlation_id, 0)  # Aeron answers OK even for unknown replay ids

    def stop_all_replays(self, session: ControlClient, request: m.StopAllReplaysRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        for replay in self._replays.values():
            if recording_id == NULL_POSITION or replay.recording_id == recording_id:
                replay.abort("stop all replays")
        self._abort_pending_replays(None if recording_id == NULL_POSITION else recording_id, "stop all replays")
        session.send_ok(correlation_id, 0)

    # -- truncate / purge ----------------------------------------------------------------------------------
    def truncate_recording(self, session: ControlClient, request: m.TruncateRecordingRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        position = request.position
        d = self._descriptor(recording_id)
        if recording_id in self._recordings or d.is_active:
            raise ArchiveError(f"cannot truncate active recording {recording_id}", ErrorCode.ACTIVE_RECORDING)
        if position < d.start_position or position > d.stop_position or position & (FRAME_ALIGNMENT - 1):
            raise ArchiveError(
                f"invalid position {position} for truncate of recording {recording_id}: must be a "
                f"multiple of 32 in [{d.start_position}, {d.stop_position}]",
                ErrorCode.INVALID_POSITION,
            )
        self._check_delete_allowed(recording_id)
        to_delete = segments.truncate_segment_files(self.ctx.archive_dir, d, position)
        self.catalog.update_stop_position(recording_id, position)
        for replay in self._replays_of(recording_id):
            replay.abort("recording truncated")
        self._abort_pending_replays(recording_id, "recording truncated")
        self._queue_deletion(session, correlation_id, recording_id, to_delete, await_replays_stop=True)

    def purge_recording(self, session: ControlClient, request: m.PurgeRecordingRequest) -> None:
        correlation_id = request.correlation_id
        recording_id = request.recording_id
        d = self._descriptor(recording_id)
        if recording_id in self._recordings or d.is_active:
            raise ArchiveError(f"cannot purge active recording {recording_id}", ErrorCode.ACTIVE_RECORDING)
        if self._has_replays(recording_id):
            raise ArchiveError(f"cannot purge recording with active replay {recording_id}", ErrorCode.ACTIVE_RECORDING)
        self._check_delete_allowed(recording_id)
        self.catalog.change_state(recording_id, RecordingState.DELETED)
        files = segments.recording_file_names(self.ctx.archive_dir, recording_id)
        self._queue_deletion(session, correlation_id, recording_id, files)

    def _check_delete_allowed(self, recording_id: int) -> None:
        """Java's `isDeleteAllowed`: one deletion at a time per recording."""
        if recording_id in self._delete_sessions:
            raise ArchiveError(f"another delete operation in progress for recording id: {recording_id}")

    def _queue_deletion(
        self,
        session: ControlClient,
        correlation_id: int,
        recording_id: int,
        files: list[str],
        *,
        await_replays_stop: bool = False,
    ) -> None:
        """Answer OK(number of files) and delete them off this path (Java's `deleteSegments`): DELETE is signalled
        once the last is gone, or at once when there are none."""
        session.send_ok(correlation_id, len(files))
        if not self._add_deletion(session.control_session_id, correlation_id, recording_id, files, await_replays_stop):
            session.send_signal(correlation_id, recording_id, -1, -1, RecordingSignal.DELETE)

    def _add_deletion(
        self,
        control_session_id: int,
        correlation_id: int,
        recording_id: int,
        files: list[str] | tuple[str, ...],
        await_replays_stop: bool,
    ) -> int:
        """Start a `DeleteSegmentsSession` for `files` (none for no files); returns how many it deletes (Java's
        `addDeleteSegmentsSession`). It signals DELETE to the requester's control session (if any) when done."""
        if not files:
            return 0

        def on_done(done: DeleteSegmentsSession) -> None:
            if self._delete_sessions.get(recording_id) is done:
                del self._delete_sessions[recording_id]
            if done in self._deletes:
                self._deletes.remove(done)
            self._signal(control_session_id, correlation_id, recording_id, -1, -1, RecordingSignal.DELETE)

        delete = DeleteSegmentsSession(
            self.ctx.archive_dir,
            recording_id,
            list(files),
            lambda: self._has_replays(recording_id),
            on_done,
            await_replays_stop=await_replays_stop,
            on_error=lambda message: self._on_delete_error(control_session_id, correlation_id, message),
        )
        self._delete_sessions[recording_id] = delete
        self._deletes.append(delete)
        return len(files)

    def _on_delete_error(self, control_session_id: int, correlation_id: int, message: str) -> None:
        """A segment file that could not be deleted: counted, and the request answered with an error naming it."""
        self._on_agent_error(ArchiveError(message))
        self._send_error(control_session_id, correlation_id, ErrorCode.GENERIC, message)

    # -- segment management (Java's detach/delete detached/purge/attach/migrate segments) ----------------------
    def detach_segments(self, session: ControlClient, request: m.DetachSegmentsRequest) -> None:
        """Move the recording's start up to a segment boundary; the files before it stay (OK, no signal)."""
        recording_id, position = request.recording_id, request.new_start_position
        self._check_detach(self._descriptor(recording_id), position)
        self.catalog.update_start_position(recording_id, position)
        session.send_ok(request.correlation_id, 0)

    def delete_detached_segments(self, session: ControlClient, request: m.DeleteDetachedSegmentsRequest) -> None:
        """Delete the files before the recording's start: OK(count), DELETE once they are gone."""
        recording_id = request.recording_id
        d = self._descriptor(recording_id)
        self._check_delete_allowed(recording_id)
        lowest = segments.lowest_segment_file_position(self.ctx.archive_dir, recording_id)
        files = (
            []
            if lowest is None
            else segments.detached_segment_files(
                recording_id, lowest, d.start_position, d.term_buffer_length, d.segment_file_length
            )
        )
        self._queue_deletion(session, request.correlation_id, recording_id, files)

    def purge_segments(self, session: ControlClient, request: m.PurgeSegmentsRequest) -> None:
        """Detach up to the new start and delete what was detached: OK(count), DELETE once the files are gone."""
        count = self.purge_segments_to(
            request.recording_id, request.new_start_position, session.control_session_id, request.correlation_id
        )
        session.send_ok(request.correlation_id, count)

    def purge_segments_to(
        self, recording_id: int, new_start_position: int, control_session_id: int = -1, correlation_id: int = -1
    ) -> int:
        """The work of PurgeSegments, for the request and for the archive's own use (conductor thread): checks as
        Java (raising `ArchiveError` with its texts), moves the start, deletes the segment files before it off this
        path and returns how many; DELETE goes to `control_session_id` once they are gone (none for -1). A valid
        purge always has a file to delete, so the DELETE of an empty deletion is never owed."""
        d = self._descriptor(recording_id)
        self._check_detach(d, new_start_position)
        self._check_delete_allowed(recording_id)
        self.catalog.update_start_position(recording_id, new_start_position)
        files = segments.detached_segment_files(
            recording_id, d.start_position, new_start_position, d.term_buffer_length, d.segment_file_length
        )
        return self._add_deletion(control_session_id, correlation_id, recording_id, files, False)

    def _check_detach(self, d: RecordingDescriptor, position: int) -> None:
        """Java's `isValidDetach`: a segment boundary past the first segment, not past the segment being recorded
        (or the last one), nor past the segment a running replay of the recording reads."""
        recording_id = d.recording_id
        start, term_length, segment_length = d.start_position, d.term_buffer_length, d.segment_file_length
        lower_bound = segments.segment_file_base_position(start, start, term_length, segment_length) + segment_length
        if position != segments.segment_file_base_position(start, position, term_length, segment_length):
            raise ArchiveError(f"invalid segment start: newStartPosition={position}")
        if position < lower_bound:
            raise ArchiveError(f"invalid detach: newStartPosition={position} lowerBound={lower_bound}")
        end = self.recorded_position(recording_id)
        upper_bound = segments.segment_file_base_position(start, end, term_length, segment_length)
        if position > upper_bound:
            raise ArchiveError(f"invalid detach: in use, newStartPosition={position} upperBound={upper_bound}")
        blocking = None
        blocking_base = 0
        for replay in self._replays_of(recording_id):
            base = segments.segment_file_base_position(start, replay.replay_position, term_length, segment_length)
            if position > base and (blocking is None or base < blocking_base):
                blocking, blocking_base = replay, base
        if blocking is not None:
            raise ArchiveError(
                f"invalid detach: replay in progress -  state={blocking.state.name} newStartPosition={position} "
                f"upperBound={blocking_base} sessionId={to_int32(blocking.replay_session_id)} "
                f"streamId={blocking.publication.stream_id} channel={blocking.publication.channel}"
            )

    def attach_segments(self, session: ControlClient, request: m.AttachSegmentsRequest) -> None:
        """Take back the detached segment files that join the recording's start, moving the start down with each
        (Java's `attachSegments`): OK(count). A file that does not fit fails the request; what was attached
        before it stays attached."""
        recording_id = request.recording_id
        d = self._descriptor(recording_id)
        count = 0
        self._index_hints.invalidate()  # attached segments bring their index files back below the start
        for segment in segments.find_attachable_segments(self.ctx.archive_dir, d):
            self.catalog.update_start_position(recording_id, segment.base_position + segment.term_offset)
            count += 1
        session.send_ok(request.correlation_id, count)

    def migrate_segments(self, session: ControlClient, request: m.MigrateSegmentsRequest) -> None:
        """Move a stopped recording's segments onto the start or the end of another it joins on a segment boundary
        (Java's `migrateSegments`): OK(count moved); the source is left empty at its start, and DELETE is signalled
        for it."""
        src = self._descriptor(request.src_recording_id)
        dst = self._descriptor(request.dst_recording_id)
        self._index_hints.invalidate()  # the moved segments' index files come with them
        if src.stop_position == NULL_POSITION:
            raise ArchiveError(f"recording {src.recording_id} is still active")
        for name, src_value, dst_value in (
            ("SegmentFileLength", src.segment_file_length, dst.segment_file_length),
            ("TermBufferLength", src.term_buffer_length, dst.term_buffer_length),
            ("InitialTermId", src.initial_term_id, dst.initial_term_id),
            ("StreamId", src.stream_id, dst.stream_id),
            ("MtuLength", src.mtu_length, dst.mtu_length),
        ):
            if src_value != dst_value:
                raise ArchiveError(f"invalid migrate: src{name}={src_value} dst{name}={dst_value}")
        prepend = src.stop_position == dst.start_position
        if not prepend and src.start_position != dst.stop_position:
            raise ArchiveError(
                "invalid migrate: src and dst are not contiguous"
                f" srcStartPosition={src.start_position} srcStopPosition={src.stop_position}"
                f" dstStartPosition={dst.start_position} dstStopPosition={dst.stop_position}"
            )
        join = src.stop_position if prepend else src.start_position
        for label, d in (("src", src), ("dst", dst)):
            if join != segments.segment_file_base_position(
                d.start_position, join, d.term_buffer_length, d.segment_file_length
            ):
                raise ArchiveError(
                    f"invalid migrate: join position is not on segment boundary of {label} recording"
                    f" seamPosition={join} startPosition={d.start_position} stopPosition={d.stop_position}"
                    f" termBufferLength={d.term_buffer_length} segmentFileLength={d.segment_file_length}"
                )
        plan = segments.plan_segment_migration(self.ctx.archive_dir, src, dst.recording_id)
        moved = segments.move_segment_files(self.ctx.archive_dir, plan.moves)
        to_delete = self._add_deletion(
            session.control_session_id, request.correlation_id, src.recording_id, plan.empty_following, False
        )
        if prepend:
            self.catalog.update_start_position(dst.recording_id, src.start_position)
        else:
            self.catalog.update_stop_position(dst.recording_id, src.stop_position)
        self.catalog.update_stop_position(src.recording_id, src.start_position)
        session.send_ok(request.correlation_id, moved)
        if moved > 0 and to_delete == 0:
            session.send_signal(request.correlation_id, src.recording_id, -1, -1, RecordingSignal.DELETE)

    # -- close ---------------------------------------------------------------------------------------------
    # -- replication -----------------------------------------------------------------------------------------
    def replicate(
        self, session: ControlClient, msg: m.ReplicateRequest | m.TaggedReplicateRequest | m.ReplicateRequest2
    ) -> None:
        """Start replicating a recording of another archive into this one (Java's `ArchiveConductor.replicate`):
        the request is checked here, in Java's order; everything else fails later, as an error whose correlation
        id is the replication id, followed by REPLICATE_END."""
        request = ReplicationRequest.of(msg)
        channel = request.replication_channel or self.ctx.replication_channel
        response_mode = ChannelUri.parse(channel).get("control-mode") == "response"
        if response_mode and request.live_destination:
            raise ArchiveError("response channels can't be used with live destinations", ErrorCode.GENERIC)
        if response_mode and (request.channel_tag_id != -1 or request.subscription_tag_id != -1):
            raise ArchiveError("response channels can't be used with tagged replication", ErrorCode.GENERIC)
        dst = None
        if request.dst_recording_id != -1:
            dst = self.catalog.find(request.dst_recording_id)
            if dst is None:
                raise ArchiveError(
                    f"unknown destination recording id {request.dst_recording_id}", ErrorCode.UNKNOWN_RECORDING
                )
            if dst.stop_position == NULL_POSITION or request.dst_recording_id in self._recordings:
                raise ArchiveError(
                    f"cannot replicate to active recording {request.dst_recording_id}", ErrorCode.ACTIVE_RECORDING
                )
        replication_id = self._next_session_id()
        replication = ReplicationSession(
            replication_id=replication_id,
            control_session_id=session.control_session_id,
            request=request,
            replication_channel=channel,
            dst_descriptor=dst,
            host=self,
            connect=lambda: self._connect_to_source(replication_id, request),
            wrap=AeronArchive.of,
            action_timeout_ns=self.ctx.replication_timeout_ns,
            now_ns=self._now_ns,
        )
        self._replications[replication_id] = replication
        self._replication_sessions.append(replication)
        session.send_ok(request.correlation_id, replication_id)
        log.info(
            "replication %d: recording %d of the archive at %s stream %d into %s",
            replication_id,
            request.src_recording_id,
            request.src_control_channel,
            request.src_control_stream_id,
            "a new recording" if dst is None else f"recording {dst.recording_id}",
        )

    def _connect_to_source(self, replication_id: int, request: ReplicationRequest) -> AsyncConnect:
        """Java's archive client context for a replication: the request's control channel and credentials, its
        response channel if given, else this archive's; a client name naming the replication."""

        def refuse_challenge(_challenge: bytes) -> bytes:
            raise ArchiveError(
                "Replication does not support challenge/response authentication", ErrorCode.AUTHENTICATION_REJECTED
            )

        response_channel = request.src_response_channel or self._source_response_channel(request.src_control_channel)
        return AsyncConnect(
            self.aeron,
            request.src_control_channel,
            request.src_control_stream_id,
            response_channel,
            self.ctx.replication_response_stream_id,
            message_timeout_ns=self.ctx.replication_timeout_ns,
            client_name=f"{self.ctx.client_name} replicationSessionId={replication_id}",
            credentials=request.encoded_credentials,
            on_challenge=refuse_challenge,
            nano_clock=self.ctx.nano_clock,
        )

    def _source_response_channel(self, src_control_channel: str) -> str:
        """Where a source archive answers a replication's control session: over IPC to an IPC control channel;
        else on a port of its own at this archive's control host (Java's default), or localhost without one."""
        if self.ctx.replication_response_channel:
            return self.ctx.replication_response_channel
        if ChannelUri.parse(src_control_channel).is_ipc:
            return "aeron:ipc"
        host = udp_endpoint_host(self.ctx.control_channel) if self.ctx.control_channel else None
        return f"aeron:udp?endpoint={host or 'localhost'}:0"

    def stop_replication(self, session: ControlClient, request: m.StopReplicationRequest) -> None:
        replication = self._replications.pop(request.replication_id, None)
        if replication is None:
            raise ArchiveError(f"unknown replication id {request.replication_id}", ErrorCode.UNKNOWN_REPLICATION)
        replication.abort("stop replication")
        session.send_ok(request.correlation_id, 0)

    def _close_replication(self, replication: ReplicationSession) -> None:
        if replication in self._replication_sessions:
            self._replication_sessions.remove(replication)
        self._replications.pop(replication.replication_id, None)
        try:
            replication.close()
        except Exception as ex:
            self.on_protocol_error(f"replication {replication.replication_id}: close failed: {ex}", "replication", ex)

    # The replication's host (`replication_session.ReplicationHost`):
    def new_replica(self, descriptor: RecordingDescriptor) -> int:
        return self.catalog.add_new_recording(**_replica_fields(descriptor))

    def replace_replica(self, recording_id: int, descriptor: RecordingDescriptor) -> None:
        self.catalog.replace_recording(recording_id, **_replica_fields(descriptor))

    def stop_position(self, recording_id: int) -> int:
        return self.catalog.stop_position(recording_id)

    def recorded_position(self, recording_id: int) -> int:
        """What a recording holds: its live position while recorded, else its stop position."""
        live = self.live_position(recording_id)
        return live if live != NULL_POSITION else self.catalog.stop_position(recording_id)

    def extend_replica(
        self, replication_id: int, control_session_id: int, recording_id: int, stream_id: int, channel: str
    ) -> ReplicaSubscription:
        self._check_extend(recording_id, stream_id)
        entry = self._add_recording_subscription(
            control_session_id, replication_id, stream_id, SourceLocation.REMOTE, True, channel, recording_id
        )
        return entry.subscription

    def stop_replica_subscription(self, subscription_id: int) -> None:
        for entry in list(self._subscriptions.values()):
            if entry.subscription_id == subscription_id:
                self._stop_subscription(entry)
                return

    def signal(
        self,
        control_session_id: int,
        correlation_id: int,
        recording_id: int,
        subscription_id: int,
        position: int,
        signal: RecordingSignal,
    ) -> None:
        self._signal(control_session_id, correlation_id, recording_id, subscription_id, position, signal)

    def send_error(self, control_session_id: int, correlation_id: int, error_code: int, message: str) -> None:
        self._send_error(control_session_id, correlation_id, error_code, message)

    def on_replication_error(self, message: str, error: BaseException) -> None:
        self.on_protocol_error(message, "replication failed", error)

    def keeps_time_index(self) -> bool:
        return self.ctx.time_index_interval_ns > 0

    def time_index_copy(self, recording_id: int, from_position: int, to_position: int) -> TimeIndexCopy:
        """The copy runs on this thread a file per duty cycle, between recording starts, truncations and purges,
        which also run here: its limits are read again before each file is begun and renamed, so a file the
        recorder may append to (an extension started meanwhile) is never replaced. Files are synced as the
        recorder's are: only with `file_sync_level` > 0 (a kill -9 leaves whole files either way)."""
        self._index_hints.invalidate()  # the copy writes index files wherever the source has them
        d = self._descriptor(recording_id)
        geometry = RecordingGeometry(
            recording_id,
            d.start_position,
            self.recorded_position(recording_id),
            d.term_buffer_length,
            d.segment_file_length,
        )
        return TimeIndexCopy(
            self.ctx.archive_dir,
            geometry,
            from_position,
            to_position,
            lambda: self._time_index_limits(recording_id),
            sync=self.ctx.file_sync_level > 0,  # as the recorder syncs its segments (Aeron's fileSyncLevel)
        )

    def _time_index_limits(self, recording_id: int) -> tuple[int, int]:
        """A recording's start, and where a recorder may append to its time index: the base of the segment it
        writes while recorded, else its stop."""
        d = self._descriptor(recording_id)
        live = self.live_position(recording_id)
        if live == NULL_POSITION:
            return d.start_position, d.stop_position
        base = segments.segment_file_base_position(d.start_position, live, d.term_buffer_length, d.segment_file_length)
        return d.start_position, base

    def on_close(self) -> None:
        """Runs on the conductor thread after its loop: stop recordings, close sessions, sync the catalog."""
        self.recorder.close()
        self.replayer.close()
        self._abort_pending_replays(None, "the archive is closing")
        for abandoned in self._abandoned_replays:
            abandoned.close()
        self._abandoned_replays.clear()
        self._run_tasks()  # recorder/replayer hand-backs (catalog stop positions) queued while they shut down
        for delete in list(self._deletes):
            while not delete.is_done():
                delete.do_work(self.ctx.nano_clock())
        for replication in list(self._replication_sessions):
            replication.abort("the archive is closing")
            self._close_replication(replication)
        self._run_tasks()  # the replicas' recordings stopping
        for session in list(self._control_sessions.values()):
            session.close()
            if session.counter is not None:
                session.counter.close()
        self._control_sessions.clear()
        for entry in list(self._subscriptions.values()):
            entry.subscription.close()
        self._subscriptions.clear()
        for subscription in self._control_subscriptions:
            subscription.close()
        if self._events is not None:
            self._events.close()
        self.counters.close()


def _replay_before_start(recording_id: int, position: int, start_position: int) -> str:
    """Java's `ArchiveException.buildReplayBeforeStartErrorMsg`."""
    return (
        f"requested replay start position={position} is less than recording start position={start_position} "
        f"for recording {recording_id}"
    )


class _ReplicaFields(TypedDict):
    start_position: int
    stop_position: int
    start_timestamp: int
    stop_timestamp: int
    initial_term_id: int
    segment_file_length: int
    term_buffer_length: int
    mtu_length: int
    session_id: int
    stream_id: int
    stripped_channel: str
    original_channel: str
    source_identity: str


def _replica_fields(d: RecordingDescriptor) -> _ReplicaFields:
    """A replica's descriptor before it records: every field the source's (its segment file length included, as
    Java's), stopped at the source's start."""
    return {
        "start_position": d.start_position,
        "stop_position": d.start_position,
        "start_timestamp": d.start_timestamp,
        "stop_timestamp": d.start_timestamp,
        "initial_term_id": d.initial_term_id,
        "segment_file_length": d.segment_file_length,
        "term_buffer_length": d.term_buffer_length,
        "mtu_length": d.mtu_length,
        "session_id": d.session_id,
        "stream_id": d.stream_id,
        "stripped_channel": d.stripped_channel,
        "original_channel": d.original_channel,
        "source_identity": d.source_identity,
    }
