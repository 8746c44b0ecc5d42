"""Replay across the PAD frames a recording holds, through a real embedded media driver, archive and client (issue 11).

A term ends with a PAD wherever the next message does not fit. Messages near the maximum size leave PADs longer
than the term's max message length, which the Aeron C client's append_padding refuses: the replay must still
reproduce every message at its recorded position. A PAD that does not end its term is a damaged DATA frame: the
replay must fail with an error that reaches the client, not skip the message.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from system.harness import SMALL_SEGMENT, SMALL_TERM, Harness, collect, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive import ArchiveError, SourceLocation
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from aeron_archive_spark.archive.storage.frames import HDR_TYPE_PAD, TYPE_FIELD_OFFSET
from aeron_archive_spark.archive.storage.segments import segment_file_name

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
REPLAY_CHANNEL = "aeron:ipc"
HEADER_LENGTH = 32
MAX_MESSAGE_LENGTH = SMALL_TERM // 8
# PAD lengths at term ends: the four longer than MAX_MESSAGE_LENGTH + header that a near-max message can leave with
# the default 1408-byte MTU (up to its framed length, 8384, less one alignment), and shorter ones as a control.
LONG_PADS = (8256, 8288, 8320, 8352)
SHORT_PADS = (32, 1024, 8224)


def framed(length: int, max_payload_length: int) -> int:
    """What a message takes in a term: full MTU fragments, then the aligned rest (Aeron's fragmented length)."""
    full, rest = divmod(length, max_payload_length)
    return full * (max_payload_length + HEADER_LENGTH) + ((rest + HEADER_LENGTH + 31) & ~31 if rest or not full else 0)


@pytest.fixture(params=[True, False], ids=["into-term", "offer-block"])
def harness(aeron_dir: str, tmp_path: Path, request: pytest.FixtureRequest):
    """Both replay paths: read straight into the replay's term (the default), or copied through offer_block."""
    h = Harness(aeron_dir, str(tmp_path / "archive"), replay_into_term=request.param)
    yield h
    h.close()


def sizes_padding_terms_with(pads: list[int], max_payload_length: int, seed: int = 11) -> list[int]:
    """Message sizes whose terms end, one term after another, with a PAD of each length in `pads`.

    Each term takes near-max messages, then single-frame messages up to exactly `pad` bytes before its end, then
    a near-max message whose framed length exceeds `pad`, so the appender pads the rest of the term and puts the
    message at the start of the next one.
    """
    rng = random.Random(seed)
    mtu = max_payload_length + HEADER_LENGTH
    sizes: list[int] = []
    term_offset = 0
    for pad in pads:
        shortest = next(n for n in range(MAX_MESSAGE_LENGTH + 1) if framed(n, max_payload_length) > pad)
        big = rng.randint(shortest, MAX_MESSAGE_LENGTH)
        if sizes:  # the previous term's last message opens this term
            term_offset = framed(sizes[-1], max_payload_length)
        target = SMALL_TERM - pad
        while target - term_offset > 2 * (MAX_MESSAGE_LENGTH + mtu):
            size = rng.randint(6000, MAX_MESSAGE_LENGTH)
            sizes.append(size)
            term_offset += framed(size, max_payload_length)
        while term_offset < target:
            frame = min(mtu, target - term_offset)
            sizes.append(frame - HEADER_LENGTH)
            term_offset += frame
        sizes.append(big)
    return sizes


def record(h: Harness, payloads: list[bytes], stream_id: int):
    """Record `payloads` offered on an exclusive publication; (recording id, each message's (start, end), pub)."""
    client = h.client
    client.start_recording(CHANNEL, stream_id, SourceLocation.LOCAL)
    publication = client.aeron.add_exclusive_publication(CHANNEL, stream_id)
    h.await_signal(RecordingSignal.START, count=len(h.signals.of(RecordingSignal.START)) + 1)
    spans = offer_all(publication, payloads)
    recording_id = (
        wait_for(
            lambda: max(-1, client.find_last_matching_recording(0, CHANNEL, stream_id, publication.session_id)) + 1,
            what="the recording",
        )
        - 1
    )
    wait_for(lambda: client.get_recording_position(recording_id) == publication.position, what="recording caught up")
    client.stop_recording(CHANNEL, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    return recording_id, spans, publication


def term_end_pads(spans: list[tuple[int, int]]) -> list[int]:
    """The PADs the appender wrote: a message that starts mid-term and ends in the next term jumped one."""
    return [
        SMALL_TERM - start % SMALL_TERM
        for start, end in spans
        if start % SMALL_TERM != 0 and start // SMALL_TERM != (end - 1) // SMALL_TERM
    ]


def test_a_replay_reproduces_every_message_and_position_across_pads_longer_than_max_message_length(
    harness: Harness,
) -> None:
    probe = harness.client.aeron.add_exclusive_publication(CHANNEL, 4100)
    max_payload_length = probe.max_payload_length
    assert probe.max_message_length == MAX_MESSAGE_LENGTH
    probe.close()
    pads = list(LONG_PADS + SHORT_PADS) * 6
    random.Random(5).shuffle(pads)
    payloads = payloads_of(sizes_padding_terms_with(pads, max_payload_length), seed=13)
    recording_id, spans, publication = record(harness, payloads, 4101)
    assert term_end_pads(spans) == pads  # the recording holds exactly the PADs planned, long ones included
    assert harness.client.list_recording(recording_id).stop_position == spans[-1][1]

    subscription = harness.client.replay(recording_id, REPLAY_CHANNEL, 9101, position=0, length=REPLAY_ALL_AND_STOP)
    try:
        got = collect(subscription, len(payloads), timeout=20.0)
    finally:
        subscription.close()
    assert len(got) == len(payloads)
    assert [end for _, end, _ in got] == [end for _, end in spans]
    assert [data for data, _, _ in got] == payloads
    harness.client.poll_for_recording_signals()  # no error for this replay
    publication.close()


def test_a_pad_in_the_middle_of_a_term_fails_the_replay_with_an_error_for_the_client(harness: Harness) -> None:
    payloads = payloads_of([200] * 600, seed=17)
    recording_id, spans, publication = record(harness, payloads, 4102)
    damaged = 123
    position = spans[damaged][0]
    assert position % SMALL_TERM != 0 and position < SMALL_SEGMENT
    segment = Path(harness.ctx.archive_dir) / segment_file_name(recording_id, 0)
    with open(segment, "r+b") as f:  # a DATA frame turned into PAD
        f.seek(position + TYPE_FIELD_OFFSET)
        f.write(HDR_TYPE_PAD.to_bytes(2, "little"))

    subscription = harness.client.replay(recording_id, REPLAY_CHANNEL, 9102, position=0, length=REPLAY_ALL_AND_STOP)
    try:
        # The failed replay's publication is revoked: the subscriber may see the stream end before it has
        # polled all the frames offered before the damaged one, but never that one or any after it.
        got: list[tuple[bytes, int]] = []
        errors: list[ArchiveError] = []

        def error_received() -> bool:
            subscription.poll(lambda data, header: got.append((bytes(data), header.position)), 100)
            try:
                harness.client.poll_for_recording_signals()
            except ArchiveError as ex:
                errors.append(ex)
            return bool(errors)

        wait_for(error_received, what="the replay's error")
        wait_for(
            lambda: (
                subscription.poll(lambda data, header: got.append((bytes(data), header.position)), 100) == 0
                and all(image.is_closed or image.is_end_of_stream for image in subscription.images())
            ),
            what="the replay to end",
        )
    finally:
        subscription.close()
    assert len(got) <= damaged
    assert [data for data, _ in got] == payloads[: len(got)]
    assert [end for _, end in got] == [end for _, end in spans[: len(got)]]
    message = str(errors[0])
    assert f"PAD frame at position={position} of recordingId={recording_id}" in message
    assert f"length={HEADER_LENGTH + 200}" in message
    publication.close()
