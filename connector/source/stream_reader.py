"""`spark.readStream.format("aeron-archive")`: micro-batches over recording positions, tailing live recordings.

Call order (PySpark 4.3, see docs): `initialOffset` only for a new checkpoint (twice: memoized), then per trigger
`latestOffset(start, limit)` -> `reportLatestOffset` -> `partitions(start, end)`, with `commit(end)` lagging one
batch. A restarted query replays its last planned batch straight through `partitions(start, end)` with the
checkpointed offsets, so `partitions` depends on its arguments only (plus descriptor facts that never change).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.ranges import RecordingFacts
from aeron_archive_spark.archive.tables.recording_source import stopped_positions
from aeron_archive_spark.archive.tables.selection_listing import SelectionListing
from aeron_archive_spark.connector.source.batch_reader import (
    DataLossError,
    starting_position,
)
from aeron_archive_spark.connector.source.offsets import from_offset, to_offset
from aeron_archive_spark.connector.source.partition import plan_partitions
from aeron_archive_spark.connector.source.reader import ReaderBase

log = logging.getLogger(__name__)


def share_budget(needs: Mapping[int, int], budget: int) -> dict[int, int]:
    """Split `budget` bytes fairly (water-filling): small needs are met in full, the rest share equally."""
    shares: dict[int, int] = {}
    remaining = budget
    pending = sorted(needs.items(), key=lambda item: (item[1], item[0]))
    for index, (rid, need) in enumerate(pending):
        share = remaining // (len(pending) - index)
        take = min(need, share)
        shares[rid] = take
        remaining -= take
    return shares


class AeronArchiveStreamReader(ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets `{"<recordingId>": position}`; admission control by bytes; AvailableNow with a fixed target."""

    _UNPICKLED = (*ReaderBase._UNPICKLED, "_listing")

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._setup(options, schema, streaming=True)
        self._initial: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        self._target: dict[int, int] | None = None
        self._descriptors: dict[int, RecordingDescriptor] = {}
        self._listing: SelectionListing | None = None
        # recording id -> (planned end, surviving end) of a batch cut short by data loss (failOnDataLoss=false):
        # the next batch starting at that planned end goes back to the surviving end (see `_rewound`).
        self._rewinds: dict[int, tuple[int, int]] = {}
        self._last_trigger = time.monotonic()

    # -- offsets ---------------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        if self._initial is None:
            options = self.options
            source = self.source
            positions = {}
            for rid, descriptor in source.selected().items():
                end = source.planning_end(descriptor)
                positions[rid] = starting_position(source, descriptor, options, end)
            self._initial = to_offset(positions)
            log.info(
                "initial offset of %s in the %s: %s",
                options.recordings.selection.describe(),
                source.describe(),
                self._initial,
            )
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of the AvailableNow run: what is recorded now; later data and recordings wait.

        Recordings that do not exist are left out rather than refused: a new query's `initialOffset` refuses an
        unknown recording anyway, and for a restarted one a recording purged since its checkpoint is data loss,
        which `latestOffset` reports (or carries on without, failOnDataLoss=false).
        """
        source = self.source
        self._target = {rid: source.planning_end(d) for rid, d in sorted(source.list_selected().items())}
        log.info(
            "Trigger.AvailableNow: reading %s up to %s",
            self.options.recordings.selection.describe(),
            to_offset(self._target),
        )

    @property
    def listing(self) -> SelectionListing:
        """The triggers' listing of the selection (the source's: a new one if the source was reopened)."""
        source = self.source
        listing = getattr(self, "_listing", None)  # absent on an unpickled copy
        if listing is None or listing.source is not source:
            listing = self._listing = SelectionListing(source)
        return listing

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        starts = from_offset(start, "start offset")
        source = self.source
        listed = self.listing.current(starts)
        self._descriptors = listed
        explicit = self.options.recordings.selection.recording_ids
        ids = set(listed) | set(starts)
        if explicit is not None:
            dropped = sorted(rid for rid in starts if rid not in explicit)
            if dropped:
                log.warning(
                    "recording %d is in the checkpoint but not selected by %s; it is no longer read",
                    dropped[0],
                    self.options.recordings.selection.describe(),
                )
            ids &= set(explicit)
        if self._target is not None:
            ids = {rid for rid in ids if rid in self._target or rid in starts}

        begins: dict[int, int] = {}
        ends: dict[int, int] = {}
        latest: dict[int, int] = {}
        for rid in sorted(ids):
            descriptor = listed.get(rid)
            if descriptor is None:
                if rid in starts:
                    self._vanished(rid, starts[rid])
                continue  # an explicitly named recording that does not exist yet: nothing to read
            stop = descriptor.stop_position
            settled = starts.get(rid) == stop and not descriptor.is_active and descriptor.start_position <= stop
            if settled and rid not in self._rewinds:  # read to its stop: what the checks below conclude, unasked
                latest[rid] = begins[rid] = ends[rid] = stop
                continue
            available = source.planning_end(descriptor, known_boundary=starts.get(rid))
            checkpointed = starts.get(rid, descriptor.start_position)
            begin = self._rewound(rid, checkpointed)
            if begin == checkpointed:
                begin = self._checked_start(descriptor, begin, available)
            latest[rid] = max(begin, available)
            if begin != checkpointed:
                # A rewind (data lost below the checkpoint): this batch only moves the offset back, reading
                # nothing, so its end offset alone says where the next batch starts, also after a restart.
                begins[rid] = ends[rid] = begin
                continue
            if self._target is not None:
                available = min(available, max(begin, self._target.get(rid, begin)))
            begins[rid] = begin
            ends[rid] = max(begin, available)
        self._latest = to_offset(latest)  # what is recorded, whatever the limits: the lag listener's reference

        needs = {rid: ends[rid] - begins[rid] for rid in ends}
        total = sum(needs.values())
        min_bytes = self.options.min_bytes_per_trigger
        if (
            min_bytes is not None
            and self._target is None
            and 0 < total < min_bytes
            and (time.monotonic() - self._last_trigger) * 1000 < self.options.max_trigger_delay_ms
        ):
            log.debug("%d new bytes < minBytesPerTrigger %d: skipping this trigger", total, min_bytes)
            return start
        if isinstance(limit, ReadMaxBytes) and total > limit.max_bytes:
            shares = share_budget(needs, limit.max_bytes)
            for rid, share in shares.items():
                if share < needs[rid]:
                    ends[rid] = self._cut(listed[rid], begins[rid], begins[rid] + share, ends[rid])
        end = to_offset(ends)
        if end == start:
            return start  # no new data: Spark skips the trigger
        self._last_trigger = time.monotonic()
        return end

    def _cut(self, descriptor: RecordingDescriptor, begin: int, cut: int, available: int) -> int:
        """End at the last message boundary <= cut, but always at least one whole message."""
        source = self.source
        end = source.boundary_at_or_before(descriptor, cut, begin, available)
        if end <= begin:
            end = source.first_boundary_after(descriptor, begin, available)
        return end

    def _vanished(self, rid: int, position: int) -> None:
        message = (
            f"recording {rid} no longer exists in the {self.source.describe()} (checkpointed position "
            f"{position}): it was purged or deleted"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to carry on without it")
        log.warning("%s; carrying on without it", message)

    def _checked_start(self, descriptor: RecordingDescriptor, begin: int, available: int) -> int:
        """`begin`, or where to continue if data at `begin` was lost (failOnDataLoss=false)."""
        rid = descriptor.recording_id
        if begin < descriptor.start_position:
            message = (
                f"recording {rid} was truncated or purged: its start position {descriptor.start_position} is "
                f"above the checkpointed position {begin}"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to continue from the new start")
            log.warning("%s; continuing from %d", message, descriptor.start_position)
            return descriptor.start_position
        if begin > available:
            # A checkpointed position was recorded once, and recordings only grow: a recorded end below it means
            # a truncation (if the recording was extended since, only up to `available` so far).
            if descriptor.is_active:
                now = f"recorded position {available}"
            else:
                now = f"stop position {descriptor.stop_position}"
            message = f"recording {rid} was truncated: its {now} is below the checkpointed position {begin}"
            if self.options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to continue from the new stop position")
            log.warning("%s; continuing from %d", message, available)
            return available
        return begin

    def _rewound(self, rid: int, begin: int) -> int:
        """Where a batch starting at `begin` starts: the surviving end if `begin` is the planned end of a batch
        this reader cut short by a truncation (failOnDataLoss=false), else `begin`.

        Spark starts the next batch at the cut batch's planned end, which it logged before the truncation. The
        recording may already be extended past that end again (new data from the truncation point on), where
        the planned end is no message boundary of the new data and the data below it would be skipped: so the
        next batch goes back to the surviving end. (If the query stops before planning that batch, a restarted
        reader no longer knows: `_checked_start` still goes back while the recorded end is below the planned
        end; see the README's failOnDataLoss section.)
        """
        rewind = self._rewinds.pop(rid, None)
        if rewind is None or rewind[0] != begin:
            return begin
        log.warning(
            "recording %d: going back from the planned end %d of the batch cut short by data loss to %d, where "
            "what is recorded continues",
            rid,
            begin,
            rewind[1],
        )
        return rewind[1]

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    # -- planning --------------------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        starts = from_offset(start, "start offset")
        ends = from_offset(end, "end offset")
        descriptors = self._descriptors
        replayed = any(rid not in descriptors for rid in ends)
        if replayed:  # a batch replayed after a restart: the recordings may have changed since it was planned
            descriptors = self._descriptors = self.source.list_selected()
        ranges = []
        for rid in sorted(ends):
            descriptor = descriptors.get(rid)
            if descriptor is None:
                self._vanished(rid, starts.get(rid, ends[rid]))
                continue
            stop = ends[rid]
            begin = starts.get(rid, descriptor.start_position)
            if begin < descriptor.start_position:
                begin = self._checked_start(descriptor, begin, stop)
            if stop > begin:
                stop = self._surviving_end(descriptor, begin, stop, replayed)
            if stop > begin:
                ranges.append((RecordingFacts.of(descriptor), begin, stop, stop))
        partitions = plan_partitions(
            ranges,
            self.options.max_bytes_per_partition,
            self.options.open_cost_in_bytes,
            self.source.location(),
            stopped_positions(descriptors.values()),
            self.source.placements({facts.recording_id: limit for facts, _, _, limit in ranges}),
        )
        log.debug("micro-batch %s -> %s: %d partitions", start, end, len(partitions))
        return partitions

    def _surviving_end(self, descriptor: RecordingDescriptor, begin: int, stop: int, replayed: bool) -> int:
        """`stop`, or the end of what is left of `[begin, stop)` if the recording was truncated below `stop`.

        A batch's end offset is logged before it runs, so a truncation can land between planning and reading;
        a restarted query re-runs its last planned batch however long ago it was planned. Then failOnDataLoss
        =true fails naming the recording and positions, and false delivers what is left, up to the last message
        boundary at or before the new stop, logs what was lost, and has the next batch go back there
        (`_rewound`). An active recording cannot have been truncated since this reader listed it; in a replayed
        batch (fresh descriptors) it may have been truncated and extended again, so its recorded end is asked.
        """
        if descriptor.is_active and not replayed:
            return stop
        source = self.source
        recorded = source.recorded_end(descriptor) if descriptor.is_active else descriptor.stop_position
        if recorded >= stop:
            return stop
        rid = descriptor.recording_id
        now = f"to {recorded}" if not descriptor.is_active else f"(and extended again, to {recorded} so far)"
        message = (
            f"recording {rid} was truncated {now} after micro-batch [{begin}, {stop}) was planned, below its end {stop}"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                message + "; set failOnDataLoss=false to read what is left and continue from the new stop position"
            )
        survived = source.safe_end(descriptor, known_boundary=begin if begin <= recorded else None)
        kept = min(max(begin, survived), stop)
        delivered = f"delivering [{begin}, {kept}) ({kept - begin} bytes)" if kept > begin else "delivering nothing"
        log.warning(
            "%s: %s; [%d, %d) (%d bytes) is lost; the next micro-batch continues from %d",
            message,
            delivered,
            kept,
            stop,
            stop - kept,
            survived,
        )
        self._rewinds[rid] = (stop, survived)
        return kept

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the archive keeps every recording until it is truncated or purged by its owner."""
        log.debug("committed %s", end)

    def stop(self) -> None:
        self._close_source()
