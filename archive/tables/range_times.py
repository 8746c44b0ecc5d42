"""The time index over one `ReadRange`: what dates its rows (the `timestamp` column), from where the range reads.

- `archiveDir`: the `.tix` files of the segments the range reads (opened by name: a partition of many small
  recordings opens one or two small files per recording, no directory listing);
- a running archive: the archive's `TimeIndexRequest` (our extension of the control protocol), on a session leased
  from the process's connection pool, as replays are;
- copies on several archives: the first copy that answers (copies made from our archive carry its times).

None where no index dates the range: the rows' `timestamp` is then null.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.pool import ConnectionPool, connection_pool
from aeron_archive_spark.archive.exceptions import ArchiveDisconnectedError, ArchiveError, ArchiveTimeoutError
from aeron_archive_spark.archive.storage.segments import segment_file_base_position
from aeron_archive_spark.archive.storage.time_index import TimeIndex, read_segment_time_index
from aeron_archive_spark.archive.tables.ranges import ReadRange, Replicas, RunningArchive, SegmentFiles
from aeron_archive_spark.archive.tables.replica_chunks import COPY_FAILURES

log = logging.getLogger(__name__)


def range_time_index(read_range: ReadRange, pool: ConnectionPool | None = None) -> TimeIndex | None:
    """The samples dating the messages of `read_range` (from its start up to its limit), None if there are none."""
    location = read_range.location
    if isinstance(location, SegmentFiles):
        index: TimeIndex | None = _segment_files_index(location.archive_dir, read_range)
    elif isinstance(location, Replicas):
        index = _copies_index(location, read_range, pool or connection_pool())
    else:
        index = _archive_index(location.connection, read_range.recording_id, read_range, pool or connection_pool())
    return None if index is None or index.is_empty else index


def range_time_indexes(ranges: Sequence[ReadRange], pool: ConnectionPool | None = None) -> list[TimeIndex | None]:
    """`range_time_index` of each range, in order; the ranges of one running archive in one TimeIndexesRequest per
    256 (a Spark partition of hundreds of small recordings dates them in a round trip, not one each)."""
    found: list[TimeIndex | None] = [None] * len(ranges)
    by_archive: dict[ConnectionOptions, list[int]] = {}
    for at, read_range in enumerate(ranges):
        if isinstance(read_range.location, RunningArchive):
            by_archive.setdefault(read_range.location.connection, []).append(at)
        else:
            found[at] = range_time_index(read_range, pool)
    for connection, members in by_archive.items():
        if len(members) == 1:
            found[members[0]] = range_time_index(ranges[members[0]], pool)
            continue
        with (pool or connection_pool()).archive(connection, purpose="replay") as archive:
            if not archive.answers_time_index:
                continue
            asked = [(ranges[at].recording_id, ranges[at].start, ranges[at].limit) for at in members]
            answers = archive.time_indexes(asked)
        for at, index in zip(members, answers, strict=True):
            found[at] = None if index is None or index.is_empty else index
    return found


def _archive_index(
    connection: ConnectionOptions, recording_id: int, read_range: ReadRange, pool: ConnectionPool
) -> TimeIndex | None:
    """The archive's answer to `TimeIndexRequest`; None where it keeps no index (Java's archive, which is never
    asked: it names no such feature when connected, or a recording without one)."""
    with pool.archive(connection, purpose="replay") as archive:
        if not archive.answers_time_index:
            return None
        try:
            return archive.time_index(recording_id, read_range.start, read_range.limit)
        except ArchiveError as ex:
            if isinstance(ex, ArchiveDisconnectedError | ArchiveTimeoutError):
                raise
            # No index, or no such recording any more (purged, deleted): the replay that reads the range next
            # meets the same recording and reports what it finds, as it does without the time index.
            log.debug("recording %d: no time index: %s", recording_id, ex)
            return None


def _copies_index(location: Replicas, read_range: ReadRange, pool: ConnectionPool) -> TimeIndex | None:
    """The first copy's (in the planner's order, the reference first where it holds the range) that answers."""
    failures = []
    for copy in location.copies:
        try:
            index = _archive_index(copy.archive.connection, copy.recording_id, read_range, pool)
        except COPY_FAILURES as ex:
            failures.append(f"controlChannel={copy.archive.connection.control_channel}: {ex}")
            continue
        if index is not None and not index.is_empty:
            return index  # else a copy without an index (Java's, or one made before it): ask the next
    if failures:
        log.warning(
            "recording %d: no copy answered for its time index (%s)", read_range.recording_id, "; ".join(failures)
        )
    return None


def _segment_files_index(archive_dir: str, read_range: ReadRange) -> TimeIndex:
    facts = read_range.recording
    last = max(read_range.limit - 1, read_range.start)
    first_base = segment_file_base_position(
        facts.start_position, read_range.start, facts.term_length, facts.segment_length
    )
    last_base = segment_file_base_position(facts.start_position, last, facts.term_length, facts.segment_length)
    bases = range(first_base, last_base + 1, facts.segment_length)
    return read_segment_time_index(archive_dir, facts.recording_id, bases, read_range.start, read_range.limit)
