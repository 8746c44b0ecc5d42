"""The one owner of this process's Aeron clients and archive control sessions (`ConnectionPool`).

Why one owner: every remote read and write needs a media driver, an Aeron client on it and an archive control
session (`AeronArchive`). A client costs tens of milliseconds to create, an embedded driver far more, and a control
session a connect handshake (a response publication set up by the archive, an authentication round trip), while
a Spark Python worker runs many tasks in a row (`spark.python.worker.reuse`) and the driver plans every
micro-batch. So the driver-side planner (`archive.tables.recording_source`), executor replays
(`archive.client.replay`) and the sink's commit (`connector.sink.committer`) all take their clients and
sessions from here, and nothing else in `archive.tables` or the connector creates either. The shape follows
Spark's Kafka connector (`InternalKafkaConsumerPool`): a keyed pool with a soft capacity, an idle timeout, and
invalidation of whatever was in use when an error happened.

Clients: ONE `AeronClient` per media driver per process, created on first use and shared by everything in the
process (the C client is thread-safe; publications and subscriptions are added through it per use).

Which driver, for an `aeronDir` option (else $AERON_DIR, else Aeron's default directory):
- the driver in that directory if one is active there (its CnC file exists and its heartbeat is fresh);
- otherwise ONE embedded C media driver started in this process, in a private directory
  (`<shm or tmp>/aeron-spark-executor-<uid>-<pid>`), deleted on shutdown. Callers that can only work on the
  host's driver (the planner, which reads the archive's counters, and the sink, whose publications the archive
  must see) pass `host_driver_only=True` and get `NoMediaDriverError` ("no media driver at aeronDir=...") instead.

Sessions: an `AeronArchive` is NOT thread-safe and a replay keeps its session busy for the whole read, so sessions
are *leased*, one caller at a time (`with pool.archive(options, purpose="replay") as archive:`): two concurrent
leases of the same options get two sessions, and a returned session is handed to the next lease for the same
key. The key (`SessionKey`) is what a session depends on: the driver it runs on, the control channel and stream,
the control response channel and stream, and the message timeout; never the replay channel, which each replay
names in its own request. Returned sessions wait idle:
- at most `capacity` of them (default 64, like `spark.kafka.consumer.cache.capacity`; the oldest idle ones are
  closed first; leased sessions are not limited, so the capacity is a soft limit on what the pool keeps);
- for at most `idle_timeout_s` (default 5 minutes, like `spark.kafka.consumer.cache.timeout`): each idle session
  holds a control session and a response publication in the archive, which also keeps pinging it. Expired ones
  are closed whenever the pool is used (lease or return), so no evictor thread is needed;
- a lease that ends with an exception closes its session instead of returning it (after an error its state is
  unknown: a request may be half answered), except for the exception types the caller names in `keep_on`; a
  lease of an idle session first polls it once, and a session whose archive or driver went away is replaced.
  The lessee's `recording_signal_consumer` is installed for the lease only.

Fork: a forked child (multiprocessing 'fork', PySpark's daemon forking its workers) inherits the parent's objects
but not the threads behind them, and they are the parent's: the child forgets them and opens its own on first
use. It never closes them, not even by dropping the last reference: the embedded driver's destructor would shut
the PARENT's driver down and delete its directory, and the C client's close belongs to the parent too. So
inherited objects are abandoned (`archive.native.fork.abandon_after_fork`). The pool's lock is replaced in the
child (another thread may have held it at the fork). At interpreter exit every pool of this process closes its
sessions, clients and embedded driver (one atexit hook).

Hosts: a remote archive (a UDP control channel) is reached from whatever media driver this host has, else from
the process's embedded driver (`host.requires_host_driver` is true only for an IPC control channel), so a Spark
driver host with no media driver of its own works as executors do. The response channel is made concrete for this
host (`host.localize_channel`) before the session's subscription binds it. For an archive on the same host,
`aeron:ipc` avoids the network stack altogether (both sides must then use the same driver: set `aeronDir`).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive, RecordingSignalEvent
from aeron_archive_spark.archive.client.connection import ConnectionOptions, default_aeron_dir
from aeron_archive_spark.archive.client.host import driver_active, localize_channel
from aeron_archive_spark.archive.client.response_replay import is_response_channel
from aeron_archive_spark.archive.native import (
    AeronClient,
    EmbeddedMediaDriver,
    abandon_after_fork,
    default_driver_parent,
)

log = logging.getLogger(__name__)

# A driver whose heartbeat is older than this is considered dead (Aeron's default driver timeout).
# Idle sessions kept per process, and how long one may wait idle (Spark's Kafka consumer cache defaults).
DEFAULT_CAPACITY = 64
DEFAULT_IDLE_TIMEOUT_S = 300.0
# The process-wide pool's settings, from the environment: executors get them with Spark's
# `spark.executorEnv.<NAME>` (and `spark.yarn.appMasterEnv.<NAME>` / the driver's own environment for the driver),
# as Python workers cannot read Spark's configuration.
CAPACITY_ENV = "AERON_ARCHIVE_SPARK_POOL_CAPACITY"
IDLE_TIMEOUT_ENV = "AERON_ARCHIVE_SPARK_POOL_IDLE_TIMEOUT_S"

SignalConsumer = Callable[[RecordingSignalEvent], None]


class NoMediaDriverError(ConnectionError):
    """No active media driver in the directory, and the caller cannot use an embedded one."""

    def __init__(self, aeron_dir: str) -> None:
        super().__init__(f"no media driver at aeronDir={aeron_dir}")
        self.aeron_dir = aeron_dir


class ArchiveConnectError(ConnectionError):
    """A control session could not be opened; the text names the archive's control channel and the driver."""

    def __init__(self, options: ConnectionOptions, reason: BaseException | str) -> None:
        super().__init__(f"cannot reach the {options.describe()}: {reason}")
        self.options = options
        self.reason = str(reason)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """What an archive control session depends on; sessions are only shared between leases of equal keys."""

    aeron_dir: str  # the directory of the driver the session's client runs on (host or embedded)
    control_channel: str
    control_stream_id: int
    control_response_channel: str  # as given: `0.0.0.0` is localized when the session is created
    control_response_stream_id: int
    message_timeout_ms: int
    # Sessions authenticated with different secrets are never shared: keyed on a process-keyed hash of the
    # credentials ("" without any), never the secret (`ConnectionOptions.credentials_digest`).
    credentials_digest: str = ""

    @classmethod
    def of(cls, options: ConnectionOptions, driver_dir: str) -> SessionKey:
        return cls(
            driver_dir,
            options.control_channel,
            options.control_stream_id,
            options.control_response_channel,
            options.control_response_stream_id,
            options.message_timeout_ms,
            options.credentials_digest,
        )


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A snapshot: Aeron clients, idle and leased sessions, and the embedded driver's directory (None if none)."""

    clients: int
    idle: int
    leased: int
    embedded_driver_dir: str | None


