"""The time index through a running archive (this project's PositionAtTime and TimeIndex requests), over IPC and
UDP: the client's answers are what the archive's disk says, for live and stopped recordings; long answers come in
several messages; a recording without an index, with the index off, or asked about a time before its index began,
and an unknown recording, are refused with errors naming them."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import free_udp_port
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for
from system.test_time_index import publish_bursts

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import NULL_POSITION, RecordingSignal
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.time_index import read_time_index

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
INTERVAL_NS = 10_000_000


def udp_client(h: Harness) -> AeronArchive:
    assert h.ctx.control_channel is not None
    client = AeronArchive.connect(aeron_dir=h.aeron_dir, control_request_channel=h.ctx.control_channel,
                                  control_request_stream_id=h.ctx.control_stream_id,
                                  control_response_channel="aeron:udp?endpoint=localhost:0", message_timeout_s=5.0)
    h.clients.append(client)
    return client


def assert_same_index(client: AeronArchive, archive_dir: str, recording_id: int, low: int, high: int) -> None:
    remote = client.time_index(recording_id, low, high)
    local = read_time_index(archive_dir, recording_id, low, high)
    assert remote.positions.tolist() == local.positions.tolist()
    assert remote.times_ns.tolist() == local.times_ns.tolist()
    assert remote.interval_ns == local.interval_ns == INTERVAL_NS


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_times_resolve_to_positions_through_the_archive_live_and_stopped(aeron_dir, tmp_path, transport):
    h = Harness(aeron_dir, str(tmp_path / "archive"), time_index_interval_ns=INTERVAL_NS,
                control_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}", control_stream_id=4410)
    try:
        client = h.client if transport == "ipc" else udp_client(h)
        h.client.start_recording(CHANNEL, 7801)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7801)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        spans = publish_bursts(h.client, publication, recording_id, bursts=5, gap_s=0.05)
        burst_starts = [spans[40 * n][0] for n in range(5)]
        live = publication.position
        for n in range(1, 5):  # live: a time between two bursts finds the later burst's first message
            assert client.position_at_time(recording_id, spans[40 * n][2]) == burst_starts[n]
        assert client.position_at_time(recording_id, time.time_ns() + 10**9) == NULL_POSITION  # nothing that late
        assert client.position_at_time(recording_id, 0) == 0  # everything is later: the start
        assert_same_index(client, h.ctx.archive_dir, recording_id, 0, live)
        assert_same_index(client, h.ctx.archive_dir, recording_id, burst_starts[1] + 64, burst_starts[3])
        assert client.time_index(recording_id, 0, -1).positions.tolist() == read_time_index(
            h.ctx.archive_dir, recording_id, 0, live).positions.tolist()  # -1: up to the recorded position

        publication.close()
        h.await_signal(RecordingSignal.STOP, recording_id)
        assert client.position_at_time(recording_id, spans[40 * 4][2]) == burst_starts[4]
        assert_same_index(client, h.ctx.archive_dir, recording_id, 0, live)
        dated = client.time_index(recording_id, 0, -1).times_at(np.array([s for s, _, _, _ in spans]))
        assert np.all(dated > np.array([b for _, _, b, _ in spans]) - INTERVAL_NS)
        assert np.all(dated <= np.array([a for _, _, _, a in spans]))
    finally:
        h.close()


def test_a_long_answer_comes_in_several_messages_over_udp(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), time_index_interval_ns=1,
                control_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}", control_stream_id=4411)
    try:
        client = udp_client(h)
        h.client.start_recording(CHANNEL, 7802)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7802)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        for n in range(600):  # a message at a time, so the recorder writes (and samples) many blocks
            offer_all(publication, payloads_of([200], seed=n))
            time.sleep(0.0003)
        wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position)
        stop = publication.position
        index = client.time_index(recording_id, 0, stop)
        assert len(index.positions) > 256  # more than one TimeIndexSamples message
        local = read_time_index(h.ctx.archive_dir, recording_id, 0, stop)
        assert index.positions.tolist() == local.positions.tolist()
        assert index.times_ns.tolist() == local.times_ns.tolist()
        publication.close()
    finally:
        h.close()


def test_unknown_recordings_recordings_without_an_index_and_times_before_it_are_refused(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), time_index_interval_ns=0)  # the index off
    try:
        with pytest.raises(ArchiveError, match="unknown recording id: 99") as unknown:
            h.client.position_at_time(99, time.time_ns())
        assert unknown.value.error_code == ErrorCode.UNKNOWN_RECORDING
        with pytest.raises(ArchiveError, match="unknown recording id: 99"):
            h.client.time_index(99, 0, -1)

        h.client.start_recording(CHANNEL, 7803)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7803)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        offer_all(publication, payloads_of([500] * 50))
        wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position)
        with pytest.raises(ArchiveError, match=f"recording {recording_id} has no time index") as none:
            h.client.position_at_time(recording_id, time.time_ns())
        assert none.value.error_code == ErrorCode.GENERIC
        with pytest.raises(ArchiveError, match=f"recording {recording_id} has no time index"):
            h.client.time_index(recording_id, 0, -1)
        assert h.client.get_max_recorded_position(recording_id) == publication.position  # the session goes on
        publication.close()
        h.await_signal(RecordingSignal.STOP, recording_id)
        unindexed = h.client.get_stop_position(recording_id)

        # the index turned on: an extension is indexed from where it joins, the bytes before it are not
        h.restart(time_index_interval_ns=INTERVAL_NS)
        h.client.extend_recording(recording_id, CHANNEL, 7803)
        d = h.client.list_recording(recording_id)
        extension = h.client.aeron.add_exclusive_publication(
            f"{CHANNEL}|init-term-id={d.initial_term_id}|term-id={d.initial_term_id + unindexed // SMALL_TERM}"
            f"|term-offset={unindexed % SMALL_TERM}", 7803)
        h.await_signal(RecordingSignal.EXTEND, recording_id)
        extended_at = time.time_ns()
        offer_all(extension, payloads_of([500] * 20))
        wait_for(lambda: h.client.get_recording_position(recording_id) == extension.position)
        with pytest.raises(ArchiveError, match=rf"positions \[0, {unindexed}\) were recorded before the index"):
            h.client.position_at_time(recording_id, extended_at - 10**9)
        assert h.client.position_at_time(recording_id, time.time_ns() + 10**9) == NULL_POSITION
        index = h.client.time_index(recording_id, 0, -1)
        assert int(index.positions[0]) == unindexed  # the samples begin where the index did
        assert int(index.times_at(np.array([unindexed - 32]))[0]) == -1
        extension.close()
    finally:
        h.close()


def test_the_time_indexes_of_many_ranges_come_in_one_request(aeron_dir, tmp_path):
    """TimeIndexesRequest: each range answered as its own TimeIndexRequest would be, in order; an unknown
    recording or one without an index is None, not an error; more ranges than one request holds are split."""
    from aeron_archive_spark.archive.client.aeron_archive import MAX_TIME_INDEX_RANGES

    h = Harness(aeron_dir, str(tmp_path / "archive"), time_index_interval_ns=INTERVAL_NS)
    try:
        ids = []
        for stream in (7811, 7812):
            h.client.start_recording(CHANNEL, stream)
            publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream)
            rid = h.await_signal(RecordingSignal.START, count=len(ids) + 1).recording_id
            publish_bursts(h.client, publication, rid, bursts=3, gap_s=0.02)
            publication.close()
            h.await_signal(RecordingSignal.STOP, rid)
            ids.append(rid)
        stops = {rid: h.client.get_stop_position(rid) for rid in ids}
        for path in (tmp_path / "archive").glob(f"{ids[1]}-*.tix"):
            path.unlink()  # recording 2 now has no index
        asked = [(ids[0], 0, stops[ids[0]]), (ids[1], 0, stops[ids[1]]), (99, 0, 1024),
                 (ids[0], 4096, stops[ids[0]] // 2)]
        answers = h.client.time_indexes(asked)
        assert answers[1] is None and answers[2] is None
        for (rid, low, high), answer in zip(asked, answers, strict=True):
            if answer is not None:
                local = read_time_index(h.ctx.archive_dir, rid, low, high)
                assert answer.positions.tolist() == local.positions.tolist()
                assert answer.times_ns.tolist() == local.times_ns.tolist() and answer.interval_ns == INTERVAL_NS
        many = [(ids[0], 0, stops[ids[0]])] * (MAX_TIME_INDEX_RANGES + 3)
        split = h.client.time_indexes(many)
        assert len(split) == len(many) and all(a is not None and len(a.positions) == len(answers[0].positions)
                                               for a in split)
    finally:
        h.close()
