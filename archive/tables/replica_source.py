"""`ReplicatedRecordingSource`: planning a read of recordings held by several archives (`controlChannels`).

Like a Kafka consumer that fetches from replicas, a read names every archive holding copies of its recordings and
the planner places each range on the archives that hold it, so that partitions spread over them and a range whose
archive goes down goes on from another. Replication and `mirror` make the copies (`docs/replication.md`).

Identity. Recording ids differ between archives, so one archive names the recordings: the first one listed, the
*reference*. The selection, positions, offsets, checkpoints and the `recordingId` column are its ids, whichever
archive serves a batch, so a checkpoint stays valid whatever archive reads the next one. A copy is recognised by
what a replica shares with its source (`archive.client.mirror.copy_key`: start position and timestamp, term and
segment lengths, initial term id, MTU, session and stream ids, channels, source identity); positions are the same
on every copy, byte for byte.

Placement. Each planning question lists the reference's recordings and every other archive's copies of them (one
listing per archive). A range may be read from the reference and from every copy that holds it up to the range's
limit: a stopped copy up to its stop position, a live one (a replication or merge running) up to its recorded
position; a copy that is behind only serves the ranges it holds. Ranges then try their copies starting from one
chosen by their index (`Replicas.order_for`), which spreads a read over the archives.

Failover. An archive that does not answer is left out of the placements until it answers again. The reference may
go down too: the planner then answers from the copies of the recordings this process has already seen on the
reference (their keys are kept for the life of the process: a Spark driver's later reads and restarted queries
ride it out too), with the copies' own ends. A process that has never reached the reference cannot know which
recordings its ids name, and says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.mirror import CopyKey, copy_key
from aeron_archive_spark.archive.client.pool import ConnectionPool, connection_pool
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.tables.chunks import ChunkSource
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.ranges import (
    ArchiveReplicas,
    Copy,
    ReadLocation,
    ReadRange,
    RecordingFacts,
    Replicas,
)
from aeron_archive_spark.archive.tables.recording_source import (
    RecordingSource,
    RemoteRecordingSource,
    TimeIndexMissingError,
)
from aeron_archive_spark.archive.tables.replica_chunks import ReplicaChunkSource

log = logging.getLogger(__name__)

T = TypeVar("T")

# What an archive that is down (killed, unreachable, restarting) raises when asked: it is left out for now.
UNREACHABLE = (ArchiveError, ConnectionError, TimeoutError)

_SCAN_CHUNK = 256 * 1024

# An archive that did not answer is asked again after this long (meanwhile the others answer for it): planning
# must not wait out a dead archive's timeout at every question.
ASK_DOWN_AGAIN_S = 5.0

# (control channel, stream id) of a reference archive -> its recordings' copy keys by id, as this process last saw
# them: a Spark driver's later reads (and restarted queries) can still name the copies while the reference is down.
_SEEN: dict[tuple[str, int], dict[int, CopyKey]] = {}


class ReplicatedRecordingSource(RecordingSource):
    """Recordings of the reference archive and their copies on the others (see the module docstring)."""

    def __init__(
        self, options: SourceOptions, pool: ConnectionPool | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(options)
        assert isinstance(options.location, ArchiveReplicas)
        self.replicas = options.location
        self.pool = pool if pool is not None else connection_pool()
        self._members = [
            RemoteRecordingSource(replace(options, location=a), self.pool) for a in options.location.archives
        ]
        reference = options.location.reference.connection
        # reference recording id -> copy key of every one seen, shared by the planners of this process
        self._keys = _SEEN.setdefault((reference.control_channel, reference.control_stream_id), {})
        self._copies: list[dict[CopyKey, RecordingDescriptor]] = [{} for _ in self._members]  # [0] unused
        self._clock = clock
        self._down: dict[int, float] = {}  # members whose last question failed -> when to ask them again
        self._chunk_source: ReplicaChunkSource | None = None

    def describe(self) -> str:
        return self.replicas.describe()

    def _member_name(self, index: int) -> str:
        role = "the reference archive" if index == 0 else "archive"
        return f"{role} at controlChannel={self.replicas.archives[index].connection.control_channel}"

    def _failed(self, index: int, what: str, ex: BaseException) -> None:
        if index not in self._down:
            log.warning(
                "%s: %s did not answer (%s); reading from the others until it does", what, self._member_name(index), ex
            )
        self._down[index] = self._clock() + ASK_DOWN_AGAIN_S

    def _answered(self, index: int) -> None:
        if index in self._down:
            log.info("%s answers again", self._member_name(index))
            del self._down[index]

    def _resting(self, index: int) -> bool:
        """Whether archive `index` failed lately and is not to be asked again yet."""
        again = self._down.get(index)
        return again is not None and self._clock() < again

    # -- listings --------------------------------------------------------------------------------------------

    def list_selected(self, from_id: int = 0) -> dict[int, RecordingDescriptor]:
        return self._on_reference(lambda m: m.list_selected(from_id), lambda: self._seen_from(from_id))

    def find_recordings(self, ids: Iterable[int]) -> dict[int, RecordingDescriptor]:
        wanted = list(ids)
        if not wanted:
            return {}
        return self._on_reference(lambda m: m.find_recordings(wanted), lambda: wanted)

    def refresh(self, ids: Iterable[int], from_id: int | None) -> dict[int, RecordingDescriptor]:
        wanted = list(ids)
        return self._on_reference(
            lambda m: m.refresh(wanted, from_id),
            lambda: wanted + (self._seen_from(from_id) if from_id is not None else []),
        )

    def _seen_from(self, from_id: int) -> list[int]:
        """The reference recordings seen so far with an id >= `from_id`: what a listing from there can still name
        while the reference is down."""
        return [rid for rid in self._keys if rid >= from_id]

    def _on_reference(
        self,
        ask: Callable[[RemoteRecordingSource], dict[int, RecordingDescriptor]],
        wanted: Callable[[], list[int]],
    ) -> dict[int, RecordingDescriptor]:
        """The reference's answer, with every other archive's copies surveyed; while it is down, the copies of the
        `wanted` recordings (those it was last seen to hold), under the reference's ids."""
        what = "listing recordings"
        if self._resting(0):
            self._survey()
            return self._from_copies(what, wanted())
        try:
            found = ask(self._members[0])
        except UNREACHABLE as ex:
            self._failed(0, what, ex)
            self._survey()
            return self._from_copies(what, wanted())
        self._answered(0)
        for rid, descriptor in found.items():
            self._keys[rid] = copy_key(descriptor)
        self._survey()
        return found

    def _survey(self) -> None:
        """List each other archive's recordings that could be copies of the selected ones (one request each)."""
        selection = self.options.selection
        for index in range(1, len(self._members)):
            if self._resting(index):
                continue

            def listing(archive: AeronArchive) -> list[RecordingDescriptor]:
                if selection.channel is not None and selection.stream_id is not None:
                    return archive.list_recordings_for_uri(0, 2**31 - 1, selection.channel, selection.stream_id)
                return archive.list_recordings(0, 2**31 - 1)

            try:
                listed = self._members[index].ask("listing copies", listing)
            except UNREACHABLE as ex:
                self._failed(index, "listing copies", ex)
                continue
            self._answered(index)
            copies: dict[CopyKey, RecordingDescriptor] = {}
            for descriptor in listed:
                key = copy_key(descriptor)
                held = copies.get(key)
                if held is None or _further(descriptor, held):
                    copies[key] = descriptor
            self._copies[index] = copies

    def _from_copies(self, what: str, wanted: Iterable[int]) -> dict[int, RecordingDescriptor]:
        """The reference's recordings as the copies hold them (with the reference's ids), the reference being down."""
        if not self._keys:
            raise ArchiveError(
                f"{what}: {self._member_name(0)} does not answer, and this process has not reached it yet: the other "
                "archives' copies cannot be matched to its recording ids (the ids the selection, positions and "
                "checkpoints use) until it answers once"
            )
        if len(self._down) == len(self._members):
            raise ArchiveError(f"{what}: none of the {self.describe()} answers")
        found: dict[int, RecordingDescriptor] = {}
        for rid in wanted:
            best = self._best_copy(rid)
            if best is not None:
                found[rid] = replace(best[1], recording_id=rid)
        return found

    def _holders(self, rid: int) -> list[tuple[int, RecordingDescriptor]]:
        """(member index, copy descriptor) of every answering non-reference archive holding a copy of `rid`."""
        key = self._keys.get(rid)
        if key is None:
            return []
        held = []
        for index in range(1, len(self._members)):
            if index in self._down:
                continue
            descriptor = self._copies[index].get(key)
            if descriptor is not None:
                held.append((index, descriptor))
        return held

    def _best_copy(self, rid: int) -> tuple[int, RecordingDescriptor] | None:
        best: tuple[int, RecordingDescriptor] | None = None
        for index, descriptor in self._holders(rid):
            if best is None or _further(descriptor, best[1]):
                best = (index, descriptor)
        return best

    # -- positions -------------------------------------------------------------------------------------------

    def recorded_end(self, descriptor: RecordingDescriptor) -> int:
        rid = descriptor.recording_id
        if not self._resting(0):
            try:
                end = self._members[0].recorded_end(descriptor)
            except UNREACHABLE as ex:
                self._failed(0, f"the recorded position of recording {rid}", ex)
            else:
                self._answered(0)
                return end
        ends = [end for _, end in self._copy_ends(rid)]
        if not ends:
            raise ArchiveError(
                f"the recorded position of recording {rid}: no archive of the {self.describe()} that holds it answers"
            )
        return max(ends)

    def _position_at_time(self, descriptor: RecordingDescriptor, time_ns: int, end: int) -> int | None:
        """The reference's time index decides; while it is down, or keeps no index (a Java archive), the first
        copy that can answer (a copy's position is the reference's too: copies are byte-identical from their
        common start; a copy made from ours carries the source's times, others their own)."""
        rid = descriptor.recording_id
        what = f"the position of time {time_ns} ns in recording {rid}"
        missing: TimeIndexMissingError | None = None
        if not self._resting(0):
            try:
                position = self._members[0]._position_at_time(descriptor, time_ns, end)
            except UNREACHABLE as ex:
                self._failed(0, what, ex)
            except TimeIndexMissingError as ex:
                self._answered(0)
                missing = ex
            else:
                self._answered(0)
                return position
        for index, copy in self._holders(rid):
            try:
                position = self._members[index]._position_at_time(copy, time_ns, end)
            except UNREACHABLE as ex:
                self._failed(index, what, ex)
                continue
            except TimeIndexMissingError:
                continue
            self._answered(index)
            return position
        if missing is not None:
            raise missing
        raise ArchiveError(f"{what}: no archive of the {self.describe()} that holds it answers")

    def _copy_ends(self, rid: int, at_least: int | None = None) -> list[tuple[Copy, int]]:
        """Each answering copy of `rid` with how far it holds the recording now (a live copy's recorded position is
        asked only when its listed stop does not settle the question); with `at_least`, only those holding that far."""
        held = []
        for index, copy in self._holders(rid):
            if not copy.is_active:
                end = copy.stop_position
            else:
                try:
                    end = self._members[index].recorded_end(copy)
                except UNREACHABLE as ex:
                    self._failed(index, f"the recorded position of its copy of recording {rid}", ex)
                    continue
            if at_least is None or end >= at_least:
                held.append((Copy(self.replicas.archives[index], copy.recording_id), end))
        return held

    # -- placement -------------------------------------------------------------------------------------------

    def placement(self, rid: int, limit: int) -> Replicas:
        """The copies a range of recording `rid` up to `limit` may be read from: the reference first (while it
        answers), then every other archive whose copy holds up to `limit`."""
        copies = [] if 0 in self._down else [Copy(self.replicas.reference, rid)]
        copies.extend(copy for copy, _ in self._copy_ends(rid, limit))
        if not copies:
            raise ArchiveError(
                f"recording {rid} up to position {limit}: no archive of the {self.describe()} that holds it answers"
            )
        return Replicas(tuple(copies))

    def placements(self, limits: Mapping[int, int]) -> dict[int, ReadLocation]:
        return {rid: self.placement(rid, limit) for rid, limit in limits.items()}

    def _partition(self, descriptor: RecordingDescriptor, start: int, end: int, limit: int) -> ReadRange:
        location = self.placement(descriptor.recording_id, limit)
        return ReadRange(-1, RecordingFacts.of(descriptor), start, end, limit, location)

    def chunk_source(self) -> ChunkSource:
        if self._chunk_source is None:
            self._chunk_source = ReplicaChunkSource(_SCAN_CHUNK, pool=self.pool)
        return self._chunk_source

    def location(self) -> ReadLocation:
        """The reference alone: ranges are placed per recording (`placements`); this is for a range planned without."""
        return self.replicas.reference

    def close(self) -> None:
        for member in self._members:
            member.close()


def _further(a: RecordingDescriptor, b: RecordingDescriptor) -> bool:
    """Whether copy `a` is worth more than copy `b`: a live one over a stopped one, else the later stop."""
    if a.is_active != b.is_active:
        return a.is_active
    return a.stop_position > b.stop_position
