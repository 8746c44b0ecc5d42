"""Native-side handles: the small objects that own the C pointers, and the lock discipline that keeps them safe.

Every public wrapper keeps its C pointer in a handle guarded by a lock; wrappers only delegate, so finalizers
(`weakref.finalize` on a wrapper) never reference the wrapper itself. Closing takes the handle's lock, so a close
on one thread waits for an in-flight poll/offer on another and can never free memory under it; a close requested
from inside a poll handler (same thread) is deferred until the poll returns (`PollingHandle`).

The closed check is written once, here:

* `NativeHandle.open()` holds the lock for a block and raises `NativeAeronError("<what> is closed")` if the handle
  is closed; it is for operations that cannot mean anything on a closed handle (adds, counter reads and writes).
* `NativeHandle.call()` holds the lock for one call and answers a given value on a closed handle; it is for the
  queries and offers whose documented answer on a closed object is a value (0, False, PUBLICATION_CLOSED, None).

`NativeWrapper` is the base of the public classes; `HandleAttribute` and `HandleQuery` declare their read-only
attributes (a constant of the handle, or the C query of the same name with its closed-object answer) so that the
wrappers spell out what they expose rather than repeat one getter after another.

`ClientNative` lives here rather than in client.py because every other handle registers with the client that
created it (so that closing the client closes them all) and the wrapper modules must not import the client module.
"""

from __future__ import annotations

import logging
import operator
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Never, Self, overload

from .callbacks import BLOCK_CB, FRAGMENT_CB, BlockHandler, FragmentHandler, PollState, on_conductor_thread
from .ffi import NativeAeronError, ffi, get_lib, last_error

__all__ = [
    "POLL_INTERVAL_S",
    "ClientNative",
    "HandleAttribute",
    "HandleQuery",
    "NativeHandle",
    "NativeWrapper",
    "PollingHandle",
]

logger = logging.getLogger(__name__)

# How often synchronous waits on the C client (async adds, endpoint resolution) look again.
POLL_INTERVAL_S = 0.001


class _OpenGuard:
    """The context manager `NativeHandle.open()` returns: one per handle, reused, so a guarded call allocates nothing.

    It keeps no per-entry state, so it nests wherever the handle's lock does (the client's lock is reentrant).
    """

    __slots__ = ("_handle",)

    def __init__(self, handle: NativeHandle) -> None:
        self._handle = handle

    def __enter__(self) -> Any:
        handle = self._handle
        handle.lock.acquire()
        if handle.is_closed_locked():
            handle.lock.release()
            raise NativeAeronError(f"{handle.describe()} is closed")
        return handle.ptr

    def __exit__(self, *exc: object) -> None:
        self._handle.lock.release()


class NativeHandle(ABC):
    """Owns one C pointer (`ptr`, None once closed) behind `lock`; subclasses say what they are in `describe()`.

    `C_PREFIX` names the C API family the pointer belongs to (`aeron_subscription_`, `aeron_image_`, ...).
    """

    C_PREFIX: ClassVar[str]

    def __init__(self, ptr: Any = None, *, reentrant: bool = False) -> None:
        self.ptr: Any = ptr
        self.lock: threading.Lock | threading.RLock = threading.RLock() if reentrant else threading.Lock()
        self._open_guard = _OpenGuard(self)

    @abstractmethod
    def describe(self) -> str:
        """What this handle is, as named in errors: "Aeron client 'x'", "counter 7", "publication('aeron:ipc', 10)"."""

    def is_closed_locked(self) -> bool:
        """Whether the handle is closed; the caller holds `lock`."""
        return self.ptr is None

    @abstractmethod
    def close(self) -> None:
        """Release the C resources (once; later calls do nothing)."""

    def c_function(self, name: str) -> Any:
        """The C function `<C_PREFIX><name>` of this handle's family."""
        return getattr(get_lib(), self.C_PREFIX + name)

    def open(self) -> _OpenGuard:
        """`with handle.open() as ptr:` holds the lock for the block; raises NativeAeronError if the handle is closed.

        The error names the handle ("Aeron client 'x' is closed", "counter 7 is closed").
        """
        return self._open_guard

    def call[R](self, fn: Callable[..., R], *args: Any, closed: R) -> R:
        """`fn(ptr, *args)` under the lock, or `closed` without calling anything if the handle is closed."""
        with self.lock:
            if self.is_closed_locked():
                return closed
            return fn(self.ptr, *args)


