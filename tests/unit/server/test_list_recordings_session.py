"""ListRecordingsSession (ListRecordings / ListRecordingsForUri) over a real catalog in a temporary directory.

The requesting control session is a fake `ControlResponder` that can refuse descriptors as a back-pressured
client does; every test checks exactly which descriptors were sent and how the listing ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aeron_archive_spark.archive.codecs import CODEC
from aeron_archive_spark.archive.constants import ControlResponseCode, RecordingState
from aeron_archive_spark.archive.server.control_response_proxy import ControlResponseProxy
from aeron_archive_spark.archive.server.list_recordings_session import (
    MAX_SCANS_PER_WORK_CYCLE,
    ListRecordingsSession,
    uri_filter,
)
from aeron_archive_spark.archive.storage.catalog import Catalog
from tests.unit.server.fakes import FakeResponder
from tests.unit.storage_helpers import SEGMENT_LENGTH, TERM_LENGTH

CORRELATION_ID = 88
UDP = "aeron:udp?endpoint=localhost:40123"
IPC = "aeron:ipc"


def add_recordings(catalog: Catalog, count: int) -> None:
    """Even ids: UDP stream 1001; odd ids: IPC stream 1002."""
    for i in range(catalog.next_recording_id, catalog.next_recording_id + count):
        channel, stream_id = (UDP, 1001) if i % 2 == 0 else (IPC, 1002)
        catalog.add_new_recording(0, 1_700_000_000_000 + i, 7, SEGMENT_LENGTH, TERM_LENGTH, 1408, 100 + i,
                                  stream_id, channel, channel + "|alias=rec" + str(i), "source")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    catalog = Catalog(tmp_path)
    add_recordings(catalog, 10)
    yield catalog
    catalog.close()


def listed_ids(responder: FakeResponder) -> list[int]:
    proxy = ControlResponseProxy()
    return [CODEC.decode(proxy.recording_descriptor(1, r.correlation_id, r.values[0])).recording_id
            for r in responder.of_kind("descriptor")]


def endings(responder: FakeResponder) -> list[tuple[int, int, ControlResponseCode]]:
    return [(r.correlation_id, *r.values) for r in responder.of_kind("code")]


def run(session: ListRecordingsSession, max_cycles: int = 1000) -> int:
    cycles = 0
    while not session.is_done() and cycles < max_cycles:
        session.do_work(0)
        cycles += 1
    assert session.is_done()
    return cycles


def test_lists_every_recording_from_the_first_then_reports_the_next_id_unknown(catalog: Catalog) -> None:
    responder = FakeResponder()
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 100)
    assert not session.is_done()
    assert session.owner_id == responder.control_session_id
    session.do_work(0)
    assert listed_ids(responder) == list(range(10))
    assert all(r.correlation_id == CORRELATION_ID for r in responder.responses)
    assert endings(responder) == [(CORRELATION_ID, 10, ControlResponseCode.RECORDING_UNKNOWN)]
    assert responder.responses[-1].kind == "code"
    assert session.is_done()
    assert session.do_work(0) == 0
    assert len(responder.responses) == 11


def test_stops_after_count_descriptors_without_an_unknown(catalog: Catalog) -> None:
    responder = FakeResponder()
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 3, 4)
    run(session)
    assert listed_ids(responder) == [3, 4, 5, 6]
    assert endings(responder) == []


def test_a_page_that_runs_past_the_end_of_the_catalog_ends_with_recording_unknown(catalog: Catalog) -> None:
    responder = FakeResponder()
    run(ListRecordingsSession(responder, catalog, CORRELATION_ID, 8, 5))
    assert listed_ids(responder) == [8, 9]
    assert endings(responder) == [(CORRELATION_ID, 10, ControlResponseCode.RECORDING_UNKNOWN)]


def test_a_start_beyond_the_catalog_is_answered_with_recording_unknown_for_that_id(catalog: Catalog) -> None:
    responder = FakeResponder()
    run(ListRecordingsSession(responder, catalog, CORRELATION_ID, 25, 5))
    assert listed_ids(responder) == []
    assert endings(responder) == [(CORRELATION_ID, 25, ControlResponseCode.RECORDING_UNKNOWN)]


@pytest.mark.parametrize("count", [0, -3])
def test_a_count_of_zero_or_less_is_answered_at_once(catalog: Catalog, count: int) -> None:
    responder = FakeResponder()
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 4, count)
    assert session.is_done()
    assert endings(responder) == [(CORRELATION_ID, 4, ControlResponseCode.RECORDING_UNKNOWN)]
    assert session.do_work(0) == 0


def test_a_negative_start_lists_from_the_first_recording(catalog: Catalog) -> None:
    responder = FakeResponder()
    run(ListRecordingsSession(responder, catalog, CORRELATION_ID, -5, 2))
    assert listed_ids(responder) == [0, 1]


def test_a_long_listing_is_spread_over_duty_cycles(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    try:
        add_recordings(catalog, 2 * MAX_SCANS_PER_WORK_CYCLE + 10)
        responder = FakeResponder()
        session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 1000)
        assert session.do_work(0) == MAX_SCANS_PER_WORK_CYCLE
        assert listed_ids(responder) == list(range(MAX_SCANS_PER_WORK_CYCLE))
        session.do_work(0)
        assert len(listed_ids(responder)) == 2 * MAX_SCANS_PER_WORK_CYCLE
        session.do_work(0)
        assert listed_ids(responder) == list(range(2 * MAX_SCANS_PER_WORK_CYCLE + 10))
        assert endings(responder) == [(CORRELATION_ID, catalog.next_recording_id,
                                       ControlResponseCode.RECORDING_UNKNOWN)]
    finally:
        catalog.close()


def test_back_pressure_pauses_the_listing_and_it_resumes_at_the_refused_recording(catalog: Catalog) -> None:
    responder = FakeResponder()
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 6)
    responder.back_pressured = True
    session.do_work(0)
    session.do_work(0)
    assert responder.responses == []
    assert not session.is_done()
    responder.back_pressured = False
    session.do_work(0)
    assert listed_ids(responder) == [0, 1, 2, 3, 4, 5]
    responder.responses.clear()

    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 6)
    sends = iter([True, True, False, True, False, False, True, True, True, True])
    original = responder.send_descriptor

    def flaky(correlation_id: int, catalog_bytes: bytes, throttle: bool = True) -> bool:
        return next(sends) and original(correlation_id, catalog_bytes, throttle)

    responder.send_descriptor = flaky
    run(session)
    assert listed_ids(responder) == [0, 1, 2, 3, 4, 5]  # nothing skipped, nothing twice


def test_listing_for_a_uri_sends_only_matching_recordings(catalog: Catalog) -> None:
    responder = FakeResponder()
    run(ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 3, uri_filter(catalog, "ipc", 1002)))
    assert listed_ids(responder) == [1, 3, 5]
    assert endings(responder) == []
    responder.responses.clear()
    run(ListRecordingsSession(responder, catalog, CORRELATION_ID, 5, 10, uri_filter(catalog, "alias=rec", 1001)))
    assert listed_ids(responder) == [6, 8]
    assert endings(responder) == [(CORRELATION_ID, 10, ControlResponseCode.RECORDING_UNKNOWN)]


def test_uri_filter_matches_the_original_channel_and_the_exact_stream(catalog: Catalog) -> None:
    matches = uri_filter(catalog, "endpoint=localhost:40123", 1001)
    assert [rid for rid in range(10) if matches(rid)] == [0, 2, 4, 6, 8]
    assert not any(uri_filter(catalog, "endpoint=localhost:40123", 1002)(rid) for rid in range(10))
    assert not any(uri_filter(catalog, "aeron:ipc", 1001)(rid) for rid in range(10))
    # Only the original channel counts: the alias is not in the stripped channel.
    assert [rid for rid in range(10) if uri_filter(catalog, "alias=rec3", 1002)(rid)] == [3]
    assert not uri_filter(catalog, "", 1001)(10)  # no such recording
    assert not uri_filter(catalog, "ipc\u00e9", 1002)(1)  # US-ASCII bytes, as Java sends them: "ipc?"


@pytest.mark.parametrize("fragment", ["", "aeron", "ipc", "udp?endpoint", "|alias=rec1", "rec1", "x", "40123|"])
@pytest.mark.parametrize("stream_id", [1001, 1002])
def test_uri_filter_on_the_raw_entry_agrees_with_the_decoded_descriptor(
    catalog: Catalog, fragment: str, stream_id: int
) -> None:
    add_recordings(catalog, 8)  # more ids, so the ids' digits change the var fields' lengths
    raw = uri_filter(catalog, fragment, stream_id)
    for rid in range(catalog.next_recording_id):
        d = catalog.get(rid)
        assert raw(rid) == (d.stream_id == stream_id and fragment in d.original_channel), (rid, fragment)


def test_a_recording_invalidated_during_a_listing_is_skipped(catalog: Catalog) -> None:
    responder = FakeResponder()
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 100)
    assert catalog.change_state(4, RecordingState.INVALID)
    run(session)
    assert listed_ids(responder) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    responder.responses.clear()
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 100, uri_filter(catalog, "udp", 1001))
    assert catalog.change_state(6, RecordingState.INVALID)
    run(session)
    assert listed_ids(responder) == [0, 2, 8]


def test_abort_ends_the_listing_without_further_responses(catalog: Catalog) -> None:
    responder = FakeResponder(back_pressured=True)
    session = ListRecordingsSession(responder, catalog, CORRELATION_ID, 0, 5)
    session.do_work(0)
    session.abort("control session closed")
    assert session.is_done()
    responder.back_pressured = False
    assert session.do_work(0) == 0
    assert responder.responses == []
