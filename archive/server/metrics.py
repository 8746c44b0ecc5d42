"""Prometheus metrics of a running archive (`serve --metrics-address HOST:PORT`, `ArchiveContext.metrics_address`).

`ArchiveCollector` is a custom collector: nothing is counted twice and nothing runs on the archive's threads; each
scrape reads the state the archive keeps anyway, on the HTTP server's thread. `MetricsServer` is
`prometheus_client`'s own exposition server (text format, OpenMetrics on request, gzip) around it.

What a scrape reads, and why each read is safe against the conductor, recorder and replayer writing it:

- **Counters** (errors, sessions, recorder/replayer bytes and times, cycle times, every `rec-pos`): one snapshot of
  the media driver's counters file (`CountersReader.counters()`), the shared memory Aeron makes for readers in any
  thread or process (AeronStat, `aeron-archive stats`). A counter's value, key and label are read together, so a
  recording's position always comes with its own ids. The conductor publishes the agents' totals at most 1 ms late
  while busy and on its first quiet cycle, as Java's archive does.
- **Catalog** (entries, capacity): `len()` and `capacity`, which `Catalog` answers under its own lock (every
  method is thread-safe) in O(1). No scrape walks the entries: that would hold the lock, hence a recording's start
  or stop on the conductor, for as long as the catalog is big.
- **Retention** (checks, purges, bytes purged, failures): ints the conductor's `RetentionCheck` only increments,
  read without a lock: a read sees a whole int (one reference), at most one check behind.
- **Free space**: `statvfs` of the archive directory, as the conductor's own low-storage check.

Not chosen: a snapshot the conductor would publish every second (every archive would pay for it on its duty cycle,
scraped or not) or a task per scrape through the conductor's queue (each scrape would cost the conductor a cycle,
and a busy conductor would stall the scrape). Here the duty cycles pay nothing and the two sides never wait on each
other, except for the catalog's O(1) reads.

A recording's position is exported only while it is being recorded, from its `rec-pos` counter (labels
`recording_id`, `stream_id`, `channel`): so the series are bounded by `max_concurrent_recordings`, where a series
per catalog entry would grow with every recording ever made and carry values that never change (`aeron-archive
list` has them). A series ends when its recording stops, as the counter does.
"""

from __future__ import annotations

import errno
import logging
import shutil
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive import recording_pos
from aeron_archive_spark.archive.server.counters import VERSION_TEXT

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from aeron_archive_spark.archive.native import CounterInfo

log = logging.getLogger(__name__)

PREFIX = "aeron_archive_"
_NS = 1e-9


class CountersSnapshot(Protocol):
    """What the collector reads counters through (`CountersReader`)."""

    def counters(self) -> Iterator[CounterInfo]: ...


class CatalogSize(Protocol):
    """The catalog's O(1), thread-safe reads (`Catalog`)."""

    def __len__(self) -> int: ...

    @property
    def capacity(self) -> int: ...


class RetentionStats(Protocol):
    """Retention's running totals (`RetentionCheck`), only ever incremented by the conductor."""

    @property
    def checks(self) -> int: ...
    @property
    def purges(self) -> int: ...
    @property
    def purged_bytes(self) -> int: ...
    @property
    def failures(self) -> int: ...


class DiskUsage(Protocol):
    """What the collector takes of `shutil.disk_usage`."""

    @property
    def free(self) -> int: ...


