"""Retention with a real archive: a live recording kept within a size or an age by whole segments from its start,
the retained range replayed byte for byte, a running replay never cut off, overrides by stream, and disk use flat
while a recording runs far past its limit (`slow`)."""

from __future__ import annotations

import os
import time

import pytest
from system.harness import SMALL_SEGMENT, SMALL_TERM, Harness, payloads_of, wait_for

from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.server.retention import RetentionLimits, RetentionOverride
from aeron_archive_spark.archive.storage.frames import to_int32
from aeron_archive_spark.archive.storage.segments import segment_files

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
SEG = SMALL_SEGMENT


class Live:
    """A live recording of IPC stream `stream_id`: publish, and remember each message's (position, payload)."""

    def __init__(self, h: Harness, stream_id: int) -> None:
        self.h = h
        h.client.start_recording(CHANNEL, stream_id)
        self.publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream_id)
        self.recording_id = h.await_signal(RecordingSignal.START, count=len(h.signals.of(RecordingSignal.START)) + 1
                                           ).recording_id
        self.messages: list[tuple[int, bytes]] = []
        self.seed = 0
        LIVES.append(self)

    def publish(self, count: int, size: int = 1000) -> None:
        self.seed += 1
        for payload in payloads_of([size] * count, seed=self.seed):
            while (end := self.publication.offer(payload)) <= 0:
                time.sleep(0.0001)
            self.messages.append((end - framed(payload), payload))  # a PAD may come before it, at a term's end
        wait_for(lambda: self.h.client.get_recording_position(self.recording_id) == self.publication.position,
                 10, "recorded")

    def start(self) -> int:
        return int(self.h.client.get_start_position(self.recording_id))

    def replayed(self, start: int) -> list[tuple[int, bytes]]:
        """The messages a replay from `start` to the recorded position gives, as (position, payload)."""
        end = self.h.client.get_recording_position(self.recording_id)
        subscription = self.h.client.aeron.add_subscription("aeron:ipc", 9911)
        try:
            session = self.h.client.start_replay(self.recording_id, start, end - start, "aeron:ipc", 9911)
            image = wait_for(lambda: subscription.image_by_session_id(to_int32(session)), 10, "the replay image")
            got: list[tuple[int, bytes]] = []
            wait_for(lambda: image.position >= end, 20, "the replay",
                     poll=lambda: image.poll(lambda d, hd: got.append((hd.position - framed(d), bytes(d))), 100))
            return got
        finally:
            subscription.close()


LIVES: list[Live] = []


def framed(payload: bytes | memoryview) -> int:
    """The aligned length of an unfragmented message's frame."""
    return (len(payload) + 32 + 31) & ~31


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), retention=RetentionLimits(max_bytes=3 * SEG),
                retention_check_interval_ms=50,
                retention_overrides=(RetentionOverride(7602, RetentionLimits(max_age_ms=400)),
                                     RetentionOverride(7603, RetentionLimits())))
    yield h
    while LIVES:
        LIVES.pop().publication.close()
    h.close()


def files_of(h: Harness, recording_id: int) -> list[int]:
    return sorted(s.base_position for s in segment_files(h.ctx.archive_dir, recording_id))


def test_a_live_recording_is_kept_within_its_size_by_whole_segments_and_replays_exactly(harness):
    live = Live(harness, 7601)
    live.publish(1300)  # ~1.3 MB: ten segments of 128 KiB
    recorded = live.publication.position
    wait_for(lambda: recorded - live.start() <= 4 * SEG, 10, "retention to purge")
    start = live.start()
    assert start % SEG == 0 and 3 * SEG <= recorded - start <= 4 * SEG  # Kafka's rule: at least the limit
    wait_for(lambda: files_of(harness, live.recording_id)[0] == start, 10, "the files below the start to go")
    kept = [(p, v) for p, v in live.messages if p >= start]
    assert live.replayed(start) == kept
    # it goes on: more data, the start follows, the recording stays live
    live.publish(500)
    wait_for(lambda: live.start() > start, 10, "the start to follow")
    assert live.publication.position - live.start() <= 4 * SEG
    assert harness.archive.conductor.retention.purges >= 2


def test_a_running_replay_is_never_cut_off(harness):
    live = Live(harness, 7604)
    live.publish(1300)
    wait_for(lambda: live.publication.position - live.start() <= 4 * SEG, 10, "retention to purge")
    pinned_at = live.start()
    # a replay from the start whose reader reads nothing: it stays in its first segment
    subscription = harness.client.aeron.add_subscription("aeron:ipc", 9912)
    try:
        harness.client.start_replay(live.recording_id, pinned_at, -1, "aeron:ipc", 9912)
        wait_for(lambda: harness.archive.conductor._replays, 10, "the replay")
        replay = next(iter(harness.archive.conductor._replays.values()))
        for _ in range(8):  # through several retention checks: never past the segment the replay has reached
            live.publish(100)
            reached = replay.replay_position
            assert live.start() <= reached - reached % SEG
        assert live.publication.position - live.start() > 4 * SEG  # held back by the replay
    finally:
        subscription.close()
        harness.client.stop_all_replays(live.recording_id)
    wait_for(lambda: live.publication.position - live.start() <= 4 * SEG, 10, "retention once the replay is gone")


def test_age_and_overrides_by_stream(harness):
    by_age = Live(harness, 7602)  # override: 400 ms
    unlimited = Live(harness, 7603)  # override: no limits
    by_age.publish(600)
    unlimited.publish(600)
    time.sleep(0.6)
    last = by_age.publication.position - by_age.publication.position % SEG
    wait_for(lambda: by_age.start() == last, 10, "every segment but the active one to age out")
    assert unlimited.start() == 0 and files_of(harness, unlimited.recording_id)[0] == 0


@pytest.mark.slow
def test_disk_use_stays_flat_while_a_live_recording_runs_far_past_its_limit(harness):
    live = Live(harness, 7605)
    sizes = []
    for round_ in range(200):  # ~200 MB through a 384 KiB limit
        live.publish(1000)
        wait_for(lambda: live.publication.position - live.start() <= 4 * SEG, 10, "retention")
        wait_for(lambda: files_of(harness, live.recording_id)[0] == live.start(), 10, "files deleted")
        sizes.append(sum(os.path.getsize(os.path.join(harness.ctx.archive_dir, s.name))
                         for s in segment_files(harness.ctx.archive_dir, live.recording_id)))
        if round_ % 50 == 49:
            start = live.start()
            assert live.replayed(start) == [(p, v) for p, v in live.messages if p >= start]
    assert max(sizes) <= 5 * SEG and max(sizes[100:]) <= max(sizes[:100])
