from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from aeron_archive_spark.archive.constants import NULL_POSITION
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.checksums import Crc32c
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.verify import IssueKind, verify_archive, verify_recording
from tests.unit.storage_helpers import (
    INITIAL_TERM_ID,
    MTU_LENGTH,
    SEGMENT_LENGTH,
    SESSION_ID,
    STREAM_ID,
    TERM_LENGTH,
    StreamBuilder,
)

NOW = 1_700_000_999_000


def record(
    tmp_path: Path, builder: StreamBuilder, *, stop: bool = True, checksum: Crc32c | None = None
) -> tuple[int, int]:
    """Write the stream to segment files and a catalog entry; returns (recording id, end position)."""
    with Catalog(tmp_path, capacity=4096, clock_ms=lambda: NOW, checksum=checksum) as catalog:
        rid = catalog.add_new_recording(
            builder.start_position, NOW, INITIAL_TERM_ID, SEGMENT_LENGTH, TERM_LENGTH, MTU_LENGTH,
            SESSION_ID, STREAM_ID, "aeron:ipc", "aeron:ipc", "aeron:ipc",
        )  # fmt: skip
        writer = RecordingWriter(
            tmp_path,
            rid,
            builder.start_position,
            builder.start_position,
            TERM_LENGTH,
            SEGMENT_LENGTH,
            checksum=checksum,
        )
        writer.init()
        for _, block in builder.blocks(8192):
            writer.on_block(block)
        writer.close()
        if stop:
            catalog.recording_stopped(rid, writer.position, NOW)
    return rid, writer.position


def descriptor(tmp_path: Path, rid: int) -> RecordingDescriptor:
    with Catalog(tmp_path, writable=False) as catalog:
        return catalog.get(rid)


def test_clean_recording_verifies(tmp_path: Path) -> None:
    builder = StreamBuilder(TERM_LENGTH + 96).fill_to(3 * SEGMENT_LENGTH, payload_length=1200)
    rid, end = record(tmp_path, builder)
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert result.ok, result.summary()
    assert result.end_position == end and result.frame_count == len(builder.frames)
    assert "OK" in result.summary()


def test_clean_recording_with_checksums(tmp_path: Path) -> None:
    crc = Crc32c()
    builder = StreamBuilder(0).fill_to(TERM_LENGTH + 5000, payload_length=300)
    rid, _ = record(tmp_path, builder, checksum=crc)
    assert verify_recording(tmp_path, descriptor(tmp_path, rid), crc).ok


def corrupt(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_header_corruption_reported_by_position_and_fixed(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH + 20_000, payload_length=500)
    rid, end = record(tmp_path, builder)
    bad = next(f for f in builder.frames if f.position > 70_000 and not f.is_pad)
    corrupt(tmp_path / "0-0.rec", bad.position + 20, struct.pack("<i", 999))  # wrong term id
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert not result.ok
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.HEADER_MISMATCH, bad.position)]
    assert "termId=999" in result.issues[0].message
    assert result.end_position == bad.position

    with Catalog(tmp_path, capacity=4096, recover=False) as catalog:
        fixed = verify_recording(tmp_path, descriptor(tmp_path, rid), fix=True, catalog=catalog)
        assert fixed.fixed and fixed.new_stop_position == bad.position
        assert catalog.stop_position(rid) == bad.position
    assert fixed.truncated_file == "0-0.rec" and fixed.deleted_files == ["0-131072.rec"]
    data = (tmp_path / "0-0.rec").read_bytes()
    assert len(data) == SEGMENT_LENGTH
    assert data[bad.position :] == bytes(SEGMENT_LENGTH - bad.position)
    assert verify_recording(tmp_path, descriptor(tmp_path, rid)).ok
    assert end > bad.position


def test_checksum_mismatch_reported(tmp_path: Path) -> None:
    crc = Crc32c()
    builder = StreamBuilder(0).fill_to(20_000, payload_length=200)
    rid, _ = record(tmp_path, builder, checksum=crc)
    frames = [f for f in builder.frames if not f.is_pad]
    corrupt(tmp_path / "0-0.rec", frames[10].position + 40, b"\xff\xff")
    corrupt(tmp_path / "0-0.rec", frames[20].position + 100, b"\x00\x01")
    result = verify_recording(tmp_path, descriptor(tmp_path, rid), crc)
    assert [(i.kind, i.position) for i in result.issues] == [
        (IssueKind.CHECKSUM_MISMATCH, frames[10].position),
        (IssueKind.CHECKSUM_MISMATCH, frames[20].position),
    ]
    assert result.end_position == builder.position  # structure intact, walk carried on
    assert verify_recording(tmp_path, descriptor(tmp_path, rid)).ok  # without a checksum nothing shows


