"""In-process Aeron C media driver (pyaeron.MediaDriver) with the driver settings the archive and its tests need.

pyaeron exposes a few driver settings as keyword arguments; the C driver reads all others from `AERON_*`
environment variables in `aeron_driver_context_init`, which runs inside the MediaDriver constructor. We set those
variables only for the duration of the constructor (under a process-wide lock) and restore them, so one driver's
settings never leak into another's or into child processes.

Where the driver's files go when no directory is given. The driver maps every publication's and image's log
buffers from files in its directory; pyaeron's own default is under `/tmp`, a disk on most hosts, where the kernel
keeps writing dirty log-buffer pages back to the device, competing with the archive's own segment writes. Aeron's
default on Linux is `/dev/shm`, a memory filesystem; we use it too when it is one and has room for the log buffers
(Java's driver warns below ten default-length terms of free space, and a container's `/dev/shm` is often 64 MiB),
and otherwise fall back to the temporary directory with a warning that says why.

Settings. Aeron's defaults for a driver's UDP sockets are small: a 128 KiB `SO_RCVBUF` and receiver window, and at
most four datagrams per `sendmmsg`/`recvmmsg`. On the namespace cluster (a Spark sink publishing 1 KiB rows to an
archive on another host) the archive's receiver sent ~4,000 NAKs per 400 MB: the socket buffer overflowed while
the receiving thread waited for a core, and every loss cost a NAK, a retransmission and a stalled window. Aeron's
own guidance for throughput is larger socket buffers, a receiver window to match and the full I/O vectors, so an
embedded driver asks for those (`default_settings`), within what the host allows (`net.core.rmem_max`/`wmem_max`,
so the C driver never warns about a clamp). Its agent idles as the archive's own agents do (one spin, no yields,
sleeps from 50 us doubling to 1 ms) rather than with Aeron's ten spins and twenty yields from 1 us: an embedded
driver shares its host's cores with Spark and the archive's Python threads; the longest park, and so the worst
case, stays Aeron's 1 ms. Measured on one hop over loopback (`tests/benchmarks/bench_udp_hop.py`, against Aeron's
defaults in the same run): at 20 MB/s each driver spends ~0.6x the CPU per byte; unthrottled, the hop carries 1.35x
the bytes per second at ~0.7x the CPU per byte. An `AERON_*` environment variable or an explicit setting still wins.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import tempfile
import threading as _threading  # the constructor's `threading` parameter shadows the module name
from collections.abc import Collection, Mapping
from typing import Any

import pyaeron

from .ffi import NativeAeronError

__all__ = ["EmbeddedMediaDriver", "default_driver_parent"]

logger = logging.getLogger(__name__)

_ENV_LOCK = _threading.Lock()

SHM_DIR = "/dev/shm"
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
TERM_BUFFER_LENGTH_DEFAULT = 16 * 1024 * 1024
# Java's MediaDriver warns when its directory's file store has less free space than this many default terms.
LOW_STORAGE_TERMS = 10
_driver_ordinal = itertools.count()


def filesystem_type(path: str, mounts_file: str = "/proc/mounts") -> str | None:
    """The type of the filesystem `path` lives on (its longest mount point prefix in /proc/mounts), if known."""
    target = os.path.realpath(path)
    best, best_type = "", None
    try:
        with open(mounts_file) as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, best_type = point, fields[2]
    except OSError:
        return None
    return best_type


def default_driver_parent(
    term_length: int | None = None, *, shm_dir: str = SHM_DIR, mounts_file: str = "/proc/mounts"
) -> tuple[str, str | None]:
    """`(parent directory, why not shm)` for an embedded driver's directory: shm when it is a roomy memory fs.

    The reason is None when `shm_dir` is used; otherwise it says what was wrong with it, for the caller's warning.
    """
    if term_length is None:
        term_length = int(os.environ.get("AERON_TERM_BUFFER_LENGTH", TERM_BUFFER_LENGTH_DEFAULT))
    needed = LOW_STORAGE_TERMS * max(term_length, TERM_BUFFER_LENGTH_DEFAULT)
    if not (os.path.isdir(shm_dir) and os.access(shm_dir, os.W_OK)):
        return tempfile.gettempdir(), f"{shm_dir} is not a writable directory"
    fs_type = filesystem_type(shm_dir, mounts_file)
    if fs_type not in MEMORY_FILESYSTEMS:
        return tempfile.gettempdir(), f"{shm_dir} is not a memory filesystem (type {fs_type or 'unknown'})"
    stats = os.statvfs(shm_dir)
    free = stats.f_bavail * stats.f_frsize
    if free < needed:
        return tempfile.gettempdir(), (
            f"{shm_dir} has {free >> 20} MiB free, less than the {needed >> 20} MiB of ten terms of log buffers"
        )
    return shm_dir, None


def default_driver_dir(prefix: str = "aeron-archive", term_length: int | None = None) -> str:
    """A new, unique driver directory path under `default_driver_parent`, warning when it is not on shm."""
    parent, why_not = default_driver_parent(term_length)
    if why_not is not None:
        logger.warning(
            "media driver files go to %s, a disk on most hosts (the kernel then writes log buffers back to it): %s; "
            "give the driver a memory filesystem with room for its log buffers, or pass its directory explicitly",
            parent,
            why_not,
        )
    name = f"{prefix}-{os.getuid()}-{os.getpid()}-{next(_driver_ordinal)}-{secrets.token_hex(3)}"
    return os.path.join(parent, name)


# Asked for by every embedded driver unless set otherwise (see the module docstring).
SOCKET_BUFFER_LENGTH = 2 * 1024 * 1024
RECEIVER_WINDOW_LENGTH = 1024 * 1024
IO_VECTOR_CAPACITY = 16  # the C driver's maximum for both directions and for messages per send
SHARED_IDLE_STRATEGY_ARGS = "1-0-50us-1ms"  # backoff: max spins, max yields, min park, max park


def _sysctl_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# Settings that only make sense together: where the environment or the caller sets one of a group, the defaults
# of the whole group are left out. The C driver refuses to start with a receiver window larger than the receive
# buffer it got, and reads the idle strategy's arguments in the strategy's own format (a `sleep-ns` strategy
# with backoff's arguments fails), so a user's `AERON_SOCKET_SO_RCVBUF=131072` or `AERON_SHARED_IDLE_STRATEGY=
# sleep-ns` must not meet our window or our backoff arguments.
COUPLED_SETTINGS = (
    frozenset({"AERON_SOCKET_SO_RCVBUF", "AERON_RCV_INITIAL_WINDOW_LENGTH"}),
    frozenset({"AERON_SHARED_IDLE_STRATEGY", "AERON_SHARED_IDLE_STRATEGY_INIT_ARGS"}),
)


def default_settings(sysctl_dir: str = "/proc/sys/net/core", given: Collection[str] = ()) -> dict[str, int | str]:
    """The C driver settings of an embedded driver, by `AERON_*` environment variable name (module docstring).

    `given` names the settings the environment or the caller sets: those, and the rest of their group in
    `COUPLED_SETTINGS`, are left out.

    Socket buffers of `SOCKET_BUFFER_LENGTH`, lowered to the host's `rmem_max`/`wmem_max` (per network namespace)
    where those are smaller: the C driver warns when the kernel clamps what it asked for. The receiver's window
    (how far a sender may run ahead of what this host's subscribers consumed) is half the receive buffer, so a
    full window's burst fits in it, between Aeron's 128 KiB and `RECEIVER_WINDOW_LENGTH`, and never above the
    buffer itself.
    """
    settings: dict[str, int | str] = {}
    for name, limit in (("AERON_SOCKET_SO_RCVBUF", "rmem_max"), ("AERON_SOCKET_SO_SNDBUF", "wmem_max")):
        allowed = _sysctl_int(os.path.join(sysctl_dir, limit))
        settings[name] = SOCKET_BUFFER_LENGTH if allowed is None else min(SOCKET_BUFFER_LENGTH, allowed)
    rcvbuf = int(settings["AERON_SOCKET_SO_RCVBUF"])
    settings["AERON_RCV_INITIAL_WINDOW_LENGTH"] = min(RECEIVER_WINDOW_LENGTH, max(128 * 1024, rcvbuf // 2), rcvbuf)
    settings["AERON_RECEIVER_IO_VECTOR_CAPACITY"] = IO_VECTOR_CAPACITY
    settings["AERON_SENDER_IO_VECTOR_CAPACITY"] = IO_VECTOR_CAPACITY
    settings["AERON_NETWORK_PUBLICATION_MAX_MESSAGES_PER_SEND"] = IO_VECTOR_CAPACITY
    settings["AERON_SHARED_IDLE_STRATEGY"] = "backoff"
    settings["AERON_SHARED_IDLE_STRATEGY_INIT_ARGS"] = SHARED_IDLE_STRATEGY_ARGS
    left_out = set(given)
    for group in COUPLED_SETTINGS:
        if group & left_out:
            left_out |= group
    return {name: value for name, value in settings.items() if name not in left_out}


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
        given = {name for name in os.environ if name.startswith("AERON_")} | set(settings or {})
        env: dict[str, str] = {name: _env_value(value) for name, value in default_settings(given=given).items()}
        env["AERON_TERM_BUFFER_SPARSE_FILE"] = _env_value(term_buffer_sparse_file)
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
        if aeron_dir is None:
            aeron_dir = default_driver_dir(term_length=term_buffer_length)
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
