"""Thin, lifetime-safe wrappers over the Aeron C client: client, subscriptions, images, publications, counters.

Design points (the why behind the code):

* Hot paths move blocks, not messages. `Image.block_poll` / `Subscription.block_poll` hand the handler one zero-copy
  `memoryview` per block, and `ExclusivePublication.offer_block` takes any contiguous bytes-like object without
  copying. cffi releases the GIL around every C call, so block copies happen off the GIL.
* cffi callbacks are created once per process (module level) and find their Python state through a `clientd`
  handle (`ffi.new_handle`) owned by the native-side state object; nothing is allocated per poll except the
  memoryview given to the handler.
* Every wrapper keeps its C pointer in a small `_*Native` object guarded by a lock. Closing takes that lock, so a
  close on one thread waits for an in-flight poll/offer on another and can never free memory under it; a close
  requested from inside a poll handler (same thread) is deferred until the poll returns.
* Image lifetime. Each `Image` owns one reference on the C image (retained in the availability callback, or by
  `aeron_subscription_image_at_index` / `_by_session_id`). The C client keeps the image and its mapped log buffer
  alive while the reference count is positive, even after the image goes unavailable, so a recorder can keep
  polling an `Image` until it reports closed / end of stream. The reference is released by `Image.close()`, by
  closing the owning subscription, or when the `Image` object is garbage collected. Release uses the unconditional
  `aeron_image_release` (the subscription-scoped release is a no-op once the image has left the image list, which
  would leak the log buffer mapping of every image that ever went unavailable).
* Image availability callbacks run on the C client conductor thread: they retain the image and call the user's
  callback, which should only hand the `Image` over to another thread.
"""

from __future__ import annotations

import enum
import logging
import re
import struct
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .ffi import (
    ACTION_ABORT,
    ACTION_CONTINUE,
    ADMIN_ACTION,
    BACK_PRESSURED,
    COUNTER_MAX_KEY_LENGTH,
    COUNTER_MAX_LABEL_LENGTH,
    COUNTER_RECORD_ALLOCATED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    PUBLICATION_CLOSED,
    PUBLICATION_ERROR,
    NativeAeronError,
    ffi,
    get_lib,
    last_error,
)

__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "PUBLICATION_CLOSED",
    "PUBLICATION_ERROR",
    "AeronClient",
    "BlockHandler",
    "ControlledAction",
    "Counter",
    "CounterInfo",
    "CountersReader",
    "ExclusivePublication",
    "FragmentHandler",
    "HeaderValues",
    "Image",
    "ImageHandler",
    "Publication",
    "Subscription",
]

logger = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.001
_DATA_HEADER_LENGTH = 32
_ADD_TIMEOUT_MARGIN_S = 2.0
_HEADER_VALUES = struct.Struct("<ibBhiiiiqiQ")  # aeron_header_values_t under pack(4): 44 bytes
_WILDCARD_PORT = re.compile(r"endpoint=[^|]*:0(?:\||$)")


class _AddTimedOut(NativeAeronError):
    """An async add got no answer in time; the C conductor may still complete the registration later."""


class ControlledAction(enum.IntEnum):
    """What a fragment handler may return to steer the poll (None means CONTINUE), as in Aeron's controlled poll."""

    ABORT = 1
    BREAK = 2
    COMMIT = 3
    CONTINUE = 4


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


@dataclass(frozen=True, slots=True)
class CounterInfo:
    """One allocated counter as seen through a CountersReader; `key` is the full 112-byte key area."""

    counter_id: int
    type_id: int
    registration_id: int
    value: int
    key: bytes
    label: str


BlockHandler = Callable[[memoryview, int, int], object]
FragmentHandler = Callable[[memoryview, HeaderValues], "ControlledAction | int | None"]
ImageHandler = Callable[["Image"], object]


def _compute_position(term_id: int, term_offset: int, bits: int, initial_term_id: int) -> int:
    """Aeron's compute_position: the term count is an int32 difference (wraps), widened before the shift."""
    term_count = ((term_id - initial_term_id + 0x80000000) & 0xFFFFFFFF) - 0x80000000
    return (term_count << bits) + term_offset


def _cstr(ptr: Any) -> str:
    return "" if ptr == ffi.NULL else ffi.string(ptr).decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------------------------------
# Module-level cffi callbacks. Created once; they locate their Python state through clientd handles.
# ---------------------------------------------------------------------------------------------------------------------


class _PollState:
    """Per-poller state shared with the C callbacks through a handle; lives as long as the poller."""

    __slots__ = ("__weakref__", "error", "handle", "handler", "values", "values_buffer")

    def __init__(self) -> None:
        self.handler: Any = None
        self.error: BaseException | None = None
        self.values = ffi.new("aeron_header_values_t *")
        self.values_buffer = ffi.buffer(self.values)
        self.handle = ffi.new_handle(self)


def _block_trampoline(clientd: Any, buffer: Any, length: int, session_id: int, term_id: int) -> None:
    state: _PollState = ffi.from_handle(clientd)
    if state.error is not None:
        return
    view = memoryview(ffi.buffer(buffer, length)).toreadonly()
    try:
        state.handler(view, session_id, term_id)
    except BaseException as exc:  # re-raised on the polling thread once the C call returns
        state.error = exc
    finally:
        try:  # not contextlib.suppress: this runs once per block
            view.release()
        except BufferError:  # the handler exported it (e.g. numpy.frombuffer); it only lives for the callback anyway
            pass


def _fragment_trampoline(clientd: Any, buffer: Any, length: int, header: Any) -> int:
    state: _PollState = ffi.from_handle(clientd)
    if state.error is not None:
        return ACTION_ABORT
    lib = get_lib()
    lib.aeron_header_values(header, state.values)
    (frame_length, _version, flags, type_, term_offset, session_id, stream_id, term_id, reserved_value,
     initial_term_id, bits) = _HEADER_VALUES.unpack_from(state.values_buffer)
    values = HeaderValues(
        frame_length, flags, type_, term_offset, session_id, stream_id, term_id, reserved_value, initial_term_id,
        bits, lib.aeron_header_position(header), _compute_position(term_id, term_offset, bits, initial_term_id),
    )
    view = memoryview(ffi.buffer(buffer, length)).toreadonly()
    try:
        action = state.handler(view, values)
    except BaseException as exc:
        state.error = exc
        return ACTION_ABORT
    finally:
        try:
            view.release()
        except BufferError:
            pass
    return ACTION_CONTINUE if action is None else int(action)


def _reserved_value_trampoline(clientd: Any, buffer: Any, frame_length: int) -> int:
    return int(ffi.cast("int64_t *", clientd)[0])


# Marks threads that are C client conductor threads (set on entry to their callbacks): aeron_close joins that thread,
# so a client must never be closed on it.
_conductor_thread = threading.local()


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
            native: _SubscriptionNative = ffi.from_handle(clientd)
            native.on_available_image(subscription, image)
        except Exception:
            logger.exception("on_available_image callback failed")


