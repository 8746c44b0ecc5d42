"""Append blocks of frames straight into an exclusive publication's term buffers, as Aeron's block appender does.

Why: a replay appends a recording's frames to its replay publication. Through the C client that is two copies of
every byte, `pread` from the segment file into a buffer (where each frame's session and stream id are rewritten),
then `offer_block`'s copy into the term. With its own mapping of the publication's log buffer the replayer reads
the file straight into the term at the publication's tail and rewrites the headers there: one copy.

What readers may see. A reader of the log (an IPC image, or a network publication's sender) consumes the term from
its position and stops at a frame whose length word is 0; the driver keeps the term ahead of the tail zeroed (it
cleans behind consumers before it raises the publication limit, which is why a block may only be written while
the position is below the limit). The replayer reads a block into the term with the first frame's first 8 bytes
(length, version, flags, type) diverted to a scratch word, so the frame at the tail stays at length 0 while the rest
lands and its headers are rewritten, and it zeroes the length word just after the batch (bytes read past it are
not part of the batch). Publishing then follows Aeron's appender: the tail counter first, then the first word,
both with release stores (`aeron_counter_set_release`), so a reader that sees the length sees the whole block.

Only this appender may append to the publication once it is used: the C publication keeps its own term offset,
which it does not move, so its `offer`, `position` and `available_window` would be stale. The appender answers
position and window itself; `is_connected`, the limit and closing still go through the C publication, which read
the shared log metadata and counters.
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from .ffi import NativeAeronError, ffi, get_lib
from .publications import ExclusivePublication

__all__ = ["TermAppender"]

PARTITION_COUNT = 3
META_DATA_LENGTH = 4096
_ACTIVE_TERM_COUNT_OFFSET = 24  # int32, then padding: written as the low half of an int64 release store
_CORRELATION_ID_OFFSET = 256
_INITIAL_TERM_ID_OFFSET = 264
_TERM_LENGTH_OFFSET = 276
_HEADER_LENGTH = 32
_FRAME_ALIGNMENT = 32
_HDR_TYPE_PAD = 0x00
_UNFRAGMENTED = 0xC0


def _int64(value: int) -> int:
    """`value` (0 <= value < 2**64) as the signed int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _log_path(aeron_dir: str, registration_id: int) -> str:
    """Where the driver keeps a publication's log buffer (the same file for IPC and network publications)."""
    return os.path.join(aeron_dir, "publications", f"{registration_id}.logbuffer")


def _map_flags(stat: os.stat_result) -> int:
    """MAP_POPULATE for a log whose pages are all allocated already (a non-sparse one), MAP_SHARED alone otherwise.

    This mapping is the process's own, beside the driver's: each of its pages is faulted in on the first write,
    one page at a time (a write fault on a shared mapping maps no neighbours). For a 48 MiB log (16 MiB terms) that
    was 12,288 faults per replay, ~1.2 us each on the project's VMs (14 ms); populating the mapping when it is made
    maps the same pages in 2.5 ms. (A 300 MB read in Spark-sized partitions of 64 MiB: the replayer's `preadv`
    took 0.16-0.18 CPU-s before, 0.10 since.) A sparse log (a short replay's) is mapped as it is: populating would
    allocate whole terms the replay never reaches.
    """
    allocated = stat.st_blocks * 512
    return mmap.MAP_SHARED | (mmap.MAP_POPULATE if allocated >= stat.st_size else 0)


