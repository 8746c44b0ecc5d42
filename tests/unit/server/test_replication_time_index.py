"""`ReplicationSession`'s COPY_TIME_INDEX (ours, beyond Java): a source that answers the time index dates the replica.

Fakes as in `test_replication_session`, over a real `TimeIndexCopy` in a temporary directory: the session asks the
source for its samples over the replicated range once the replica holds it (stopped, or merged), a step of segments at
a time, spools each answer into the copy, lets it write at most one file per duty cycle, and only then ends
(REPLICATE_END, then what the conductor held back: the replica's STOP). Whatever goes wrong leaves the replica its
own times over what was not yet rewritten, silently for the requester (the replication itself succeeded). A Java
source is never asked.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from aeron_archive_spark.archive.codecs import templates
from aeron_archive_spark.archive.constants import ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.storage.time_index import (
    TimeIndexWriter,
    read_samples,
    read_time_index,
    time_index_file_name,
)
from aeron_archive_spark.archive.storage.time_index_copy import TEMP_SUFFIX, TimeIndexCopy
from aeron_archive_spark.archive.storage.time_index_search import RecordingGeometry
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
# The replica's files as the host lays them out: small segments, so that SRC's range [4096, 69632) spans eight files
# (bases 4096, 12288, ..., 61440: aligned to the start's term) and, three segments a step, three requests.
TERM, SEGMENT, STEP_SEGMENTS = 4096, 8192, 3
GEOMETRY = RecordingGeometry(NEW_REPLICA_ID, SRC.start_position, SRC.stop_position, TERM, SEGMENT)
SOURCE_T0, REPLICA_T0 = 1_000_000, 9_000_000
# The source's samples over SRC's range: one every 2048 bytes, 1 us apart.
SOURCE = [(SOURCE_T0 + k * 1_000, position) for k, position in enumerate(range(SRC.start_position, SRC.stop_position,
                                                                                  2048))]


class IndexHost(FakeHost):
    """The conductor with a time index kept: copies begun over a real directory, their limits settable."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.keeps = True
        self.begun: list[tuple[int, int, int]] = []
        self.limits = (SRC.start_position, SRC.stop_position)

    def keeps_time_index(self) -> bool:
        return self.keeps

    def time_index_copy(self, recording_id: int, from_position: int, to_position: int) -> TimeIndexCopy:
        self.begun.append((recording_id, from_position, to_position))
        geometry = RecordingGeometry(recording_id, SRC.start_position, to_position, TERM, SEGMENT)
        return TimeIndexCopy(self.directory, geometry, from_position, to_position, lambda: self.limits,
                             step_segments=STEP_SEGMENTS)


def index_rig(directory: Path, **fields: Any) -> Rig:
    rig = Rig(**fields)
    rig.host = IndexHost(directory)
    rig.session._host = rig.host
    rig.source.answers_time_index = True
    return rig


def own_index(directory: Path, start: int = SRC.start_position, stop: int = SRC.stop_position) -> None:
    """The replica's own samples, as its recorder took them (later than the source's), a block every 4096 bytes."""
    now = [REPLICA_T0]
    writer = TimeIndexWriter(directory, NEW_REPLICA_ID, INTERVAL_NS, clock=lambda: now[0])
    base = GEOMETRY.base_of(start)
    writer.open(base, start)
    for position in range(start, stop, 4096):
        if GEOMETRY.base_of(position) != base:
            base = GEOMETRY.base_of(position)
            writer.roll(base)
        writer.on_block(position)
        now[0] += INTERVAL_NS
    writer.close()


def samples_message(rig: Rig, samples: list[tuple[int, int]], correlation_id: int | None = None) -> None:
    raw = np.array(samples, dtype=np.int64).tobytes()
    rig.source.arriving.append(SimpleNamespace(
        template_id=templates.TIME_INDEX_SAMPLES, control_session_id=SRC_SESSION,
        correlation_id=rig.source.last_correlation_id if correlation_id is None else correlation_id,
        recording_id=SRC.recording_id, interval_ns=INTERVAL_NS, samples=raw))


