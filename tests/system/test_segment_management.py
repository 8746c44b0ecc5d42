"""Segment management (detach, delete detached, purge, attach, migrate segments) through a real driver, archive
and client, as Java's `ManageRecordingHistoryTest` and `MigrateSegmentsTest` drive Java's archive: 64 KiB terms,
128 KiB segments, recordings of many segments, replays before and after each step compared byte for byte."""

from __future__ import annotations

import os
import time

import pytest

from aeron_archive_spark.archive import AeronArchive, ArchiveError, ErrorCode, SourceLocation
from aeron_archive_spark.archive.channel import initial_position_params
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from system.harness import SMALL_SEGMENT, SMALL_TERM, Harness, collect, offer_all, payloads_of, wait_for

REPLAY_CHANNEL = "aeron:ipc"
SEGMENT = SMALL_SEGMENT
PER_SEGMENT = SEGMENT // 1024  # 992-byte payloads: 1024-byte frames, 128 to a segment
RecordedRun = tuple[int, list[bytes], list[tuple[int, int]]]


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def record(h: Harness, stream_id: int, count: int, *, start: int = 0, stop: bool = True,
           initial_term_id: int = 7, seed: int = 7) -> tuple[int, list[bytes], list[tuple[int, int]], object]:
    """Record `count` 992-byte messages from `start` (a publication of its own at that initial position)."""
    params = "|".join(f"{k}={v}" for k, v in initial_position_params(start, initial_term_id, SMALL_TERM).items())
    channel = f"aeron:ipc?term-length={SMALL_TERM}|{params}"
    client = h.client
    subscription_id = client.start_recording(channel, stream_id, SourceLocation.LOCAL)
    pub = client.aeron.add_exclusive_publication(channel, stream_id)
    # The recording of THIS publication (a lingering image of an earlier one on the stream may be recorded too).
    recording_id = wait_for(
        lambda: max(-1, client.find_last_matching_recording(0, "aeron:ipc", stream_id, pub.session_id)) + 1,
        what=f"the recording of publication session {pub.session_id}",
    ) - 1
    payloads = payloads_of([992] * count, seed=seed)
    spans = offer_all(pub, payloads)
    wait_for(lambda: client.get_recording_position(recording_id) == pub.position, what="recording caught up")
    if stop:
        client.stop_recording_subscription(subscription_id)
        h.await_signal(RecordingSignal.STOP, recording_id)
        pub.close()
    return recording_id, payloads, spans, pub


def replay(h: Harness, recording_id: int, position: int, count: int, stream_id: int = 9101) -> list[bytes]:
    sub = h.client.replay(recording_id, REPLAY_CHANNEL, stream_id, position=position, length=REPLAY_ALL_AND_STOP)
    try:
        return [g[0] for g in collect(sub, count)]
    finally:
        sub.close()


def files_of(h: Harness, recording_id: int) -> list[str]:
    """The recording's segment files (`.rec`, `.rec.del`); its time index files follow them: none is left
    beside a segment that is gone."""
    prefix = f"{recording_id}-"
    names = [n for n in os.listdir(h.ctx.archive_dir) if n.startswith(prefix)]
    segments = sorted((n for n in names if not n.endswith(".tix")), key=lambda n: int(n[len(prefix):n.index(".")]))
    indexed = {n[: -len(".tix")] for n in names if n.endswith(".tix")}
    assert indexed <= {n[: n.index(".rec")] for n in segments}, (indexed, segments)
    return segments


def names(recording_id: int, *segments: int) -> list[str]:
    return [f"{recording_id}-{k * SEGMENT}.rec" for k in segments]


def refused(call, code: int = ErrorCode.GENERIC) -> str:
    with pytest.raises(ArchiveError) as err:
        call()
    assert err.value.error_code == code, err.value
    return err.value.message


