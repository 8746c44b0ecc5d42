"""Reading planned `ReadRange`s into Arrow record batches: choose where their bytes come from, then decode.

The last link of the read chain options -> connections -> chunk source -> Arrow, and the one module that knows
both chunk sources: segment files when the range names an archive directory, bounded replays through the running
archive otherwise. The Spark source's executors and the offline `export` both read through here.

A Spark partition may hold many small ranges (small recordings packed together, see
`archive.tables.planning.pack_ranges`): `read_ranges` reads them in order, one after the other, merging their small
batches so that Spark sees few, large ones, and `current_descriptors` looks all their recordings up at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa

from aeron_archive_spark.archive.client.pool import ConnectionPool, connection_pool
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.frames import FrameScan, scan_frames
from aeron_archive_spark.archive.storage.time_index import TimeIndex
from aeron_archive_spark.archive.tables.chunks import ChunkSource, DiskChunkSource
from aeron_archive_spark.archive.tables.decode import MIN_BATCH_BYTES, DecodedRows, RangeDecoder, merge_decoded
from aeron_archive_spark.archive.tables.payload import PayloadDecoder
from aeron_archive_spark.archive.tables.range_times import range_time_index, range_time_indexes
from aeron_archive_spark.archive.tables.ranges import ReadLocation, ReadRange, Replicas, SegmentFiles
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource
from aeron_archive_spark.archive.tables.replica_chunks import COPY_FAILURES, ReplicaChunkSource

log = logging.getLogger(__name__)


def open_chunk_source(read_range: ReadRange) -> ChunkSource:
    """Where the range's location is read from: segment files directly, bounded replays through the archive, or
    bounded replays from copies on several archives, failing over between them."""
    if isinstance(read_range.location, SegmentFiles):
        return DiskChunkSource()
    if isinstance(read_range.location, Replicas):
        return ReplicaChunkSource()
    return ReplayChunkSource()


class _StopDecoder(RangeDecoder):
    """A decoder for a range that ends at its recording's stop (`ends_at_stop`): a message left open there is
    dropped with a warning, since nothing will ever complete it (see `ReadRange`)."""

    def _finish(self) -> None:
        pending = self._pending
        if pending is not None and self._next_position >= self._p.limit:
            log.warning(
                "recording %d: the message beginning at position %d is incomplete at the recording's stop "
                "position %d (cut short by a crash or a truncation); it is left out",
                self._rid,
                pending.position,
                self._p.limit,
            )
            self._pending = None
        super()._finish()


def read_batches(
    read_range: ReadRange,
    schema: pa.Schema,
    decoder: PayloadDecoder | None,
    source: ChunkSource | None = None,
    min_batch_bytes: int = MIN_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Record batches (of exactly `schema`) of the messages that begin in `read_range`.

    `source`: where the frames come from (default: `open_chunk_source(read_range)`).
    """
    times = range_time_index(read_range)
    for item in _read_items(read_range, schema, decoder, source, min_batch_bytes, False, times):
        assert isinstance(item, pa.RecordBatch)
        yield item


def _read_items(
    read_range: ReadRange,
    schema: pa.Schema,
    decoder: PayloadDecoder | None,
    source: ChunkSource | None,
    min_batch_bytes: int,
    defer_small: bool,
    times: TimeIndex | None,
) -> Iterator[pa.RecordBatch | DecodedRows]:
    """`read_batches`; with `defer_small`, a few whole messages may come as `DecodedRows` (for `read_ranges`).
    `times`: the range's time index (`range_times`), which dates its rows."""
    chunk_source = source if source is not None else open_chunk_source(read_range)
    scanned = getattr(chunk_source, "iter_scanned_chunks", None)
    chunks = scanned(read_range) if scanned is not None else chunk_source.iter_chunks(read_range)
    decoding = (_StopDecoder if read_range.ends_at_stop else RangeDecoder)(
        read_range,
        schema,
        decoder,
        min_batch_bytes,
        defer_small=defer_small,
        times=times,
    )
    yield from decoding.items(chunks)
    log.debug(
        "recording %d range %d [%d, %d): %d rows, %d leading fragments skipped",
        read_range.recording_id,
        read_range.index,
        read_range.start,
        read_range.end,
        decoding.rows,
        decoding.skipped_leading_fragments,
    )


