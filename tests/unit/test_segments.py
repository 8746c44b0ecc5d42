from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.segments import (
    delete_pending_name,
    delete_segment_file,
    erase_segment_tail,
    highest_segment_file,
    index_segment_files,
    is_delete_pending,
    list_segment_files,
    mark_for_deletion,
    parse_segment_file_name,
    recording_file_names,
    segment_file_base_position,
    segment_file_name,
    segment_files,
    truncate_segment_files,
)
from tests.unit.storage_helpers import SEGMENT_LENGTH, TERM_LENGTH, StreamBuilder, make_descriptor

T = 64 * 1024
S = 8 * T


def test_segment_file_name() -> None:
    assert segment_file_name(1, 131072) == "1-131072.rec"
    assert segment_file_name(0, 0) == "0-0.rec"


@pytest.mark.parametrize(
    ("start", "position", "expected"),
    [
        (0, 0, 0),
        (0, 2 * T, 0),
        (0, S, S),
        (T, T, T),
        (4 * T, 4 * T, 4 * T),
        (T, T + S, T + S),
        (T, T + S - 32, T),
        (T + 32, T + S, T + S),
    ],
)
def test_segment_file_base_position_vectors(start: int, position: int, expected: int) -> None:
    """ArchiveTest.shouldCalculateCorrectSegmentFilePosition (facts sheet §1.3)."""
    assert segment_file_base_position(start, position, T, S) == expected


def test_segment_base_is_aligned_to_start_term_base() -> None:
    start = 3 * T + 96
    assert segment_file_base_position(start, start, T, 2 * T) == 3 * T
    assert segment_file_base_position(start, 5 * T - 32, T, 2 * T) == 3 * T
    assert segment_file_base_position(start, 5 * T, T, 2 * T) == 5 * T


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("1-131072.rec", (1, 131072)),
        ("0-0.rec", (0, 0)),
        ("12345678901-9876543210.rec", (12345678901, 9876543210)),
        ("3--64.rec", (3, -64)),
        ("-1-0.rec", None),
        ("1-.rec", None),
        ("1.rec", None),
        ("a-0.rec", None),
        ("1-0.rec.del", None),
        ("1-0.dat", None),
        ("archive.catalog", None),
        ("1-0x10.rec", None),
    ],
)
def test_parse_segment_file_name(name: str, expected: tuple[int, int] | None) -> None:
    assert parse_segment_file_name(name) == expected


def test_list_segment_files_sorted_numerically(tmp_path: Path) -> None:
    for name in ("2-0.rec", "1-1048576.rec", "1-131072.rec", "1-0.rec", "1-262144.rec.del", "x.rec", "archive.catalog"):
        (tmp_path / name).write_bytes(b"")
    files = segment_files(tmp_path, 1)
    assert [f.base_position for f in files] == [0, 131072, 1048576]
    assert files[0].path == os.path.join(str(tmp_path), "1-0.rec")
    all_files = segment_files(tmp_path)
    assert [(f.recording_id, f.base_position) for f in all_files] == [(1, 0), (1, 131072), (1, 1048576), (2, 0)]
    assert set(index_segment_files(tmp_path)) == {1, 2}
    assert segment_files(tmp_path / "missing") == [] and list_segment_files(tmp_path / "missing") == []
    # "11-0.rec" must not be taken for recording 1
    (tmp_path / "11-0.rec").write_bytes(b"")
    assert list_segment_files(tmp_path, 1) == ["1-0.rec", "1-131072.rec", "1-1048576.rec"]


def test_highest_segment_file(tmp_path: Path) -> None:
    for name in ("4-0.rec", "4-65536.rec", "4-131072.rec"):
        (tmp_path / name).write_bytes(b"")
    highest = highest_segment_file(segment_files(tmp_path, 4))
    assert highest is not None and highest.name == "4-131072.rec"
    assert highest_segment_file([]) is None
    (tmp_path / "4--32.rec").write_bytes(b"")
    with pytest.raises(ArchiveError, match="negative position"):
        highest_segment_file(segment_files(tmp_path, 4))


