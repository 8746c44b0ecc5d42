"""The Prometheus collector over injected state (counters, catalog, retention, free space), the address option, and
the HTTP server's life: no Aeron, no archive."""

from __future__ import annotations

import socket
import struct
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from aeron_archive_spark.archive import constants as c
from aeron_archive_spark.archive import recording_pos
from aeron_archive_spark.archive.native import CounterInfo
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.server.counters import VERSION_TEXT
from aeron_archive_spark.archive.server.metrics import (
    ArchiveCollector,
    MetricsAddressError,
    MetricsServer,
    parse_address,
)

ARCHIVE_ID = 7


def counter(type_id: int, value: int, label: str, archive_id: int = ARCHIVE_ID, counter_id: int = 0) -> CounterInfo:
    return CounterInfo(counter_id, type_id, 0, value, struct.pack("<q", archive_id).ljust(112, b"\0"), label)


def rec_pos(recording_id: int, stream_id: int, channel: str, value: int, archive_id: int = ARCHIVE_ID) -> CounterInfo:
    key = recording_pos.encode_key(recording_id, 55, "127.0.0.1:4000", archive_id).ljust(112, b"\0")
    label = recording_pos.label(recording_id, 55, stream_id, channel, archive_id)
    return CounterInfo(0, c.ARCHIVE_RECORDING_POSITION_TYPE_ID, 0, value, key, label)


@dataclass
class FakeCounters:
    infos: list[CounterInfo] = field(default_factory=list)

    def counters(self) -> Iterator[CounterInfo]:
        return iter(list(self.infos))


@dataclass
class FakeCatalog:
    entries: int = 3
    capacity: int = 1 << 20

    def __len__(self) -> int:
        return self.entries


@dataclass
class FakeRetention:
    checks: int = 4
    purges: int = 2
    purged_bytes: int = 262_144
    failures: int = 1


@dataclass
class FakeUsage:
    free: int


def archive_counters() -> list[CounterInfo]:
    return [
        counter(c.ARCHIVE_ERROR_COUNT_TYPE_ID, 2, "Archive Errors"),
        counter(c.ARCHIVE_CONTROL_SESSIONS_TYPE_ID, 3, "Archive Control Sessions"),
        counter(c.ARCHIVE_RECORDER_MAX_WRITE_TIME_TYPE_ID, 1_500_000, "archive-recorder max write time in ns"),
        counter(c.ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID, 1 << 20, "archive-recorder total write bytes"),
        counter(c.ARCHIVE_RECORDER_TOTAL_WRITE_TIME_TYPE_ID, 2_000_000_000, "archive-recorder total write time in ns"),
        counter(c.ARCHIVE_REPLAYER_MAX_READ_TIME_TYPE_ID, 250_000, "archive-replayer max read time in ns"),
        counter(c.ARCHIVE_REPLAYER_TOTAL_READ_BYTES_TYPE_ID, 4096, "archive-replayer total read bytes"),
        counter(c.ARCHIVE_REPLAYER_TOTAL_READ_TIME_TYPE_ID, 500_000_000, "archive-replayer total read time in ns"),
        counter(c.ARCHIVE_RECORDING_SESSION_COUNT_TYPE_ID, 2, "Archive Recording Sessions"),
        counter(c.ARCHIVE_REPLAY_SESSION_COUNT_TYPE_ID, 1, "Archive Replay Sessions"),
        counter(c.ARCHIVE_MAX_CYCLE_TIME_TYPE_ID, 3_000_000, "archive-conductor max cycle time in ns: DEDICATED"),
        counter(c.ARCHIVE_MAX_CYCLE_TIME_TYPE_ID, 4_000_000, "archive-recorder max cycle time in ns: DEDICATED"),
        counter(c.ARCHIVE_MAX_CYCLE_TIME_TYPE_ID, 5_000_000, "archive-replayer max cycle time in ns: DEDICATED"),
        counter(c.ARCHIVE_CONTROL_SESSION_TYPE_ID, 991, "control-session: client sessionId=1"),
        rec_pos(4, 1001, "aeron:udp?endpoint=localhost:20121", 8192),
        rec_pos(5, 1002, "aeron:ipc", 640),
        # another archive on the same media driver: none of its counters are ours
        counter(c.ARCHIVE_ERROR_COUNT_TYPE_ID, 99, "Archive Errors", archive_id=8),
        counter(c.ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID, 99, "archive-recorder total write bytes", archive_id=8),
        rec_pos(9, 1001, "aeron:ipc", 99, archive_id=8),
        counter(1, 12345, "a media driver counter", archive_id=ARCHIVE_ID),
    ]


def collector(**overrides: object) -> ArchiveCollector:
    kwargs: dict[str, object] = {
        "archive_id": ARCHIVE_ID,
        "counters": FakeCounters(archive_counters()),
        "catalog": FakeCatalog(),
        "archive_dir": "/archive",
        "low_storage_threshold": 128 << 20,
        "retention": FakeRetention(),
        "disk_usage": lambda _path: FakeUsage(free=10 << 30),
    }
    kwargs.update(overrides)
    return ArchiveCollector(**kwargs)  # type: ignore[arg-type]


def samples(col: ArchiveCollector) -> dict[str, list[Sample]]:
    got: dict[str, list[Sample]] = {}
    for family in col.collect():
        for sample in family.samples:
            got.setdefault(sample.name, []).append(sample)
    return got


def value(col: ArchiveCollector, name: str) -> float:
    (sample,) = samples(col)[name]
    return sample.value


