from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aeron_archive_spark.archive.constants import NULL_POSITION
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.checksums import (
    Checksum,
    Crc32,
    Crc32c,
    apply_record_checksums,
    checksum_for_name,
    find_checksum_mismatch,
    first_checksum_mismatch,
    verify_record_checksums,
)
from aeron_archive_spark.archive.storage.frames import HDR_TYPE_PAD, ScanStop, scan_frames
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.segments import list_segment_files, segment_files
from tests.unit.storage_helpers import (
    INITIAL_TERM_ID,
    SEGMENT_LENGTH,
    SESSION_ID,
    STREAM_ID,
    TERM_LENGTH,
    StreamBuilder,
)


def write(
    tmp_path: Path,
    builder: StreamBuilder,
    *,
    recording_id: int = 0,
    start_position: int | None = None,
    join_position: int | None = None,
    block_limit: int = TERM_LENGTH,
    skip_before: int | None = None,
    **kwargs: Any,
) -> RecordingWriter:
    start = builder.start_position if start_position is None else start_position
    join = start if join_position is None else join_position
    writer = RecordingWriter(tmp_path, recording_id, start, join, TERM_LENGTH, SEGMENT_LENGTH, **kwargs)
    writer.init()
    for position, block in builder.blocks(block_limit):
        if skip_before is not None and position < skip_before:
            continue
        assert writer.position == position
        writer.on_block(memoryview(block))
    writer.close()
    return writer


def reader_for(tmp_path: Path, builder: StreamBuilder, stop: int, *, start: int | None = None) -> RecordingReader:
    return RecordingReader(
        tmp_path,
        0,
        builder.start_position if start is None else start,
        TERM_LENGTH,
        SEGMENT_LENGTH,
        INITIAL_TERM_ID,
        STREAM_ID,
        stop_position=stop,
    )


def read_all(reader: RecordingReader, start: int, stop: int, chunk: int = 16 * 1024) -> bytes:
    out = bytearray()
    buffer = bytearray(chunk)
    position = start
    while position < stop:
        n = reader.read_into(buffer, position, chunk)
        assert 0 < n <= chunk
        assert (position % TERM_LENGTH) + n <= TERM_LENGTH  # never crosses a term
        out += buffer[:n]
        position += n
    assert reader.read_into(buffer, stop, chunk) == 0
    return bytes(out)


def test_write_then_read_back_byte_identical(tmp_path: Path) -> None:
    builder = StreamBuilder(0).append_many([100, 3000, 1, 1376, 500] * 10)
    writer = write(tmp_path, builder, block_limit=4096)
    assert writer.position == builder.position
    with reader_for(tmp_path, builder, builder.position) as reader:
        assert read_all(reader, 0, builder.position) == builder.expected_bytes(0, builder.position)
    data = (tmp_path / "0-0.rec").read_bytes()
    assert len(data) == SEGMENT_LENGTH
    assert data[: builder.position] == builder.expected_bytes(0, builder.position)
    assert data[builder.position :] == bytes(SEGMENT_LENGTH - builder.position)
    assert writer.total_write_bytes == builder.position
    assert writer.total_write_time_ns > 0 and writer.max_write_time_ns <= writer.total_write_time_ns


