"""Publications: concurrent (`Publication`) and exclusive (`ExclusivePublication`, with offer_block / append_padding).

Both kinds share one handle implementation and one wrapper base: the C API has a parallel `aeron_publication_*` /
`aeron_exclusive_publication_*` family for everything they have in common, so the exclusive handle differs only in
the family it names (`KIND`, `C_PREFIX`).
Offers take any contiguous bytes-like object without copying (cffi releases the GIL around the C call), and
answer Aeron's result codes: a new position, or a negative code (BACK_PRESSURED, NOT_CONNECTED, ...). Once closed
they answer PUBLICATION_CLOSED rather than raising, as the C API does; only PUBLICATION_ERROR raises, with the C
client's error message.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from .callbacks import RESERVED_VALUE_CB, cstr
from .ffi import ADMIN_ACTION, PUBLICATION_CLOSED, PUBLICATION_ERROR, NativeAeronError, ffi, get_lib, last_error
from .handles import ClientNative, HandleAttribute, HandleQuery, NativeHandle, NativeWrapper

__all__ = ["ExclusivePublication", "ExclusivePublicationNative", "Publication", "PublicationNative"]

logger = logging.getLogger(__name__)

# A data frame header, the least offer_block reads unchecked (aeron_header_values_frame_t is that header's layout).
_DATA_HEADER_LENGTH = int(ffi.sizeof("aeron_header_values_frame_t"))
_FRAME_ALIGNMENT = 32


def align_frame(length: int) -> int:
    """`length` rounded up to Aeron's frame alignment (32 bytes): what a frame of that length takes in a term."""
    return (length + _FRAME_ALIGNMENT - 1) & -_FRAME_ALIGNMENT


def fragmented_length(length: int, max_payload_length: int) -> int:
    """Bytes a message of `length` takes in a term once split into frames of at most `max_payload_length` payload.

    Aeron's `computeFragmentedFrameLength`: every full fragment takes its header plus `max_payload_length` (an MTU,
    already aligned), the last partial one its aligned header and payload; an empty message is one bare header.
    """
    full, rest = divmod(length, max_payload_length)
    last = align_frame(rest + _DATA_HEADER_LENGTH) if rest > 0 or full == 0 else 0
    return full * (max_payload_length + _DATA_HEADER_LENGTH) + last


def shortest_message_longer_than(space: int, max_message_length: int, max_payload_length: int) -> int:
    """The shortest message length whose framed length exceeds `space`, or -1 if even the longest does not.

    The framed length grows with the message length, so a bisection over [1, max_message_length] finds it.
    """
    if fragmented_length(max_message_length, max_payload_length) <= space:
        return -1
    low, high = 1, max_message_length  # invariant: fragmented_length(high) > space
    while low < high:
        middle = (low + high) // 2
        if fragmented_length(middle, max_payload_length) > space:
            high = middle
        else:
            low = middle + 1
    return high


class PublicationNative(NativeHandle):
    """Owns an aeron_publication_t (concurrent publication) and its immutable constants."""

    KIND: ClassVar[str] = "publication"  # the C API family: aeron_<KIND>_*, aeron_async_add_<KIND>*
    C_PREFIX = "aeron_publication_"

    def __init__(self, client: ClientNative, ptr: Any, channel: str, stream_id: int) -> None:
        super().__init__(ptr)
        self.client = client
        self.reserved_value = ffi.new("int64_t *")
        constants = ffi.new("aeron_publication_constants_t *")
        if self.c_function("constants")(ptr, constants) < 0:
            raise last_error(f"publication constants({channel!r}, {stream_id})")
        self.channel = cstr(constants.channel)
        self.registration_id = int(constants.registration_id)
        self.original_registration_id = int(constants.original_registration_id)
        self.max_possible_position = int(constants.max_possible_position)
        self.position_bits_to_shift = int(constants.position_bits_to_shift)
        self.term_buffer_length = int(constants.term_buffer_length)
        self.max_message_length = int(constants.max_message_length)
        self.max_payload_length = int(constants.max_payload_length)
        self.stream_id = int(constants.stream_id)
        self.session_id = int(constants.session_id)
        self.initial_term_id = int(constants.initial_term_id)
        self.publication_limit_counter_id = int(constants.publication_limit_counter_id)
        self.channel_status_indicator_id = int(constants.channel_status_indicator_id)
        self._c_offer = self.c_function("offer")  # resolved once: offers are the hot path

    def describe(self) -> str:
        return f"publication({self.channel!r}, {self.stream_id})"

    def offer_locked(self, ptr: Any, buffer: Any, reserved_value: int) -> int:
        """One offer; runs under the lock (through `call`), which also guards the shared reserved-value slot."""
        offer = self._c_offer
        if reserved_value:
            self.reserved_value[0] = reserved_value
            return int(offer(ptr, buffer, len(buffer), RESERVED_VALUE_CB, self.reserved_value))
        return int(offer(ptr, buffer, len(buffer), ffi.NULL, ffi.NULL))

    def close(self, revoke: bool = False) -> None:
        """Close (`revoke`: revoke, exclusive publications only) in the C client, which finishes asynchronously."""
        with self.lock:
            ptr, self.ptr = self.ptr, None
        self.client.children.pop(id(self), None)
        if ptr is None or self.client.ptr is None:
            return
        close_fn = self.c_function("revoke" if revoke else "close")
        if close_fn(ptr, ffi.NULL, ffi.NULL) < 0:
            logger.error("%s", last_error(f"closing {self.describe()}"))


