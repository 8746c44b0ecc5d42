"""A recording truncated or purged while a micro-batch is planned but not committed (issue 11, defect 8).

Each test runs a query to the end of a stopped recording, then makes its last batch look uncommitted (its commit
file removed, as if the query died after planning it) and truncates or purges the recording inside that batch's
range. The restarted query re-runs the planned batch from the offset log: `failOnDataLoss=false` delivers what is
left of it and goes on from the recording's new end (also once the recording is extended past the planned end
again); `true` fails naming the recording and the positions.
"""

from __future__ import annotations

import json
import os

import pytest
from spark.test_source_stream import Collector, stream
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness, payloads_of, wait_for

from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation

pytestmark = pytest.mark.spark

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"
STREAM = 1101


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def offsets(checkpoint, batch_id: int) -> dict[str, int]:
    """The source offset Spark logged for `batch_id` (offsets/<id>: version, metadata, one line per source)."""
    with open(os.path.join(checkpoint, "offsets", str(batch_id))) as f:
        return json.loads(f.read().splitlines()[-1])


def uncommit_last_batch(checkpoint) -> int:
    """Remove the last commit file (and its checksum): the restarted query re-runs that planned batch."""
    commits = os.path.join(checkpoint, "commits")
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    os.remove(os.path.join(commits, str(last)))
    crc = os.path.join(commits, f".{last}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    return last


def read_all_then_uncommit(spark, harness, tmp_path, remote: bool, fail_on_data_loss: bool):
    """A stopped recording of 1 KiB frames read in 16 KiB batches; the last batch left uncommitted."""
    rec = Recorder(harness, CHANNEL, STREAM)
    rec.publish(payloads_of([992] * 96))  # 1024-byte frames: six batches of 16
    rec.stop()
    options = source_options(harness, remote=remote, recordingId=rec.recording_id, maxBytesPerTrigger="16k",
                             failOnDataLoss=str(fail_on_data_loss).lower())
    collector = Collector()
    checkpoint = tmp_path / "cp"
    query = stream(spark, options, collector, checkpoint, availableNow=True)
    assert query.awaitTermination(120) and query.exception() is None
    assert collector.rows() == [(rec.recording_id, p, v) for p, v in rec.messages]
    batch = uncommit_last_batch(checkpoint)
    key = str(rec.recording_id)
    start, end = offsets(checkpoint, batch - 1)[key], offsets(checkpoint, batch)[key]
    assert end - start == 16 * 1024
    return rec, options, collector, checkpoint, batch, start, end


def extend(harness: Harness, rec: Recorder, payloads: list[bytes]) -> list[tuple[int, bytes]]:
    """Extend the stopped recording from its (new) stop position with `payloads`, then stop it again."""
    rec.publication.close()
    descriptor = harness.client.list_recording(rec.recording_id)
    channel = harness.client.extend_channel(CHANNEL, descriptor)
    extends = len(harness.signals.of(RecordingSignal.EXTEND, rec.recording_id))
    # The new publication first, and the extend subscription only for its session: the closed publication may still
    # drain on the same stream, and an image of it would join at its old position (INVALID_EXTENSION).
    rec.publication = harness.client.aeron.add_exclusive_publication(channel, STREAM)
    subscription_id = harness.client.extend_recording(
        rec.recording_id, add_session_id(channel, rec.publication.session_id), STREAM, SourceLocation.LOCAL
    )
    harness.await_signal(RecordingSignal.EXTEND, rec.recording_id, count=extends + 1)
    assert rec.publication.position == descriptor.stop_position
    sent = rec.publish(payloads)
    stops = len(harness.signals.of(RecordingSignal.STOP, rec.recording_id))
    harness.client.stop_recording_subscription(subscription_id)
    harness.await_signal(RecordingSignal.STOP, rec.recording_id, count=stops + 1)
    return sent


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_truncation_inside_a_planned_batch_delivers_what_is_left_and_continues(spark, harness, tmp_path, path):
    rec, options, collector, checkpoint, batch, start, end = read_all_then_uncommit(
        spark, harness, tmp_path, path == "replay", fail_on_data_loss=False
    )
    truncated = start + 9 * 1024  # inside [start, end): 9 of the batch's 16 messages survive
    harness.client.truncate_recording(rec.recording_id, truncated)
    survivors = [(rec.recording_id, p, v) for p, v in rec.messages if start <= p < truncated]

    query = stream(spark, options, collector, checkpoint, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert collector.batches[batch] == survivors  # the re-run batch: what still exists of [start, end)
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {str(rec.recording_id): truncated}
    assert [row for b in sorted(collector.batches) if b > batch for row in collector.batches[b]] == []

    # The recording is extended from its new end, past the planned end of the truncated batch: every new message
    # is delivered once, from the truncation point on (not from the stale planned end).
    new = extend(harness, rec, payloads_of([992] * 30, seed=8))
    assert new[0][0] == truncated and new[-1][0] > end
    query = stream(spark, options, collector, checkpoint, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    expected = [(rec.recording_id, p, v) for p, v in rec.messages if p < truncated]
    assert collector.rows() == expected + [(rec.recording_id, p, v) for p, v in new]


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_truncation_below_a_planned_batch_delivers_nothing_of_it_and_continues(spark, harness, tmp_path, path):
    rec, options, collector, checkpoint, batch, start, _ = read_all_then_uncommit(
        spark, harness, tmp_path, path == "replay", fail_on_data_loss=False
    )
    truncated = start - 3 * 1024  # the whole planned range is gone
    harness.client.truncate_recording(rec.recording_id, truncated)
    query = stream(spark, options, collector, checkpoint, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert collector.batches[batch] == []
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {str(rec.recording_id): truncated}


@pytest.mark.parametrize("path", ["archiveDir", "replay"])
def test_truncation_inside_a_planned_batch_fails_naming_the_recording_and_positions(spark, harness, tmp_path, path):
    rec, options, collector, checkpoint, _, start, end = read_all_then_uncommit(
        spark, harness, tmp_path, path == "replay", fail_on_data_loss=True
    )
    truncated = start + 9 * 1024
    harness.client.truncate_recording(rec.recording_id, truncated)
    query = stream(spark, options, collector, checkpoint, availableNow=True)
    with pytest.raises(Exception) as failure:
        query.awaitTermination(120)
    message = str(failure.value)
    assert f"recording {rec.recording_id} was truncated to {truncated}" in message
    assert f"[{start}, {end})" in message
    assert "failOnDataLoss=false" in message


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_recording_purged_while_a_batch_is_planned(spark, harness, tmp_path, fail_on_data_loss):
    rec, options, collector, checkpoint, batch, start, _ = read_all_then_uncommit(
        spark, harness, tmp_path, False, fail_on_data_loss=fail_on_data_loss
    )
    harness.client.purge_recording(rec.recording_id)
    wait_for(lambda: harness.client.list_recording(rec.recording_id) is None, what="the purge")
    query = stream(spark, options, collector, checkpoint, availableNow=True)
    if fail_on_data_loss:
        with pytest.raises(Exception, match=rf"recording {rec.recording_id} no longer exists .*position {start}"):
            query.awaitTermination(120)
    else:
        assert query.awaitTermination(120)
        assert query.exception() is None
        assert collector.batches[batch] == []
