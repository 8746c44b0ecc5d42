"""`AeronClient`: one Aeron C client (aeron_t) connected to a media driver, and the synchronous adds made through it.

The C API adds asynchronously (start, then poll until the driver answers); the `add_*` methods here wait for the
answer, bounded by the driver timeout, so callers get a ready object or a NativeAeronError naming what was being
added. `async_add_exclusive_publication` and `async_add_subscription` hand back the add in flight instead
(`PendingExclusivePublication`, `PendingSubscription`), for callers that must not wait: the archive's conductor,
a reader with several replays in flight.
The client owns everything added through it: closing it (explicitly, at garbage collection or at interpreter
exit) closes them all first. This module imports the wrapper modules; none of them imports it back, they only
know the client's handle (`handles.ClientNative`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ..constants import COUNTER_MAX_KEY_LENGTH, COUNTER_MAX_LABEL_LENGTH
from .callbacks import AVAILABLE_IMAGE_CB, ERROR_CB, UNAVAILABLE_IMAGE_CB
from .counters import Counter, CounterNative, CountersReader
from .ffi import NativeAeronError, ffi, get_lib, last_error
from .handles import POLL_INTERVAL_S, ClientNative, HandleAttribute, HandleQuery, NativeWrapper
from .publications import ExclusivePublication, ExclusivePublicationNative, Publication, PublicationNative
from .subscription import ImageHandler, Subscription, SubscriptionNative

__all__ = ["DEFAULT_IDLE_SLEEP_NS", "IDLE_SLEEP_ENV", "AeronClient"]

logger = logging.getLogger(__name__)

IDLE_SLEEP_ENV = "AERON_CLIENT_IDLE_SLEEP_DURATION"
DEFAULT_IDLE_SLEEP_NS = 1_000_000
_ADD_TIMEOUT_MARGIN_S = 2.0
# The C client conductor's back-off (Aeron's "backoff" idle strategy): after a duty cycle with work it spins, then
# yields, then parks from 1 us doubling up to the idle sleep, so a command or a driver response that follows
# closely (an add's command, its answer, the image that comes with it) is handled within microseconds, while an
# idle client parks for the full idle sleep after ~2 ms, as a sleeping strategy would.
BACKOFF_MAX_SPINS = 10
BACKOFF_MAX_YIELDS = 20
BACKOFF_MIN_PARK_NS = 1_000
# Waiting for an async add (see `_await`): the first polls only yield, then short sleeps for a few ms, then
# sleeps of POLL_INTERVAL_S.
_AWAIT_YIELDS = 20
_AWAIT_SHORT_SLEEP_S = 0.00005
_AWAIT_SHORT_FOR_S = 0.005
_context_env_lock = threading.Lock()


class _AddTimedOut(NativeAeronError):
    """An async add got no answer in time; the C conductor may still complete the registration later."""


class AeronClient(NativeWrapper[ClientNative]):
    """An Aeron C client (aeron_t) connected to a media driver; owns everything added through it.

    `close()` closes all subscriptions, images, publications and counters created through this client and then the
    client itself; it is idempotent and also runs at garbage collection / interpreter exit. Adds are synchronous
    and bounded by `driver_timeout_ms`. `idle_sleep_duration_ns` sets the client conductor's longest idle sleep
    (lower means faster adds and image notifications after a quiet spell, at the cost of wake-ups); it defaults to
    1 ms rather than the C client's 16 ms, because every synchronous add waits for the conductor at least twice.
    The conductor idles with Aeron's back-off strategy (spin, yield, then parks from 1 us doubling up to that
    sleep), so the steps of an add that follow one another (command, driver response, image) cost microseconds
    rather than a sleep each, and an idle client still wakes only once per idle sleep. The C client reads the
    sleep only from `AERON_CLIENT_IDLE_SLEEP_DURATION` while the context is created, so it is set there (under a
    lock, restored afterwards); if the user set that variable, the C client's own sleeping strategy and that
    value are left as they are.
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
        native = ClientNative(client_name, str(aeron_dir), int(driver_timeout_ms))
        super().__init__(native)
        self._finalizer = weakref.finalize(self, native.close)
        context = ffi.new("aeron_context_t **")
        # The longest idle park of our back-off; None when the user's environment (or the C default) decides.
        backoff_max_park_ns: int | None = None
        with _context_env_lock:
            override = None
            if idle_sleep_duration_ns is not None and IDLE_SLEEP_ENV not in os.environ:
                backoff_max_park_ns = int(idle_sleep_duration_ns)
                override = os.environ[IDLE_SLEEP_ENV] = f"{backoff_max_park_ns}ns"
            try:
                initialised = lib.aeron_context_init(context)
            finally:
                if override is not None:
                    del os.environ[IDLE_SLEEP_ENV]
        if initialised < 0:
            raise last_error("aeron_context_init")
        native.context = context[0]
        try:
            ctx = native.context
            if lib.aeron_context_set_dir(ctx, native.aeron_dir.encode()) < 0:
                raise last_error(f"aeron_context_set_dir({native.aeron_dir!r})")
            if lib.aeron_context_set_client_name(ctx, client_name.encode()) < 0:
                raise last_error(f"aeron_context_set_client_name({client_name!r})")
            if lib.aeron_context_set_driver_timeout_ms(ctx, native.driver_timeout_ms) < 0:
                raise last_error("aeron_context_set_driver_timeout_ms")
            if lib.aeron_context_set_error_handler(ctx, ERROR_CB, native.handle) < 0:
                raise last_error("aeron_context_set_error_handler")
            if backoff_max_park_ns is not None:
                args = f"{BACKOFF_MAX_SPINS}-{BACKOFF_MAX_YIELDS}-{BACKOFF_MIN_PARK_NS}-{backoff_max_park_ns}"
                if lib.aeron_context_set_idle_strategy_init_args(ctx, args.encode()) < 0:
                    raise last_error(f"aeron_context_set_idle_strategy_init_args({args!r})")
                if lib.aeron_context_set_idle_strategy(ctx, b"backoff") < 0:
                    raise last_error(f"aeron_context_set_idle_strategy('backoff', {args!r})")
            aeron = ffi.new("aeron_t **")
            if lib.aeron_init(aeron, ctx) < 0:
                raise last_error(f"aeron_init(aeron_dir={native.aeron_dir!r})")
            native.ptr = aeron[0]
            if lib.aeron_start(native.ptr) < 0:
                raise last_error(f"aeron_start(aeron_dir={native.aeron_dir!r})")
            native.reader = lib.aeron_counters_reader(native.ptr)
        except BaseException:
            self.close()
            raise
        native.client_id = int(lib.aeron_client_id(native.ptr))
        self._counters_reader = CountersReader(native)
        logger.debug("Aeron client %r connected to %s (client id %d)", client_name, native.aeron_dir, native.client_id)

    aeron_dir = HandleAttribute[str]()
    client_name = HandleAttribute[str]()
    driver_timeout_ms = HandleAttribute[int]()
    client_id = HandleAttribute[int]()
    is_closed = HandleQuery(
        bool, closed=True, doc="True once closed here, or when the C client closed itself (driver or client timeout)."
    )

    def __repr__(self) -> str:
        n = self._n
        state = "closed" if n.closed else f"client_id={n.client_id}"
        return f"AeronClient({n.client_name!r}, {n.aeron_dir!r}, {state})"

    def close(self) -> None:
        """Close everything created through this client, then the client; safe to call more than once."""
        self._finalizer()

    def detach_finalizer(self) -> None:
        """Never close this client at exit or on collection (a forked child's copy: see `native.fork`)."""
        self._finalizer.detach()

    @property
    def counters_reader(self) -> CountersReader:
        return self._counters_reader

    def next_correlation_id(self) -> int:
        """A correlation id unique across all clients of the driver (shared counter in the CnC file)."""
        with self._n.open() as aeron:
            value = int(get_lib().aeron_next_correlation_id(aeron))
        if value < 0:
            raise NativeAeronError("aeron_next_correlation_id failed")
        return value

    # Adds ------------------------------------------------------------------------------------------------------------

    def _add(self, what: str, kind: str, start: Callable[[Any, Any], int]) -> Any:
        """Start an async add with `start(async_out, aeron)` and wait for the C pointer of the added `kind`.

        `kind` names the C API family: aeron_async_add_<kind>_t, aeron_async_add_<kind>_poll, aeron_<kind>_t.
        """
        lib = get_lib()
        async_ptr = ffi.new(f"aeron_async_add_{kind}_t **")
        with self._n.open() as aeron:
            if start(async_ptr, aeron) < 0:
                raise last_error(what)
        return self._await(
            what, getattr(lib, f"aeron_async_add_{kind}_poll"), ffi.new(f"aeron_{kind}_t **"), async_ptr[0]
        )

    def _await(self, what: str, poll: Callable[[Any, Any], int], out: Any, async_ptr: Any) -> Any:
        """Poll an async add until done; the conductor itself fails it after the driver timeout.

        An add takes the C conductor and the driver from tens of microseconds (both awake) to a millisecond or
        two (both parked): the first polls only yield the CPU (and the GIL), then sleeps of 50 us for the first
        5 ms, so the answer is seen within ~0.1 ms of its arrival; only then `POLL_INTERVAL_S`, so a slow answer
        (a driver that is busy or gone) costs no more wake-ups than before. An in-flight wait, never an idle loop.
        """
        timeout_ms = self._n.driver_timeout_ms
        started = time.monotonic()
        deadline = started + timeout_ms / 1000.0 + _ADD_TIMEOUT_MARGIN_S
        short_until = started + _AWAIT_SHORT_FOR_S
        polls = 0
        while True:
            with self._n.open():
                rc = poll(out, async_ptr)
                if rc < 0:
                    raise last_error(what)
            if rc > 0:
                return out[0]
            if time.monotonic() > deadline:
                raise _AddTimedOut(f"{what}: no response from the media driver in {timeout_ms} ms")
            polls += 1
            if polls <= _AWAIT_YIELDS:
                time.sleep(0)
            else:
                time.sleep(_AWAIT_SHORT_SLEEP_S if time.monotonic() < short_until else POLL_INTERVAL_S)

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
        client = self._n
        what = f"add_subscription(channel={channel!r}, stream_id={stream_id})"
        native = SubscriptionNative(client, channel, stream_id, on_available_image, on_unavailable_image)

        try:
            ptr = self._add(what, "subscription", lambda out, aeron: _start_subscription(native, out, aeron))
        except BaseException as exc:
            _subscription_not_added(client, native, late_callbacks_possible=isinstance(exc, _AddTimedOut))
            raise
        return _subscription_added(client, native, ptr, what)

    def async_add_subscription(self, channel: str, stream_id: int) -> PendingSubscription:
        """Start adding a subscription without waiting (no image callbacks): poll the result until the driver
        answers. For a reader that subscribes to several replays in flight at once. Raises at once only if the
        request cannot be sent."""
        client = self._n
        what = f"add_subscription(channel={channel!r}, stream_id={stream_id})"
        native = SubscriptionNative(client, channel, stream_id, None, None)
        async_ptr = ffi.new("aeron_async_add_subscription_t **")
        with client.open() as aeron:
            rc = _start_subscription(native, async_ptr, aeron)
            if rc < 0:
                error = last_error(what)
        if rc < 0:
            _subscription_not_added(client, native, late_callbacks_possible=False)
            raise error
        return PendingSubscription(client, native, what, async_ptr[0])

    def add_exclusive_publication(self, channel: str, stream_id: int) -> ExclusivePublication:
        """Add an exclusive (single-writer) publication; supports offer_block / append_padding."""
        return ExclusivePublication(self._add_publication(ExclusivePublicationNative, channel, stream_id))

    def async_add_exclusive_publication(self, channel: str, stream_id: int) -> PendingExclusivePublication:
        """Start adding an exclusive publication without waiting: poll the result until the driver answers.

        For a conductor that must not stall on the media driver's round trip (the archive setting up a replay
        while other requests wait: Aeron's `asyncAddExclusivePublication`). Raises at once only if the request
        cannot be sent.
        """
        lib = get_lib()
        what = f"add_exclusive_publication(channel={channel!r}, stream_id={stream_id})"
        async_ptr = ffi.new("aeron_async_add_exclusive_publication_t **")
        with self._n.open() as aeron:
            if lib.aeron_async_add_exclusive_publication(async_ptr, aeron, channel.encode(), int(stream_id)) < 0:
                raise last_error(what)
        return PendingExclusivePublication(self._n, what, async_ptr[0], channel, stream_id)

    def add_publication(self, channel: str, stream_id: int) -> Publication:
        """Add a concurrent publication (shared by all adders of the same channel/stream in this client)."""
        return Publication(self._add_publication(PublicationNative, channel, stream_id))

    def _add_publication[P: PublicationNative](self, native_type: type[P], channel: str, stream_id: int) -> P:
        kind = native_type.KIND
        add = getattr(get_lib(), f"aeron_async_add_{kind}")
        ptr = self._add(
            f"add_{kind}(channel={channel!r}, stream_id={stream_id})",
            kind,
            lambda async_ptr, aeron: int(add(async_ptr, aeron, channel.encode(), stream_id)),
        )
        return self._n.adopt(native_type(self._n, ptr, channel, stream_id))

    def add_counter(self, type_id: int, key: bytes, label: str) -> Counter:
        """Allocate a counter in the driver's CnC file; visible to every client through its CountersReader."""
        lib = get_lib()
        key_bytes = bytes(key)
        label_bytes = label.encode("utf-8")
        if len(key_bytes) > COUNTER_MAX_KEY_LENGTH:
            raise ValueError(f"counter key is {len(key_bytes)} bytes, max {COUNTER_MAX_KEY_LENGTH}")
        if len(label_bytes) > COUNTER_MAX_LABEL_LENGTH:
            raise ValueError(f"counter label is {len(label_bytes)} bytes, max {COUNTER_MAX_LABEL_LENGTH}")
        key_buffer = ffi.from_buffer("uint8_t[]", key_bytes) if key_bytes else ffi.NULL
        ptr = self._add(
            f"add_counter(type_id={type_id}, label={label!r})",
            "counter",
            lambda async_ptr, aeron: int(
                lib.aeron_async_add_counter(
                    async_ptr, aeron, int(type_id), key_buffer, len(key_bytes), label_bytes, len(label_bytes)
                )
            ),
        )
        return Counter(self._n.adopt(CounterNative(self._n, ptr)))


