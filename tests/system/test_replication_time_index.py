"""A replica made from our archive carries the source's times (its `.tix` files are the source's for the replicated
range), with Java's signals in Java's order: a stopped recording made in bursts, a bound then an extension, a live
merge (the replay's part dated by the source, what the replica records live by itself); and a source that never
answers the time index leaves the replica its own times, the replication ending as it does without the index."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from system.harness import SMALL_SEGMENT, SMALL_TERM, Harness, offer_all, payloads_of, wait_for
from system.test_replication import await_signals, free_udp_port, live_channel, replicate, replication_channel

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.storage.time_index import read_samples, read_time_index, time_index_file_name

S = RecordingSignal
CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
INTERVAL_NS = 5_000_000


@pytest.fixture
def src(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "src"), time_index_interval_ns=INTERVAL_NS)
    yield h
    h.close()


@pytest.fixture
def dst(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "dst"), time_index_interval_ns=INTERVAL_NS,
                replication_timeout_ns=3_000_000_000)
    yield h
    h.close()


def record_bursts(h: Harness, stream_id: int, bursts: int = 8, gap_s: float = 0.03) -> tuple[int, int]:
    """A recording made in bursts `gap_s` apart (~60 KB each: several 128 KiB segments), stopped; (id, stop)."""
    h.client.start_recording(CHANNEL, stream_id)
    publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream_id)
    recording_id = h.await_signal(S.START, count=len(h.signals.of(S.START)) + 1).recording_id
    for n in range(bursts):
        offer_all(publication, payloads_of([1000] * 60, seed=n))
        wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position, 10, "recorded")
        time.sleep(gap_s)
    stop = publication.position
    h.client.stop_recording(CHANNEL, stream_id)
    h.await_signal(S.STOP, recording_id)
    publication.close()
    return recording_id, stop


def file_samples(h: Harness, recording_id: int, base: int) -> list[tuple[int, int]]:
    samples = read_samples(os.path.join(h.ctx.archive_dir, time_index_file_name(recording_id, base)))
    return list(zip(samples["time_ns"].tolist(), samples["position"].tolist(), strict=True))


def assert_same_times(src: Harness, src_id: int, dst: Harness, dst_id: int, start: int, stop: int) -> None:
    """Equal samples over [start, stop): as a reader dates them, and file by file for the whole segments."""
    theirs = read_time_index(src.ctx.archive_dir, src_id, start, stop)
    ours = read_time_index(dst.ctx.archive_dir, dst_id, start, stop)
    assert len(theirs.positions) >= 4  # a sample per burst at least, and one per segment
    assert ours.positions.tolist() == theirs.positions.tolist()
    assert ours.times_ns.tolist() == theirs.times_ns.tolist()
    assert ours.interval_ns == theirs.interval_ns
    for base in range(start - start % SMALL_SEGMENT, stop - SMALL_SEGMENT + 1, SMALL_SEGMENT):
        if base >= start:
            assert file_samples(dst, dst_id, base) == file_samples(src, src_id, base), base


def test_a_stopped_recording_made_in_bursts_is_replicated_with_the_source_s_times(src, dst):
    src_id, stop = record_bursts(src, 6101)
    time.sleep(0.05)  # the replica's own clock would now date every byte later than the source did
    replication_id = replicate(dst, src, src_id, replication_channel="aeron:udp?endpoint=localhost:0")
    events = await_signals(dst, replication_id, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = events[0].recording_id
    assert stop > 3 * SMALL_SEGMENT
    assert_same_times(src, src_id, dst, dst_id, 0, stop)
    # the replica's index answers through its archive as the source's does
    assert dst.client.time_index(dst_id, 0).times_ns.tolist() == src.client.time_index(src_id, 0).times_ns.tolist()
    times = read_time_index(src.ctx.archive_dir, src_id).times_ns
    when = int(times[len(times) // 2]) + 1
    assert dst.client.position_at_time(dst_id, when) == src.client.position_at_time(src_id, when)


def test_a_bound_then_an_extension_each_carry_the_source_s_times(src, dst):
    src_id, stop = record_bursts(src, 6102)
    bound = 2 * SMALL_SEGMENT + 4096
    first = replicate(dst, src, src_id, replication_channel="aeron:udp?endpoint=localhost:0", stop_position=bound)
    events = await_signals(dst, first, S.STOP)
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.REPLICATE_END, S.STOP]
    dst_id = events[0].recording_id
    held = dst.client.get_stop_position(dst_id)
    assert_same_times(src, src_id, dst, dst_id, 0, held)
    time.sleep(0.05)
    second = replicate(dst, src, src_id, replication_channel="aeron:udp?endpoint=localhost:0",
                       dst_recording_id=dst_id)
    events = await_signals(dst, second, S.STOP)
    assert [e.signal for e in events] == [S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    assert_same_times(src, src_id, dst, dst_id, 0, stop)


def test_a_live_merge_dates_the_replayed_part_by_the_source_and_the_live_part_by_the_replica(src, dst):
    live = live_channel(free_udp_port())
    src.client.start_recording(live, 6103, SourceLocation.LOCAL)
    publication = src.client.aeron.add_publication(live, 6103)
    src_id = src.await_signal(S.START).recording_id
    for n in range(6):  # ~360 KB in bursts before the replication: the merge lands in the third segment or later
        for p in payloads_of([1000] * 60, seed=n):
            while publication.offer(p) <= 0:
                time.sleep(0.0001)
        time.sleep(0.03)
    wait_for(lambda: src.client.get_recording_position(src_id) == publication.position, 10, "recorded")
    time.sleep(0.05)
    replication_id = replicate(dst, src, src_id, live_destination=live, replication_channel=replication_channel("w"))
    merged = await_signals(dst, replication_id, S.REPLICATE_END, timeout=30)
    assert [e.signal for e in merged] == [S.REPLICATE, S.EXTEND, S.MERGE, S.REPLICATE_END]
    dst_id, merge_position = merged[0].recording_id, merged[2].position
    merge_base = merge_position - merge_position % SMALL_SEGMENT
    assert merge_base >= 2 * SMALL_SEGMENT
    # whole segments before the merge's: the source's times; the merge's segment: the replica's own
    assert_same_times(src, src_id, dst, dst_id, 0, merge_base)
    own = file_samples(dst, dst_id, merge_base)
    assert own[0][1] == merge_base and own[0][0] > file_samples(src, src_id, merge_base)[-1][0]
    for p in payloads_of([1000] * 100, seed=9):
        while publication.offer(p) <= 0:
            time.sleep(0.0001)
    target = publication.position
    wait_for(lambda: dst.client.get_recording_position(dst_id) >= target, 20, "the replica to record the live stream")
    times = read_time_index(dst.ctx.archive_dir, dst_id, 0, target).times_ns
    assert bool(np.all(np.diff(times) >= 0))
    publication.close()
    src.client.stop_recording(live, 6103)
    await_signals(dst, replication_id, S.STOP, timeout=30)


def test_a_source_that_dies_before_answering_leaves_the_replica_its_own_times(src, dst):
    src_id, stop = record_bursts(src, 6104, bursts=4)
    asked = threading.Event()
    conductor = src.archive.conductor
    conductor.time_index = lambda session, request: asked.set()  # never answered: the source is about to die
    replication_id = replicate(dst, src, src_id, replication_channel="aeron:udp?endpoint=localhost:0")
    wait_for(asked.is_set, 20, "the time index request", poll=dst.client.poll_for_recording_signals)
    source_stopped_ns = time.time_ns()
    src.close()
    started = time.monotonic()
    events = await_signals(dst, replication_id, S.STOP)
    assert time.monotonic() - started < 10
    assert [e.signal for e in events] == [S.REPLICATE, S.EXTEND, S.SYNC, S.REPLICATE_END, S.STOP]
    dst_id = events[0].recording_id
    assert dst.client.get_stop_position(dst_id) == stop
    own = read_time_index(dst.ctx.archive_dir, dst_id, 0, stop)
    assert len(own.positions) > 0 and int(own.positions[0]) == 0
    assert int(own.times_ns[-1]) < source_stopped_ns  # the replica's own times, recorded before the source died
    theirs = read_time_index(src.ctx.archive_dir, src_id, 0, stop)
    assert int(own.times_ns[0]) > int(theirs.times_ns[-1])  # ... and after the source recorded the last byte
    assert bool(np.all(np.diff(own.times_ns) >= 0))