def _on_unavailable_image_trampoline(clientd: Any, subscription: Any, image: Any) -> None:
    with _InConductorCallback():
        try:
            native: _SubscriptionNative = ffi.from_handle(clientd)
            native.on_unavailable_image(image)
        except Exception:
            logger.exception("on_unavailable_image callback failed")


def _on_subscription_closed_trampoline(clientd: Any) -> None:
    with _InConductorCallback():
        native: _SubscriptionNative = ffi.from_handle(clientd)
        native.client.closing.pop(id(native), None)


def _on_error_trampoline(clientd: Any, errcode: int, message: Any) -> None:
    with _InConductorCallback():
        native: _ClientNative = ffi.from_handle(clientd)
        text = _cstr(message)
        native.last_error = (errcode, text)
        logger.error("Aeron client %r error (errcode=%d): %s", native.client_name, errcode, text)


def _foreach_counter_trampoline(
    value: int, counter_id: int, type_id: int, key: Any, key_length: int, label: Any, label_length: int,
    clientd: Any,
) -> None:
    sink: list[tuple[int, int, int, bytes, str]] = ffi.from_handle(clientd)
    sink.append((
        counter_id, type_id, value, bytes(ffi.buffer(key, key_length)),
        bytes(ffi.buffer(label, label_length)).decode("utf-8", "replace"),
    ))


def _log_callback_error(exc_type: Any, exc: Any, tb: Any) -> None:
    logger.error("exception escaped an Aeron callback", exc_info=(exc_type, exc, tb))


_BLOCK_CB = ffi.callback("aeron_block_handler_t", _block_trampoline, onerror=_log_callback_error)
_FRAGMENT_CB = ffi.callback(
    "aeron_controlled_fragment_handler_t", _fragment_trampoline, error=ACTION_ABORT, onerror=_log_callback_error
)
_RESERVED_VALUE_CB = ffi.callback(
    "aeron_reserved_value_supplier_t", _reserved_value_trampoline, error=0, onerror=_log_callback_error
)
_AVAILABLE_IMAGE_CB = ffi.callback("aeron_on_available_image_t", _on_available_image_trampoline)
_UNAVAILABLE_IMAGE_CB = ffi.callback("aeron_on_unavailable_image_t", _on_unavailable_image_trampoline)
_SUBSCRIPTION_CLOSED_CB = ffi.callback(
    "aeron_notification_t", _on_subscription_closed_trampoline, onerror=_log_callback_error
)
_ERROR_CB = ffi.callback("aeron_error_handler_t", _on_error_trampoline, onerror=_log_callback_error)
_FOREACH_COUNTER_CB = ffi.callback(
    "aeron_counters_reader_foreach_counter_func_t", _foreach_counter_trampoline, onerror=_log_callback_error
)


# ---------------------------------------------------------------------------------------------------------------------
# Native state holders. They own the C pointers; wrappers only delegate, so finalizers never reference wrappers.
# ---------------------------------------------------------------------------------------------------------------------


class _ClientNative:
    """Owns aeron_context_t / aeron_t and the natives created through them; `close()` is idempotent."""

    def __init__(self, client_name: str) -> None:
        self.client_name = client_name
        self.lock = threading.RLock()
        self.context: Any = ffi.NULL
        self.aeron: Any = ffi.NULL
        self.reader: Any = ffi.NULL
        self.closed = False
        self.children: dict[int, Any] = {}  # id(native) -> native with close()
        self.closing: dict[int, _SubscriptionNative] = {}  # kept alive until the conductor confirms the close
        self.last_error: tuple[int, str] | None = None
        self.handle = ffi.new_handle(self)

    def check_open(self) -> None:
        if self.closed:
            raise NativeAeronError(f"Aeron client {self.client_name!r} is closed")

    def close(self) -> None:
        if getattr(_conductor_thread, "active", False):
            # Called from an image callback or a GC finalizer on a conductor thread: aeron_close would join the
            # calling thread. Hand the close to a short-lived thread instead.
            logger.warning("Aeron client %r closed from a conductor thread; closing asynchronously", self.client_name)
            threading.Thread(target=self.close, name=f"aeron-close-{self.client_name}", daemon=True).start()
            return
        with self.lock:
            if self.closed:
                return
            self.closed = True
            children = list(self.children.values())
        # Children are closed outside the lock: their close waits for in-flight polls whose handlers may need it.
        for child in children:
            try:
                child.close()
            except Exception:
                logger.exception("closing %r failed", child)
        lib = get_lib()
        if self.aeron != ffi.NULL:
            # Joins the conductor thread (GIL released by cffi), after which no callback can run.
            if lib.aeron_close(self.aeron) < 0:
                logger.error("%s", last_error(f"aeron_close({self.client_name!r})"))
            self.aeron = ffi.NULL
        if self.context != ffi.NULL:
            lib.aeron_context_close(self.context)
            self.context = ffi.NULL
        self.reader = ffi.NULL
        self.children.clear()
        self.closing.clear()


class _ImageNative:
    """Owns one reference on an aeron_image_t; released exactly once by close()."""

    def __init__(self, ptr: Any, subscription: _SubscriptionNative) -> None:
        lib = get_lib()
        self.ptr = ptr
        self.subscription = subscription
        self.lock = threading.Lock()
        self.polling_thread: int | None = None
        self.close_pending = False
        self.poll_state: _PollState | None = None
        self.assembler: Any = ffi.NULL
        self.wrapper: weakref.ref[Image] | None = None
        constants = ffi.new("aeron_image_constants_t *")
        if lib.aeron_image_constants(ptr, constants) < 0:
            raise last_error("aeron_image_constants")
        self.correlation_id = int(constants.correlation_id)
        self.session_id = int(constants.session_id)
        self.join_position = int(constants.join_position)
        self.initial_term_id = int(constants.initial_term_id)
        self.term_buffer_length = int(constants.term_buffer_length)
        self.mtu_length = int(constants.mtu_length)
        self.position_bits_to_shift = int(constants.position_bits_to_shift)
        self.subscriber_position_id = int(constants.subscriber_position_id)
        self.source_identity = _cstr(constants.source_identity)
        self.final_position = self.join_position
        self.final_eos = False

    def close(self) -> None:
        if self.polling_thread == threading.get_ident():
            self.close_pending = True  # asked from inside a poll handler: finish once the C poll has returned
            return
        with self.lock:
            self.close_locked()

    def close_locked(self) -> None:
        if self.ptr is None:
            return
        lib = get_lib()
        ptr, self.ptr = self.ptr, None
        self.final_position = int(lib.aeron_image_position(ptr))
        self.final_eos = bool(lib.aeron_image_is_end_of_stream(ptr))
        if self.assembler != ffi.NULL:
            lib.aeron_image_controlled_fragment_assembler_delete(self.assembler)
            self.assembler = ffi.NULL
        self.poll_state = None
        self.subscription.images.pop(id(self), None)
        lib.aeron_image_release(ptr)

    def ensure_poll_state(self) -> _PollState:
        state = self.poll_state
        if state is None:
            state = self.poll_state = _PollState()
        return state


