"""Retention: how much of each recording the archive keeps, by age and by size, as Kafka's `retention.ms` and
`retention.bytes` keep a topic's log (no Aeron archive has this; Java's answer is segment management by hand).

A recording is cut only from its start and only by whole segment files, exactly as a `PurgeSegments` request cuts it
(the archive's own purge path does the work: start position moved up, files deleted off the conductor's path, a
DELETE signal): this module only decides where each recording's new start is. It is pure (no files, no clock of its
own): the conductor gives it each recording's extent, the last-write time of each of its segment files and the
lowest position a running replay of it has reached, and purges to what it answers.

The rules, Kafka's where Kafka has one:
- **Never the active segment.** The segment holding the recorded position (the one being written, for a live
  recording; the last one, for a stopped one) is never removed, whatever its age or size (Kafka never deletes the
  active segment).
- **Age** (`max_age_ms`): a segment goes once its newest data is older than the limit; its newest data is as old as
  the file's last write (its mtime). Segments are removed in order from the start: one younger than the limit keeps
  every segment after it.
- **Size** (`max_bytes`): oldest segments go while what would remain is still at least the limit (Kafka's rule:
  the log may exceed the limit by up to one segment, never fall below it by a deletion).
- **Never what a replay is reading.** The new start never passes the segment a running replay of the recording has
  reached: a reader (a Spark partition replaying through the archive, a replication, any client) is never cut off
  in the middle; its segment goes at a later check.
Both limits may be set; a recording is then cut to the stricter of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.segments import segment_file_base_position

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    """How much of a recording to keep: by age of its data (ms) and/or by size (bytes); None: no limit."""

    max_age_ms: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_age_ms is not None and self.max_age_ms <= 0:
            raise ValueError(f"retention age must be > 0 ms, got {self.max_age_ms}")
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise ValueError(f"retention size must be > 0 bytes, got {self.max_bytes}")

    @property
    def is_set(self) -> bool:
        return self.max_age_ms is not None or self.max_bytes is not None

    def describe(self) -> str:
        parts = []
        if self.max_age_ms is not None:
            parts.append(f"age {self.max_age_ms} ms")
        if self.max_bytes is not None:
            parts.append(f"size {self.max_bytes} bytes")
        return " and ".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class RecordingExtent:
    """What retention needs of one recording: where it starts and ends now, its segment arithmetic, when each of
    its segment files was last written (by segment base position), and the lowest position any running replay of
    it has reached (None: no replay)."""

    recording_id: int
    start_position: int
    end_position: int  # the recorded position (live) or the stop position
    term_length: int
    segment_length: int
    last_write_ms: Mapping[int, int]  # segment base position -> last write time of its file (ms since the epoch)
    lowest_replay_position: int | None = None


def segment_bases(extent: RecordingExtent) -> list[int]:
    """The base positions of the recording's segments, from the one holding its start to the one holding its end."""
    first = segment_file_base_position(
        extent.start_position, extent.start_position, extent.term_length, extent.segment_length
    )
    last = segment_file_base_position(
        extent.start_position,
        max(extent.end_position, extent.start_position),
        extent.term_length,
        extent.segment_length,
    )
    return list(range(first, last + 1, extent.segment_length))


def retained_start(extent: RecordingExtent, limits: RetentionLimits, now_ms: int) -> int:
    """Where the recording should start to keep within `limits` now: the base of a segment (a purge's new start
    position), or its current start position when nothing is to go (see the module docstring)."""
    if not limits.is_set or extent.end_position <= extent.start_position:
        return extent.start_position
    bases = segment_bases(extent)
    # Removable: every segment before the one holding the end, and before the one a replay has reached.
    ceiling = bases[-1]
    if extent.lowest_replay_position is not None:
        replay_base = segment_file_base_position(
            extent.start_position,
            max(extent.lowest_replay_position, extent.start_position),
            extent.term_length,
            extent.segment_length,
        )
        ceiling = min(ceiling, replay_base)
    removable = [base for base in bases if base < ceiling]
    if not removable:
        return extent.start_position
    cut = 0  # how many of the removable segments go
    if limits.max_age_ms is not None:
        oldest_kept = now_ms - limits.max_age_ms
        by_age = 0
        for base in removable:
            written = extent.last_write_ms.get(base)
            if written is None or written >= oldest_kept:
                break
            by_age += 1
        cut = max(cut, by_age)
    if limits.max_bytes is not None:
        by_size = 0
        for base in removable:
            after = extent.end_position - (base + extent.segment_length)  # what remains once this segment goes
            if after < limits.max_bytes:
                break
            by_size += 1
        cut = max(cut, by_size)
    if cut == 0:
        return extent.start_position
    return bases[cut]


