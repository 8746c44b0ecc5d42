"""PAD frames in the middle of terms (issue 30), through a real embedded media driver, archive and client.

A publisher's `appendPadding` (public API in Java and C) leaves a PAD wherever it is called, not only where a term
ends; so does a receiver filling a gap on an unreliable channel. The archive must record such a stream, replay it
to its stop with every PAD delivered as padding at its recorded position (both replay paths, checksums on and
off), and `verify`, `export` and `tail` must take it as Java's archive and ArchiveTool do.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from system.harness import SMALL_TERM, Harness, collect, wait_for

from aeron_archive_spark.archive import SourceLocation
from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from aeron_archive_spark.archive.native.publications import fragmented_length
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
MAX_MESSAGE_LENGTH = SMALL_TERM // 8  # the most the C client's append_padding takes in this term


@dataclass
class Recorded:
    recording_id: int
    payloads: list[bytes]
    spans: list[tuple[int, int]]  # each message's (start, end) position
    pads: list[tuple[int, int]]  # each appended PAD's (position, frame length)
    stop_position: int


def padded_plan(seed: int = 30) -> list[tuple[str, Any]]:
    """400 messages with a 200-byte PAD after every 10th (the issue's stream), PADs of other lengths (a bare header,
    the longest the C client takes), two PADs in a row, and a PAD as the very last frame."""
    rng = random.Random(seed)
    plan: list[tuple[str, Any]] = []
    for i in range(400):
        plan.append(("msg", rng.randbytes(rng.randint(1, 1500))))
        if i % 10 == 9:
            plan.append(("pad", 200))
        if i in (55, 256):
            plan.append(("pad", MAX_MESSAGE_LENGTH))
        if i == 123:
            plan += [("pad", 0), ("pad", 40)]
    plan.append(("pad", 100))
    return plan


def _retry(action: Any, what: str, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        result = int(action())
        if result > 0:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} failed with {result} for {timeout}s")
        time.sleep(0.0001)


def publish_plan(publication: Any, plan: list[tuple[str, Any]], rec: Recorded) -> None:
    """Offer the plan's messages and append its PADs (retrying back pressure), noting where each landed in `rec`."""
    max_payload = publication.max_payload_length
    for kind, value in plan:
        # A message or PAD that does not fit in the rest of the term lands in the next, after the appender's own
        # end-of-term PAD: where it starts is where it ends less what it takes.
        if kind == "msg":
            end = _retry(lambda v=value: publication.offer(v), "offer")
            rec.payloads.append(value)
            rec.spans.append((end - fragmented_length(len(value), max_payload), end))
        else:
            end = _retry(lambda v=value: publication.append_padding(v), "append_padding")
            rec.pads.append((end - frames.align(value + frames.HEADER_LENGTH, 32), value + frames.HEADER_LENGTH))
    rec.stop_position = publication.position


def record_plan(h: Harness, stream_id: int, plan: list[tuple[str, Any]], min_mid_term_pads: int = 40) -> Recorded:
    client = h.client
    client.start_recording(CHANNEL, stream_id, SourceLocation.LOCAL)
    publication = client.aeron.add_exclusive_publication(CHANNEL, stream_id)
    try:
        h.await_signal(RecordingSignal.START, count=len(h.signals.of(RecordingSignal.START)) + 1)
        recording_id = client.find_last_matching_recording(0, CHANNEL, stream_id, publication.session_id)
        rec = Recorded(recording_id, [], [], [], 0)
        publish_plan(publication, plan, rec)
        wait_for(lambda: client.get_recording_position(recording_id) == rec.stop_position,
                 what="the recording to catch up")
        client.stop_recording(CHANNEL, stream_id)
        h.await_signal(RecordingSignal.STOP, recording_id)
    finally:
        publication.close()
    mid_term = [p for p, length in rec.pads if (p + frames.align(length, 32)) % SMALL_TERM]
    assert len(mid_term) >= min_mid_term_pads
    return rec


@pytest.fixture(
    params=[(True, None), (False, None), (True, "crc-32"), (False, "crc-32")],
    ids=["into-term", "offer-block", "into-term-crc", "offer-block-crc"],
)
def harness(aeron_dir: str, tmp_path: Path, request: pytest.FixtureRequest):
    """Both replay paths (the term path is the default; checksums make the archive copy through offer_block), with
    record and replay checksums off and on."""
    into_term, checksum = request.param
    h = Harness(aeron_dir, str(tmp_path / "archive"), replay_into_term=into_term, record_checksum=checksum,
                replay_checksum=checksum)
    yield h
    h.close()


Frame = tuple[int, int, int, int, int, bytes]  # position, frame length, type, flags, reserved value, payload