class ExclusivePublicationNative(PublicationNative):
    """Owns an aeron_exclusive_publication_t; the exclusive family also has offer_block, append_padding, revoke."""

    KIND = "exclusive_publication"
    C_PREFIX = "aeron_exclusive_publication_"


class _PublicationBase(NativeWrapper[PublicationNative]):
    __slots__ = ()

    channel = HandleAttribute[str]()
    stream_id = HandleAttribute[int]()
    session_id = HandleAttribute[int]()
    initial_term_id = HandleAttribute[int]()
    term_buffer_length = HandleAttribute[int]()
    position_bits_to_shift = HandleAttribute[int]()
    max_payload_length = HandleAttribute[int]()
    max_message_length = HandleAttribute[int]()
    max_possible_position = HandleAttribute[int]()
    registration_id = HandleAttribute[int]()
    original_registration_id = HandleAttribute[int]()
    publication_limit_counter_id = HandleAttribute[int]()
    is_closed = HandleQuery(bool, closed=True)
    is_connected = HandleQuery(bool, closed=False)
    position = HandleQuery(
        int, closed=PUBLICATION_CLOSED, doc="Current publication position, or PUBLICATION_CLOSED (-4) once closed."
    )
    position_limit = HandleQuery(
        int,
        closed=PUBLICATION_CLOSED,
        doc="Position beyond which offers are back pressured, or PUBLICATION_CLOSED (-4) once closed.",
    )
    channel_status = HandleQuery(
        int, closed=0, doc="1 ACTIVE, -1 ERRORED (socket error on setup), 0 when no status indicator exists or closed."
    )

    def __repr__(self) -> str:
        n = self._n
        return (
            f"{type(self).__name__}({n.channel!r}, stream_id={n.stream_id}, session_id={n.session_id}, "
            f"closed={self.is_closed})"
        )

    @property
    def available_window(self) -> int:
        """Bytes that can be offered before back pressure (position_limit - position); -4 once closed."""
        limit = self.position_limit
        position = self.position
        if limit < 0 or position < 0:
            return PUBLICATION_CLOSED
        return limit - position

    def offer(self, data: Any, reserved_value: int = 0) -> int:
        """Offer one message (any contiguous bytes-like, zero copy); new position or a negative Aeron code.

        Raises NativeAeronError for PUBLICATION_ERROR (-6), e.g. a message longer than max_message_length.
        """
        buffer = ffi.from_buffer("uint8_t[]", data)
        n = self._n
        return self._checked(n.call(n.offer_locked, buffer, reserved_value, closed=PUBLICATION_CLOSED), "offer")

    def _checked(self, result: int, what: str) -> int:
        """Raise the C client's error for PUBLICATION_ERROR; called right after the C call, on the same thread."""
        if result == PUBLICATION_ERROR:
            raise last_error(f"{what} on {self._n.channel!r} stream {self._n.stream_id}")
        return result

    def close(self) -> None:
        """Close the publication (asynchronously in the C client); idempotent."""
        self._n.close()


class Publication(_PublicationBase):
    """A concurrent (multi-writer) publication. Offer results < 0 are Aeron's codes (BACK_PRESSURED, ...)."""

    __slots__ = ()


