"""Subscriptions and their images: polling, image availability and the image reference each `Image` owns.

Hot paths move blocks, not messages: `Image.block_poll` / `Subscription.block_poll` hand the handler one zero-copy
`memoryview` per block (cffi releases the GIL around every C call, so block copies happen off the GIL), and
`poll` hands over whole messages reassembled by Aeron's fragment assembler.

Image lifetime. Each `Image` owns one reference on the C image (retained in the availability callback, or by
`aeron_subscription_image_at_index` / `_by_session_id`). The C client keeps the image and its mapped log buffer
alive while the reference count is positive, even after the image goes unavailable, so a recorder can keep
polling an `Image` until it reports closed / end of stream. The reference is released exactly once: by
`Image.close()`, by closing the owning subscription, or when the `Image` object is garbage collected. Release uses
the unconditional `aeron_image_release` (the subscription-scoped release is a no-op once the image has left the
image list, which would leak the log buffer mapping of every image that ever went unavailable).

Image availability callbacks run on the C client conductor thread: they retain the image and call the user's
callback, which should only hand the `Image` over to another thread.

Departed images. When an image goes unavailable the C client takes it out of the subscription's image list and
keeps it, mapped, until the subscription *acknowledges* the new list: it frees an image only once the
subscription's consumer has proposed an image-list change number at least the image's removal number, which any
subscription-wide call that reads the list does (poll, image count, image lookup). Java's client has no such step
(the garbage collector frees a departed image), so a subscription whose images are polled directly, as the
archive's recorder polls each recorded image, and which is never polled itself, would keep every departed
publication's log buffer mapped for the life of the process: the mappings and the deleted files on the driver's
disk pile up until the kernel's map count limit is reached. So this layer acknowledges the list itself, under the
subscription's lock (the lock every list reader holds, so no reader is iterating an older list meanwhile): in the
unavailable-image callback, and again when an `Image` of the subscription releases its reference. Both attempts
take the lock without waiting (the callback runs on the C conductor thread, which must never block on a thread
that may itself wait for the conductor); a failed attempt leaves `ack_pending`, honoured by the next lock holder.
Acknowledging a later list also releases every earlier departed image.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .callbacks import SUBSCRIPTION_CLOSED_CB, BlockHandler, FragmentHandler, PollState, cstr
from .ffi import ffi, get_lib, last_error
from .handles import POLL_INTERVAL_S, ClientNative, HandleAttribute, HandleQuery, NativeWrapper, PollingHandle

__all__ = ["Image", "ImageHandler", "ImageNative", "Subscription", "SubscriptionNative"]

logger = logging.getLogger(__name__)

_WILDCARD_PORT = re.compile(r"endpoint=[^|]*:0(?:\||$)")
# Room for an address the driver reports (the C client's AERON_CLIENT_MAX_LOCAL_ADDRESS_STR_LEN is 64).
_ADDRESS_LENGTH = 128

ImageHandler = Callable[["Image"], object]


class ImageNative(PollingHandle):
    """Owns one reference on an aeron_image_t; released exactly once by close()."""

    C_PREFIX = "aeron_image_"
    C_ASSEMBLER = "image_controlled_fragment_assembler"

    def __init__(self, ptr: Any, subscription: SubscriptionNative) -> None:
        super().__init__(ptr)
        lib = get_lib()
        self.subscription = subscription
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
        self.source_identity = cstr(constants.source_identity)
        self.final_position = self.join_position
        self.final_eos = False

    def describe(self) -> str:
        return f"image(session_id={self.session_id})"

    def poll_context(self, operation: str) -> str:
        return f"image {operation}(session_id={self.session_id})"

    def close_locked(self) -> None:
        if self.ptr is None:
            return
        lib = get_lib()
        ptr, self.ptr = self.ptr, None
        self.final_position = int(lib.aeron_image_position(ptr))
        self.final_eos = bool(lib.aeron_image_is_end_of_stream(ptr))
        self.delete_assembler()
        self.poll_state = None
        self.subscription.images.pop(id(self), None)
        lib.aeron_image_release(ptr)

    def after_unlock(self) -> None:
        if self.ptr is None:
            self.subscription.try_acknowledge_image_list()  # our reference is gone: let the C client free it


class SubscriptionNative(PollingHandle):
    """Owns aeron_subscription_t, its fragment assembler and the images retained through it."""

    C_PREFIX = "aeron_subscription_"
    C_ASSEMBLER = "controlled_fragment_assembler"

    def __init__(
        self,
        client: ClientNative,
        channel: str,
        stream_id: int,
        on_available_image: ImageHandler | None,
        on_unavailable_image: ImageHandler | None,
    ) -> None:
        super().__init__()
        self.client = client
        self.channel = channel
        self.stream_id = stream_id
        self.user_on_available = on_available_image
        self.user_on_unavailable = on_unavailable_image
        self.registration_id = -1
        self.images_lock = threading.Lock()
        self.images: dict[int, ImageNative] = {}
        self.closed = False
        self.ack_pending = False
        self.poll_state = PollState()
        self.handle = ffi.new_handle(self)

    def describe(self) -> str:
        return f"subscription({self.channel!r}, {self.stream_id})"

    def poll_context(self, operation: str) -> str:
        return f"{operation}({self.channel!r}, {self.stream_id})"

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

    def on_unavailable_image(self, subscription_ptr: Any, image_ptr: Any) -> None:
        # The C client has installed the image list without this image: acknowledge it so the image is freed as
        # soon as the last reference on it goes (see "Departed images" above).
        self.try_acknowledge_image_list()
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

    def on_close_complete(self) -> None:
        """The conductor processed our close: no image callback can come any more."""
        self.client.closing.pop(id(self), None)

    # Departed images ----------------------------------------------------------------------------------------------

    def try_acknowledge_image_list(self) -> bool:
        """Propose the current image list's change number to the C client, if the lock is free right now.

        Never waits: on a busy lock it leaves `ack_pending` for `after_unlock` of whoever holds it. Returns whether
        the list was acknowledged (or there is nothing left to acknowledge: the subscription is closed).
        """
        if not self.lock.acquire(blocking=False):
            self.ack_pending = True
            return False
        try:
            self.acknowledge_image_list_locked()
        finally:
            self.lock.release()
        return True

    def acknowledge_image_list_locked(self) -> None:
        """The caller holds `lock`, so no reader of this subscription is walking an older image list."""
        self.ack_pending = False
        if self.ptr is not None:
            get_lib().aeron_subscription_image_count(self.ptr)  # reads the list, proposing its change number

    # Images --------------------------------------------------------------------------------------------------------

    def _wrap_locked(self, image_ptr: Any) -> Image:
        try:
            native = ImageNative(image_ptr, self)
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

    def images_locked(self, ptr: Any) -> list[Image]:
        lib = get_lib()
        images = (
            self.adopt_retained(lib.aeron_subscription_image_at_index(ptr, index))
            for index in range(int(lib.aeron_subscription_image_count(ptr)))
        )
        return [image for image in images if image is not None]

    def image_by_session_id_locked(self, ptr: Any, session_id: int) -> Image | None:
        return self.adopt_retained(get_lib().aeron_subscription_image_by_session_id(ptr, session_id))

    # Close ---------------------------------------------------------------------------------------------------------

    def close_locked(self) -> None:
        lib = get_lib()
        with self.images_lock:
            if self.closed:
                return
            self.closed = True
        ptr, self.ptr = self.ptr, None
        self.delete_assembler()
        self.client.children.pop(id(self), None)
        if ptr is not None and self.client.ptr is not None:
            # Callbacks may still fire until the conductor processes the close: keep our handle alive until then.
            self.client.closing[id(self)] = self
            if lib.aeron_subscription_close(ptr, SUBSCRIPTION_CLOSED_CB, self.handle) < 0:
                logger.error("%s", last_error(f"aeron_subscription_close({self.channel!r}, {self.stream_id})"))

    def after_unlock(self) -> None:
        if self.closed:
            self.close_images()  # closed (maybe by a poll handler): its images go too, now that no lock is held
        elif self.ack_pending:
            self.try_acknowledge_image_list()

    def close_images(self) -> None:
        with self.images_lock:
            images = list(self.images.values())
        for image in images:
            image.close()


class Subscription(NativeWrapper[SubscriptionNative]):
    """An Aeron subscription. Poll from one thread at a time (Aeron subscriptions are single-consumer)."""

    __slots__ = ()

    channel = HandleAttribute[str]()
    stream_id = HandleAttribute[int]()
    registration_id = HandleAttribute[int]()
    is_connected = HandleQuery(bool, closed=False)
    image_count = HandleQuery(int, closed=0)
    channel_status = HandleQuery(
        int, closed=0, doc="1 ACTIVE, -1 ERRORED, 0 when no status indicator is allocated (e.g. IPC) or closed."
    )

    def __repr__(self) -> str:
        return f"Subscription({self._n.channel!r}, stream_id={self._n.stream_id}, closed={self.is_closed})"

    def async_add_destination(self, uri: str) -> PendingDestination:
        """Start adding a destination to this multi-destination subscription (`control-mode=manual`) without
        waiting: poll the result. Raises at once only if the request cannot be sent."""
        return self._destination("add", uri)

    def async_remove_destination(self, uri: str) -> PendingDestination:
        """Start removing a destination (as `async_add_destination`)."""
        return self._destination("remove", uri)

    def _destination(self, verb: str, uri: str) -> PendingDestination:
        what = f"{verb}_destination({uri!r}) of {self._n.describe()}"
        start = getattr(get_lib(), f"aeron_subscription_async_{verb}_destination")
        async_ptr = ffi.new("aeron_async_destination_t **")
        with self._n.client.open() as aeron, self._n.open() as subscription:
            if start(async_ptr, aeron, subscription, uri.encode()) < 0:
                raise last_error(what)
        return PendingDestination(self._n.client, what, async_ptr[0])

    def try_resolve_channel_endpoint_port(self, timeout_s: float = 0.0) -> str | None:
        """The channel with a wildcard endpoint port (`endpoint=host:0`) replaced by the bound address:port.

        Channels without a wildcard port come back unchanged. Waits up to `timeout_s` for the driver to bind the
        port; returns None if it has not by then, or if the subscription is closed.
        """
        resolve = get_lib().aeron_subscription_try_resolve_channel_endpoint_port
        buffer = ffi.new("char[]", 4096)
        deadline = time.monotonic() + timeout_s
        while True:
            length = self._n.call(resolve, buffer, len(buffer), closed=None)
            if length is None:
                return None
            if 0 < length < len(buffer):
                uri = str(ffi.string(buffer, length).decode())
                if not _WILDCARD_PORT.search(uri):
                    return uri
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_INTERVAL_S)

    def resolved_endpoint(self) -> str | None:
        """The first local address (`host:port`) the media driver bound for this subscription, as Java's
        `Subscription.resolvedEndpoint()`: for a multi-destination subscription (whose channel has no endpoint) the
        first destination's, so a destination added with port 0 tells its port here. None until the driver has bound
        one (the channel status is not yet active), for IPC, and once closed.
        """
        buffer = ffi.new("char[]", _ADDRESS_LENGTH)
        found = self._n.call(get_lib().aeron_subscription_resolved_endpoint, buffer, len(buffer), closed=0)
        if found < 0:
            raise last_error(f"resolved endpoint of {self._n.describe()}")
        return str(ffi.string(buffer).decode()) if found > 0 else None

    def images(self) -> list[Image]:
        """Snapshot of the current images; each returned Image holds its own reference until closed."""
        return self._n.call(self._n.images_locked, closed=[])

    def image_by_session_id(self, session_id: int) -> Image | None:
        return self._n.call(self._n.image_by_session_id_locked, int(session_id), closed=None)

    def poll(self, handler: FragmentHandler, fragment_limit: int, *, with_header: bool = True) -> int:
        """Deliver up to `fragment_limit` fragments as reassembled messages: `handler(data, header)`.

        `data` is only valid during the call. The handler may return a ControlledAction (None = CONTINUE). If it
        raises, that message is not consumed (ABORT), polling stops and the exception propagates from here.
        `with_header=False` passes None as `header`, for handlers that never look at it: reading the header's
        values is about a third of the cost of delivering a small message.
        """
        return self._n.fragment_poll(handler, fragment_limit, with_header)

    def block_poll(self, handler: BlockHandler, block_length_limit: int) -> int:
        """Deliver at most one block per image: `handler(block, session_id, term_id)`; returns bytes consumed.

        Blocks are whole frames from one term, zero-copy, valid only during the call. If the handler raises, the
        exception propagates once the C poll returns; the C API has already consumed the block, and later images
        in the same call are consumed without being delivered.
        """
        return self._n.block_poll(handler, block_length_limit)

    def close(self) -> None:
        """Close the subscription and every Image obtained through it; idempotent."""
        self._n.close()


class Image(NativeWrapper[ImageNative]):
    """One publisher session under a subscription, with its own reference on the C image.

    Stays valid after the publisher goes away: polls then return 0 and `is_closed` is True. Release the reference
    with `close()` (also done by closing the subscription, or when this object is garbage collected).
    """

    __slots__ = ("_finalizer",)

    _finalizer: weakref.finalize[[], Image]

    @classmethod
    def _create(cls, native: ImageNative) -> Image:
        image = cls.__new__(cls)
        image._n = native
        image._finalizer = weakref.finalize(image, native.close)
        native.wrapper = weakref.ref(image)
        return image

    def __init__(self) -> None:
        raise TypeError("Images come from Subscription.images(), image_by_session_id() or image callbacks")

    session_id = HandleAttribute[int]()
    correlation_id = HandleAttribute[int]()
    join_position = HandleAttribute[int]()
    initial_term_id = HandleAttribute[int]()
    term_buffer_length = HandleAttribute[int]()
    mtu_length = HandleAttribute[int]()
    position_bits_to_shift = HandleAttribute[int]()
    subscriber_position_id = HandleAttribute[int]()
    source_identity = HandleAttribute[str]()
    is_closed = HandleQuery(
        bool, closed=True, doc="True once the image went unavailable in the C client or this wrapper was closed."
    )
    active_transport_count = HandleQuery(int, closed=0)
    is_publication_revoked = HandleQuery(bool, closed=False)

    def __repr__(self) -> str:
        n = self._n
        return (
            f"Image(session_id={n.session_id}, correlation_id={n.correlation_id}, "
            f"source={n.source_identity!r}, closed={self.is_closed})"
        )

    @property
    def subscription_registration_id(self) -> int:
        return self._n.subscription.registration_id

    # The next three answer from the snapshot close() took, read under the same lock that close() holds.

    @property
    def position(self) -> int:
        """Consumed position; after close, the position reached when it was closed."""
        n = self._n
        with n.lock:
            return n.final_position if n.ptr is None else int(get_lib().aeron_image_position(n.ptr))

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

    def block_poll(self, handler: BlockHandler, block_length_limit: int) -> int:
        """Deliver the next block of whole frames: `handler(block, session_id, term_id)`; returns bytes consumed.

        A block never crosses a term boundary and a PAD frame is delivered alone. The memoryview is zero-copy over
        the log buffer and only valid during the call. If the handler raises, the exception propagates after the C
        poll returns and the block counts as consumed (the C API commits the position after the callback).
        """
        return self._n.block_poll(handler, block_length_limit)

    def poll(self, handler: FragmentHandler, fragment_limit: int, *, with_header: bool = True) -> int:
        """Deliver up to `fragment_limit` fragments as reassembled messages; see Subscription.poll."""
        return self._n.fragment_poll(handler, fragment_limit, with_header)

    def close(self) -> None:
        """Release this wrapper's reference on the C image; idempotent, deferred if called from a poll handler."""
        self._n.close()


class PendingDestination:
    """A destination being added to or removed from a subscription: `poll()` until it says done.

    The C client frees the request once it answers; a request never polled to the end is freed with the client.
    """

    def __init__(self, client: ClientNative, what: str, async_ptr: Any) -> None:
        self._client = client
        self._what = what
        self._async: Any = async_ptr
        self.is_done = False

    def poll(self) -> bool:
        """True once the media driver applied it; raises `NativeAeronError` if it refused."""
        if self.is_done:
            return True
        with self._client.open():
            rc = get_lib().aeron_subscription_async_destination_poll(self._async)
            if rc < 0:
                self.is_done, self._async = True, None
                raise last_error(self._what)
        if rc > 0:
            self.is_done, self._async = True, None
        return self.is_done
