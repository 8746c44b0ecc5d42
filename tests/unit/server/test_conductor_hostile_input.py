"""The conductor's request handling under hostile input (issue 11, defects 3, 6 and 7), over a fake Aeron client.

A real `ArchiveConductor` is built on a fake Aeron (counters that enforce the driver's label limit in bytes,
subscriptions that never deliver) and fed control messages through its adapter's fragment handler, so what is
checked is the conductor's own answers, errors counter and log, with a fake clock for the rate limit.
"""

from __future__ import annotations

import gc
import logging
import random
import re
import struct
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from aeron_archive_spark.archive.codecs import CODEC
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import (
    ARCHIVE_CONTROL_SESSION_TYPE_ID,
    COUNTER_MAX_LABEL_LENGTH,
    PROTOCOL_SEMANTIC_VERSION,
    ControlResponseCode,
)
from aeron_archive_spark.archive.server.conductor import ArchiveConductor
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.server.counters import fit_label
from tests.unit.server.fakes import SECOND, FakeClock, FakeResponder, request

CONDUCTOR_LOG = "aeron_archive_spark.archive.server.conductor"


class Counter:
    """Like the native counter: no history kept (the errors counter is set 100k times here)."""

    def __init__(self, counter_id: int, type_id: int, label: str) -> None:
        self.counter_id, self.type_id, self.label = counter_id, type_id, label
        self.value = 0
        self.closed = False

    def set(self, value: int) -> None:
        self.value = value

    def get(self) -> int:
        return self.value

    def close(self) -> None:
        self.closed = True


class Subscription:
    registration_id = 1

    def poll(self, handler: Any, limit: int) -> int:
        return 0

    def close(self) -> None:
        pass


class CountersReader:
    max_counter_id = 1023

    def state(self, counter_id: int) -> int:
        if not 0 <= counter_id <= self.max_counter_id:
            raise RuntimeError(f"counter id {counter_id} out of range 0..{self.max_counter_id}")
        return 0


class FakeAeron:
    """What the conductor asks of the Aeron client; `add_counter` refuses labels as the C client does (bytes)."""

    def __init__(self) -> None:
        self.counters: list[Counter] = []
        self.counters_reader = CountersReader()

    def add_counter(self, type_id: int, key: bytes, label: str) -> Counter:
        size = len(label.encode("utf-8"))
        if size > COUNTER_MAX_LABEL_LENGTH:
            raise ValueError(f"counter label is {size} bytes, max {COUNTER_MAX_LABEL_LENGTH}")
        counter = Counter(len(self.counters), type_id, label)
        self.counters.append(counter)
        return counter

    def add_subscription(self, channel: str, stream_id: int, **kwargs: Any) -> Subscription:
        return Subscription()


@dataclass
class Header:
    session_id: int


@pytest.fixture
def rig(tmp_path: Any) -> Iterator[tuple[ArchiveConductor, FakeAeron, FakeClock]]:
    clock = FakeClock()
    ctx = ArchiveContext(archive_dir=str(tmp_path), control_channel=None, nano_clock=clock)
    aeron = FakeAeron()
    conductor = ArchiveConductor(ctx, aeron, None, 77)  # type: ignore[arg-type]
    yield conductor, aeron, clock


def errors(conductor: ArchiveConductor) -> int:
    return conductor.counters.errors.get()


# -- defect 6: clientInfo that is not ASCII ----------------------------------------------------------------------
@pytest.mark.parametrize("client_info", [
    "\ufffd" * 200,  # non-ASCII bytes as the ASCII decoder hands them over: 3 bytes each in UTF-8
    "caf\u00e9 " * 100,
    "x" * 1000,
])
def test_a_connect_with_any_client_info_gets_a_session_and_a_byte_safe_counter(
        rig: tuple[ArchiveConductor, FakeAeron, FakeClock], client_info: str) -> None:
    conductor, aeron, _ = rig
    conductor.new_control_session(correlation_id=1, response_stream_id=20, version=PROTOCOL_SEMANTIC_VERSION,
                                  response_channel="aeron:ipc", credentials=b"", client_info=client_info,
                                  image_session_id=5)
    (session,) = conductor._control_sessions.values()
    assert session.counter is not None
    (counter,) = [c for c in aeron.counters if c.type_id == ARCHIVE_CONTROL_SESSION_TYPE_ID]
    assert session.counter is counter
    label = counter.label
    assert label.isascii() and len(label.encode()) <= COUNTER_MAX_LABEL_LENGTH
    assert label.startswith("control-session: ")
    assert label.endswith(f" sessionId=5 - archiveId=77")  # never cut off by a long clientInfo
    assert errors(conductor) == 0


