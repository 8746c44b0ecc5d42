"""A replay read straight into its publication's term gives the subscriber exactly the frames that the copy through
the C client's offer_block gives: same bytes, headers and positions, whatever the start, length and frame mix.

The archive's default (`replay_into_term`) reads segment files into the replay's term and publishes each block
itself (archive/native/term_appender.py); the other path reads into a buffer and copies with offer_block. Both are
run against one recording in one archive, and every frame the replay image delivers is compared, session and
stream id aside (each replay has its own).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive import SourceLocation
from aeron_archive_spark.archive.constants import RecordingSignal

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
HEADER = struct.Struct("<iBBHiiiiq")
SESSION_ID_OFFSET = 12  # then the stream id: both differ between replays, and both are zeroed before comparing


@pytest.fixture
def harness(aeron_dir: str, tmp_path: Path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def record(h: Harness, payloads: list[bytes], stream_id: int) -> tuple[int, list[tuple[int, int]]]:
    publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream_id)
    h.client.start_recording(f"{CHANNEL}|session-id={publication.session_id}", stream_id, SourceLocation.LOCAL)
    recording_id = h.await_signal(RecordingSignal.START).recording_id
    spans = offer_all(publication, payloads)
    wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position, what="recorded")
    h.client.stop_recording(f"{CHANNEL}|session-id={publication.session_id}", stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id, spans


def replayed_frames(h: Harness, recording_id: int, position: int, length: int, stream_id: int) -> bytes:
    """Every byte the replay image delivers (block polls), with each frame's session and stream id zeroed."""
    subscription = h.client.replay(recording_id, "aeron:ipc", stream_id, position=position, length=length)
    blocks = bytearray()
    end = position + length

    def on_block(block: memoryview, _session_id: int, _term_id: int) -> None:
        blocks.extend(block)

    def done() -> bool:
        images = subscription.images()
        for image in images:
            image.block_poll(on_block, SMALL_TERM)
        return bool(images) and images[0].position >= end

    try:
        wait_for(done, timeout=20.0, what=f"replay of [{position}, {end})")
    finally:
        subscription.close()
    offset = 0
    while offset < len(blocks):
        frame_length = HEADER.unpack_from(blocks, offset)[0]
        blocks[offset + SESSION_ID_OFFSET : offset + SESSION_ID_OFFSET + 8] = bytes(8)
        offset += (frame_length + 31) & ~31
    return bytes(blocks)


def test_both_replay_paths_deliver_the_same_frames(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(23)
    # Small, MTU-sized, fragmented and empty messages: uneven frames, term-end PADs, messages across terms.
    sizes = [rng.choice([0, 1, 31, 100, 992, 1376, 1377, 3000, rng.randrange(0, 7000)]) for _ in range(900)]
    recording_id, spans = record(harness, payloads_of(sizes, seed=29), 4301)
    stop = spans[-1][1]
    assert stop > 4 * SMALL_TERM
    ranges = [(0, stop)]
    for _ in range(6):  # message starts, bounded lengths (a frame that starts before the limit is sent whole)
        start = rng.choice(spans)[0]
        ranges.append((start, min(stop - start, rng.choice([1, 4096, SMALL_TERM, 3 * SMALL_TERM + 1000]))))
    stream_ids = iter(range(9301, 9400))
    harness.ctx.replay_into_term_min_length = 0  # the direct path even for a replay of one frame
    for start, length in ranges:
        harness.ctx.replay_into_term = True
        direct = replayed_frames(harness, recording_id, start, length, next(stream_ids))
        harness.ctx.replay_into_term = False
        copied = replayed_frames(harness, recording_id, start, length, next(stream_ids))
        assert len(direct) >= length and direct == copied, f"replay of [{start}, {start + length})"
    assert not [r for r in caplog.records if "copy through offer_block" in r.getMessage()]  # the direct path ran