class _SubscriptionNative:
    """Owns aeron_subscription_t, its fragment assembler and the images retained through it."""

    def __init__(
        self,
        client: _ClientNative,
        channel: str,
        stream_id: int,
        on_available_image: ImageHandler | None,
        on_unavailable_image: ImageHandler | None,
    ) -> None:
        self.client = client
        self.channel = channel
        self.stream_id = stream_id
        self.user_on_available = on_available_image
        self.user_on_unavailable = on_unavailable_image
        self.ptr: Any = None
        self.registration_id = -1
        self.lock = threading.Lock()
        self.images_lock = threading.Lock()
        self.images: dict[int, _ImageNative] = {}
        self.closed = False
        self.polling_thread: int | None = None
        self.close_pending = False
        self.poll_state = _PollState()
        self.assembler: Any = ffi.NULL
        self.handle = ffi.new_handle(self)

    # Conductor-thread callbacks ------------------------------------------------------------------------------------

    def on_available_image(self, subscription_ptr: Any, image_ptr: Any) -> None:
        if self.user_on_available is None:
            return
        lib = get_lib()
        with self.images_lock:
            if self.closed:
                return
            # The conductor adds the image to the subscription's list before calling us, so retain succeeds.
            if lib.aeron_subscription_image_retain(subscription_ptr, image_ptr) < 0:
                raise last_error("aeron_subscription_image_retain")
            image = self._wrap_locked(image_ptr)
        self.user_on_available(image)

    def on_unavailable_image(self, image_ptr: Any) -> None:
        if self.user_on_unavailable is None:
            return
        image: Image | None = None
        with self.images_lock:
            for native in self.images.values():
                wrapper = native.wrapper() if native.wrapper is not None else None
                if wrapper is not None and native.ptr is not None and native.ptr == image_ptr:
                    image = wrapper
                    break
            if image is None:
                if self.closed:
                    return
                # Already out of the image list (subscription-scoped retain would be a no-op) but still referenced
                # by the subscription until the conductor's linger check: an unconditional increment is safe here.
                get_lib().aeron_image_incr_refcnt(image_ptr)
                image = self._wrap_locked(image_ptr)
        self.user_on_unavailable(image)

    def _wrap_locked(self, image_ptr: Any) -> Image:
        try:
            native = _ImageNative(image_ptr, self)
        except BaseException:
            get_lib().aeron_image_release(image_ptr)
            raise
        self.images[id(native)] = native
        return Image._create(native)

    def adopt_retained(self, image_ptr: Any) -> Image | None:
        """Wrap an image pointer that the C API already retained for us (image_at_index / image_by_session_id)."""
        if image_ptr == ffi.NULL:
            return None
        with self.images_lock:
            if self.closed:
                get_lib().aeron_image_release(image_ptr)
                return None
            return self._wrap_locked(image_ptr)

    # Close ---------------------------------------------------------------------------------------------------------

    def close(self) -> None:
        if self.polling_thread == threading.get_ident():
            self.close_pending = True
            return
        with self.lock:
            self.close_locked()
        self.close_images()

    def close_locked(self) -> None:
        lib = get_lib()
        with self.images_lock:
            if self.closed:
                return
            self.closed = True
        ptr, self.ptr = self.ptr, None
        if self.assembler != ffi.NULL:
            lib.aeron_controlled_fragment_assembler_delete(self.assembler)
            self.assembler = ffi.NULL
        self.client.children.pop(id(self), None)
        if ptr is not None and self.client.aeron != ffi.NULL:
            # Callbacks may still fire until the conductor processes the close: keep our handle alive until then.
            self.client.closing[id(self)] = self
            if lib.aeron_subscription_close(ptr, _SUBSCRIPTION_CLOSED_CB, self.handle) < 0:
                logger.error("%s", last_error(f"aeron_subscription_close({self.channel!r}, {self.stream_id})"))

    def close_images(self) -> None:
        with self.images_lock:
            images = list(self.images.values())
        for image in images:
            image.close()


class _PublicationNative:
    """Owns an aeron_publication_t or aeron_exclusive_publication_t and its immutable constants."""

    def __init__(self, client: _ClientNative, exclusive: bool, ptr: Any, channel: str, stream_id: int) -> None:
        lib = get_lib()
        self.client = client
        self.exclusive = exclusive
        self.ptr: Any = ptr
        self.lock = threading.Lock()
        self.reserved_value = ffi.new("int64_t *")
        constants = ffi.new("aeron_publication_constants_t *")
        rc = (lib.aeron_exclusive_publication_constants if exclusive else lib.aeron_publication_constants)(
            ptr, constants
        )
        if rc < 0:
            raise last_error(f"publication constants({channel!r}, {stream_id})")
        self.channel = _cstr(constants.channel)
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

    def close(self, revoke: bool = False) -> None:
        lib = get_lib()
        with self.lock:
            ptr, self.ptr = self.ptr, None
        self.client.children.pop(id(self), None)
        if ptr is None or self.client.aeron == ffi.NULL:
            return
        if self.exclusive:
            close_fn = lib.aeron_exclusive_publication_revoke if revoke else lib.aeron_exclusive_publication_close
        else:
            close_fn = lib.aeron_publication_close
        if close_fn(ptr, ffi.NULL, ffi.NULL) < 0:
            logger.error("%s", last_error(f"closing publication({self.channel!r}, {self.stream_id})"))


class _CounterNative:
    """Owns an aeron_counter_t; its value address stays mapped until the client closes."""

    def __init__(self, client: _ClientNative, ptr: Any) -> None:
        lib = get_lib()
        self.client = client
        self.ptr: Any = ptr
        self.lock = threading.Lock()
        self.addr = lib.aeron_counter_addr(ptr)
        constants = ffi.new("aeron_counter_constants_t *")
        if lib.aeron_counter_constants(ptr, constants) < 0:
            raise last_error("aeron_counter_constants")
        self.registration_id = int(constants.registration_id)
        self.counter_id = int(constants.counter_id)

    def close(self) -> None:
        with self.lock:
            ptr, self.ptr = self.ptr, None
            self.addr = None
        self.client.children.pop(id(self), None)
        if ptr is not None and get_lib().aeron_counter_close(ptr, ffi.NULL, ffi.NULL) < 0:
            logger.error("%s", last_error(f"aeron_counter_close(counter_id={self.counter_id})"))


# ---------------------------------------------------------------------------------------------------------------------
# Public wrappers.
# ---------------------------------------------------------------------------------------------------------------------


