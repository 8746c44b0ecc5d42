"""Hostile and bad input on the control protocol of a real archive (issue 11, defects 3, 6 and 7).

Every well-formed request is answered, even when what it asks for fails in the media driver or quotes bytes the
response cannot carry; a connect with any clientInfo gets its session; and a flood of malformed messages is
counted, logged rate-limited and leaves memory where it was.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import pytest

from aeron_archive_spark.archive import ArchiveError, ErrorCode, SourceLocation
from aeron_archive_spark.archive.codecs import load_archive_codec
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import (
    ARCHIVE_CONTROL_SESSION_TYPE_ID,
    COUNTER_MAX_LABEL_LENGTH,
    PROTOCOL_SEMANTIC_VERSION,
    ControlResponseCode,
)
from aeron_archive_spark.archive.exceptions import ArchiveTimeoutError
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for
from system.test_record_replay import record
from tests.unit.server.test_conductor_hostile_input import fuzzed_messages

CODEC = load_archive_codec()
REFUSED_CHANNELS = ["aeron:udp?endpoint=localhost:70000", "aeron:udp", "aeron:ipc?session-id=abc"]


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def errors_counter(h: Harness) -> int:
    assert h.archive is not None
    return h.archive.conductor.counters.errors.get()


class RawSession:
    """A control session spoken by hand, to send what the client library never would (non-ASCII bytes, counts
    it short-circuits)."""

    _next_stream = 4300

    def __init__(self, h: Harness, client_info: bytes | str = b"raw") -> None:
        aeron = h.client.aeron
        RawSession._next_stream += 1
        self.stream_id = RawSession._next_stream
        self.pub = aeron.add_exclusive_publication(h.ctx.local_control_channel, h.ctx.local_control_stream_id)
        self.response_channel = f"aeron:ipc?session-id={self.pub.session_id}"
        self.sub = aeron.add_subscription(self.response_channel, self.stream_id)
        wait_for(lambda: self.pub.is_connected, what="control publication connected")
        self.received: list[Any] = []
        self.next_correlation_id = 100
        self.send("AuthConnectRequest", correlation_id=1, response_stream_id=self.stream_id,
                  version=PROTOCOL_SEMANTIC_VERSION, response_channel=self.response_channel,
                  encoded_credentials=b"", client_info=client_info)
        (connected,) = self.responses(1)
        assert connected.code == ControlResponseCode.OK, connected
        self.control_session_id = connected.relevant_id

    def send(self, name: str, **fields: Any) -> None:
        offer_all(self.pub, [CODEC.encode(name, **fields)])

    def request(self, name: str, **fields: Any) -> int:
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        self.send(name, control_session_id=self.control_session_id, correlation_id=correlation_id, **fields)
        return correlation_id

    def responses(self, correlation_id: int, timeout: float = 5.0) -> list[Any]:
        """What came for `correlation_id` up to its final ControlResponse."""
        def done() -> bool:
            return any(m.template_id == t.CONTROL_RESPONSE and m.correlation_id == correlation_id
                       for m in self.received)
        wait_for(done, timeout, f"a response to correlationId={correlation_id}",
                 poll=lambda: self.sub.poll(lambda d, _: self.received.append(CODEC.decode(d)), 10))
        return [m for m in self.received if getattr(m, "correlation_id", None) == correlation_id]

    def close(self) -> None:
        self.sub.close()
        self.pub.close()


# -- defect 3 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("channel", REFUSED_CHANNELS)
def test_a_recording_the_media_driver_refuses_is_answered_with_an_error_naming_the_request(harness, channel):
    client = harness.connect(message_timeout_s=3.0)
    before = errors_counter(harness)
    for location in (SourceLocation.LOCAL, SourceLocation.REMOTE):
        with pytest.raises(ArchiveError) as err:
            client.start_recording(channel, 4310, location)
        assert not isinstance(err.value, ArchiveTimeoutError)
        assert err.value.error_code == ErrorCode.GENERIC
        assert "StartRecordingRequest" in err.value.message or "channel" in err.value.message
    assert client.archive_id() == harness.archive.archive_id  # the session is still usable
    assert client.list_recording_subscriptions(0, 10, "", 0, False) == []
    assert errors_counter(harness) >= before


def test_replays_the_media_driver_refuses_or_with_a_bad_limit_counter_are_answered(harness):
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, _, pub, _ = record(harness, channel, 4311, payloads_of([100] * 10))
    harness.client.stop_recording(channel, 4311)
    pub.close()
    client = harness.connect(message_timeout_s=3.0)
    for replay_channel in REFUSED_CHANNELS:
        with pytest.raises(ArchiveError) as err:
            client.start_replay(recording_id, 0, -1, replay_channel, 4312)
        assert not isinstance(err.value, ArchiveTimeoutError), replay_channel
    for limit_counter_id in (1 << 30, 2**31 - 1):
        with pytest.raises(ArchiveError) as err:
            client.start_bounded_replay(recording_id, 0, -1, limit_counter_id, "aeron:ipc", 4313)
        assert not isinstance(err.value, ArchiveTimeoutError)
        assert f"limit counter id {limit_counter_id}" in err.value.message
    assert client.archive_id() == harness.archive.archive_id


def test_requests_quoting_non_ascii_bytes_and_listings_of_nothing_are_answered(harness):
    raw = RawSession(harness)
    try:
        bad = b"aeron:udp?endpoint=localhost:4\xc3\xa9\xff"
        for name, fields in [
            ("StartRecordingRequest", {"stream_id": 4314, "source_location": 1, "channel": bad}),
            ("StopRecordingRequest", {"stream_id": 4314, "channel": bad}),
            ("ReplayRequest", {"recording_id": 0, "position": 0, "length": -1, "replay_stream_id": 4315,
                               "file_io_max_length": 0, "replay_token": -1, "replay_channel": bad}),
        ]:
            correlation_id = raw.request(name, **fields)
            (response,) = raw.responses(correlation_id)
            assert response.code == ControlResponseCode.ERROR, (name, response)
            assert response.error_message.isascii()
        for pseudo_index, count in [(0, 0), (0, -3), (-1, 10), (5, 10)]:
            correlation_id = raw.request("ListRecordingSubscriptionsRequest", pseudo_index=pseudo_index,
                                         subscription_count=count, apply_stream_id=0, stream_id=0, channel="")
            (response,) = raw.responses(correlation_id)
            assert (response.code, response.relevant_id) == (ControlResponseCode.SUBSCRIPTION_UNKNOWN, 0)
        correlation_id = raw.request("ArchiveIdRequest")
        (response,) = raw.responses(correlation_id)
        assert (response.code, response.relevant_id) == (ControlResponseCode.OK, harness.archive.archive_id)
    finally:
        raw.close()


# -- defect 6 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("client_info", [b"\xc3\xa9" * 150, b"client \xff\xfe" + b"x" * 600, "é".encode() * 10])
def test_a_connect_with_non_ascii_client_info_gets_a_session_with_a_byte_safe_counter(harness, client_info):
    before = errors_counter(harness)
    raw = RawSession(harness, client_info=client_info)
    try:
        reader = harness.client.aeron.counters_reader
        ids = [i for i in reader.find_by_type(ARCHIVE_CONTROL_SESSION_TYPE_ID)
               if reader.get(i) == raw.control_session_id]
        assert len(ids) == 1
        label = reader.label(ids[0])
        assert label.isascii() and len(label.encode()) <= COUNTER_MAX_LABEL_LENGTH
        assert label.startswith("control-session: ")
        assert label.endswith(f" - archiveId={harness.archive.archive_id}")
        assert errors_counter(harness) == before
        correlation_id = raw.request("ArchiveIdRequest")
        assert raw.responses(correlation_id)[0].code == ControlResponseCode.OK
    finally:
        raw.close()


# -- defect 7 --------------------------------------------------------------------------------------------------
def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_flood_of_malformed_control_messages_is_counted_logged_rate_limited_and_leaves_memory_flat(
        harness, caplog):
    caplog.set_level(logging.INFO, logger="aeron_archive_spark")
    total, warm_up = 100_000, 20_000
    aeron = harness.client.aeron
    # A small term: the flood cycles through the same log-buffer pages instead of touching fresh ones (RSS).
    channel = f"{harness.ctx.local_control_channel}?term-length={SMALL_TERM}"
    pub = aeron.add_exclusive_publication(channel, harness.ctx.local_control_stream_id)
    wait_for(lambda: pub.is_connected)
    before = errors_counter(harness)
    messages = fuzzed_messages(total, seed=23)
    start = time.monotonic()
    offer_all(pub, (next(messages) for _ in range(warm_up)), timeout=120)
    wait_for(lambda: errors_counter(harness) - before == warm_up, timeout=60, what="warm-up counted")
    gc.collect()
    rss_warm = _rss_bytes()
    offer_all(pub, messages, timeout=300)
    wait_for(lambda: errors_counter(harness) - before >= total, timeout=120, what="every message counted")
    elapsed = time.monotonic() - start
    gc.collect()
    rss_after = _rss_bytes()
    time.sleep(1.2)  # the periodic report of the suppressed lines
    harness.client.archive_id()
    pub.close()

    assert errors_counter(harness) - before == total
    assert harness.client.archive_id() == harness.archive.archive_id  # alive and answering
    records = [r for r in caplog.records if r.name.startswith("aeron_archive_spark.archive.server")]
    kinds = 5
    bound = 2 * kinds * (elapsed + 3)
    assert len(records) <= bound, (len(records), elapsed, [r.getMessage() for r in records[:10]])
    assert all(r.exc_info is None for r in records)
    assert rss_after - rss_warm < max(16 << 20, rss_warm // 10), (rss_warm, rss_after)
    logging.getLogger(__name__).info("%d malformed messages in %.1fs: %d log lines, RSS %d -> %d KiB",
                                     total, elapsed, len(records), rss_warm >> 10, rss_after >> 10)


def test_an_image_the_archive_cannot_record_is_an_error_to_the_client(harness, monkeypatch):
    # A failure that is no refusal (here the disk, as a segment file cannot be created) must still reach the client
    # that asked for the recording, and leave neither an active recording nor its rec-pos counter behind.
    from aeron_archive_spark.archive.server import conductor

    def no_space(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(conductor, "RecordingWriter", no_space)
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    harness.client.start_recording(channel, 4711, SourceLocation.LOCAL)
    pub = harness.client.aeron.add_exclusive_publication(channel, 4711)
    try:
        with pytest.raises(ArchiveError) as err:
            wait_for(lambda: False, timeout=10, poll=harness.client.poll_for_recording_signals)
        assert err.value.error_code == ErrorCode.GENERIC
        assert "No space left on device" in err.value.message
        [d] = harness.client.list_recordings()
        assert d.stop_position == d.start_position  # stopped, empty: not an active recording forever
        assert harness.client.get_recording_position(d.recording_id) == -1  # no rec-pos counter left
    finally:
        pub.close()