# The archive's counters (one each, key: archiveId) -> (metric, help, is a counter, scale to the metric's unit).
_SINGLE_COUNTERS: dict[int, tuple[str, str, bool, float]] = {
    c.ARCHIVE_ERROR_COUNT_TYPE_ID: ("errors_total", "Errors the archive counted (Archive Errors)", True, 1),
    c.ARCHIVE_CONTROL_SESSIONS_TYPE_ID: ("control_sessions", "Connected control sessions", False, 1),
    c.ARCHIVE_RECORDING_SESSION_COUNT_TYPE_ID: ("recording_sessions", "Active recordings", False, 1),
    c.ARCHIVE_REPLAY_SESSION_COUNT_TYPE_ID: ("replay_sessions", "Active replays", False, 1),
    c.ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID: (
        "recorder_write_bytes_total",
        "Bytes the recorder wrote to segment files",
        True,
        1,
    ),
    c.ARCHIVE_RECORDER_TOTAL_WRITE_TIME_TYPE_ID: (
        "recorder_write_seconds_total",
        "Time the recorder spent writing segment files",
        True,
        _NS,
    ),
    c.ARCHIVE_RECORDER_MAX_WRITE_TIME_TYPE_ID: (
        "recorder_max_write_seconds",
        "Longest single write of the recorder",
        False,
        _NS,
    ),
    c.ARCHIVE_REPLAYER_TOTAL_READ_BYTES_TYPE_ID: (
        "replayer_read_bytes_total",
        "Bytes the replayer read from segment files",
        True,
        1,
    ),
    c.ARCHIVE_REPLAYER_TOTAL_READ_TIME_TYPE_ID: (
        "replayer_read_seconds_total",
        "Time the replayer spent reading segment files",
        True,
        _NS,
    ),
    c.ARCHIVE_REPLAYER_MAX_READ_TIME_TYPE_ID: (
        "replayer_max_read_seconds",
        "Longest single read of the replayer",
        False,
        _NS,
    ),
}


def _archive_id_of(info: CounterInfo) -> int:
    """The archive id in a counter's key: at 0 for the archive's own counters, after the source identity in a
    rec-pos key."""
    if info.type_id == c.ARCHIVE_RECORDING_POSITION_TYPE_ID:
        return recording_pos.decode_key(info.key)[3]
    return int.from_bytes(info.key[:8], "little", signed=True)


def _rec_pos_labels(info: CounterInfo) -> tuple[str, str, str]:
    """(recording_id, stream_id, channel) of a rec-pos counter: the id from its key, the stream id and stripped
    channel from its label, `rec-pos: <recordingId> <sessionId> <streamId> <channel> - archiveId=<id>`."""
    recording_id = recording_pos.decode_key(info.key)[0]
    head, _, _ = info.label.rpartition(" - archiveId=")
    fields = head.split(" ", 4)
    if len(fields) == 5 and fields[0] == "rec-pos:":
        return str(recording_id), fields[3], fields[4]
    return str(recording_id), "", ""


def _agent_of(info: CounterInfo) -> str:
    """`conductor`, `recorder` or `replayer` from a max cycle time label, `archive-<agent> max cycle time in ns`."""
    first = info.label.split(" ", 1)[0]
    return first.removeprefix("archive-")


