"""failOnDataLoss when a recording is truncated or purged under a planned micro-batch (issue 11, defect 8).

Driver side: `partitions` of a batch whose recording was truncated below its end, and the offsets that follow.
Executor side: a truncation between planning and reading, on both read paths. The Spark end to end runs are in
tests/spark/test_source_data_loss.py.
"""

from __future__ import annotations

import logging
import pickle

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness, payloads_of

from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, SegmentFiles
from aeron_archive_spark.connector.source.batch_reader import DataLossError
from aeron_archive_spark.connector.source.schema import FIXED_FIELDS
from aeron_archive_spark.connector.source.stream_reader import AeronArchiveStreamReader

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
STREAM = 1201
LOGGER = "aeron_archive_spark.connector.source"


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def reader(h: Harness, remote: bool = False, **options) -> AeronArchiveStreamReader:
    return AeronArchiveStreamReader(
        {k.lower(): v for k, v in source_options(h, remote=remote, **options).items()}, FIXED_FIELDS
    )


def read_rows(r: AeronArchiveStreamReader, partitions) -> list[tuple[int, bytes]]:
    executor = pickle.loads(pickle.dumps(r))
    rows = []
    for p in partitions:
        for batch in executor.read(p):
            rows += zip(batch.column("position").to_pylist(), batch.column("value").to_pylist(), strict=True)
    return rows


def stopped_recording(h: Harness) -> Recorder:
    rec = Recorder(h, CHANNEL, STREAM)
    rec.publish(payloads_of([992] * 48))  # 1024-byte frames
    rec.stop()
    return rec


def extend(h: Harness, rec: Recorder, payloads: list[bytes], stop: bool = True) -> list[tuple[int, bytes]]:
    """Extend the stopped recording from its stop position with `payloads` (then stop it again if `stop`)."""
    rec.publication.close()
    descriptor = h.client.list_recording(rec.recording_id)
    channel = h.client.extend_channel(CHANNEL, descriptor)
    extends = len(h.signals.of(RecordingSignal.EXTEND, rec.recording_id))
    # The new publication first, and the extend subscription only for its session: the closed publication may still
    # drain on the same stream, and an image of it would join at its old position (INVALID_EXTENSION).
    rec.publication = h.client.aeron.add_exclusive_publication(channel, STREAM)
    subscription_id = h.client.extend_recording(
        rec.recording_id, add_session_id(channel, rec.publication.session_id), STREAM, SourceLocation.LOCAL
    )
    h.await_signal(RecordingSignal.EXTEND, rec.recording_id, count=extends + 1)
    sent = rec.publish(payloads)
    if stop:
        stops = len(h.signals.of(RecordingSignal.STOP, rec.recording_id))
        h.client.stop_recording_subscription(subscription_id)
        h.await_signal(RecordingSignal.STOP, rec.recording_id, count=stops + 1)
    return sent


def restarted(h: Harness, rec: Recorder, fail_on_data_loss: bool, remote: bool = False) -> AeronArchiveStreamReader:
    """A fresh reader, as after a restart: it knows nothing but the offsets Spark hands it."""
    return reader(h, remote=remote, recordingId=rec.recording_id, failOnDataLoss=str(fail_on_data_loss).lower())


@pytest.mark.parametrize("remote", [False, True], ids=["archiveDir", "replay"])
def test_replayed_batch_cut_by_a_truncation_delivers_the_rest_logs_the_loss_and_goes_back(harness, caplog, remote):
    rec = stopped_recording(harness)
    key = str(rec.recording_id)
    begin, end = 16 * 1024, 32 * 1024
    truncated = begin + 9 * 1024
    harness.client.truncate_recording(rec.recording_id, truncated)
    r = restarted(harness, rec, False, remote)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        planned = r.partitions({key: begin}, {key: end})
    assert [(p.read_range.start, p.read_range.end, p.read_range.limit) for p in planned] == [
        (begin, truncated, truncated)
    ]
    warning = " ".join(rec_.getMessage() for rec_ in caplog.records if rec_.levelno == logging.WARNING)
    assert f"recording {rec.recording_id} was truncated to {truncated}" in warning
    assert f"micro-batch [{begin}, {end}) was planned" in warning
    assert f"delivering [{begin}, {truncated}) ({truncated - begin} bytes)" in warning
    assert f"[{truncated}, {end}) ({end - truncated} bytes) is lost" in warning
    assert read_rows(r, planned) == [(p, v) for p, v in rec.messages if begin <= p < truncated]

    # The recording grows past the planned end again before the next batch: it still goes back to the
    # truncation point, in a batch that reads nothing, and then on through the new data.
    new = extend(harness, rec, payloads_of([992] * 20, seed=3))
    assert new[0][0] == truncated and new[-1][0] >= end
    back = r.latestOffset({key: end}, ReadAllAvailable())
    assert back == {key: truncated}
    assert r.partitions({key: end}, back) == []
    after = r.latestOffset(back, ReadAllAvailable())
    assert after == {key: rec.position}
    assert read_rows(r, r.partitions(back, after)) == new


