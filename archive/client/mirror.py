"""Keeping one archive a replica of another: every recording (or those of a channel and stream), new ones and live
ones included, like Kafka's MirrorMaker. Beyond Java, built on replication (Java's request, as any client sends it).

Each pass lists the source's recordings and the destination's, pairs each source recording with its replica, and
asks the destination to replicate what is missing or behind:
- no replica: a new replication (REPLICATE ...);
- a stopped replica behind a stopped source, or a stopped replica of a live source: a replication that extends it
  from where it stopped (a live source is then followed until it stops);
- a replica being recorded (a replication or a merge runs in the destination), or one in sync: nothing.

Which replica holds which source recording is read from the descriptors, so a mirror keeps no state of its own and
restarts without copying anything twice: a replica's descriptor carries its source's start position and timestamp,
initial term id, term, segment and MTU lengths, session and stream ids, channels and source identity (`copy_key`);
recording ids differ. Several sources may feed one destination (fan-in); their recordings' keys differ unless two
recordings began in the same millisecond with the same random session id on the same channel. The replications run
in the destination archive: a mirror that stops leaves them running, and one that restarts finds their replicas
being recorded and waits for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive, RecordingSignalEvent
from aeron_archive_spark.archive.client.replication_params import ReplicationParams
from aeron_archive_spark.archive.constants import NULL_POSITION, RecordingSignal
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError

log = logging.getLogger(__name__)

MAX_CONCURRENT_DEFAULT = 4
ALL_RECORDINGS = 1 << 30

CopyKey = tuple[int, int, int, int, int, int, int, int, str, str, str]


def copy_key(d: RecordingDescriptor) -> CopyKey:
    """What a recording and its replicas share (see the module docstring)."""
    return (
        d.start_position,
        d.start_timestamp,
        d.initial_term_id,
        d.term_buffer_length,
        d.segment_file_length,
        d.mtu_length,
        d.session_id,
        d.stream_id,
        d.stripped_channel,
        d.original_channel,
        d.source_identity,
    )


@dataclass(frozen=True, slots=True)
class MirrorSource:
    """The archive mirrored from, as the destination reaches it, and which of its recordings."""

    control_channel: str
    control_stream_id: int
    channel_fragment: str = ""  # recordings whose original channel contains this (all when empty)
    stream_id: int | None = None  # ... and of this stream (any when None)


@dataclass
class _Running:
    src_recording_id: int
    replication_id: int


class Mirror:
    """One source mirrored into one destination (see the module docstring); one thread drives it."""

    def __init__(
        self,
        connect_source: Callable[[], AeronArchive],
        connect_destination: Callable[[Callable[[RecordingSignalEvent], None]], AeronArchive],
        source: MirrorSource,
        *,
        replication_channel: str | None = None,
        max_concurrent: int = MAX_CONCURRENT_DEFAULT,
    ) -> None:
        """`connect_source()` and `connect_destination(signal_consumer)` make the clients (again after a failure);
        `replication_channel`: where replays come in (default: the destination archive's own)."""
        self._connect_source = connect_source
        self._connect_destination = connect_destination
        self.source = source
        self.replication_channel = replication_channel
        self.max_concurrent = max(1, max_concurrent)
        self._src: AeronArchive | None = None
        self._dst: AeronArchive | None = None
        self._running: dict[int, _Running] = {}  # by replication id
        self.started = 0
        self.failed = 0
        self.last_pass_idle = False  # the last pass found nothing to start and nothing was running

    # ---- one pass ---------------------------------------------------------------------------------------------

    def pass_once(self) -> int:
        """List both archives and start the replications that are due (up to `max_concurrent` running); returns
        how many were started. Connection failures close the clients (the next pass connects again) and raise."""
        try:
            src, dst = self._source(), self._destination()
            self._drain(dst)
            sources = self._list_source(src)
            replicas = self._replicas(dst)
            started = 0
            busy = {r.src_recording_id for r in self._running.values()}
            for d in sources:
                if len(self._running) >= self.max_concurrent:
                    break
                if d.recording_id in busy:
                    continue
                replica = replicas.get(copy_key(d))
                params = self._due(d, replica)
                if params is None:
                    continue
                replication_id = dst.replicate(
                    d.recording_id, self.source.control_stream_id, self.source.control_channel, params
                )
                self._running[replication_id] = _Running(d.recording_id, replication_id)
                started += 1
                self.started += 1
                log.info(
                    "mirror: recording %d of %s: replication %d %s",
                    d.recording_id,
                    self.source.control_channel,
                    replication_id,
                    "into a new replica" if replica is None else f"extending replica {replica.recording_id}",
                )
            self.last_pass_idle = started == 0 and not self._running
            return started
        except Exception:
            self.close()
            raise

    def _due(self, d: RecordingDescriptor, replica: RecordingDescriptor | None) -> ReplicationParams | None:
        """The replication a source recording needs now, if any."""
        params = ReplicationParams(replication_channel=self.replication_channel)
        if replica is None:
            return params
        if replica.stop_position == NULL_POSITION:
            return None  # being recorded: a replication (or a merged live stream) is at work
        if d.stop_position != NULL_POSITION and replica.stop_position >= d.stop_position:
            return None  # in sync
        params.dst_recording_id = replica.recording_id
        return params

    def _list_source(self, src: AeronArchive) -> list[RecordingDescriptor]:
        source = self.source
        if source.stream_id is None and not source.channel_fragment:
            return src.list_recordings(0, ALL_RECORDINGS)
        if source.stream_id is None:
            listed = src.list_recordings(0, ALL_RECORDINGS)
            return [d for d in listed if source.channel_fragment in d.original_channel]
        return src.list_recordings_for_uri(0, ALL_RECORDINGS, source.channel_fragment, source.stream_id)

    @staticmethod
    def _replicas(dst: AeronArchive) -> dict[CopyKey, RecordingDescriptor]:
        """The destination's recordings by copy key; of several with one key, the one furthest on."""
        out: dict[CopyKey, RecordingDescriptor] = {}
        for d in dst.list_recordings(0, ALL_RECORDINGS):
            key = copy_key(d)
            held = out.get(key)
            if held is None or _reach(d) > _reach(held):
                out[key] = d
        return out

    # ---- replications' progress ------------------------------------------------------------------------------

    def _on_signal(self, event: RecordingSignalEvent) -> None:
        if event.signal is RecordingSignal.REPLICATE_END and event.correlation_id in self._running:
            del self._running[event.correlation_id]
            log.debug("mirror: replication %d ended", event.correlation_id)

    def _drain(self, dst: AeronArchive) -> None:
        """Take the destination's signals and errors: replications that ended leave the running set."""
        while True:
            try:
                if dst.poll_for_recording_signals() == 0:
                    return
            except ArchiveError as ex:
                running = self._running.get(ex.correlation_id)
                if running is None:  # not one of this mirror's replications: the session's own trouble
                    raise
                self.failed += 1
                log.warning(
                    "mirror: replication %d of recording %d failed: %s",
                    ex.correlation_id,
                    running.src_recording_id,
                    ex.message,
                )  # its REPLICATE_END follows; a later pass replicates again

    @property
    def running(self) -> int:
        return len(self._running)

    # ---- connections ------------------------------------------------------------------------------------------

    def _source(self) -> AeronArchive:
        if self._src is None:
            self._src = self._connect_source()
        return self._src

    def _destination(self) -> AeronArchive:
        if self._dst is None:
            self._dst = self._connect_destination(self._on_signal)
            self._running.clear()  # signals of replications started before are lost with the old session
        return self._dst

    def close(self) -> None:
        for client in (self._src, self._dst):
            if client is not None:
                try:
                    client.close()
                except Exception as ex:
                    log.debug("mirror: closing a client: %s", ex)
        self._src = self._dst = None

    # ---- the loop ---------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, interval_s: float = 1.0, once: bool = False) -> None:
        """Pass after pass until `stop` is set (or, with `once`, until a pass finds everything in sync or being
        recorded): failures are logged and retried next pass, so a source or destination that restarts is
        mirrored again once it is back."""
        while not stop.is_set():
            try:
                self.pass_once()
            except Exception as ex:  # an archive restarting, a link down: the next pass connects again
                log.warning("mirror: pass failed (%s); retrying in %.1fs", ex, interval_s)
            if once and self.last_pass_idle:
                return
            deadline = time.monotonic() + interval_s
            while not stop.is_set() and time.monotonic() < deadline:
                dst = self._dst
                if dst is not None and self._running:
                    try:
                        self._drain(dst)
                    except ArchiveError as ex:
                        log.warning("mirror: destination: %s", ex)
                        self.close()
                        break
                time.sleep(0.01)
        self.close()


def _reach(d: RecordingDescriptor) -> int:
    """How far a recording goes: being recorded counts as furthest."""
    return (1 << 62) if d.stop_position == NULL_POSITION else d.stop_position