IDLE_SLEEP_ENV = "AERON_CLIENT_IDLE_SLEEP_DURATION"
DEFAULT_IDLE_SLEEP_NS = 1_000_000
_context_env_lock = threading.Lock()


class AeronClient:
    """An Aeron C client (aeron_t) connected to a media driver; owns everything added through it.

    `close()` closes all subscriptions, images, publications and counters created through this client and then the
    client itself; it is idempotent and also runs at garbage collection / interpreter exit. Adds are synchronous
    and bounded by `driver_timeout_ms`. `idle_sleep_duration_ns` sets the client conductor's idle sleep (lower
    means faster adds and image notifications at the cost of wake-ups); it defaults to 1 ms rather than the C
    client's 16 ms, because every synchronous add waits for the conductor at least twice. The C client only reads
    it from `AERON_CLIENT_IDLE_SLEEP_DURATION` while the context is created, so it is set there (under a lock,
    restored afterwards) unless the user set that variable.
    """

    def __init__(
        self,
        aeron_dir: str,
        client_name: str = "aeron-archive-py",
        driver_timeout_ms: int = 10_000,
        *,
        idle_sleep_duration_ns: int | None = DEFAULT_IDLE_SLEEP_NS,
    ) -> None:
        lib = get_lib()
        self._aeron_dir = str(aeron_dir)
        self._client_name = client_name
        self._driver_timeout_ms = int(driver_timeout_ms)
        native = self._n = _ClientNative(client_name)
        self._finalizer = weakref.finalize(self, native.close)
        context = ffi.new("aeron_context_t **")
        with _context_env_lock:
            override = idle_sleep_duration_ns is not None and IDLE_SLEEP_ENV not in os.environ
            if override:
                os.environ[IDLE_SLEEP_ENV] = f"{int(idle_sleep_duration_ns)}ns"
            try:
                initialised = lib.aeron_context_init(context)
            finally:
                if override:
                    del os.environ[IDLE_SLEEP_ENV]
        if initialised < 0:
            raise last_error("aeron_context_init")
        native.context = context[0]
        try:
            ctx = native.context
            if lib.aeron_context_set_dir(ctx, self._aeron_dir.encode()) < 0:
                raise last_error(f"aeron_context_set_dir({self._aeron_dir!r})")
            if lib.aeron_context_set_client_name(ctx, client_name.encode()) < 0:
                raise last_error(f"aeron_context_set_client_name({client_name!r})")
            if lib.aeron_context_set_driver_timeout_ms(ctx, self._driver_timeout_ms) < 0:
                raise last_error("aeron_context_set_driver_timeout_ms")
            if lib.aeron_context_set_error_handler(ctx, _ERROR_CB, native.handle) < 0:
                raise last_error("aeron_context_set_error_handler")
            aeron = ffi.new("aeron_t **")
            if lib.aeron_init(aeron, ctx) < 0:
                raise last_error(f"aeron_init(aeron_dir={self._aeron_dir!r})")
            native.aeron = aeron[0]
            if lib.aeron_start(native.aeron) < 0:
                raise last_error(f"aeron_start(aeron_dir={self._aeron_dir!r})")
            native.reader = lib.aeron_counters_reader(native.aeron)
        except BaseException:
            self.close()
            raise
        self._client_id = int(lib.aeron_client_id(native.aeron))
        self._counters_reader = CountersReader(native)
        logger.debug("Aeron client %r connected to %s (client id %d)", client_name, self._aeron_dir, self._client_id)

    def __enter__(self) -> AeronClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._n.closed else f"client_id={self._client_id}"
        return f"AeronClient({self._client_name!r}, {self._aeron_dir!r}, {state})"

    def close(self) -> None:
        """Close everything created through this client, then the client; safe to call more than once."""
        self._finalizer()

    @property
    def aeron_dir(self) -> str:
        return self._aeron_dir

    @property
    def client_name(self) -> str:
        return self._client_name

    @property
    def driver_timeout_ms(self) -> int:
        return self._driver_timeout_ms

    @property
    def client_id(self) -> int:
        return self._client_id

    @property
    def is_closed(self) -> bool:
        """True once closed here, or when the C client closed itself (driver or client timeout)."""
        native = self._n
        with native.lock:
            return native.closed or bool(get_lib().aeron_is_closed(native.aeron))

    @property
    def counters_reader(self) -> CountersReader:
        return self._counters_reader

    def next_correlation_id(self) -> int:
        """A correlation id unique across all clients of the driver (shared counter in the CnC file)."""
        native = self._n
        with native.lock:
            native.check_open()
            value = int(get_lib().aeron_next_correlation_id(native.aeron))
        if value < 0:
            raise NativeAeronError("aeron_next_correlation_id failed")
        return value

    # Adds ------------------------------------------------------------------------------------------------------------

    def _await(self, what: str, poll: Callable[[Any, Any], int], out: Any, async_ptr: Any) -> Any:
        """Poll an async add until done; the conductor itself fails it after the driver timeout."""
        native = self._n
        deadline = time.monotonic() + self._driver_timeout_ms / 1000.0 + _ADD_TIMEOUT_MARGIN_S
        while True:
            with native.lock:
                native.check_open()
                rc = poll(out, async_ptr)
                if rc < 0:
                    raise last_error(what)
            if rc > 0:
                return out[0]
            if time.monotonic() > deadline:
                raise _AddTimedOut(f"{what}: no response from the media driver in {self._driver_timeout_ms} ms")
            time.sleep(_POLL_INTERVAL_S)

    def add_subscription(
        self,
        channel: str,
        stream_id: int,
        on_available_image: ImageHandler | None = None,
        on_unavailable_image: ImageHandler | None = None,
    ) -> Subscription:
        """Add a subscription and wait for the driver to confirm it.

        The image callbacks run on the C client's conductor thread: keep them short (queue the image). An Image
        passed to `on_available_image` holds a reference on the C image until it is closed or collected.
        """
        lib = get_lib()
        what = f"add_subscription(channel={channel!r}, stream_id={stream_id})"
        native = _SubscriptionNative(self._n, channel, stream_id, on_available_image, on_unavailable_image)
        async_ptr = ffi.new("aeron_async_add_subscription_t **")
        with self._n.lock:
            self._n.check_open()
            # Keep the callback handle alive from the moment the conductor may call back.
            self._n.closing[id(native)] = native
            rc = lib.aeron_async_add_subscription(
                async_ptr, self._n.aeron, channel.encode(), int(stream_id),
                _AVAILABLE_IMAGE_CB, native.handle, _UNAVAILABLE_IMAGE_CB, native.handle,
            )
            if rc < 0:
                self._n.closing.pop(id(native), None)
                raise last_error(what)
        out = ffi.new("aeron_subscription_t **")
        try:
            ptr = self._await(what, lib.aeron_async_add_subscription_poll, out, async_ptr[0])
        except BaseException as exc:
            with native.images_lock:
                native.closed = True
            if not isinstance(exc, _AddTimedOut):
                # The registration failed for good, so no callback can come; a late registration after a timeout
                # still could, so then the handle stays alive until the client closes.
                self._n.closing.pop(id(native), None)
            native.close_images()
            raise
        constants = ffi.new("aeron_subscription_constants_t *")
        lib.aeron_subscription_constants(ptr, constants)
        native.registration_id = int(constants.registration_id)
        with self._n.lock:
            native.ptr = ptr
            self._n.closing.pop(id(native), None)
            self._n.children[id(native)] = native
            if self._n.closed:
                native.close()
                raise NativeAeronError(f"{what}: client closed while adding")
        return Subscription(native)

    def add_exclusive_publication(self, channel: str, stream_id: int) -> ExclusivePublication:
        """Add an exclusive (single-writer) publication; supports offer_block / append_padding."""
        lib = get_lib()
        what = f"add_exclusive_publication(channel={channel!r}, stream_id={stream_id})"
        async_ptr = ffi.new("aeron_async_add_exclusive_publication_t **")
        with self._n.lock:
            self._n.check_open()
            if lib.aeron_async_add_exclusive_publication(async_ptr, self._n.aeron, channel.encode(), stream_id) < 0:
                raise last_error(what)
        out = ffi.new("aeron_exclusive_publication_t **")
        ptr = self._await(what, lib.aeron_async_add_exclusive_publication_poll, out, async_ptr[0])
        native = self._adopt(_PublicationNative, self._n, True, ptr, channel, stream_id)
        return ExclusivePublication(native)

    def add_publication(self, channel: str, stream_id: int) -> Publication:
        """Add a concurrent publication (shared by all adders of the same channel/stream in this client)."""
        lib = get_lib()
        what = f"add_publication(channel={channel!r}, stream_id={stream_id})"
        async_ptr = ffi.new("aeron_async_add_publication_t **")
        with self._n.lock:
            self._n.check_open()
            if lib.aeron_async_add_publication(async_ptr, self._n.aeron, channel.encode(), stream_id) < 0:
                raise last_error(what)
        out = ffi.new("aeron_publication_t **")
        ptr = self._await(what, lib.aeron_async_add_publication_poll, out, async_ptr[0])
        native = self._adopt(_PublicationNative, self._n, False, ptr, channel, stream_id)
        return Publication(native)

    def add_counter(self, type_id: int, key: bytes, label: str) -> Counter:
        """Allocate a counter in the driver's CnC file; visible to every client through its CountersReader."""
        lib = get_lib()
        key_bytes = bytes(key)
        label_bytes = label.encode("utf-8")
        if len(key_bytes) > COUNTER_MAX_KEY_LENGTH:
            raise ValueError(f"counter key is {len(key_bytes)} bytes, max {COUNTER_MAX_KEY_LENGTH}")
        if len(label_bytes) > COUNTER_MAX_LABEL_LENGTH:
            raise ValueError(f"counter label is {len(label_bytes)} bytes, max {COUNTER_MAX_LABEL_LENGTH}")
        what = f"add_counter(type_id={type_id}, label={label!r})"
        async_ptr = ffi.new("aeron_async_add_counter_t **")
        key_buffer = ffi.from_buffer("uint8_t[]", key_bytes) if key_bytes else ffi.NULL
        with self._n.lock:
            self._n.check_open()
            rc = lib.aeron_async_add_counter(
                async_ptr, self._n.aeron, int(type_id), key_buffer, len(key_bytes), label_bytes, len(label_bytes)
            )
            if rc < 0:
                raise last_error(what)
        out = ffi.new("aeron_counter_t **")
        ptr = self._await(what, lib.aeron_async_add_counter_poll, out, async_ptr[0])
        native = self._adopt(_CounterNative, self._n, ptr)
        return Counter(native)

    def _adopt(self, cls: Any, *args: Any) -> Any:
        native = cls(*args)
        with self._n.lock:
            self._n.children[id(native)] = native
            closed = self._n.closed
        if closed:
            native.close()
            raise NativeAeronError(f"Aeron client {self._client_name!r} closed while adding")
        return native


