"""ControlSession state by state: INIT → CONNECTING → CONNECTED → (CHALLENGED →) AUTHENTICATED → ACTIVE → DONE.

The conductor, the response publication and the clocks are fakes; time only moves when a test moves it, and
every response is decoded as the client would decode it.
"""

from __future__ import annotations

from typing import Any

import pytest

from aeron_archive_spark.archive.channel import ChannelError
from aeron_archive_spark.archive.codecs import Message
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.constants import (
    CONTROL_RESEND_INTERVAL_NS,
    PROTOCOL_SEMANTIC_VERSION,
    ControlResponseCode,
)
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode
from aeron_archive_spark.archive.server.authenticator import AuthDecision, Authenticator, AuthResult
from aeron_archive_spark.archive.server.control_session import (
    ControlSession,
    ControlSessionState,
    response_channel_for,
)
from tests.unit.server.fakes import SECOND, FakeClock, FakeConductor, request

CONNECT_TIMEOUT_NS = 5 * SECOND
LIVENESS_NS = 1 * SECOND
CONTROL_SESSION_ID = 9001
CORRELATION_ID = 17
RESPONSE_CHANNEL = "aeron:udp?endpoint=localhost:8020"
RESPONSE_STREAM_ID = 20
IMAGE_SESSION_ID = 333
EPOCH_MS = 1_700_000_000_000

State = ControlSessionState


