"""Issue 11, defects 1 and 4: torn frames at the end of a cut segment file, and DATA frames turned into PAD.

A segment file is pre-sized to the full segment length, so a shorter file was cut (a torn write, a copy that did
not finish, a truncation by hand). Its missing bytes must never read as zeros and pass for data: verify reports the
frame the cut runs through wherever it is, `--fix` keeps exactly the good frames before it, and the reader returns
only the bytes that exist.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from aeron_archive_spark.archive.constants import NULL_POSITION
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.frames import PAGE_SIZE, TYPE_FIELD_OFFSET
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.storage.verify import IssueKind, verify_archive, verify_recording
from tests.unit.storage_helpers import SEGMENT_LENGTH, TERM_LENGTH, StreamBuilder
from tests.unit.test_verify import corrupt, descriptor, record


def cut_file(path: Path, length: int) -> None:
    os.truncate(path, length)


def last_frame_recording(tmp_path: Path, *, stop: bool) -> tuple[int, int, StreamBuilder]:
    """A recording whose last frame (1000 bytes of payload) lies inside one page: the page-straddle check of
    crash recovery cannot see a cut through it."""
    builder = StreamBuilder(0).fill_to(5000, payload_length=96)
    last = builder.append(1000)
    assert last.position // PAGE_SIZE == (last.position + last.length - 1) // PAGE_SIZE
    rid, end = record(tmp_path, builder, stop=stop)
    return rid, end, builder


@pytest.mark.parametrize("stop", [True, False], ids=["stopped", "crashed"])
def test_cut_through_last_frame_is_torn_and_fix_keeps_the_frames_before(tmp_path: Path, stop: bool) -> None:
    rid, end, builder = last_frame_recording(tmp_path, stop=stop)
    last = builder.frames[-1]
    present = 500
    cut_file(tmp_path / "0-0.rec", last.position + present)

    [result] = verify_archive(tmp_path)
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.TORN_LAST_FRAME, last.position)]
    message = result.issues[0].message
    assert f"position={last.position}" in message
    assert f"frameLength={32 + 1000}" in message
    assert f"{present} of its {last.length} bytes" in message
    assert "0-0.rec" in message
    assert result.end_position == last.position

    [fixed] = verify_archive(tmp_path, fix=True)
    assert fixed.fixed and fixed.new_stop_position == last.position < end
    data = (tmp_path / "0-0.rec").read_bytes()
    assert len(data) == SEGMENT_LENGTH
    assert data[: last.position] == builder.expected_bytes(0, last.position)
    assert data[last.position :] == bytes(SEGMENT_LENGTH - last.position)
    with Catalog(tmp_path, writable=False) as catalog:
        assert catalog.stop_position(rid) == last.position
    [again] = verify_archive(tmp_path)
    assert again.ok and again.end_position == last.position


def test_cut_inside_the_last_frame_header_is_torn(tmp_path: Path) -> None:
    _, _, builder = last_frame_recording(tmp_path, stop=True)
    last = builder.frames[-1]
    cut_file(tmp_path / "0-0.rec", last.position + 10)
    [result] = verify_archive(tmp_path)
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.TORN_LAST_FRAME, last.position)]
    assert f"10 of its {last.length} bytes" in result.issues[0].message


def test_cut_in_an_earlier_segment_is_torn_there(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH + 20_000, payload_length=500)
    rid, _end = record(tmp_path, builder)
    victim = next(f for f in builder.frames if f.position > 90_000 and not f.is_pad)
    cut_file(tmp_path / "0-0.rec", victim.position + 100)
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert [(i.kind, i.position) for i in result.issues] == [(IssueKind.TORN_LAST_FRAME, victim.position)]
    with Catalog(tmp_path, capacity=4096, recover=False) as catalog:
        fixed = verify_recording(tmp_path, descriptor(tmp_path, rid), fix=True, catalog=catalog)
    assert fixed.new_stop_position == victim.position and fixed.deleted_files == ["0-131072.rec"]
    assert os.path.getsize(tmp_path / "0-0.rec") == SEGMENT_LENGTH


def test_segment_ending_on_a_frame_boundary_before_stop_is_reported(tmp_path: Path) -> None:
    _, _, builder = last_frame_recording(tmp_path, stop=True)
    last = builder.frames[-1]
    cut_file(tmp_path / "0-0.rec", last.position)
    [result] = verify_archive(tmp_path)
    assert [(i.kind.value, i.position) for i in result.issues] == [("truncated_segment", last.position)]
    assert "0-0.rec" in result.issues[0].message and f"stopPosition={builder.position}" in result.issues[0].message
    [fixed] = verify_archive(tmp_path, fix=True)
    assert fixed.new_stop_position == last.position


def test_crashed_recording_in_a_short_file_ending_on_a_frame_boundary_is_not_torn(tmp_path: Path) -> None:
    _rid, end, _ = last_frame_recording(tmp_path, stop=False)
    cut_file(tmp_path / "0-0.rec", end)
    [result] = verify_archive(tmp_path)
    assert result.ok and result.end_position == end


def test_full_length_file_with_zeros_after_the_data_is_not_torn(tmp_path: Path) -> None:
    """What Java Aeron and older versions leave: a pre-sized file, zeros past the last frame (no frame there)."""
    _rid, end, _ = last_frame_recording(tmp_path, stop=False)
    assert os.path.getsize(tmp_path / "0-0.rec") == SEGMENT_LENGTH
    [result] = verify_archive(tmp_path)
    assert result.ok and result.end_position == end
    [fixed] = verify_archive(tmp_path, fix=True)
    assert fixed.ok and fixed.new_stop_position == end


def test_page_straddling_torn_frame_message_says_what_was_found(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(3072, payload_length=96)
    last = builder.append(2000)
    record(tmp_path, builder, stop=False)
    corrupt(tmp_path / "0-0.rec", 4096, bytes(last.position + last.length - 4096))
    [result] = verify_archive(tmp_path)
    [issue] = result.issues
    assert issue.kind is IssueKind.TORN_LAST_FRAME and issue.position == last.position
    assert f"position={last.position}" in issue.message and f"frameLength={32 + 2000}" in issue.message
    assert f"{4096 - last.position} of its {last.length} bytes" in issue.message
    assert "position=4096" in issue.message  # the all-zero page


def test_reader_never_pads_a_short_file_with_zeros(tmp_path: Path) -> None:
    rid, end, builder = last_frame_recording(tmp_path, stop=True)
    last = builder.frames[-1]
    cut_file(tmp_path / "0-0.rec", last.position + 500)
    d = descriptor(tmp_path, rid)
    with RecordingReader.for_descriptor(tmp_path, d) as reader:
        buffer = bytearray(b"\xee" * end)
        n = reader.read_into(buffer, 0, end)
        assert n == last.position + 500
        assert buffer[:n] == builder.expected_bytes(0, n)
        assert reader.read_into(buffer, last.position + 512, 64) == 0  # past the end of the file
        with pytest.raises(ArchiveError) as err:
            list(reader.iter_chunks())
    message = str(err.value)
    assert f"position={last.position}" in message and "0-0.rec" in message and f"recordingId={rid}" in message


def test_reader_iter_chunks_stops_with_an_error_at_a_missing_tail(tmp_path: Path) -> None:
    rid, _end, builder = last_frame_recording(tmp_path, stop=True)
    last = builder.frames[-1]
    cut_file(tmp_path / "0-0.rec", last.position)
    with RecordingReader.for_descriptor(tmp_path, descriptor(tmp_path, rid)) as reader:
        chunks = []
        with pytest.raises(ArchiveError) as err:
            for position, chunk in reader.iter_chunks(chunk_length=1024):
                chunks.append((position, bytes(chunk)))
    assert b"".join(c for _, c in chunks) == builder.expected_bytes(0, last.position)
    assert f"position={last.position}" in str(err.value) and "0-0.rec" in str(err.value)


def data_turned_into_pad(tmp_path: Path) -> tuple[int, int, int]:
    builder = StreamBuilder(0).fill_to(TERM_LENGTH + 20_000, payload_length=300)
    rid, _end = record(tmp_path, builder)
    victim = next(f for f in builder.frames if f.position > 10_000 and not f.is_pad)
    corrupt(tmp_path / "0-0.rec", victim.position + TYPE_FIELD_OFFSET, struct.pack("<H", 0))
    return rid, victim.position, victim.length


def test_data_frame_turned_into_pad_is_reported(tmp_path: Path) -> None:
    rid, position, _length = data_turned_into_pad(tmp_path)
    [result] = verify_archive(tmp_path)
    assert not result.ok, "a PAD frame in the middle of a term must be reported"
    assert [(i.kind.value, i.position) for i in result.issues] == [("invalid_padding", position)]
    message = result.issues[0].message
    assert f"recordingId={rid}" in message and f"position={position}" in message
    assert f"length={32 + 300}" in message and f"term end position={TERM_LENGTH}" in message
    [fixed] = verify_archive(tmp_path, fix=True)
    assert fixed.new_stop_position == position
    assert verify_archive(tmp_path)[0].ok


def test_pad_frames_closing_terms_are_fine(tmp_path: Path) -> None:
    builder = StreamBuilder(TERM_LENGTH - 4096).fill_to(3 * TERM_LENGTH + 500, payload_length=1500)
    assert sum(f.is_pad for f in builder.frames) >= 3
    rid, end = record(tmp_path, builder)
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert result.ok and result.end_position == end
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    rid, end = record(crashed, StreamBuilder(0).fill_to(TERM_LENGTH, payload_length=1500), stop=False)
    result = verify_recording(crashed, descriptor(crashed, rid))
    assert result.ok and result.end_position == end and descriptor(crashed, rid).stop_position == NULL_POSITION
