"""Counters: the ones this client allocates (`Counter`) and a read-only view of every counter in the driver.

Counters live in the driver's CnC file, so a counter added by one client is visible to all through their
`CountersReader` (Aeron Archive's recording position counters are found that way). Unlike the stream objects,
counter reads and writes raise NativeAeronError once closed: there is no value that could stand for "closed".
The reader validates counter ids itself, because the C address helpers do not bounds-check.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..constants import COUNTER_MAX_KEY_LENGTH, COUNTER_MAX_LABEL_LENGTH, COUNTER_RECORD_ALLOCATED
from .callbacks import FOREACH_COUNTER_CB
from .ffi import NativeAeronError, ffi, get_lib, last_error
from .handles import ClientNative, HandleAttribute, NativeHandle, NativeWrapper

__all__ = ["Counter", "CounterInfo", "CounterNative", "CountersReader"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CounterInfo:
    """One allocated counter as seen through a CountersReader; `key` is the full 112-byte key area."""

    counter_id: int
    type_id: int
    registration_id: int
    value: int
    key: bytes
    label: str


class CounterNative(NativeHandle):
    """Owns an aeron_counter_t; its value address stays mapped until the client closes."""

    C_PREFIX = "aeron_counter_"

    def __init__(self, client: ClientNative, ptr: Any) -> None:
        super().__init__(ptr)
        lib = get_lib()
        self.client = client
        self.addr: Any = lib.aeron_counter_addr(ptr)
        constants = ffi.new("aeron_counter_constants_t *")
        if lib.aeron_counter_constants(ptr, constants) < 0:
            raise last_error("aeron_counter_constants")
        self.registration_id = int(constants.registration_id)
        self.counter_id = int(constants.counter_id)

    def describe(self) -> str:
        return f"counter {self.counter_id}"

    def close(self) -> None:
        with self.lock:
            ptr, self.ptr = self.ptr, None
            self.addr = None
        self.client.children.pop(id(self), None)
        if ptr is not None and get_lib().aeron_counter_close(ptr, ffi.NULL, ffi.NULL) < 0:
            logger.error("%s", last_error(f"aeron_counter_close(counter_id={self.counter_id})"))


class Counter(NativeWrapper[CounterNative]):
    """A counter allocated by this client. `set` is a release store; `get` a plain 64-bit (atomic on x86-64) read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Counter(counter_id={self._n.counter_id}, registration_id={self._n.registration_id})"

    counter_id = HandleAttribute[int]()
    registration_id = HandleAttribute[int]()

    def get(self) -> int:
        with self._n.open():
            return int(self._n.addr[0])

    def set(self, value: int) -> None:
        with self._n.open():
            get_lib().aeron_counter_set_release(self._n.addr, value)

    def close(self) -> None:
        """Free the counter in the driver (asynchronously); idempotent."""
        self._n.close()


class CountersReader:
    """Read-only view of all counters in the driver's CnC file, valid until its client closes."""

    __slots__ = ("_client", "_max_counter_id")

    def __init__(self, client: ClientNative) -> None:
        self._client = client
        self._max_counter_id = int(get_lib().aeron_counters_reader_max_counter_id(client.reader))

    @property
    def max_counter_id(self) -> int:
        return self._max_counter_id

    def _reader(self, counter_id: int) -> Any:
        """The C reader, once `counter_id` is checked; the caller holds `self._client.open()`.

        The C address helpers do not bounds-check, so an id outside the counters file must never reach them.
        """
        if not 0 <= counter_id <= self._max_counter_id:
            raise NativeAeronError(f"counter id {counter_id} out of range 0..{self._max_counter_id}")
        return self._client.reader

    def get(self, counter_id: int) -> int:
        with self._client.open():
            return int(get_lib().aeron_counters_reader_addr(self._reader(counter_id), counter_id)[0])

    def _int_field(self, fn: Any, ctype: str, counter_id: int, what: str) -> int:
        out = ffi.new(ctype)
        with self._client.open():
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
        with self._client.open():
            if get_lib().aeron_counters_reader_metadata_key(self._reader(counter_id), counter_id, key_p) < 0:
                raise last_error(f"key({counter_id})")
            return bytes(ffi.buffer(key_p[0], COUNTER_MAX_KEY_LENGTH))

    def label(self, counter_id: int) -> str:
        buffer = ffi.new("char[]", COUNTER_MAX_LABEL_LENGTH + 1)
        with self._client.open():
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
        with self._client.open():
            reader = self._client.reader
            lib.aeron_counters_reader_foreach_counter(reader, FOREACH_COUNTER_CB, handle)
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
        with self._client.open():
            return int(
                get_lib().aeron_counters_reader_find_by_type_id_and_registration_id(
                    self._client.reader, int(type_id), int(registration_id)
                )
            )

    def is_allocated(self, counter_id: int) -> bool:
        return self.state(counter_id) == COUNTER_RECORD_ALLOCATED