def _poll_guard_exit(native: Any, state: _PollState) -> BaseException | None:
    """Reset per-poll state; runs a close requested by the handler now that C no longer uses the pointer."""
    state.handler = None
    error, state.error = state.error, None
    native.polling_thread = None
    if native.close_pending:
        native.close_pending = False
        native.close_locked()
    return error


class Subscription:
    """An Aeron subscription. Poll from one thread at a time (Aeron subscriptions are single-consumer)."""

    __slots__ = ("__weakref__", "_n")

    def __init__(self, native: _SubscriptionNative) -> None:
        self._n = native

    def __repr__(self) -> str:
        return f"Subscription({self._n.channel!r}, stream_id={self._n.stream_id}, closed={self.is_closed})"

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def channel(self) -> str:
        return self._n.channel

    @property
    def stream_id(self) -> int:
        return self._n.stream_id

    @property
    def registration_id(self) -> int:
        return self._n.registration_id

    @property
    def is_closed(self) -> bool:
        return self._n.ptr is None

    @property
    def is_connected(self) -> bool:
        n = self._n
        with n.lock:
            return n.ptr is not None and bool(get_lib().aeron_subscription_is_connected(n.ptr))

    @property
    def image_count(self) -> int:
        n = self._n
        with n.lock:
            return 0 if n.ptr is None else int(get_lib().aeron_subscription_image_count(n.ptr))

    @property
    def channel_status(self) -> int:
        """1 ACTIVE, -1 ERRORED, 0 when no status indicator is allocated (e.g. IPC) or closed."""
        n = self._n
        with n.lock:
            return 0 if n.ptr is None else int(get_lib().aeron_subscription_channel_status(n.ptr))

    def try_resolve_channel_endpoint_port(self, timeout_s: float = 0.0) -> str | None:
        """The channel with a wildcard endpoint port (`endpoint=host:0`) replaced by the bound address:port.

        Channels without a wildcard port come back unchanged. Waits up to `timeout_s` for the driver to bind the
        port; returns None if it has not by then, or if the subscription is closed.
        """
        lib = get_lib()
        n = self._n
        buffer = ffi.new("char[]", 4096)
        deadline = time.monotonic() + timeout_s
        while True:
            with n.lock:
                if n.ptr is None:
                    return None
                length = lib.aeron_subscription_try_resolve_channel_endpoint_port(n.ptr, buffer, len(buffer))
            if 0 < length < len(buffer):
                uri = str(ffi.string(buffer, length).decode())
                if not _WILDCARD_PORT.search(uri):
                    return uri
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_INTERVAL_S)

    def images(self) -> list[Image]:
        """Snapshot of the current images; each returned Image holds its own reference until closed."""
        n = self._n
        lib = get_lib()
        result: list[Image] = []
        with n.lock:
            if n.ptr is None:
                return result
            for index in range(int(lib.aeron_subscription_image_count(n.ptr))):
                image = n.adopt_retained(lib.aeron_subscription_image_at_index(n.ptr, index))
                if image is not None:
                    result.append(image)
        return result

    def image_by_session_id(self, session_id: int) -> Image | None:
        n = self._n
        with n.lock:
            if n.ptr is None:
                return None
            return n.adopt_retained(get_lib().aeron_subscription_image_by_session_id(n.ptr, int(session_id)))

    def poll(self, handler: FragmentHandler, fragment_limit: int) -> int:
        """Deliver up to `fragment_limit` fragments as reassembled messages: `handler(data, header)`.

        `data` is only valid during the call. The handler may return a ControlledAction (None = CONTINUE). If it
        raises, that message is not consumed (ABORT), polling stops and the exception propagates from here.
        """
        lib = get_lib()
        n = self._n
        state = n.poll_state
        with n.lock:
            if n.ptr is None:
                return 0
            if n.assembler == ffi.NULL:
                out = ffi.new("aeron_controlled_fragment_assembler_t **")
                if lib.aeron_controlled_fragment_assembler_create(out, _FRAGMENT_CB, state.handle) < 0:
                    raise last_error("aeron_controlled_fragment_assembler_create")
                n.assembler = out[0]
            state.handler = handler
            n.polling_thread = threading.get_ident()
            try:
                rc = lib.aeron_subscription_controlled_poll(
                    n.ptr, lib.aeron_controlled_fragment_assembler_handler, n.assembler, fragment_limit
                )
                if rc < 0:
                    raise last_error(f"poll({n.channel!r}, {n.stream_id})")
            finally:
                error = _poll_guard_exit(n, state)
        if n.closed:
            n.close_images()  # the handler closed the subscription: its images go too, now that no lock is held
        if error is not None:
            raise error
        return int(rc)

    def block_poll(self, handler: BlockHandler, block_length_limit: int) -> int:
        """Deliver at most one block per image: `handler(block, session_id, term_id)`; returns bytes consumed.

        Blocks are whole frames from one term, zero-copy, valid only during the call. If the handler raises, the
        exception propagates once the C poll returns; the C API has already consumed the block, and later images
        in the same call are consumed without being delivered.
        """
        lib = get_lib()
        n = self._n
        state = n.poll_state
        with n.lock:
            if n.ptr is None:
                return 0
            state.handler = handler
            n.polling_thread = threading.get_ident()
            try:
                rc = lib.aeron_subscription_block_poll(n.ptr, _BLOCK_CB, state.handle, block_length_limit)
                if rc < 0:
                    raise last_error(f"block_poll({n.channel!r}, {n.stream_id})")
            finally:
                error = _poll_guard_exit(n, state)
        if n.closed:
            n.close_images()
        if error is not None:
            raise error
        return int(rc)

    def close(self) -> None:
        """Close the subscription and every Image obtained through it; idempotent."""
        self._n.close()