def test_detach_attach_then_delete_detached_segments_with_replays_before_and_after(harness):
    client = harness.client
    rid, payloads, _, _ = record(harness, 1201, 7 * PER_SEGMENT + 40)  # 8 segment files, the last one partly
    assert files_of(harness, rid) == names(rid, *range(8))
    assert replay(harness, rid, 0, len(payloads)) == payloads

    client.detach_segments(rid, 3 * SEGMENT)
    assert client.get_start_position(rid) == 3 * SEGMENT
    assert files_of(harness, rid) == names(rid, *range(8))  # detached, not deleted
    assert refused(lambda: client.start_replay(rid, 0, -1, REPLAY_CHANNEL, 9102), ErrorCode.INVALID_POSITION) == (
        f"requested replay start position=0 is less than recording start position={3 * SEGMENT} "
        f"for recording {rid}")
    assert replay(harness, rid, -1, len(payloads) - 3 * PER_SEGMENT) == payloads[3 * PER_SEGMENT:]

    assert client.attach_segments(rid) == 3
    assert client.get_start_position(rid) == 0
    assert replay(harness, rid, 0, len(payloads)) == payloads
    assert client.attach_segments(rid) == 0  # nothing detached

    client.detach_segments(rid, 2 * SEGMENT)
    assert client.delete_detached_segments(rid) == 2
    harness.await_signal(RecordingSignal.DELETE, rid)
    assert files_of(harness, rid) == names(rid, *range(2, 8))
    assert client.get_start_position(rid) == 2 * SEGMENT
    assert client.attach_segments(rid) == 0
    assert replay(harness, rid, 2 * SEGMENT, len(payloads) - 2 * PER_SEGMENT) == payloads[2 * PER_SEGMENT:]

    deletes = len(harness.signals.of(RecordingSignal.DELETE, rid))
    assert client.delete_detached_segments(rid) == 0  # none left: OK(0), DELETE at once
    harness.await_signal(RecordingSignal.DELETE, rid, count=deletes + 1)


def test_attach_takes_back_a_start_that_is_not_segment_aligned(harness):
    """Java's shouldDetachThenAttachWhenStartNotSegmentAligned: the first segment's data starts mid-term."""
    client = harness.client
    start = 2 * SMALL_TERM + 64
    rid, payloads, _, _ = record(harness, 1202, 3 * PER_SEGMENT, start=start)
    first = AeronArchive.segment_file_base_position(start, start, SMALL_TERM, SEGMENT)
    new_start = AeronArchive.segment_file_base_position(start, start + 2 * SEGMENT, SMALL_TERM, SEGMENT)
    assert first == 2 * SMALL_TERM and new_start == first + 2 * SEGMENT
    client.detach_segments(rid, new_start)
    assert client.get_start_position(rid) == new_start
    assert client.attach_segments(rid) == 2
    assert client.get_start_position(rid) == start
    assert replay(harness, rid, start, len(payloads)) == payloads
    client.detach_segments(rid, new_start)
    assert client.delete_detached_segments(rid) == 2
    harness.await_signal(RecordingSignal.DELETE, rid)
    assert files_of(harness, rid)[0] == f"{rid}-{new_start}.rec"


def test_purge_segments_while_a_replay_of_a_later_range_runs(harness):
    client = harness.client
    rid, payloads, _, _ = record(harness, 1203, 9 * PER_SEGMENT + 5)
    # A replay from segment 5 that nobody reads yet: it stays in the segment it started in, held by flow control.
    reader = client.replay(rid, REPLAY_CHANNEL, 9103, position=5 * SEGMENT, length=REPLAY_ALL_AND_STOP)
    try:
        wait_for(lambda: reader.image_count > 0, what="the replay image")
        time.sleep(0.1)  # connected: the archive's replay session is in REPLAY
        assert client.purge_segments(rid, 4 * SEGMENT) == 4
        harness.await_signal(RecordingSignal.DELETE, rid)
        assert client.get_start_position(rid) == 4 * SEGMENT
        assert files_of(harness, rid) == names(rid, *range(4, 10))
        message = refused(lambda: client.purge_segments(rid, 7 * SEGMENT))
        assert message.startswith(
            f"invalid detach: replay in progress -  state=REPLAY newStartPosition={7 * SEGMENT} "
            f"upperBound={5 * SEGMENT} sessionId=")
        assert "streamId=9103 channel=aeron:ipc?" in message
        assert refused(lambda: client.detach_segments(rid, 6 * SEGMENT)).startswith("invalid detach: replay in progress")
        assert client.get_start_position(rid) == 4 * SEGMENT
        # Up to the replay's own segment is allowed, and the replay goes on byte for byte.
        assert client.purge_segments(rid, 5 * SEGMENT) == 1
        harness.await_signal(RecordingSignal.DELETE, rid, count=2)
        assert [g[0] for g in collect(reader, len(payloads) - 5 * PER_SEGMENT)] == payloads[5 * PER_SEGMENT:]
    finally:
        reader.close()
    wait_for(lambda: _no_replays(client, rid), what="the replay to end")
    assert client.purge_segments(rid, 9 * SEGMENT) == 4
    harness.await_signal(RecordingSignal.DELETE, rid, count=3)
    assert files_of(harness, rid) == names(rid, 9)
    assert replay(harness, rid, -1, 5) == payloads[-5:]