class ArchiveCollector(Collector):
    """Reads one archive's state on each scrape (see the module docstring for what, and why it is safe)."""

    def __init__(
        self,
        archive_id: int,
        counters: CountersSnapshot,
        catalog: CatalogSize,
        archive_dir: str,
        low_storage_threshold: int,
        retention: RetentionStats | None = None,
        disk_usage: Callable[[str], DiskUsage] = shutil.disk_usage,
    ) -> None:
        self._archive_id = archive_id
        self._counters = counters
        self._catalog = catalog
        self._archive_dir = archive_dir
        self._low_storage_threshold = low_storage_threshold
        self._retention = retention
        self._disk_usage = disk_usage
        # Held by a scrape while it reads, and by `close`: once `close` returns no scrape reads the archive, which
        # may then close its catalog and its Aeron client.
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if self._closed:
                return []
            return [*self._info(), *self._from_counters(), *self._storage(), *self._from_catalog(), *self._retained()]

    def _info(self) -> Iterator[Metric]:
        info = InfoMetricFamily("aeron_archive", "The archive's id and version")
        info.add_metric([], {"archive_id": str(self._archive_id), "version": VERSION_TEXT})
        yield info

    def _from_counters(self) -> Iterator[Metric]:
        singles: dict[int, int] = {}
        cycles = GaugeMetricFamily(PREFIX + "max_cycle_seconds", "Longest duty cycle of each agent", labels=["agent"])
        positions = GaugeMetricFamily(
            PREFIX + "recording_position_bytes",
            "Position recorded so far by each active recording (its rec-pos counter)",
            labels=["recording_id", "stream_id", "channel"],
        )
        for info in self._counters.counters():
            if not c.ARCHIVE_RECORDING_POSITION_TYPE_ID <= info.type_id <= c.ARCHIVE_REPLAY_SESSION_COUNT_TYPE_ID:
                continue
            if _archive_id_of(info) != self._archive_id:
                continue  # another archive on the same media driver
            if info.type_id == c.ARCHIVE_RECORDING_POSITION_TYPE_ID:
                positions.add_metric(list(_rec_pos_labels(info)), info.value)
            elif info.type_id == c.ARCHIVE_MAX_CYCLE_TIME_TYPE_ID:
                cycles.add_metric([_agent_of(info)], info.value * _NS)
            elif info.type_id in _SINGLE_COUNTERS:
                singles[info.type_id] = info.value
        for type_id, (name, doc, is_counter, scale) in _SINGLE_COUNTERS.items():
            if type_id not in singles:
                continue
            value = singles[type_id] * scale
            family = CounterMetricFamily if is_counter else GaugeMetricFamily
            yield family(PREFIX + name, doc, value=value)
        yield cycles
        yield positions

    def _storage(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            PREFIX + "storage_free_bytes",
            "Space left for the archive directory's file system (what the low-storage check compares)",
            value=self._disk_usage(self._archive_dir).free,
        )
        yield GaugeMetricFamily(
            PREFIX + "storage_low_threshold_bytes",
            "New recordings are refused at or below this much free space",
            value=self._low_storage_threshold,
        )

    def _from_catalog(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(PREFIX + "catalog_recordings", "Entries in the catalog", value=len(self._catalog))
        yield GaugeMetricFamily(
            PREFIX + "catalog_capacity_bytes",
            "Length of archive.catalog (grown as entries are added)",
            value=self._catalog.capacity,
        )

    def _retained(self) -> Iterator[Metric]:
        retention = self._retention
        if retention is None:
            return
        yield CounterMetricFamily(PREFIX + "retention_checks_total", "Retention checks made", value=retention.checks)
        yield CounterMetricFamily(PREFIX + "retention_purges_total", "Purges retention made", value=retention.purges)
        yield CounterMetricFamily(
            PREFIX + "retention_purged_bytes_total",
            "Bytes of recordings retention purged",
            value=retention.purged_bytes,
        )
        yield CounterMetricFamily(
            PREFIX + "retention_failures_total",
            "Retention purges that failed (tried again at the next check)",
            value=retention.failures,
        )


class MetricsAddressError(ValueError):
    """`metrics_address` is malformed or cannot be listened on; `reason` says why without naming the option, so
    the command line can name its own spelling of it."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"metrics_address {address!r}: {reason}")
        self.address = address
        self.reason = reason


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT`, `[IPv6]:PORT` or `:PORT` (every interface) -> (host, port); port 0 picks a free one."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise MetricsAddressError(address, "expected HOST:PORT, e.g. 0.0.0.0:9464 or [::1]:9464")
    port = int(port_text)
    if port > 65535:
        raise MetricsAddressError(address, f"port {port} is not in 0..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise MetricsAddressError(address, "an IPv6 host goes in brackets, e.g. [::1]:9464")
    return host or "0.0.0.0", port


@dataclass
class MetricsServer:
    """`prometheus_client`'s HTTP server (a thread per scrape) exposing one collector at every path (`/metrics`).

    `close` stops the collector first, so no scrape reads the archive once it returns, then the server, which
    takes up to half a second (socketserver's poll interval).
    """

    host: str
    port: int
    collector: ArchiveCollector
    _server: WSGIServer
    _thread: threading.Thread

    @classmethod
    def start(cls, address: str, collector: ArchiveCollector) -> MetricsServer:
        host, port = parse_address(address)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        try:
            server, thread = start_http_server(port, host, registry)
        except socket.gaierror as ex:
            raise MetricsAddressError(address, f"cannot resolve host {host!r} ({ex.strerror})") from None
        except OSError as ex:
            if ex.errno == errno.EADDRINUSE:
                reason = f"port {port} is in use"
            elif ex.errno == errno.EADDRNOTAVAIL:
                reason = f"{host} is not an address of this host"
            else:
                reason = f"cannot listen ({ex.strerror or ex})"
            raise MetricsAddressError(address, reason) from None
        thread.name = "archive-metrics"
        bound_port = int(server.server_address[1])
        log.info("metrics at http://%s:%d/metrics", host, bound_port)
        return cls(host, bound_port, collector, server, thread)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.collector.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
