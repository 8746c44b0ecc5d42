from __future__ import annotations

import os
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from aeron_archive_spark.archive.constants import NULL_POSITION, NULL_TIMESTAMP, RecordingState
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.storage.catalog import (
    CATALOG_VERSION,
    Catalog,
    CatalogIndex,
    compose_semantic_version,
    find_segment_end,
    fragment_straddles_page_boundary,
)
from aeron_archive_spark.archive.storage.checksums import Crc32, Crc32c
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from tests.unit.storage_helpers import (
    INITIAL_TERM_ID,
    MTU_LENGTH,
    SEGMENT_LENGTH,
    SESSION_ID,
    STREAM_ID,
    TERM_LENGTH,
    StreamBuilder,
    frame_bytes,
    make_descriptor,
    write_legacy_catalog,
)

NOW = 1_700_000_123_456


def clock() -> int:
    return NOW


def add(catalog: Catalog, n: int = 0, **overrides: Any) -> int:
    args: dict[str, Any] = {
        "start_position": 0,
        "start_timestamp": 1000 + n,
        "initial_term_id": INITIAL_TERM_ID,
        "segment_file_length": SEGMENT_LENGTH,
        "term_buffer_length": TERM_LENGTH,
        "mtu_length": MTU_LENGTH,
        "session_id": SESSION_ID + n,
        "stream_id": STREAM_ID,
        "stripped_channel": f"aeron:udp?endpoint=localhost:{40000 + n}",
        "original_channel": f"aeron:udp?endpoint=localhost:{40000 + n}|term-length=64k",
        "source_identity": f"127.0.0.1:{50000 + n}",
    }
    args.update(overrides)
    return catalog.add_new_recording(**args)


def test_new_catalog_header_bytes(tmp_path: Path) -> None:
    Catalog(tmp_path, capacity=4096, clock_ms=clock).close()
    data = (tmp_path / "archive.catalog").read_bytes()
    assert len(data) == 4096
    assert struct.unpack_from("<iiqi", data, 0) == (196864, 32, 0, 64)
    assert CATALOG_VERSION == 196864
    assert data[20:32] == bytes(12)


