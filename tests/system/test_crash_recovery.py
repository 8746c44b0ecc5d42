"""Kill a standalone archive mid-recording, restart on the same directory, and get the recording back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import RecordingSignal
from system.harness import SMALL_TERM, Harness, Signals, offer_all, payloads_of, wait_for
from system.test_record_replay import replay_all


def start_server(archive_dir: str, aeron_dir: str, stream_id: int) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", archive_dir, "--aeron-dir", aeron_dir,
         "--control-channel", "none", "--local-control-stream-id", str(stream_id), "--segment-length", "128k",
         "--low-storage-threshold", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"archive server did not start: {proc.stderr.read()}")
    return proc, json.loads(line)


def test_serve_prints_ready_line_and_shuts_down_cleanly_on_sigterm(aeron_dir, tmp_path):
    proc, ready = start_server(str(tmp_path / "a"), aeron_dir, 4100)
    assert ready["archiveDir"] == str(tmp_path / "a")
    assert ready["aeronDir"] == aeron_dir
    assert ready["localControlChannel"] == "aeron:ipc"
    assert isinstance(ready["archiveId"], int)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_active_recording_is_recovered_with_the_right_stop_position_after_a_crash(aeron_dir, tmp_path):
    archive_dir = str(tmp_path / "a")
    proc, _ = start_server(archive_dir, aeron_dir, 4101)
    signals = Signals()
    client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel="aeron:ipc",
                                  control_request_stream_id=4101, control_response_channel="aeron:ipc",
                                  recording_signal_consumer=signals)
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    try:
        client.start_recording(channel, 4102)
        pub = client.aeron.add_exclusive_publication(channel, 4102)
        wait_for(lambda: signals.of(RecordingSignal.START), poll=client.poll_for_recording_signals)
        recording_id = signals.of(RecordingSignal.START)[0].recording_id
        payloads = payloads_of([3000] * 200)
        offer_all(pub, payloads)
        wait_for(lambda: client.get_recording_position(recording_id) == pub.position)
        expected_stop = pub.position
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        pub.close()
    finally:
        try:
            client.close()
        except Exception:
            pass
        if proc.poll() is None:
            proc.kill()
    h = Harness(aeron_dir, archive_dir, local_control_stream_id=4103)
    try:
        d = h.client.list_recording(recording_id)
        assert d.stop_position == expected_stop
        assert [g[0] for g in replay_all(h, recording_id, len(payloads))] == payloads
    finally:
        h.close()
    assert os.path.exists(os.path.join(archive_dir, "archive.catalog"))