def test_zero_gap_before_stop_position(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(30_000, payload_length=200)
    rid, _ = record(tmp_path, builder)
    hole = builder.frames[40]
    corrupt(tmp_path / "0-0.rec", hole.position, bytes(hole.length))
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.ZERO_LENGTH_GAP, hole.position)]


def test_frame_running_past_term_or_stop(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(30_000, payload_length=200)
    rid, _ = record(tmp_path, builder)
    frame = builder.frames[7]
    corrupt(tmp_path / "0-0.rec", frame.position, struct.pack("<i", TERM_LENGTH))
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.FRAME_OVERRUN, frame.position)]
    assert "end of its term" in result.issues[0].message

    other = tmp_path / "b"
    other.mkdir()
    rid, end = record(other, StreamBuilder(0).fill_to(10_000, payload_length=200))
    with Catalog(other, capacity=4096) as catalog:
        catalog.update_stop_position(rid, end - 64)
    result = verify_recording(other, descriptor(other, rid))
    assert [i.kind for i in result.issues] == [IssueKind.FRAME_OVERRUN]
    assert "stopPosition" in result.issues[0].message


def test_missing_segment(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(2 * SEGMENT_LENGTH + 100, payload_length=400)
    rid, _ = record(tmp_path, builder)
    os.remove(tmp_path / "0-131072.rec")
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.MISSING_SEGMENT, SEGMENT_LENGTH)]


def test_invalid_positions(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(1000, payload_length=100)
    rid, end = record(tmp_path, builder)
    with Catalog(tmp_path, capacity=4096) as catalog:
        catalog.update_stop_position(rid, end + 16)
    result = verify_recording(tmp_path, descriptor(tmp_path, rid), fix=True)
    assert [i.kind for i in result.issues] == [IssueKind.INVALID_POSITIONS] and not result.fixed


def test_torn_last_frame_blocks_startup_until_verify_fix(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(3072, payload_length=96)
    last = builder.append(2000)
    rid, end = record(tmp_path, builder, stop=False)
    corrupt(tmp_path / "0-0.rec", 4096, bytes(last.position + last.length - 4096))
    with pytest.raises(ArchiveError, match="verify"):
        Catalog(tmp_path, capacity=4096)

    results = verify_archive(tmp_path)
    assert [(i.kind, i.position) for i in results[0].issues] == [(IssueKind.TORN_LAST_FRAME, last.position)]
    assert not results[0].fixed

    results = verify_archive(tmp_path, fix=True)
    assert results[0].fixed and results[0].new_stop_position == last.position
    data = (tmp_path / "0-0.rec").read_bytes()
    assert len(data) == SEGMENT_LENGTH and data[last.position :] == bytes(SEGMENT_LENGTH - last.position)
    with Catalog(tmp_path, capacity=4096) as catalog:
        assert catalog.recovered == []
        assert catalog.stop_position(rid) == last.position and end > last.position


def test_fix_closes_crashed_recording_without_damage(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH + 3000, payload_length=250)
    rid, end = record(tmp_path, builder, stop=False)
    results = verify_archive(tmp_path, fix=True)
    assert results[0].ok and results[0].fixed and results[0].new_stop_position == end
    with Catalog(tmp_path, writable=False) as catalog:
        d = catalog.get(rid)
        assert d.stop_position == end and d.stop_timestamp != NULL_POSITION


def test_verify_archive_covers_valid_recordings(tmp_path: Path) -> None:
    record(tmp_path, StreamBuilder(0).fill_to(5000, payload_length=100))
    record(tmp_path, StreamBuilder(4096).fill_to(9000, payload_length=100))
    empty_rid, _ = record(tmp_path, StreamBuilder(64))
    results = verify_archive(tmp_path)
    assert [r.recording_id for r in results] == [0, 1, empty_rid]
    assert all(r.ok for r in results)
    assert results[2].frame_count == 0 and results[2].end_position == 64
