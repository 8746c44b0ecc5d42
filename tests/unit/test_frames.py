from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from aeron_archive_spark.archive.storage import frames as F
from aeron_archive_spark.archive.storage.frames import ScanStop, scan_frames
from tests.unit.storage_helpers import StreamBuilder, frame_bytes, pad_header

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


def reference_scan(buf: bytes | bytearray, start: int, end: int, stop_at_padding: bool = True):
    """Straightforward frame walk, the oracle for the vectorised one."""
    offsets: list[int] = []
    offset = start
    while offset < end:
        if end - offset < 32:
            if end - offset >= 4 and struct.unpack_from("<i", buf, offset)[0] <= 0:
                return offsets, offset, ScanStop.ZERO_LENGTH
            return offsets, offset, ScanStop.INCOMPLETE
        length, frame_type = struct.unpack_from("<i", buf, offset)[0], struct.unpack_from("<H", buf, offset + 6)[0]
        if length <= 0:
            return offsets, offset, ScanStop.ZERO_LENGTH
        if stop_at_padding and frame_type == F.HDR_TYPE_PAD:
            return offsets, offset, ScanStop.PADDING
        aligned = (length + 31) & ~31
        if offset + aligned > end:
            return offsets, offset, ScanStop.INCOMPLETE
        offsets.append(offset)
        offset += aligned
    return offsets, offset, ScanStop.END


def build_frames(payload_lengths: list[int], total: int, *, garbage: bool = False, seed: int = 1) -> bytearray:
    rng = random.Random(seed)
    buf = bytearray(total)
    offset = 0
    for n in payload_lengths:
        payload = bytes(rng.getrandbits(8) for _ in range(n)) if garbage else bytes([0xAB]) * n
        frame = frame_bytes(payload, term_offset=offset, term_id=3)
        if offset + len(frame) > total:
            break
        buf[offset : offset + len(frame)] = frame
        offset += len(frame)
    return buf


def test_header_layout_constants() -> None:
    assert F.HEADER_LENGTH == 32 and F.FRAME_ALIGNMENT == 32 and F.DATA_OFFSET == 32
    assert (F.FRAME_LENGTH_FIELD_OFFSET, F.VERSION_FIELD_OFFSET, F.FLAGS_FIELD_OFFSET, F.TYPE_FIELD_OFFSET) == (
        0,
        4,
        5,
        6,
    )
    assert (F.TERM_OFFSET_FIELD_OFFSET, F.SESSION_ID_FIELD_OFFSET, F.STREAM_ID_FIELD_OFFSET) == (8, 12, 16)
    assert (F.TERM_ID_FIELD_OFFSET, F.RESERVED_VALUE_OFFSET) == (20, 24)
    assert (F.HDR_TYPE_PAD, F.HDR_TYPE_DATA) == (0, 1)
    assert (F.BEGIN_FRAG_FLAG, F.END_FRAG_FLAG, F.UNFRAGMENTED, F.EOS_FLAG) == (0x80, 0x40, 0xC0, 0x20)
    header = F.HEADER_STRUCT.pack(100, 0, 0xC0, 1, 64, -5, 10, 77, -9)
    assert struct.unpack_from("<i", header, 12)[0] == -5
    assert struct.unpack_from("<q", header, 24)[0] == -9


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (1, 32), (31, 32), (32, 32), (33, 64), (1000, 1024)])
def test_align(value: int, expected: int) -> None:
    assert F.align(value, 32) == expected


def test_position_bits_to_shift() -> None:
    assert F.position_bits_to_shift(64 * 1024) == 16
    assert F.position_bits_to_shift(16 * 1024 * 1024) == 24
    assert F.position_bits_to_shift(1024 * 1024 * 1024) == 30
    for bad in (0, 32 * 1024, 64 * 1024 + 1, 3 * 64 * 1024, 2 * 1024 * 1024 * 1024, -65536):
        with pytest.raises(ValueError):
            F.position_bits_to_shift(bad)


