"""The archive requests a sink commit makes, each waiting for its recording signal with the publish timeout.

Shared by the commit (`committer`: the target recording) and the sink's state log (`log_lock`: a recording of
its own), which open, extend, confirm, await and stop recordings the same way. Connections are not this module's
business: a commit leases its control session from the process's connection pool.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from aeron_archive_spark.archive.channel import ChannelUri, add_session_id
from aeron_archive_spark.archive.client.aeron_archive import (
    AeronArchive,
    RecordingSignalEvent,
)
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.host import requires_host_driver
from aeron_archive_spark.archive.client.pool import (
    ArchiveConnectError,
    ArchiveLease,
    NoMediaDriverError,
    connection_pool,
)
from aeron_archive_spark.archive.constants import (
    NULL_COUNTER_ID,
    NULL_POSITION,
    RecordingSignal,
    SourceLocation,
)
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.native import ExclusivePublication
from aeron_archive_spark.archive.recording_pos import (
    find_counter_id_by_recording,
    is_active,
)
from aeron_archive_spark.connector.sink import faults
from aeron_archive_spark.connector.sink.errors import InjectedFault, SinkError
from aeron_archive_spark.connector.sink.options import SinkOptions

log = logging.getLogger(__name__)

# Parameters that pin a publication to one session or start position; an extend channel sets its own.
SESSION_PARAMS = ("session_id", "init_term_id", "term_id", "term_offset")


# The top of Aeron's default `publication-reserved-session-id-low/high` range [-1, 1000]. Drawn ids lie above
# it, in 2^31 values, so that concurrent sinks on one media driver practically never draw the same one; a drawn id
# that clashes with a publication already on the same channel and stream makes adding the publication fail with
# the driver's "clashing sessionId" error, and the commit fails naming it (committing the batch again goes on).
RESERVED_SESSION_ID_HIGH = 1000


def own_session_id() -> int:
    """A random session id for a publication the archive is asked to record before the publication exists.

    Asking first and adding the publication second is Aeron's own order for an extend: over UDP the
    publication's first setup frame then finds the archive's subscription and the image links at once.
    """
    return RESERVED_SESSION_ID_HIGH + 1 + secrets.randbelow((1 << 31) - 1 - RESERVED_SESSION_ID_HIGH)


def _given_session_id(channel: str) -> int | None:
    value = ChannelUri.parse(channel).get("session-id")
    return int(value) if value is not None else None


# -- the archive session ---------------------------------------------------------------------------------------


def sparse_unless_given(channel: str) -> str:
    """A commit's channel with sparse log buffers unless the channel says otherwise.

    A batch is often far smaller than its publication's three terms (64 MiB each on IPC by default). On a media
    driver whose log buffers are not sparse by default (Java's, or the archive's own embedded one) every commit
    would otherwise have its whole log allocated and touched when its publication is added, and, over UDP, the
    archive's image of it too: the channel the archive is asked to record carries it (our archive subscribes with
    it; Java's strips it, and its driver's default decides the image).
    """
    uri = ChannelUri.parse(channel)
    return channel if uri.get("sparse") is not None else str(uri.with_params(sparse=True))


class SignalLog:
    """Recording signals received during a commit's lease, so a waiter can look for the one it caused."""

    def __init__(self) -> None:
        self.events: list[RecordingSignalEvent] = []

    def __call__(self, event: RecordingSignalEvent) -> None:
        self.events.append(event)
        if len(self.events) > 4096:
            del self.events[:2048]

    def clear(self) -> None:
        """Forget earlier signals before issuing the request whose signal will be awaited."""
        self.events.clear()


def lease_archive(
    connection: ConnectionOptions, signals: SignalLog, local_source: bool
) -> tuple[ArchiveLease, AeronArchive]:
    """A pooled control session, with `signals` receiving its recording signals.

    On the host's media driver when the archive must share it (an IPC control channel, or `sourceLocation=local`:
    the archive spies the sink's publication), else on the host's driver if one runs or an embedded one (a
    driver host on a cluster runs no media driver of its own).
    """
    lease = connection_pool().archive(
        connection,
        purpose="sink",
        host_driver_only=local_source or requires_host_driver(connection),
        recording_signal_consumer=signals,
        keep_on=(InjectedFault,),
    )
    try:
        return lease, lease.acquire()
    except NoMediaDriverError as ex:
        raise SinkError(
            f"{ex}: start one there or set option aeronDir (or $AERON_DIR) to the directory of the "
            "archive's media driver"
        ) from ex
    except ArchiveConnectError as ex:
        raise SinkError(str(ex)) from ex


# -- one archive conversation -----------------------------------------------------------------------------------


@dataclass
class OpenRecording:
    """A publication the archive is recording (new or extended recording), positioned at `start_position`."""

    publication: ExclusivePublication
    subscription_id: int
    recording_id: int
    start_position: int
    channel: str
    confirmed: bool  # the archive's START/EXTEND signal for this subscription has been seen

    @property
    def session_id(self) -> int:
        return self.publication.session_id