class ScriptedAuthenticator(Authenticator):
    """Answers `on_connect` / `on_challenge_response` with the given decisions and remembers what it saw."""

    def __init__(self, on_connect: AuthResult, on_challenge: AuthResult | None = None) -> None:
        self._on_connect = on_connect
        self._on_challenge = on_challenge or AuthResult(AuthDecision.AUTHENTICATED)
        self.seen: list[tuple[str, int, bytes, int]] = []

    def on_connect(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        self.seen.append(("connect", control_session_id, encoded_credentials, now_ms))
        return self._on_connect

    def on_challenge_response(self, control_session_id: int, encoded_credentials: bytes,
                              now_ms: int) -> AuthResult:
        self.seen.append(("challenge", control_session_id, encoded_credentials, now_ms))
        return self._on_challenge


class Rig:
    """One control session with its fakes; `work()` runs a duty cycle at the clock's current time."""

    def __init__(self, authenticator: Authenticator | None = None, version: int = PROTOCOL_SEMANTIC_VERSION,
                 credentials: bytes = b"secret") -> None:
        self.clock = FakeClock()
        self.epoch = FakeClock(EPOCH_MS)
        self.conductor = FakeConductor()
        self.publication = self.conductor.publication
        self.session = ControlSession(
            self.conductor, CONTROL_SESSION_ID, CORRELATION_ID, RESPONSE_STREAM_ID, RESPONSE_CHANNEL, version,
            credentials, "unit-test", IMAGE_SESSION_ID, authenticator or Authenticator(), CONNECT_TIMEOUT_NS,
            LIVENESS_NS, now_ns=self.clock.now, epoch_clock=self.epoch)
        self.start_ns = self.clock.now

    @property
    def state(self) -> ControlSessionState:
        return self.session.state

    def work(self) -> int:
        return self.session.do_work(self.clock.now)

    def to_connected(self) -> None:
        self.work()  # INIT -> CONNECTING
        self.publication.is_connected = True
        self.work()  # CONNECTING -> CONNECTED
        assert self.state is State.CONNECTED

    def to_active(self) -> None:
        self.to_connected()
        self.work()  # CONNECTED -> AUTHENTICATED
        self.work()  # sends the connect OK
        self.session.on_keep_alive(request(m.KeepAliveRequest, correlation_id=CORRELATION_ID))  # the first request activates
        assert self.state is State.ACTIVE
        self.publication.offered.clear()

    def messages(self) -> list[Any]:
        return self.publication.messages()


# -- INIT -----------------------------------------------------------------------------------------------------
def test_init_adds_the_response_publication_with_control_defaults_and_moves_to_connecting() -> None:
    rig = Rig()
    assert rig.state is State.INIT
    assert rig.work() == 1
    assert rig.state is State.CONNECTING
    assert rig.conductor.publications_added == [(response_channel_for(RESPONSE_CHANNEL), RESPONSE_STREAM_ID)]
    channel = rig.conductor.publications_added[0][0]
    assert "term-length=" in channel and "sparse=true" in channel and "mtu=" in channel


def test_init_that_cannot_add_the_response_publication_ends_the_session() -> None:
    rig = Rig()
    rig.conductor.add_publication_error = RuntimeError("bad channel")
    rig.work()
    assert rig.state is State.DONE
    assert rig.session.is_done()
    assert rig.session.abort_reason == "failed to add response publication: bad channel"


# -- CONNECTING -----------------------------------------------------------------------------------------------
def test_connecting_waits_for_the_response_publication_until_the_connect_timeout() -> None:
    rig = Rig()
    rig.work()
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS
    assert rig.work() == 0
    assert rig.state is State.CONNECTING
    rig.clock.advance(1)
    rig.work()
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "response publication not connected within connectTimeout"


def test_connecting_moves_to_connected_once_the_response_publication_connects() -> None:
    rig = Rig()
    rig.work()
    assert rig.work() == 0
    assert rig.state is State.CONNECTING
    rig.publication.is_connected = True
    assert rig.work() == 1
    assert rig.state is State.CONNECTED


# -- CONNECTED → AUTHENTICATED → ACTIVE ----------------------------------------------------------------------
def test_connected_authenticates_with_the_epoch_clock_and_resends_the_connect_ok_until_a_request() -> None:
    authenticator = ScriptedAuthenticator(AuthResult(AuthDecision.AUTHENTICATED))
    rig = Rig(authenticator)
    rig.to_connected()
    rig.work()
    assert rig.state is State.AUTHENTICATED
    assert authenticator.seen == [("connect", CONTROL_SESSION_ID, b"secret", EPOCH_MS)]
    rig.work()
    ok = rig.messages()
    assert [(m.name, m.correlation_id, m.relevant_id, m.code) for m in ok] == [
        ("ControlResponse", CORRELATION_ID, CONTROL_SESSION_ID, ControlResponseCode.OK)]
    rig.clock.advance(CONTROL_RESEND_INTERVAL_NS - 1)
    assert rig.work() == 0
    assert len(rig.publication.offered) == 1
    rig.clock.advance(1)
    assert rig.work() == 1
    assert len(rig.publication.offered) == 2  # resent: the client may have missed it


def test_the_first_request_after_authentication_activates_the_session() -> None:
    rig = Rig()
    rig.to_connected()
    rig.work()
    assert rig.state is State.AUTHENTICATED
    rig.session.on_list_recordings(LIST_5)
    assert rig.state is State.ACTIVE
    assert rig.conductor.calls == [("list_recordings", (rig.session, LIST_5))]


def test_an_authenticated_session_without_a_request_times_out() -> None:
    rig = Rig()
    rig.to_connected()
    rig.work()
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS
    rig.work()
    assert rig.state is State.AUTHENTICATED
    rig.clock.advance(1)
    rig.work()
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "not active within connectTimeoutMs=5000"


def test_an_incompatible_client_version_is_answered_with_an_error_and_ends_the_session() -> None:
    rig = Rig(version=(2 << 16) | (1 << 8) | 3)
    rig.to_connected()
    rig.work()
    assert rig.state is State.DONE
    (error,) = rig.messages()
    assert error.code == ControlResponseCode.ERROR
    assert error.correlation_id == CORRELATION_ID
    assert error.error_message.startswith("invalid client version 2.1.3")


def test_requests_before_authentication_are_ignored() -> None:
    rig = Rig()
    rig.work()
    rig.session.on_start_recording(request(m.StartRecordingRequest, correlation_id=3, stream_id=10, channel="aeron:ipc"))
    rig.session.on_close_session(request(m.CloseSessionRequest))
    assert rig.conductor.calls == []
    assert rig.state is State.CONNECTING


# -- CHALLENGED / REJECTED ------------------------------------------------------------------------------------
def test_a_challenge_is_sent_and_a_correct_response_authenticates() -> None:
    authenticator = ScriptedAuthenticator(AuthResult(AuthDecision.CHALLENGE, b"nonce"))
    rig = Rig(authenticator)
    rig.to_connected()
    rig.work()
    assert rig.state is State.CHALLENGED
    (challenge,) = rig.messages()
    assert challenge.name == "Challenge"
    assert bytes(challenge.encoded_challenge) == b"nonce"
    rig.session.on_list_recordings(LIST_5)  # not authenticated yet: dropped
    assert rig.conductor.calls == []
    rig.epoch.now = EPOCH_MS + 250
    rig.session.on_challenge_response(request(m.ChallengeResponse, correlation_id=CORRELATION_ID, encoded_credentials=b"answer"))
    assert rig.state is State.AUTHENTICATED
    assert authenticator.seen[-1] == ("challenge", CONTROL_SESSION_ID, b"answer", EPOCH_MS + 250)


def test_a_challenge_response_outside_the_challenged_state_is_ignored() -> None:
    authenticator = ScriptedAuthenticator(AuthResult(AuthDecision.AUTHENTICATED))
    rig = Rig(authenticator)
    rig.to_active()
    rig.session.on_challenge_response(request(m.ChallengeResponse, correlation_id=CORRELATION_ID, encoded_credentials=b"answer"))
    assert [s[0] for s in authenticator.seen] == ["connect"]
    assert rig.state is State.ACTIVE


def test_a_challenged_session_that_never_answers_times_out() -> None:
    rig = Rig(ScriptedAuthenticator(AuthResult(AuthDecision.CHALLENGE, b"nonce")))
    rig.to_connected()
    rig.work()
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS + 1
    rig.work()
    assert rig.state is State.DONE


def test_a_rejected_client_is_told_until_the_connect_timeout_then_the_session_ends() -> None:
    rig = Rig(ScriptedAuthenticator(AuthResult(AuthDecision.REJECTED)))
    rig.to_connected()
    rig.work()
    assert rig.state is State.REJECTED
    rig.work()
    (rejection,) = rig.messages()
    assert rejection.code == ControlResponseCode.ERROR
    assert rejection.relevant_id == ErrorCode.AUTHENTICATION_REJECTED
    assert rejection.error_message == "authentication rejected"
    rig.session.on_list_recordings(LIST_5)
    assert rig.conductor.calls == []
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS + 1
    rig.work()
    assert rig.state is State.DONE


# -- ACTIVE: requests -----------------------------------------------------------------------------------------
CH = "aeron:ipc"
LIST_5 = request(m.ListRecordingsRequest, correlation_id=5, record_count=10)
# Each request goes to the conductor as the object it came as: (session method, request, conductor method).
ROUTES: list[tuple[str, Message, str]] = [
    ("on_start_recording", request(m.StartRecordingRequest2, correlation_id=1, stream_id=10, auto_stop=1, channel=CH),
     "start_recording"),
    ("on_stop_recording", request(m.StopRecordingRequest, correlation_id=2, stream_id=10, channel=CH),
     "stop_recording"),
    ("on_stop_recording_subscription", request(m.StopRecordingSubscriptionRequest, correlation_id=3,
                                               subscription_id=99), "stop_recording_subscription"),
    ("on_stop_recording_by_identity", request(m.StopRecordingByIdentityRequest, correlation_id=4, recording_id=5),
     "stop_recording_by_identity"),
    ("on_extend_recording", request(m.ExtendRecordingRequest, correlation_id=5, recording_id=6, stream_id=10,
                                    source_location=1, channel=CH), "extend_recording"),
    ("on_start_replay", request(m.ReplayRequest, correlation_id=6, recording_id=7, position=64, length=100,
                                replay_stream_id=30, replay_channel=CH, file_io_max_length=4096), "start_replay"),
    ("on_start_replay", request(m.BoundedReplayRequest, correlation_id=7, recording_id=7, length=100,
                                limit_counter_id=12, replay_stream_id=30, replay_channel=CH), "start_replay"),
    ("on_stop_replay", request(m.StopReplayRequest, correlation_id=8, replay_session_id=1234), "stop_replay"),
    ("on_stop_all_replays", request(m.StopAllReplaysRequest, correlation_id=9, recording_id=7), "stop_all_replays"),
    ("on_list_recordings", request(m.ListRecordingsRequest, correlation_id=10, record_count=5), "list_recordings"),
    ("on_list_recordings_for_uri", request(m.ListRecordingsForUriRequest, correlation_id=11, from_recording_id=2,
                                           record_count=5, stream_id=10, channel="ipc"), "list_recordings_for_uri"),
    ("on_list_recording", request(m.ListRecordingRequest, correlation_id=12, recording_id=3), "list_recording"),
    ("on_list_recording_subscriptions", request(m.ListRecordingSubscriptionsRequest, correlation_id=13,
                                                pseudo_index=1, subscription_count=5, apply_stream_id=1,
                                                stream_id=10, channel="ipc"), "list_recording_subscriptions"),
    ("on_get_recording_position", request(m.RecordingPositionRequest, correlation_id=14, recording_id=3),
     "get_recording_position"),
    ("on_get_stop_position", request(m.StopPositionRequest, correlation_id=15, recording_id=3), "get_stop_position"),
    ("on_get_start_position", request(m.StartPositionRequest, correlation_id=16, recording_id=3),
     "get_start_position"),
    ("on_get_max_recorded_position", request(m.MaxRecordedPositionRequest, correlation_id=17, recording_id=3),
     "get_max_recorded_position"),
    ("on_find_last_matching_recording", request(m.FindLastMatchingRecordingRequest, correlation_id=18,
                                                session_id=42, stream_id=10, channel="ipc"),
     "find_last_matching_recording"),
    ("on_truncate_recording", request(m.TruncateRecordingRequest, correlation_id=19, recording_id=3, position=64),
     "truncate_recording"),
    ("on_purge_recording", request(m.PurgeRecordingRequest, correlation_id=20, recording_id=3), "purge_recording"),
]


@pytest.mark.parametrize(("method", "sent", "conductor_method"), ROUTES, ids=[type(r[1]).__name__ for r in ROUTES])
def test_an_active_session_hands_each_request_to_the_conductor_as_it_came(
        method: str, sent: Message, conductor_method: str) -> None:
    rig = Rig()
    rig.to_active()
    getattr(rig.session, method)(sent)
    assert rig.conductor.calls == [(conductor_method, (rig.session, sent))]
    assert type(rig.conductor.calls[0][1][1]) is type(sent)


def test_a_refused_request_is_answered_with_its_error_code_and_message() -> None:
    rig = Rig()
    rig.to_active()
    rig.conductor.fail_with = ArchiveError("unknown recording id: 3", ErrorCode.UNKNOWN_RECORDING)
    rig.session.on_get_stop_position(request(m.StopPositionRequest, correlation_id=21, recording_id=3))
    rig.conductor.fail_with = ChannelError("invalid channel: aeron:bogus")
    rig.session.on_start_recording(request(m.StartRecordingRequest, correlation_id=22, stream_id=10, channel="aeron:bogus"))
    (first, second) = rig.messages()
    assert (first.correlation_id, first.code, first.relevant_id, first.error_message) == (
        21, ControlResponseCode.ERROR, ErrorCode.UNKNOWN_RECORDING, "unknown recording id: 3")
    assert (second.correlation_id, second.code, second.relevant_id) == (22, ControlResponseCode.ERROR,
                                                                         ErrorCode.GENERIC)
    assert "invalid channel" in second.error_message
    assert rig.state is State.ACTIVE


def test_the_archive_id_request_is_answered_by_the_session() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.on_archive_id(request(m.ArchiveIdRequest, correlation_id=23))
    (ok,) = rig.messages()
    assert (ok.correlation_id, ok.code, ok.relevant_id) == (23, ControlResponseCode.OK, FakeConductor.archive_id)


def test_an_unsupported_request_is_answered_with_an_error_naming_it() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.on_unsupported_request(24, "UpdateChannelRequest", 107)
    (error,) = rig.messages()
    assert (error.correlation_id, error.code) == (24, ControlResponseCode.ERROR)
    assert error.error_message == "request UpdateChannelRequest (templateId=107) is not supported by this archive"


def test_a_keep_alive_is_not_answered() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.on_keep_alive(request(m.KeepAliveRequest, correlation_id=25))
    assert rig.publication.offered == []
    assert rig.conductor.calls == []
    assert rig.state is State.ACTIVE


# -- ACTIVE: back pressure ------------------------------------------------------------------------------------
def test_back_pressured_responses_are_queued_and_sent_in_order_once_the_client_catches_up() -> None:
    rig = Rig()
    rig.to_active()
    rig.publication.back_pressured = True
    rig.session.send_ok(30, 1)
    rig.session.send_ok(31, 2)
    assert rig.publication.offered == []
    assert rig.session.pending_responses == 2
    rig.publication.back_pressured = False
    rig.session.send_ok(32, 3)  # queued behind the earlier ones, never overtaking them
    assert rig.publication.offered == []
    assert rig.work() >= 3
    assert [m.correlation_id for m in rig.messages()] == [30, 31, 32]
    assert rig.session.pending_responses == 0


def test_responses_stuck_behind_back_pressure_for_longer_than_the_connect_timeout_end_the_session() -> None:
    rig = Rig()
    rig.to_active()
    rig.publication.back_pressured = True
    rig.session.send_ok(30, 1)
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS
    rig.work()
    assert rig.state is State.ACTIVE
    rig.clock.advance(1)
    rig.work()
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "failed to send response for more than connectTimeoutMs=5000"


def test_a_queued_response_that_gets_through_restarts_the_send_timeout() -> None:
    rig = Rig()
    rig.to_active()
    rig.publication.back_pressured = True
    rig.session.send_ok(30, 1)
    rig.clock.advance(CONNECT_TIMEOUT_NS - SECOND)
    rig.publication.back_pressured = False
    rig.work()
    rig.publication.back_pressured = True
    rig.session.send_ok(31, 2)
    rig.clock.advance(CONNECT_TIMEOUT_NS)  # the first send was long ago, the last successful one was not
    rig.work()
    assert rig.state is State.ACTIVE


def test_descriptors_for_listings_are_refused_while_responses_are_queued() -> None:
    rig = Rig()
    rig.to_active()
    rig.publication.back_pressured = True
    assert rig.session.send_descriptor(40, b"\0" * 8) is True  # nothing queued yet: accepted, then queued
    assert rig.session.send_descriptor(40, b"\0" * 8) is False  # throttled: the listing retries later
    assert rig.session.send_descriptor(40, b"\0" * 8, throttle=False) is True
    assert rig.session.pending_responses == 2


# -- ACTIVE: liveness -----------------------------------------------------------------------------------------
def test_an_active_session_pings_the_client_every_liveness_interval() -> None:
    rig = Rig()
    rig.to_active()
    activated_at = rig.clock.now
    rig.clock.now = activated_at + LIVENESS_NS - 1
    rig.work()
    assert rig.publication.offered == []
    rig.clock.now = activated_at + LIVENESS_NS
    rig.work()
    assert rig.publication.names() == ["Ping"]
    assert rig.messages()[0].control_session_id == CONTROL_SESSION_ID
    rig.clock.advance(LIVENESS_NS - 1)
    rig.work()
    assert rig.publication.names() == ["Ping"]
    rig.clock.advance(1)
    rig.work()
    assert rig.publication.names() == ["Ping", "Ping"]


def test_a_client_that_stops_reading_is_dropped_once_its_pings_back_up_past_the_connect_timeout() -> None:
    rig = Rig()
    rig.to_active()
    rig.publication.back_pressured = True
    for _ in range(5):
        rig.clock.advance(LIVENESS_NS)
        rig.work()
    assert rig.state is State.ACTIVE
    assert rig.session.pending_responses == 5
    rig.clock.advance(LIVENESS_NS)
    rig.work()
    assert rig.state is State.DONE
    assert rig.session.abort_reason.startswith("failed to send response")


def test_a_client_whose_response_image_goes_away_ends_the_session() -> None:
    rig = Rig()
    rig.to_active()
    rig.publication.is_connected = False
    rig.work()
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "response publication not connected"


# -- close / abort --------------------------------------------------------------------------------------------
def test_a_close_session_request_ends_the_session_and_later_responses_are_dropped() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.on_close_session(request(m.CloseSessionRequest))
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "session closed"
    rig.session.send_ok(50, 0)
    rig.session.on_list_recordings(request(m.ListRecordingsRequest, correlation_id=51, record_count=1))
    assert rig.publication.offered == []
    assert rig.session.pending_responses == 0
    assert rig.conductor.calls == []


def test_abort_keeps_the_first_reason() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.abort("stop execution")
    rig.session.abort("later reason")
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "stop execution"


class ListingStub:
    def __init__(self) -> None:
        self.aborted: list[str] = []

    def do_work(self, now_ns: int) -> int:
        return 0

    def is_done(self) -> bool:
        return bool(self.aborted)

    def abort(self, reason: str = "") -> None:
        self.aborted.append(reason)

    def close(self) -> None:
        pass

    @property
    def session_id(self) -> int:
        return 1


def test_close_aborts_the_active_listing_and_closes_the_response_publication() -> None:
    rig = Rig()
    rig.to_active()
    listing = ListingStub()
    rig.session.active_listing = listing
    rig.session.close()
    assert listing.aborted == ["control session closed"]
    assert rig.session.active_listing is None
    assert rig.publication.closed
    assert rig.session.publication is None
    assert rig.state is State.DONE