class Image:
    """One publisher session under a subscription, with its own reference on the C image.

    Stays valid after the publisher goes away: polls then return 0 and `is_closed` is True. Release the reference
    with `close()` (also done by closing the subscription, or when this object is garbage collected).
    """

    __slots__ = ("__weakref__", "_finalizer", "_n")

    _n: _ImageNative
    _finalizer: weakref.finalize[[], Image]

    @classmethod
    def _create(cls, native: _ImageNative) -> Image:
        image = cls.__new__(cls)
        image._n = native
        image._finalizer = weakref.finalize(image, native.close)
        native.wrapper = weakref.ref(image)
        return image

    def __init__(self) -> None:
        raise TypeError("Images come from Subscription.images(), image_by_session_id() or image callbacks")

    def __repr__(self) -> str:
        n = self._n
        return (f"Image(session_id={n.session_id}, correlation_id={n.correlation_id}, "
                f"source={n.source_identity!r}, closed={self.is_closed})")

    def __enter__(self) -> Image:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_id(self) -> int:
        return self._n.session_id

    @property
    def correlation_id(self) -> int:
        return self._n.correlation_id

    @property
    def join_position(self) -> int:
        return self._n.join_position

    @property
    def initial_term_id(self) -> int:
        return self._n.initial_term_id

    @property
    def term_buffer_length(self) -> int:
        return self._n.term_buffer_length

    @property
    def mtu_length(self) -> int:
        return self._n.mtu_length

    @property
    def position_bits_to_shift(self) -> int:
        return self._n.position_bits_to_shift

    @property
    def subscriber_position_id(self) -> int:
        return self._n.subscriber_position_id

    @property
    def source_identity(self) -> str:
        return self._n.source_identity

    @property
    def subscription_registration_id(self) -> int:
        return self._n.subscription.registration_id

    @property
    def position(self) -> int:
        """Consumed position; after close, the position reached when it was closed."""
        n = self._n
        with n.lock:
            return n.final_position if n.ptr is None else int(get_lib().aeron_image_position(n.ptr))

    @property
    def is_closed(self) -> bool:
        """True once the image went unavailable in the C client or this wrapper was closed."""
        n = self._n
        with n.lock:
            return n.ptr is None or bool(get_lib().aeron_image_is_closed(n.ptr))

    @property
    def is_end_of_stream(self) -> bool:
        n = self._n
        with n.lock:
            return n.final_eos if n.ptr is None else bool(get_lib().aeron_image_is_end_of_stream(n.ptr))

    @property
    def end_of_stream_position(self) -> int:
        """Position of the publisher's end of stream; 2**63 - 1 until the stream has ended."""
        n = self._n
        with n.lock:
            if n.ptr is None:
                return n.final_position if n.final_eos else (1 << 63) - 1
            return int(get_lib().aeron_image_end_of_stream_position(n.ptr))

    @property
    def active_transport_count(self) -> int:
        n = self._n
        with n.lock:
            return 0 if n.ptr is None else int(get_lib().aeron_image_active_transport_count(n.ptr))

    @property
    def is_publication_revoked(self) -> bool:
        n = self._n
        with n.lock:
            return n.ptr is not None and bool(get_lib().aeron_image_is_publication_revoked(n.ptr))

    def block_poll(self, handler: BlockHandler, block_length_limit: int) -> int:
        """Deliver the next block of whole frames: `handler(block, session_id, term_id)`; returns bytes consumed.

        A block never crosses a term boundary and a PAD frame is delivered alone. The memoryview is zero-copy over
        the log buffer and only valid during the call. If the handler raises, the exception propagates after the C
        poll returns and the block counts as consumed (the C API commits the position after the callback).
        """
        lib = get_lib()
        n = self._n
        with n.lock:
            if n.ptr is None:
                return 0
            state = n.poll_state or n.ensure_poll_state()
            state.handler = handler
            n.polling_thread = threading.get_ident()
            try:
                rc = lib.aeron_image_block_poll(n.ptr, _BLOCK_CB, state.handle, block_length_limit)
                if rc < 0:
                    raise last_error(f"image block_poll(session_id={n.session_id})")
            finally:
                error = _poll_guard_exit(n, state)
        if error is not None:
            raise error
        return int(rc)

    def poll(self, handler: FragmentHandler, fragment_limit: int) -> int:
        """Deliver up to `fragment_limit` fragments as reassembled messages; see Subscription.poll."""
        lib = get_lib()
        n = self._n
        with n.lock:
            if n.ptr is None:
                return 0
            state = n.poll_state or n.ensure_poll_state()
            if n.assembler == ffi.NULL:
                out = ffi.new("aeron_image_controlled_fragment_assembler_t **")
                if lib.aeron_image_controlled_fragment_assembler_create(out, _FRAGMENT_CB, state.handle) < 0:
                    raise last_error("aeron_image_controlled_fragment_assembler_create")
                n.assembler = out[0]
            state.handler = handler
            n.polling_thread = threading.get_ident()
            try:
                rc = lib.aeron_image_controlled_poll(
                    n.ptr, lib.aeron_image_controlled_fragment_assembler_handler, n.assembler, fragment_limit
                )
                if rc < 0:
                    raise last_error(f"image poll(session_id={n.session_id})")
            finally:
                error = _poll_guard_exit(n, state)
        if error is not None:
            raise error
        return int(rc)

    def close(self) -> None:
        """Release this wrapper's reference on the C image; idempotent, deferred if called from a poll handler."""
        self._n.close()


