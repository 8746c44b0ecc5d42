"""`ReplicationSession`'s COPY_TIME_INDEX (ours, beyond Java): a source that answers the time index dates the replica.

Fakes as in `test_replication_session`: the session asks the source for its samples over the replicated range once the
replica holds it (stopped, or merged), hands them to the host, and only then ends (REPLICATE_END, then what the
conductor held back: the replica's STOP). Whatever goes wrong leaves the replica its own times, silently for the
requester (the replication itself succeeded). A Java source is never asked.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from aeron_archive_spark.archive.codecs import templates
from aeron_archive_spark.archive.constants import ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.storage.time_index import TimeIndex
from aeron_archive_spark.archive.storage.time_index_copy import TimeIndexCopyRefused
from tests.unit.server.test_replication_session import (
    NEW_REPLICA_ID,
    SRC,
    SRC_LIVE,
    SRC_SESSION,
    SUBSCRIPTION_ID,
    TIMEOUT_NS,
    FakeHost,
    Rig,
    _answer_position,
    _to_live_join,
    live_rig,
)
from tests.unit.server.test_replication_session import State as State

S = RecordingSignal
INTERVAL_NS = 10_000_000


class IndexHost(FakeHost):
    """The conductor with a time index kept; the copies asked for are recorded (or refused with `refusal`)."""

    def __init__(self) -> None:
        super().__init__()
        self.keeps = True
        self.copies: list[tuple[int, int, int, TimeIndex]] = []
        self.refusal: Exception | None = None

    def keeps_time_index(self) -> bool:
        return self.keeps

    def copy_replica_time_index(self, recording_id: int, from_position: int, to_position: int, index: TimeIndex) -> int:
        if self.refusal is not None:
            raise self.refusal
        self.copies.append((recording_id, from_position, to_position, index))
        return 1


def index_rig(**fields: Any) -> Rig:
    rig = Rig(**fields)
    rig.host = IndexHost()
    rig.session._host = rig.host
    rig.source.answers_time_index = True
    return rig


def samples_message(rig: Rig, samples: list[tuple[int, int]], correlation_id: int | None = None) -> None:
    raw = np.array(samples, dtype=np.int64).tobytes()
    rig.source.arriving.append(SimpleNamespace(
        template_id=templates.TIME_INDEX_SAMPLES, control_session_id=SRC_SESSION,
        correlation_id=rig.source.last_correlation_id if correlation_id is None else correlation_id,
        recording_id=SRC.recording_id, interval_ns=INTERVAL_NS, samples=raw))


def synced_and_stopped(rig: Rig) -> None:
    """The image reaches the source's stop: SYNC, the replica's recording is stopped and the conductor says so."""
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.COPY_TIME_INDEX and not rig.session.is_done()
    assert rig.host.calls[-1] == ("stop_replica_subscription", (SUBSCRIPTION_ID,))
    rig.session.on_replica_stopped(SRC.stop_position)
    assert rig.state is State.COPY_TIME_INDEX


SAMPLES = [(1_000, SRC.start_position), (2_000, SRC.start_position + 4096), (3_000, SRC.start_position + 8192)]


def test_a_synced_replica_is_dated_by_the_source_s_samples_before_replicate_end_and_its_held_stop():
    rig = index_rig()
    synced_and_stopped(rig)
    rig.work()
    request = rig.source.last("TimeIndexRequest")
    assert (request.recording_id, request.from_position, request.to_position) == (
        SRC.recording_id, SRC.start_position, SRC.stop_position)
    samples_message(rig, SAMPLES[:2])
    samples_message(rig, SAMPLES[2:])
    rig.source.respond(relevant_id=3)
    rig.work()
    assert rig.state is State.DONE
    ((recording_id, low, high, index),) = rig.host.copies
    assert (recording_id, low, high, index.interval_ns) == (NEW_REPLICA_ID, SRC.start_position, SRC.stop_position,
                                                            INTERVAL_NS)
    assert index.times_ns.tolist() == [t for t, _ in SAMPLES] and index.positions.tolist() == [p for _, p in SAMPLES]
    order: list[str] = []
    rig.session.call_after_close(lambda: order.append("STOP"))
    rig.session.close()
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END] and order == ["STOP"]
    assert rig.host.errors == [] and rig.host.counted == []


def test_a_replica_stopping_first_goes_straight_to_the_copy():
    rig = index_rig()
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.session.on_replica_stopped(SRC.stop_position)  # the recorder ended it between two steps
    assert rig.state is State.COPY_TIME_INDEX and rig.host.signal_names() == [S.REPLICATE, S.SYNC]
    rig.work()
    assert rig.source.last("TimeIndexRequest").to_position == SRC.stop_position


@pytest.mark.parametrize("case", ["java source", "index off here"])
def test_a_java_source_or_an_archive_without_an_index_asks_nothing_and_the_replica_keeps_its_own_times(case):
    rig = index_rig()
    if case == "java source":
        rig.source.answers_time_index = False  # Java's archive would never answer: it is never asked
    else:
        rig.host.keeps = False
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.DONE and "TimeIndexRequest" not in rig.source.names()


def test_the_source_dying_before_answering_leaves_the_replica_its_own_times_and_reports_nothing():
    rig = index_rig()
    synced_and_stopped(rig)
    rig.work()
    rig.source.disconnected = True
    rig.work()
    assert rig.state is State.DONE and rig.host.copies == []
    assert rig.host.errors == [] and rig.host.counted == []
    rig.session.close()
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END]


def test_no_answer_within_the_action_timeout_leaves_the_replica_its_own_times():
    rig = index_rig()
    synced_and_stopped(rig)
    rig.work()
    rig.work(TIMEOUT_NS - 2)
    assert rig.state is State.COPY_TIME_INDEX
    samples_message(rig, SAMPLES[:1])  # a message restarts the clock, as for the client
    rig.work(TIMEOUT_NS - 2)
    assert rig.state is State.COPY_TIME_INDEX
    rig.work(TIMEOUT_NS)
    assert rig.state is State.DONE and rig.host.copies == [] and rig.host.errors == []


def test_a_source_without_an_index_for_the_recording_leaves_the_replica_its_own_times():
    rig = index_rig()
    synced_and_stopped(rig)
    rig.work()
    rig.source.respond(ControlResponseCode.ERROR, message="recording 3 has no time index")
    rig.work()
    assert rig.state is State.DONE and rig.host.copies == [] and rig.host.errors == []


def test_samples_missing_from_the_answer_are_not_copied():
    rig = index_rig()
    synced_and_stopped(rig)
    rig.work()
    samples_message(rig, SAMPLES[:2])
    rig.source.respond(relevant_id=3)
    rig.work()
    assert rig.state is State.DONE and rig.host.copies == []


def test_a_copy_the_host_refuses_ends_the_replication_quietly():
    rig = index_rig()
    rig.host.refusal = TimeIndexCopyRefused("would go back in time")
    synced_and_stopped(rig)
    rig.work()
    samples_message(rig, SAMPLES)
    rig.source.respond(relevant_id=3)
    rig.work()
    assert rig.state is State.DONE and rig.host.errors == [] and rig.host.counted == []


def test_a_replica_that_does_not_stop_is_given_up_after_the_action_timeout():
    rig = index_rig()
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.COPY_TIME_INDEX
    rig.work(TIMEOUT_NS)
    assert rig.state is State.DONE and "TimeIndexRequest" not in rig.source.names()


def test_a_replay_that_ended_early_fails_as_before_and_asks_for_no_index():
    rig = index_rig()
    image = rig.to_replicating()
    image.position = SRC.stop_position - 4096
    rig.session.on_replica_stopped(image.position)  # the source went away: no end of stream
    assert rig.state is State.DONE and len(rig.host.errors) == 1
    assert "TimeIndexRequest" not in rig.source.names()


def test_an_extension_asks_for_the_new_part_only():
    dst = replace(SRC, recording_id=21, stop_position=SRC.start_position + 8192)
    rig = index_rig(dst=dst)
    rig.host.stops[21] = dst.stop_position
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    rig.session.on_replica_stopped(SRC.stop_position)
    rig.work()
    request = rig.source.last("TimeIndexRequest")
    assert (request.from_position, request.to_position) == (dst.stop_position, SRC.stop_position)


def test_a_merged_replica_is_dated_up_to_the_merge_and_keeps_recording():
    rig = live_rig()
    rig.host = IndexHost()
    rig.session._host = rig.host
    rig.source.answers_time_index = True
    image = _to_live_join(rig)
    _answer_position(rig, image.position)
    image.active_transport_count = 2
    _answer_position(rig, image.position)
    assert rig.state is State.COPY_TIME_INDEX and rig.host.signal_names() == [S.REPLICATE, S.MERGE]
    rig.work()
    request = rig.source.last("TimeIndexRequest")
    assert (request.from_position, request.to_position) == (SRC_LIVE.start_position, image.position)
    samples_message(rig, [(1_000, SRC_LIVE.start_position)])
    rig.source.respond(relevant_id=1)
    rig.work()
    assert rig.state is State.DONE and rig.host.copies[0][1:3] == (SRC_LIVE.start_position, image.position)
    rig.session.close()
    assert "stop_replica_subscription" not in rig.host.names()  # the replica goes on recording the live stream
