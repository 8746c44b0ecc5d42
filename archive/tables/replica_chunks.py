"""Reading a range from copies of its recording on several archives (`Replicas`), failing over between them.

Copies are byte-identical at every position they hold, so a range read from one copy can go on from another at the
position the first one reached: a reader whose archive dies in the middle of a range loses nothing and repeats
nothing. Each copy is read by the replay reader (`ReplayChunkSource`), under its own recording id there; the range
keeps the reference's id, which is what the rows carry.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

from aeron_archive_spark.archive.client.pool import ConnectionPool
from aeron_archive_spark.archive.client.replay import ReplayFetchError
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.frames import HEADER_LENGTH, FrameScan, ScanStop, align
from aeron_archive_spark.archive.tables.chunks import CHUNK_LENGTH
from aeron_archive_spark.archive.tables.ranges import Copy, ReadRange, Replicas
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource

log = logging.getLogger(__name__)

# What a copy that cannot serve raises: its archive is down or unreachable, it refused the replay, or the replay
# stopped or stalled before the range was read.
COPY_FAILURES = (ReplayFetchError, ArchiveError, ConnectionError, TimeoutError)

_FRAME_LENGTH = struct.Struct("<i")

# An archive that failed a read is tried last by this process's later reads for this long: Spark reuses its Python
# workers, so the ranges after the first one to meet a dead archive do not each wait out its timeout first.
AVOID_FAILED_S = 30.0

# control channel -> time.monotonic() of its last failure, for this process.
_failed_at: dict[str, float] = {}


def prefer_answering(copies: tuple[Copy, ...], now: float | None = None) -> tuple[Copy, ...]:
    """`copies` with those whose archive failed a read in this process within `AVOID_FAILED_S` moved last."""
    now = time.monotonic() if now is None else now
    failed = {channel for channel, at in _failed_at.items() if now - at < AVOID_FAILED_S}
    if not failed:
        return copies
    return tuple(sorted(copies, key=lambda c: c.archive.connection.control_channel in failed))


def _note_failure(copy: Copy) -> None:
    _failed_at[copy.archive.connection.control_channel] = time.monotonic()


def on_copy(read_range: ReadRange, copy: Copy, start: int) -> ReadRange:
    """`read_range` from `start` as read on `copy`: its archive, its recording id there."""
    facts = replace(read_range.recording, recording_id=copy.recording_id)
    return replace(read_range, recording=facts, start=start, location=copy.archive)


def next_position(chunk: memoryview, position: int, scan: FrameScan) -> int:
    """Where the chunk after `chunk` (at `position`) starts: past its last whole frame, or past a PAD cut after its
    header (see `ChunkSource`)."""
    end = scan.stop_offset
    if scan.stop_reason is ScanStop.INCOMPLETE and len(chunk) - end >= HEADER_LENGTH:
        (length,) = _FRAME_LENGTH.unpack_from(chunk, end)
        if length > 0:
            end += align(length, 32)
    return position + end


class ReplicaChunkSource:
    """`ChunkSource` over ranges whose location is `Replicas` (see the module docstring)."""

    def __init__(
        self, chunk_length: int = CHUNK_LENGTH, stall_timeout_s: float | None = None, pool: ConnectionPool | None = None
    ) -> None:
        self._replays = ReplayChunkSource(chunk_length, stall_timeout_s, pool)
        # range identity -> (range, its copies in the order tried, the range on the first): the ranges of one
        # partition, read ahead (matched by identity, as the replay reader matches them).
        self._planned: dict[int, tuple[ReadRange, tuple[Copy, ...], ReadRange]] = {}

    def read_ahead(self, ranges: Sequence[ReadRange]) -> None:
        """The ranges of one partition about to be read, in order: they prefer the copies the partition's first range
        does (so that one archive serves the partition and its small ranges' replays can be asked for ahead on one
        control session), and their replays from those copies are asked for ahead."""
        self._planned = {}
        if not ranges:
            return
        rotation = ranges[0].index
        for read_range in ranges:
            location = read_range.location
            if isinstance(location, Replicas) and location.copies:
                copies = prefer_answering(location.order_for(rotation))
                on = on_copy(read_range, copies[0], read_range.start)
                self._planned[id(read_range)] = (read_range, copies, on)
        self._replays.read_ahead([on for _, _, on in self._planned.values()])

    def close(self, failed: bool = False) -> None:
        self._planned = {}
        self._replays.close(failed)

    def iter_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int]]:
        for chunk, position, _ in self.iter_scanned_chunks(partition):
            yield chunk, position

    def iter_scanned_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int, FrameScan]]:
        location = partition.location
        if not isinstance(location, Replicas):
            raise ValueError(
                f"partition {partition.index} of recording {partition.recording_id} reads {location.describe()}, "
                "not copies on several archives"
            )
        planned = self._planned.get(id(partition))
        if planned is not None and planned[0] is partition:
            copies, first = planned[1], planned[2]
        else:
            copies, first = prefer_answering(location.order_for(partition.index)), None
        position = partition.start
        failures: list[str] = []
        for n, copy in enumerate(copies):
            on = first if n == 0 and first is not None else on_copy(partition, copy, position)
            try:
                for chunk, at, scan in self._replays.iter_scanned_chunks(on):
                    yield chunk, at, scan
                    position = next_position(chunk, at, scan)
                return
            except COPY_FAILURES as ex:
                _note_failure(copy)
                where = f"recording {copy.recording_id} of controlChannel={copy.archive.connection.control_channel}"
                failures.append(f"{where}: {ex}")
                if n + 1 < len(copies):
                    log.warning(
                        "recording %d partition %d [%d, %d): reading %s failed at position %d (%s); going on from "
                        "there on the next copy",
                        partition.recording_id,
                        partition.index,
                        partition.start,
                        partition.end,
                        where,
                        position,
                        ex,
                    )
        raise ReplayFetchError(
            f"recording {partition.recording_id} partition {partition.index} [{partition.start}, {partition.end}): "
            f"no copy could serve it from position {position}; tried " + "; ".join(failures)
        )