def test_every_archive_counter_becomes_its_metric_in_base_units():
    col = collector()
    assert value(col, "aeron_archive_errors_total") == 2
    assert value(col, "aeron_archive_control_sessions") == 3
    assert value(col, "aeron_archive_recording_sessions") == 2
    assert value(col, "aeron_archive_replay_sessions") == 1
    assert value(col, "aeron_archive_recorder_write_bytes_total") == 1 << 20
    assert value(col, "aeron_archive_recorder_write_seconds_total") == pytest.approx(2.0)
    assert value(col, "aeron_archive_recorder_max_write_seconds") == pytest.approx(0.0015)
    assert value(col, "aeron_archive_replayer_read_bytes_total") == 4096
    assert value(col, "aeron_archive_replayer_read_seconds_total") == pytest.approx(0.5)
    assert value(col, "aeron_archive_replayer_max_read_seconds") == pytest.approx(0.00025)
    cycles = {s.labels["agent"]: s.value for s in samples(col)["aeron_archive_max_cycle_seconds"]}
    assert cycles == pytest.approx({"conductor": 0.003, "recorder": 0.004, "replayer": 0.005})


def test_an_active_recording_has_its_position_labelled_by_id_stream_and_channel():
    positions = samples(collector())["aeron_archive_recording_position_bytes"]
    assert {(s.labels["recording_id"], s.labels["stream_id"], s.labels["channel"]): s.value for s in positions} == {
        ("4", "1001", "aeron:udp?endpoint=localhost:20121"): 8192,
        ("5", "1002", "aeron:ipc"): 640,
    }


def test_storage_catalog_retention_and_info():
    col = collector()
    assert value(col, "aeron_archive_storage_free_bytes") == 10 << 30
    assert value(col, "aeron_archive_storage_low_threshold_bytes") == 128 << 20
    assert value(col, "aeron_archive_catalog_recordings") == 3
    assert value(col, "aeron_archive_catalog_capacity_bytes") == 1 << 20
    assert value(col, "aeron_archive_retention_checks_total") == 4
    assert value(col, "aeron_archive_retention_purges_total") == 2
    assert value(col, "aeron_archive_retention_purged_bytes_total") == 262_144
    assert value(col, "aeron_archive_retention_failures_total") == 1
    (info,) = samples(col)["aeron_archive_info"]
    assert info.labels == {"archive_id": str(ARCHIVE_ID), "version": VERSION_TEXT} and info.value == 1


def test_each_scrape_reads_the_state_afresh():
    counters = FakeCounters(archive_counters())
    retention = FakeRetention()
    catalog = FakeCatalog()
    col = collector(counters=counters, retention=retention, catalog=catalog)
    assert value(col, "aeron_archive_recorder_write_bytes_total") == 1 << 20
    counters.infos = [counter(c.ARCHIVE_RECORDER_TOTAL_WRITE_BYTES_TYPE_ID, 3 << 20, "bytes")]
    retention.purges = 5
    catalog.entries = 4
    assert value(col, "aeron_archive_recorder_write_bytes_total") == 3 << 20
    assert value(col, "aeron_archive_retention_purges_total") == 5
    assert value(col, "aeron_archive_catalog_recordings") == 4
    assert "aeron_archive_recording_position_bytes" not in samples(col)  # recordings stopped: their series end


def test_without_retention_there_are_no_retention_metrics():
    assert not [name for name in samples(collector(retention=None)) if "retention" in name]


def test_a_closed_collector_reads_nothing():
    reads: list[str] = []

    class Watched(FakeCounters):
        def counters(self) -> Iterator[CounterInfo]:
            reads.append("counters")
            return super().counters()

    col = collector(counters=Watched(archive_counters()))
    assert samples(col)
    col.close()
    assert list(col.collect()) == [] and reads == ["counters"]


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("localhost:0", ("localhost", 0)),
        (":9464", ("0.0.0.0", 9464)),
        ("[::1]:9464", ("::1", 9464)),
    ],
)
def test_addresses(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("9464", "expected HOST:PORT"),
        ("localhost:", "expected HOST:PORT"),
        ("localhost:http", "expected HOST:PORT"),
        ("localhost:70000", "not in 0..65535"),
        ("::1:9464", "in brackets"),
    ],
)
def test_bad_addresses_are_refused_naming_the_option(address, reason):
    with pytest.raises(MetricsAddressError, match=reason) as raised:
        parse_address(address)
    assert str(raised.value).startswith(f"metrics_address {address!r}")
    with pytest.raises(ValueError, match=f"metrics_address.*{reason}"):
        ArchiveContext(archive_dir="/tmp/unused", metrics_address=address).conclude()


def scrape(url: str) -> dict[str, list[Sample]]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    got: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            got.setdefault(sample.name, []).append(sample)
    return got


def test_the_server_exposes_the_collector_and_stops_with_close():
    server = MetricsServer.start("127.0.0.1:0", collector())
    try:
        assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/metrics"
        got = scrape(server.url)
        assert got["aeron_archive_recorder_write_bytes_total"][0].value == 1 << 20
        assert len(got["aeron_archive_recording_position_bytes"]) == 2
        assert not [name for name in got if not name.startswith("aeron_archive_")]  # ours only
    finally:
        server.close()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=1):
        pass


def test_a_port_in_use_and_an_unknown_host_are_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsAddressError, match=f"metrics_address '127.0.0.1:{port}': port {port} is in use"):
            MetricsServer.start(f"127.0.0.1:{port}", collector())
    with pytest.raises(MetricsAddressError, match="cannot resolve host 'no-such-host.invalid'"):
        MetricsServer.start("no-such-host.invalid:0", collector())