def answer(rig: Rig, source: list[tuple[int, int]] = SOURCE, per_message: int = 3, count: int | None = None) -> int:
    """Answer the last TimeIndexRequest as the source does: the governing sample moved to `from`, then the later
    ones below `to`, `per_message` a message, then OK with the count. Returns the count."""
    request = rig.source.last("TimeIndexRequest")
    low, high = request.from_position, request.to_position
    governing = [k for k, (_, p) in enumerate(source) if p <= low][-1:]
    first = governing[0] if governing else next(k for k, (_, p) in enumerate(source) if p > low)
    samples = [(t, max(p, low)) for t, p in source[first:] if p < high]
    for k in range(0, len(samples), per_message):
        samples_message(rig, samples[k:k + per_message])
    rig.source.respond(relevant_id=len(samples) if count is None else count)
    return len(samples)


def synced_and_stopped(rig: Rig) -> None:
    """The image reaches the source's stop: SYNC, the replica's recording is stopped and the conductor says so."""
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.COPY_TIME_INDEX and not rig.session.is_done()
    assert rig.host.calls[-1] == ("stop_replica_subscription", (SUBSCRIPTION_ID,))
    rig.session.on_replica_stopped(SRC.stop_position)
    assert rig.state is State.COPY_TIME_INDEX


def run_copy(rig: Rig, cycles: int = 100, source: list[tuple[int, int]] = SOURCE) -> list[tuple[int, int]]:
    """Work the session until done, answering each step; the requests' ranges."""
    asked: list[tuple[int, int]] = []
    for _ in range(cycles):
        if rig.session.is_done():
            return asked
        sent = len(rig.source.sent)
        rig.work()
        if len(rig.source.sent) > sent and type(rig.source.sent[-1]).__name__ == "TimeIndexRequest":
            request = rig.source.sent[-1]
            asked.append((request.from_position, request.to_position))
            answer(rig, source)
    raise AssertionError("the copy did not end")


def replica_times(directory: Path) -> tuple[list[int], list[int]]:
    index = read_time_index(directory, NEW_REPLICA_ID, SRC.start_position, SRC.stop_position)
    return index.times_ns.tolist(), index.positions.tolist()


def temp_files(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith(TEMP_SUFFIX)]


def test_a_synced_replica_is_dated_by_the_source_step_by_step_before_replicate_end_and_its_held_stop(tmp_path):
    own_index(tmp_path)
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    asked = run_copy(rig)
    assert asked == [(4096, 28672), (28672, 53248), (53248, 69632)]  # three segments a step, in position order
    assert rig.host.begun == [(NEW_REPLICA_ID, SRC.start_position, SRC.stop_position)]
    assert {r.recording_id for r in rig.source.sent if type(r).__name__ == "TimeIndexRequest"} == {SRC.recording_id}
    times, positions = replica_times(tmp_path)
    assert positions == [p for _, p in SOURCE] and times == [t for t, _ in SOURCE]
    for base in range(SRC.start_position, SRC.stop_position, SEGMENT):  # a file's first sample: its first byte
        first = read_samples(str(tmp_path / time_index_file_name(NEW_REPLICA_ID, base)))[0]
        assert int(first["position"]) == base
    assert temp_files(tmp_path) == []
    order: list[str] = []
    rig.session.call_after_close(lambda: order.append("STOP"))
    rig.session.close()
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END] and order == ["STOP"]
    assert rig.host.errors == [] and rig.host.counted == []


def test_at_most_one_file_is_renamed_per_duty_cycle_and_the_next_step_is_asked_for_while_one_is_written(tmp_path):
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    assert rig.source.last("TimeIndexRequest").from_position == 4096
    answer(rig)
    counts, asked = [], []
    for _ in range(4):
        rig.work()
        counts.append(len([name for name in os.listdir(tmp_path) if name.endswith(".tix")]))
        asked.append(rig.source.last("TimeIndexRequest").from_position)
    # the first step's answer came: the second step asked for at once, while the first step's files are written
    assert asked == [28672] * 4
    assert counts == [1, 2, 3, 3]  # one file a cycle; then waiting for the second step's answer
    answer(rig)
    rig.work()
    assert rig.source.last("TimeIndexRequest").from_position == 53248  # asked while the second step is written
    assert counts[-1] + 1 == len([name for name in os.listdir(tmp_path) if name.endswith(".tix")])


