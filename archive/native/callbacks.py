"""The cffi callback trampolines: the only Python code the Aeron C client calls, and the state they deliver into.

Why they look like this:

* Callbacks are created once per process (module level) and find their Python state through a `clientd` handle
  (`ffi.new_handle`) owned by the native-side state object; nothing is allocated per poll except the memoryview
  given to the handler.
* Exceptions never cross into C. A poll handler's exception is parked in its `PollState` and re-raised on the
  polling thread once the C call returns (the fragment trampoline also answers ABORT, so the message is not
  consumed); anything else that escapes is logged.
* Image availability, close-complete and error callbacks run on the C client conductor thread. They mark the
  thread while they run (`on_conductor_thread()`), because `aeron_close` joins that thread and so must never be
  called on it. The mark lasts for the callback only: close-complete notifications can also run synchronously on
  the thread that asked for the close.
* The trampolines reach the subscription and client state through the small protocols below rather than their
  classes, so this module depends on nothing but `ffi` and every wrapper module can import it.
"""

from __future__ import annotations

import enum
import logging
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .ffi import ACTION_ABORT, ACTION_BREAK, ACTION_COMMIT, ACTION_CONTINUE, ffi, get_lib

__all__ = [
    "AVAILABLE_IMAGE_CB",
    "BLOCK_CB",
    "ERROR_CB",
    "FOREACH_COUNTER_CB",
    "FRAGMENT_CB",
    "RESERVED_VALUE_CB",
    "SUBSCRIPTION_CLOSED_CB",
    "UNAVAILABLE_IMAGE_CB",
    "BlockHandler",
    "ControlledAction",
    "FragmentHandler",
    "HeaderValues",
    "PollState",
    "cstr",
    "on_conductor_thread",
]

logger = logging.getLogger(__name__)

# aeron_header_values_t under pack(4), 44 bytes, read as HeaderValues' fields up to position_bits_to_shift (in that
# order; the version byte is skipped).
_HEADER_FIELDS = struct.Struct("<ixBhiiiiqiQ")
_HeaderFields = tuple[int, int, int, int, int, int, int, int, int, int]


class ControlledAction(enum.IntEnum):
    """What a fragment handler may return to steer the poll (None means CONTINUE), as in Aeron's controlled poll."""

    ABORT = ACTION_ABORT
    BREAK = ACTION_BREAK
    COMMIT = ACTION_COMMIT
    CONTINUE = ACTION_CONTINUE


@dataclass(frozen=True, slots=True)
class HeaderValues:
    """Header of a (reassembled) message.

    For a message reassembled from several fragments the frame fields are those of the *first* fragment, except
    `frame_length` (header length + whole message length) and `flags` (BEGIN|END), as Aeron's fragment assembler
    produces them. `position` is the stream position just after the message's last frame (aeron_header_position);
    `start_position` is the position of its first frame.
    """

    frame_length: int
    flags: int
    type: int
    term_offset: int
    session_id: int
    stream_id: int
    term_id: int
    reserved_value: int
    initial_term_id: int
    position_bits_to_shift: int
    position: int
    start_position: int


BlockHandler = Callable[[memoryview, int, int], object]
FragmentHandler = Callable[[memoryview, HeaderValues], "ControlledAction | int | None"]


def _compute_position(term_id: int, term_offset: int, bits: int, initial_term_id: int) -> int:
    """Aeron's compute_position: the term count is an int32 difference (wraps), widened before the shift."""
    term_count = ((term_id - initial_term_id + 0x80000000) & 0xFFFFFFFF) - 0x80000000
    return (term_count << bits) + term_offset


def cstr(ptr: Any) -> str:
    """A C string as text ("" for NULL); undecodable bytes are replaced rather than raised on."""
    return "" if ptr == ffi.NULL else str(ffi.string(ptr).decode("utf-8", "replace"))


class PollState:
    """Per-poller state shared with the C callbacks through a handle; lives as long as the poller."""

    __slots__ = ("__weakref__", "error", "handle", "handler", "values", "values_buffer", "with_header")

    def __init__(self) -> None:
        self.handler: Any = None
        self.with_header = True  # False: fragment handlers get None for the header (nothing read for it)
        self.error: BaseException | None = None
        self.values = ffi.new("aeron_header_values_t *")
        self.values_buffer = ffi.buffer(self.values)
        self.handle = ffi.new_handle(self)


class ImageAvailabilityListener(Protocol):
    """What the image callbacks need from the subscription state behind their clientd handle."""

    def on_available_image(self, subscription_ptr: Any, image_ptr: Any) -> None: ...

    def on_unavailable_image(self, subscription_ptr: Any, image_ptr: Any) -> None: ...


class CloseCompleteListener(Protocol):
    """State kept alive until the conductor confirms an asynchronous close."""

    def on_close_complete(self) -> None: ...


class ErrorListener(Protocol):
    """The client state that receives the C client's asynchronous errors."""

    def on_error(self, errcode: int, message: str) -> None: ...


# ---------------------------------------------------------------------------------------------------------------------
# Poll trampolines: run on the polling thread, inside the C poll call.
# ---------------------------------------------------------------------------------------------------------------------


def _block_trampoline(clientd: Any, buffer: Any, length: int, session_id: int, term_id: int) -> None:
    state: PollState = ffi.from_handle(clientd)
    if state.error is not None:
        return
    view = memoryview(ffi.buffer(buffer, length)).toreadonly()
    try:
        state.handler(view, session_id, term_id)
    except BaseException as exc:  # re-raised on the polling thread once the C call returns
        state.error = exc
    finally:
        try:  # noqa: SIM105 - not contextlib.suppress: this runs once per block
            view.release()
        except BufferError:  # the handler exported it (e.g. numpy.frombuffer); it only lives for the callback anyway
            pass