def test_compute_position_and_term_id() -> None:
    shift = 16
    assert F.compute_position(5, 0, shift, 5) == 0
    assert F.compute_position(7, 96, shift, 5) == 2 * 65536 + 96
    assert F.compute_term_id_from_position(2 * 65536 + 96, shift, 5) == 7
    # termId wrapped past Integer.MAX_VALUE: the int32 subtraction still gives a small positive term count
    assert F.compute_position(INT32_MIN + 1, 32, shift, INT32_MAX) == 2 * 65536 + 32
    assert F.compute_term_id_from_position(2 * 65536, shift, INT32_MAX) == INT32_MIN + 1
    # a termId "before" the initial one gives a negative position, exactly as Java's int arithmetic does
    assert F.compute_position(4, 0, shift, 5) == -65536
    for term_id in (INT32_MAX - 3, INT32_MAX, INT32_MIN, INT32_MIN + 10):
        pos = F.compute_position(term_id, 0, shift, INT32_MAX - 3)
        assert F.compute_term_id_from_position(pos, shift, INT32_MAX - 3) == term_id


def test_scan_uniform_frames_consumes_range() -> None:
    buf = build_frames([32] * 40_000, 1 << 20)
    scan = scan_frames(buf)
    assert scan.count == (1 << 20) // 64
    assert scan.stop_reason is ScanStop.END and scan.stop_offset == 1 << 20
    assert np.array_equal(scan.offsets, np.arange(0, 1 << 20, 64))
    assert (scan.lengths == 64).all() and (scan.types == 1).all() and (scan.flags == 0xC0).all()
    assert np.array_equal(scan.term_offsets(), scan.offsets.astype(np.int32))