def _no_replays(client: AeronArchive, recording_id: int) -> bool:
    try:
        client.purge_segments(recording_id, -1)
    except ArchiveError as ex:
        return "replay in progress" not in ex.message
    return True


def test_purge_segments_of_a_live_recording_up_to_the_segment_being_recorded(harness):
    client = harness.client
    rid, payloads, _, pub = record(harness, 1204, 4 * PER_SEGMENT + 10, stop=False)
    try:
        assert refused(lambda: client.purge_segments(rid, 5 * SEGMENT)) == (
            f"invalid detach: in use, newStartPosition={5 * SEGMENT} upperBound={4 * SEGMENT}")
        assert client.purge_segments(rid, 4 * SEGMENT) == 4
        harness.await_signal(RecordingSignal.DELETE, rid)
        assert client.get_start_position(rid) == 4 * SEGMENT and client.get_stop_position(rid) == -1
        more = payloads_of([992] * PER_SEGMENT, seed=11)
        offer_all(pub, more)
        wait_for(lambda: client.get_recording_position(rid) == pub.position, what="recording caught up")
        assert client.purge_segments(rid, 5 * SEGMENT) == 1
        harness.await_signal(RecordingSignal.DELETE, rid, count=2)
        expected = (payloads + more)[5 * PER_SEGMENT:]
        sub = client.replay(rid, REPLAY_CHANNEL, 9104, position=5 * SEGMENT, length=len(expected) * 1024)
        try:
            assert [g[0] for g in collect(sub, len(expected))] == expected
        finally:
            sub.close()
    finally:
        pub.close()