def _fragment_trampoline(clientd: Any, buffer: Any, length: int, header: Any) -> int:
    state: PollState = ffi.from_handle(clientd)
    if state.error is not None:
        return ACTION_ABORT
    values: HeaderValues | None = None
    if state.with_header:
        lib = get_lib()
        lib.aeron_header_values(header, state.values)
        fields: _HeaderFields = _HEADER_FIELDS.unpack_from(state.values_buffer)
        _, _, _, term_offset, _, _, term_id, _, initial_term_id, bits = fields
        start_position = _compute_position(term_id, term_offset, bits, initial_term_id)
        values = HeaderValues(*fields, lib.aeron_header_position(header), start_position)
    view = memoryview(ffi.buffer(buffer, length)).toreadonly()
    try:
        action = state.handler(view, values)
    except BaseException as exc:  # re-raised on the polling thread once the C call returns
        state.error = exc
        return ACTION_ABORT
    finally:
        try:  # noqa: SIM105 - as above, once per message
            view.release()
        except BufferError:
            pass
    return ACTION_CONTINUE if action is None else int(action)


def _reserved_value_trampoline(clientd: Any, buffer: Any, frame_length: int) -> int:
    return int(ffi.cast("int64_t *", clientd)[0])


# ---------------------------------------------------------------------------------------------------------------------
# Conductor-thread trampolines.
# ---------------------------------------------------------------------------------------------------------------------

# Marks threads that are C client conductor threads (set on entry to their callbacks): aeron_close joins that thread,
# so a client must never be closed on it.
_conductor_thread = threading.local()


def on_conductor_thread() -> bool:
    """True while the calling thread runs a C client conductor callback (where aeron_close would join itself)."""
    return bool(getattr(_conductor_thread, "active", False))


class _InConductorCallback:
    """Marks the current thread as running a C client callback for the callback's duration only.

    Close-complete notifications can also run synchronously on the thread that asked for the close, so the mark
    must not outlive the callback.
    """

    def __enter__(self) -> None:
        self.previous = getattr(_conductor_thread, "active", False)
        _conductor_thread.active = True

    def __exit__(self, *exc: object) -> None:
        _conductor_thread.active = self.previous


def _on_available_image_trampoline(clientd: Any, subscription: Any, image: Any) -> None:
    with _InConductorCallback():
        try:
            native: ImageAvailabilityListener = ffi.from_handle(clientd)
            native.on_available_image(subscription, image)
        except Exception:
            logger.exception("on_available_image callback failed")


def _on_unavailable_image_trampoline(clientd: Any, subscription: Any, image: Any) -> None:
    with _InConductorCallback():
        try:
            native: ImageAvailabilityListener = ffi.from_handle(clientd)
            native.on_unavailable_image(subscription, image)
        except Exception:
            logger.exception("on_unavailable_image callback failed")


def _on_subscription_closed_trampoline(clientd: Any) -> None:
    with _InConductorCallback():
        native: CloseCompleteListener = ffi.from_handle(clientd)
        native.on_close_complete()


def _on_error_trampoline(clientd: Any, errcode: int, message: Any) -> None:
    with _InConductorCallback():
        native: ErrorListener = ffi.from_handle(clientd)
        native.on_error(errcode, cstr(message))


def _foreach_counter_trampoline(
    value: int,
    counter_id: int,
    type_id: int,
    key: Any,
    key_length: int,
    label: Any,
    label_length: int,
    clientd: Any,
) -> None:
    sink: list[tuple[int, int, int, bytes, str]] = ffi.from_handle(clientd)
    sink.append(
        (
            counter_id,
            type_id,
            value,
            bytes(ffi.buffer(key, key_length)),
            bytes(ffi.buffer(label, label_length)).decode("utf-8", "replace"),
        )
    )


def _log_callback_error(exc_type: Any, exc: Any, tb: Any) -> None:
    logger.error("exception escaped an Aeron callback", exc_info=(exc_type, exc, tb))


BLOCK_CB: Any = ffi.callback("aeron_block_handler_t", _block_trampoline, onerror=_log_callback_error)
FRAGMENT_CB: Any = ffi.callback(
    "aeron_controlled_fragment_handler_t", _fragment_trampoline, error=ACTION_ABORT, onerror=_log_callback_error
)
RESERVED_VALUE_CB: Any = ffi.callback(
    "aeron_reserved_value_supplier_t", _reserved_value_trampoline, error=0, onerror=_log_callback_error
)
AVAILABLE_IMAGE_CB: Any = ffi.callback("aeron_on_available_image_t", _on_available_image_trampoline)
UNAVAILABLE_IMAGE_CB: Any = ffi.callback("aeron_on_unavailable_image_t", _on_unavailable_image_trampoline)
SUBSCRIPTION_CLOSED_CB: Any = ffi.callback(
    "aeron_notification_t", _on_subscription_closed_trampoline, onerror=_log_callback_error
)
ERROR_CB: Any = ffi.callback("aeron_error_handler_t", _on_error_trampoline, onerror=_log_callback_error)
FOREACH_COUNTER_CB: Any = ffi.callback(
    "aeron_counters_reader_foreach_counter_func_t", _foreach_counter_trampoline, onerror=_log_callback_error
)
