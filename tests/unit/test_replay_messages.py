"""`read_messages`: whole messages joined from the replay reader's frame chunks (fragments, PADs, cut chunks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.replay import ReplaySpan, read_messages
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.frames import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FrameScan,
    scan_frames,
)
from tests.unit.storage_helpers import TERM_LENGTH, StreamBuilder, frame_bytes, pad_header


class FakeReader:
    """Yields the given bytes in chunks cut at the given positions, as `ReplayReader.read` does; a cut given as
    `(end, next_start)` ends a chunk with a PAD cut after its header, the next chunk starting where the PAD ends."""

    def __init__(self, data: bytes, base: int, cuts: list[int | tuple[int, int]]) -> None:
        self.data, self.base, self.cuts = data, base, cuts
        self.closed = False

    def read(self, span: ReplaySpan) -> Iterator[tuple[memoryview, int, FrameScan]]:
        try:
            start = span.start
            for cut in [*self.cuts, span.limit]:
                end, next_start = cut if isinstance(cut, tuple) else (cut, cut)
                chunk = memoryview(bytearray(self.data[start - self.base : end - self.base]))
                yield chunk, start, scan_frames(chunk, 0, len(chunk), stop_at_padding=False)
                start = next_start
        finally:
            self.closed = True


def span(start: int, end: int, limit: int | None = None) -> ReplaySpan:
    return ReplaySpan(ConnectionOptions(), 7, 42, 1001, TERM_LENGTH, start, end, end if limit is None else limit)


def fragmented(payload: bytes, *, at: int, pieces: int) -> bytes:
    """`payload` as `pieces` fragments from stream position `at` (term 7, offsets from `at`)."""
    size = -(-len(payload) // pieces)
    out = b""
    for i in range(pieces):
        flags = (BEGIN_FRAG_FLAG if i == 0 else 0) | (END_FRAG_FLAG if i == pieces - 1 else 0)
        out += frame_bytes(payload[i * size : (i + 1) * size], term_offset=at + len(out), term_id=7, flags=flags)
    return out


def test_messages_come_whole_in_order_with_their_positions():
    stream = StreamBuilder().append_many([10, 200, 1])
    data = b"".join(f.data for f in stream.frames)
    reader = FakeReader(data, 0, [64])
    got = list(read_messages(reader, span(0, stream.position)))  # type: ignore[arg-type]
    assert got == [(f.position, f.data[32 : 32 + n]) for f, n in zip(stream.frames, [10, 200, 1], strict=True)]
    assert reader.closed


def test_fragments_are_joined_across_chunks_and_padding_is_skipped():
    payload = bytes(range(256)) * 12
    first = fragmented(payload, at=0, pieces=4)
    pad = pad_header(96, term_offset=len(first), term_id=7) + bytes(64)
    after = frame_bytes(b"tail", term_offset=len(first) + 96, term_id=7)
    data = first + pad + after
    reader = FakeReader(data, 0, [len(first) // 2 // 32 * 32, (len(first) + 32, len(first) + 96)])
    got = list(read_messages(reader, span(0, len(data))))  # type: ignore[arg-type]
    assert got == [(0, payload), (len(first) + 96, b"tail")]


def test_leading_continuation_fragments_are_skipped_and_reading_stops_at_the_end():
    payload = b"x" * 300
    data = fragmented(payload, at=0, pieces=3) + frame_bytes(b"whole", term_offset=0, term_id=7)
    whole_at = len(data) - 64
    start = len(fragmented(payload, at=0, pieces=3)) // 3  # inside the fragmented message
    start -= start % 32
    reader = FakeReader(data, 0, [])
    assert list(read_messages(reader, span(start, len(data)))) == [(whole_at, b"whole")]  # type: ignore[arg-type]
    # A message that begins at or after `end` is not read, though the data goes on to the limit.
    reader = FakeReader(data, 0, [])
    assert list(read_messages(reader, span(0, whole_at, len(data)))) == [(0, payload)]  # type: ignore[arg-type]
    assert reader.closed


def test_a_message_left_open_or_data_ending_early_raises_naming_the_recording():
    data = fragmented(b"y" * 300, at=0, pieces=3)
    cut = data[: -len(fragmented(b"y" * 100, at=0, pieces=1))]  # the END fragment is missing
    with pytest.raises(ArchiveError, match=r"recording 7 .* is incomplete"):
        list(read_messages(FakeReader(cut, 0, []), span(0, len(cut))))  # type: ignore[arg-type]

    class Short(FakeReader):
        def read(self, s):  # the archive's data ends before the span does
            yield from super().read(span(s.start, len(self.data)))

    whole = frame_bytes(b"z", term_offset=0, term_id=7)
    with pytest.raises(ArchiveError, match="data ends at position 64, before the end 128"):
        list(read_messages(Short(whole, 0, []), span(0, 128)))  # type: ignore[arg-type]