def test_replayed_batch_wholly_truncated_delivers_nothing_and_goes_back(harness, caplog):
    rec = stopped_recording(harness)
    key = str(rec.recording_id)
    begin, end = 16 * 1024, 32 * 1024
    truncated = begin - 2 * 1024
    harness.client.truncate_recording(rec.recording_id, truncated)
    r = restarted(harness, rec, False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert r.partitions({key: begin}, {key: end}) == []
    assert f"delivering nothing; [{begin}, {end}) ({end - begin} bytes) is lost" in caplog.text
    assert r.latestOffset({key: end}, ReadAllAvailable()) == {key: truncated}


def test_replayed_batch_cut_by_a_truncation_fails_naming_recording_and_positions(harness):
    rec = stopped_recording(harness)
    key = str(rec.recording_id)
    truncated = 25 * 1024
    harness.client.truncate_recording(rec.recording_id, truncated)
    with pytest.raises(DataLossError, match=rf"recording {rec.recording_id} was truncated to {truncated} after "
                                            r"micro-batch \[16384, 32768\) was planned, below its end 32768; "
                                            "set failOnDataLoss=false"):
        restarted(harness, rec, True).partitions({key: 16 * 1024}, {key: 32 * 1024})


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_checkpoint_above_an_extended_recording_that_is_still_shorter(harness, fail_on_data_loss):
    """Truncated below the checkpoint, then extended but not yet past it: the checkpoint is no position of the
    new data, so the query does not wait there for the recording to pass it."""
    rec = stopped_recording(harness)
    key = str(rec.recording_id)
    end = 32 * 1024
    harness.client.truncate_recording(rec.recording_id, 20 * 1024)
    extend(harness, rec, payloads_of([992] * 4, seed=5), stop=False)
    live = rec.position
    assert live < end
    r = reader(harness, recordingId=rec.recording_id, failOnDataLoss=str(fail_on_data_loss).lower(),
               aeronDir=harness.aeron_dir)
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=rf"recording {rec.recording_id} was truncated: its recorded "
                                                rf"position {live} is below the checkpointed position {end}"):
            r.latestOffset({key: end}, ReadAllAvailable())
    else:
        assert r.latestOffset({key: end}, ReadAllAvailable()) == {key: live}


@pytest.mark.parametrize("remote", [False, True], ids=["archiveDir", "replay"])
def test_truncation_between_planning_and_reading(harness, caplog, remote):
    rec = stopped_recording(harness)
    key = str(rec.recording_id)
    begin, end = 16 * 1024, 32 * 1024
    lenient = restarted(harness, rec, False, remote)
    strict = restarted(harness, rec, True, remote)
    planned = lenient.partitions({key: begin}, {key: end})
    assert strict.partitions({key: begin}, {key: end}) == planned
    truncated = begin + 5 * 1024
    harness.client.truncate_recording(rec.recording_id, truncated)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert read_rows(lenient, planned) == [(p, v) for p, v in rec.messages if begin <= p < truncated]
    assert f"recording {rec.recording_id} was truncated or purged after partition [{begin}, {end})" in caplog.text
    assert f"reading what is left, [{begin}, {truncated})" in caplog.text
    with pytest.raises(Exception, match=rf"recording {rec.recording_id}.* position {truncated}"):
        read_rows(strict, planned)

    harness.client.purge_recording(rec.recording_id)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert read_rows(lenient, planned) == []
    assert f"recording {rec.recording_id} vanished before partition [{begin}, {end}) was read" in caplog.text


def test_surviving_range():
    facts = RecordingFacts(7, 0, SMALL_TERM, 2 * SMALL_TERM, 0, 1, 2, 1408)
    r = ReadRange(0, facts, 1024, 4096, 8192, SegmentFiles("/dir"))
    assert r.surviving(0, None) is r
    assert r.surviving(0, 9000) is r
    # a limit lowered to the new stop ends at the stop: a message the truncation left open there is dropped
    assert r.surviving(0, 3000) == ReadRange(0, facts, 1024, 3000, 3000, SegmentFiles("/dir"), ends_at_stop=True)
    assert r.surviving(0, 6000) == ReadRange(0, facts, 1024, 4096, 6000, SegmentFiles("/dir"), ends_at_stop=True)
    assert r.surviving(2048, None) == ReadRange(0, facts, 2048, 4096, 8192, SegmentFiles("/dir"))
    assert r.surviving(0, 1024) is None
    assert r.surviving(4096, None) is None
