"""The time index with a real archive: bursts published at known wall-clock times are dated within the bound; the
index survives a kill -9 of a `serve` process and goes on with the extension after restart; truncation cuts it;
`time_index_interval_ns=0` keeps none."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
from system.harness import SMALL_TERM, Harness, Signals, offer_all, payloads_of, serve_process, wait_for

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import NULL_VALUE, RecordingSignal
from aeron_archive_spark.archive.recording_pos import find_counter_id_by_recording
from aeron_archive_spark.archive.storage.time_index import TIME_INDEX_SUFFIX, read_time_index

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
INTERVAL_NS = 10_000_000


def publish_bursts(client: AeronArchive, publication, recording_id: int, bursts: int, gap_s: float
                   ) -> list[tuple[int, int, int, int]]:
    """Bursts of messages `gap_s` apart; for each message (start position, end position, wall ns before its burst
    was offered, wall ns once the archive had recorded the burst)."""
    spans = []
    for n in range(bursts):
        before = time.time_ns()
        offered = offer_all(publication, payloads_of([700] * 40, seed=n))
        wait_for(lambda: client.get_recording_position(recording_id) == publication.position, 10,
                 f"recorded {client.get_recording_position(recording_id)} {publication.position} {offered[-1]}")
        after = time.time_ns()
        spans.extend((start, end, before, after) for start, end in offered)
        time.sleep(gap_s)
    return spans


def assert_dated(archive_dir: str, recording_id: int, spans: list[tuple[int, int, int, int]], stop: int) -> None:
    index = read_time_index(archive_dir, recording_id, None, stop)
    starts = np.array([s for s, _, _, _ in spans], dtype=np.int64)
    recorded = index.times_at(starts)
    before = np.array([b for _, _, b, _ in spans], dtype=np.int64)
    after = np.array([a for _, _, _, a in spans], dtype=np.int64)
    # written after it was offered (the sample may precede that by less than the bound), before it showed recorded
    assert np.all(recorded > before - index.interval_ns), (recorded - before).min()
    assert np.all(recorded <= after)
    assert np.all(np.diff(recorded) >= 0)


def test_bursts_are_dated_within_the_bound(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), time_index_interval_ns=INTERVAL_NS)
    try:
        h.client.start_recording(CHANNEL, 7701)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7701)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        spans = publish_bursts(h.client, publication, recording_id, bursts=6, gap_s=0.05)
        stop = publication.position
        assert_dated(h.ctx.archive_dir, recording_id, spans, stop)
        index = read_time_index(h.ctx.archive_dir, recording_id, 0, stop)
        # bursts 50 ms apart land in different samples: a window between two bursts splits them exactly
        burst_starts = [spans[40 * n][0] for n in range(6)]
        for n in range(1, 6):
            at = index.position_at_or_after(spans[40 * n][2])
            assert at == burst_starts[n], (n, at, burst_starts)

        publication.close()
        h.await_signal(RecordingSignal.STOP, recording_id)
        # truncate into the third burst: its samples from there on go, the earlier ones stay
        cut = burst_starts[2]
        h.client.truncate_recording(recording_id, cut)
        # the later segments' files (and their indexes) are deleted once replays of the recording are done
        truncated = wait_for(lambda: (i := read_time_index(h.ctx.archive_dir, recording_id)).positions[-1] < cut
                             and i, 10, "the later segments' indexes deleted")
        assert int(truncated.positions[-1]) < cut
        assert_dated(h.ctx.archive_dir, recording_id, [s for s in spans if s[0] < cut], cut)
    finally:
        h.close()


def test_no_index_when_turned_off(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), time_index_interval_ns=0)
    try:
        h.client.start_recording(CHANNEL, 7702)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7702)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        offer_all(publication, payloads_of([500] * 50))
        wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position)
        assert not [n for n in os.listdir(h.ctx.archive_dir) if n.endswith(TIME_INDEX_SUFFIX)]
        assert read_time_index(h.ctx.archive_dir, recording_id).is_empty
        publication.close()
    finally:
        h.close()


def test_index_survives_kill_9_and_goes_on_with_the_extension(aeron_dir, tmp_path):
    archive_dir = str(tmp_path / "archive")
    proc, _ = serve_process(archive_dir, 18731, "--aeron-dir", aeron_dir, "--local-control-stream-id", "7710",
                            "--segment-length", "128k", "--low-storage-threshold", "0", "--time-index-interval", "5ms")
    signals = Signals()
    client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel="aeron:ipc",
                                  control_request_stream_id=7710, control_response_channel="aeron:ipc",
                                  recording_signal_consumer=signals)
    try:
        client.start_recording(CHANNEL, 7711)
        publication = client.aeron.add_exclusive_publication(CHANNEL, 7711)
        wait_for(lambda: signals.of(RecordingSignal.START), poll=client.poll_for_recording_signals)
        recording_id = signals.of(RecordingSignal.START)[0].recording_id
        spans = publish_bursts(client, publication, recording_id, bursts=4, gap_s=0.02)
        killed_at = publication.position
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        publication.close()
    finally:
        try:
            client.close()
        except Exception:
            pass
        if proc.poll() is None:
            proc.kill()
    assert_dated(archive_dir, recording_id, spans, killed_at)

    # The killed archive's subscription holds its IPC image, and so the closed publication, until the driver times
    # its client out (its rec-pos counter goes with it): an extension must not join that stale publication.
    h = Harness(aeron_dir, archive_dir, local_control_stream_id=7712, time_index_interval_ns=5_000_000)
    wait_for(lambda: find_counter_id_by_recording(h.client.aeron.counters_reader, recording_id) == NULL_VALUE,
             10, "the killed archive's client timed out")
    try:
        assert h.client.list_recording(recording_id).stop_position == killed_at
        h.client.extend_recording(recording_id, CHANNEL, 7711)
        d = h.client.list_recording(recording_id)
        extension = h.client.aeron.add_exclusive_publication(
            f"{CHANNEL}|init-term-id={d.initial_term_id}|term-id={d.initial_term_id + killed_at // SMALL_TERM}"
            f"|term-offset={killed_at % SMALL_TERM}", 7711)
        h.await_signal(RecordingSignal.EXTEND, recording_id)
        restarted = time.time_ns()
        more = publish_bursts(h.client, extension, recording_id, bursts=3, gap_s=0.02)
        stop = extension.position
        assert_dated(archive_dir, recording_id, spans + more, stop)
        index = read_time_index(archive_dir, recording_id, 0, stop)
        k = int(np.searchsorted(index.positions, killed_at))
        assert int(index.positions[k]) == killed_at and int(index.times_ns[k]) >= restarted
        extension.close()
    finally:
        h.close()


def test_cli_shows_time_ranges_and_exports_a_time_window(aeron_dir, tmp_path, capsys):
    import pyarrow.parquet as pq

    from aeron_archive_spark.archive.cli.main import main

    h = Harness(aeron_dir, str(tmp_path / "archive"))
    try:
        h.client.start_recording(CHANNEL, 7720)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7720)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        spans = publish_bursts(h.client, publication, recording_id, bursts=4, gap_s=0.05)
        publication.close()
        h.await_signal(RecordingSignal.STOP, recording_id)
    finally:
        h.close()
    archive_dir = str(tmp_path / "archive")
    capsys.readouterr()
    assert main(["list", "--dir", archive_dir]) == 0
    listed = capsys.readouterr().out
    assert "started" in listed and time.strftime("%Y-%m-%dT", time.gmtime()) in listed
    assert main(["describe", "--dir", archive_dir, str(recording_id)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["timeIndex"]["firstPosition"] == 0 and described["timeIndex"]["intervalNs"] == INTERVAL_NS
    assert described["startTime"].endswith("Z") and described["stopTime"] is not None

    burst_before = [s[2] for s in spans[::40]]  # wall ns before each burst of 40
    out = tmp_path / "window.parquet"
    assert main(["export", str(recording_id), "--dir", archive_dir, "--to", str(out), "--no-progress",
                 "--from", str(burst_before[1] // 1_000_000), "--until", str(burst_before[3] // 1_000_000)]) == 0
    table = pq.read_table(out)
    framed = (700 + 32 + 31) & ~31  # a message may start a term later than offer_all's start (a PAD before it)
    assert table.column("position").to_pylist() == [s[1] - framed for s in spans[40:120]]
    assert table.column("timestamp").null_count == 0
    bad = main(["export", str(recording_id), "--dir", archive_dir, "--to", str(out), "--from", "noon"])
    assert bad == 2 and "--from: 'noon' is not a time" in capsys.readouterr().err


def test_tail_prints_the_messages_recorded_between_two_times(aeron_dir, tmp_path, capsys):
    from aeron_archive_spark.archive.cli.main import main

    h = Harness(aeron_dir, str(tmp_path / "archive"), local_control_stream_id=7730)
    try:
        h.client.start_recording(CHANNEL, 7731)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, 7731)
        recording_id = h.await_signal(RecordingSignal.START).recording_id
        spans = publish_bursts(h.client, publication, recording_id, bursts=4, gap_s=0.05)
        burst_before = [s[2] for s in spans[::40]]
        framed = (700 + 32 + 31) & ~31
        capsys.readouterr()
        common = ["tail", str(recording_id), "--aeron-dir", aeron_dir, "--control-stream-id", "7730",
                  "--format", "json"]
        # a window in the past: exactly bursts 1 and 2
        assert main([*common, "--from", str(burst_before[1] // 1_000_000),
                     "--to", str(burst_before[3] // 1_000_000)]) == 0
        printed = [json.loads(line)["position"] for line in capsys.readouterr().out.splitlines()]
        assert printed == [s[1] - framed for s in spans[40:120]]
        # a --to still to come: the live recording is followed until it has passed
        soon = time.time_ns() // 1_000_000 + 300
        more = threading.Thread(target=lambda: (time.sleep(0.1), offer_all(publication, payloads_of([700] * 5))))
        more.start()
        assert main([*common, "--from", str(burst_before[3] // 1_000_000), "--to", str(soon)]) == 0
        more.join()
        printed = [json.loads(line)["position"] for line in capsys.readouterr().out.splitlines()]
        assert printed[:40] == [s[1] - framed for s in spans[120:160]] and len(printed) == 45
        publication.close()
    finally:
        h.close()
