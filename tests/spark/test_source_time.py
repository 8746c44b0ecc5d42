"""Reading history by time: bursts of messages published at known wall-clock times into a live recording, read back
through `startingTimestamp` / `endingTimestamp` (and their per-recording JSON forms) as exactly the bursts inside
each window; a streaming query started at a time on the live recording; Kafka's strategy when no message is that
late; and a clear error for a recording without a time index."""

from __future__ import annotations

import glob
import os
import time

import pytest
from spark.test_source_stream import Collector, stream
from spark.test_source_support import source_options
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import NULL_VALUE, RecordingSignal
from aeron_archive_spark.archive.recording_pos import find_counter_id_by_recording

pytestmark = pytest.mark.spark

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
GAP_S = 0.08  # between bursts: far more than the index's 10 ms bound, so every window edge falls between bursts


class Bursts:
    """A live recording fed in bursts; remembers each burst's wall-clock start (ms) and its messages' positions."""

    def __init__(self, h: Harness, stream_id: int) -> None:
        h.client.start_recording(CHANNEL, stream_id)
        publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream_id)
        starts = len(h.signals.of(RecordingSignal.START)) + 1
        self.attach(h.client, publication, h.await_signal(RecordingSignal.START, count=starts).recording_id)
        self.starts_ms: list[int] = []
        self.ends_us: list[int] = []
        self.positions: list[list[int]] = []

    def attach(self, client: AeronArchive, publication, recording_id: int) -> None:
        """Publish through `publication`, into `recording_id`, checked through `client` (a restarted archive's)."""
        self.client, self.publication, self.recording_id = client, publication, recording_id

    @classmethod
    def of(cls, client: AeronArchive, publication, recording_id: int) -> Bursts:
        feed = cls.__new__(cls)
        feed.attach(client, publication, recording_id)
        feed.starts_ms, feed.ends_us, feed.positions = [], [], []
        return feed

    def publish(self, bursts: int, count: int = 25) -> None:
        for _ in range(bursts):
            time.sleep(GAP_S)
            self.starts_ms.append(time.time_ns() // 1_000_000)
            spans = offer_all(self.publication, payloads_of([300] * count, seed=len(self.starts_ms)))
            self.positions.append([start for start, _ in spans])
            wait_for(lambda: self.client.get_recording_position(self.recording_id) == self.publication.position)
            self.ends_us.append(time.time_ns() // 1000)
        time.sleep(GAP_S)

    def between(self, first: int, last: int) -> list[int]:
        """Positions of bursts first..last-1."""
        return [p for burst in self.positions[first:last] for p in burst]


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def read(spark, options) -> list[int]:
    reader = spark.read.format("aeron-archive")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(r.position for r in reader.load().select("position").collect())


PATHS = pytest.mark.parametrize("remote", [False, True], ids=["archiveDir", "replay"])


@PATHS
def test_time_windows_give_exactly_the_messages_recorded_inside_them(spark, harness, remote):
    feed = Bursts(harness, 7801 + 10 * remote)
    feed.publish(5)
    options = source_options(harness, remote=remote, recordingId=feed.recording_id)
    for first, last in ((0, 5), (1, 3), (2, 4), (4, 5)):
        window = {**options, "startingTimestamp": feed.starts_ms[first]}
        if last < len(feed.starts_ms):
            window["endingTimestamp"] = feed.starts_ms[last]
        assert read(spark, window) == feed.between(first, last), (first, last)
    # per recording, as JSON, and ISO-8601 times
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(feed.starts_ms[3] // 1000))
    frac = feed.starts_ms[3] % 1000
    by_json = {**options, "startingPositionByTimestamp": f'{{"{feed.recording_id}": "{iso}.{frac:03d}Z"}}',
               "endingPositionByTimestamp": f'{{"{feed.recording_id}": {feed.starts_ms[4]}}}'}
    assert read(spark, by_json) == feed.between(3, 4)
    # a time before the recording began is its start; the recording is live, so an ending time past everything
    # recorded ends at the end planned
    assert read(spark, {**options, "startingTimestamp": 0, "endingTimestamp": feed.starts_ms[1]}) == feed.between(0, 1)


@PATHS
def test_the_timestamp_column_dates_each_message_within_the_bound(spark, harness, remote):
    feed = Bursts(harness, 7805 + 10 * remote)
    feed.publish(4)
    reader = spark.read.format("aeron-archive")
    for key, value in source_options(harness, remote=remote, recordingId=feed.recording_id,
                                     maxBytesPerPartition="8k").items():
        reader = reader.option(key, value)
    rows = reader.load().select("position", "timestamp").orderBy("position").collect()
    assert [r.position for r in rows] == feed.between(0, 4)
    micros = [int(r.timestamp.timestamp() * 1_000_000) for r in rows]
    assert micros == sorted(micros)  # never decreasing along positions
    at = 0
    for burst, positions in enumerate(feed.positions):
        for _ in positions:
            # recorded after the burst was offered (the sample before it by less than the 10 ms bound), and
            # before the archive showed it recorded
            assert feed.starts_ms[burst] * 1000 - 10_000 < micros[at] <= feed.ends_us[burst], (burst, at)
            at += 1


@PATHS
def test_no_message_that_late_fails_or_starts_at_the_end(spark, harness, remote):
    feed = Bursts(harness, 7802 + 10 * remote)
    feed.publish(2)
    late = time.time_ns() // 1_000_000 + 60_000
    options = source_options(harness, remote=remote, recordingId=feed.recording_id, startingTimestamp=late)
    with pytest.raises(Exception, match=f"recording {feed.recording_id} has no message recorded at or after .*"
                                        "startingPositionByTimestampStrategy=latest"):
        read(spark, options)
    assert read(spark, {**options, "startingPositionByTimestampStrategy": "latest"}) == []


@PATHS
def test_a_recording_without_a_time_index_is_named(spark, harness, remote):
    feed = Bursts(harness, 7803 + 10 * remote)
    feed.publish(2)
    for path in glob.glob(os.path.join(harness.ctx.archive_dir, f"{feed.recording_id}-*.tix")):
        os.remove(path)  # as a recording of Java's archive, or one recorded with the index off
    options = source_options(harness, remote=remote, recordingId=feed.recording_id,
                             startingTimestamp=feed.starts_ms[1])
    with pytest.raises(Exception, match=f"recording {feed.recording_id} has no time index .* read it by position"
                                        ".* timestampField"):
        read(spark, options)
    # the catalog's start timestamp still places a time before the recording began, with no index
    assert read(spark, {**options, "startingTimestamp": 0}) == feed.between(0, 2)
    # and its rows' timestamp is null: nothing dates them
    reader = spark.read.format("aeron-archive")
    for key, value in source_options(harness, remote=remote, recordingId=feed.recording_id).items():
        reader = reader.option(key, value)
    assert reader.load().where("timestamp is not null").count() == 0


@PATHS
def test_a_streaming_query_started_at_a_time_on_a_live_recording(spark, harness, tmp_path, remote):
    feed = Bursts(harness, 7804 + 10 * remote)
    feed.publish(3)
    options = source_options(harness, remote=remote, recordingId=feed.recording_id,
                             startingTimestamp=feed.starts_ms[1])
    collector = Collector()
    query = stream(spark, options, collector, tmp_path / "cp")
    try:
        feed.publish(2)
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert [p for _, p, _ in collector.rows()] == feed.between(1, 5)


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "market_data.xml")
T0_NS = 1_764_322_200_000_000_000  # 2025-11-28T09:30:00Z: the exchange's clock, not when the archive recorded


def trades(count: int, step_ns: int = 1_000_000, back_at: int | None = None) -> list[bytes]:
    from aeron_archive_spark.archive.codecs.codec import SbeCodec

    codec = SbeCodec.from_xml(EXAMPLE)
    out = []
    for i in range(count):
        stamp = T0_NS + i * step_ns - (50 * step_ns if back_at is not None and i >= back_at else 0)
        out.append(codec.encode("Trade", symbol="AAPL", price_mantissa=18_500 + i, quantity=1, side=i % 2,
                                timestamp_ns=stamp, trade_id=i))
    return out


@pytest.fixture
def unindexed(aeron_dir, tmp_path):
    """An archive keeping no time index: its recordings are as Java's archive writes them."""
    h = Harness(aeron_dir, str(tmp_path / "unindexed"), time_index_interval_ns=0)
    yield h
    h.close()


@PATHS
def test_a_recording_without_an_index_is_read_by_time_through_its_messages_time_field(spark, unindexed, remote):
    from spark.test_source_support import Recorder

    recorder = Recorder(unindexed, CHANNEL, 7830 + remote)
    recorder.publish(trades(3000))  # ~5 terms: the seek probes terms, then scans one
    recorder.stop()
    options = source_options(unindexed, remote=remote, recordingId=recorder.recording_id, sbeSchema=EXAMPLE,
                             timestampField="timestampNs", maxBytesPerPartition="64k")
    window = {**options, "startingTimestamp": (T0_NS + 1_000_000_000) // 1_000_000,
              "endingTimestamp": "2025-11-28T09:30:02.500Z"}
    reader = spark.read.format("aeron-archive")
    for key, value in window.items():
        reader = reader.option(key, value)
    rows = reader.load().orderBy("position").collect()
    assert [r.tradeId for r in rows] == list(range(1000, 2500))
    assert [r.position for r in rows] == [p for p, _ in recorder.messages[1000:2500]]
    assert all(r.timestamp is None for r in rows)  # the archive's own time: unknown here
    # without the field, times are the archive's: it recorded nothing in 2025 (its catalog's start timestamp says
    # so without an index)
    plain = {k: v for k, v in window.items() if k != "timestampField"}
    reader = spark.read.format("aeron-archive")
    for key, value in plain.items():
        reader = reader.option(key, value)
    assert reader.load().count() == 0


def test_a_time_field_that_goes_back_fails_the_read_naming_where(spark, unindexed):
    from spark.test_source_support import Recorder

    recorder = Recorder(unindexed, CHANNEL, 7833)
    recorder.publish(trades(600, back_at=400))
    recorder.stop()
    reader = spark.read.format("aeron-archive")
    for key, value in source_options(unindexed, recordingId=recorder.recording_id, sbeSchema=EXAMPLE,
                                     timestampField="timestampNs", startingTimestamp=T0_NS // 1_000_000).items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=f"recording {recorder.recording_id}: timestampField decreases from .* at "
                                        f"position {recorder.messages[399][0]}"):
        reader.load().count()


def test_time_field_options_are_checked_up_front(spark, unindexed):
    reader = spark.read.format("aeron-archive")
    for key, value in source_options(unindexed, recordingId=0, sbeSchema=EXAMPLE, timestampField="nope").items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match="option timestampField: no decoded column 'nope'; integer columns"):
        reader.load()


def test_windows_stay_exact_after_a_kill_9_a_restart_an_extension_and_a_truncation(spark, aeron_dir, tmp_path):
    """Bursts recorded by a `serve` process killed with -9, then by the restarted archive extending the recording;
    windows are read on both paths, then again after the recording is truncated inside the extension."""
    import signal as signals

    from system.harness import Signals, serve_process

    archive_dir = str(tmp_path / "archive")
    proc, _ = serve_process(archive_dir, 18741, "--aeron-dir", aeron_dir, "--local-control-stream-id", "7840",
                            "--segment-length", "128k", "--low-storage-threshold", "0")
    events = Signals()
    client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel="aeron:ipc",
                                  control_request_stream_id=7840, control_response_channel="aeron:ipc",
                                  recording_signal_consumer=events)
    try:
        client.start_recording(CHANNEL, 7841)
        publication = client.aeron.add_exclusive_publication(CHANNEL, 7841)
        wait_for(lambda: events.of(RecordingSignal.START), poll=client.poll_for_recording_signals)
        feed = Bursts.of(client, publication, events.of(RecordingSignal.START)[0].recording_id)
        feed.publish(3)
        killed_at = feed.publication.position
        proc.send_signal(signals.SIGKILL)
        proc.wait(10)
        feed.publication.close()
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()

    h = Harness(aeron_dir, archive_dir, local_control_stream_id=7842)
    try:
        rid = feed.recording_id
        wait_for(lambda: h.client.list_recording(rid).stop_position == killed_at, what="the recovered stop")
        # The killed archive's subscription holds its IPC image, so the closed publication, until the driver times
        # its client out (its rec-pos counter goes with it): the extension must not join that stale publication.
        wait_for(lambda: find_counter_id_by_recording(h.client.aeron.counters_reader, rid) == NULL_VALUE, 10,
                 "the killed archive's client timed out")
        h.client.extend_recording(rid, CHANNEL, 7841)
        d = h.client.list_recording(rid)
        feed.attach(h.client, h.client.aeron.add_exclusive_publication(
            f"{CHANNEL}|init-term-id={d.initial_term_id}|term-id={d.initial_term_id + killed_at // SMALL_TERM}"
            f"|term-offset={killed_at % SMALL_TERM}", 7841), rid)
        h.await_signal(RecordingSignal.EXTEND, rid)
        feed.publish(3)
        feed.publication.close()
        h.await_signal(RecordingSignal.STOP, rid)
        for remote in (False, True):
            options = source_options(h, remote=remote, recordingId=rid)
            for first, last in ((1, 2), (2, 4), (3, 6)):  # before, across and after the crash
                window = {**options, "startingTimestamp": feed.starts_ms[first]}
                if last < 6:
                    window["endingTimestamp"] = feed.starts_ms[last]
                assert read(spark, window) == feed.between(first, last), (remote, first, last)
        # truncate at the fifth burst: windows reaching past it end at the truncation
        h.client.truncate_recording(rid, feed.positions[4][0])
        for remote in (False, True):
            options = source_options(h, remote=remote, recordingId=rid, startingTimestamp=feed.starts_ms[3])
            assert read(spark, options) == feed.between(3, 4), remote
    finally:
        h.close()