@dataclass(slots=True)
class _Idle:
    key: SessionKey
    archive: AeronArchive
    since: float


class ArchiveLease:
    """One caller's exclusive use of a control session; a context manager (`with pool.archive(...) as a:`).

    The session is taken (or connected) on `acquire()` / `__enter__`, and handed back on `release()` / `__exit__`:
    returned to the pool, or closed if the lease ended with an exception not in `keep_on` or `discard()` was
    called. Acquire and release may also be called directly when a lease spans several methods (a replay read).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        options: ConnectionOptions,
        purpose: str,
        host_driver_only: bool,
        recording_signal_consumer: SignalConsumer | None,
        keep_on: tuple[type[BaseException], ...],
    ) -> None:
        self._pool = pool
        self.options = options
        self.purpose = purpose
        self._host_driver_only = host_driver_only
        self._consumer = recording_signal_consumer
        self._keep_on = keep_on
        self._archive: AeronArchive | None = None
        self._key: SessionKey | None = None
        self._pid = os.getpid()
        self._done = False

    @property
    def archive(self) -> AeronArchive:
        if self._archive is None:
            raise RuntimeError("archive lease is not acquired")
        return self._archive

    @property
    def acquired(self) -> bool:
        return self._archive is not None

    def acquire(self) -> AeronArchive:
        """The leased session (taken from the pool or connected now); idempotent while the lease is held.

        Raises `NoMediaDriverError` (host driver required but none active) or `ArchiveConnectError`.
        """
        if self._archive is not None:
            return self._archive
        if self._done:
            raise RuntimeError("archive lease was already released")
        self._pid = os.getpid()
        archive, key = self._pool._take(self.options, self.purpose, self._host_driver_only)
        archive.recording_signal_consumer = self._consumer
        self._archive, self._key = archive, key
        return archive

    def release(self, *, evict: bool = False) -> None:
        """Hand the session back (closed instead if `evict`); idempotent."""
        archive, self._archive = self._archive, None
        self._done = True
        if archive is None or self._key is None:
            return
        archive.recording_signal_consumer = None
        self._pool._give_back(self._key, archive, evict, self._pid)

    def discard(self) -> None:
        """End the lease and close the session: the caller saw it fail."""
        self.release(evict=True)

    def __enter__(self) -> AeronArchive:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release(evict=exc is not None and not isinstance(exc, self._keep_on))


class ConnectionPool:
    """Aeron clients (one per driver) and leased archive control sessions of one process (module docstring).

    Use the process-wide instance, `connection_pool()`; tests may build their own (`clock` is injectable so idle
    timeouts can be tested without waiting). Thread-safe: one lock guards the pool's state and is never held
    across an archive request, a connect handshake or the start of a client or driver (those are serialised by a
    second lock, so leases of existing clients go on meanwhile). With `evict_in_background` (the process-wide
    pool) a daemon thread closes expired idle sessions even while nothing uses the pool, as the Kafka pool's
    evictor does; otherwise they are closed whenever the pool is used.
    """

    _ordinals = itertools.count()

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        evict_in_background: bool = False,
    ) -> None:
        self._check_settings(capacity, idle_timeout_s)
        self._capacity = capacity
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._ordinal = next(self._ordinals)
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()  # starting drivers and clients, one at a time, outside `_lock`
        self._evict_in_background = evict_in_background
        self._evictor: threading.Thread | None = None
        self._evictor_stop = threading.Event()
        self._pid = os.getpid()
        self._clients: dict[str, AeronClient] = {}  # by the directory of the driver they run on
        self._routes: dict[str, str] = {}  # requested aeron dir -> directory of the driver used for it
        self._driver: EmbeddedMediaDriver | None = None
        self._idle: list[_Idle] = []  # in the order they were returned: oldest first
        self._leased: dict[int, AeronArchive] = {}  # by id(archive)
        _POOLS.add(self)

    # -- settings ---------------------------------------------------------------------------------------------

    @staticmethod
    def _check_settings(capacity: int, idle_timeout_s: float) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if idle_timeout_s < 0:
            raise ValueError(f"idle_timeout_s must be >= 0, got {idle_timeout_s}")

    @property
    def capacity(self) -> int:
        """How many idle sessions the pool keeps (the oldest beyond it are closed)."""
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        with self._lock:
            self._check_settings(value, self._idle_timeout_s)
            self._capacity = value
        self.evict_idle()

    @property
    def idle_timeout_s(self) -> float:
        """How long a returned session may wait idle before the pool closes it."""
        return self._idle_timeout_s

    @idle_timeout_s.setter
    def idle_timeout_s(self, value: float) -> None:
        with self._lock:
            self._check_settings(self._capacity, value)
            self._idle_timeout_s = value
        self.evict_idle()

    # -- clients ----------------------------------------------------------------------------------------------

    def client(self, aeron_dir: str | None = None, *, host_driver_only: bool = False) -> AeronClient:
        """This process's client for `aeron_dir` (None: $AERON_DIR / default), created on first use.

        On the driver active in that directory, else on this process's embedded driver (started now if needed);
        with `host_driver_only` raises `NoMediaDriverError` instead of using an embedded driver. Not to be closed
        by the caller.
        """
        self._check_fork()
        return self._client(os.path.normpath(aeron_dir or default_aeron_dir()), host_driver_only)

    def _client(self, requested: str, host_driver_only: bool) -> AeronClient:
        with self._lock:
            client = self._routed_client_locked(requested, host_driver_only)
        if client is not None:
            return client
        with self._create_lock:
            with self._lock:  # another thread may have created it while this one waited
                client = self._routed_client_locked(requested, host_driver_only)
                driver = self._driver
            if client is not None:
                return client
            if driver_active(requested):
                directory = requested
            elif host_driver_only:
                raise NoMediaDriverError(requested)
            else:
                if driver is None or driver.is_closed:
                    driver = self._start_embedded_driver()
                    log.info(
                        "no media driver active in %s: started an embedded media driver in %s for process %d",
                        requested,
                        driver.aeron_dir,
                        os.getpid(),
                    )
                    with self._lock:
                        self._driver = driver
                directory = driver.aeron_dir
            with self._lock:
                client = self._clients.get(directory)
            if client is None or client.is_closed:
                client = AeronClient(directory, client_name=f"aeron-archive-spark-{os.getpid()}")
            with self._lock:
                self._clients[directory] = client
                self._routes[requested] = directory
            return client

    def _routed_client_locked(self, requested: str, host_driver_only: bool) -> AeronClient | None:
        """The live client `requested` was routed to before, if any (and acceptable to `host_driver_only`)."""
        directory = self._routes.get(requested)
        if directory is None or (host_driver_only and directory != requested):
            return None  # not seen yet, or routed to the embedded driver earlier: look for a host driver again
        client = self._clients.get(directory)
        if client is not None and client.is_closed:
            log.warning("Aeron client on %s was closed (driver timeout?); reconnecting", directory)
            del self._clients[directory]
            return None
        return client

    def embedded_driver_dir(self) -> str | None:
        """Directory of this pool's embedded media driver, or None if none runs."""
        self._check_fork()
        with self._lock:
            return None if self._driver is None or self._driver.is_closed else self._driver.aeron_dir

    def _start_embedded_driver(self) -> EmbeddedMediaDriver:
        base, why_not = default_driver_parent()
        if why_not is not None:
            log.warning("embedded media driver files go to %s: %s", base, why_not)
        name = f"aeron-spark-executor-{os.getuid()}-{os.getpid()}" + (f"-{self._ordinal}" if self._ordinal else "")
        # dir_delete_on_start: a directory left by a killed worker with a recycled pid is stale by construction.
        return EmbeddedMediaDriver(os.path.join(base, name), dir_delete_on_start=True, dir_delete_on_shutdown=True)

    # -- sessions ---------------------------------------------------------------------------------------------

    def archive(
        self,
        options: ConnectionOptions,
        *,
        purpose: str = "archive",
        host_driver_only: bool = False,
        recording_signal_consumer: SignalConsumer | None = None,
        keep_on: tuple[type[BaseException], ...] = (),
    ) -> ArchiveLease:
        """A lease of a control session for `options` (taken when entered): `with pool.archive(o) as archive:`.

        `purpose` names new sessions ("aeron-archive-spark-<purpose>") and log lines; `host_driver_only` refuses
        the embedded driver fallback; `recording_signal_consumer` receives signals during the lease;
        `keep_on`: exception types that end the lease without closing the session.
        """
        return ArchiveLease(self, options, purpose, host_driver_only, recording_signal_consumer, keep_on)

    def _take(
        self, options: ConnectionOptions, purpose: str, host_driver_only: bool
    ) -> tuple[AeronArchive, SessionKey]:
        self._check_fork()
        requested = os.path.normpath(options.resolved_aeron_dir())
        try:
            client = self._client(requested, host_driver_only)
        except NoMediaDriverError:
            raise
        except Exception as ex:
            raise ArchiveConnectError(options, ex) from ex
        key = SessionKey.of(options, client.aeron_dir)
        while True:
            with self._lock:
                stale = self._expire_locked()
                candidate = self._pop_idle_locked(key)
                if candidate is not None:
                    self._leased[id(candidate)] = candidate
            _close_all(stale)
            if candidate is None:
                break
            if _usable(candidate):
                log.debug("archive session %d reused for %s", candidate.control_session_id, purpose)
                return candidate, key
            with self._lock:
                self._leased.pop(id(candidate), None)
            _close_all([candidate])
        try:
            archive = AeronArchive.connect(
                control_request_channel=key.control_channel,
                control_request_stream_id=key.control_stream_id,
                control_response_channel=localize_channel(key.control_response_channel, key.control_channel),
                control_response_stream_id=key.control_response_stream_id,
                aeron=client,
                message_timeout_s=key.message_timeout_ms / 1000.0,
                client_name=f"aeron-archive-spark-{purpose}",
                credentials=options.encoded_credentials or None,
            )
        except Exception as ex:
            raise ArchiveConnectError(options, _with_response_hint(ex, key.control_response_channel)) from ex
        log.debug("archive session %d opened for %s on %s", archive.control_session_id, purpose, key)
        with self._lock:
            self._leased[id(archive)] = archive
        return archive, key

    def _give_back(self, key: SessionKey, archive: AeronArchive, evict: bool, lease_pid: int) -> None:
        if os.getpid() != lease_pid:
            abandon_after_fork(archive)  # a lease inherited through fork: the parent's session, never closed here
            return
        self._check_fork()
        with self._lock:
            known = self._leased.pop(id(archive), None) is not None
            keep = known and not evict
            if keep:
                self._idle.append(_Idle(key, archive, self._clock()))
                self._start_evictor_locked()
            stale = self._expire_locked() + self._trim_locked()
        if not keep:
            log.debug(
                "archive session %d closed at the end of its lease (%s)",
                archive.control_session_id,
                "error" if evict else "pool closed meanwhile",
            )
            stale.append(archive)
        _close_all(stale)

    def _pop_idle_locked(self, key: SessionKey) -> AeronArchive | None:
        for i in range(len(self._idle) - 1, -1, -1):  # the most recently returned: the warmest
            if self._idle[i].key == key:
                return self._idle.pop(i).archive
        return None

    def _expire_locked(self) -> list[AeronArchive]:
        now = self._clock()
        expired = [i.archive for i in self._idle if now - i.since >= self._idle_timeout_s]
        if expired:
            self._idle = [i for i in self._idle if now - i.since < self._idle_timeout_s]
            log.debug("closing %d archive sessions idle for %.0fs or more", len(expired), self._idle_timeout_s)
        return expired

    def _trim_locked(self) -> list[AeronArchive]:
        excess = len(self._idle) - self._capacity
        if excess <= 0:
            return []
        oldest, self._idle = self._idle[:excess], self._idle[excess:]
        return [i.archive for i in oldest]

    def evict_idle(self) -> int:
        """Close idle sessions past the idle timeout or beyond the capacity now; returns how many were closed."""
        self._check_fork()
        with self._lock:
            stale = self._expire_locked() + self._trim_locked()
        _close_all(stale)
        return len(stale)

    def _start_evictor_locked(self) -> None:
        if not self._evict_in_background or (self._evictor is not None and self._evictor.is_alive()):
            return
        self._evictor_stop = threading.Event()
        self._evictor = threading.Thread(
            target=_evict_until_stopped,
            args=(weakref.ref(self), self._evictor_stop),
            name=f"aeron-archive-pool-evictor-{self._ordinal}",
            daemon=True,
        )
        self._evictor.start()

    def stats(self) -> PoolStats:
        self._check_fork()
        with self._lock:
            driver = None if self._driver is None or self._driver.is_closed else self._driver.aeron_dir
            return PoolStats(len(self._clients), len(self._idle), len(self._leased), driver)

    # -- lifecycle --------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close idle sessions, clients and the embedded driver (at exit; tests too). The pool stays usable.

        Sessions leased now are closed when their lease ends; their publications and subscriptions close with
        their client here.
        """
        self._check_fork()
        with self._lock:
            self._evictor_stop.set()
            self._evictor = None
            idle = [i.archive for i in self._idle]
            self._idle.clear()
            self._leased.clear()  # unknown at release: closed then, not returned
            clients = list(self._clients.values())
            self._clients.clear()
            self._routes.clear()
            driver, self._driver = self._driver, None
        _close_all(idle)
        for client in clients:
            try:
                client.close()
            except Exception as ex:
                log.warning("closing Aeron client on %s: %s", client.aeron_dir, ex)
        if driver is not None:
            try:
                driver.close()
            except Exception as ex:
                log.warning("closing the embedded media driver in %s: %s", driver.aeron_dir, ex)

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            self._after_fork_in_child()  # fork without the at-fork hook (e.g. a C-level fork)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's objects without closing them (module docstring, "Fork")."""
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        self._evictor = None  # the parent's thread does not exist here; started again on demand
        self._evictor_stop = threading.Event()
        inherited: list[object] = [*self._clients.values(), *(i.archive for i in self._idle), *self._leased.values()]
        if self._driver is not None:
            inherited.append(self._driver)
        abandon_after_fork(*inherited)
        self._clients, self._routes, self._idle, self._leased = {}, {}, [], {}
        self._driver = None
        self._pid = os.getpid()


