"""One Aeron client per executor Python process, on this host's media driver or on one embedded driver.

Why: a remote read (no `archiveDir`) receives its data as an Aeron replay, so the executor needs a media driver and
a client. Creating a client costs tens of milliseconds and a driver far more, while a Spark Python worker runs many
tasks in a row (`spark.python.worker.reuse`), so both are created lazily on first use and kept for the life of the
process (closed at interpreter exit).

Which driver:
- the one in the `aeronDir` option's directory, else $AERON_DIR, else Aeron's default directory, if a driver is
  active there (its CnC file exists and its heartbeat is fresh);
- otherwise ONE embedded C media driver started in this process, in a private directory
  (`<shm or tmp>/aeron-spark-executor-<uid>-<pid>`), deleted on shutdown.

Remote replays over UDP then need a replay endpoint the archive's host can reach: the default
`replayChannel=aeron:udp?endpoint=localhost:0` only works when the archive runs on the executor's host. On a
cluster use `endpoint=0.0.0.0:0` (or the executor interface's address with port 0): the subscription binds an
ephemeral port, the port is resolved with `try_resolve_channel_endpoint_port` before the replay request, and a
`0.0.0.0` host is replaced in the request by this executor's address (`$SPARK_LOCAL_IP`, else the address of its
host name) so the archive knows where to send. The same host rule applies to `controlResponseChannel`. For an
archive on the same host, `aeron:ipc` avoids the network stack altogether (both sides must then use the same
driver: set `aeronDir`).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import tempfile
import threading

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client.connection import default_aeron_dir
from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver

log = logging.getLogger(__name__)

# A driver whose heartbeat is older than this is considered dead (Aeron's default driver timeout).
DRIVER_LIVENESS_TIMEOUT_MS = 10_000
WILDCARD_HOST = "0.0.0.0"

_lock = threading.Lock()
_pid = os.getpid()
_clients: dict[str, AeronClient] = {}
_driver: EmbeddedMediaDriver | None = None


def driver_active(aeron_dir: str) -> bool:
    """True if a media driver runs in `aeron_dir` (a CnC file with a fresh heartbeat)."""
    if not os.path.isfile(os.path.join(aeron_dir, "cnc.dat")):
        return False
    import pyaeron

    try:
        return bool(pyaeron.is_driver_active(aeron_dir, DRIVER_LIVENESS_TIMEOUT_MS))
    except Exception as ex:  # a half-written or foreign CnC file: treat as no driver, with the reason logged
        log.warning("cannot check the media driver in %s: %s", aeron_dir, ex)
        return False


def aeron_client(aeron_dir: str | None = None) -> AeronClient:
    """The process-wide client for `aeron_dir` (None: $AERON_DIR / default), created on first use."""
    global _driver
    requested = aeron_dir or default_aeron_dir()
    with _lock:
        _forget_if_forked()
        client = _clients.get(requested)
        if client is not None and not client.is_closed:
            return client
        if client is not None:
            log.warning("Aeron client on %s was closed (driver timeout?); reconnecting", client.aeron_dir)
        if driver_active(requested):
            directory = requested
        else:
            if _driver is None or _driver.is_closed:
                _driver = _start_embedded_driver()
                log.info("no media driver active in %s: started an embedded media driver in %s for executor "
                         "process %d", requested, _driver.aeron_dir, os.getpid())
            directory = _driver.aeron_dir
        client = AeronClient(directory, client_name=f"aeron-archive-spark-executor-{os.getpid()}")
        _clients[requested] = client
        return client


def embedded_driver_dir() -> str | None:
    """Directory of this process's embedded media driver, or None if none was started."""
    with _lock:
        return None if _driver is None or _driver.is_closed else _driver.aeron_dir


def executor_address() -> str:
    """The address the archive should send to for this executor: $SPARK_LOCAL_IP, else the host name's address."""
    configured = os.environ.get("SPARK_LOCAL_IP")
    if configured:
        return configured
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def localize_channel(channel: str) -> str:
    """Replace a `0.0.0.0` endpoint host by this executor's address, so the archive can reach the endpoint."""
    uri = ChannelUri.parse(channel)
    endpoint = uri.get("endpoint")
    if not uri.is_udp or endpoint is None:
        return channel
    host, sep, port = endpoint.rpartition(":")
    if not sep or host != WILDCARD_HOST:
        return channel
    return str(uri.with_params(endpoint=f"{executor_address()}:{port}"))


def close_executor_aeron() -> None:
    """Close the clients and the embedded driver (at exit; tests may call it too)."""
    global _driver
    with _lock:
        if os.getpid() != _pid:
            _forget_if_forked()
            return
        clients = list(_clients.values())
        _clients.clear()
        driver, _driver = _driver, None
    for client in clients:
        try:
            client.close()
        except Exception as ex:
            log.warning("closing Aeron client on %s: %s", client.aeron_dir, ex)
    if driver is not None:
        driver.close()


def _start_embedded_driver() -> EmbeddedMediaDriver:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    directory = os.path.join(base, f"aeron-spark-executor-{os.getuid()}-{os.getpid()}")
    # dir_delete_on_start: a directory left by a killed worker with a recycled pid is stale by construction.
    return EmbeddedMediaDriver(directory, dir_delete_on_start=True, dir_delete_on_shutdown=True)


def _forget_if_forked() -> None:
    """After fork the parent's client and driver threads do not exist here: drop them (never close them)."""
    global _pid, _driver
    if os.getpid() != _pid:
        _pid = os.getpid()
        _clients.clear()
        _driver = None


atexit.register(close_executor_aeron)