class _PendingAdd[R: ExclusivePublication | Subscription](ABC):
    """An add in flight. `poll()` returns None until the driver has answered, then the added object (the same one on
    every later call); a refusal, or no answer within the driver timeout (the C client's conductor fails the add
    then), raises `NativeAeronError` once, after which `is_done` is true and `poll()` returns None. Whoever polls it
    to the end owns the result; `abandon()` instead closes it whenever it comes (`poll()` must still be called
    until `is_done`). Not thread safe: one owner thread.
    """

    _KIND = ""  # the C API family: aeron_async_add_<kind>_poll, aeron_<kind>_t

    def __init__(self, client: ClientNative, what: str, async_add: Any) -> None:
        self._client = client
        self._what = what
        self._async: Any = async_add
        self._out = ffi.new(f"aeron_{self._KIND}_t **")
        self._result: R | None = None
        self._abandoned = False
        self._poll = getattr(get_lib(), f"aeron_async_add_{self._KIND}_poll")

    @property
    def is_done(self) -> bool:
        """The driver answered (or the add failed): nothing more will come of `poll()`."""
        return self._async is None

    def abandon(self) -> None:
        """Nobody wants the result any more: close it now if it came, or as soon as `poll()` sees it."""
        self._abandoned = True
        if self._result is not None:
            self._result.close()
            self._result = None

    def poll(self) -> R | None:
        if self._async is None:
            return self._result
        with self._client.open():
            rc = int(self._poll(self._out, self._async))
            error = last_error(self._what) if rc < 0 else None
        if rc == 0:
            return None
        self._async = None  # the C client freed it
        if error is not None:
            self._failed()
            raise error
        result = self._adopt(self._out[0])
        if self._abandoned:
            result.close()
            return None
        self._result = result
        return result

    @abstractmethod
    def _adopt(self, ptr: Any) -> R:
        """Wrap the C object the driver confirmed (and register it with the client)."""

    def _failed(self) -> None:  # noqa: B027 - an optional hook, deliberately not abstract
        """Undo what was set up for the add (nothing by default)."""


