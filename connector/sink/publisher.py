"""Publish Arrow `value` columns on an ExclusivePublication as pre-built blocks of Aeron frames.

Offering one message per row costs a Python iteration and a locked FFI call per row (~2 us), which caps a
64-byte-value sink far below what Spark delivers. Instead, runs of consecutive messages that fit in the rest of
the current term (and a block cap) become one block: the 32-byte headers are filled column-wise with numpy, and
Arrow's `binary_join_element_wise` lays out header + payload + alignment padding per row in C, so the joined
array's data buffer *is* the block handed to `offer_block` (the same frames Aeron's appender would write).

Rows longer than the publication's max payload (they need fragmentation) and the first row that no longer fits
in the current term go through `offer`, which fragments, pads the term end and rotates like any Aeron publisher.
Back pressure is waited on, never dropped; a publication that stays back pressured or disconnected longer than
the timeout fails with an error naming the channel and stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aeron_archive_spark.archive.native import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    PUBLICATION_CLOSED,
    ExclusivePublication,
)
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.connector.sink.errors import SinkError

log = logging.getLogger(__name__)


# Blocks are capped so one offer never runs far past the publication limit (the check is position < limit only)
# and the recorder's block polls (at most min(term, fileIoMaxLength = 1 MiB)) keep up in step.
MAX_BLOCK_BYTES = 1 << 20

HEADER_DTYPE = np.dtype(
    [
        ("frame_length", "<i4"),
        ("version", "u1"),
        ("flags", "u1"),
        ("type", "<u2"),
        ("term_offset", "<i4"),
        ("session_id", "<i4"),
        ("stream_id", "<i4"),
        ("term_id", "<i4"),
        ("reserved_value", "<i8"),
    ]
)
assert HEADER_DTYPE.itemsize == frames.HEADER_LENGTH


class FramePublisher:
    """Appends messages to one exclusive publication; tracks the position itself (single writer)."""

    def __init__(
        self,
        publication: ExclusivePublication,
        timeout_s: float,
        what: str,
        check_alive: Callable[[], None] | None = None,
    ) -> None:
        self.publication = publication
        self.timeout_s = timeout_s
        self.what = what
        self.check_alive = check_alive
        self.term_length = publication.term_buffer_length
        self.shift = publication.position_bits_to_shift
        self.initial_term_id = publication.initial_term_id
        self.max_payload = publication.max_payload_length
        self.max_message = publication.max_message_length
        self.block_cap = max(
            min(MAX_BLOCK_BYTES, self.term_length // 4),
            frames.align(publication.max_payload_length + frames.HEADER_LENGTH, frames.FRAME_ALIGNMENT),
        )
        self.position = publication.position
        self._headers = np.zeros(0, dtype=HEADER_DTYPE)
        self._header_offsets = np.zeros(1, dtype=np.int32)
        self._zeros = pa.py_buffer(np.zeros(frames.FRAME_ALIGNMENT * 1024, dtype=np.uint8))
        self._pad_offsets = np.zeros(1, dtype=np.int32)

    # -- scratch ------------------------------------------------------------------------------------------
    def _scratch(self, count: int) -> None:
        if count <= self._headers.size:
            return
        capacity = max(count, 2 * self._headers.size, 1024)
        headers = np.zeros(capacity, dtype=HEADER_DTYPE)
        headers["flags"] = frames.UNFRAGMENTED
        headers["type"] = frames.HDR_TYPE_DATA
        headers["session_id"] = self.publication.session_id
        headers["stream_id"] = self.publication.stream_id
        self._headers = headers
        self._header_offsets = np.arange(0, frames.HEADER_LENGTH * (capacity + 1), frames.HEADER_LENGTH, dtype=np.int32)
        self._pad_offsets = np.zeros(capacity + 1, dtype=np.int32)
        if self._zeros.size < (frames.FRAME_ALIGNMENT - 1) * capacity:
            self._zeros = pa.py_buffer(np.zeros((frames.FRAME_ALIGNMENT - 1) * capacity, dtype=np.uint8))

    # -- publishing ---------------------------------------------------------------------------------------
    def publish(self, values: pa.Array, reserved: np.ndarray | None = None) -> int:
        """Append every value in order (reserved values into the header); returns the new position."""
        n = len(values)
        if n == 0:
            return self.position
        if values.type != pa.binary():
            raise TypeError(f"publish needs a binary array, got {values.type}")
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1, offset=values.offset * 4)
        data = values.buffers()[2]
        data_view = memoryview(data) if data is not None else memoryview(b"")
        lengths = np.diff(offsets).astype(np.int64)
        longest = int(lengths.max())
        if longest > self.max_message:
            row = int(np.argmax(lengths))
            raise SinkError(
                f"value of {longest} bytes (row {row} of the staged batch) exceeds the maximum message "
                f"length {self.max_message} of {self.what} (term length {self.term_length} / 8)"
            )
        aligned = (lengths + (frames.HEADER_LENGTH + frames.FRAME_ALIGNMENT - 1)) & -frames.FRAME_ALIGNMENT
        cumulative = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(aligned, out=cumulative[1:])
        fragmented = np.flatnonzero(lengths > self.max_payload)
        term_mask = self.term_length - 1
        i = 0
        while i < n:
            k = int(np.searchsorted(fragmented, i)) if fragmented.size else 0
            next_fragmented = int(fragmented[k]) if k < fragmented.size else n
            if next_fragmented == i:
                self._offer_one(data_view[offsets[i] : offsets[i + 1]], 0 if reserved is None else int(reserved[i]))
                i += 1
                continue
            term_offset = self.position & term_mask
            cap = min(self.term_length - term_offset, self.block_cap)
            end = int(np.searchsorted(cumulative, cumulative[i] + cap, side="right")) - 1
            end = min(end, next_fragmented)
            if end <= i:  # the next frame does not fit in this term: offer pads the term end and rotates
                self._offer_one(data_view[offsets[i] : offsets[i + 1]], 0 if reserved is None else int(reserved[i]))
                i += 1
                continue
            block = self._build_block(values, lengths, aligned, cumulative, reserved, i, end, term_offset)
            self._offer_block(block, int(cumulative[end] - cumulative[i]))
            i = end
        return self.position

    def _build_block(
        self,
        values: pa.Array,
        lengths: np.ndarray,
        aligned: np.ndarray,
        cumulative: np.ndarray,
        reserved: np.ndarray | None,
        start: int,
        end: int,
        term_offset: int,
    ) -> memoryview:
        count = end - start
        self._scratch(count)
        headers = self._headers[:count]
        headers["frame_length"] = lengths[start:end] + frames.HEADER_LENGTH
        headers["term_offset"] = cumulative[start:end] - (cumulative[start] - term_offset)
        headers["term_id"] = frames.compute_term_id_from_position(self.position, self.shift, self.initial_term_id)
        headers["reserved_value"] = 0 if reserved is None else reserved[start:end]
        header_array = pa.Array.from_buffers(
            pa.binary(), count, [None, pa.py_buffer(self._header_offsets[: count + 1]), pa.py_buffer(headers)]
        )
        pad_offsets = self._pad_offsets[: count + 1]
        np.cumsum(aligned[start:end] - lengths[start:end] - frames.HEADER_LENGTH, out=pad_offsets[1:])
        pad_array = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(pad_offsets), self._zeros])
        joined = pc.binary_join_element_wise(header_array, values.slice(start, count), pad_array, b"")
        first = int(np.frombuffer(joined.buffers()[1], dtype=np.int32, count=1, offset=joined.offset * 4)[0])
        return memoryview(joined.buffers()[2])[first:]

    def _offer_block(self, block: memoryview, length: int) -> None:
        view = block[:length]
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        while True:
            result = self.publication.offer_block(view)
            if result > 0:
                self.position = result
                return
            deadline, spins = self._wait(result, deadline, spins)

    def _offer_one(self, payload: memoryview, reserved_value: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        while True:
            result = self.publication.offer(payload, reserved_value)
            if result > 0:
                self.position = result
                return
            if result == ADMIN_ACTION:  # term rotated (after padding its end): retry at once
                continue
            deadline, spins = self._wait(result, deadline, spins)

    def _wait(self, result: int, deadline: float, spins: int) -> tuple[float, int]:
        """Back off on back pressure / not connected; fail on a closed publication or after the timeout."""
        if result == PUBLICATION_CLOSED:
            raise SinkError(f"{self.what} was closed while publishing at position {self.position}")
        if result == MAX_POSITION_EXCEEDED:
            raise SinkError(
                f"{self.what} reached its maximum position at {self.position}: the recording's term "
                "length is too small for this much data"
            )
        if result not in (NOT_CONNECTED, BACK_PRESSURED, ADMIN_ACTION):
            raise SinkError(f"unexpected offer result {result} on {self.what} at position {self.position}")
        if time.monotonic() > deadline:
            state = "not connected (no archive image)" if result == NOT_CONNECTED else "back pressured"
            raise SinkError(
                f"{self.what} stayed {state} for {self.timeout_s:.1f}s at position {self.position}: "
                "is the archive still recording?"
            )
        spins += 1
        if spins % 64 == 0 and self.check_alive is not None:
            self.check_alive()
        time.sleep(0 if spins < 16 else 0.0001)
        return deadline, spins