# -- helpers ------------------------------------------------------------------------------------------------------


def _with_response_hint(ex: Exception, response_channel: str) -> Exception | str:
    """A failed connect over a response channel (option responseChannels) says what that needs: an archive that
    answers on one (ours; Java's from 1.46, older ones never answer) and its `control` port reachable."""
    if not is_response_channel(response_channel):
        return ex
    return (
        f"{ex} (the archive answers over the response channel {response_channel} (option responseChannels): it "
        "needs an archive with response channels (ours; Java's from 1.46), free to bind that control address on "
        "its host, and that port reachable from this host)"
    )


def _usable(archive: AeronArchive) -> bool:
    """Poll an idle session once: signals and pings are drained; a closed, disconnected or failed one is not usable."""
    try:
        archive.poll_for_recording_signals()
        return not archive.aeron.is_closed
    except Exception as ex:
        log.info("idle archive session %d is unusable (%s); opening another", archive.control_session_id, ex)
        return False


def _evict_until_stopped(pool_ref: weakref.ref[ConnectionPool], stop: threading.Event) -> None:
    """The background evictor: every so often (a tenth of the idle timeout, 1 to 30 s) close expired idle sessions.

    Holds the pool weakly, so a pool nobody uses any more can still be collected; ends when the pool closes.
    """
    while True:
        pool = pool_ref()
        if pool is None:
            return
        interval = min(30.0, max(1.0, pool.idle_timeout_s / 10))
        del pool
        if stop.wait(interval):
            return
        pool = pool_ref()
        if pool is None:
            return
        try:
            pool.evict_idle()
        except Exception as ex:  # keep evicting later; the next lease also closes expired sessions
            log.warning("evicting idle archive sessions: %s", ex)
        del pool