def test_the_replica_stopping_first_goes_straight_to_the_copy(tmp_path):
    rig = index_rig(tmp_path)
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.session.on_replica_stopped(SRC.stop_position)  # the recorder ended it between two steps
    assert rig.state is State.COPY_TIME_INDEX and rig.host.signal_names() == [S.REPLICATE, S.SYNC]
    rig.work()
    assert rig.source.last("TimeIndexRequest").from_position == SRC.start_position


@pytest.mark.parametrize("case", ["java source", "index off here"])
def test_a_java_source_or_an_archive_without_an_index_asks_nothing_and_the_replica_keeps_its_own_times(case,
                                                                                                      tmp_path):
    rig = index_rig(tmp_path)
    if case == "java source":
        rig.source.answers_time_index = False  # Java's archive would never answer: it is never asked
    else:
        rig.host.keeps = False
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.DONE and "TimeIndexRequest" not in rig.source.names() and rig.host.begun == []


def test_the_source_dying_mid_copy_leaves_what_was_renamed_dated_by_it_the_rest_its_own_and_reports_nothing(tmp_path):
    own_index(tmp_path)
    own_times, _ = replica_times(tmp_path)
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    answer(rig)
    for _ in range(3):
        rig.work()  # the first step's three files renamed; the second step asked for
    rig.source.disconnected = True
    rig.work()
    assert rig.state is State.DONE and rig.host.errors == [] and rig.host.counted == []
    times, positions = replica_times(tmp_path)
    dated = [t for t, p in zip(times, positions, strict=True) if p < 28672]
    assert dated == [t for t, p in SOURCE if p < 28672]
    assert min(t for t, p in zip(times, positions, strict=True) if p >= 28672) >= REPLICA_T0  # its own
    assert bool(np.all(np.diff(times) >= 0)) and len(times) >= len(own_times) // 2
    assert temp_files(tmp_path) == []
    rig.session.close()
    assert rig.host.signal_names() == [S.REPLICATE, S.SYNC, S.REPLICATE_END]


def test_no_answer_within_the_action_timeout_leaves_the_replica_its_own_times(tmp_path):
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    rig.work(TIMEOUT_NS - 2)
    assert rig.state is State.COPY_TIME_INDEX
    samples_message(rig, SOURCE[:1])  # a message restarts the clock, as for the client
    rig.work(TIMEOUT_NS - 2)
    assert rig.state is State.COPY_TIME_INDEX
    rig.work(TIMEOUT_NS)
    assert rig.state is State.DONE and os.listdir(tmp_path) == [] and rig.host.errors == []


def test_a_source_without_an_index_for_the_recording_leaves_the_replica_its_own_times(tmp_path):
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    rig.source.respond(ControlResponseCode.ERROR, message="recording 3 has no time index")
    rig.work()
    assert rig.state is State.DONE and os.listdir(tmp_path) == [] and rig.host.errors == []


def test_samples_missing_from_a_step_s_answer_are_not_copied(tmp_path):
    own_index(tmp_path)
    before = replica_times(tmp_path)
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    count = answer(rig, count=None)
    rig.source.arriving[-1].relevant_id = count + 1  # the OK counts one more than came
    rig.work()
    assert rig.state is State.DONE and replica_times(tmp_path) == before and temp_files(tmp_path) == []


def test_a_source_that_cannot_date_the_range_s_first_byte_is_refused_without_writing(tmp_path):
    own_index(tmp_path)
    before = replica_times(tmp_path)
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    answer(rig, source=[(t, p) for t, p in SOURCE if p >= 8192])  # its index begins after the range's start
    rig.work()
    assert rig.state is State.DONE and replica_times(tmp_path) == before
    assert rig.host.errors == [] and rig.host.counted == []