def frames_of(buf: Any, position: int) -> list[Frame]:
    """The frames of `buf` (at stream `position`), a PAD cut after its header included (the rest reads as zeros)."""
    scan = frames.scan_frames(buf, 0, len(buf), stop_at_padding=False)
    rows = zip(scan.offsets.tolist(), scan.lengths.tolist(), scan.types.tolist(), scan.flags.tolist(),
               scan.reserved_values().tolist(), strict=True)
    out = [(position + offset, length, frame_type, flags, reserved,
            bytes(buf[offset + 32:offset + length]) if frame_type == frames.HDR_TYPE_DATA else b"")
           for offset, length, frame_type, flags, reserved in rows]
    if scan.stop_reason is frames.ScanStop.INCOMPLETE:
        assert frames.frame_type_at(buf, scan.stop_offset) == frames.HDR_TYPE_PAD
        out.append((position + scan.stop_offset, scan.stop_frame_length, frames.HDR_TYPE_PAD, frames.UNFRAGMENTED,
                    0, b""))
    return out


def recorded_frames(h: Harness, recording_id: int, stop: int) -> list[Frame]:
    """Every frame in the segment files, as `frames_of` gives them."""
    d = h.client.list_recording(recording_id)
    out: list[Frame] = []
    with RecordingReader.for_descriptor(h.ctx.archive_dir, d) as reader:
        for position, chunk in reader.iter_chunks(0, stop):
            out += frames_of(chunk, position)
    return out


def replayed_frames(subscription: Any, stop: int, timeout: float = 20.0) -> list[Frame]:
    """Every frame the replay image holds, PADs included, as `frames_of` gives them (raw block polls)."""
    out: list[Frame] = []
    image = wait_for(lambda: next(iter(subscription.images()), None), what="the replay image")

    def on_block(block: memoryview, _session_id: int, term_id: int) -> None:
        term_offset = frames.HEADER_STRUCT.unpack_from(block, 0)[4]
        out.extend(frames_of(block, frames.compute_position(
            term_id, term_offset, image.position_bits_to_shift, image.initial_term_id)))

    deadline = time.monotonic() + timeout
    while image.position < stop:
        if image.block_poll(on_block, 1 << 20) <= 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"the replay image reached {image.position} of {stop} in {timeout}s")
            if image.is_closed:
                raise AssertionError(f"the replay image closed at {image.position}, before the stop {stop}")
            time.sleep(0.0005)
    return out


def test_a_recording_with_pads_mid_term_replays_to_its_stop_frame_for_frame(harness: Harness) -> None:
    rec = record_plan(harness, 4301, padded_plan())
    recorded = recorded_frames(harness, rec.recording_id, rec.stop_position)
    recorded_pads = [(p, n) for p, n, t, *_ in recorded if t == frames.HDR_TYPE_PAD]
    assert [pad for pad in recorded_pads if pad in rec.pads] == rec.pads
    assert all((p + frames.align(n, 32)) % SMALL_TERM == 0 for p, n in recorded_pads if (p, n) not in rec.pads)

    subscription = harness.client.replay(rec.recording_id, "aeron:ipc", 9301, position=0,
                                         length=REPLAY_ALL_AND_STOP)
    try:
        replayed = replayed_frames(subscription, rec.stop_position)
    finally:
        subscription.close()
    assert replayed == recorded
    harness.client.poll_for_recording_signals()  # no error for this replay

    # The same through the message API: every message, at its recorded end position.
    subscription = harness.client.replay(rec.recording_id, "aeron:ipc", 9302, position=0,
                                         length=REPLAY_ALL_AND_STOP)
    try:
        got = collect(subscription, len(rec.payloads))
    finally:
        subscription.close()
    assert [data for data, _, _ in got] == rec.payloads
    assert [end for _, end, _ in got] == [end for _, end in rec.spans]


def test_a_replay_from_a_pad_in_the_middle_of_a_term_to_a_pad_before_the_stop(harness: Harness) -> None:
    rec = record_plan(harness, 4302, padded_plan(31))
    start = rec.pads[7][0]
    assert start % SMALL_TERM
    first = next(i for i, (s, _) in enumerate(rec.spans) if s >= start)
    subscription = harness.client.replay(rec.recording_id, "aeron:ipc", 9303, position=start,
                                         length=REPLAY_ALL_AND_STOP)
    try:
        replayed = replayed_frames(subscription, rec.stop_position)
    finally:
        subscription.close()
    assert replayed[0][:3] == (start, rec.pads[7][1], frames.HDR_TYPE_PAD)
    assert replayed == [f for f in recorded_frames(harness, rec.recording_id, rec.stop_position) if f[0] >= start]
    assert b"".join(f[5] for f in replayed if f[2] == frames.HDR_TYPE_DATA) == b"".join(rec.payloads[first:])


