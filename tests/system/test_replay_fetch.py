"""ReplayChunkSource against a real archive: partitions fetched by bounded replays equal the recorded bytes."""

from __future__ import annotations

import logging
import struct
import time

import pytest
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.storage.frames import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FRAME_ALIGNMENT,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    align,
)
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, RunningArchive
from aeron_archive_spark.archive.client.replay import ReplayFetchError
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource

_FRAME = struct.Struct("<iBBH")


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def record_stopped(h: Harness, payloads: list[bytes], stream_id: int, term_length: int = SMALL_TERM):
    """Record payloads on IPC and stop; returns (descriptor, spans)."""
    channel = f"aeron:ipc?term-length={term_length}"
    h.client.start_recording(channel, stream_id)
    pub = h.client.aeron.add_exclusive_publication(channel, stream_id)
    start = h.await_signal(RecordingSignal.START, count=len(h.signals.of(RecordingSignal.START)) + 1)
    spans = offer_all(pub, payloads)
    wait_for(lambda: h.client.get_recording_position(start.recording_id) == pub.position, what="recording caught up")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, start.recording_id)
    pub.close()
    return h.client.list_recording(start.recording_id), spans


def connection(h: Harness, replay_channel: str = "aeron:ipc", timeout_ms: int = 5_000, **kw) -> ConnectionOptions:
    kw.setdefault("control_stream_id", h.ctx.local_control_stream_id)
    kw.setdefault("replay_stream_id", 7701)
    return ConnectionOptions(aeron_dir=h.aeron_dir, control_channel=h.ctx.local_control_channel,
                             control_response_channel="aeron:ipc", replay_channel=replay_channel,
                             message_timeout_ms=timeout_ms, **kw)


def partition(d, start: int, end: int, limit: int, conn: ConnectionOptions, index: int = 0) -> ReadRange:
    facts = RecordingFacts(d.recording_id, d.start_position, d.term_buffer_length, d.segment_file_length,
                           d.initial_term_id, d.session_id, d.stream_id, d.mtu_length)
    return ReadRange(index, facts, start, end, limit, RunningArchive(conn))


def frames_of(buf: bytes | bytearray, base: int) -> list[tuple[int, int, int, bytes]]:
    """(position, flags, type, bytes) of each frame in `buf` at `base`: header + payload, or a PAD's header.

    Headers are compared whole: the replay path puts back the session and stream ids that replay rewrites.
    """
    out = []
    offset = 0
    while offset + HEADER_LENGTH <= len(buf):
        length, _version, flags, ftype = _FRAME.unpack_from(buf, offset)
        if length <= 0:
            break
        end = offset + (HEADER_LENGTH if ftype == HDR_TYPE_PAD else length)
        out.append((base + offset, flags, ftype, bytes(buf[offset:end])))
        offset += align(length, FRAME_ALIGNMENT)
    return out


def disk_frames(archive_dir: str, d, start: int, stop: int) -> list[tuple[int, int, int, bytes]]:
    reader = RecordingReader(archive_dir, d.recording_id, d.start_position, d.term_buffer_length,
                             d.segment_file_length, d.initial_term_id, d.stream_id, stop_position=stop)
    try:
        out = []
        for position, chunk in reader.iter_chunks(start, stop, 1 << 20):
            out += frames_of(bytes(chunk), position)
        return out
    finally:
        reader.close()


def read_like_the_source(source: ReplayChunkSource, p: ReadRange) -> list[tuple[int, int, int, bytes]]:
    """Consume chunks as the decoder does, stopping once the message begun before `end` is complete.

    Returns the frames from `start` through that message's last frame (later frames of the last chunk dropped).
    """
    got: list[tuple[int, int, int, bytes]] = []
    chunks = source.iter_chunks(p)
    expected = p.start
    try:
        for chunk, position in chunks:
            assert position >= expected, "chunks must not overlap"
            if position != expected:  # only a cut PAD frame may leave a gap
                assert got and got[-1][2] == HDR_TYPE_PAD
            got += frames_of(bytes(chunk), position)
            expected = position + len(chunk)
            if expected < p.end:
                continue
            last_owned = max(i for i, f in enumerate(got) if f[0] < p.end)
            done = next((j for j in range(last_owned, len(got))
                         if got[j][2] == HDR_TYPE_PAD or got[j][1] & END_FRAG_FLAG), None)
            if done is not None:
                return got[:done + 1]
    finally:
        chunks.close()
    return got