def read_ranges(
    ranges: Iterable[ReadRange],
    schema: pa.Schema,
    decoder: PayloadDecoder | None,
    after_loss: Callable[[ReadRange, Exception], ReadRange | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the messages of each range, range after range, in the order given.

    Batches smaller than `MIN_BATCH_BYTES` (a small recording's few rows) are merged across ranges before they
    are yielded: Spark's per-batch cost would otherwise dominate a partition of many small recordings. Rows keep
    their order. One chunk source per location serves every range; through an archive, the small ranges' replays
    are asked for ahead (`archive.client.replay`).

    `after_loss`: for reads that go on after data loss (the Spark source's failOnDataLoss=false). When reading a
    range fails (a segment file gone under the reader: purged, retention, truncated), it is called with the range
    being read and the error, and answers what is left of the range to read instead (from a later start: rows
    already given are never given again), None if nothing is left, or the range itself if the failure was no data
    loss (the error is then raised).
    """
    ranges = list(ranges)
    sources: dict[type[ReadLocation], ChunkSource] = {}
    held: list[pa.RecordBatch | DecodedRows] = []
    held_bytes = 0

    times = dict(zip((id(r) for r in ranges), range_time_indexes(ranges), strict=True))

    def items(read_range: ReadRange, source: ChunkSource) -> Iterator[pa.RecordBatch | DecodedRows]:
        current: ReadRange | None = read_range
        dated = times[id(read_range)]  # positions stay valid for what is left of the range after a loss
        while current is not None:
            tracked = _TrackedChunks(source, current.start)
            try:
                yield from _read_items(current, schema, decoder, tracked, MIN_BATCH_BYTES, True, dated)
                return
            except Exception as ex:
                if after_loss is None:
                    raise
                remainder = after_loss(current, ex)
                # Only a remainder past every chunk already handed to the decoder: no row is given twice. (Rows
                # decoded but not yet given lie below the lost data, which starts past the failed chunk.)
                if remainder is current or (remainder is not None and remainder.start <= tracked.last_position):
                    raise
                current = remainder

    try:
        for read_range in ranges:
            kind = type(read_range.location)
            source = sources.get(kind)
            if source is None:
                source = sources[kind] = open_chunk_source(read_range)
                if isinstance(source, ReplayChunkSource | ReplicaChunkSource) and len(ranges) > 1:
                    source.read_ahead([r for r in ranges if type(r.location) is kind])
            # Small ranges' few messages come as `DecodedRows`: built into Arrow once per merged batch.
            for item in items(read_range, source):
                if isinstance(item, DecodedRows):
                    size = item.nbytes
                else:
                    size = item.get_total_buffer_size()  # `nbytes` walks the buffers' used ranges: slow
                    if size >= MIN_BATCH_BYTES:  # big enough alone: never copied into a merge
                        if held:
                            yield merge_decoded(held)
                            held, held_bytes = [], 0
                        yield item
                        continue
                held.append(item)
                held_bytes += size
                if held_bytes >= MIN_BATCH_BYTES:
                    yield merge_decoded(held)
                    held, held_bytes = [], 0
        if held:
            yield merge_decoded(held)
    finally:
        for source in sources.values():
            if isinstance(source, ReplayChunkSource | ReplicaChunkSource):
                source.close()


class _TrackedChunks:
    """A chunk source that remembers the position of the last chunk it handed out."""

    def __init__(self, source: ChunkSource, start: int) -> None:
        self._source = source
        self.last_position = start

    def iter_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int]]:
        for chunk, position in self._source.iter_chunks(partition):
            self.last_position = position
            yield chunk, position

    def iter_scanned_chunks(self, partition: ReadRange) -> Iterator[tuple[memoryview, int, FrameScan]]:
        scanned = getattr(self._source, "iter_scanned_chunks", None)
        if scanned is None:
            for chunk, position in self.iter_chunks(partition):
                yield chunk, position, scan_frames(chunk, 0, len(chunk), stop_at_padding=False)
            return
        for chunk, position, scan in scanned(partition):
            self.last_position = position
            yield chunk, position, scan


def current_descriptor(read_range: ReadRange, pool: ConnectionPool | None = None) -> RecordingDescriptor | None:
    """The range's recording as it is now (None once purged or deleted), from where the range reads it.

    Lets a reader that must go on after data loss (failOnDataLoss=false) see a truncation or purge made between
    planning and reading: the catalog, opened read-only, for `archiveDir`; a `ListRecording` on a session leased
    from `pool` (default: the process's `connection_pool()`) for a running archive.
    """
    return current_descriptors([read_range], pool)[read_range.recording_id]


def current_descriptors(
    ranges: Sequence[ReadRange], pool: ConnectionPool | None = None
) -> dict[int, RecordingDescriptor | None]:
    """`current_descriptor` of each range's recording, by id: one catalog opening per archive directory, one
    leased session per archive, however many ranges."""
    found: dict[int, RecordingDescriptor | None] = {}
    by_location: dict[ReadLocation, list[int]] = {}
    for read_range in ranges:
        by_location.setdefault(read_range.location, []).append(read_range.recording_id)
    for location, ids in by_location.items():
        if isinstance(location, SegmentFiles):
            with Catalog(location.archive_dir, writable=False) as catalog:
                for rid in ids:
                    if rid not in found:
                        found[rid] = catalog.find(rid)
            continue
        pool = pool if pool is not None else connection_pool()
        if isinstance(location, Replicas):
            for rid in ids:
                if rid not in found:
                    found[rid] = _current_copy(location, rid, pool)
            continue
        with pool.archive(location.connection, purpose="replay") as archive:
            for rid in ids:
                if rid not in found:
                    found[rid] = archive.list_recording(rid)
    return found


def _current_copy(location: Replicas, rid: int, pool: ConnectionPool) -> RecordingDescriptor | None:
    """Recording `rid` as the first of its copies that answers holds it now, under the id `rid`."""
    failures = []
    for copy in location.copies:
        try:
            with pool.archive(copy.archive.connection, purpose="replay") as archive:
                found = archive.list_recording(copy.recording_id)
        except COPY_FAILURES as ex:
            failures.append(f"controlChannel={copy.archive.connection.control_channel}: {ex}")
            continue
        return None if found is None else replace(found, recording_id=rid)
    raise ArchiveError(f"recording {rid}: none of its copies answers; tried " + "; ".join(failures))
