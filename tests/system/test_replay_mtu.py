"""Replays with a larger MTU than the recording's (`mtu=N` in the replay channel, our archive's extension).

The recorded frames must arrive exactly as with the recording's MTU, only grouped several to a datagram: the same
bytes at the same positions (headers whole: flags, reserved values, PAD frames), the same fragments. Checked on
loopback, then across a link whose MTU is smaller than the datagrams (the kernel fragments and reassembles them)
with datagrams dropped by the receiving media driver's loss interceptor (Aeron's NAKs repair them).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_udp_port
from system.harness import Harness, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive.client.connection import REPLAY_MTU_DEFAULT, with_replay_mtu
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from aeron_archive_spark.archive.storage.frames import HDR_TYPE_PAD, HEADER_LENGTH

# Payload sizes: small, MTU-sized, and messages fragmented over several frames (IPC MTU 1408: 1376 per frame).
SIZES = [0, 1, 31, 100, 1000, 1376, 1377, 4000, 8000, 65, 2048, 7000]
_FRAME = struct.Struct("<iBBh")
_LENGTH = struct.Struct("<i")


def canonical_frames(buffer: bytes) -> bytes:
    """The frames of `buffer` (a recording's bytes from a term boundary) with the session and stream ids zeroed: a
    replay rewrites both to its own, everything else (lengths, flags, types, offsets, term ids, reserved values,
    payloads, PAD headers) arrives as recorded. Same walk as the child's below."""
    out = bytearray()
    offset = 0
    while offset + HEADER_LENGTH <= len(buffer):
        length, _version, _flags, frame_type = _FRAME.unpack_from(buffer, offset)
        if length <= 0:
            break
        kept = bytearray(buffer[offset : offset + (HEADER_LENGTH if frame_type == HDR_TYPE_PAD else length)])
        kept[12:20] = bytes(8)
        out += kept
        offset += (length + 31) & ~31
    return bytes(out)


def recorded_bytes(archive_dir: str, descriptor) -> bytes:
    """The recording's bytes [0, stop) from its segment files (recordings here start at 0)."""
    data = bytearray()
    base = 0
    while base < descriptor.stop_position:
        data += Path(archive_dir, f"{descriptor.recording_id}-{base}.rec").read_bytes()
        base += descriptor.segment_file_length
    return bytes(data[: descriptor.stop_position])


def record_stopped(h: Harness, payloads: list[bytes], stream_id: int, term_length: int = 65536):
    channel = f"aeron:ipc?term-length={term_length}"
    h.client.start_recording(channel, stream_id)
    pub = h.client.aeron.add_exclusive_publication(channel, stream_id)
    start = h.await_signal(RecordingSignal.START, count=len(h.signals.of(RecordingSignal.START)) + 1)
    offer_all(pub, payloads)
    wait_for(lambda: h.client.get_recording_position(start.recording_id) == pub.position, what="recording caught up")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, start.recording_id)
    pub.close()
    return h.client.list_recording(start.recording_id)


def replay_blocks(client, recording_id: int, channel: str, stop: int) -> tuple[bytes, int]:
    """Replay [0, stop) on `channel` and return (the canonical frames received, the image's MTU)."""
    subscription = client.replay(recording_id, channel, 7801, position=0, length=stop)
    received = bytearray()
    try:
        image = wait_for(lambda: (subscription.images() or [None])[0], what="replay image")

        def on_block(block: memoryview, _session_id: int, _term_id: int) -> None:
            received.extend(block)

        wait_for(lambda: image.block_poll(on_block, 1 << 20) >= 0 and image.position >= stop,
                 what=f"replay done on {channel} (at {image.position} of {stop}, {len(received)} bytes)")
        return canonical_frames(bytes(received)), image.mtu_length
    finally:
        subscription.close()


@pytest.fixture
def udp_harness(aeron_dir, tmp_path):

    h = Harness(aeron_dir, str(tmp_path / "archive"), control_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}")
    yield h
    h.close()


def test_a_larger_replay_mtu_sends_the_recorded_frames_unchanged(udp_harness):
    h = udp_harness
    d = record_stopped(h, payloads_of(SIZES * 30, seed=5), 3201)
    assert d.mtu_length == 1408
    expected = canonical_frames(recorded_bytes(h.ctx.archive_dir, d))
    # the term is 64 KiB: at most a quarter of it, 16 KiB
    for mtu, image_mtu in ((None, 1408), (8192, 8192), (16384, 16384), (65504, 16384), (1024, 1408)):
        endpoint = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
        # 1024, smaller than the recording's MTU, is ignored, as Java's archive ignores any
        channel = with_replay_mtu(endpoint, mtu) if mtu != 1024 else f"{endpoint}|mtu=1024"
        frames, got_mtu = replay_blocks(h.client, d.recording_id, channel, d.stop_position)
        assert got_mtu == image_mtu, channel
        assert frames == expected, channel


def test_a_replay_mtu_the_media_driver_would_refuse_is_an_error_naming_it(udp_harness):
    h = udp_harness
    d = record_stopped(h, payloads_of([100] * 10), 3202)
    for bad in ("1000", "65536", "lots"):
        with pytest.raises(ArchiveError) as caught:
            h.client.start_replay(d.recording_id, 0, d.stop_position, f"aeron:udp?endpoint=localhost:0|mtu={bad}",
                                  7802)
        assert f"mtu={bad}" in str(caught.value) and f"recordingId={d.recording_id}" in str(caught.value)


