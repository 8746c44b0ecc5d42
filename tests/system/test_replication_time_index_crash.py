"""A destination archive killed with -9 while it dates a replica by its source's time index: every `.tix` file is
whole (the source's samples for its segment, or the replica's own), the ones dated by the source come first, times
never go back along the recording, the temporary file left is removed by `delete-orphaned-segments`, and the
restarted archive answers the replica's time index.

The destination is `aeron-archive serve` in a process of its own (`slow_time_index_copy_serve.py`: the replacement
of its fifth file stops half-way until the kill, so that the kill lands there); the source an archive in this
process. The same test with the files written over themselves instead of renamed (`--in-place`) finds the torn file
that would leave: the check has teeth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import free_udp_port
from system.harness import Harness, Signals, offer_all, serve_process, wait_for
from system.slow_time_index_copy_serve import HANG_AT

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.client import ReplicationParams
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.storage.time_index import (
    HEADER,
    HEADER_LENGTH,
    MAGIC,
    SAMPLE_LENGTH,
    read_samples,
    time_index_file_name,
)

S = RecordingSignal
SEGMENT = 64 * 1024
SEGMENTS = 60
INTERVAL = "1ms"
CHANNEL = f"aeron:ipc?term-length={SEGMENT}"
SERVE = Path(__file__).with_name("slow_time_index_copy_serve.py")


def record(src: Harness) -> tuple[int, int]:
    """SEGMENTS segments in 16 KiB bursts 1 ms apart (a few samples a segment), stopped: (id, stop)."""
    assert src.client is not None
    src.client.start_recording(CHANNEL, 6201)
    publication = src.client.aeron.add_exclusive_publication(CHANNEL, 6201)
    recording_id = src.await_signal(S.START).recording_id
    while publication.position < SEGMENTS * SEGMENT:
        offer_all(publication, [b"c" * 1000] * 16)
        time.sleep(0.001)
    stop = publication.position
    wait_for(lambda: src.client.get_recording_position(recording_id) == stop, 20, "recorded")
    src.client.stop_recording(CHANNEL, 6201)
    src.await_signal(S.STOP, recording_id)
    publication.close()
    return recording_id, stop


def samples_of(directory: str, recording_id: int, base: int) -> list[tuple[int, int]]:
    samples = read_samples(os.path.join(directory, time_index_file_name(recording_id, base)))
    return list(zip(samples["time_ns"].tolist(), samples["position"].tolist(), strict=True))


def problems(src_dir: str, src_id: int, dst_dir: str, dst_id: int, stop: int) -> tuple[list[str], int]:
    """What is wrong with the replica's files after the kill (nothing, if they are whole and never go back), and how
    many of them, from the first, carry the source's samples."""
    source_end = max(t for base in range(0, stop, SEGMENT) for t, _ in samples_of(src_dir, src_id, base))
    found: list[str] = []
    kinds: list[str] = []
    times: list[int] = []
    for base in range(0, stop, SEGMENT):
        path = os.path.join(dst_dir, time_index_file_name(dst_id, base))
        with open(path, "rb") as file:
            raw = file.read()
        if len(raw) < HEADER_LENGTH or HEADER.unpack(raw[:HEADER_LENGTH])[0] != MAGIC:
            found.append(f"{path}: no header ({len(raw)} bytes)")
            continue
        if (len(raw) - HEADER_LENGTH) % SAMPLE_LENGTH:
            found.append(f"{path}: a torn sample")
        ours = samples_of(dst_dir, dst_id, base)
        if ours and ours == samples_of(src_dir, src_id, base):
            kinds.append("source")
        elif ours and ours[0][1] == base and min(t for t, _ in ours) > source_end:
            kinds.append("own")  # recorded by the replica, after the source recorded its last byte
        else:
            found.append(f"{path}: neither the source's samples nor the replica's own ({len(ours)} samples)")
            kinds.append("?")
        times.extend(t for t, _ in ours)
    dated = kinds.index("own") if "own" in kinds else len(kinds)
    if kinds[dated:].count("source"):
        found.append(f"files dated by the source after one that is not: {kinds}")
    if times and bool(np.any(np.diff(np.asarray(times, dtype=np.int64)) < 0)):
        found.append("times go back along the recording")
    return found, dated