class PendingExclusivePublication(_PendingAdd[ExclusivePublication]):
    """An exclusive publication being added (`AeronClient.async_add_exclusive_publication`)."""

    _KIND = "exclusive_publication"

    def __init__(self, client: ClientNative, what: str, async_add: Any, channel: str, stream_id: int) -> None:
        super().__init__(client, what, async_add)
        self._channel = channel
        self._stream_id = stream_id

    def _adopt(self, ptr: Any) -> ExclusivePublication:
        return ExclusivePublication(
            self._client.adopt(ExclusivePublicationNative(self._client, ptr, self._channel, self._stream_id))
        )


def _start_subscription(native: SubscriptionNative, async_ptr: Any, aeron: Any) -> int:
    """Start the C add of `native`'s subscription (the client's lock held)."""
    native.client.closing[id(native)] = native  # keep the callback handle alive from when the conductor may call
    return int(
        get_lib().aeron_async_add_subscription(
            async_ptr,
            aeron,
            native.channel.encode(),
            int(native.stream_id),
            AVAILABLE_IMAGE_CB,
            native.handle,
            UNAVAILABLE_IMAGE_CB,
            native.handle,
        )
    )


def _subscription_not_added(client: ClientNative, native: SubscriptionNative, late_callbacks_possible: bool) -> None:
    """Undo a subscription add that failed. A registration that failed for good can call no callback, so its handle
    is dropped; after a timeout a late registration still could, so the handle then stays alive until the client
    closes."""
    with native.images_lock:
        native.closed = True
    if not late_callbacks_possible:
        client.closing.pop(id(native), None)
    native.close_images()


def _subscription_added(client: ClientNative, native: SubscriptionNative, ptr: Any, what: str) -> Subscription:
    """Adopt the C subscription the driver confirmed."""
    lib = get_lib()
    constants = ffi.new("aeron_subscription_constants_t *")
    lib.aeron_subscription_constants(ptr, constants)
    native.registration_id = int(constants.registration_id)
    with client.lock:
        native.ptr = ptr
        client.closing.pop(id(native), None)
        client.children[id(native)] = native
        if client.closed:
            native.close()
            raise NativeAeronError(f"{what}: client closed while adding")
    return Subscription(native)


class PendingSubscription(_PendingAdd[Subscription]):
    """A subscription being added (`AeronClient.async_add_subscription`), with no image callbacks."""

    _KIND = "subscription"

    def __init__(self, client: ClientNative, native: SubscriptionNative, what: str, async_add: Any) -> None:
        super().__init__(client, what, async_add)
        self._native = native

    def _adopt(self, ptr: Any) -> Subscription:
        return _subscription_added(self._client, self._native, ptr, self._what)

    def _failed(self) -> None:
        _subscription_not_added(self._client, self._native, late_callbacks_possible=False)