def test_fit_label_keeps_head_and_tail_and_cuts_the_middle_by_bytes() -> None:
    assert fit_label("h:", "abc", ":t", max_length=6) == "h:ab:t"
    assert fit_label("h:", "\u00e9\u00e9\u00e9", ":t", max_length=7) == "h:???:t"
    assert fit_label("h:", "abc", ":t", max_length=3) == "h::t"  # no room at all: head and tail only
    assert fit_label("control-session: ", "x" * 500, " - archiveId=1").encode().__len__() == COUNTER_MAX_LABEL_LENGTH


def test_a_connect_whose_counter_cannot_be_added_still_gets_its_session(
        rig: tuple[ArchiveConductor, FakeAeron, FakeClock]) -> None:
    conductor, aeron, _ = rig

    def refuse(*args: Any) -> Counter:
        raise RuntimeError("counters file full")

    aeron.add_counter = refuse  # type: ignore[method-assign]
    conductor.new_control_session(correlation_id=1, response_stream_id=20, version=PROTOCOL_SEMANTIC_VERSION,
                                  response_channel="aeron:ipc", credentials=b"", client_info="c",
                                  image_session_id=5)
    (session,) = conductor._control_sessions.values()
    assert session.counter is None
    assert errors(conductor) == 1


# -- defect 3: ListRecordingSubscriptions with nothing to list ---------------------------------------------------
@pytest.mark.parametrize(("pseudo_index", "count"), [(0, 0), (0, -1), (-1, 5), (1, 5), (99, 5)])
def test_list_recording_subscriptions_outside_the_subscriptions_or_for_none_answers_subscription_unknown(
        rig: tuple[ArchiveConductor, FakeAeron, FakeClock], pseudo_index: int, count: int) -> None:
    """As Java's conductor: pseudoIndex < 0, pseudoIndex >= subscriptions or count <= 0 gets SUBSCRIPTION_UNKNOWN
    (relevant id 0) at once; a count <= 0 used to get no response at all."""
    conductor, _, _ = rig
    conductor._subscriptions["k"] = Any  # type: ignore[assignment]  # one subscription; never listed here
    responder = FakeResponder()
    conductor.list_recording_subscriptions(responder, request(  # type: ignore[arg-type]
        m.ListRecordingSubscriptionsRequest, correlation_id=9, pseudo_index=pseudo_index, subscription_count=count))
    assert [(r.kind, r.correlation_id, r.values) for r in responder.responses] == [
        ("code", 9, (0, ControlResponseCode.SUBSCRIPTION_UNKNOWN))
    ]
    assert responder.active_listing is None and conductor._listings == []


def test_a_bounded_replay_with_a_limit_counter_id_outside_the_counters_is_refused_by_name(
        rig: tuple[ArchiveConductor, FakeAeron, FakeClock]) -> None:
    conductor, _, _ = rig
    descriptor = type("D", (), {"start_position": 0, "stop_position": 1024})()
    conductor._descriptor = lambda recording_id: descriptor  # type: ignore[method-assign,assignment,return-value]
    responder = FakeResponder()
    from aeron_archive_spark.archive.exceptions import ArchiveError
    with pytest.raises(ArchiveError, match="limit counter id 1000000 is not an allocated counter"):
        conductor.start_replay(responder, request(  # type: ignore[arg-type]
            m.BoundedReplayRequest, correlation_id=3, length=1024, limit_counter_id=1_000_000, replay_stream_id=30,
            replay_channel="aeron:ipc"))