SIZES = [0, 1, 31, 33, 100, 1000, 1377, 4000, 8000, 65, 2048]


@pytest.mark.parametrize("replay_channel", ["aeron:ipc", "aeron:udp?endpoint=localhost:0"])
def test_partitions_concatenate_to_exactly_the_recorded_frames(harness, replay_channel):
    d, spans = record_stopped(harness, payloads_of(SIZES * 40), 3101)
    stop = d.stop_position
    expected = disk_frames(harness.ctx.archive_dir, d, 0, stop)
    conn = connection(harness, replay_channel)
    source = ReplayChunkSource(chunk_length=48 * 1024)
    # term-aligned partitions, as the source plans them, plus one starting at a message boundary mid-term
    bounds = list(range(0, stop, 2 * SMALL_TERM)) + [stop]
    owned: list[tuple[int, int, int, bytes]] = []
    for i, (start, end) in enumerate(zip(bounds, bounds[1:])):
        got = read_like_the_source(source, partition(d, start, end, stop, conn, i))
        assert got == [f for f in expected if start <= f[0] < got[-1][0] + 1]
        owned += [f for f in got if start <= f[0] < end]
    assert owned == expected
    mid = spans[len(spans) // 2][0]
    got = read_like_the_source(source, partition(d, mid, mid + 5000, stop, conn))
    assert got[0][0] == mid and got == [f for f in expected if mid <= f[0] <= got[-1][0]]
    wait_for(lambda: not harness.archive.conductor._replays, what="replays finished")


def test_fragmented_messages_across_term_boundaries_are_finished_past_the_partition_end(harness, caplog):
    term = 1024 * 1024  # max message length is term / 8 = 128 KiB, i.e. ~93 MTU-sized fragments
    sizes = [120_000, 10, 131_072, 70_000, 7] * 8
    d, spans = record_stopped(harness, payloads_of(sizes, seed=11), 3102, term_length=term)
    stop = d.stop_position
    expected = disk_frames(harness.ctx.archive_dir, d, 0, stop)
    conn = connection(harness)
    source = ReplayChunkSource(chunk_length=256 * 1024)
    caplog.set_level(logging.DEBUG, logger="aeron_archive_spark.archive.server.conductor")  # replays: DEBUG
    bounds = list(range(0, stop, term)) + [stop]
    assert len(bounds) > 3
    owned = []
    for i, (start, end) in enumerate(zip(bounds, bounds[1:])):
        got = read_like_the_source(source, partition(d, start, end, stop, conn, i))
        assert got[0][0] == start
        assert got == [f for f in expected if start <= f[0] <= got[-1][0]]
        assert got[-1][1] & END_FRAG_FLAG or got[-1][2] == HDR_TYPE_PAD
        owned += [f for f in got if start <= f[0] < end]
    assert owned == expected
    # Aeron never splits a message across terms (it pads), so term-aligned partitions end at message ends; a
    # partition ending right after a 120 KB message began needs more than SLACK: continuation replays finish it
    caplog.clear()
    small = ReplayChunkSource(chunk_length=32 * 1024)
    first = read_like_the_source(small, partition(d, 0, 32, stop, conn))
    assert first[0][1] == BEGIN_FRAG_FLAG and first[-1][1] & END_FRAG_FLAG
    assert first[-1][0] + align(len(first[-1][3]), FRAME_ALIGNMENT) == spans[0][1]  # ends with message 0
    assert first == [f for f in expected if f[0] <= first[-1][0]]
    replays = [r for r in caplog.messages if r.startswith("replay ") and " from " in r]
    assert len(replays) == 2 and "from 0 length 65568" in replays[0], replays
    wait_for(lambda: not harness.archive.conductor._replays, what="replays finished")


def test_an_active_recording_is_read_up_to_the_planned_limit(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    harness.client.start_recording(channel, 3107)
    pub = harness.client.aeron.add_exclusive_publication(channel, 3107)
    recording_id = harness.await_signal(RecordingSignal.START).recording_id
    offer_all(pub, payloads_of(SIZES * 10, seed=13))
    limit = pub.position
    wait_for(lambda: harness.client.get_recording_position(recording_id) == limit, what="recording caught up")
    offer_all(pub, payloads_of(SIZES * 10, seed=14))  # keeps growing past the planned limit
    d = harness.client.list_recording(recording_id)
    got = read_like_the_source(ReplayChunkSource(), partition(d, 0, limit, limit, connection(harness)))
    assert got == disk_frames(harness.ctx.archive_dir, d, 0, limit)
    assert got[-1][0] + align(len(got[-1][3]), FRAME_ALIGNMENT) == limit
    pub.close()


def test_stopping_early_stops_the_replay(harness):
    d, _ = record_stopped(harness, payloads_of([1000] * 3000, seed=5), 3103)
    source = ReplayChunkSource(chunk_length=32 * 1024)
    chunks = source.iter_chunks(partition(d, 0, d.stop_position, d.stop_position, connection(harness)))
    chunk, position = next(chunks)
    assert position == 0 and len(chunk) > 0
    wait_for(lambda: len(harness.archive.conductor._replays) == 1, what="replay running")
    chunks.close()
    wait_for(lambda: not harness.archive.conductor._replays, timeout=10, what="replay stopped")


def test_unreachable_archive_fails_naming_recording_position_and_channel(harness):
    d, _ = record_stopped(harness, payloads_of([100] * 10), 3104)
    conn = connection(harness, timeout_ms=500, control_stream_id=harness.ctx.local_control_stream_id + 50_000)
    started = time.monotonic()
    with pytest.raises(ReplayFetchError) as info:
        list(ReplayChunkSource().iter_chunks(partition(d, 0, d.stop_position, d.stop_position, conn)))
    text = str(info.value)
    assert f"recording {d.recording_id} at position 0" in text and "aeron:ipc" in text
    assert "cannot reach the archive" in text
    assert time.monotonic() - started < 5


def test_archive_going_away_mid_read_fails_clearly(harness):
    d, _ = record_stopped(harness, payloads_of([1000] * 3000, seed=6), 3105)
    source = ReplayChunkSource(chunk_length=16 * 1024, stall_timeout_s=3)
    chunks = source.iter_chunks(partition(d, 0, d.stop_position, d.stop_position, connection(harness)))
    next(chunks)
    harness.close_archive()
    with pytest.raises(ReplayFetchError) as info:
        for _ in chunks:
            pass
    assert f"recording {d.recording_id}" in str(info.value)


def test_executor_without_a_driver_starts_an_embedded_one_and_receives_the_replay_over_udp(aeron_dir, tmp_path):
    """A remote executor: no driver in its aeronDir, so it runs its own; control and replay go over UDP."""
    from conftest import free_udp_port

    from aeron_archive_spark.archive.client.pool import connection_pool

    pool = connection_pool()
    control = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    h = Harness(aeron_dir, str(tmp_path / "archive"), control_channel=control, control_stream_id=7711)
    try:
        d, _ = record_stopped(h, payloads_of(SIZES * 20, seed=12), 3106)
        conn = ConnectionOptions(aeron_dir=str(tmp_path / "no-driver-here"), control_channel=control,
                                 control_stream_id=7711, control_response_channel="aeron:udp?endpoint=localhost:0",
                                 replay_channel="aeron:udp?endpoint=0.0.0.0:0", replay_stream_id=7712,
                                 message_timeout_ms=5_000)
        got = read_like_the_source(ReplayChunkSource(), partition(d, 0, d.stop_position, d.stop_position, conn))
        assert got == disk_frames(h.ctx.archive_dir, d, 0, d.stop_position)
        embedded = pool.embedded_driver_dir()
        assert embedded is not None and embedded != aeron_dir
        assert pool.client(conn.aeron_dir).aeron_dir == embedded  # reused, not recreated
    finally:
        h.close()
        pool.close()
    assert pool.embedded_driver_dir() is None


def test_a_partition_whose_last_message_ends_in_the_slack_takes_one_replay(harness, caplog):
    """The chunks of a finished replay reach the decoder before any continuation replay is asked for: a partition
    ending before the recording's end whose last message is complete within `SLACK` costs one replay, not two."""

    import pyarrow as pa

    from aeron_archive_spark.archive.tables.read import read_batches
    from aeron_archive_spark.connector.source.schema import FIXED_FIELDS, arrow_schema

    caplog.set_level(logging.DEBUG, logger="aeron_archive_spark.archive.server.conductor")  # replays: DEBUG
    d, spans = record_stopped(harness, payloads_of([1000] * 400, seed=21), 3108)
    stop = d.stop_position
    end = 2 * SMALL_TERM  # a term boundary, as planning cuts ranges
    p = partition(d, 0, end, stop, connection(harness))
    caplog.clear()
    batches = list(read_batches(p, arrow_schema(FIXED_FIELDS), None, ReplayChunkSource(chunk_length=48 * 1024)))
    table = pa.Table.from_batches(batches)
    frame = align(HEADER_LENGTH + 1000, FRAME_ALIGNMENT)  # spans start before a term's padding: use the ends
    assert table.column("position").to_pylist() == [e - frame for _, e in spans if e - frame < end]
    replays = [r for r in caplog.messages if r.startswith("replay ") and " from " in r]
    assert len(replays) == 1 and f"length {end + 64 * 1024}" in replays[0], replays
    wait_for(lambda: not harness.archive.conductor._replays, what="replays finished")


def test_scanned_chunks_carry_the_scan_of_exactly_the_chunk(harness):
    from aeron_archive_spark.archive.storage.frames import scan_frames

    d, _ = record_stopped(harness, payloads_of(SIZES * 40, seed=22), 3109)
    source = ReplayChunkSource(chunk_length=48 * 1024)
    p = partition(d, 0, d.stop_position, d.stop_position, connection(harness))
    seen = 0
    for chunk, _position, scan in source.iter_scanned_chunks(p):
        fresh = scan_frames(chunk, 0, len(chunk), stop_at_padding=False)
        assert scan.stop_offset == fresh.stop_offset and scan.stop_reason is fresh.stop_reason
        assert scan.offsets.tolist() == fresh.offsets.tolist() and scan.flags.tolist() == fresh.flags.tolist()
        seen += len(chunk)
    assert seen > 0


def test_a_long_pad_mid_term_that_outruns_the_chunk_keeps_its_header(harness):
    """A PAD in the middle of a term (a publisher's appendPadding, issue 30) that arrives when less than a header is
    left of the chunk: the chunk still ends with its header, so the next chunk follows on without a gap."""
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    harness.client.start_recording(channel, 3107)
    pub = harness.client.aeron.add_exclusive_publication(channel, 3107)
    start = harness.await_signal(RecordingSignal.START, count=len(harness.signals.of(RecordingSignal.START)) + 1)
    for _ in range(3):
        offer_all(pub, [b""] * 20)  # 20 frames of 32 bytes...
        while pub.append_padding(8192) <= 0:  # ...then a PAD longer than anything left of a chunk
            pass
    offer_all(pub, payloads_of([100] * 30))
    stop = pub.position
    wait_for(lambda: harness.client.get_recording_position(start.recording_id) == stop, what="recording caught up")
    harness.client.stop_recording(channel, 3107)
    harness.await_signal(RecordingSignal.STOP, start.recording_id)
    pub.close()
    d = harness.client.list_recording(start.recording_id)
    expected = disk_frames(harness.ctx.archive_dir, d, 0, stop)
    source = ReplayChunkSource(chunk_length=20 * 32 + 16)  # 16 bytes left when the PAD comes
    got = read_like_the_source(source, partition(d, 0, stop, stop, connection(harness)))
    assert got == expected
    assert sum(f[2] == HDR_TYPE_PAD for f in got) == 3
    wait_for(lambda: not harness.archive.conductor._replays, what="replays finished")
