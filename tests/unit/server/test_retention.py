"""The retention policy alone: where a recording's new start goes for an age and/or a size limit, never the active
segment, never past a running replay, Kafka's size rule, and overrides."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.server.retention import (
    RecordingExtent,
    RetentionLimits,
    RetentionOverride,
    limits_for,
    retained_start,
    segment_bases,
)

SEG = 128 * 1024
TERM = 64 * 1024
NOW = 1_000_000


def extent(
    start: int = 0, end: int = 10 * SEG + 500, written: dict[int, int] | None = None, replay: int | None = None
) -> RecordingExtent:
    bases = range(start - start % SEG, end + 1, SEG)
    # segment k (from the first) last written at NOW - (10 - k) * 1000 ms: older toward the start
    times = written if written is not None else {b: NOW - (len(bases) - 1 - i) * 1000 for i, b in enumerate(bases)}
    return RecordingExtent(7, start, end, TERM, SEG, times, replay)


def test_the_segments_run_from_the_one_holding_the_start_to_the_one_holding_the_end():
    assert segment_bases(extent(start=SEG + 64, end=3 * SEG)) == [SEG, 2 * SEG, 3 * SEG]
    assert segment_bases(extent(start=0, end=SEG - 32)) == [0]


def test_no_limits_or_nothing_recorded_keeps_the_start():
    assert retained_start(extent(), RetentionLimits(), NOW) == 0
    assert retained_start(extent(start=4 * SEG, end=4 * SEG), RetentionLimits(max_bytes=1), NOW) == 4 * SEG


def test_age_removes_the_segments_whose_newest_data_is_older_than_the_limit_in_order():
    # segment k written at NOW - (10 - k) s: a 4.5 s limit keeps segments 6..10
    assert retained_start(extent(), RetentionLimits(max_age_ms=4_500), NOW) == 6 * SEG
    # a young segment early on stops the cut there, whatever follows
    times = {b: NOW - 60_000 for b in range(0, 11 * SEG, SEG)} | {2 * SEG: NOW}
    assert retained_start(extent(written=times), RetentionLimits(max_age_ms=1_000), NOW) == 2 * SEG


def test_the_active_segment_is_never_removed_however_old():
    times = {b: NOW - 60_000 for b in range(0, 11 * SEG, SEG)}
    assert retained_start(extent(written=times), RetentionLimits(max_age_ms=1), NOW) == 10 * SEG
    assert retained_start(extent(written=times), RetentionLimits(max_bytes=1), NOW) == 10 * SEG


def test_size_keeps_at_least_the_limit_as_kafka_does():
    # 10 segments and 500 bytes recorded: a limit of 3 segments keeps 3 segments + the 500 bytes of the last one
    assert retained_start(extent(), RetentionLimits(max_bytes=3 * SEG), NOW) == 7 * SEG
    # one byte more than what 3 segments + 500 hold: one segment more is kept
    assert retained_start(extent(), RetentionLimits(max_bytes=3 * SEG + 501), NOW) == 6 * SEG


def test_both_limits_cut_to_the_stricter():
    assert retained_start(extent(), RetentionLimits(max_age_ms=8_500, max_bytes=3 * SEG), NOW) == 7 * SEG
    assert retained_start(extent(), RetentionLimits(max_age_ms=1_500, max_bytes=3 * SEG), NOW) == 9 * SEG


def test_a_running_replay_pins_its_segment_and_everything_after_it():
    limits = RetentionLimits(max_bytes=SEG)
    assert retained_start(extent(replay=4 * SEG + 96), limits, NOW) == 4 * SEG
    assert retained_start(extent(replay=4 * SEG), limits, NOW) == 4 * SEG
    assert retained_start(extent(replay=0), limits, NOW) == 0


def test_a_start_inside_a_segment_moves_to_a_segment_base():
    assert retained_start(extent(start=SEG + 4096), RetentionLimits(max_bytes=2 * SEG), NOW) == 8 * SEG


def test_unknown_write_times_keep_the_segment():
    times = {b: NOW - 60_000 for b in range(0, 11 * SEG, SEG)}
    del times[3 * SEG]
    assert retained_start(extent(written=times), RetentionLimits(max_age_ms=1_000), NOW) == 3 * SEG


def test_limits_refuse_zero_and_negative_values():
    with pytest.raises(ValueError, match="age must be > 0"):
        RetentionLimits(max_age_ms=0)
    with pytest.raises(ValueError, match="size must be > 0"):
        RetentionLimits(max_bytes=-5)


def test_the_first_matching_override_wins():
    default = RetentionLimits(max_age_ms=1_000)
    md = RetentionOverride(1001, RetentionLimits(max_bytes=SEG), "endpoint=md:")
    any_1001 = RetentionOverride(1001, RetentionLimits(max_age_ms=9))
    overrides = [md, any_1001]
    assert limits_for(1001, "aeron:udp?endpoint=md:4000", default, overrides) == md.limits
    assert limits_for(1001, "aeron:ipc", default, overrides) == any_1001.limits
    assert limits_for(1002, "aeron:udp?endpoint=md:4000", default, overrides) == default
