"""`ReplayMerge` against our archive, as Java's ReplayMergeTest drives Java's: a late subscriber replays a live
recording from its start on a manual multi-destination subscription while the publisher keeps publishing, joins the
live stream and gets every message exactly once, in order, up to the publication's position; and the misuse Java
refuses is refused."""

from __future__ import annotations

import time

import pytest
from conftest import free_udp_port
from system.harness import Harness, payloads_of, wait_for

from aeron_archive_spark.archive.client.replay_merge import ReplayMerge, ReplayMergeState
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation

STREAM_ID = 7401
TERM = 64 * 1024


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def offer(publication, payload: bytes, merge: ReplayMerge | None, received: list) -> None:
    while publication.offer(payload) <= 0:
        if merge is not None:
            merge.poll(lambda data, header: received.append((bytes(data), header.position)), 10)
        time.sleep(0.0001)


def test_a_late_subscriber_replays_then_merges_onto_the_live_stream_getting_every_message_once(harness):
    control = f"localhost:{free_udp_port()}"
    publication = harness.client.aeron.add_exclusive_publication(
        f"aeron:udp?control={control}|control-mode=dynamic|term-length={TERM}", STREAM_ID
    )
    session_id = publication.session_id
    harness.client.start_recording(
        f"aeron:udp?endpoint=localhost:{free_udp_port()}|control={control}|session-id={session_id}",
        STREAM_ID,
        SourceLocation.REMOTE,
    )
    recording_id = harness.await_signal(RecordingSignal.START).recording_id
    wait_for(lambda: publication.is_connected, 10, "the recording to connect")
    first = payloads_of([100, 2000, 300] * 200, seed=41)  # ~3 terms before the subscriber comes
    later = payloads_of([500, 40, 3000] * 200, seed=42)
    received: list[tuple[bytes, int]] = []
    for payload in first:
        offer(publication, payload, None, received)
    wait_for(lambda: harness.client.get_recording_position(recording_id) == publication.position, 10, "recorded")

    subscription = harness.client.aeron.add_subscription(
        f"aeron:udp?control-mode=manual|session-id={session_id}", STREAM_ID
    )
    merge = ReplayMerge(
        subscription,
        harness.client,
        f"aeron:udp?session-id={session_id}",
        "aeron:udp?endpoint=localhost:0",
        f"aeron:udp?endpoint=localhost:{free_udp_port()}|control={control}",
        recording_id,
        0,
    )
    try:
        assert merge.state is ReplayMergeState.RESOLVE_REPLAY_PORT
        for payload in later:  # published while the merge replays and joins
            offer(publication, payload, merge, received)
            merge.poll(lambda data, header: received.append((bytes(data), header.position)), 10)
        wait_for(
            lambda: merge.is_merged or merge.has_failed,
            20,
            "the merge",
            poll=lambda: merge.poll(lambda data, header: received.append((bytes(data), header.position)), 10),
        )
        assert merge.is_merged and merge.is_live_added and not merge.is_replay_active
        image = merge.image
        assert image is not None
        wait_for(lambda: not harness.archive.conductor._replays, 10, "the replay to be stopped")
        tail = payloads_of([700] * 50, seed=43)  # after the merge: only the live stream can bring these
        for payload in tail:
            offer(publication, payload, None, received)
        wanted = first + later + tail
        wait_for(
            lambda: len(received) >= len(wanted),
            20,
            "every message",
            poll=lambda: image.poll(lambda data, header: received.append((bytes(data), header.position)), 10),
        )
        assert [data for data, _ in received] == wanted
        assert received[-1][1] == publication.position
    finally:
        merge.close()
        subscription.close()
        publication.close()


def test_merging_refuses_ipc_and_a_subscription_not_in_manual_control_mode(harness):
    manual = harness.client.aeron.add_subscription("aeron:udp?control-mode=manual", STREAM_ID)
    dynamic = harness.client.aeron.add_subscription(f"aeron:udp?endpoint=localhost:{free_udp_port()}", STREAM_ID)
    try:
        with pytest.raises(ValueError, match="IPC merging is not supported"):
            ReplayMerge(
                manual,
                harness.client,
                "aeron:ipc",
                "aeron:udp?endpoint=localhost:0",
                "aeron:udp?endpoint=localhost:1",
                0,
                0,
            )
        with pytest.raises(ValueError, match="control-mode=manual"):
            ReplayMerge(
                dynamic,
                harness.client,
                "aeron:udp",
                "aeron:udp?endpoint=localhost:0",
                "aeron:udp?endpoint=localhost:1",
                0,
                0,
            )
    finally:
        manual.close()
        dynamic.close()


def test_a_merge_of_an_unknown_recording_fails_with_the_archives_error(harness):
    subscription = harness.client.aeron.add_subscription("aeron:udp?control-mode=manual", STREAM_ID)
    merge = ReplayMerge(
        subscription,
        harness.client,
        "aeron:udp",
        "aeron:udp?endpoint=localhost:0",
        f"aeron:udp?endpoint=localhost:{free_udp_port()}",
        9999,
        0,
    )
    try:
        with pytest.raises(Exception, match="9999"):
            wait_for(lambda: False, 10, "the error", poll=lambda: merge.poll(lambda data, header: None, 10))
        assert merge.has_failed
    finally:
        merge.close()
        subscription.close()