class NativeWrapper[H: NativeHandle]:
    """Base of the public wrappers: delegates to its handle `_n`, and closes it on leaving a `with` block.

    Wrappers hold nothing but the handle, so collecting a wrapper never races the handle's own cleanup.
    """

    __slots__ = ("__weakref__", "_n")

    _n: H

    def __init__(self, native: H) -> None:
        self._n = native

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_closed(self) -> bool:
        return self._n.ptr is None

    def close(self) -> None:
        """Close; idempotent."""
        self._n.close()


class HandleAttribute[T]:
    """A read-only wrapper attribute that is the handle's attribute of the same name (one of its constants).

    `session_id = HandleAttribute[int]()` in a wrapper class stands for a property returning `self._n.session_id`.
    """

    def __init__(self, doc: str | None = None) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name
        if type(self) is HandleAttribute:
            # A handle constant is read on hot paths (a replay reads its publication's session id per batch): the
            # class gets a C-level property (attrgetter) in place of this Python descriptor, typed as declared.
            setattr(owner, name, property(operator.attrgetter(f"_n.{name}"), doc=self.__doc__))

    @overload
    def __get__(self, wrapper: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, wrapper: NativeWrapper[Any], owner: type[Any]) -> T: ...

    def __get__(self, wrapper: NativeWrapper[Any] | None, owner: type[Any]) -> Self | T:
        return self if wrapper is None else self.value(wrapper._n)

    def value(self, native: NativeHandle) -> T:
        result: T = getattr(native, self.name)
        return result

    def __set__(self, wrapper: NativeWrapper[Any], value: Never) -> None:
        raise AttributeError(f"{type(wrapper).__name__}.{self.name} is read-only")


class HandleQuery[T](HandleAttribute[T]):
    """A read-only wrapper attribute answered by the handle's C query of the same name, or `closed` once closed.

    `is_connected = HandleQuery(bool, closed=False)` in Subscription stands for a property returning
    `bool(aeron_subscription_is_connected(ptr))` under the handle's lock, or False on a closed subscription.
    """

    def __init__(self, convert: Callable[[Any], T], *, closed: T, doc: str | None = None) -> None:
        super().__init__(doc)
        self.convert = convert
        self.closed = closed
        self.functions: dict[str, Any] = {}  # C_PREFIX -> the resolved C function (they never change)

    def value(self, native: NativeHandle) -> T:
        function = self.functions.get(native.C_PREFIX)
        if function is None:
            function = self.functions[native.C_PREFIX] = native.c_function(self.name)
        return self.convert(native.call(function, closed=self.closed))