def _close_all(archives: list[AeronArchive]) -> None:
    for archive in archives:
        try:
            archive.close()
        except Exception as ex:
            log.debug("closing archive session %d: %s", archive.control_session_id, ex)


def settings_from_env(environ: Mapping[str, str]) -> tuple[int, float]:
    """(capacity, idle timeout in seconds) from `CAPACITY_ENV` / `IDLE_TIMEOUT_ENV`, else the defaults."""
    capacity, idle_timeout_s = DEFAULT_CAPACITY, DEFAULT_IDLE_TIMEOUT_S
    raw = environ.get(CAPACITY_ENV)
    if raw is not None:
        try:
            capacity = int(raw)
        except ValueError:
            capacity = -1
        if capacity < 0:
            raise ValueError(f"{CAPACITY_ENV}={raw!r}: expected a whole number of idle sessions >= 0")
    raw = environ.get(IDLE_TIMEOUT_ENV)
    if raw is not None:
        try:
            idle_timeout_s = float(raw)
        except ValueError:
            idle_timeout_s = -1.0
        if not idle_timeout_s >= 0:  # also NaN
            raise ValueError(f"{IDLE_TIMEOUT_ENV}={raw!r}: expected a number of seconds >= 0")
    return capacity, idle_timeout_s


_POOLS: weakref.WeakSet[ConnectionPool] = weakref.WeakSet()
_PROCESS_POOL: ConnectionPool | None = None
_PROCESS_POOL_LOCK = threading.Lock()