def test_an_extension_started_mid_copy_keeps_the_file_its_recorder_appends_to(tmp_path):
    own_index(tmp_path)
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    last = tmp_path / time_index_file_name(NEW_REPLICA_ID, 61440)
    own_last = last.read_bytes()
    for _ in range(20):
        if rig.session.is_done():
            break
        if getattr(rig.source.sent[-1], "from_position", None) == 53248:
            rig.host.limits = (SRC.start_position, 61440)  # recorded again: the stop's segment is its recorder's
        sent = len(rig.source.sent)
        rig.work()
        if len(rig.source.sent) > sent:
            answer(rig)
    assert rig.state is State.DONE and last.read_bytes() == own_last
    times, positions = replica_times(tmp_path)
    assert [t for t, p in zip(times, positions, strict=True) if p < 61440] == [t for t, p in SOURCE if p < 61440]
    assert temp_files(tmp_path) == []


def test_a_replication_stopped_mid_copy_removes_the_half_written_file(tmp_path, monkeypatch):
    own_index(tmp_path)
    rig = index_rig(tmp_path)
    synced_and_stopped(rig)
    rig.work()
    answer(rig)
    monkeypatch.setattr("aeron_archive_spark.archive.storage.time_index_copy.CHUNK_SAMPLES", 2)
    rig.work()  # the first file half-written: two of its samples in its temp file
    assert len(temp_files(tmp_path)) == 1
    rig.session.abort("stop replication")
    rig.session.close()
    assert temp_files(tmp_path) == [] and rig.host.signal_names()[-1] == S.REPLICATE_END


def test_a_replica_that_does_not_stop_is_given_up_after_the_action_timeout(tmp_path):
    rig = index_rig(tmp_path)
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    assert rig.state is State.COPY_TIME_INDEX
    rig.work(TIMEOUT_NS)
    assert rig.state is State.DONE and "TimeIndexRequest" not in rig.source.names()


def test_a_replay_that_ended_early_fails_as_before_and_asks_for_no_index(tmp_path):
    rig = index_rig(tmp_path)
    image = rig.to_replicating()
    image.position = SRC.stop_position - 4096
    rig.session.on_replica_stopped(image.position)  # the source went away: no end of stream
    assert rig.state is State.DONE and len(rig.host.errors) == 1
    assert "TimeIndexRequest" not in rig.source.names()


def test_an_extension_asks_for_the_new_part_only(tmp_path):
    dst = replace(SRC, recording_id=21, stop_position=SRC.start_position + 8192)
    rig = index_rig(tmp_path, dst=dst)
    rig.host.stops[21] = dst.stop_position
    image = rig.to_replicating()
    image.position = SRC.stop_position
    rig.work()
    rig.session.on_replica_stopped(SRC.stop_position)
    rig.work()
    assert rig.host.begun == [(21, dst.stop_position, SRC.stop_position)]
    request = rig.source.last("TimeIndexRequest")
    assert (request.from_position, request.to_position) == (dst.stop_position, dst.stop_position + 3 * SEGMENT)


def test_a_merged_replica_is_dated_up_to_the_merge_and_keeps_recording(tmp_path):
    rig = live_rig()
    rig.host = IndexHost(tmp_path)
    rig.session._host = rig.host
    rig.source.answers_time_index = True
    image = _to_live_join(rig)
    _answer_position(rig, image.position)
    image.active_transport_count = 2
    _answer_position(rig, image.position)
    assert rig.state is State.COPY_TIME_INDEX and rig.host.signal_names() == [S.REPLICATE, S.MERGE]
    merge = image.position
    rig.host.limits = (SRC_LIVE.start_position, GEOMETRY.base_of(merge))  # the recorder writes the merge's segment
    asked = run_copy(rig, source=[(SOURCE_T0 + p, p) for p in range(SRC_LIVE.start_position, merge, 2048)])
    assert rig.host.begun == [(NEW_REPLICA_ID, SRC_LIVE.start_position, merge)]
    assert asked[0][0] == SRC_LIVE.start_position and asked[-1][1] == GEOMETRY.base_of(merge)
    rig.session.close()
    assert "stop_replica_subscription" not in rig.host.names()  # the replica goes on recording the live stream
