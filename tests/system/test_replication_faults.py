"""A source archive killed (SIGKILL) in the middle of a replication: the replica is left stopped and valid, holding
exactly the source's bytes up to where it stopped, and the requester is told, with the replication id."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import free_udp_port
from system.harness import Harness, payloads_of, serve_process, wait_for

from aeron_archive_spark.archive.client import AeronArchive, ReplicationParams
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from aeron_archive_spark.archive.storage.segments import segment_file_name

S = RecordingSignal


def start_source(tmp_path, control_port: int) -> tuple[subprocess.Popen[str], dict]:
    return serve_process(str(tmp_path / "src"), control_port, "--segment-length", "128k")


@pytest.mark.parametrize("live", [False, True], ids=["stopped-source", "live-source"])
def test_a_source_killed_mid_replication_leaves_a_valid_replica_and_says_so(tmp_path, live):
    control_port = free_udp_port()
    proc, _ = start_source(tmp_path, control_port)
    settings = {"AERON_IMAGE_LIVENESS_TIMEOUT": "2s", "AERON_CLIENT_LIVENESS_TIMEOUT": "2s"}
    try:
        with EmbeddedMediaDriver(str(tmp_path / "driver"), settings=settings) as driver:
            dst = Harness(driver.aeron_dir, str(tmp_path / "dst"), replication_timeout_ns=3_000_000_000)
            try:
                src_channel = f"aeron:udp?endpoint=localhost:{control_port}"
                src = AeronArchive.connect(driver.aeron_dir, src_channel, 10, "aeron:udp?endpoint=localhost:0")
                channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length=65536"
                src.start_recording(channel, 7201, SourceLocation.REMOTE)
                publication = src.aeron.add_exclusive_publication(channel, 7201)
                wait_for(lambda: publication.is_connected, 10, "the source to subscribe")
                for p in payloads_of([1000] * 12000):  # ~12 MB: the replay takes far longer than the kill
                    while publication.offer(p) <= 0:
                        time.sleep(0.0001)
                recording_id = wait_for(
                    lambda: (r := src.find_last_matching_recording(0, channel, 7201, publication.session_id)) >= 0
                    and r + 1, 10, "the source's recording") - 1
                wait_for(lambda: src.get_recording_position(recording_id) >= publication.position, 10, "recorded")
                if not live:
                    src.stop_recording(channel, 7201)
                    wait_for(lambda: src.get_stop_position(recording_id) == publication.position, 10, "stopped")
                # A replication channel with a small receive window: the replay crawls, so the kill is mid-way.
                replication_id = dst.client.replicate(
                    recording_id, 10, src_channel,
                    ReplicationParams(replication_channel="aeron:udp?endpoint=localhost:0|rcv-wnd=65536"))
                dst_id = dst.await_signal(S.EXTEND).recording_id
                wait_for(lambda: dst.client.get_recording_position(dst_id) > 0, 10, "the replica to start")
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                with pytest.raises(ArchiveError) as info:
                    wait_for(lambda: False, 20, "the replication's error", poll=dst.client.poll_for_recording_signals)
                assert info.value.correlation_id == replication_id
                text = info.value.message
                assert ("ended at position" in text or "not connected" in text), text
                assert f"replication {replication_id} of recording {recording_id}" in text, text
                dst.await_signal(S.REPLICATE_END)
                stop_signal = dst.await_signal(S.STOP, dst_id)
                held = dst.client.get_stop_position(dst_id)
                assert held == stop_signal.position and 0 < held <= publication.position
                if "ended at position" in text:  # the position it names is where the replica stopped
                    assert f"ended at position {held}," in text and f"at position {held}, in state" in text, text
                # Valid: exactly the source's bytes up to where it stopped (the source's files outlive the kill).
                segment = 128 * 1024
                for base in range(0, held, segment):
                    want = (tmp_path / "src" / segment_file_name(recording_id, base)).read_bytes()
                    got = (tmp_path / "dst" / segment_file_name(dst_id, base)).read_bytes()
                    hi = min(held - base, segment)
                    assert got[:hi] == want[:hi], f"segment at {base}"
                publication.close()
                src.close()
            finally:
                dst.close()
    finally:
        if proc.poll() is None:
            proc.kill()
