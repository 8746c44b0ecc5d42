"""Partition splitting and message decoding without Spark: synthetic frame streams fed straight to the decoder."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pyarrow as pa
import pytest
from unit.storage_helpers import frame_bytes, pad_header

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.frames import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FRAME_ALIGNMENT,
    HEADER_LENGTH,
    align,
    compute_term_id_from_position,
    position_bits_to_shift,
)
from aeron_archive_spark.archive.tables.decode import RangeDecoder, binary_column
from aeron_archive_spark.archive.tables.planning import plan_ranges, split_range
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, SegmentFiles
from aeron_archive_spark.archive.tables.schema import row_schema

TERM = 64 * 1024
INITIAL_TERM_ID = 100
SESSION_ID = 77
STREAM_ID = 1001
SCHEMA = row_schema(None)


class Stream:
    """A synthetic recording: messages appended as frames, fragmented at `max_payload`, PAD-free unless asked.

    Unlike a real publication it lets fragmented messages straddle term boundaries, to exercise the decoder's
    general rules (Aeron's appenders pad instead, so real terms always begin with a message).
    """

    def __init__(self, start: int = 0, max_payload: int = 1376, straddle: bool = True) -> None:
        self.start = start
        self.position = start
        self.max_payload = max_payload
        self.straddle = straddle
        self.buffer = bytearray()
        self.frames: list[tuple[int, int, bool]] = []  # (position, aligned length, is PAD)
        self.messages: list[tuple[int, bytes, int]] = []
        self._shift = position_bits_to_shift(TERM)

    def _frame(self, payload: bytes, flags: int, reserved: int) -> None:
        aligned = align(HEADER_LENGTH + len(payload), FRAME_ALIGNMENT)
        if (self.position & (TERM - 1)) + aligned > TERM:
            self.pad()  # a frame never crosses a term boundary
        term_offset = self.position & (TERM - 1)
        term_id = compute_term_id_from_position(self.position, self._shift, INITIAL_TERM_ID)
        data = frame_bytes(payload, term_offset=term_offset, term_id=term_id, session_id=SESSION_ID,
                           stream_id=STREAM_ID, flags=flags, reserved_value=reserved)
        self.frames.append((self.position, len(data), False))
        self.buffer += data
        self.position += len(data)

    def pad(self) -> None:
        term_offset = self.position & (TERM - 1)
        length = TERM - term_offset
        term_id = compute_term_id_from_position(self.position, self._shift, INITIAL_TERM_ID)
        self.buffer += pad_header(length, term_offset=term_offset, term_id=term_id, session_id=SESSION_ID,
                                  stream_id=STREAM_ID) + bytes(length - HEADER_LENGTH)
        self.frames.append((self.position, length, True))
        self.position += length

    def add(self, payload: bytes, reserved: int = 0) -> int:
        pieces = [payload[i:i + self.max_payload] for i in range(0, len(payload), self.max_payload)] or [b""]
        framed = sum(align(HEADER_LENGTH + len(p), FRAME_ALIGNMENT) for p in pieces)
        if not self.straddle and (self.position & (TERM - 1)) + framed > TERM:
            self.pad()
        before = len(self.frames)
        for i, piece in enumerate(pieces):
            flags = (BEGIN_FRAG_FLAG if i == 0 else 0) | (END_FRAG_FLAG if i == len(pieces) - 1 else 0)
            self._frame(piece, flags, reserved)
        start = next(f[0] for f in self.frames[before:] if not f[2])
        self.messages.append((start, payload, reserved))
        return start

    def facts(self) -> RecordingFacts:
        return RecordingFacts(5, self.start, TERM, 4 * TERM, INITIAL_TERM_ID, SESSION_ID, STREAM_ID, 1408)

    def chunks(self, start: int, limit: int, chunk: int, omit_pads: bool = False
               ) -> Iterator[tuple[memoryview, int]]:
        """ChunkSource semantics: whole frames, never across a term, PADs cut to their header, a reused buffer."""
        buffer = bytearray(max(chunk, 2048))
        frames = [f for f in self.frames if start <= f[0] < limit]
        i = 0
        while i < len(frames):
            first = frames[i][0]
            term = first // TERM
            size = 0
            while i < len(frames):
                position, length, is_pad = frames[i]
                if position // TERM != term:
                    break
                if is_pad:
                    if not omit_pads:
                        size += HEADER_LENGTH
                    i += 1
                    break
                if size and size + length > chunk:
                    break
                size += length
                i += 1
            if size:
                offset = first - self.start
                buffer[:size] = self.buffer[offset:offset + size]
                yield memoryview(buffer)[:size], first


def partition(stream: Stream, start: int, end: int, limit: int, index: int = 0) -> ReadRange:
    return ReadRange(index, stream.facts(), start, end, limit, SegmentFiles("/nowhere"))


def decode(stream: Stream, p: ReadRange, chunk: int = 8192, **kw) -> list[tuple[int, bytes, int]]:
    decoder = RangeDecoder(p, SCHEMA, min_batch_bytes=1)
    rows = []
    for batch in decoder.batches(stream.chunks(p.start, p.limit, chunk, **kw)):
        assert batch.schema.equals(SCHEMA)
        assert set(batch.column("recordingId").to_pylist()) == {5}
        assert set(batch.column("sessionId").to_pylist()) == {SESSION_ID}
        assert set(batch.column("streamId").to_pylist()) == {STREAM_ID}
        rows += zip(batch.column("position").to_pylist(), batch.column("value").to_pylist(),
                    batch.column("reservedValue").to_pylist())
    return rows


# -- split_range ---------------------------------------------------------------------------------------------


def test_split_range_cuts_only_at_term_boundaries_in_pieces_of_at_most_max_bytes():
    assert split_range(0, 10 * TERM, TERM, 3 * TERM) == [(0, 3 * TERM), (3 * TERM, 6 * TERM), (6 * TERM, 9 * TERM),
                                                         (9 * TERM, 10 * TERM)]
    # a mid-term start: the first piece ends at a term boundary, so it is shorter
    assert split_range(1000, 3 * TERM + 64, TERM, 2 * TERM) == [(1000, 2 * TERM), (2 * TERM, 3 * TERM + 64)]
    # a limit below one term still cuts whole terms
    assert split_range(96, 2 * TERM + 32, TERM, 100) == [(96, TERM), (TERM, 2 * TERM), (2 * TERM, 2 * TERM + 32)]
    assert split_range(0, TERM, TERM, 64 * 1024 * 1024) == [(0, TERM)]
    assert split_range(5 * TERM, 5 * TERM, TERM, TERM) == []


def test_split_range_is_a_pure_function_and_covers_the_range_without_overlap():
    rng = random.Random(3)
    for _ in range(200):
        start = rng.randrange(0, 50 * TERM, 32)
        end = start + rng.randrange(0, 20 * TERM, 32)
        max_bytes = rng.choice([1, TERM, 2 * TERM, 5 * TERM + 7, 64 << 20])
        pieces = split_range(start, end, TERM, max_bytes)
        assert pieces == split_range(start, end, TERM, max_bytes)
        if start == end:
            assert pieces == []
            continue
        assert pieces[0][0] == start and pieces[-1][1] == end
        for (a, b), (c, _) in zip(pieces, pieces[1:]):
            assert b == c and b % TERM == 0
        assert all(b - a <= max(max_bytes - max_bytes % TERM, TERM) for a, b in pieces)


def test_plan_ranges_numbers_ranges_across_recordings_and_carries_the_limit():
    s = Stream()
    parts = plan_ranges([(s.facts(), 0, 3 * TERM, 3 * TERM + 64), (s.facts(), TERM, 2 * TERM, 2 * TERM)],
                            TERM, "/a", None)
    assert [p.index for p in parts] == [0, 1, 2, 3]
    assert [(p.start, p.end, p.limit) for p in parts] == [
        (0, TERM, 3 * TERM + 64), (TERM, 2 * TERM, 3 * TERM + 64), (2 * TERM, 3 * TERM, 3 * TERM + 64),
        (TERM, 2 * TERM, 2 * TERM)]
    import pickle

    assert pickle.loads(pickle.dumps(parts[0])) == parts[0]


# -- decoding ------------------------------------------------------------------------------------------------


def random_stream(seed: int, count: int, straddle: bool = True, start: int = 0) -> Stream:
    rng = random.Random(seed)
    s = Stream(start=start, straddle=straddle)
    for i in range(count):
        size = rng.choice([0, 0, 1, 12, 13, 31, 64, 100, 1376, 1377, 3000, 5000, 9000])
        s.add(rng.randbytes(size), reserved=i * 1_000_003)
    return s


@pytest.mark.parametrize("straddle", [True, False])
@pytest.mark.parametrize("max_bytes", [TERM, 2 * TERM, 1 << 30])
@pytest.mark.parametrize("chunk", [2048, 8192, 1 << 20])
def test_partitions_together_give_every_message_exactly_once_in_order(straddle, max_bytes, chunk):
    s = random_stream(11, 120, straddle)
    end = s.position
    rows = []
    for a, b in split_range(s.start, end, TERM, max_bytes):
        rows += decode(s, partition(s, a, b, end), chunk)
    assert rows == s.messages


def test_a_partition_skips_leading_continuation_fragments_and_finishes_its_last_message_past_its_end():
    s = Stream()
    while s.position < TERM - 3000:
        s.add(b"a" * 200)
    straddler = s.add(bytes(range(256)) * 30)  # 7680 bytes from just below the first term boundary
    assert straddler < TERM < s.position
    s.add(b"after")
    first = decode(s, partition(s, 0, TERM, s.position))
    second = decode(s, partition(s, TERM, s.position, s.position))
    assert first[-1][0] == straddler and first[-1][1] == bytes(range(256)) * 30
    assert [r[0] for r in second] == [s.messages[-1][0]]
    assert first + second == s.messages


def test_a_partition_whose_range_lies_inside_one_message_owns_nothing():
    s = Stream()
    s.add(b"x" * 100)
    big = s.add(bytes(60_000))  # fragments over many frames
    s.add(b"y")
    inner_start = big + 10 * 1408 - (big + 10 * 1408) % 32
    # find a frame start inside the big message
    pos = big
    while pos < inner_start:
        pos += 1408
    assert decode(s, partition(s, pos, pos + 4 * 1408, s.position)) == []


def test_padding_is_skipped_whether_chunks_carry_its_header_or_leave_it_out():
    s = random_stream(5, 80, straddle=False)
    for omit in (False, True):
        rows = decode(s, partition(s, 0, s.position, s.position), 4096, omit_pads=omit)
        assert rows == s.messages


def test_zero_length_and_tiny_payloads_are_exact():
    s = Stream()
    for size in [0, 1, 2, 3, 4, 5, 11, 12, 13, 0, 16, 0]:
        s.add(bytes(range(1, size + 1)))
    assert decode(s, partition(s, 0, s.position, s.position)) == s.messages


def test_a_recording_starting_mid_term_reads_from_its_start():
    s = random_stream(9, 60, start=3 * TERM + 4096)
    rows = []
    for a, b in split_range(s.start, s.position, TERM, TERM):
        rows += decode(s, partition(s, a, b, s.position))
    assert rows == s.messages


def test_a_start_that_is_not_a_frame_boundary_is_an_error_naming_recording_and_position():
    s = random_stream(1, 10)
    bad = s.messages[2][0] + 32
    p = partition(s, bad, s.position, s.position)
    decoder = RangeDecoder(p, SCHEMA)
    with pytest.raises(ArchiveError, match=rf"recording 5: position {bad} is not the start of a frame"):
        list(decoder.batches([(memoryview(s.buffer)[bad:bad + 4096], bad)]))


def test_a_message_cut_by_the_limit_is_an_error_naming_its_position():
    s = Stream()
    s.add(b"a")
    big = s.add(bytes(5000))
    with pytest.raises(ArchiveError, match=rf"recording 5: the message beginning at position {big} is incomplete"):
        decode(s, partition(s, 0, big + 32, big + 1440))


def test_data_ending_before_the_partition_end_is_an_error():
    s = Stream()
    for _ in range(10):
        s.add(b"z" * 100)
    with pytest.raises(ArchiveError, match="recording 5: data ends at position"):
        decoder = RangeDecoder(partition(s, 0, s.position, s.position), SCHEMA)
        list(decoder.batches(s.chunks(0, s.position - 160, 4096)))


def test_binary_column_matches_python_slicing_for_all_small_lengths():
    import numpy as np

    rng = random.Random(2)
    buf = bytearray()
    starts, lengths = [], []
    for _ in range(500):
        n = rng.randrange(0, 40)
        starts.append(len(buf) + HEADER_LENGTH)
        lengths.append(n)
        buf += bytes(HEADER_LENGTH) + rng.randbytes(n) + bytes(align(HEADER_LENGTH + n, 32) - HEADER_LENGTH - n)
    arr = binary_column(np.frombuffer(bytes(buf), np.uint8), np.array(starts, np.int64), np.array(lengths, np.int32))
    assert arr.type == pa.binary()
    assert arr.to_pylist() == [bytes(buf[a:a + n]) for a, n in zip(starts, lengths)]


def test_binary_column_of_a_few_values_joins_them_as_the_view_path_would():
    """Up to `_JOIN_MAX_VALUES` values are joined in Python; the result is the same `binary` array as the view path's,
    zero-length values (whose start may lie past the chunk) included."""
    import numpy as np

    from aeron_archive_spark.archive.tables import decode

    rng = random.Random(3)
    for count in range(1, 2 * decode._JOIN_MAX_VALUES + 2):
        buf = bytearray()
        starts, lengths = [], []
        for _ in range(count):
            n = rng.choice([0, 1, 4, 12, 13, 100, 1000])
            starts.append(len(buf) + HEADER_LENGTH)
            lengths.append(n)
            buf += bytes(HEADER_LENGTH) + rng.randbytes(n) + bytes(align(HEADER_LENGTH + n, 32) - HEADER_LENGTH - n)
        chunk = np.frombuffer(bytes(buf), np.uint8)
        got = binary_column(chunk, np.array(starts, np.int64), np.array(lengths, np.int32))
        assert got.type == pa.binary()
        assert got.to_pylist() == [bytes(buf[a:a + n]) for a, n in zip(starts, lengths)]
        joined = decode._joined_binary(chunk, np.array(starts, np.int64), np.array(lengths, np.int32))
        assert joined.equals(got)
        got.validate(full=True)


@pytest.mark.parametrize("length", [0, 1, 12, 13, 32, 100, 992, 1024])
def test_binary_column_of_strided_values_equals_the_view_path(length):
    """Values of one length a fixed stride apart (frames of one fixed length) are copied as a strided 2-D view's
    rows: the same `binary` array as the view-and-cast path's, at the chunk's start or further in."""
    import numpy as np

    from aeron_archive_spark.archive.tables import decode

    rng = random.Random(length)
    stride = align(HEADER_LENGTH + length, 32)
    for count in (decode._JOIN_MAX_VALUES + 1, 500, 4000):
        first = rng.choice([0, 3]) * stride
        chunk = np.frombuffer(rng.randbytes(first + count * stride), np.uint8)
        starts = first + HEADER_LENGTH + np.arange(count, dtype=np.int64) * stride
        lengths = np.full(count, length, np.int32)
        got = binary_column(chunk, starts, lengths, stride)
        got.validate(full=True)
        assert got.type == pa.binary() and len(got) == count
        assert got.equals(binary_column(chunk, starts, lengths))
        assert got.to_pylist()[-1] == bytes(chunk[int(starts[-1]) : int(starts[-1]) + length])


def test_batches_of_small_chunks_have_exactly_the_row_schema():
    """Small batches are built of buffers (`from_buffers`, `from_arrays(names=...)`): same schema, same rows."""
    s = Stream()
    for i in range(5):
        s.add(bytes([i]) * (i * 7), reserved=i)
    batches = list(RangeDecoder(partition(s, 0, s.position, s.position), SCHEMA).batches(s.chunks(0, s.position, 96)))
    assert batches and all(b.schema.equals(SCHEMA, check_metadata=True) for b in batches)
    table = pa.Table.from_batches(batches)
    table.validate(full=True)
    assert table.column("position").to_pylist() == [m[0] for m in s.messages]
    assert table.column("value").to_pylist() == [m[1] for m in s.messages]
    assert table.column("reservedValue").to_pylist() == [m[2] for m in s.messages]
    assert set(table.column("recordingId").to_pylist()) == {5}
    assert set(table.column("sessionId").to_pylist()) == {SESSION_ID}
    assert set(table.column("streamId").to_pylist()) == {STREAM_ID}


@pytest.mark.parametrize("small_read", [True, False])
def test_disk_reads_of_a_small_range_pread_or_map_the_same_bytes_and_fail_alike(tmp_path, monkeypatch, small_read):
    """A range of at most `_SMALL_READ` bytes is read with `pread` instead of a mapping: same chunks, same rows,
    and a segment file shorter than the range is the same error."""
    from aeron_archive_spark.archive.storage.segments import segment_file_name
    from aeron_archive_spark.archive.tables import chunks

    if not small_read:
        monkeypatch.setattr(chunks, "_SMALL_READ", 0)
    s = Stream()
    for i in range(6):
        s.add(bytes([i + 1]) * (40 + 700 * i))  # the last ones fragmented (max_payload 1376)
    path = tmp_path / segment_file_name(5, 0)
    path.write_bytes(bytes(s.buffer) + bytes(4 * TERM - len(s.buffer)))
    read_range = ReadRange(0, s.facts(), 0, s.position, s.position, SegmentFiles(str(tmp_path)))
    got = [(bytes(c), p) for c, p in chunks.DiskChunkSource().iter_chunks(read_range)]
    assert got == [(bytes(s.buffer), 0)]
    decoded = RangeDecoder(read_range, SCHEMA).batches(chunks.DiskChunkSource().iter_scanned_chunks(read_range))
    table = pa.Table.from_batches(list(decoded))
    assert table.column("value").to_pylist() == [m[1] for m in s.messages]

    path.write_bytes(bytes(s.buffer[:-64]))
    with pytest.raises(ArchiveError, match=rf"segment file .*5-0.rec holds {len(s.buffer) - 64} bytes, position "
                                           rf"{s.position} needs {s.position}; the recording may have been truncated"):
        list(chunks.DiskChunkSource().iter_chunks(read_range))


def _items_of(decoder: RangeDecoder, chunks: list[tuple[bytes, int]], with_lists: bool) -> tuple[list, object]:
    """Rows (as tuples) of `decoder.items` over `chunks`, each scanned as a source would scan it, with or without
    the scan's frame lists; and how it ended (None, or the error's message)."""
    import dataclasses

    from aeron_archive_spark.archive.storage.frames import scan_frames
    from aeron_archive_spark.archive.tables.decode import DecodedRows, merge_decoded

    def scanned():
        for data, position in chunks:
            view = memoryview(bytearray(data))
            scan = scan_frames(view, 0, len(view), stop_at_padding=False)
            yield view, position, scan if with_lists else dataclasses.replace(scan, frame_lists=None)

    rows: list = []
    kinds = []
    try:
        for item in decoder.items(scanned()):
            kinds.append(type(item))
            batch = merge_decoded([item]) if isinstance(item, DecodedRows) else item
            rows += zip(*(batch.column(name).to_pylist() for name in batch.schema.names), strict=True)
        ended = None
    except ArchiveError as ex:
        ended = str(ex)
    state = (ended, decoder.rows, decoder._done, decoder._next_position, decoder._seen_begin,
             decoder.skipped_leading_fragments)
    return rows, (state, kinds)


@pytest.mark.parametrize("seed", range(40))
def test_small_chunks_decode_alike_from_the_scans_lists_and_from_its_arrays(seed):
    """A short scan carries its frames as Python lists, and a small range's whole messages are decoded from them
    in plain Python: for every small stream and range (fragmented messages, padding at a term's end, ranges that
    end inside the chunk, that start inside a message or end short of their data), the rows, their order and how
    the decoder ends equal the general path's."""
    from aeron_archive_spark.archive.tables.decode import DecodedRows

    rnd = random.Random(seed)
    start = TERM - rnd.choice([4096, 640, 320, 160]) if rnd.random() < 0.4 else 0
    s = Stream(start=start, max_payload=rnd.choice([64, 200, 1376]))
    for _ in range(rnd.randint(1, 12)):
        s.add(rnd.randbytes(rnd.choice([0, 1, 7, 31, 100, 150, 300])), reserved=rnd.randint(-(1 << 63), (1 << 63) - 1))
    boundaries = [f[0] for f in s.frames if not f[2]] + [s.position]
    taken_fast = 0
    for _ in range(6):
        a = rnd.choice(boundaries)
        end = rnd.choice([b for b in boundaries if b >= a] + [a + 32])
        limit = max(end, rnd.choice([b for b in boundaries if b >= a]))
        p = ReadRange(0, s.facts(), a, end, limit, SegmentFiles("/nowhere"), ends_at_stop=rnd.random() < 0.5)
        chunks = [(bytes(c), pos) for c, pos in s.chunks(p.start, p.limit, rnd.choice([256, 1024, 8192]))]
        fast = _items_of(RangeDecoder(p, SCHEMA, defer_small=True, min_batch_bytes=1), chunks, with_lists=True)
        general = _items_of(RangeDecoder(p, SCHEMA, defer_small=True, min_batch_bytes=1), chunks, with_lists=False)
        assert fast[0] == general[0]
        assert fast[1][0] == general[1][0]
        taken_fast += fast[1][1].count(DecodedRows) - general[1][1].count(DecodedRows)
    assert taken_fast >= 0


def test_a_small_range_of_whole_messages_is_decoded_from_the_scans_lists():
    """The lists path is the one a small recording's range takes (it would fail this if it never answered)."""
    from aeron_archive_spark.archive.tables import decode

    s = Stream()
    for i in range(4):
        s.add(bytes([i]) * 100, reserved=i - 2)
    p = ReadRange(0, s.facts(), 0, s.position, s.position, SegmentFiles("/nowhere"), ends_at_stop=True)
    chunks = [(bytes(c), pos) for c, pos in s.chunks(0, s.position, 8192)]
    calls = []
    original = decode.RangeDecoder._small_rows

    def counted(self, *args):
        result = original(self, *args)
        calls.append(result is not None)
        return result

    decoder = RangeDecoder(p, SCHEMA, defer_small=True, min_batch_bytes=1)
    decoder._small_rows = counted.__get__(decoder)
    rows, (state, kinds) = _items_of(decoder, chunks, with_lists=True)
    assert calls == [True] and kinds == [decode.DecodedRows]
    assert [(r[1], r[4], r[5]) for r in rows] == [(m[0], m[2], m[1]) for m in s.messages]
    assert state == (None, 4, True, s.position, True, 0)