def test_entry_layout_is_aeron_v3(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        first = add(catalog, 0, start_position=65536 + 96)
        second = add(
            catalog, 1, stripped_channel="aeron:ipc", original_channel="aeron:ipc", source_identity="aeron:ipc"
        )
    assert (first, second) == (0, 1)
    data = (tmp_path / "archive.catalog").read_bytes()
    assert struct.unpack_from("<q", data, 8)[0] == 2  # nextRecordingId

    stripped, original, source = (
        b"aeron:udp?endpoint=localhost:40000",
        b"aeron:udp?endpoint=localhost:40000|term-length=64k",
        b"127.0.0.1:50000",
    )
    body_length = 7 * 8 + 6 * 4 + 12 + len(stripped) + len(original) + len(source)
    frame_length = (32 + body_length + 63) // 64 * 64
    length, state, checksum = struct.unpack_from("<iii", data, 32)
    assert (length, state, checksum) == (frame_length - 32, 1, 0)
    block = struct.unpack_from("<qqqqqqqiiiiii", data, 64)
    assert block == (
        0,
        0,
        0,
        1000,
        -1,
        65536 + 96,
        -1,
        INITIAL_TERM_ID,
        SEGMENT_LENGTH,
        TERM_LENGTH,
        MTU_LENGTH,
        SESSION_ID,
        STREAM_ID,
    )
    cursor = 64 + 80
    for expected in (stripped, original, source):
        (n,) = struct.unpack_from("<I", data, cursor)
        assert data[cursor + 4 : cursor + 4 + n] == expected
        cursor += 4 + n
    assert data[cursor : 32 + frame_length] == bytes(32 + frame_length - cursor)  # zero padding
    second_offset = 32 + frame_length
    assert second_offset % 64 == 32  # every entry offset is 32 mod 64
    assert struct.unpack_from("<q", data, second_offset + 32 + 16)[0] == 1


def test_find_and_descriptor(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        rid = add(catalog, 3, start_position=4096)
        descriptor = catalog.find(rid)
        assert descriptor is not None
        assert descriptor.recording_id == rid and descriptor.start_position == 4096
        assert descriptor.stop_position == NULL_POSITION and descriptor.stop_timestamp == NULL_TIMESTAMP
        assert descriptor.session_id == SESSION_ID + 3 and descriptor.stream_id == STREAM_ID
        assert descriptor.original_channel.endswith("|term-length=64k")
        assert descriptor.source_identity == "127.0.0.1:50003"
        assert descriptor.is_active
        assert catalog.find(99) is None and not catalog.has_recording(99)
        with pytest.raises(ArchiveError) as err:
            catalog.get(99)
        assert err.value.error_code == ErrorCode.UNKNOWN_RECORDING
        assert catalog.start_position(rid) == 4096 and catalog.stop_position(rid) == NULL_POSITION


def test_stop_extend_positions_and_state(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        rid = add(catalog)
        catalog.recording_stopped(rid, 8192, 5555)
        d = catalog.get(rid)
        assert (d.stop_position, d.stop_timestamp) == (8192, 5555)
        catalog.extend_recording(rid, control_session_id=77, correlation_id=88, session_id=-5)
        d = catalog.get(rid)
        assert (d.control_session_id, d.correlation_id, d.session_id) == (77, 88, -5)
        assert (d.stop_position, d.stop_timestamp) == (NULL_POSITION, NULL_TIMESTAMP)
        catalog.update_start_position(rid, 4096)
        catalog.update_stop_position(rid, 16384)
        assert (catalog.start_position(rid), catalog.stop_position(rid)) == (4096, 16384)

        other = add(catalog, 1)
        assert catalog.change_state(rid, RecordingState.DELETED) is True
        assert not catalog.has_recording(rid) and catalog.find(rid) is None
        assert catalog.change_state(rid, RecordingState.INVALID) is False  # not indexed any more
        assert list(catalog.recording_ids()) == [other]
        states = [(e.descriptor.recording_id, e.state) for e in catalog.entries()]
        assert states == [(rid, RecordingState.DELETED), (other, RecordingState.VALID)]
        assert catalog.change_state(rid, RecordingState.VALID) is True  # mark-valid finds it again
        assert list(catalog.recording_ids()) == [rid, other]


def test_find_cached_decodes_only_entries_that_changed(tmp_path: Path) -> None:
    cache: dict[int, Any] = {}
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        rid, other = add(catalog), add(catalog, 1)
        first = catalog.find_cached(rid, cache)
        assert first == catalog.find(rid) and set(cache) == {rid}
        with Catalog(tmp_path, writable=False) as reader:  # another opening of the file: same bytes, same object
            assert reader.find_cached(rid, cache) is first
        catalog.recording_stopped(rid, 8192, 5555)
        with Catalog(tmp_path, writable=False) as reader:
            stopped = reader.find_cached(rid, cache)
            assert stopped is not None and stopped is not first and stopped.stop_position == 8192
            assert reader.find_cached(other, cache) == catalog.find(other)
            assert reader.find_cached(99, cache) is None
        catalog.change_state(other, RecordingState.INVALID)
        assert catalog.find_cached(other, cache) is None


def test_wire_bytes_run_to_end_of_aligned_frame(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        rid = add(catalog)
        wire = catalog.descriptor_wire_bytes(rid)
        length = struct.unpack_from("<i", (tmp_path / "archive.catalog").read_bytes(), 32)[0]
        assert len(wire) == 32 + length - 32 - 16
        assert struct.unpack_from("<q", wire, 0)[0] == rid
        assert struct.unpack_from("<q", wire, 8)[0] == 1000  # startTimestamp follows recordingId
        assert wire.endswith(b"\x00")


def test_growth_past_initial_capacity_and_reopen(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        ids = [add(catalog, n) for n in range(200)]
        for rid in ids:
            catalog.recording_stopped(rid, rid * 64, 10 + rid)
        catalog.change_state(ids[5], RecordingState.INVALID)
        assert catalog.capacity > 4096
        before = {rid: catalog.find(rid) for rid in ids}
        capacity = catalog.capacity
    assert ids == list(range(200))
    assert os.path.getsize(tmp_path / "archive.catalog") == capacity
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as reopened:
        assert reopened.next_recording_id == 200
        assert list(reopened.recording_ids()) == [i for i in ids if i != 5]
        assert list(reopened.recording_ids(from_id=198)) == [198, 199]
        for rid in ids:
            assert reopened.find(rid) == (None if rid == 5 else before[rid])
        assert add(reopened, 500) == 200


def test_growth_factor(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=256, clock_ms=clock) as catalog:
        add(catalog)
        assert catalog.capacity == 384  # 256 -> 256 + 128 fits one 192-byte entry
        add(catalog)
        assert catalog.capacity in (576, 864)


def test_checksums_cover_descriptor(tmp_path: Path) -> None:
    crc = Crc32c()
    with Catalog(tmp_path, capacity=4096, checksum=crc, clock_ms=clock) as catalog:
        rid = add(catalog)
        data = (tmp_path / "archive.catalog").read_bytes()
        length, _, stored = struct.unpack_from("<iii", data, 32)
        assert stored == crc.compute(data, 64, length) != 0
        catalog.recording_stopped(rid, 4096, 1)
        data = (tmp_path / "archive.catalog").read_bytes()
        assert struct.unpack_from("<i", data, 40)[0] == crc.compute(data, 64, length) != stored
        assert catalog.entry_checksum_ok(rid)
    with Catalog(tmp_path, writable=False, checksum=Crc32()) as wrong_algorithm:
        assert not wrong_algorithm.entry_checksum_ok(rid)


def test_find_last_matching(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        a = add(catalog, 0, session_id=1, original_channel="aeron:udp?endpoint=host:1|alias=a")
        b = add(catalog, 1, session_id=1, original_channel="aeron:udp?endpoint=host:1|alias=b")
        c = add(catalog, 2, session_id=2, original_channel="aeron:udp?endpoint=host:1|alias=a")
        assert catalog.find_last_matching(0, "alias=a", STREAM_ID, 1) == a
        assert catalog.find_last_matching(0, "endpoint=host:1", STREAM_ID, 1) == b
        assert catalog.find_last_matching(0, "", STREAM_ID, 2) == c
        assert catalog.find_last_matching(b, "alias=a", STREAM_ID, 1) == -1
        assert catalog.find_last_matching(0, "alias=a", STREAM_ID + 1, 1) == -1
        assert catalog.find_last_matching(-1, "", STREAM_ID, 1) == -1
        catalog.change_state(b, RecordingState.DELETED)
        assert catalog.find_last_matching(0, "endpoint=host:1", STREAM_ID, 1) == a


def test_next_recording_id_from_header(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        for n in range(3):
            add(catalog, n)
    path = tmp_path / "archive.catalog"
    data = bytearray(path.read_bytes())
    struct.pack_into("<q", data, 8, 0)
    path.write_bytes(data)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.next_recording_id == 3  # derived as lastId + 1

    struct.pack_into("<q", data, 8, 1)
    path.write_bytes(data)
    with pytest.raises(ArchiveError, match="invalid nextRecordingId"):
        Catalog(tmp_path, capacity=4096, clock_ms=clock)
    with Catalog(tmp_path, writable=False) as read_only:
        assert read_only.next_recording_id == 1

    struct.pack_into("<q", data, 8, 10)
    path.write_bytes(data)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert add(catalog) == 10


def test_incompatible_version(tmp_path: Path) -> None:
    Catalog(tmp_path, capacity=4096).close()
    path = tmp_path / "archive.catalog"
    data = bytearray(path.read_bytes())
    struct.pack_into("<i", data, 0, compose_semantic_version(4, 0, 0))
    path.write_bytes(data)
    for writable in (True, False):
        with pytest.raises(ArchiveError, match="incompatible catalog file version 4.0.0"):
            Catalog(tmp_path, writable=writable)


def test_invalid_capacity_and_missing_catalog(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Catalog(tmp_path, capacity=16)
    with pytest.raises(ArchiveError, match="catalog not found"):
        Catalog(tmp_path / "nothing", writable=False)


def test_read_only_catalog_rejects_writes(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096) as catalog:
        rid = add(catalog)
    with Catalog(tmp_path, writable=False) as read_only:
        assert read_only.find(rid) is not None
        with pytest.raises(ArchiveError, match="read-only"):
            read_only.recording_stopped(rid, 0, 0)
    assert read_only.is_closed


def test_legacy_1kb_catalog_read_only(tmp_path: Path) -> None:
    descriptors = [
        make_descriptor(0, stop_position=4096),
        make_descriptor(1, start_position=128, stop_position=NULL_POSITION, original_channel="aeron:udp?endpoint=x:1"),
        make_descriptor(2, stop_position=8192),
    ]
    write_legacy_catalog(tmp_path, descriptors, states=[1, 0, 1])
    with Catalog(tmp_path, writable=False) as catalog:
        assert catalog.is_legacy and catalog.alignment == 1024
        assert list(catalog.recording_ids()) == [0, 2]
        assert catalog.next_recording_id == 3
        assert catalog.find(0) == descriptors[0]
        assert catalog.find(2) == descriptors[2]
        assert [e.descriptor for e in catalog.entries()] == descriptors
        wire = catalog.descriptor_wire_bytes(2)
        assert len(wire) == 1024 - 32 - 16
    with pytest.raises(ArchiveError, match="legacy fixed 1 KiB entry layout"):
        Catalog(tmp_path, writable=True)


def test_index_unit() -> None:
    index = CatalogIndex()
    index.add(1, 32)
    index.add(5, 96)
    with pytest.raises(ValueError):
        index.add(5, 160)
    index.insert(3, 64)
    assert index.ids_from(0) == [1, 3, 5] and index.ids_from(4) == [5]
    assert index.remove(3) == 64 and index.remove(3) is None
    assert index.offset(5) == 96 and 5 in index and len(index) == 2 and index.last_id == 5


# --- crash recovery ---------------------------------------------------------------------------------------------


def write_stream(tmp_path: Path, recording_id: int, builder: StreamBuilder, *, checksum: Crc32 | None = None) -> int:
    writer = RecordingWriter(
        tmp_path,
        recording_id,
        builder.start_position,
        builder.start_position,
        TERM_LENGTH,
        SEGMENT_LENGTH,
        checksum=checksum,
    )
    writer.init()
    for _, block in builder.blocks(TERM_LENGTH):
        writer.on_block(block)
    writer.close()
    return writer.position


def test_recovery_without_segment_file(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        rid = add(catalog, start_position=65536 + 64)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        d = catalog.get(rid)
        assert (d.stop_position, d.stop_timestamp) == (65536 + 64, NOW)
        assert [(r.recording_id, r.stop_position, r.segment_file) for r in catalog.recovered] == [
            (rid, 65536 + 64, None)
        ]


@pytest.mark.parametrize("start", [0, 4096 + 96, 3 * TERM_LENGTH + 32])
def test_recovery_finds_end_of_last_segment(tmp_path: Path, start: int) -> None:
    builder = StreamBuilder(start).fill_to(start + 2 * SEGMENT_LENGTH + 7000, payload_length=300)
    end = write_stream(tmp_path, 0, builder)
    stopped = StreamBuilder(0).fill_to(9000, payload_length=64)
    stopped_end = write_stream(tmp_path, 1, stopped)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog, 0, start_position=start)
        add(catalog, 1)
        catalog.recording_stopped(1, stopped_end, 1)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.stop_position(0) == end
        assert catalog.stop_position(1) == stopped_end  # stopped recordings are left alone
        assert [r.recording_id for r in catalog.recovered] == [0]
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.recovered == []


def test_recovery_in_first_segment_with_unaligned_start(tmp_path: Path) -> None:
    start = TERM_LENGTH + 1024
    builder = StreamBuilder(start).fill_to(start + 3000, payload_length=100)
    end = write_stream(tmp_path, 0, builder)
    assert (tmp_path / f"0-{TERM_LENGTH}.rec").exists()
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog, 0, start_position=start)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.stop_position(0) == end


def test_recovery_of_empty_next_segment_after_rollover(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(SEGMENT_LENGTH, payload_length=480)
    end = write_stream(tmp_path, 0, builder)
    assert end % SEGMENT_LENGTH == 0 and (tmp_path / f"0-{end}.rec").exists()
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.stop_position(0) == end


def torn_setup(tmp_path: Path, *, zero_second_page: bool) -> tuple[int, int]:
    """A recording left active whose last frame (2000 bytes of payload) straddles the 4096-byte page boundary."""
    builder = StreamBuilder(0)
    builder.fill_to(3072, payload_length=96)
    last = builder.append(2000)
    assert fragment_straddles_page_boundary(last.position, last.length)
    write_stream(tmp_path, 0, builder)
    if zero_second_page:  # what a torn write leaves: the frame header made it to disk, its second page did not
        path = tmp_path / "0-0.rec"
        data = bytearray(path.read_bytes())
        data[4096 : last.position + last.length] = bytes(last.position + last.length - 4096)
        path.write_bytes(data)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog)
    return last.position, last.position + last.length


def test_recovery_rejects_torn_last_frame(tmp_path: Path) -> None:
    last_position, _ = torn_setup(tmp_path, zero_second_page=True)
    with pytest.raises(ArchiveError) as err:
        Catalog(tmp_path, capacity=4096, clock_ms=clock)
    message = err.value.message
    assert "straddling page boundary" in message
    assert "0-0.rec" in message and "recordingId=0" in message and f"position={last_position}" in message
    assert f"aeron-archive verify --dir {tmp_path} --fix" in message


def test_recovery_accepts_straddling_frame_with_data_in_every_page(tmp_path: Path) -> None:
    _, end = torn_setup(tmp_path, zero_second_page=False)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.stop_position(0) == end


def test_recovery_accepts_straddling_frame_validated_by_checksum(tmp_path: Path) -> None:
    """The payload's second page is zeros, as a torn write would leave it, but the recorded CRC proves it."""
    crc = Crc32()
    builder = StreamBuilder(0)
    builder.fill_to(3072, payload_length=96)
    last = builder.append(2000, payload=bytes(2000))  # an all-zero payload
    end = write_stream(tmp_path, 0, builder, checksum=crc)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock, checksum=crc) as catalog:
        add(catalog)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock, checksum=crc) as catalog:
        assert catalog.stop_position(0) == end == last.position + last.length
    # without the checksum the same file looks torn
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        catalog.extend_recording(0, 1, 2, SESSION_ID)
    with pytest.raises(ArchiveError, match="straddling page boundary"):
        Catalog(tmp_path, capacity=4096, clock_ms=clock)


def test_find_segment_end_steps_over_padding(tmp_path: Path) -> None:
    builder = StreamBuilder(0).fill_to(TERM_LENGTH + 500, payload_length=1000)
    assert any(f.is_pad for f in builder.frames)
    end = write_stream(tmp_path, 0, builder)
    result = find_segment_end(str(tmp_path / "0-0.rec"), 0, SEGMENT_LENGTH, chunk_length=4096)
    assert result.stop_offset == end and not result.torn
    last = builder.frames[-1]
    assert (result.last_frame_offset, result.last_frame_length) == (last.position, last.length)


def test_recovery_of_pad_ended_term_is_accepted(tmp_path: Path) -> None:
    """A crash right after the pad that closes a term leaves a page-straddling PAD with a zero tail: accepted."""
    builder = StreamBuilder(0).fill_to(20_000, payload_length=1000)
    builder.pad_to_term_end()
    end = write_stream(tmp_path, 0, builder)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.stop_position(0) == end == TERM_LENGTH


def test_recovery_checksum_not_written_without_checksum(tmp_path: Path) -> None:
    frame = frame_bytes(b"z" * 10, term_offset=0, term_id=INITIAL_TERM_ID)
    (tmp_path / "0-0.rec").write_bytes(frame + bytes(SEGMENT_LENGTH - len(frame)))
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        assert catalog.stop_position(0) == len(frame)
        data = (tmp_path / "archive.catalog").read_bytes()
        assert struct.unpack_from("<i", data, 40)[0] == 0


def test_descriptor_equality_roundtrip(tmp_path: Path) -> None:
    expected = make_descriptor(0, start_position=64, stop_position=NULL_POSITION)
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        rid = catalog.add_new_recording(
            expected.start_position,
            expected.start_timestamp,
            expected.initial_term_id,
            expected.segment_file_length,
            expected.term_buffer_length,
            expected.mtu_length,
            expected.session_id,
            expected.stream_id,
            expected.stripped_channel,
            expected.original_channel,
            expected.source_identity,
        )
        assert catalog.find(rid) == replace(expected, recording_id=rid)


def _replacement(n: int, channel_length: int) -> dict[str, Any]:
    channel = "aeron:udp?endpoint=src-host:40123|alias=" + "x" * channel_length
    return {
        "start_position": 4096 * n,
        "stop_position": 4096 * n,
        "start_timestamp": 77 + n,
        "stop_timestamp": 77 + n,
        "initial_term_id": 900 + n,
        "segment_file_length": SEGMENT_LENGTH * 2,
        "term_buffer_length": TERM_LENGTH * 2,
        "mtu_length": 8192,
        "session_id": -5 - n,
        "stream_id": 4242,
        "stripped_channel": channel,
        "original_channel": channel + "|term-length=128k",
        "source_identity": "src-archive",
    }


@pytest.mark.parametrize("channel_length", [0, 900, 5000], ids=["shrinks", "grows", "grows-past-capacity"])
@pytest.mark.parametrize("which", [0, 3, 6], ids=["first", "middle", "last"])
def test_replace_recording_rewrites_every_field_and_moves_the_entries_after_it(
    tmp_path: Path, which: int, channel_length: int
) -> None:
    crc = Crc32c()
    with Catalog(tmp_path, capacity=4096, checksum=crc, clock_ms=clock) as catalog:
        long_channel = "aeron:udp?endpoint=localhost:1|alias=" + "y" * 400
        ids = [add(catalog, n, stripped_channel=long_channel) for n in range(7)]
        catalog.recording_stopped(ids[which], 0, 5)
        catalog.change_state(ids[1], RecordingState.INVALID)  # not indexed: walked over, moved all the same
        before = {rid: catalog.find(rid) for rid in ids}
        catalog.replace_recording(ids[which], **_replacement(which, channel_length))
        expected = dict(before)
        fields = _replacement(which, channel_length)
        old = before[which]
        assert old is not None
        expected[which] = replace(old, **fields)
        for rid in ids:
            assert catalog.find(rid) == expected[rid], rid
            if rid != 1:
                assert catalog.entry_checksum_ok(rid)
        assert add(catalog, 9) == 7  # appends after the moved entries
    with Catalog(tmp_path, writable=False, checksum=crc) as reopened:
        assert [reopened.find(rid) for rid in ids] == [expected[rid] for rid in ids]
        assert reopened.find(7) is not None
        assert 1 not in list(reopened.recording_ids())


def test_replace_recording_of_an_unknown_id_is_refused(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096, clock_ms=clock) as catalog:
        add(catalog)
        with pytest.raises(ArchiveError, match="unknown recording id: 5"):
            catalog.replace_recording(5, **_replacement(0, 0))
