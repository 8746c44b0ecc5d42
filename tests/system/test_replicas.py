"""Reading recordings held by several archives (`controlChannels`): the planner lists the reference archive's
recordings and finds their copies on the others, places ranges on the copies that hold them, and carries on from the
copies when the reference dies; a range read from copies goes on from the position reached on the next copy when its
archive is killed in the middle (kill -9), byte for byte."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import free_udp_port
from system.harness import Harness, payloads_of, serve_process, wait_for
from system.test_replay_fetch import record_stopped
from spark.test_source_support import framed_length

from aeron_archive_spark.archive.client import AeronArchive, ReplicationParams
from aeron_archive_spark.archive.client.mirror import copy_key
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.storage.segments import segment_file_name
from aeron_archive_spark.archive.tables.open_source import open_recording_source
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.ranges import Copy, ReadRange, RecordingFacts, Replicas, RunningArchive
from aeron_archive_spark.archive.tables.replica_chunks import ReplicaChunkSource
from aeron_archive_spark.archive.tables import replica_source
from aeron_archive_spark.archive.tables.replica_source import ReplicatedRecordingSource

S = RecordingSignal
SEGMENT = 128 * 1024
STREAM_ID = 7301


@dataclass
class TwoCopies:
    """A recording on a reference archive (`serve`, a process of its own: killable) replicated into a second archive
    (on the tests' media driver)."""

    reference: subprocess.Popen[str]
    reference_dir: str
    reference_channel: str
    copy: Harness
    copy_channel: str
    recording: RecordingDescriptor  # as the reference holds it
    copy_id: int
    messages: list[tuple[int, bytes]]  # (position, payload) of every message

    def options(self, **extra: str) -> dict[str, str]:
        return {"aeronDir": self.copy.aeron_dir, "controlChannels": f"{self.reference_channel};{self.copy_channel}",
                "controlResponseChannel": "aeron:udp?endpoint=localhost:0", "messageTimeout": "2s",
                "recordingId": str(self.recording.recording_id), **extra}

    def kill_reference(self) -> None:
        os.kill(self.reference.pid, signal.SIGKILL)
        self.reference.wait(10)

    def segment_bytes(self, start: int, stop: int) -> bytes:
        """The reference's recorded bytes [start, stop), from its segment files (they outlive a kill)."""
        out = bytearray()
        for base in range(start - start % SEGMENT, stop, SEGMENT):
            with open(os.path.join(self.reference_dir, segment_file_name(self.recording.recording_id, base)), "rb") as f:
                data = f.read()
            lo, hi = max(start - base, 0), min(stop - base, SEGMENT)
            out += data[lo:hi]
        return bytes(out)


def two_copies(tmp_path, aeron_dir: str, sizes: list[int]) -> Iterator[TwoCopies]:
    """A generator fixture body: see `TwoCopies`."""
    port = free_udp_port()
    reference_dir = str(tmp_path / "reference")
    proc, _ = serve_process(reference_dir, port, "--segment-length", "128k")
    reference_channel = f"aeron:udp?endpoint=localhost:{port}"
    copy_port = free_udp_port()
    copy = None
    try:
        copy = Harness(aeron_dir, str(tmp_path / "copy"), control_channel=f"aeron:udp?endpoint=localhost:{copy_port}")
        for stream_id in (STREAM_ID + 1, STREAM_ID + 2):  # other recordings first: the copy's id differs
            record_stopped(copy, payloads_of([100, 200]), stream_id)
        src = AeronArchive.connect(aeron_dir, reference_channel, 10, "aeron:udp?endpoint=localhost:0")
        channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length=65536"
        src.start_recording(channel, STREAM_ID, SourceLocation.REMOTE)
        publication = src.aeron.add_exclusive_publication(channel, STREAM_ID)
        wait_for(lambda: publication.is_connected, 10, "the reference to subscribe")
        messages = []
        for payload in payloads_of(sizes, seed=31):
            while (result := publication.offer(payload)) <= 0:
                time.sleep(0.0001)
            messages.append((result, payload))
        recording_id = wait_for(
            lambda: (r := src.find_last_matching_recording(0, channel, STREAM_ID, publication.session_id)) >= 0
            and r + 1, 10, "the reference's recording") - 1
        wait_for(lambda: src.get_recording_position(recording_id) >= publication.position, 10, "all recorded")
        src.stop_recording(channel, STREAM_ID)
        wait_for(lambda: src.get_stop_position(recording_id) == publication.position, 10, "the recording to stop")
        descriptor = src.list_recording(recording_id)
        assert descriptor is not None
        publication.close()
        src.close()
        copy.client.replicate(recording_id, 10, reference_channel, ReplicationParams())
        copy_id = copy.await_signal(S.REPLICATE_END, timeout=30).recording_id
        copy.await_signal(S.STOP, copy_id)  # the replica stops after REPLICATE_END, as Java's does
        assert copy.client.get_stop_position(copy_id) == descriptor.stop_position
        # `offer` answers where each message ended: it began its framed length before (padding may come before it)
        max_payload = descriptor.mtu_length - 32
        yield TwoCopies(proc, reference_dir, reference_channel, copy, copy.ctx.control_channel, descriptor, copy_id,
                        [(end - framed_length(len(payload), max_payload), payload) for end, payload in messages])
    finally:
        if copy is not None:
            copy.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def copies(tmp_path, aeron_dir) -> Iterator[TwoCopies]:
    yield from two_copies(tmp_path, aeron_dir, [1000, 40, 3000, 8000, 200] * 160)


def test_the_planner_finds_the_copies_and_answers_from_them_once_the_reference_dies(copies):
    source = open_recording_source(SourceOptions.parse(copies.options()))
    assert isinstance(source, ReplicatedRecordingSource)
    rid, stop = copies.recording.recording_id, copies.recording.stop_position
    try:
        selected = source.selected()
        assert list(selected) == [rid] and copy_key(selected[rid]) == copy_key(copies.recording)
        assert selected[rid].stop_position == stop and copies.copy_id != rid
        placement = source.placement(rid, stop)
        assert [(c.archive.connection.control_channel, c.recording_id) for c in placement.copies] == [
            (copies.reference_channel, rid), (copies.copy_channel, copies.copy_id)]
        assert source.placement(rid, stop).copies == placement.copies
        copies.kill_reference()
        # The reference is gone: its recordings are answered from their copies, under the reference's ids.
        after = source.selected()
        assert list(after) == [rid]
        assert after[rid].stop_position == stop and after[rid].recording_id == rid
        assert source.recorded_end(after[rid]) == stop
        assert [c.recording_id for c in source.placement(rid, stop).copies] == [copies.copy_id]
    finally:
        source.close()


def test_a_planner_that_never_reached_the_reference_says_so(copies, monkeypatch):
    monkeypatch.setattr(replica_source, "_SEEN", {})  # a process that never saw it
    copies.kill_reference()
    source = open_recording_source(SourceOptions.parse(copies.options()))
    try:
        with pytest.raises(Exception, match="this process has not reached it yet"):
            source.selected()
    finally:
        source.close()


def test_a_range_read_from_copies_goes_on_from_the_next_copy_when_its_archive_is_killed_mid_range(copies):
    d = copies.recording
    reference = RunningArchive(SourceOptions.parse(copies.options()).location.archives[0].connection)
    copy = RunningArchive(SourceOptions.parse(copies.options()).location.archives[1].connection)
    location = Replicas((Copy(reference, d.recording_id), Copy(copy, copies.copy_id)))
    read_range = ReadRange(0, RecordingFacts.of(d), d.start_position, d.stop_position, d.stop_position, location, True)
    source = ReplicaChunkSource(chunk_length=64 * 1024, stall_timeout_s=2.0)
    got = bytearray()
    position = d.start_position
    try:
        for n, (chunk, at) in enumerate(source.iter_chunks(read_range)):
            assert at >= position
            got += b"\0" * (at - position) + bytes(chunk)  # a PAD cut after its header: the rest is the PAD's
            position = at + len(chunk)
            if n == 1:
                copies.kill_reference()  # mid-range: the rest comes from the copy
    finally:
        source.close()
    want = copies.segment_bytes(d.start_position, d.stop_position)
    assert n > 4 and position <= d.stop_position
    # Frames compared where both hold them (a PAD's body is not replayed): every DATA byte matches.
    assert _data_frames(bytes(got), d.start_position) == _data_frames(want, d.start_position)


def _data_frames(data: bytes, base: int) -> list[tuple[int, bytes]]:
    from aeron_archive_spark.archive.storage.frames import HDR_TYPE_DATA, align

    frames = []
    offset = 0
    while offset + 32 <= len(data):
        length = int.from_bytes(data[offset:offset + 4], "little", signed=True)
        if length <= 0:
            break
        kind = int.from_bytes(data[offset + 6:offset + 8], "little")
        if kind == HDR_TYPE_DATA:
            # session id (bytes 12-16) is put back from the descriptor by the reader; compare all but it
            frames.append((base + offset, data[offset:offset + 12] + data[offset + 16:offset + length]))
        offset += align(length, 32)
    return frames