def limits_for(
    stream_id: int, channel: str, default: RetentionLimits, overrides: Sequence[RetentionOverride]
) -> RetentionLimits:
    """The limits of a recording of `stream_id` on `channel`: the first override that matches it, else `default`."""
    for override in overrides:
        if override.matches(stream_id, channel):
            return override.limits
    return default


@dataclass(frozen=True, slots=True)
class RetentionOverride:
    """Limits of their own for the recordings of a stream id, optionally only those whose original channel contains
    a fragment (as the Spark source's `channel` option and ListRecordingsForUri match channels)."""

    stream_id: int
    limits: RetentionLimits
    channel_fragment: str = ""

    def matches(self, stream_id: int, channel: str) -> bool:
        return stream_id == self.stream_id and self.channel_fragment in channel


class RetentionHost(Protocol):
    """What the retention check needs of the conductor (its thread): the recordings, how far each is recorded, where
    running replays of each are, the last write of a segment file, and the purge itself."""

    def retention_recordings(self) -> Iterable[RecordingDescriptor]: ...

    def recorded_position(self, recording_id: int) -> int: ...

    def replay_positions(self, recording_id: int) -> list[int]: ...

    def segment_last_write_ms(self, recording_id: int, base_position: int) -> int | None: ...

    def purge_segments_to(self, recording_id: int, new_start_position: int) -> int: ...


class _LastWrites(dict[int, int]):
    """Segment base -> last write (ms), stat'ed only when the age rule asks (a size rule needs none)."""

    def __init__(self, host: RetentionHost, recording_id: int) -> None:
        super().__init__()
        self._host = host
        self._recording_id = recording_id

    def get(self, base: int, default: Any = None) -> Any:
        if base not in self:
            written = self._host.segment_last_write_ms(self._recording_id, base)
            if written is None:
                return default
            self[base] = written
        return self[base]


class RetentionCheck:
    """Applies the limits to every recording every `interval_ms` on the conductor's duty cycle: computes each
    recording's retained start (`retained_start`) and purges whole segments up to it through the conductor's own
    purge path (start position moved, files deleted off the conductor's path). Logged and counted."""

    def __init__(
        self,
        host: RetentionHost,
        default: RetentionLimits,
        overrides: Sequence[RetentionOverride],
        interval_ms: int,
        epoch_ms: Callable[[], int],
    ) -> None:
        self._host = host
        self._default = default
        self._overrides = tuple(overrides)
        self._interval_ns = interval_ms * 1_000_000
        self._epoch_ms = epoch_ms
        self._next_ns: int | None = None
        self.checks = 0
        self.purges = 0  # purges made
        self.purged_bytes = 0  # bytes of recording they removed
        self.failures = 0

    @property
    def is_enabled(self) -> bool:
        return self._default.is_set or any(o.limits.is_set for o in self._overrides)

    def do_work(self, now_ns: int) -> int:
        if self._next_ns is not None and now_ns < self._next_ns:
            return 0
        self._next_ns = now_ns + self._interval_ns
        self.checks += 1
        now_ms = self._epoch_ms()
        work = 0
        for d in list(self._host.retention_recordings()):
            limits = limits_for(d.stream_id, d.original_channel, self._default, self._overrides)
            if not limits.is_set:
                continue
            rid = d.recording_id
            end = d.stop_position if not d.is_active else self._host.recorded_position(rid)
            replays = self._host.replay_positions(rid)
            extent = RecordingExtent(
                rid,
                d.start_position,
                end,
                d.term_buffer_length,
                d.segment_file_length,
                _LastWrites(self._host, rid),
                min(replays) if replays else None,
            )
            new_start = retained_start(extent, limits, now_ms)
            if new_start <= d.start_position:
                continue
            try:
                files = self._host.purge_segments_to(rid, new_start)
            except ArchiveError as ex:  # a delete already running, a replay that started meanwhile: next time
                self.failures += 1
                log.info("retention: recording %d not purged to %d this time: %s", rid, new_start, ex)
                continue
            self.purges += 1
            self.purged_bytes += new_start - d.start_position
            work += 1
            log.info(
                "retention (%s): recording %d purged from %d to %d (%d segment file(s), %d bytes)",
                limits.describe(),
                rid,
                d.start_position,
                new_start,
                files,
                new_start - d.start_position,
            )
        return work