def test_delete_helpers(tmp_path: Path) -> None:
    assert delete_pending_name("1-0.rec") == "1-0.rec.del"
    assert delete_pending_name("1-0.rec.del") == "1-0.rec.del"
    assert is_delete_pending("1-0.rec.del") and not is_delete_pending("1-0.rec")
    (tmp_path / "5-0.rec").write_bytes(b"x")
    (tmp_path / "5-65536.rec").write_bytes(b"x")
    (tmp_path / "55-0.rec").write_bytes(b"x")
    assert mark_for_deletion(tmp_path, "5-65536.rec") == "5-65536.rec.del"
    assert recording_file_names(tmp_path, 5) == ["5-0.rec", "5-65536.rec.del"]
    assert list_segment_files(tmp_path, 5) == ["5-0.rec"]
    # the `.rec` name is gone, so deletion falls back to the `.del` name
    assert delete_segment_file(tmp_path, "5-65536.rec") is True
    assert delete_segment_file(tmp_path, "5-0.rec") is True
    assert delete_segment_file(tmp_path, "5-0.rec") is False
    assert recording_file_names(tmp_path, 5) == []
    assert recording_file_names(tmp_path, 55) == ["55-0.rec"]


def test_erase_segment_tail_keeps_length(tmp_path: Path) -> None:
    path = tmp_path / "1-0.rec"
    path.write_bytes(b"\x07" * 4096)
    erase_segment_tail(str(path), 1000, 8192)
    data = path.read_bytes()
    assert len(data) == 8192
    assert data[:1000] == b"\x07" * 1000 and data[1000:] == bytes(8192 - 1000)


def record(tmp_path: Path, builder: StreamBuilder, recording_id: int = 0) -> int:
    writer = RecordingWriter(
        tmp_path, recording_id, builder.start_position, builder.start_position, TERM_LENGTH, SEGMENT_LENGTH
    )
    writer.init()
    for _, block in builder.blocks(TERM_LENGTH):
        writer.on_block(block)
    writer.close()
    return writer.position


def test_truncate_inside_segment(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(3 * SEGMENT_LENGTH + 5000, payload_length=200)
    stop = record(tmp_path, builder)
    descriptor = make_descriptor(0, start_position=0, stop_position=stop)
    frame = next(f for f in builder.frames if f.position > SEGMENT_LENGTH + 10_000 and not f.is_pad)
    files = truncate_segment_files(tmp_path, descriptor, frame.position)
    assert files == ["0-262144.rec", "0-393216.rec"]
    data = (tmp_path / "0-131072.rec").read_bytes()
    assert len(data) == SEGMENT_LENGTH
    offset = frame.position - SEGMENT_LENGTH
    assert data[:offset] == builder.expected_bytes(SEGMENT_LENGTH, frame.position)
    assert data[offset:] == bytes(SEGMENT_LENGTH - offset)


def test_truncate_on_segment_boundary_and_to_start(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(2 * SEGMENT_LENGTH + 100, payload_length=500)
    stop = record(tmp_path, builder)
    descriptor = make_descriptor(0, start_position=0, stop_position=stop)
    assert truncate_segment_files(tmp_path, descriptor, SEGMENT_LENGTH) == ["0-131072.rec", "0-262144.rec"]
    (tmp_path / "0-0.rec.del").write_bytes(b"")
    assert truncate_segment_files(tmp_path, descriptor, 0) == ["0-0.rec", "0-0.rec.del", "0-131072.rec", "0-262144.rec"]


def test_truncate_at_stop_position_inside_segment_erases_nothing(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(5000, payload_length=100)
    stop = record(tmp_path, builder)
    descriptor = make_descriptor(0, start_position=0, stop_position=stop)
    before = (tmp_path / "0-0.rec").read_bytes()
    assert truncate_segment_files(tmp_path, descriptor, stop) == []
    assert (tmp_path / "0-0.rec").read_bytes() == before


def test_truncate_rejects_bad_positions(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(5000, payload_length=100)
    stop = record(tmp_path, builder)
    descriptor = make_descriptor(0, start_position=0, stop_position=stop)
    with pytest.raises(ArchiveError) as err:
        truncate_segment_files(tmp_path, descriptor, 32)  # inside the first frame's payload
    assert err.value.error_code == ErrorCode.INVALID_POSITION
    assert "position not aligned to a data header" in err.value.message
    for bad in (stop + 32, 48, -32):
        with pytest.raises(ArchiveError) as err:
            truncate_segment_files(tmp_path, descriptor, bad)
        assert err.value.error_code == ErrorCode.INVALID_POSITION
    with pytest.raises(ArchiveError) as err:
        truncate_segment_files(tmp_path, replace(descriptor, stop_position=-1), 0)
    assert err.value.error_code == ErrorCode.ACTIVE_RECORDING