def connection_pool() -> ConnectionPool:
    """The process-wide pool every reader and writer uses, created on first use (settings from the environment)."""
    global _PROCESS_POOL
    pool = _PROCESS_POOL
    if pool is None:
        with _PROCESS_POOL_LOCK:
            if _PROCESS_POOL is None:
                _PROCESS_POOL = ConnectionPool(*settings_from_env(os.environ), evict_in_background=True)
            pool = _PROCESS_POOL
    return pool


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._after_fork_in_child()


def _close_at_exit() -> None:
    for pool in list(_POOLS):
        try:
            pool.close()
        except Exception as ex:
            log.warning("closing connections at exit: %s", ex)


class _ExitOrder:
    """Exists only to make `weakref.finalize` register its own exit hook before `_close_at_exit` is registered."""


# atexit runs hooks last-registered first. weakref.finalize registers its hook (which closes AeronClients still
# alive) when its first finalizer is created, usually later than this import; the clients would then be closed
# before the pool could send its sessions' CloseSessionRequests. Creating a finalizer first fixes the order.
_EXIT_ORDER = _ExitOrder()
weakref.finalize(_EXIT_ORDER, lambda: None)
os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)


# -- driver and address helpers -----------------------------------------------------------------------------------


__all__ = [
    "CAPACITY_ENV",
    "DEFAULT_CAPACITY",
    "DEFAULT_IDLE_TIMEOUT_S",
    "IDLE_TIMEOUT_ENV",
    "ArchiveConnectError",
    "ArchiveLease",
    "ConnectionPool",
    "NoMediaDriverError",
    "PoolStats",
    "SessionKey",
    "connection_pool",
    "settings_from_env",
]