class _PublicationBase:
    __slots__ = ("__weakref__", "_n")

    def __init__(self, native: _PublicationNative) -> None:
        self._n = native

    def __repr__(self) -> str:
        n = self._n
        return (f"{type(self).__name__}({n.channel!r}, stream_id={n.stream_id}, session_id={n.session_id}, "
                f"closed={self.is_closed})")

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def channel(self) -> str:
        return self._n.channel

    @property
    def stream_id(self) -> int:
        return self._n.stream_id

    @property
    def session_id(self) -> int:
        return self._n.session_id

    @property
    def initial_term_id(self) -> int:
        return self._n.initial_term_id

    @property
    def term_buffer_length(self) -> int:
        return self._n.term_buffer_length

    @property
    def position_bits_to_shift(self) -> int:
        return self._n.position_bits_to_shift

    @property
    def max_payload_length(self) -> int:
        return self._n.max_payload_length

    @property
    def max_message_length(self) -> int:
        return self._n.max_message_length

    @property
    def max_possible_position(self) -> int:
        return self._n.max_possible_position

    @property
    def registration_id(self) -> int:
        return self._n.registration_id

    @property
    def original_registration_id(self) -> int:
        return self._n.original_registration_id

    @property
    def publication_limit_counter_id(self) -> int:
        return self._n.publication_limit_counter_id

    def _query(self, name: str, closed_value: int) -> int:
        """Call `aeron_[exclusive_]publication_<name>` under the lock, or return `closed_value` once closed."""
        n = self._n
        with n.lock:
            if n.ptr is None:
                return closed_value
            prefix = "aeron_exclusive_publication_" if n.exclusive else "aeron_publication_"
            return int(getattr(get_lib(), prefix + name)(n.ptr))

    @property
    def is_closed(self) -> bool:
        return bool(self._query("is_closed", 1))

    @property
    def is_connected(self) -> bool:
        return bool(self._query("is_connected", 0))

    @property
    def position(self) -> int:
        """Current publication position, or PUBLICATION_CLOSED (-4) once closed."""
        return self._query("position", PUBLICATION_CLOSED)

    @property
    def position_limit(self) -> int:
        """Position beyond which offers are back pressured, or PUBLICATION_CLOSED (-4) once closed."""
        return self._query("position_limit", PUBLICATION_CLOSED)

    @property
    def available_window(self) -> int:
        """Bytes that can be offered before back pressure (position_limit - position); -4 once closed."""
        limit = self.position_limit
        position = self.position
        if limit < 0 or position < 0:
            return PUBLICATION_CLOSED
        return limit - position

    @property
    def channel_status(self) -> int:
        """1 ACTIVE, -1 ERRORED (socket error on setup), 0 when no status indicator exists or closed."""
        n = self._n
        with n.lock:
            if n.ptr is None:
                return 0
            lib = get_lib()
            fn = (lib.aeron_exclusive_publication_channel_status if n.exclusive
                  else lib.aeron_publication_channel_status)
            return int(fn(n.ptr))

    def _checked(self, result: int, what: str) -> int:
        if result == PUBLICATION_ERROR:
            raise last_error(f"{what} on {self._n.channel!r} stream {self._n.stream_id}")
        return result

    def close(self) -> None:
        """Close the publication (asynchronously in the C client); idempotent."""
        self._n.close()


class Publication(_PublicationBase):
    """A concurrent (multi-writer) publication. Offer results < 0 are Aeron's codes (BACK_PRESSURED, ...)."""

    __slots__ = ()

    def offer(self, data: Any, reserved_value: int = 0) -> int:
        """Offer one message (any contiguous bytes-like, zero copy); new position or a negative Aeron code.

        Raises NativeAeronError for PUBLICATION_ERROR (-6), e.g. a message longer than max_message_length.
        """
        buffer = ffi.from_buffer("uint8_t[]", data)
        n = self._n
        with n.lock:
            if n.ptr is None:
                return PUBLICATION_CLOSED
            if reserved_value:
                n.reserved_value[0] = reserved_value
                result = get_lib().aeron_publication_offer(
                    n.ptr, buffer, len(buffer), _RESERVED_VALUE_CB, n.reserved_value
                )
            else:
                result = get_lib().aeron_publication_offer(n.ptr, buffer, len(buffer), ffi.NULL, ffi.NULL)
            return self._checked(int(result), "offer")