class ArchiveOps:
    """The archive requests a commit needs, each waiting for its signal with the publish timeout."""

    def __init__(self, archive: AeronArchive, signals: SignalLog, options: SinkOptions) -> None:
        self.archive = archive
        self.signals = signals
        self.options = options
        self.timeout_s = options.publish_timeout_s
        self.source_location = SourceLocation.REMOTE if options.source_location == "remote" else SourceLocation.LOCAL

    def _await_signal(self, what: str, match: Callable[[RecordingSignalEvent], bool]) -> RecordingSignalEvent:
        deadline = time.monotonic() + self.timeout_s
        while True:
            found = next((e for e in self.signals.events if match(e)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise SinkError(
                    f"no {what} signal from the archive within {self.timeout_s:.1f}s "
                    f"({self.options.connection.describe()})"
                )
            if self.archive.poll_for_recording_signals() == 0:
                time.sleep(0.0002)

    def descriptor(self, recording_id: int, origin: str) -> RecordingDescriptor:
        descriptor = self.archive.list_recording(recording_id)
        if descriptor is None:
            raise SinkError(
                f"recording {recording_id} ({origin}) is not in the archive "
                f"({self.options.connection.describe()}): unknown or purged recording id"
            )
        return descriptor

    def stop_active(self, recording_id: int) -> RecordingDescriptor:
        """Stop a recording left active by a publisher that died, and wait until the catalog has its stop."""
        self.archive.try_stop_recording_by_identity(recording_id)
        deadline = time.monotonic() + self.timeout_s
        while self.archive.get_stop_position(recording_id) == NULL_POSITION:
            if time.monotonic() > deadline:
                raise SinkError(f"recording {recording_id} did not stop within {self.timeout_s:.1f}s")
            time.sleep(0.001)
        return self.descriptor(recording_id, "stopped")

    def truncate(self, recording_id: int, position: int) -> None:
        self.signals.clear()
        self.archive.truncate_recording(recording_id, position)
        self._await_signal("DELETE", lambda e: e.signal == RecordingSignal.DELETE and e.recording_id == recording_id)

    def _publication_channel(self, channel: str) -> str:
        uri = ChannelUri.parse(channel)
        if uri.is_udp and self.source_location == SourceLocation.LOCAL and uri.get("ssc") is None:
            uri = uri.with_params(ssc="true")  # the archive's spy counts as a receiver
        return str(uri)

    def open_new(
        self, channel: str, stream_id: int, before_start: Callable[[int, str], None] | None = None
    ) -> OpenRecording:
        """Start a new recording of a new exclusive publication.

        `before_start(session_id, channel)` runs once the publication's session id is chosen and before the
        archive is asked to record it: the sink notes the session id in its log there, so that a commit that dies
        before it can note the new recording's id leaves a recording its successor can find and adopt.
        """
        publication_channel = sparse_unless_given(self._publication_channel(channel))
        given = _given_session_id(publication_channel)
        session_id = given if given is not None else own_session_id()
        if before_start is not None:
            before_start(session_id, publication_channel)
        recorded_channel = add_session_id(publication_channel, session_id)
        self.signals.clear()
        subscription_id = self.archive.start_recording(
            recorded_channel, stream_id, self.source_location, auto_stop=True
        )
        faults.check("after-record-request", streamId=stream_id)
        publication = self._add_recorded_publication(recorded_channel, stream_id, subscription_id)
        try:
            event = self._await_signal(
                "START", lambda e: e.signal == RecordingSignal.START and e.subscription_id == subscription_id
            )
        except BaseException:
            publication.close()
            raise
        log.info(
            "started recording %d of %s stream %d at position %d",
            event.recording_id,
            publication_channel,
            stream_id,
            event.position,
        )
        return OpenRecording(
            publication, subscription_id, event.recording_id, event.position, publication_channel, True
        )

    def open_extend(
        self, descriptor: RecordingDescriptor, base_channel: str, session_id: int | None = None
    ) -> OpenRecording:
        """Extend a stopped recording; returns as soon as the archive accepted the request.

        Publishing may start at once: the image joins at the publication's position when it links with the
        archive's subscription, and offers before that are refused (NOT_CONNECTED), so nothing is lost; the EXTEND
        signal (or an INVALID_EXTENSION error) is checked before the commit completes, in `confirm`.
        `session_id`: the publication's (one the caller noted in its log), else a new one.
        """
        recording_id = descriptor.recording_id
        base = str(ChannelUri.parse(base_channel).with_params(**dict.fromkeys(SESSION_PARAMS)))
        channel = sparse_unless_given(self._publication_channel(AeronArchive.extend_channel(base, descriptor)))
        recorded_channel = add_session_id(channel, session_id if session_id is not None else own_session_id())
        self.signals.clear()
        subscription_id = self.archive.extend_recording(
            recording_id, recorded_channel, descriptor.stream_id, self.source_location, auto_stop=True
        )
        faults.check("after-record-request", streamId=descriptor.stream_id)
        publication = self._add_recorded_publication(recorded_channel, descriptor.stream_id, subscription_id)
        if publication.position != descriptor.stop_position:
            publication.close()
            self._stop_quietly(subscription_id)
            raise SinkError(
                f"extend publication for recording {recording_id} starts at {publication.position}, "
                f"not at the recording's stop position {descriptor.stop_position}"
            )
        return OpenRecording(publication, subscription_id, recording_id, descriptor.stop_position, channel, False)

    def _add_recorded_publication(self, channel: str, stream_id: int, subscription_id: int) -> ExclusivePublication:
        """The publication the archive was just asked to record (its subscription exists: the publication's first
        setup frame reaches it, so the image links at once, not on the sender's setup retry 100 ms later)."""
        try:
            return self.archive.aeron.add_exclusive_publication(channel, stream_id)
        except BaseException:
            self._stop_quietly(subscription_id)
            raise

    def stop_orphans(
        self, stream_id: int, *, alias: str | None = None, session_id: int | None = None, keep: int = -1
    ) -> int:
        """Stop the archive's recording subscriptions on `stream_id` whose channel has exactly this `alias` (or
        `session_id`), but `keep`: ones a commit that died asked for before its publication existed, which no
        publication will ever reach. Returns how many were stopped; best effort, never raises."""
        fragment = f"alias={alias}" if alias is not None else f"session-id={session_id}"
        try:
            listed = self.archive.list_recording_subscriptions(0, 1000, fragment, stream_id, True)
        except Exception as ex:  # best effort: a leftover subscription costs the archive little; the commit goes on
            log.warning("could not list recording subscriptions (%s stream %d): %s", fragment, stream_id, ex)
            return 0
        stopped = 0
        for found in listed:
            uri = ChannelUri.parse(found.stripped_channel)
            if found.subscription_id == keep or (
                uri.get("alias") != alias
                if alias is not None
                else _given_session_id(found.stripped_channel) != session_id
            ):
                continue
            log.warning(
                "stopping recording subscription %d (%s stream %d): left by a commit that died before its "
                "publication existed",
                found.subscription_id,
                found.stripped_channel,
                stream_id,
            )
            self._stop_quietly(found.subscription_id)
            stopped += 1
        return stopped

    def _stop_quietly(self, subscription_id: int) -> None:
        """Stop a recording subscription that will never see its publication (best effort)."""
        try:
            self.archive.try_stop_recording_subscription(subscription_id)
        except Exception as ex:
            log.warning("could not stop recording subscription %d: %s", subscription_id, ex)

    def confirm(self, opened: OpenRecording) -> None:
        """Wait for the EXTEND signal of an extend started by `open_extend` (raises on INVALID_EXTENSION)."""
        if not opened.confirmed:
            self._await_signal(
                "EXTEND", lambda e: e.signal == RecordingSignal.EXTEND and e.subscription_id == opened.subscription_id
            )
            opened.confirmed = True

    def poll(self) -> None:
        """Take in signals and asynchronous errors (an extend the archive refused) while publishing."""
        self.archive.poll_for_recording_signals()

    def await_recorded(self, recording_id: int, position: int) -> None:
        """Wait until the archive has recorded up to `position` (rec-pos counter, else position requests)."""
        reader = self.archive.aeron.counters_reader
        counter_id = find_counter_id_by_recording(reader, recording_id, self.archive.archive_id())
        deadline = time.monotonic() + self.timeout_s
        last = -1
        while True:
            if counter_id != NULL_COUNTER_ID:
                if not is_active(reader, counter_id, recording_id):
                    raise SinkError(
                        f"recording {recording_id} stopped before reaching position {position} "
                        f"(recorded {last}): did the archive shut down?"
                    )
                recorded = reader.get(counter_id)
            else:  # the archive runs on another media driver: ask it
                recorded = self.archive.get_recording_position(recording_id)
                if recorded == NULL_POSITION:
                    raise SinkError(f"recording {recording_id} stopped before reaching position {position}")
            if recorded >= position:
                return
            if recorded > last:
                last = recorded
                deadline = time.monotonic() + self.timeout_s
            elif time.monotonic() > deadline:
                raise SinkError(
                    f"the archive recorded recording {recording_id} only up to {recorded} of {position} "
                    f"and made no progress for {self.timeout_s:.1f}s"
                )
            time.sleep(0.0002 if counter_id != NULL_COUNTER_ID else 0.002)

    def stop(self, opened: OpenRecording) -> int:
        """Stop recording the publication; returns the stop position the archive reports."""
        self.signals.clear()
        self.archive.stop_recording_subscription(opened.subscription_id)
        event = self._await_signal(
            "STOP", lambda e: e.signal == RecordingSignal.STOP and e.recording_id == opened.recording_id
        )
        return event.position