class PollingHandle(NativeHandle):
    """A subscription or image: C polls run on it and deliver into its `PollState` through the trampolines.

    The polling thread is marked for the duration of the C call so that a close requested from a handler (same
    thread, lock already held) is only recorded and carried out once the C poll has returned. Subclasses name their
    C family (subscription-wide or per image) and their fragment assembler.
    """

    C_ASSEMBLER: ClassVar[str]  # aeron_<C_ASSEMBLER>_create / _delete / _handler

    def __init__(self, ptr: Any = None) -> None:
        super().__init__(ptr)
        self.polling_thread: int | None = None
        self.close_pending = False
        self.poll_state: PollState | None = None
        self.assembler: Any = ffi.NULL
        # Resolved once: polls are the hot path.
        lib = get_lib()
        self._c_controlled_poll = self.c_function("controlled_poll")
        self._c_block_poll = self.c_function("block_poll")
        self._c_assembler_handler = getattr(lib, f"aeron_{self.C_ASSEMBLER}_handler")

    @abstractmethod
    def close_locked(self) -> None:
        """Release the C resources; the caller holds `lock` and no C poll is running on this handle."""

    def after_unlock(self) -> None:
        """Work that must wait until the lock is released after a close or poll (a subscription closes its images)."""

    @abstractmethod
    def poll_context(self, operation: str) -> str:
        """How a failed poll names itself in its NativeAeronError."""

    def close(self) -> None:
        if self.polling_thread == threading.get_ident():
            self.close_pending = True  # asked from inside a poll handler: finish once the C poll has returned
            return
        with self.lock:
            self.close_locked()
        self.after_unlock()

    def ensure_poll_state(self) -> PollState:
        state = self.poll_state
        if state is None:
            state = self.poll_state = PollState()
        return state

    def delete_assembler(self) -> None:
        if self.assembler != ffi.NULL:
            getattr(get_lib(), f"aeron_{self.C_ASSEMBLER}_delete")(self.assembler)
            self.assembler = ffi.NULL

    def _assembler_for(self, state: PollState) -> Any:
        """The fragment assembler delivering to `state`, created on first fragment poll."""
        if self.assembler == ffi.NULL:
            out = ffi.new(f"aeron_{self.C_ASSEMBLER}_t **")
            if getattr(get_lib(), f"aeron_{self.C_ASSEMBLER}_create")(out, FRAGMENT_CB, state.handle) < 0:
                raise last_error(f"aeron_{self.C_ASSEMBLER}_create")
            self.assembler = out[0]
        return self.assembler

    def fragment_poll(self, handler: FragmentHandler, fragment_limit: int, with_header: bool = True) -> int:
        """Reassembled messages to `handler`; see Subscription.poll."""
        return self._poll(handler, True, fragment_limit, with_header)

    def block_poll(self, handler: BlockHandler, block_length_limit: int) -> int:
        """Blocks of whole frames to `handler`; see Subscription.block_poll and Image.block_poll."""
        return self._poll(handler, False, block_length_limit)

    def _poll(self, handler: Any, fragments: bool, limit: int, with_header: bool = True) -> int:
        """Run one C poll with `handler` installed; 0 once closed. A handler's exception is raised after C returns."""
        with self.lock:
            if self.is_closed_locked():
                return 0
            state = self.ensure_poll_state()
            state.handler = handler
            state.with_header = with_header
            self.polling_thread = threading.get_ident()
            try:
                if fragments:
                    assembler = self._assembler_for(state)
                    rc = int(self._c_controlled_poll(self.ptr, self._c_assembler_handler, assembler, limit))
                else:
                    rc = int(self._c_block_poll(self.ptr, BLOCK_CB, state.handle, limit))
                if rc < 0:
                    raise last_error(self.poll_context("poll" if fragments else "block_poll"))
            finally:
                error = self._end_poll(state)
        self.after_unlock()
        if error is not None:
            raise error
        return rc

    def _end_poll(self, state: PollState) -> BaseException | None:
        """Reset per-poll state; runs a close requested by the handler now that C no longer uses the pointer."""
        state.handler = None
        error, state.error = state.error, None
        self.polling_thread = None
        if self.close_pending:
            self.close_pending = False
            self.close_locked()
        return error


class ClientNative(NativeHandle):
    """Owns aeron_context_t / aeron_t (`ptr`) and the handles created through them; `close()` is idempotent.

    Unlike other handles the client is closed from the moment `close()` starts (`closed`), while `ptr` stays valid
    until `aeron_close` has returned, so that the children closed in between can still close their C objects.
    """

    C_PREFIX = "aeron_"

    def __init__(self, client_name: str, aeron_dir: str, driver_timeout_ms: int) -> None:
        super().__init__(reentrant=True)
        self.client_name = client_name
        self.aeron_dir = aeron_dir
        self.driver_timeout_ms = driver_timeout_ms
        self.client_id = -1  # known once started
        self.context: Any = ffi.NULL
        self.reader: Any = ffi.NULL
        self.closed = False
        self.children: dict[int, NativeHandle] = {}  # id(handle) -> handle
        self.closing: dict[int, NativeHandle] = {}  # kept alive until the conductor confirms the close
        self.last_error: tuple[int, str] | None = None
        self.handle = ffi.new_handle(self)

    def describe(self) -> str:
        return f"Aeron client {self.client_name!r}"

    def is_closed_locked(self) -> bool:
        return self.closed

    def on_error(self, errcode: int, message: str) -> None:
        """The C client's error handler (conductor thread)."""
        self.last_error = (errcode, message)
        logger.error("Aeron client %r error (errcode=%d): %s", self.client_name, errcode, message)

    def adopt[H: NativeHandle](self, child: H) -> H:
        """Register a just-added handle so that closing the client closes it; close it if the client closed first."""
        with self.lock:
            self.children[id(child)] = child
            closed = self.closed
        if closed:
            child.close()
            raise NativeAeronError(f"{self.describe()} closed while adding")
        return child

    def close(self) -> None:
        if on_conductor_thread():
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
        if self.ptr is not None:
            # Joins the conductor thread (GIL released by cffi), after which no callback can run.
            if lib.aeron_close(self.ptr) < 0:
                logger.error("%s", last_error(f"aeron_close({self.client_name!r})"))
            self.ptr = None
        if self.context != ffi.NULL:
            lib.aeron_context_close(self.context)
            self.context = ffi.NULL
        self.reader = ffi.NULL
        self.children.clear()
        self.closing.clear()