def test_refusals_carry_javas_codes_and_texts(harness):
    client = harness.client
    rid, _, _, _ = record(harness, 1205, 3 * PER_SEGMENT + 1)
    unknown = rid + 100
    for call in (lambda: client.detach_segments(unknown, SEGMENT), lambda: client.delete_detached_segments(unknown),
                 lambda: client.purge_segments(unknown, SEGMENT), lambda: client.attach_segments(unknown),
                 lambda: client.migrate_segments(unknown, rid), lambda: client.migrate_segments(rid, unknown)):
        assert refused(call, ErrorCode.UNKNOWN_RECORDING) == f"unknown recording id: {unknown}"
    assert refused(lambda: client.detach_segments(rid, SEGMENT + 32)) == (
        f"invalid segment start: newStartPosition={SEGMENT + 32}")
    assert refused(lambda: client.purge_segments(rid, 0)) == (
        f"invalid detach: newStartPosition=0 lowerBound={SEGMENT}")
    assert refused(lambda: client.detach_segments(rid, 4 * SEGMENT)) == (
        f"invalid detach: in use, newStartPosition={4 * SEGMENT} upperBound={3 * SEGMENT}")
    assert client.get_start_position(rid) == 0
    # A detached segment that was changed on disk is not taken back.
    client.detach_segments(rid, 2 * SEGMENT)
    os.truncate(os.path.join(harness.ctx.archive_dir, f"{rid}-{SEGMENT}.rec"), SEGMENT // 2)
    assert refused(lambda: client.attach_segments(rid)) == (
        f"fileLength={SEGMENT // 2} not equal to segmentLength={SEGMENT}")
    assert client.get_start_position(rid) == 2 * SEGMENT


def test_migrate_segments_prepends_and_appends_byte_exact(harness):
    client = harness.client
    # src [0, 2 segments) stops on a segment boundary (leaving an empty following file); dst continues from there.
    src, src_payloads, _, _ = record(harness, 1206, 2 * PER_SEGMENT, seed=1)
    dst, dst_payloads, _, _ = record(harness, 1206, 2 * PER_SEGMENT + 3, start=2 * SEGMENT, seed=2)
    assert files_of(harness, src) == names(src, 0, 1, 2)
    assert client.migrate_segments(src, dst) == 2
    harness.await_signal(RecordingSignal.DELETE, src)
    assert (client.get_start_position(src), client.get_stop_position(src)) == (0, 0)
    assert client.get_start_position(dst) == 0
    assert files_of(harness, src) == []
    assert files_of(harness, dst) == names(dst, 0, 1, 2, 3, 4)
    everything = src_payloads + dst_payloads
    assert replay(harness, dst, 0, len(everything)) == everything

    # Append: a stopped recording that starts where dst stops (dst truncated to a segment boundary first).
    assert client.truncate_recording(dst, 4 * SEGMENT) == 1
    harness.await_signal(RecordingSignal.DELETE, dst)
    tail, tail_payloads, _, _ = record(harness, 1206, PER_SEGMENT + 7, start=4 * SEGMENT, seed=3)
    message = refused(lambda: client.migrate_segments(src, tail))
    assert message == (f"invalid migrate: src and dst are not contiguous srcStartPosition=0 srcStopPosition=0 "
                       f"dstStartPosition={4 * SEGMENT} dstStopPosition={4 * SEGMENT + (PER_SEGMENT + 7) * 1024}")
    assert client.migrate_segments(tail, dst) == 2
    harness.await_signal(RecordingSignal.DELETE, tail)
    assert client.get_stop_position(dst) == 4 * SEGMENT + (PER_SEGMENT + 7) * 1024
    expected = everything[: 4 * PER_SEGMENT] + tail_payloads
    assert replay(harness, dst, 0, len(expected)) == expected


def test_migrate_refusals(harness):
    client = harness.client
    src, _, _, pub = record(harness, 1207, 2 * PER_SEGMENT, stop=False)
    try:
        other, _, _, _ = record(harness, 1208, PER_SEGMENT, start=2 * SEGMENT)
        assert refused(lambda: client.migrate_segments(src, other)) == f"recording {src} is still active"
        assert refused(lambda: client.migrate_segments(other, src)) == (
            "invalid migrate: srcStreamId=1208 dstStreamId=1207")
    finally:
        pub.close()
    gap, _, _, _ = record(harness, 1209, PER_SEGMENT)
    far, _, _, _ = record(harness, 1209, PER_SEGMENT, start=3 * SEGMENT)
    assert refused(lambda: client.migrate_segments(gap, far)).startswith(
        "invalid migrate: src and dst are not contiguous srcStartPosition=0")
    half, _, _, _ = record(harness, 1210, PER_SEGMENT // 2)
    after, _, _, _ = record(harness, 1210, PER_SEGMENT, start=SEGMENT // 2)
    assert refused(lambda: client.migrate_segments(half, after)) == (
        f"invalid migrate: join position is not on segment boundary of src recording seamPosition={SEGMENT // 2} "
        f"startPosition=0 stopPosition={SEGMENT // 2} termBufferLength={SMALL_TERM} segmentFileLength={SEGMENT}")


def test_the_archive_purges_on_its_own_behalf_through_the_same_path(harness):
    """`purge_segments_to` (what retention builds on) runs on the conductor thread with no requester: Java's checks,
    the start moved, the files deleted off the conductor's path, no signal to anyone."""
    client = harness.client
    rid, payloads, _, _ = record(harness, 1211, 4 * PER_SEGMENT + 9)
    conductor = harness.archive.conductor
    answers: list[object] = []

    def purge(position: int) -> None:
        try:
            answers.append(conductor.purge_segments_to(rid, position))
        except ArchiveError as ex:
            answers.append(ex.message)

    conductor.enqueue(lambda: purge(SEGMENT + 32))
    conductor.enqueue(lambda: purge(3 * SEGMENT))
    wait_for(lambda: len(answers) == 2, what="the conductor's purges")
    assert answers == [f"invalid segment start: newStartPosition={SEGMENT + 32}", 3]
    wait_for(lambda: files_of(harness, rid) == names(rid, 3, 4), what="the files deleted")
    assert client.get_start_position(rid) == 3 * SEGMENT
    assert replay(harness, rid, -1, len(payloads) - 3 * PER_SEGMENT) == payloads[3 * PER_SEGMENT:]
    assert harness.signals.of(RecordingSignal.DELETE, rid) == []
