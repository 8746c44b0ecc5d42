"""The sink's block publisher on a real recorded publication: frames, term ends, fragmentation, limits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.connector.sink.errors import SinkError
from aeron_archive_spark.connector.sink.publisher import FramePublisher
from system.harness import Harness, payloads_of, wait_for
from system.test_sink_util import replay_recording


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def recorded_publication(harness: Harness, stream_id: int, term_length: int = 65536):
    channel = f"aeron:ipc?term-length={term_length}"
    publication = harness.client.aeron.add_exclusive_publication(channel, stream_id)
    subscription_id = harness.client.start_recording(add_session_id(channel, publication.session_id), stream_id)
    recording_id = harness.await_signal(RecordingSignal.START).recording_id
    return publication, subscription_id, recording_id


def finish(harness: Harness, publication, subscription_id: int, recording_id: int, position: int) -> None:
    wait_for(lambda: harness.client.get_recording_position(recording_id) == position, what="recorded")
    harness.client.stop_recording_subscription(subscription_id)
    harness.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()


@pytest.mark.parametrize("sizes", [
    [992] * 700,  # 1024-byte frames: blocks end exactly at term ends
    [0, 1, 31, 32, 33, 100, 1375, 1376, 1377, 3000, 8192] * 60,  # empty, aligned, unaligned, fragmented
    list(np.random.default_rng(3).integers(0, 2000, 3000)),
])
def test_values_are_recorded_as_aeron_frames(harness, sizes):
    publication, subscription_id, recording_id = recorded_publication(harness, 3101)
    payloads = payloads_of([int(s) for s in sizes], seed=len(sizes))
    reserved = np.arange(len(payloads), dtype=np.int64) * 7 - 100
    publisher = FramePublisher(publication, 10.0, "test publication")
    values = pa.array(payloads, pa.binary())
    half = len(payloads) // 2
    publisher.publish(values.slice(0, half), reserved[:half])  # sliced arrays (non-zero offset) too
    end = publisher.publish(values.slice(half), reserved[half:])
    assert end == publication.position
    finish(harness, publication, subscription_id, recording_id, end)
    assert replay_recording(harness.client, recording_id) == list(zip(payloads, reserved.tolist()))


def test_without_reserved_values_and_empty_input(harness):
    publication, subscription_id, recording_id = recorded_publication(harness, 3102)
    publisher = FramePublisher(publication, 10.0, "test publication")
    assert publisher.publish(pa.array([], pa.binary())) == publication.position
    end = publisher.publish(pa.array([b"a", b"bc"], pa.binary()))
    finish(harness, publication, subscription_id, recording_id, end)
    assert replay_recording(harness.client, recording_id) == [(b"a", 0), (b"bc", 0)]


def test_a_value_longer_than_the_max_message_is_named(harness):
    publication, subscription_id, recording_id = recorded_publication(harness, 3103)
    publisher = FramePublisher(publication, 10.0, "test publication")
    too_long = publication.max_message_length + 1
    with pytest.raises(SinkError, match=f"value of {too_long} bytes .* exceeds the maximum message length"):
        publisher.publish(pa.array([b"x", bytes(too_long)], pa.binary()))
    finish(harness, publication, subscription_id, recording_id, publication.position)


def test_no_subscriber_times_out_naming_the_publication(harness):
    publication = harness.client.aeron.add_exclusive_publication("aeron:ipc?term-length=65536", 3104)
    publisher = FramePublisher(publication, 0.3, "publication X")
    with pytest.raises(SinkError, match="publication X stayed not connected"):
        publisher.publish(pa.array([b"x"], pa.binary()))
    publication.close()