class ExclusivePublication(_PublicationBase):
    """A single-writer publication: offer, offer_block of pre-formatted frames, append_padding, revoke."""

    __slots__ = ()

    def offer_block(self, block: Any) -> int:
        """Append pre-formatted frames (session/stream id already this publication's) at the current position.

        The block must start at the publication's term offset, hold whole frames and fit in the current term.
        Zero copy from any contiguous bytes-like. Returns the new position or a negative Aeron code; raises
        NativeAeronError for PUBLICATION_ERROR (malformed block).
        """
        buffer = ffi.from_buffer("uint8_t[]", block)
        if len(buffer) < _DATA_HEADER_LENGTH:  # the C call reads a whole first frame header unchecked
            raise ValueError(
                f"offer_block needs at least one {_DATA_HEADER_LENGTH}-byte frame, got {len(buffer)} bytes"
            )
        offer_block = get_lib().aeron_exclusive_publication_offer_block
        result = self._n.call(offer_block, buffer, len(buffer), closed=PUBLICATION_CLOSED)
        return self._checked(int(result), "offer_block")

    def append_padding(self, length: int) -> int:
        """Append a PAD frame of `length` payload bytes, as Java's `ExclusivePublication.appendPadding` does.

        Returns the new position or a negative Aeron code. Java accepts any length up to the max framed length (what
        a max-length message takes in a term), but the C client refuses lengths above `max_message_length`, and the
        PAD an appender leaves at the end of a term when the next message does not fit is often longer than that
        (up to the max framed length less one frame alignment). Such a PAD, running exactly to the end of the
        term, is written here through the C client's own end-of-term path: offering a message whose framed length
        exceeds the space left makes the appender pad the rest of the term and rotate without writing the message
        (see `_pad_to_term_end_locked`). A longer PAD that would not end the term (or end past it) has no C path
        that keeps it one frame: ValueError, as for a length above the max framed length.
        """
        n = self._n
        if length <= n.max_message_length:
            append_padding = get_lib().aeron_exclusive_publication_append_padding
            result = n.call(append_padding, int(length), closed=PUBLICATION_CLOSED)
            return self._checked(int(result), "append_padding")
        max_framed = fragmented_length(n.max_message_length, n.max_payload_length)
        if length > max_framed:
            raise ValueError(f"append_padding: length={length} > max framed length={max_framed}")
        result = n.call(self._pad_to_term_end_locked, int(length), closed=PUBLICATION_CLOSED)
        return self._checked(int(result), "append_padding")

    def _pad_to_term_end_locked(self, ptr: Any, length: int) -> int:
        """Write one PAD frame of `length` payload bytes that ends exactly at the term end; runs under the lock.

        The exclusive appender, offered a message whose framed length exceeds the space left in the term, writes a
        PAD over that space, rotates to the next term and answers ADMIN_ACTION, never copying the message. The
        message offered is the shortest whose framed length exceeds the space left, so the C client never reads
        past the zeroed buffer handed to it even if that space were misjudged. ADMIN_ACTION is then translated
        into the new position: the PAD asked for was written, and a caller retrying ADMIN_ACTION would pad again.
        """
        n = self._n
        lib = get_lib()
        position = int(lib.aeron_exclusive_publication_position(ptr))
        if position < 0:
            return position
        term_length = n.term_buffer_length
        space = term_length - (position & (term_length - 1))  # position at a term end reads as the next term's 0
        frame_length = align_frame(length + _DATA_HEADER_LENGTH)
        if frame_length != space:
            raise ValueError(
                f"append_padding: a PAD frame of {frame_length} bytes longer than max_message_length="
                f"{n.max_message_length} can only be written to end the term, which has {space} bytes left at "
                f"position {position}"
            )
        message_length = shortest_message_longer_than(space, n.max_message_length, n.max_payload_length)
        if message_length < 0:
            raise ValueError(
                f"append_padding: no message of at most max_message_length={n.max_message_length} bytes frames to "
                f"more than the {space} bytes left in the term at position {position}"
            )
        message = ffi.new("uint8_t[]", message_length)
        result = int(n.offer_locked(ptr, message, 0))
        if result == ADMIN_ACTION:
            after = int(lib.aeron_exclusive_publication_position(ptr))
            if after == position + space:
                return after
            logger.debug("append_padding at %d: the term rotated without padding (%d), retry", position, after)
        elif result > 0:  # cannot happen: the message framed longer than the space left; never leave it unsaid
            raise NativeAeronError(
                f"append_padding at position {position}: the {message_length}-byte message offered to pad "
                f"{space} bytes was appended (new position {result})",
                -1,
            )
        return result

    def revoke(self) -> None:
        """Revoke and close: subscribers see the stream end immediately, without draining; idempotent."""
        self._n.close(revoke=True)