def test_verify_export_and_tail_take_pads_mid_term(harness: Harness, aeron_dir: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rec = record_plan(harness, 4303, padded_plan(32))
    archive_dir = harness.ctx.archive_dir
    assert main(["verify", "--dir", archive_dir]) == 0, capsys.readouterr()
    capsys.readouterr()

    out = str(tmp_path / "export.parquet")
    assert main(["export", str(rec.recording_id), "--dir", archive_dir, "--to", out]) == 0
    assert f"exported {len(rec.payloads)} messages" in capsys.readouterr().out
    table = pq.read_table(out)
    assert table.column("value").to_pylist() == rec.payloads
    assert table.column("position").to_pylist() == [start for start, _ in rec.spans]

    count = len(rec.payloads)
    assert main(["tail", str(rec.recording_id), "--aeron-dir", aeron_dir, "--control-stream-id",
                 str(harness.ctx.local_control_stream_id), "--from-start", "--format", "json", "-n",
                 str(count)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == count
    assert [row["position"] for row in rows] == [start for start, _ in rec.spans]


def test_a_recording_extended_after_a_pad_replays_across_the_join(harness: Harness) -> None:
    """The first part ends with a PAD mid-term; the extension starts with one and holds more of them."""
    rec = record_plan(harness, 4304, padded_plan(33))
    client = harness.client
    d = client.list_recording(rec.recording_id)
    assert d.stop_position == rec.pads[-1][0] + frames.align(rec.pads[-1][1], 32) and d.stop_position % SMALL_TERM
    publication_channel = client.extend_channel(CHANNEL, d)
    publication = client.aeron.add_exclusive_publication(publication_channel, 4304)
    try:
        extend_channel = add_session_id(publication_channel, publication.session_id)
        client.extend_recording(rec.recording_id, extend_channel, 4304, SourceLocation.LOCAL)
        harness.await_signal(RecordingSignal.EXTEND, rec.recording_id)
        assert publication.position == d.stop_position
        joined = len(rec.pads)
        publish_plan(publication, [("pad", 300), *padded_plan(34)[:150]], rec)
        assert rec.pads[joined][0] == d.stop_position  # a PAD is the extension's first frame
        wait_for(lambda: client.get_recording_position(rec.recording_id) == rec.stop_position,
                 what="the extension to catch up")
        client.stop_recording(extend_channel, 4304)
        harness.await_signal(RecordingSignal.STOP, rec.recording_id, count=2)
    finally:
        publication.close()
    assert main(["verify", "--dir", harness.ctx.archive_dir]) == 0
    recorded = recorded_frames(harness, rec.recording_id, rec.stop_position)
    for start in (0, d.stop_position):
        subscription = client.replay(rec.recording_id, "aeron:ipc", 9305, position=start,
                                     length=REPLAY_ALL_AND_STOP)
        try:
            replayed = replayed_frames(subscription, rec.stop_position)
        finally:
            subscription.close()
        assert replayed == [f for f in recorded if f[0] >= start]
    data = b"".join(f[5] for f in recorded if f[2] == frames.HDR_TYPE_DATA)
    assert data == b"".join(rec.payloads)


def test_the_sink_log_reader_reads_records_across_pads_mid_term(harness: Harness) -> None:
    """The sink reads its batch map's records through the same replay and decoder as the source."""
    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.connector.sink.log_store import read_records

    records = [{"n": i, "text": "x" * (i % 300)} for i in range(200)]
    plan: list[tuple[str, Any]] = []
    for i, record in enumerate(records):
        plan.append(("msg", json.dumps(record).encode()))
        if i % 7 == 6:
            plan.append(("pad", 200 if i % 21 else MAX_MESSAGE_LENGTH))
    rec = record_plan(harness, 4305, plan, min_mid_term_pads=20)
    connection = ConnectionOptions(aeron_dir=harness.aeron_dir, control_channel=harness.ctx.local_control_channel,
                                   control_stream_id=harness.ctx.local_control_stream_id,
                                   control_response_channel="aeron:ipc", replay_channel="aeron:ipc")
    descriptor = harness.client.list_recording(rec.recording_id)
    assert list(read_records(connection, descriptor, 0, rec.stop_position)) == records
    start = rec.pads[10][0]  # from a PAD mid-term
    first = next(i for i, (s, _) in enumerate(rec.spans) if s >= start)
    assert list(read_records(connection, descriptor, start, rec.stop_position)) == records[first:]