@pytest.mark.parametrize("seed", range(6))
def test_scan_matches_reference_on_random_frames(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, 8, 31, 32, 33, 100, 500, 1376, rng.randrange(0, 3000)]) for _ in range(3000)]
    total = rng.choice([4096, 100_000 // 32 * 32, 1 << 20, (1 << 20) + 4096 * 3, 3 << 20])
    buf = build_frames(lengths, total, garbage=True, seed=seed)
    for start, end in [(0, total), (0, total - 32 * rng.randrange(1, 50)), (0, total - 7)]:
        expected_offsets, expected_stop, expected_reason = reference_scan(buf, start, end)
        scan = scan_frames(buf, start, end)
        assert scan.offsets.tolist() == expected_offsets
        assert scan.stop_offset == expected_stop and scan.stop_reason is expected_reason


@pytest.mark.parametrize("seed", range(4))
def test_scan_from_inner_frame_offset(seed: int) -> None:
    rng = random.Random(100 + seed)
    buf = build_frames([rng.randrange(0, 700) for _ in range(3000)], 1 << 20, garbage=True, seed=seed)
    first = reference_scan(buf, 0, len(buf))[0]
    start = first[len(first) // 3]
    expected_offsets, expected_stop, expected_reason = reference_scan(buf, start, len(buf))
    scan = scan_frames(buf, start, len(buf))
    assert scan.offsets.tolist() == expected_offsets
    assert (scan.stop_offset, scan.stop_reason) == (expected_stop, expected_reason)


def test_scan_stops_at_zero_length() -> None:
    buf = bytearray(4096)
    buf[0:64] = frame_bytes(b"x" * 20, term_offset=0, term_id=1)
    buf[64:128] = frame_bytes(b"y" * 30, term_offset=64, term_id=1)
    scan = scan_frames(buf)
    assert scan.offsets.tolist() == [0, 64]
    assert scan.lengths.tolist() == [52, 62]
    assert scan.stop_reason is ScanStop.ZERO_LENGTH and scan.stop_offset == 128
    assert scan.pad_offset == -1 and scan.pad_length == 0


def test_scan_stops_at_negative_length() -> None:
    buf = bytearray(4096)
    buf[0:64] = frame_bytes(b"x" * 20, term_offset=0, term_id=1)
    struct.pack_into("<i", buf, 64, -64)
    scan = scan_frames(buf)
    assert scan.count == 1 and scan.stop_reason is ScanStop.ZERO_LENGTH and scan.stop_offset == 64


@pytest.mark.parametrize("size", [4096, 1 << 20])
def test_scan_reports_padding(size: int) -> None:
    builder = StreamBuilder(0, term_length=64 * 1024)
    builder.fill_to(64 * 1024 - 400, payload_length=200)
    builder.append(1000)  # does not fit: a PAD to the end of the term comes first
    term = b"".join(f.data for f in builder.frames if f.position < 64 * 1024)
    buf = bytearray(term[:size]) if size < len(term) else bytearray(term)
    scan = scan_frames(buf)
    pad = next(f for f in builder.frames if f.is_pad)
    if pad.position < len(buf):
        assert scan.stop_reason is ScanStop.PADDING
        assert scan.pad_offset == pad.position and scan.pad_length == pad.length
        assert scan.stop_offset == pad.position
    else:
        assert scan.stop_reason is ScanStop.END
    chained = scan_frames(buf, stop_at_padding=False)
    if pad.position < len(buf):
        assert chained.stop_reason is ScanStop.END and chained.types[-1] == F.HDR_TYPE_PAD


def test_scan_incomplete_frame_at_range_end() -> None:
    buf = bytearray(8192)
    buf[0:64] = frame_bytes(b"a" * 32, term_offset=0, term_id=1)
    buf[64 : 64 + 1056] = frame_bytes(b"b" * 1024, term_offset=64, term_id=1)
    scan = scan_frames(buf, 0, 512)
    assert scan.offsets.tolist() == [0]
    assert scan.stop_reason is ScanStop.INCOMPLETE and scan.stop_offset == 64 and scan.stop_frame_length == 1056


def test_scan_large_pad_chained_across_windows() -> None:
    size = 3 << 20
    buf = bytearray(size)
    buf[0:64] = frame_bytes(b"a" * 32, term_offset=0, term_id=1)
    buf[64:96] = pad_header(size - 64, term_offset=64, term_id=1)
    scan = scan_frames(buf, stop_at_padding=False)
    assert scan.offsets.tolist() == [0, 64]
    assert scan.stop_reason is ScanStop.END and scan.stop_offset == size


def test_scan_garbage_huge_lengths_do_not_overflow() -> None:
    buf = bytearray(1 << 16)
    buf[0:64] = frame_bytes(b"a" * 32, term_offset=0, term_id=1)
    struct.pack_into("<iBBH", buf, 64, INT32_MAX, 0, 0xC0, F.HDR_TYPE_DATA)
    scan = scan_frames(buf)
    assert scan.offsets.tolist() == [0]
    assert scan.stop_reason is ScanStop.INCOMPLETE and scan.stop_frame_length == INT32_MAX


@pytest.mark.parametrize("tail", [1, 2, 3, 4, 31])
def test_scan_window_boundary_with_short_tail(tail: int) -> None:
    size = (1 << 20) + tail
    buf = build_frames([32] * 20_000, size)
    expected_offsets, expected_stop, expected_reason = reference_scan(buf, 0, size)
    scan = scan_frames(buf)
    assert scan.offsets.tolist() == expected_offsets
    assert (scan.stop_offset, scan.stop_reason) == (expected_stop, expected_reason)


def test_scan_empty_and_invalid_ranges() -> None:
    buf = bytearray(1024)
    scan = scan_frames(buf, 64, 64)
    assert scan.count == 0 and scan.stop_reason is ScanStop.END and scan.stop_offset == 64
    with pytest.raises(ValueError):
        scan_frames(buf, 0, 2048)
    with pytest.raises(ValueError):
        scan_frames(buf, 512, 256)


def test_scan_accepts_buffer_types() -> None:
    data = build_frames([40] * 100, 8192)
    for buf in (bytes(data), data, memoryview(data), np.frombuffer(bytes(data), dtype=np.uint8)):
        scan = scan_frames(buf)
        assert scan.count == 8192 // 96 and scan.stop_reason is ScanStop.ZERO_LENGTH


def test_columns() -> None:
    builder = StreamBuilder(0, initial_term_id=5, session_id=-77, stream_id=9)
    for n in (10, 200, 64, 1):
        builder.append(n)
    buf = bytearray(b"".join(f.data for f in builder.frames) + bytes(64))
    scan = scan_frames(buf)
    assert scan.count == 4
    assert scan.session_ids().tolist() == [-77] * 4
    assert scan.stream_ids().tolist() == [9] * 4
    assert scan.term_ids().tolist() == [5] * 4
    assert scan.term_offsets().tolist() == [f.position for f in builder.frames]
    assert scan.reserved_values().tolist() == [0] * 4
    assert scan.versions().tolist() == [0] * 4
    empty = scan_frames(bytearray(64))
    assert empty.session_ids().size == 0


def test_rewrite_session_and_stream() -> None:
    builder = StreamBuilder(0, session_id=1, stream_id=2)
    for n in (10, 300, 5, 64):
        builder.append(n)
    original = b"".join(f.data for f in builder.frames)
    buf = bytearray(original + bytes(32))
    scan = scan_frames(buf)
    F.rewrite_session_and_stream(buf, scan.data_offsets(), -12345, 99)
    after = scan_frames(buf)
    assert after.session_ids().tolist() == [-12345] * 4
    assert after.stream_ids().tolist() == [99] * 4
    # only bytes 12..20 of each header changed
    for f in builder.frames:
        p = f.position
        assert buf[p : p + 12] == original[p : p + 12]
        assert buf[p + 20 : p + f.length] == original[p + 20 : p + f.length]
    F.rewrite_session_and_stream(buf, np.empty(0, dtype=np.int64), 1, 1)
    with pytest.raises(ValueError):
        F.rewrite_session_and_stream(buf, [len(buf) - 16], 1, 1)


def test_rewrite_with_unaligned_buffer_start() -> None:
    body = b"".join(f.data for f in StreamBuilder(0).append_many([20, 40]).frames)
    buf = bytearray(b"\x01\x02" + body)
    scan = scan_frames(buf, 2, len(buf))
    assert scan.count == 2
    F.rewrite_session_and_stream(buf, scan.offsets, 5, 6)
    assert scan_frames(buf, 2, len(buf)).session_ids().tolist() == [5, 5]
    assert buf[:2] == b"\x01\x02"


def test_header_matches() -> None:
    frame = frame_bytes(b"abc", term_offset=96, term_id=8, session_id=1, stream_id=3)
    assert F.header_matches(frame, 0, 96, 8, 3)
    assert not F.header_matches(frame, 0, 64, 8, 3)
    assert not F.header_matches(frame, 0, 96, 9, 3)
    assert not F.header_matches(frame, 0, 96, 8, 4)


def test_head_end_of_and_count_starting_before() -> None:
    builder = StreamBuilder(0).append_many([10, 100, 40, 300])  # aligned 64, 160, 96, 352
    buf = bytearray(b"".join(f.data for f in builder.frames) + bytes(64))
    scan = scan_frames(buf)
    assert scan.end_of(0) == 0 and scan.end_of(2) == 224 and scan.end_of(4) == 672
    assert scan.count_starting_before(0) == 0
    assert scan.count_starting_before(1) == 1  # a frame starting before the limit counts, whole
    assert scan.count_starting_before(224) == 2 and scan.count_starting_before(225) == 3
    assert scan.count_starting_before(10_000) == 4
    head = scan.head(2)
    assert head.offsets.tolist() == [0, 64] and head.stop_offset == 224 and head.stop_reason is ScanStop.END
    assert head.session_ids().tolist() == scan.session_ids()[:2].tolist()
    assert scan.head(10) is scan and scan.head(0).count == 0


@pytest.mark.parametrize("seed", range(40))
def test_strided_rewrite_equals_the_scatter_and_stride_is_set_only_for_one_fixed_length(seed: int) -> None:
    rng = random.Random(seed)
    fixed = rng.random() < 0.5
    size = rng.choice([0, 1, 31, 32, 100, 992])
    lengths = [size] * rng.randint(1, 3000) if fixed else [rng.randint(0, 200) for _ in range(rng.randint(1, 600))]
    buf = build_frames(lengths, 1 << 20, seed=seed)
    end = rng.randrange(0, len(buf) + 1) & ~31 if rng.random() < 0.3 else len(buf)
    scan = scan_frames(buf, 0, end)
    head = scan.head(rng.randint(0, scan.count))
    if head.stride:
        assert np.array_equal(np.diff(head.offsets), np.full(max(head.count - 1, 0), head.stride))
        assert len({int(x) for x in head.lengths}) <= 1
    if fixed and size and head.count > 8:
        assert head.stride == F.align(size + F.HEADER_LENGTH, F.FRAME_ALIGNMENT)
    expected, got = bytearray(buf), bytearray(buf)
    F.rewrite_session_and_stream(expected, head.offsets, -5, 0x7FFF_FFFF)
    F.rewrite_scan_session_and_stream(got, head, -5, 0x7FFF_FFFF)
    assert got == expected


@pytest.mark.parametrize("seed", range(20))
def test_a_short_scan_carries_its_frames_as_lists_and_rewrites_through_them(seed: int) -> None:
    """A short scan (a small recording's frames) keeps the lists its walk built, equal to its arrays, and its
    session/stream rewrite goes through them: the same bytes as the scatter, nothing outside its frames touched."""
    rng = random.Random(900 + seed)
    lengths = [rng.choice([0, 1, 31, 100, 300]) for _ in range(rng.randint(1, 12))]
    buf = build_frames(lengths, 1536, garbage=True, seed=seed)
    end = rng.randrange(0, len(buf) + 1) & ~31 if rng.random() < 0.3 else len(buf)
    scan = scan_frames(buf, 0, end)
    assert scan.frame_lists is not None
    offsets, frame_lengths, types, flags = scan.frame_lists
    assert offsets == scan.offsets.tolist() and frame_lengths == scan.lengths.tolist()
    assert types == scan.types.tolist() and flags == scan.flags.tolist()
    assert scan.head(max(scan.count - 1, 0)).frame_lists is None or scan.count == 0
    expected, got = bytearray(buf), bytearray(buf)
    F.rewrite_session_and_stream(expected, scan.offsets, -5, 0x7FFF_FFFF)
    F.rewrite_scan_session_and_stream(got, scan, -5, 0x7FFF_FFFF)
    assert got == expected
    assert scan_frames(bytearray(1 << 16), 0).frame_lists is None  # a long scan: arrays only


@pytest.mark.parametrize("seed", range(8))
def test_scan_with_head_matches_scan_of_the_whole_range(seed: int) -> None:
    """The first word held apart (the term holds zeros there) scans exactly as the whole range does."""
    rng = random.Random(300 + seed)
    lengths = [rng.choice([0, 1, 31, 32, 100, 992, 1376]) if rng.random() < 0.5 else 992 for _ in range(2000)]
    total = rng.choice([4096, 1 << 20])
    buf = build_frames(lengths if seed % 2 else [992] * 2000, total, garbage=True, seed=seed)
    if seed % 4 == 3:  # a PAD frame somewhere after the first frame
        first = reference_scan(buf, 0, total)[0]
        buf[first[len(first) // 2] + 6 : first[len(first) // 2] + 8] = struct.pack("<H", F.HDR_TYPE_PAD)
    for start, end in [(0, total), (0, total - 7), (0, 24), (0, 3)]:
        whole = scan_frames(buf, start, end)
        held = bytearray(buf)
        word = struct.unpack_from("<q", held, start)[0] if end - start >= 8 else int.from_bytes(
            held[start:end] + bytes(8 - (end - start)), "little", signed=True)
        held[start : start + min(8, end - start)] = bytes(min(8, end - start))
        scan = F.scan_frames_with_head(held, word, start, end)
        assert scan.offsets.tolist() == whole.offsets.tolist()
        assert scan.lengths.tolist() == whole.lengths.tolist()
        assert scan.types.tolist() == whole.types.tolist() and scan.flags.tolist() == whole.flags.tolist()
        assert (scan.stop_offset, scan.stop_reason) == (whole.stop_offset, whole.stop_reason)
        assert scan.pad_length == whole.pad_length
        if scan.stride:  # a stride promises equal spacing
            assert len(set(np.diff(scan.offsets).tolist())) <= 1 and scan.stride == (int(scan.lengths[0]) + 31) & ~31


@pytest.mark.parametrize("seed", range(12))
def test_a_uniform_run_is_followed_across_windows(seed: int) -> None:
    """A run of one fixed frame longer than the scan's 1 MiB window is one strided run (the stride kept), wherever
    a frame of another length, or a PAD, or zeros end it; the chain equals the plain walk's."""
    rng = random.Random(1200 + seed)
    size = rng.choice([100, 992, 1024, 1376])
    stride = (size + 32 + 31) & ~31
    total = rng.choice([3 << 20, 4 << 20, (5 << 20) + 4096])
    buf = build_frames([size] * (total // stride), total, seed=seed)
    cut = rng.randrange(1, total // stride) * stride if seed % 4 else total
    if seed % 4 == 1:
        buf[cut : cut + 64] = frame_bytes(b"\x01" * 7, term_offset=cut, term_id=3).ljust(64, b"\0")[:64]
    elif seed % 4 == 2:
        struct.pack_into("<iBBH", buf, cut, stride, 0, 0, F.HDR_TYPE_PAD)
    elif seed % 4 == 3:
        buf[cut:] = bytes(total - cut)
    start = rng.choice([0, stride * rng.randrange(1, 50)])
    for pad in (True, False):
        scan = scan_frames(buf, start, total, stop_at_padding=pad)
        offsets, stop_offset, reason = reference_scan(buf, start, total, pad)
        assert scan.offsets.tolist() == offsets
        assert (scan.stop_offset, scan.stop_reason) == (stop_offset, reason)
        if seed % 4 == 0 or (seed % 4 == 3 and cut > start):
            assert scan.stride == stride  # the whole chain is the one run
        if scan.stride:
            assert set(np.diff(scan.offsets).tolist()) <= {scan.stride}


def _held(buf: bytearray, start: int) -> tuple[bytearray, int]:
    """The buffer as a replay leaves it in the term (first word zeroed) and the word held apart."""
    held = bytearray(buf)
    word = struct.unpack_from("<q", held, start)[0]
    held[start : start + 8] = bytes(8)
    return held, word


@pytest.mark.parametrize("seed", range(32))
def test_uniform_scan_with_head_answers_as_the_general_scan(seed: int) -> None:
    """A chain of one fixed frame takes the arithmetic path; every answer a replay batch uses, the header rewrite
    included, is the general scan's. What follows the last whole frame: nothing, a frame the range's end cuts, a PAD
    to the range's end, zeros; and chains that must go to the general scan: a frame of another length or flags."""
    rng = random.Random(900 + seed)
    size = rng.choice([0, 1, 32, 100, 992, 1376, 4064])
    stride = (size + 32 + 31) & ~31
    total = rng.choice([64 << 10, 1 << 20, 3 << 20])
    buf = build_frames([size] * (total // stride + 1), total, seed=seed)
    written = (total // stride) * stride
    tail = ["end", "cut", "pad", "zeros", "other-length", "other-flags"][seed % 6]
    end = written
    last = written - stride
    if tail == "cut":
        end = written - 32 * rng.randint(1, stride // 32) if stride > 32 else written
    elif tail == "pad":
        end = last + 32 * rng.randint(1, max(1, stride // 32 - 1))  # shorter than a frame: after the last stride
        buf[last:written] = bytes(stride)
        struct.pack_into("<iBBH", buf, last, end - last, 0, 0, F.HDR_TYPE_PAD)
    elif tail == "zeros":
        buf[last:written] = bytes(stride)
    elif tail == "other-length":
        buf[last:written] = bytes(stride)
        buf[last : last + 64] = frame_bytes(b"\x01", term_offset=last, term_id=3).ljust(64, b"\0")[:64]
    elif tail == "other-flags":
        buf[rng.randrange(1, total // stride) * stride + 5] = F.BEGIN_FRAG_FLAG
    start = rng.choice([0, stride, stride * 3])
    held, word = _held(buf, start)
    scan = F.scan_frames_with_head(held, word, start, end)
    rest = scan_frames(held, start + stride, end)
    general = F.HeadedScan(start, int(word & 0xFFFF_FFFF), (word >> 48) & 0xFFFF, (word >> 40) & 0xFF, rest,
                           rest.stop_offset, rest.stop_reason, rest.stop_frame_length)
    whole = scan_frames(buf, start, end)
    if tail in ("end", "cut", "pad") and stride > 32:
        assert isinstance(scan, F.UniformHeadedScan), tail
    if tail in ("other-length", "other-flags"):
        assert not isinstance(scan, F.UniformHeadedScan), tail
    assert scan.offsets.tolist() == whole.offsets.tolist() == general.offsets.tolist()
    assert scan.lengths.tolist() == whole.lengths.tolist()
    assert scan.types.tolist() == whole.types.tolist() and scan.flags.tolist() == whole.flags.tolist()
    assert (scan.count, scan.stop_offset, scan.stop_reason, scan.pad_offset, scan.pad_length) == (
        general.count, general.stop_offset, general.stop_reason, general.pad_offset, general.pad_length)
    assert (scan.stop_offset, scan.stop_reason) == (whole.stop_offset, whole.stop_reason)
    if general.stride:  # the general scan may not know it (a chain over several windows): then 0
        assert scan.stride == general.stride
    if isinstance(scan, F.UniformHeadedScan):
        assert set(np.diff(scan.offsets).tolist()) <= {scan.stride}
    for limit in [0, 1, stride - 1, stride, stride + 1, rng.randrange(0, end - start + stride), end - start, 1 << 40]:
        assert scan.count_starting_before(limit) == general.count_starting_before(limit), limit
    for n in [0, 1, scan.count // 2, scan.count]:
        assert scan.end_of(n) == general.end_of(n)
    n = rng.randint(0, scan.count)
    got, expected = bytearray(held), bytearray(held)
    scan.rewrite_session_and_stream(got, n, -7, 0x7FFF_FFFE)
    general.rewrite_session_and_stream(expected, n, -7, 0x7FFF_FFFE)
    assert got == expected


def test_uniform_scan_rewrite_refuses_frames_past_the_buffer() -> None:
    scan = F.UniformHeadedScan(0, 1024, F.HDR_TYPE_DATA, 0xC0, 4, 4096, ScanStop.END, 0)
    with pytest.raises(ValueError, match="out of range"):
        scan.rewrite_session_and_stream(bytearray(3072), 4, 1, 2)


@pytest.mark.parametrize("word_length, frame_type, expected", [
    (0, F.HDR_TYPE_DATA, ScanStop.ZERO_LENGTH),
    (-64, F.HDR_TYPE_DATA, ScanStop.ZERO_LENGTH),
    (4064, F.HDR_TYPE_PAD, ScanStop.PADDING),
    (8192, F.HDR_TYPE_DATA, ScanStop.INCOMPLETE),
])
def test_scan_with_head_stops_at_its_first_frame(word_length: int, frame_type: int, expected: ScanStop) -> None:
    word = (frame_type << 48) | (0xC0 << 40) | (word_length & 0xFFFF_FFFF)
    scan = F.scan_frames_with_head(bytearray(4096), word - (1 << 64) if word >= 1 << 63 else word, 32, 4096)
    assert scan.count == 0 and scan.stop_offset == 32 and scan.stop_reason is expected