# -- defect 7: a flood of malformed control messages -------------------------------------------------------------
def _valid_requests(rng: random.Random) -> list[bytes]:
    """Well-formed requests for control sessions that do not exist, and a message that is no request at all."""
    cs = rng.randrange(1, 1 << 40)
    return [
        CODEC.encode("StartRecordingRequest", control_session_id=cs, correlation_id=1, stream_id=10,
                     source_location=0, channel="aeron:ipc"),
        CODEC.encode("ListRecordingsRequest", control_session_id=cs, correlation_id=2, from_recording_id=0,
                     record_count=10),
        CODEC.encode("ReplayRequest", control_session_id=cs, correlation_id=3, recording_id=0, position=0,
                     length=-1, replay_stream_id=3, file_io_max_length=0, replay_token=0, replay_channel="aeron:ipc"),
        CODEC.encode("KeepAliveRequest", control_session_id=cs, correlation_id=4),
        CODEC.encode("RecordingStarted", recording_id=1, start_position=0, session_id=1, stream_id=1,
                     channel="aeron:ipc", source_identity="x"),
    ]


def _is_connect(message: bytes) -> bool:
    if len(message) < 8:
        return False
    _, template_id, schema_id, _ = struct.unpack_from("<HHHH", message)
    return schema_id == t.SCHEMA_ID and template_id in (t.CONNECT_REQUEST, t.AUTH_CONNECT_REQUEST)


def fuzzed_messages(count: int, seed: int) -> Iterator[bytes]:
    """`count` control messages none of which is a request the archive can act on: garbage, foreign schemas,
    truncated, bit-flipped and re-typed requests, requests for unknown sessions. Connect requests are left out
    (a well-formed one is a legitimate client)."""
    rng = random.Random(seed)
    made = 0
    while made < count:
        base = rng.choice(_valid_requests(rng))
        kind = rng.randrange(6)
        if kind == 0:
            message = rng.randbytes(rng.randrange(1, 120))
        elif kind == 1:
            message = base[: rng.randrange(0, len(base))]
        elif kind == 2:
            mutable = bytearray(base)
            for _ in range(rng.randrange(1, 4)):
                mutable[rng.randrange(len(mutable))] = rng.randrange(256)
            message = bytes(mutable)
        elif kind == 3:
            message = struct.pack("<HHHH", 40, rng.randrange(1 << 16), t.SCHEMA_ID, 14) + base[8:]
        elif kind == 4:
            message = struct.pack("<HHHH", 40, 10, rng.randrange(1, 1 << 16), 14) + base[8:]
        else:
            message = base
        if message and not _is_connect(message):
            made += 1
            yield message


def test_a_hundred_thousand_malformed_messages_are_all_counted_logged_rate_limited_and_leave_memory_flat(
        rig: tuple[ArchiveConductor, FakeAeron, FakeClock], caplog: pytest.LogCaptureFixture) -> None:
    conductor, _, clock = rig
    caplog.set_level(logging.INFO)
    on_fragment = conductor._adapter._on_fragment
    header = Header(1234)
    warm_up, total = 10_000, 100_000
    messages = fuzzed_messages(total, seed=11)
    for i, message in enumerate(messages):
        on_fragment(memoryview(message), header)
        if i % 1000 == 999:
            clock.advance(SECOND // 10)  # 100k messages over ~10 s of conductor time
            conductor.do_work(clock.now)
        if i == warm_up - 1:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    growth = sum(s.size_diff for s in after.compare_to(before, "filename"))
    clock.advance(2 * SECOND)
    conductor.do_work(clock.now)  # the periodic report of what was suppressed

    assert errors(conductor) == total
    assert conductor._control_sessions == {}
    records = [r for r in caplog.records if r.name == CONDUCTOR_LOG]
    seconds = 10 + 2
    kinds = 4  # malformed, unexpected message, unknown session, failed request
    # Nothing else wrote a line per message (other threads of the test process may log a line or two meanwhile).
    others = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.name != CONDUCTOR_LOG]
    assert len(others) <= kinds * (seconds + 1), others[:20]
    assert len(records) <= 2 * kinds * (seconds + 1), [r.getMessage() for r in records[:20]]
    assert sum(r.exc_info is not None for r in records) == 0  # refusals carry no traceback
    written = reported = 0
    for record in records:
        text = record.getMessage()
        flushed = re.fullmatch(r".*: (\d+) more like this suppressed in the last [\d.]+s", text)
        if flushed:
            reported += int(flushed.group(1))
            continue
        written += 1
        suppressed = re.search(r"\((\d+) more like this suppressed\)$", text)
        reported += int(suppressed.group(1)) if suppressed else 0
    assert written + reported == total  # every message is either logged or in a reported count
    assert growth < 512 * 1024, f"memory grew by {growth} bytes over {total - warm_up} malformed messages"