def test_padding_written_as_header_only(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(TERM_LENGTH - 300, payload_length=500)
    builder.append(1000)  # forces a PAD to the end of the first term
    pad = next(f for f in builder.frames if f.is_pad)
    writer = write(tmp_path, builder)
    data = (tmp_path / "0-0.rec").read_bytes()
    assert data[pad.position : pad.position + 32] == pad.data[:32]
    assert data[pad.position + 32 : TERM_LENGTH] == bytes(TERM_LENGTH - pad.position - 32)
    assert writer.total_write_bytes == builder.position - pad.length + 32
    scan = scan_frames(data, pad.position, TERM_LENGTH)
    assert scan.stop_reason is ScanStop.PADDING and scan.pad_length == pad.length
    assert int(data[pad.position + 6]) == HDR_TYPE_PAD


def test_roll_over_across_segments(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(3 * SEGMENT_LENGTH + 4000, payload_length=700)
    writer = write(tmp_path, builder, block_limit=8192)
    names = list_segment_files(tmp_path, 0)
    assert names == ["0-0.rec", "0-131072.rec", "0-262144.rec", "0-393216.rec"]
    for f in segment_files(tmp_path, 0):
        assert os.path.getsize(f.path) == SEGMENT_LENGTH
        end = min(f.base_position + SEGMENT_LENGTH, builder.position)
        assert Path(f.path).read_bytes()[: end - f.base_position] == builder.expected_bytes(f.base_position, end)
    with reader_for(tmp_path, builder, writer.position) as reader:
        assert read_all(reader, 0, writer.position, chunk=50_016) == builder.expected_bytes(0, writer.position)


def test_roll_over_creates_next_file_at_exact_segment_end(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH, payload_length=480)  # 512-byte frames fill it exactly
    writer = write(tmp_path, builder)
    assert writer.position == SEGMENT_LENGTH
    assert (tmp_path / "0-131072.rec").exists()
    assert (tmp_path / "0-131072.rec").read_bytes() == bytes(SEGMENT_LENGTH)


def test_roll_over_refuses_existing_segment(tmp_path: Path) -> None:
    (tmp_path / "0-131072.rec").write_bytes(b"")
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH + 100, payload_length=480)
    with pytest.raises(ArchiveError, match="segment file already exists"):
        write(tmp_path, builder)


def test_non_term_aligned_join_position(tmp_path: Path) -> None:
    start = 2 * TERM_LENGTH + 4096 + 64
    builder = StreamBuilder(start).fill_to(start + SEGMENT_LENGTH, payload_length=900)
    writer = write(tmp_path, builder)
    first = tmp_path / f"0-{2 * TERM_LENGTH}.rec"  # named after the start's term base, not the start
    data = first.read_bytes()
    offset = start - 2 * TERM_LENGTH
    assert data[:offset] == bytes(offset)
    assert data[offset:SEGMENT_LENGTH] == builder.expected_bytes(start, 2 * TERM_LENGTH + SEGMENT_LENGTH)
    assert (tmp_path / f"0-{2 * TERM_LENGTH + SEGMENT_LENGTH}.rec").exists()
    with reader_for(tmp_path, builder, writer.position) as reader:
        assert read_all(reader, start, writer.position) == builder.expected_bytes(start, writer.position)
        with pytest.raises(ArchiveError) as err:
            reader.read_into(bytearray(64), start - 64, 64)
        assert err.value.error_code == ErrorCode.INVALID_POSITION


def test_extend_reopens_segment_at_stop_position(tmp_path: Path) -> None:
    start = TERM_LENGTH + 512
    builder = StreamBuilder(start).fill_to(start + 70_000, payload_length=300)
    first_part = builder.position
    first = write(tmp_path, builder)
    assert first.position == first_part
    builder.fill_to(first_part + 2 * SEGMENT_LENGTH, payload_length=300)
    second = write(
        tmp_path, builder, start_position=start, join_position=first_part, skip_before=first_part, block_limit=1
    )
    assert second.position == builder.position
    with reader_for(tmp_path, builder, builder.position) as reader:
        assert read_all(reader, start, builder.position, chunk=65536) == builder.expected_bytes(start, builder.position)


def test_checksums_applied_on_write_and_verified_on_read(tmp_path: Path) -> None:
    crc = Crc32c()
    builder = StreamBuilder(0).fill_to(TERM_LENGTH + 1000, payload_length=333)
    source_blocks = [bytes(b) for _, b in builder.blocks()]
    writer = write(tmp_path, builder, checksum=crc)
    assert [bytes(b) for _, b in builder.blocks()] == source_blocks  # the caller's blocks are not modified
    with reader_for(tmp_path, builder, writer.position) as reader:
        buffer = bytearray(TERM_LENGTH)
        n = reader.read_into(buffer, 0, TERM_LENGTH)
        scan = scan_frames(buffer, 0, n)
        data_sessions = scan.session_ids()[scan.types == 1]
        assert SESSION_ID not in data_sessions.tolist()
        verify_record_checksums(buffer, scan, crc, 0)
        buffer[scan.offsets[5] + 40] ^= 0xFF
        with pytest.raises(ArchiveError, match=f"CRC checksum mismatch at position={int(scan.offsets[5])}"):
            verify_record_checksums(buffer, scan, crc, 0)
        with pytest.raises(ArchiveError, match="CRC checksum mismatch"):
            verify_record_checksums(buffer, scan, Crc32(), 0)


def test_writer_checksum_off_keeps_session_id(tmp_path: Path) -> None:
    builder = StreamBuilder(0).append_many([10, 20])
    write(tmp_path, builder)
    scan = scan_frames((tmp_path / "0-0.rec").read_bytes()[:4096])
    assert scan.session_ids().tolist() == [SESSION_ID, SESSION_ID]


def test_writer_sync_levels(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH + 10, payload_length=2000)
    for level in (1, 2):
        directory = tmp_path / str(level)
        directory.mkdir()
        writer = write(directory, builder, file_sync_level=level, catalog_file_sync_level=level)
        assert writer.position == builder.position


def test_block_crossing_segment_end_is_rejected(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH - 64, payload_length=480)
    writer = RecordingWriter(tmp_path, 0, 0, SEGMENT_LENGTH - 512, TERM_LENGTH, SEGMENT_LENGTH)
    writer.init()
    with pytest.raises(ArchiveError, match="crosses the end of segment"):
        writer.on_block(bytes(1024))
    assert writer.is_closed
    with pytest.raises(ArchiveError, match="not initialised or closed"):
        writer.on_block(builder.frames[0].data)


def test_storage_space_error_code(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    writer = RecordingWriter(tmp_path, 0, 0, 0, TERM_LENGTH, SEGMENT_LENGTH)
    writer.init()
    # swap the segment file for /dev/full under the same descriptor number: every write fails with ENOSPC
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, writer._fd)
    os.close(full)
    with pytest.raises(ArchiveError) as err:
        writer.on_block(StreamBuilder(0).append(100).data)
    assert err.value.error_code == ErrorCode.STORAGE_SPACE
    assert "position=0" in err.value.message and "0-0.rec" in err.value.message


def test_reader_respects_limits(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(2 * TERM_LENGTH, payload_length=1000)
    write(tmp_path, builder)
    reader = reader_for(tmp_path, builder, NULL_POSITION)
    buffer = bytearray(1 << 20)
    assert reader.read_into(buffer, 0, 1 << 20) == TERM_LENGTH  # unbounded: the term end
    assert reader.read_into(buffer, 4096, 1 << 20, limit_position=5120) == 1024  # live limit
    assert reader.read_into(buffer, 5120, 1 << 20, limit_position=5120) == 0
    assert reader.read_into(buffer, TERM_LENGTH - 64, 1 << 20) == 64
    assert reader.read_into(memoryview(buffer)[:100], 0, 1 << 20) == 100
    reader.stop_position = 3000 // 32 * 32
    assert reader.read_into(buffer, 0, 1 << 20) == 2976
    with pytest.raises(ArchiveError, match="not a multiple of FRAME_ALIGNMENT"):
        reader.read_into(buffer, 16, 32)
    reader.close()
    with pytest.raises(ArchiveError, match="closed"):
        reader.read_into(buffer, 0, 32)


def test_reader_missing_segment(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(1000, payload_length=100)
    write(tmp_path, builder)
    with reader_for(tmp_path, builder, 3 * SEGMENT_LENGTH) as reader:
        assert reader.segment_exists(0) and not reader.segment_exists(SEGMENT_LENGTH)
        with pytest.raises(ArchiveError, match=f"recording segment not found: .*0-{2 * SEGMENT_LENGTH}.rec"):
            reader.read_into(bytearray(64), 2 * SEGMENT_LENGTH, 64)


def test_validate_frame_at(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(TERM_LENGTH + 3000, payload_length=200)
    write(tmp_path, builder, checksum=Crc32())  # session ids hold CRCs: must not matter
    with reader_for(tmp_path, builder, builder.position) as reader:
        for frame in builder.frames[1:]:
            reader.validate_frame_at(frame.position)
        reader.validate_frame_at(0)  # the start position is never checked
        reader.validate_frame_at(builder.position)  # nor the stop position
        with pytest.raises(ArchiveError) as err:
            reader.validate_frame_at(builder.frames[3].position + 32)
        assert err.value.error_code == ErrorCode.INVALID_POSITION
        assert f"replayPosition={builder.frames[3].position + 32} does not point to a valid frame" in err.value.message
    other = RecordingReader(tmp_path, 0, 0, TERM_LENGTH, SEGMENT_LENGTH, INITIAL_TERM_ID, STREAM_ID + 1)
    with pytest.raises(ArchiveError, match="does not point to a valid frame"):
        other.validate_frame_at(builder.frames[2].position)
    other.close()


@pytest.mark.parametrize("reuse", [False, True])
def test_iter_chunks_yields_whole_frames(tmp_path: Path, reuse: bool) -> None:
    builder = StreamBuilder(0).append_many([100, 5000, 37, 1376] * 60)
    writer = write(tmp_path, builder)
    with reader_for(tmp_path, builder, writer.position) as reader:
        positions = []
        out = bytearray()
        for position, chunk in reader.iter_chunks(chunk_length=8192, reuse_buffer=reuse):
            assert position == len(out) and len(chunk) <= 8192
            assert (position % TERM_LENGTH) + len(chunk) <= TERM_LENGTH
            scan = scan_frames(chunk)
            assert scan.stop_reason in (ScanStop.END, ScanStop.PADDING)
            positions.append(position)
            out += chunk
            if scan.stop_reason is ScanStop.PADDING:
                out += bytes(scan.pad_offset + scan.pad_length - len(chunk))
        assert bytes(out) == builder.expected_bytes(0, writer.position)
        with pytest.raises(ValueError, match="smaller than the frame"):
            list(reader.iter_chunks(chunk_length=1024))
        sub = list(reader.iter_chunks(builder.frames[10].position, builder.frames[20].position))
        assert sub[0][0] == builder.frames[10].position
        assert b"".join(bytes(c) for _, c in sub) == builder.expected_bytes(
            builder.frames[10].position, builder.frames[20].position
        )


def test_iter_chunks_requires_end_for_active_recording(tmp_path: Path) -> None:
    builder = StreamBuilder(0).append_many([100])
    write(tmp_path, builder)
    with reader_for(tmp_path, builder, NULL_POSITION) as reader, pytest.raises(ValueError):
        list(reader.iter_chunks())


def test_iter_chunks_reports_unexpected_end(tmp_path: Path) -> None:
    builder = StreamBuilder(0).append_many([100, 100])
    write(tmp_path, builder)
    with reader_for(tmp_path, builder, builder.position + 4096) as reader:  # stop position claims more than exists
        with pytest.raises(ArchiveError, match=f"unexpected end of recording at position={builder.position}"):
            list(reader.iter_chunks())


def test_read_numpy_buffer(tmp_path: Path) -> None:
    builder = StreamBuilder(0).append_many([64] * 10)
    write(tmp_path, builder)
    with reader_for(tmp_path, builder, builder.position) as reader:
        arr = np.zeros(4096, dtype=np.uint8)
        n = reader.read_into(arr, 0, 4096)
        assert n == builder.position and arr[:n].tobytes() == builder.expected_bytes(0, n)


def test_checksum_names_and_known_values() -> None:
    for name in ("CRC-32", "crc-32", "io.aeron.archive.checksum.Crc32", "org.agrona.checksum.Crc32"):
        assert isinstance(checksum_for_name(name), Crc32)
    for name in ("CRC-32C", "io.aeron.archive.checksum.Crc32c", "org.agrona.checksum.Crc32c", " CRC-32C "):
        assert isinstance(checksum_for_name(name), Crc32c)
    for bad in ("", "MD5", "io.aeron.archive.checksum.Adler32", "CRC-64"):
        with pytest.raises(ValueError):
            checksum_for_name(bad)
    data = b"xx123456789yy"
    assert Crc32().compute(data, 2, 9) == 0xCBF43926 - 2**32  # signed, as Java's int
    assert Crc32c().compute(bytearray(data), 2, 9) == 0xE3069283 - 2**32
    assert Crc32c().compute(np.frombuffer(data, dtype=np.uint8), 2, 9) == 0xE3069283 - 2**32
    assert isinstance(Crc32(), Checksum)
    with pytest.raises(ValueError):
        Crc32().compute(data, 10, 10)


def test_apply_record_checksums_skips_padding() -> None:
    builder = StreamBuilder(0).fill_to(TERM_LENGTH - 200, payload_length=300)
    builder.append(500)
    term = bytearray(b"".join(f.data for f in builder.frames if f.position < TERM_LENGTH))
    crc = Crc32()
    done = apply_record_checksums(term, crc)
    data_frames = [f for f in builder.frames if f.position < TERM_LENGTH and not f.is_pad]
    assert done == len(data_frames)
    for f in data_frames:
        expected = crc.compute(f.data, 32, f.length - 32)
        assert struct.unpack_from("<i", term, f.position + 12)[0] == expected
    pad = next(f for f in builder.frames if f.is_pad)
    assert term[pad.position : pad.position + 32] == pad.data[:32]  # PAD untouched
    assert find_checksum_mismatch(term, scan_frames(term), crc, 0) is None


def test_first_checksum_mismatch_offsets() -> None:
    builder = StreamBuilder(0).append_many([50, 60, 70])
    buf = bytearray(b"".join(f.data for f in builder.frames))
    crc = Crc32c()
    apply_record_checksums(buf, crc)
    assert first_checksum_mismatch(buf, scan_frames(buf), crc) == -1
    buf[builder.frames[1].position + 33] ^= 1
    assert first_checksum_mismatch(buf, scan_frames(buf), crc) == builder.frames[1].position


@pytest.mark.parametrize("chunk", [3, 8, 40, 4096])
def test_read_into_with_a_head_puts_the_first_bytes_there_and_leaves_the_buffer_start_alone(
    tmp_path: Path, chunk: int
) -> None:
    builder = StreamBuilder(0).append_many([100, 3000, 1, 1376, 500] * 4)
    writer = write(tmp_path, builder, block_limit=4096)
    reader = reader_for(tmp_path, builder, writer.position)
    expected = read_all(reader, 0, writer.position)
    for position in (0, 128, 4096):
        head = bytearray(8)
        buffer = bytearray(b"\xee" * chunk)
        n = reader.read_into(buffer, position, chunk, head=head)
        assert n == chunk
        split = min(8, chunk)
        assert head[:split] == expected[position : position + split]
        assert buffer[:split] == b"\xee" * split  # left for the caller (a term's length word stays zero)
        assert buffer[split:n] == expected[position + split : position + n]
