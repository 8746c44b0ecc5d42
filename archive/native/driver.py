"""In-process Aeron C media driver (pyaeron.MediaDriver) with the driver settings the archive and its tests need.

pyaeron exposes a few driver settings as keyword arguments; the C driver reads all others from `AERON_*`
environment variables in `aeron_driver_context_init`, which runs inside the MediaDriver constructor. We set those
variables only for the duration of the constructor (under a process-wide lock) and restore them, so one driver's
settings never leak into another's or into child processes.
"""

from __future__ import annotations

import logging
import os
import threading as _threading  # the constructor's `threading` parameter shadows the module name
from collections.abc import Mapping
from typing import Any

import pyaeron

from .ffi import NativeAeronError

__all__ = ["EmbeddedMediaDriver"]

logger = logging.getLogger(__name__)

_ENV_LOCK = _threading.Lock()


def _env_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class EmbeddedMediaDriver:
    """An Aeron C media driver running on threads of this process.

    `settings` maps extra C driver environment variable names (e.g. "AERON_TIMER_INTERVAL",
    "AERON_PUBLICATION_LINGER_TIMEOUT") to values; they apply to this driver only.
    """

    def __init__(
        self,
        aeron_dir: str | None = None,
        *,
        threading: str = "shared",
        spies_simulate_connection: bool = True,
        term_buffer_sparse_file: bool = True,
        term_buffer_length: int | None = None,
        ipc_term_buffer_length: int | None = None,
        mtu_length: int | None = None,
        dir_delete_on_start: bool = False,
        dir_delete_on_shutdown: bool = True,
        settings: Mapping[str, str | int | bool] | None = None,
    ) -> None:
        env: dict[str, str] = {"AERON_TERM_BUFFER_SPARSE_FILE": _env_value(term_buffer_sparse_file)}
        if term_buffer_length is not None:
            env["AERON_TERM_BUFFER_LENGTH"] = _env_value(term_buffer_length)
        for name, value in (settings or {}).items():
            if not name.startswith("AERON_"):
                raise ValueError(f"driver setting {name!r} is not an AERON_* environment variable")
            env[name] = _env_value(value)
        kwargs: dict[str, Any] = {
            "threading": threading,
            "spies_simulate_connection": spies_simulate_connection,
            "dir_delete_on_start": dir_delete_on_start,
            "dir_delete_on_shutdown": dir_delete_on_shutdown,
        }
        if aeron_dir is not None:
            kwargs["dir"] = str(aeron_dir)
        if ipc_term_buffer_length is not None:
            kwargs["ipc_term_buffer_length"] = int(ipc_term_buffer_length)
        if mtu_length is not None:
            kwargs["mtu_length"] = int(mtu_length)
        with _ENV_LOCK:
            saved = {name: os.environ.get(name) for name in env}
            os.environ.update(env)
            try:
                self._driver: Any = pyaeron.MediaDriver(**kwargs)
            except pyaeron.AeronError as exc:
                raise NativeAeronError(f"starting media driver in {aeron_dir!r}: {exc}") from exc
            finally:
                for name, previous in saved.items():
                    if previous is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = previous
        self._aeron_dir = str(self._driver.dir)
        self._closed = False
        self._close_lock = _threading.Lock()
        logger.debug("embedded media driver started in %s (%s threading)", self._aeron_dir, threading)

    def __enter__(self) -> EmbeddedMediaDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedMediaDriver({self._aeron_dir!r}, closed={self._closed})"

    @property
    def aeron_dir(self) -> str:
        return self._aeron_dir

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop the driver (and delete its directory if configured); idempotent. Close clients first."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._driver.close()
        logger.debug("embedded media driver in %s closed", self._aeron_dir)
