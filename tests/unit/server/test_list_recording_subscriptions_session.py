"""ListRecordingSubscriptionsSession: filtering, paging from a pseudo index, count, SUBSCRIPTION_UNKNOWN, back pressure.

The expected answers are this archive's wire behaviour (a negative pseudo index counts from 0, SUBSCRIPTION_UNKNOWN
carries the index after the last descriptor sent and only follows a short page), checked against a fake responder
and, for back pressure as clients see it, against a real control session over a back-pressured fake publication.
"""

from __future__ import annotations

from aeron_archive_spark.archive.constants import ControlResponseCode
from aeron_archive_spark.archive.server.list_recording_subscriptions_session import (
    ListRecordingSubscriptionsSession,
    SubscriptionDescriptor,
)
from tests.unit.server.fakes import FakeConductor, FakeResponder, active_control_session

CORRELATION_ID = 99
SUBSCRIPTIONS = [
    SubscriptionDescriptor(101, 10, "aeron:udp?endpoint=localhost:40001"),
    SubscriptionDescriptor(102, 20, "aeron:ipc"),
    SubscriptionDescriptor(103, 10, "aeron:ipc"),
    SubscriptionDescriptor(104, 10, "aeron:udp?endpoint=localhost:40002"),
    SubscriptionDescriptor(105, 30, "aeron:ipc?alias=x"),
]


def listing(responder: FakeResponder, pseudo_index: int = 0, count: int = 10, apply_stream_id: bool = False,
            stream_id: int = 0, channel: str = "") -> ListRecordingSubscriptionsSession:
    return ListRecordingSubscriptionsSession(responder, CORRELATION_ID, pseudo_index, count, apply_stream_id,
                                             stream_id, channel, SUBSCRIPTIONS)


def listed(responder: FakeResponder) -> list[int]:
    return [r.values[0] for r in responder.of_kind("subscription")]


def unknowns(responder: FakeResponder) -> list[int]:
    assert all(r.values[1] == ControlResponseCode.SUBSCRIPTION_UNKNOWN for r in responder.of_kind("code"))
    return [r.values[0] for r in responder.of_kind("code")]


def test_lists_all_subscriptions_then_subscription_unknown_with_the_next_index() -> None:
    responder = FakeResponder()
    session = listing(responder)
    assert session.owner_id == responder.control_session_id
    assert not session.is_done()
    session.do_work(0)
    assert session.is_done()
    assert listed(responder) == [101, 102, 103, 104, 105]
    assert responder.of_kind("subscription")[0].values == (101, 10, "aeron:udp?endpoint=localhost:40001")
    assert unknowns(responder) == [5]
    assert responder.responses[-1].kind == "code"
    assert all(r.correlation_id == CORRELATION_ID for r in responder.responses)
    assert session.do_work(0) == 0


def test_a_full_page_ends_without_subscription_unknown() -> None:
    responder = FakeResponder()
    listing(responder, count=2).do_work(0)
    assert listed(responder) == [101, 102]
    assert unknowns(responder) == []


def test_paging_starts_at_the_pseudo_index_of_the_matching_subscriptions() -> None:
    responder = FakeResponder()
    listing(responder, pseudo_index=1, count=2, apply_stream_id=True, stream_id=10).do_work(0)
    assert listed(responder) == [103, 104]
    assert unknowns(responder) == []
    responder.responses.clear()
    listing(responder, pseudo_index=2, count=5, apply_stream_id=True, stream_id=10).do_work(0)
    assert listed(responder) == [104]
    assert unknowns(responder) == [3]


def test_a_negative_pseudo_index_counts_from_the_first_subscription() -> None:
    responder = FakeResponder()
    listing(responder, pseudo_index=-4, count=10, channel="ipc").do_work(0)
    assert listed(responder) == [102, 103, 105]
    assert unknowns(responder) == [3]  # clamped index 0 + 3 sent


def test_a_pseudo_index_past_the_end_is_answered_with_that_index() -> None:
    responder = FakeResponder()
    listing(responder, pseudo_index=7).do_work(0)
    assert listed(responder) == []
    assert unknowns(responder) == [7]


def test_the_channel_filter_is_a_substring_of_the_stripped_channel_and_stream_is_optional() -> None:
    responder = FakeResponder()
    listing(responder, channel="endpoint=localhost").do_work(0)
    assert listed(responder) == [101, 104]
    responder.responses.clear()
    listing(responder, channel="aeron:ipc", apply_stream_id=True, stream_id=30).do_work(0)
    assert listed(responder) == [105]
    responder.responses.clear()
    listing(responder, channel="aeron:ipc", apply_stream_id=False, stream_id=30).do_work(0)
    assert listed(responder) == [102, 103, 105]


def test_a_count_of_zero_sends_nothing_at_all() -> None:
    responder = FakeResponder()
    session = listing(responder, count=0)
    session.do_work(0)
    assert session.is_done()
    assert responder.responses == []


def test_the_listing_describes_the_subscriptions_when_it_was_asked_for() -> None:
    responder = FakeResponder()
    subscriptions = list(SUBSCRIPTIONS)
    session = ListRecordingSubscriptionsSession(responder, CORRELATION_ID, 0, 10, False, 0, "", subscriptions)
    subscriptions.clear()
    session.do_work(0)
    assert listed(responder) == [101, 102, 103, 104, 105]


def test_a_refusing_responder_pauses_the_listing_at_the_refused_descriptor() -> None:
    responder = FakeResponder(back_pressured=True)
    session = listing(responder, count=3)
    assert session.do_work(0) == 0
    assert not session.is_done()
    assert responder.responses == []
    responder.back_pressured = False
    assert session.do_work(0) == 3
    assert session.is_done()
    assert listed(responder) == [101, 102, 103]


def test_abort_ends_the_listing_without_responses() -> None:
    responder = FakeResponder(back_pressured=True)
    session = listing(responder)
    session.do_work(0)
    session.abort("control session closed")
    responder.back_pressured = False
    assert session.do_work(0) == 0
    assert session.is_done()
    assert responder.responses == []


def test_through_a_back_pressured_control_session_every_answer_is_queued_and_delivered_in_order() -> None:
    conductor = FakeConductor()
    control = active_control_session(conductor)
    conductor.publication.back_pressured = True
    session = ListRecordingSubscriptionsSession(control, CORRELATION_ID, 3, 10, False, 0, "", SUBSCRIPTIONS)
    session.do_work(0)
    assert session.is_done()  # answered at once, as before: the control session holds what was refused
    assert control.pending_responses == 3
    conductor.publication.back_pressured = False
    control.do_work(0)
    answers = conductor.publication.messages()
    assert [m.name for m in answers] == ["RecordingSubscriptionDescriptor", "RecordingSubscriptionDescriptor",
                                         "ControlResponse"]
    assert [m.subscription_id for m in answers[:2]] == [104, 105]
    assert (answers[2].code, answers[2].relevant_id, answers[2].correlation_id) == (
        ControlResponseCode.SUBSCRIPTION_UNKNOWN, 5, CORRELATION_ID)