class ExclusivePublication(_PublicationBase):
    """A single-writer publication: offer, offer_block of pre-formatted frames, append_padding, revoke."""

    __slots__ = ()

    def offer(self, data: Any, reserved_value: int = 0) -> int:
        """Offer one message (any contiguous bytes-like, zero copy); new position or a negative Aeron code.

        Raises NativeAeronError for PUBLICATION_ERROR (-6), e.g. a message longer than max_message_length.
        """
        buffer = ffi.from_buffer("uint8_t[]", data)
        n = self._n
        with n.lock:
            if n.ptr is None:
                return PUBLICATION_CLOSED
            if reserved_value:
                n.reserved_value[0] = reserved_value
                result = get_lib().aeron_exclusive_publication_offer(
                    n.ptr, buffer, len(buffer), _RESERVED_VALUE_CB, n.reserved_value
                )
            else:
                result = get_lib().aeron_exclusive_publication_offer(n.ptr, buffer, len(buffer), ffi.NULL, ffi.NULL)
            return self._checked(int(result), "offer")

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
        n = self._n
        with n.lock:
            if n.ptr is None:
                return PUBLICATION_CLOSED
            result = get_lib().aeron_exclusive_publication_offer_block(n.ptr, buffer, len(buffer))
            return self._checked(int(result), "offer_block")

    def append_padding(self, length: int) -> int:
        """Append a PAD frame covering `length` bytes of payload; new position or a negative Aeron code."""
        n = self._n
        with n.lock:
            if n.ptr is None:
                return PUBLICATION_CLOSED
            result = get_lib().aeron_exclusive_publication_append_padding(n.ptr, int(length))
            return self._checked(int(result), "append_padding")

    def revoke(self) -> None:
        """Revoke and close: subscribers see the stream end immediately, without draining; idempotent."""
        self._n.close(revoke=True)


class Counter:
    """A counter allocated by this client. `set` is a release store; `get` a plain 64-bit (atomic on x86-64) read."""

    __slots__ = ("__weakref__", "_n")

    def __init__(self, native: _CounterNative) -> None:
        self._n = native

    def __repr__(self) -> str:
        return f"Counter(counter_id={self._n.counter_id}, registration_id={self._n.registration_id})"

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def counter_id(self) -> int:
        return self._n.counter_id

    @property
    def registration_id(self) -> int:
        return self._n.registration_id

    @property
    def is_closed(self) -> bool:
        return self._n.ptr is None

    def get(self) -> int:
        n = self._n
        with n.lock:
            if n.addr is None:
                raise NativeAeronError(f"counter {n.counter_id} is closed")
            return int(n.addr[0])

    def set(self, value: int) -> None:
        n = self._n
        with n.lock:
            if n.addr is None:
                raise NativeAeronError(f"counter {n.counter_id} is closed")
            get_lib().aeron_counter_set_release(n.addr, value)

    def close(self) -> None:
        """Free the counter in the driver (asynchronously); idempotent."""
        self._n.close()


class CountersReader:
    """Read-only view of all counters in the driver's CnC file, valid until its client closes."""

    __slots__ = ("_client", "_max_counter_id")

    def __init__(self, client: _ClientNative) -> None:
        self._client = client
        self._max_counter_id = int(get_lib().aeron_counters_reader_max_counter_id(client.reader))

    @property
    def max_counter_id(self) -> int:
        return self._max_counter_id

    def _reader(self, counter_id: int) -> Any:
        """Caller holds the client lock; validates the id since the address helpers do not bounds-check."""
        self._client.check_open()
        if not 0 <= counter_id <= self._max_counter_id:
            raise NativeAeronError(f"counter id {counter_id} out of range 0..{self._max_counter_id}")
        return self._client.reader

    def get(self, counter_id: int) -> int:
        with self._client.lock:
            return int(get_lib().aeron_counters_reader_addr(self._reader(counter_id), counter_id)[0])

    def _int_field(self, fn: Any, ctype: str, counter_id: int, what: str) -> int:
        out = ffi.new(ctype)
        with self._client.lock:
            if fn(self._reader(counter_id), counter_id, out) < 0:
                raise last_error(f"{what}({counter_id})")
        return int(out[0])

    def state(self, counter_id: int) -> int:
        """COUNTER_RECORD_UNUSED (0), ALLOCATED (1) or RECLAIMED (-1)."""
        return self._int_field(get_lib().aeron_counters_reader_counter_state, "int32_t *", counter_id, "state")

    def type_id(self, counter_id: int) -> int:
        return self._int_field(get_lib().aeron_counters_reader_counter_type_id, "int32_t *", counter_id, "type_id")

    def registration_id(self, counter_id: int) -> int:
        return self._int_field(
            get_lib().aeron_counters_reader_counter_registration_id, "int64_t *", counter_id, "registration_id"
        )

    def owner_id(self, counter_id: int) -> int:
        return self._int_field(get_lib().aeron_counters_reader_counter_owner_id, "int64_t *", counter_id, "owner_id")

    def reference_id(self, counter_id: int) -> int:
        return self._int_field(
            get_lib().aeron_counters_reader_counter_reference_id, "int64_t *", counter_id, "reference_id"
        )

    def key(self, counter_id: int) -> bytes:
        """The full 112-byte key area (callers slice what their type id defines)."""
        key_p = ffi.new("uint8_t **")
        with self._client.lock:
            if get_lib().aeron_counters_reader_metadata_key(self._reader(counter_id), counter_id, key_p) < 0:
                raise last_error(f"key({counter_id})")
            return bytes(ffi.buffer(key_p[0], COUNTER_MAX_KEY_LENGTH))

    def label(self, counter_id: int) -> str:
        buffer = ffi.new("char[]", COUNTER_MAX_LABEL_LENGTH + 1)
        with self._client.lock:
            length = get_lib().aeron_counters_reader_counter_label(
                self._reader(counter_id), counter_id, buffer, len(buffer)
            )
            if length < 0:
                raise last_error(f"label({counter_id})")
        return str(ffi.buffer(buffer, length)[:].decode("utf-8", "replace"))

    def counters(self) -> Iterator[CounterInfo]:
        """Snapshot of all allocated counters, in id order."""
        lib = get_lib()
        sink: list[tuple[int, int, int, bytes, str]] = []
        handle = ffi.new_handle(sink)
        registration = ffi.new("int64_t *")
        result: list[CounterInfo] = []
        with self._client.lock:
            self._client.check_open()
            reader = self._client.reader
            lib.aeron_counters_reader_foreach_counter(reader, _FOREACH_COUNTER_CB, handle)
            for counter_id, type_id, value, key, label in sink:
                registration[0] = 0
                lib.aeron_counters_reader_counter_registration_id(reader, counter_id, registration)
                full_key = key.ljust(COUNTER_MAX_KEY_LENGTH, b"\0")
                result.append(CounterInfo(counter_id, type_id, int(registration[0]), value, full_key, label))
        return iter(result)

    def find_by_type(self, type_id: int) -> list[int]:
        """Ids of allocated counters with this type id, in id order."""
        return [info.counter_id for info in self.counters() if info.type_id == type_id]

    def find_by_type_and_registration_id(self, type_id: int, registration_id: int) -> int:
        """Counter id, or -1 (NULL_COUNTER_ID) when none matches."""
        with self._client.lock:
            self._client.check_open()
            return int(get_lib().aeron_counters_reader_find_by_type_id_and_registration_id(
                self._client.reader, int(type_id), int(registration_id)
            ))

    def is_allocated(self, counter_id: int) -> bool:
        return self.state(counter_id) == COUNTER_RECORD_ALLOCATED
