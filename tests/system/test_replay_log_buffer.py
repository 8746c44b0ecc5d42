"""The replay publication's log buffer: non-sparse when the replay will fill it, sparse when it is short.

A replay through Java's archive gets a non-sparse log buffer (the Java media driver's default): its pages are
allocated when the publication is added, not touched one by one while the replay streams, and a full memory
filesystem fails the add instead of raising SIGBUS in the archive mid-replay. Ours asks for the same whenever the
replay covers three terms or more (it would touch every page anyway), and keeps short replays sparse, where
allocating three terms up front would cost more than the replay. A `sparse` in the replay channel wins.

The replay is looked at while it is held back: nobody polls its subscription, so it waits at its window with its
log buffer in place.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from system.harness import SMALL_TERM, Harness, collect, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive import SourceLocation
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"


@pytest.fixture
def harness(aeron_dir: str, tmp_path: Path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def record(h: Harness, payloads: list[bytes], stream_id: int) -> int:
    publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream_id)
    channel = f"{CHANNEL}|session-id={publication.session_id}"
    h.client.start_recording(channel, stream_id, SourceLocation.LOCAL)
    recording_id = h.await_signal(RecordingSignal.START).recording_id
    offer_all(publication, payloads)
    wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position, what="recorded")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id


def log_buffers(aeron_dir: str) -> set[str]:
    directory = os.path.join(aeron_dir, "publications")
    if not os.path.isdir(directory):
        return set()
    return {name for name in os.listdir(directory) if name.endswith(".logbuffer")}


def replay_log_allocation(
    h: Harness, recording_id: int, length: int, stream_id: int, replay_channel: str = "aeron:ipc"
) -> tuple[float, object]:
    """Start a replay nobody polls yet; (allocated bytes / size of its new log buffer, its subscription)."""
    before = log_buffers(h.aeron_dir)
    subscription = h.client.replay(recording_id, replay_channel, stream_id, position=0, length=length)
    new = wait_for(lambda: sorted(log_buffers(h.aeron_dir) - before), what="the replay's log buffer")
    assert len(new) == 1, new
    st = os.stat(os.path.join(h.aeron_dir, "publications", new[0]))
    return st.st_blocks * 512 / st.st_size, subscription


def test_a_replay_of_three_terms_or_more_gets_a_non_sparse_log_and_delivers_every_message(harness: Harness) -> None:
    payloads = payloads_of([1000] * 300, seed=5)  # ~300 KiB: more than three 64 KiB terms
    recording_id = record(harness, payloads, 4401)
    allocated, subscription = replay_log_allocation(harness, recording_id, REPLAY_ALL_AND_STOP, 9401)
    try:
        assert allocated >= 1.0
        assert [g[0] for g in collect(subscription, len(payloads))] == payloads
    finally:
        subscription.close()


def test_a_short_replay_keeps_a_sparse_log(harness: Harness) -> None:
    payloads = payloads_of([1000] * 300, seed=6)
    recording_id = record(harness, payloads, 4402)
    allocated, subscription = replay_log_allocation(harness, recording_id, 8 * 1024, 9402)
    try:
        assert allocated < 0.5
        assert [g[0] for g in collect(subscription, 8)] == payloads[:8]  # the messages that start in 8 KiB
    finally:
        subscription.close()


def test_sparse_given_in_the_replay_channel_is_used_as_given(harness: Harness) -> None:
    payloads = payloads_of([1000] * 300, seed=7)
    recording_id = record(harness, payloads, 4403)
    allocated, subscription = replay_log_allocation(
        harness, recording_id, REPLAY_ALL_AND_STOP, 9403, replay_channel="aeron:ipc?sparse=true"
    )
    try:
        assert allocated < 0.5  # held at its window: at most half a term written
        assert [g[0] for g in collect(subscription, len(payloads))] == payloads
    finally:
        subscription.close()
