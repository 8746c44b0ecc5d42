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
from aeron_archive_spark.archive.storage import verify as verify_module
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
    # A PAD may lie anywhere in its term (issue 30): what gives this one away is the payload after its header,
    # where a recorder leaves a PAD's body zero.
    assert not result.ok, "a PAD frame with a payload after its header must be reported"
    assert [(i.kind.value, i.position) for i in result.issues] == [("invalid_padding", position)]
    message = result.issues[0].message
    assert message == (f"PAD frame at position={position} of length={32 + 300} holds non-zero bytes after its "
                       f"header (a DATA frame turned into padding?), recordingId={rid}")
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


def padded_builder(start: int = 0) -> StreamBuilder:
    """PADs as Java's `appendPadding` leaves them anywhere in a term, up to longer than a verify chunk."""
    builder = StreamBuilder(start)
    for length in (0, 200, 8292, TERM_LENGTH // 2, 1_200_000 % TERM_LENGTH, 40):
        builder.append_many([300] * 9)
        builder.append_padding(length)
    builder.fill_to(SEGMENT_LENGTH - 700, payload_length=300)
    builder.pad_to_term_end()
    builder.append_padding(500)  # the first frame of the second segment file
    builder.append_many([100] * 4)
    builder.append_padding(64)  # the last frame
    return builder


@pytest.fixture(params=[1024 * 1024, 8192], ids=["term-chunks", "8k-chunks"])
def chunk_length(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Verify reads whole terms (up to 1 MiB) at a time; with 8 KiB chunks long PADs outrun a chunk."""
    monkeypatch.setattr(verify_module, "_CHUNK_LENGTH", request.param)
    return int(request.param)


@pytest.mark.parametrize("stop", [True, False], ids=["stopped", "crashed"])
def test_pad_frames_anywhere_in_a_term_are_fine(tmp_path: Path, stop: bool, chunk_length: int) -> None:
    builder = padded_builder()
    assert any(f.is_pad and (f.position + f.length) % TERM_LENGTH for f in builder.frames)
    rid, end = record(tmp_path, builder, stop=stop)
    result = verify_recording(tmp_path, descriptor(tmp_path, rid))
    assert result.ok, result.summary()
    assert result.end_position == end and result.frame_count == len(builder.frames)


def test_a_long_pad_with_a_payload_after_its_header_is_reported(tmp_path: Path, chunk_length: int) -> None:
    builder = padded_builder()
    pad = next(f for f in builder.frames if f.is_pad and f.length == TERM_LENGTH // 2 + 32)
    rid, _end = record(tmp_path, builder)
    corrupt(tmp_path / "0-0.rec", pad.position + 20_000, b"\x01")
    [result] = verify_archive(tmp_path)
    assert [(i.kind.value, i.position) for i in result.issues] == [("invalid_padding", pad.position)]


def test_a_pad_shorter_than_its_header_is_reported(tmp_path: Path, chunk_length: int) -> None:
    builder = padded_builder()
    pad = next(f for f in builder.frames if f.is_pad and f.length == 256)  # frame length 232: appendPadding(200)
    rid, _end = record(tmp_path, builder)
    corrupt(tmp_path / "0-0.rec", pad.position, struct.pack("<i", 20))
    [result] = verify_archive(tmp_path)
    assert [(i.kind.value, i.position) for i in result.issues] == [("invalid_padding", pad.position)]
    assert "shorter than a frame header" in result.issues[0].message


def test_a_pad_whose_length_was_hit_is_caught_by_the_chain(tmp_path: Path) -> None:
    """A PAD cut shorter leaves zeros where the chain goes on (a zero-length gap); one made longer covers the next
    frame's bytes (a body that is not zero) or runs past its term."""
    builder = padded_builder()
    pad = next(f for f in builder.frames if f.is_pad and f.length == 256)  # frame length 232: appendPadding(200)
    rid, _end = record(tmp_path, builder)
    corrupt(tmp_path / "0-0.rec", pad.position, struct.pack("<i", 96))
    [shorter] = verify_archive(tmp_path)
    assert [(i.kind, i.position) for i in shorter.issues] == [(IssueKind.ZERO_LENGTH_GAP, pad.position + 96)]
    corrupt(tmp_path / "0-0.rec", pad.position, struct.pack("<i", 232 + 64))
    [longer] = verify_archive(tmp_path)
    assert [(i.kind, i.position) for i in longer.issues] == [(IssueKind.INVALID_PADDING, pad.position)]
    corrupt(tmp_path / "0-0.rec", pad.position, struct.pack("<i", TERM_LENGTH))
    [past] = verify_archive(tmp_path)
    assert [(i.kind, i.position) for i in past.issues] == [(IssueKind.FRAME_OVERRUN, pad.position)]
