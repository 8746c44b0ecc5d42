"""Many small recordings selected by channel: packed into few partitions, planned with no replay per recording."""

from __future__ import annotations

import pytest
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness, payloads_of

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader
from aeron_archive_spark.connector.source.schema import FIXED_FIELDS

pytestmark = pytest.mark.spark

COLUMNS = ["recordingId", "position", "sessionId", "streamId", "reservedValue", "value"]
CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
STREAM = 4301
COUNT = 200


@pytest.fixture(scope="module")
def many(aeron_dir, tmp_path_factory):
    """COUNT small stopped recordings on one channel + stream; the last one truncated inside a fragmented message.

    Yields (harness, expected rows as (recordingId, position, value), the truncated recording's dropped message).
    """
    h = Harness(aeron_dir, str(tmp_path_factory.mktemp("many") / "archive"))
    try:
        h.client.start_recording(CHANNEL, STREAM, SourceLocation.LOCAL)
        recorders = []
        stops = len(h.signals.of(RecordingSignal.STOP))
        for i in range(COUNT):
            rec = Recorder(h, CHANNEL, STREAM, start=False)
            sizes = [10 + i % 50, 200, 3 * (i % 7)] + ([5000] if i % 40 == 0 or i == COUNT - 1 else [])
            rec.publish(payloads_of(sizes, seed=i))
            rec.publication.close()
            recorders.append(rec)
        h.await_signal(RecordingSignal.STOP, count=stops + COUNT, timeout=60)
        h.client.stop_recording(CHANNEL, STREAM)
        # A crash or truncation can leave a recording's last message incomplete: cut the last recording one frame
        # into its 5000-byte (fragmented) message. Its stop is then a frame boundary inside that message.
        last = recorders[-1]
        cut_position = last.messages[-1][0]
        h.client.truncate_recording(last.recording_id, cut_position + 1408)
        last.messages.pop()
        expected = sorted(
            (rec.recording_id, position, payload) for rec in recorders for position, payload in rec.messages
        )
        yield h, expected, (last.recording_id, cut_position)
    finally:
        h.close()


def rows(df) -> list[tuple]:
    return sorted((r.recordingId, r.position, bytes(r.value)) for r in df.select(*COLUMNS).collect())


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_many_small_recordings_read_by_channel_are_packed_and_give_every_whole_message(spark, many, path):
    h, expected, _ = many
    options = source_options(h, remote=path == "replay", channel=CHANNEL, streamId=STREAM)
    df = spark.read.format("aeron-archive").options(**options).load()
    partitions = df.rdd.getNumPartitions()
    # 200 recordings of ~300-5300 bytes weigh ~26 MiB with the 128k open cost of archiveDir and ~52 MiB with the
    # 256k through the archive: one 64m partition either way
    assert partitions == 1
    assert rows(df) == expected  # the message the truncation left open is left out
    # within each partition: recordings in id order, each recording's rows in position order
    for part in df.select("recordingId", "position").rdd.glom().collect():
        keys = [(r.recordingId, r.position) for r in part]
        assert keys == sorted(keys)


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_open_cost_and_max_bytes_bound_how_many_recordings_share_a_task(spark, many, path):
    h, expected, _ = many
    options = source_options(h, remote=path == "replay", channel=CHANNEL, streamId=STREAM,
                             openCostInBytes="64k", maxBytesPerPartition="1m")
    df = spark.read.format("aeron-archive").options(**options).load()
    assert df.rdd.getNumPartitions() == 13  # ~64k weight each: 15-16 per 1 MiB partition
    assert rows(df) == expected


def test_planning_through_the_archive_replays_nothing(many):
    h, _, (truncated_id, cut_position) = many
    assert h.archive is not None
    conductor = h.archive.conductor
    options = source_options(h, remote=True, channel=CHANNEL, streamId=STREAM)
    reader = AeronArchiveBatchReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
    replays = conductor._replay_id
    partitions = reader.partitions()
    assert conductor._replay_id == replays  # ends come from the catalog, no replay per recording
    ranges = [r for p in partitions for r in p.read_ranges]
    assert len(ranges) == COUNT and all(r.ends_at_stop and r.end == r.limit for r in ranges)
    truncated = next(r for r in ranges if r.recording_id == truncated_id)
    assert truncated.end == cut_position + 1408  # the stop itself, inside the message: the reader drops it
    # reading replays each range once, with one lookup session per partition
    rows_read = sum(batch.num_rows for p in partitions for batch in reader.read(p))
    assert conductor._replay_id - replays == COUNT
    assert rows_read == len(many[1])


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_a_streams_triggers_list_settled_recordings_only_in_the_periodic_full_listing(aeron_dir, tmp_path, path):
    """New and unsettled recordings are seen on every trigger; a settled one's truncation at the next full listing."""
    from pyspark.sql.datasource import ReadAllAvailable

    from aeron_archive_spark.archive.tables.selection_listing import SelectionListing
    from aeron_archive_spark.connector.source.batch_reader import DataLossError
    from aeron_archive_spark.connector.source.stream_reader import AeronArchiveStreamReader

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    h = Harness(aeron_dir, str(tmp_path / "archive"))
    try:
        h.client.start_recording(CHANNEL, STREAM, SourceLocation.LOCAL)
        recorders = []
        for i in range(20):
            rec = Recorder(h, CHANNEL, STREAM, start=False)
            rec.publish(payloads_of([100, 30 + i], seed=i))
            rec.publication.close()
            recorders.append(rec)
        for rec in recorders:
            h.await_signal(RecordingSignal.STOP, rec.recording_id)
        options = source_options(h, remote=path == "replay", channel=CHANNEL, streamId=STREAM)
        reader = AeronArchiveStreamReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
        clock = Clock()
        reader._listing = listing = SelectionListing(reader.source, clock)
        stops = {rec.recording_id: h.client.get_stop_position(rec.recording_id) for rec in recorders}

        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {str(rid): stop for rid, stop in stops.items()}
        assert (listing.full_listings, listing.partial_listings) == (1, 0)

        assert reader.latestOffset(end, ReadAllAvailable()) == end  # all settled: nothing asked but new ids
        assert (listing.full_listings, listing.partial_listings) == (1, 1)

        new = Recorder(h, CHANNEL, STREAM, start=False)  # a new recording: seen at the next trigger
        new.publish(payloads_of([64], seed=99))
        latest = reader.latestOffset(end, ReadAllAvailable())
        assert latest[str(new.recording_id)] == new.publication.position
        assert (listing.full_listings, listing.partial_listings) == (1, 2)
        new.publication.close()
        h.await_signal(RecordingSignal.STOP, new.recording_id)

        settled = recorders[3].recording_id  # truncated after the stream read it all: seen at the next full listing
        h.client.truncate_recording(settled, h.client.list_recording(settled).start_position)
        assert reader.latestOffset(latest, ReadAllAvailable())[str(settled)] == stops[settled]
        clock.now = 2.0  # past any full-listing interval
        with pytest.raises(DataLossError, match=f"recording {settled} was truncated"):
            reader.latestOffset(latest, ReadAllAvailable())
        assert listing.full_listings == 2
        reader.stop()
    finally:
        h.close()