def serve_slow_copy(archive_dir: str, port: int, *mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVE), *mode, "serve", "--dir", archive_dir, "--control-channel",
         f"aeron:udp?endpoint=localhost:{port}", "--segment-length", "64k", "--time-index-interval", INTERVAL],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())  # ready
    return proc


@pytest.mark.parametrize("mode", ["rename", "in-place"])
def test_a_destination_killed_mid_copy_keeps_whole_files_whose_times_never_go_back(aeron_dir, tmp_path, mode):
    src_port, dst_port = free_udp_port(), free_udp_port()
    src = Harness(aeron_dir, str(tmp_path / "src"), control_channel=f"aeron:udp?endpoint=localhost:{src_port}",
                  segment_file_length=SEGMENT, time_index_interval_ns=1_000_000)
    dst_dir = str(tmp_path / "dst")
    proc = serve_slow_copy(dst_dir, dst_port, *(["--in-place"] if mode == "in-place" else []))
    restarted = None
    try:
        src_id, stop = record(src)
        signals = Signals()
        dst_channel = f"aeron:udp?endpoint=localhost:{dst_port}"
        with AeronArchive.connect(aeron_dir, dst_channel, 10, "aeron:udp?endpoint=localhost:0",
                                  recording_signal_consumer=signals) as dst:
            dst.replicate(src_id, src.ctx.control_stream_id, src.ctx.control_channel,
                          ReplicationParams(replication_channel="aeron:udp?endpoint=localhost:0"))
            wait_for(lambda: signals.of(S.SYNC), 30, "SYNC", poll=dst.poll_for_recording_signals)
            dst_id = signals.of(S.SYNC)[0].recording_id
            source_first = samples_of(src.ctx.archive_dir, src_id, 0)
            last_before_hang = (HANG_AT - 2) * SEGMENT
            source_last = samples_of(src.ctx.archive_dir, src_id, last_before_hang)

            def dated_up_to_the_hang() -> bool:
                try:
                    return samples_of(dst_dir, dst_id, last_before_hang) == source_last
                except (FileNotFoundError, ValueError):
                    return False

            wait_for(dated_up_to_the_hang, 20, f"{HANG_AT - 1} files to carry the source's samples")
            time.sleep(0.1)  # in the middle of the next one's replacement
            proc.kill()
            proc.wait(10)
            assert not signals.of(S.REPLICATE_END)
        found, dated = problems(src.ctx.archive_dir, src_id, dst_dir, dst_id, stop)
        if mode == "in-place":
            assert found, "a copy written over the files themselves left no torn file: the check has no teeth"
            return
        assert found == [] and dated == HANG_AT - 1
        temps = [name for name in os.listdir(dst_dir) if name.endswith(".tix.tmp")]
        assert temps == [time_index_file_name(dst_id, dated * SEGMENT) + ".tmp"]  # written, not yet renamed
        tool = subprocess.run(
            [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "delete-orphaned-segments", "--dir",
             dst_dir, "--yes"], capture_output=True, text=True, timeout=60)
        assert tool.returncode == 0, tool.stderr
        assert [name for name in os.listdir(dst_dir) if name.endswith(".tmp")] == []
        restarted, _ = serve_process(dst_dir, dst_port, "--segment-length", "64k")
        with AeronArchive.connect(aeron_dir, dst_channel, 10, "aeron:udp?endpoint=localhost:0") as dst:
            index = dst.time_index(dst_id, 0)
            assert index.positions[0] == 0 and bool(np.all(np.diff(index.times_ns) >= 0))
            assert index.times_ns[0] == source_first[0][0]  # the first segment: the source's time
    finally:
        for process in (proc, restarted):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        src.close()