def test_the_replay_mtu_option_adds_an_mtu_to_udp_replay_channels_only():
    assert with_replay_mtu("aeron:udp?endpoint=localhost:0", REPLAY_MTU_DEFAULT) == (
        f"aeron:udp?endpoint=localhost:0|mtu={REPLAY_MTU_DEFAULT}")
    assert with_replay_mtu("aeron:udp?endpoint=localhost:0|mtu=4096", 8192) == "aeron:udp?endpoint=localhost:0|mtu=4096"
    assert with_replay_mtu("aeron:ipc", 8192) == "aeron:ipc"
    assert with_replay_mtu("aeron:udp?endpoint=localhost:0", None) == "aeron:udp?endpoint=localhost:0"


# The reader on the far side of a veth pair whose link MTU (1500) is smaller than the replay's datagrams, its media
# driver dropping some of the DATA datagrams it receives (Aeron's loss interceptor, loaded from the environment).
_CHILD = r"""
import hashlib, json, socket, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from system.test_replay_mtu import canonical_frames
from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.native import EmbeddedMediaDriver

control, me, recording_id, stop, mtu = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]

def reassembled():
    lines = open("/proc/self/net/snmp").read().splitlines()
    names, values = [l.split() for l in lines if l.startswith("Ip:")][:2]
    return int(values[names.index("ReasmOKs")])

before = reassembled()
with EmbeddedMediaDriver(tempfile.mkdtemp(prefix="mtu-child-")) as driver:
    archive = AeronArchive.connect(driver.aeron_dir, f"aeron:udp?endpoint={control}",
                                   control_response_channel=f"aeron:udp?endpoint={me}:0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((me, 0))
        port = s.getsockname()[1]
    channel = f"aeron:udp?endpoint={me}:{port}" + (f"|mtu={mtu}" if mtu != "recording" else "")
    subscription = archive.replay(recording_id, channel, 7803, position=0, length=stop)
    received = bytearray()
    deadline = time.monotonic() + 60
    while not subscription.images():
        assert time.monotonic() < deadline, "no replay image"
        time.sleep(0.001)
    image = subscription.images()[0]
    while image.position < stop:
        if image.block_poll(lambda block, _s, _t: received.extend(block), 1 << 20) == 0:
            assert time.monotonic() < deadline, f"replay stalled at {image.position} of {stop}"
            time.sleep(0.0005)
    naks = sum(c.value for c in archive.aeron.counters_reader.counters() if c.label == "NAKs sent")
    print(json.dumps({"frames": hashlib.sha256(canonical_frames(bytes(received))).hexdigest(),
                      "mtu": image.mtu_length, "naks": naks, "reassembled": reassembled() - before}))
    subscription.close()
    archive.close()
"""


@pytest.fixture
def veth_pair():
    """(this side's address, a network namespace at the other end of a 1500-byte-MTU veth pair, its address)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    tag = os.getpid() % 100_000
    ns, here, there = f"aasmtu{tag}", f"aasm{tag}a", f"aasm{tag}b"
    steps = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", here, "mtu", "1500", "type", "veth", "peer", "name", there, "mtu", "1500"],
        ["ip", "link", "set", there, "netns", ns],
        ["ip", "addr", "add", "10.79.0.1/30", "dev", here],
        ["ip", "link", "set", here, "up"],
        ["ip", "-n", ns, "addr", "add", "10.79.0.2/30", "dev", there],
        ["ip", "-n", ns, "link", "set", there, "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, timeout=30)
        yield "10.79.0.1", ns, "10.79.0.2"
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def test_datagrams_larger_than_the_link_mtu_with_loss_arrive_exactly_as_recorded(tmp_path, veth_pair):

    here, ns, there = veth_pair
    control = f"{here}:{free_udp_port()}"
    driver = EmbeddedMediaDriver(str(tmp_path / "driver"))
    h = Harness(driver.aeron_dir, str(tmp_path / "archive"), control_channel=f"aeron:udp?endpoint={control}")
    try:
        d = record_stopped(h, payloads_of(SIZES * 60, seed=9), 3203, term_length=256 * 1024)
        env = {
            **os.environ,
            "AERON_UDP_CHANNEL_INCOMING_INTERCEPTORS": "loss",
            "AERON_UDP_CHANNEL_TRANSPORT_BINDINGS_LOSS_ARGS": "rate=0.05|recv-msg-mask=0x2|seed=11",
        }
        for mtu, image_mtu in (("recording", 1408), ("8192", 8192), ("65504", 65504)):
            child = subprocess.run(
                ["ip", "netns", "exec", ns, sys.executable, "-c", _CHILD, str(Path(__file__).parents[1]), control,
                 there, str(d.recording_id), str(d.stop_position), mtu],
                capture_output=True, text=True, timeout=120, env=env)
            assert child.returncode == 0, child.stderr[-3000:]
            got = json.loads(child.stdout.strip().splitlines()[-1])
            expected = hashlib.sha256(canonical_frames(recorded_bytes(h.ctx.archive_dir, d))).hexdigest()
            assert got["frames"] == expected, mtu
            assert got["mtu"] == image_mtu
            assert got["naks"] > 0, "the loss interceptor dropped nothing: the repair path was not exercised"
            if image_mtu > 1500:
                assert got["reassembled"] > 0, "no datagram was fragmented on the 1500-byte link"
    finally:
        h.close()
        driver.close()
