"""Prometheus metrics of a running archive, scraped over HTTP while it records, replays and applies retention, and
`serve --metrics-address` (its URL in the ready line, a port in use and a malformed address named as the option)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from system.harness import SMALL_SEGMENT, SMALL_TERM, Harness, payloads_of, serve_process, wait_for

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.server.retention import RetentionLimits
from aeron_archive_spark.archive.storage.frames import to_int32

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
STREAM = 7701
REPLAY_STREAM = 7702


class Scrape:
    """One scrape of /metrics, parsed by prometheus_client's own parser: values by sample name (and labels)."""

    def __init__(self, url: str) -> None:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def value(self, name: str, **labels: str) -> float | None:
        found = [s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items()]
        assert len(found) <= 1, (name, labels, found)
        return found[0] if found else None


def scraped(url: str, name: str, predicate, what: str, **labels: str) -> Scrape:
    """Scrape until `name` (with `labels`) satisfies `predicate`: the conductor publishes the agents' totals at most
    a millisecond late while busy, and rec-pos as each block is written."""
    last: list[float | None] = []

    def check() -> Scrape | None:
        scrape = Scrape(url)
        last[:] = [scrape.value(name, **labels)]
        return scrape if last[0] is not None and predicate(last[0]) else None

    try:
        return wait_for(check, 10, what)
    except AssertionError as ex:
        raise AssertionError(f"{ex}: {name}{labels} = {last[0] if last else None}") from None


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"), metrics_address="127.0.0.1:0",
                retention=RetentionLimits(max_bytes=3 * SMALL_SEGMENT), retention_check_interval_ms=50)
    yield h
    h.close()


def publish(publication, count: int, seed: int) -> None:
    for payload in payloads_of([1000] * count, seed=seed):
        while publication.offer(payload) <= 0:
            time.sleep(0.0001)


def test_metrics_follow_recording_replay_and_retention(harness):
    archive = harness.archive
    url = archive.metrics.url
    first = Scrape(url)
    assert first.value("aeron_archive_info", archive_id=str(archive.archive_id)) == 1
    assert first.value("aeron_archive_recording_sessions") == 0
    assert first.value("aeron_archive_control_sessions") == 1  # the harness's client
    assert first.value("aeron_archive_catalog_recordings") == 0
    assert first.value("aeron_archive_storage_free_bytes") > 0
    assert first.value("aeron_archive_retention_purges_total") == 0
    assert first.value("aeron_archive_recording_position_bytes") is None

    client = harness.client
    client.start_recording(CHANNEL, STREAM)
    publication = client.aeron.add_exclusive_publication(CHANNEL, STREAM)
    try:
        recording_id = harness.await_signal(RecordingSignal.START).recording_id
        rid = str(recording_id)
        publish(publication, 200, seed=1)
        position = publication.position
        # the recording's position is what was published, labelled by its id, stream and channel
        scrape = scraped(url, "aeron_archive_recording_position_bytes", lambda v: v == position, "the position",
                         recording_id=rid)
        (series,) = [s for s in scrape.samples if s.name == "aeron_archive_recording_position_bytes"]
        # the channel as the catalog's strippedChannel has it (term-length and such are not part of a stream's name)
        assert series.labels == {"recording_id": rid, "stream_id": str(STREAM), "channel": "aeron:ipc"}
        assert scrape.value("aeron_archive_recording_sessions") == 1
        assert scrape.value("aeron_archive_catalog_recordings") == 1
        written = scraped(url, "aeron_archive_recorder_write_bytes_total", lambda v: v >= position, "the bytes"
                          ).value("aeron_archive_recorder_write_bytes_total")
        assert scrape.value("aeron_archive_recorder_write_seconds_total") >= 0

        # a replay of everything recorded: the replayer's bytes grow by at least that; while a replay follows the
        # live recording it is an active replay
        subscription = client.aeron.add_subscription("aeron:ipc", REPLAY_STREAM)
        try:
            session = client.start_replay(recording_id, 0, -1, "aeron:ipc", REPLAY_STREAM)
            image = wait_for(lambda: subscription.image_by_session_id(to_int32(session)), 10, "the replay image")
            wait_for(lambda: image.position >= position, 10, "the replay", poll=lambda: image.poll(
                lambda d, h: None, 100))
            scraped(url, "aeron_archive_replay_sessions", lambda v: v == 1, "an active replay")
            scraped(url, "aeron_archive_replayer_read_bytes_total", lambda v: v >= position, "the replayed bytes")
            client.stop_replay(session)
            scraped(url, "aeron_archive_replay_sessions", lambda v: v == 0, "the replay to end")
        finally:
            subscription.close()

        # past the retention limit: whole segments purged, counted in purges and bytes
        publish(publication, 1000, seed=2)
        scrape = scraped(url, "aeron_archive_retention_purges_total", lambda v: v >= 1, "a retention purge")
        purged = scrape.value("aeron_archive_retention_purged_bytes_total")
        assert purged > 0 and purged % SMALL_SEGMENT == 0
        assert scrape.value("aeron_archive_retention_checks_total") >= 1
        scraped(url, "aeron_archive_recorder_write_bytes_total", lambda v: v >= written + 1000 * 1000,
                "more bytes written")
    finally:
        publication.close()
    # the recording stops: its series ends with its rec-pos counter (which the driver frees a moment after the
    # archive counts the recording stopped)
    scrape = scraped(url, "aeron_archive_recording_sessions", lambda v: v == 0, "the recording to stop")
    assert scrape.value("aeron_archive_errors_total") == 0
    wait_for(lambda: Scrape(url).value("aeron_archive_recording_position_bytes", recording_id=rid) is None, 10,
             "the position's series to end")

    port = archive.metrics.port
    harness.close()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_serve_prints_its_metrics_url_and_names_the_option_when_it_cannot_listen(aeron_dir, tmp_path):
    proc, ready = serve_process(str(tmp_path / "a"), 18741, "--aeron-dir", aeron_dir, "--local-control-stream-id",
                                "7741", "--metrics-address", "127.0.0.1:0")
    try:
        url = ready["metricsUrl"]
        assert Scrape(url).value("aeron_archive_info", archive_id=str(ready["archiveId"])) == 1
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        taken = subprocess.run(
            [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", str(tmp_path / "b"),
             "--aeron-dir", aeron_dir, "--control-channel", "none", "--local-control-stream-id", "7742",
             "--metrics-address", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60)
        assert taken.returncode == 2
        assert f"aeron-archive: option --metrics-address 127.0.0.1:{port}: port {port} is in use" in taken.stderr
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_malformed_metrics_address_is_refused_before_anything_starts(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--dir", str(tmp_path / "a"), "--metrics-address", "localhost"])
    assert exited.value.code == 2
    assert "argument --metrics-address: expected HOST:PORT" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
