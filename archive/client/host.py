"""What this host is and reaches: its address toward an archive, loopback, and whether a media driver runs here.

The connection pool pools; which address a replay or response channel must name, and whether an archive is on
another host, are questions about the host a process runs on, asked of the routing table and the resolver. The
pure channel rewriting they use lives in `archive.channel`.

Response and replay channels must name an endpoint the archive's host can reach: `localize_channel` turns a
host-relative endpoint into this process's own address before the subscription binds it and the archive is told
it — a `0.0.0.0` host always, and the defaults' `localhost` when the archive is on another host — using the
address the routing table picks toward the archive's control endpoint (each host of a cluster finds its own, with
no per-host setting).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket

from aeron_archive_spark.archive.channel import (
    LOOPBACK_HOSTS,
    WILDCARD_HOST,
    ChannelUri,
    udp_endpoint,
    udp_endpoint_host,
    with_endpoint_host,
)
from aeron_archive_spark.archive.client.connection import ConnectionOptions

log = logging.getLogger(__name__)

# A media driver whose CnC heartbeat is older than this is taken for dead (Aeron's default driver timeout).
DRIVER_LIVENESS_TIMEOUT_MS = 10_000


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


def requires_host_driver(options: ConnectionOptions) -> bool:
    """True if only the host's media driver can reach this archive: its control channel is IPC.

    Over UDP any media driver reaches it, so a process on a host without a media driver (a Spark driver on a
    cluster) uses an embedded one, as executors do.
    """
    try:
        return ChannelUri.parse(options.control_channel).is_ipc
    except Exception:
        return False


def executor_address() -> str:
    """This process's address when nothing better is known: $SPARK_LOCAL_IP, else the host name's address."""
    configured = os.environ.get("SPARK_LOCAL_IP")
    if configured:
        return configured
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether `host` names this host's loopback (by name, or by what it resolves to)."""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def archive_is_remote(control_channel: str) -> bool:
    """True if the archive's control channel is UDP to a host other than this one's loopback."""
    host = udp_endpoint_host(control_channel)
    return host is not None and not is_loopback(host)


def route_address(host: str) -> str | None:
    """The local address this host sends from toward `host` (asks the kernel's routing table; sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return None


def localize_channel(channel: str, toward: str | None = None) -> str:
    """The channel with a host-relative endpoint made concrete for this process, so the archive can reach it.

    `toward` is the archive's control channel. A `0.0.0.0` endpoint host, and a loopback one (the defaults'
    `localhost`) when that archive is on another host, become the address this host sends from toward the
    archive (the routing table's answer); without a UDP archive endpoint, `0.0.0.0` becomes `executor_address()`.
    The subscription binds the result and the archive is told the same endpoint, so the port can stay 0 (resolved
    after binding).
    """
    endpoint = udp_endpoint(channel)
    if endpoint is None:
        return channel
    host = endpoint[0]
    archive = udp_endpoint_host(toward)
    remote_archive = archive is not None and not is_loopback(archive)
    if host != WILDCARD_HOST and not (remote_archive and is_loopback(host.strip("[]"))):
        return channel
    address = (route_address(archive) if archive is not None else None) or executor_address()
    return with_endpoint_host(channel, address)