class TermAppender:
    """The append side of one exclusive publication's log buffer, mapped by this process.

    Created right after the publication, before anything is appended through the C client; `position` starts at the
    publication's tail (its initial position, e.g. a replay's start position).
    """

    def __init__(self, publication: ExclusivePublication, aeron_dir: str) -> None:
        term_length = publication.term_buffer_length
        path = _log_path(aeron_dir, publication.registration_id)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as ex:
            raise NativeAeronError(f"cannot open the log buffer {path}: {ex.strerror or ex}") from ex
        try:
            stat = os.fstat(fd)
            size = stat.st_size
            if size < PARTITION_COUNT * term_length + META_DATA_LENGTH:
                raise NativeAeronError(f"log buffer {path} is {size} bytes, too short for terms of {term_length}")
            self._map = mmap.mmap(fd, size, flags=_map_flags(stat))
        finally:
            os.close(fd)
        self._closed = False
        self._meta = PARTITION_COUNT * term_length
        meta = self._meta
        self._bytes = np.frombuffer(self._map, dtype=np.uint8)
        self._int32 = self._bytes.view("<i4")
        self._int64 = self._bytes.view("<i8")
        self._cbuffer = ffi.from_buffer(self._map)
        self._base = ffi.cast("int64_t *", self._cbuffer)
        self._set_release = get_lib().aeron_counter_set_release
        correlation_id = int(self._int64[(meta + _CORRELATION_ID_OFFSET) >> 3])
        initial_term_id = int(self._int32[(meta + _INITIAL_TERM_ID_OFFSET) >> 2])
        logged_term_length = int(self._int32[(meta + _TERM_LENGTH_OFFSET) >> 2])
        if (correlation_id, initial_term_id, logged_term_length) != (
            publication.registration_id,
            publication.initial_term_id,
            term_length,
        ):
            self.close()
            raise NativeAeronError(
                f"log buffer {path} is not this publication's: correlation id {correlation_id}, initial term id "
                f"{initial_term_id}, term length {logged_term_length}"
            )
        self.publication = publication
        self.term_length = term_length
        self.initial_term_id = initial_term_id
        self.max_possible_position = publication.max_possible_position
        self.session_id = publication.session_id
        self.stream_id = publication.stream_id
        active_term_count = int(self._int32[(meta + _ACTIVE_TERM_COUNT_OFFSET) >> 2])
        self._index = active_term_count % PARTITION_COUNT
        raw_tail = int(self._int64[(meta >> 3) + self._index])
        self.term_id = raw_tail >> 32
        self.term_offset = min(raw_tail & 0xFFFF_FFFF, term_length)
        self.term_begin_position = ((self.term_id - initial_term_id) & 0xFFFF_FFFF) * term_length

    @property
    def position(self) -> int:
        return self.term_begin_position + self.term_offset

    @property
    def available_window(self) -> int:
        """Bytes that can be appended before back pressure: the publication limit less `position` (< 0 if closed)."""
        limit = self.publication.position_limit
        if limit < 0:
            return int(limit)
        return int(limit) - self.position

    def ensure_term(self) -> bool:
        """Move to the next term when this one is full (Aeron's term rotation); False at the log's last position."""
        if self.term_offset < self.term_length:
            return True
        if self.term_begin_position + self.term_length >= self.max_possible_position:
            return False
        next_term_id = (self.term_id + 1 + (1 << 31)) % (1 << 32) - (1 << 31)
        next_term_count = (next_term_id - self.initial_term_id) & 0xFFFF_FFFF
        next_index = next_term_count % PARTITION_COUNT
        meta64 = self._meta >> 3
        self._int64[meta64 + next_index] = _int64((next_term_id & 0xFFFF_FFFF) << 32)
        # active_term_count (int32, little-endian) and the padding after it, in one release store.
        self._set_release(self._base + meta64 + (_ACTIVE_TERM_COUNT_OFFSET >> 3), next_term_count)
        self._index = next_index
        self.term_id = next_term_id
        self.term_offset = 0
        self.term_begin_position += self.term_length
        return True

    def term_region(self, length: int) -> memoryview:
        """The `length` bytes of the current term from the tail on, to be filled before `publish_block`."""
        if length > self.term_length - self.term_offset:
            raise ValueError(f"{length} bytes do not fit in the {self.term_length - self.term_offset} left in the term")
        start = self._index * self.term_length + self.term_offset
        return memoryview(self._map)[start : start + length]

    def term_buffer(self) -> memoryview:
        """The whole current term, for scans and header rewrites at term offsets."""
        start = self._index * self.term_length
        return memoryview(self._map)[start : start + self.term_length]

    def clear_length_at(self, term_offset: int) -> None:
        """Zero the frame length word at `term_offset` of the current term (bytes read past a batch)."""
        if term_offset < self.term_length:
            self._int32[(self._index * self.term_length + term_offset) >> 2] = 0

    def publish_block(self, length: int, first_word: int) -> int:
        """Make `length` bytes at the tail, already in the term but for the first frame's first word, visible.

        `first_word` is that frame's first 8 bytes as a little-endian int64 (length, version, flags, type).
        Returns the new position.
        """
        if length <= 0 or self.term_offset + length > self.term_length:
            raise ValueError(f"block of {length} bytes at term offset {self.term_offset} does not fit its term")
        frame = self._index * self.term_length + self.term_offset
        new_offset = self.term_offset + length
        self._set_tail(new_offset)
        self._set_release(self._base + (frame >> 3), first_word)
        self.term_offset = new_offset
        return self.position

    def append_padding(self, frame_length: int) -> int:
        """Write a PAD frame of `frame_length` bytes (header included) at the tail: Java's `appendPadding`.

        A replay appends a recording's own PADs this way, wherever they lie in their term: the one that closes a term
        (the next append then starts the next term) and those a publisher's `appendPadding` or a receiver's gap fill
        left in the middle. Any length that fits in the rest of the term, as Java's replay reproduces what Java's
        publications write, including PADs longer than the C client's `append_padding` accepts. Only the header is
        written: the body is the driver's cleaned term, as after Java's `appendPadding`. The word after the PAD must
        not hold a frame length (nothing read past the PAD may be left there): readers go straight on to it.
        """
        remaining = self.term_length - self.term_offset
        aligned = (frame_length + _FRAME_ALIGNMENT - 1) & -_FRAME_ALIGNMENT
        if frame_length < _HEADER_LENGTH or aligned > remaining:
            raise ValueError(
                f"a PAD frame of {frame_length} bytes does not fit in the {remaining} bytes left in the term"
            )
        frame = self._index * self.term_length + self.term_offset
        self._set_tail(self.term_offset + aligned)
        words = frame >> 3
        self._int64[words + 3] = 0
        self._int64[words + 2] = _int64(((self.term_id & 0xFFFF_FFFF) << 32) | (self.stream_id & 0xFFFF_FFFF))
        self._int64[words + 1] = _int64(((self.session_id & 0xFFFF_FFFF) << 32) | self.term_offset)
        first_word = (_HDR_TYPE_PAD << 48) | (_UNFRAGMENTED << 40) | frame_length
        self._set_release(self._base + words, first_word)
        self.term_offset += aligned
        return self.position

    def _set_tail(self, term_offset: int) -> None:
        raw_tail = _int64(((self.term_id & 0xFFFF_FFFF) << 32) | term_offset)
        self._set_release(self._base + (self._meta >> 3) + self._index, raw_tail)

    def close(self) -> None:
        """Unmap the log buffer (the publication itself is closed by its owner); idempotent."""
        if self._closed:
            return
        self._closed = True
        del self._int32, self._int64, self._bytes, self._base
        ffi.release(self._cbuffer)
        # A view handed out by term_region may still be alive: the mapping then goes with its last user.
        with contextlib.suppress(BufferError):
            self._map.close()

    def __repr__(self) -> str:
        return f"TermAppender(session={self.session_id}, position={self.position}, closed={self._closed})"
