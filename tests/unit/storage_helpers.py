"""Builders for synthetic Aeron frames, terms and catalogs used by the storage tests.

`StreamBuilder` plays the publication and the image: it appends messages to terms as `TermAppender` does (a
message that does not fit in the rest of a term is preceded by a PAD frame to the term end) and cuts the result
into the blocks `Image.blockPoll` would hand the recorder (DATA runs inside one term, each PAD alone).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from aeron_archive_spark.archive.constants import NULL_POSITION, NULL_TIMESTAMP, RecordingState
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.storage.catalog import compose_semantic_version
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    HEADER_STRUCT,
    UNFRAGMENTED,
    align,
    compute_term_id_from_position,
    position_bits_to_shift,
)

TERM_LENGTH = 64 * 1024
SEGMENT_LENGTH = 128 * 1024
INITIAL_TERM_ID = 7
SESSION_ID = 42
STREAM_ID = 1001
MTU_LENGTH = 1408


def payload_for(position: int, length: int) -> bytes:
    """Deterministic, non-zero payload bytes derived from the frame position (so misplaced bytes show)."""
    seed = (position // FRAME_ALIGNMENT) & 0xFF
    return bytes(((seed + i) % 251) + 1 for i in range(length))


def frame_bytes(
    payload: bytes,
    *,
    term_offset: int,
    term_id: int,
    session_id: int = SESSION_ID,
    stream_id: int = STREAM_ID,
    flags: int = UNFRAGMENTED,
    frame_type: int = HDR_TYPE_DATA,
    reserved_value: int = 0,
) -> bytes:
    """One frame, zero-padded to its 32-byte aligned length."""
    length = HEADER_LENGTH + len(payload)
    header = HEADER_STRUCT.pack(
        length, 0, flags, frame_type, term_offset, session_id, stream_id, term_id, reserved_value
    )
    return header + payload + bytes(align(length, FRAME_ALIGNMENT) - length)


def pad_header(
    length: int, *, term_offset: int, term_id: int, session_id: int = SESSION_ID, stream_id: int = STREAM_ID
) -> bytes:
    """The 32-byte header of a PAD frame of `length` bytes (the only part of a pad that is ever written)."""
    return HEADER_STRUCT.pack(length, 0, UNFRAGMENTED, HDR_TYPE_PAD, term_offset, session_id, stream_id, term_id, 0)


@dataclass(frozen=True, slots=True)
class Frame:
    position: int
    data: bytes  # full aligned frame as it sits in the term (a PAD is its header followed by zeros)
    is_pad: bool

    @property
    def length(self) -> int:
        return len(self.data)

    @property
    def on_disk(self) -> bytes:
        """What a segment file holds for this frame: the whole frame, or only the header of a PAD."""
        return self.data[:HEADER_LENGTH] + bytes(len(self.data) - HEADER_LENGTH) if self.is_pad else self.data


class StreamBuilder:
    """Appends messages to a synthetic stream from `start_position`, inserting PAD frames at term ends."""

    def __init__(
        self,
        start_position: int = 0,
        *,
        term_length: int = TERM_LENGTH,
        initial_term_id: int = INITIAL_TERM_ID,
        session_id: int = SESSION_ID,
        stream_id: int = STREAM_ID,
    ) -> None:
        self.term_length = term_length
        self.initial_term_id = initial_term_id
        self.session_id = session_id
        self.stream_id = stream_id
        self.start_position = start_position
        self.position = start_position
        self.frames: list[Frame] = []
        self._shift = position_bits_to_shift(term_length)

    def _term_id(self, position: int) -> int:
        return compute_term_id_from_position(position, self._shift, self.initial_term_id)

    def append(self, payload_length: int, payload: bytes | None = None) -> Frame:
        body = payload if payload is not None else payload_for(self.position, payload_length)
        aligned = align(HEADER_LENGTH + len(body), FRAME_ALIGNMENT)
        term_offset = self.position & (self.term_length - 1)
        if term_offset + aligned > self.term_length:
            self.pad_to_term_end()
            term_offset = 0
        frame = Frame(
            self.position,
            frame_bytes(
                body,
                term_offset=term_offset,
                term_id=self._term_id(self.position),
                session_id=self.session_id,
                stream_id=self.stream_id,
            ),
            False,
        )
        self.frames.append(frame)
        self.position += aligned
        return frame

    def append_many(self, payload_lengths: Iterable[int]) -> StreamBuilder:
        for length in payload_lengths:
            self.append(length)
        return self

    def append_padding(self, payload_length: int) -> Frame:
        """A PAD of `payload_length` bytes after its header, as Java's `ExclusivePublication.appendPadding` leaves it.

        Anywhere in a term; one that does not fit in the rest of the term lands at the start of the next, after the
        PAD that closes this one.
        """
        length = HEADER_LENGTH + payload_length
        if (self.position & (self.term_length - 1)) + align(length, FRAME_ALIGNMENT) > self.term_length:
            self.pad_to_term_end()
        return self._pad(length)

    def pad_to_term_end(self) -> Frame:
        return self._pad(self.term_length - (self.position & (self.term_length - 1)))

    def _pad(self, length: int) -> Frame:
        header = pad_header(
            length,
            term_offset=self.position & (self.term_length - 1),
            term_id=self._term_id(self.position),
            session_id=self.session_id,
            stream_id=self.stream_id,
        )
        aligned = align(length, FRAME_ALIGNMENT)
        frame = Frame(self.position, header + bytes(aligned - HEADER_LENGTH), True)
        self.frames.append(frame)
        self.position += aligned
        return frame

    def fill_to(self, position: int, payload_length: int = 96) -> StreamBuilder:
        """Append messages until the stream reaches at least `position`."""
        while self.position < position:
            self.append(payload_length)
        return self

    def blocks(self, block_limit: int = 1024 * 1024) -> list[tuple[int, bytes]]:
        """(position, block) pairs as `Image.blockPoll` would deliver them to the recorder."""
        result: list[tuple[int, bytes]] = []
        run: list[Frame] = []

        def flush() -> None:
            if run:
                result.append((run[0].position, b"".join(f.data for f in run)))
                run.clear()

        for frame in self.frames:
            if frame.is_pad:
                flush()
                result.append((frame.position, frame.data))
                continue
            same_term = run and (run[0].position // self.term_length) == (frame.position // self.term_length)
            if run and (not same_term or sum(f.length for f in run) + frame.length > block_limit):
                flush()
            run.append(frame)
        flush()
        return result

    def expected_bytes(self, from_position: int, to_position: int) -> bytes:
        """Bytes a segment range should hold: data frames verbatim, PAD headers followed by zeros."""
        out = bytearray()
        for frame in self.frames:
            if frame.position + frame.length <= from_position or frame.position >= to_position:
                continue
            data = frame.on_disk
            lo = max(from_position - frame.position, 0)
            hi = min(to_position - frame.position, frame.length)
            out += data[lo:hi]
        return bytes(out)


def make_descriptor(
    recording_id: int = 0,
    *,
    start_position: int = 0,
    stop_position: int = NULL_POSITION,
    term_length: int = TERM_LENGTH,
    segment_length: int = SEGMENT_LENGTH,
    initial_term_id: int = INITIAL_TERM_ID,
    session_id: int = SESSION_ID,
    stream_id: int = STREAM_ID,
    stripped_channel: str = "aeron:ipc",
    original_channel: str = "aeron:ipc?term-length=64k",
    source_identity: str = "aeron:ipc",
) -> RecordingDescriptor:
    return RecordingDescriptor(
        control_session_id=0,
        correlation_id=0,
        recording_id=recording_id,
        start_timestamp=1_700_000_000_000,
        stop_timestamp=NULL_TIMESTAMP if stop_position == NULL_POSITION else 1_700_000_001_000,
        start_position=start_position,
        stop_position=stop_position,
        initial_term_id=initial_term_id,
        segment_file_length=segment_length,
        term_buffer_length=term_length,
        mtu_length=MTU_LENGTH,
        session_id=session_id,
        stream_id=stream_id,
        stripped_channel=stripped_channel,
        original_channel=original_channel,
        source_identity=source_identity,
    )


LEGACY_RECORD_LENGTH = 1024


def write_legacy_catalog(
    archive_dir: str | os.PathLike[str],
    descriptors: list[RecordingDescriptor],
    *,
    states: list[int] | None = None,
    version: int = compose_semantic_version(2, 0, 0),
) -> str:
    """Write a pre-1.32 catalog: 1 KiB header record, then one 1 KiB record per descriptor.

    The old header kept `alignment == 0` at offset 16 (the field did not exist), and each record's header
    length is the encoded descriptor length without padding, as Aeron wrote them before migration 2->3.
    """
    path = os.path.join(os.fspath(archive_dir), "archive.catalog")
    data = bytearray(LEGACY_RECORD_LENGTH * (1 + len(descriptors)))
    struct.pack_into("<ii", data, 0, version, LEGACY_RECORD_LENGTH)
    for i, d in enumerate(descriptors):
        offset = LEGACY_RECORD_LENGTH * (i + 1)
        body = struct.pack(
            "<qqqqqqqiiiiii",
            d.control_session_id,
            d.correlation_id,
            d.recording_id,
            d.start_timestamp,
            d.stop_timestamp,
            d.start_position,
            d.stop_position,
            d.initial_term_id,
            d.segment_file_length,
            d.term_buffer_length,
            d.mtu_length,
            d.session_id,
            d.stream_id,
        )
        for text in (d.stripped_channel, d.original_channel, d.source_identity):
            raw = text.encode("ascii")
            body += struct.pack("<I", len(raw)) + raw
        state = RecordingState.VALID if states is None else states[i]
        struct.pack_into("<iii", data, offset, len(body), state, 0)
        data[offset + 32 : offset + 32 + len(body)] = body
    with open(path, "wb") as f:
        f.write(data)
    return path
