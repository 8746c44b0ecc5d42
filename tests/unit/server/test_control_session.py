"""ControlSession state by state: INIT → CONNECTING → CONNECTED → (CHALLENGED →) AUTHENTICATED → ACTIVE → DONE.

The conductor, the response publication and the clocks are fakes; time only moves when a test moves it, and
every response is decoded as the client would decode it.
"""

from __future__ import annotations

from typing import Any

import pytest

from aeron_archive_spark.archive.channel import ChannelError
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
from tests.unit.server.fakes import SECOND, FakeClock, FakeConductor

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
        self.session.on_keep_alive(CORRELATION_ID)  # the first request activates
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
    rig.session.on_list_recordings(5, 0, 10)
    assert rig.state is State.ACTIVE
    assert rig.conductor.calls == [("list_recordings", (rig.session, 5, 0, 10))]


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
    rig.session.on_start_recording(3, 10, 0, False, "aeron:ipc")
    rig.session.on_close_session()
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
    rig.session.on_list_recordings(5, 0, 10)  # not authenticated yet: dropped
    assert rig.conductor.calls == []
    rig.epoch.now = EPOCH_MS + 250
    rig.session.on_challenge_response(CORRELATION_ID, b"answer")
    assert rig.state is State.AUTHENTICATED
    assert authenticator.seen[-1] == ("challenge", CONTROL_SESSION_ID, b"answer", EPOCH_MS + 250)


def test_a_challenge_response_outside_the_challenged_state_is_ignored() -> None:
    authenticator = ScriptedAuthenticator(AuthResult(AuthDecision.AUTHENTICATED))
    rig = Rig(authenticator)
    rig.to_active()
    rig.session.on_challenge_response(CORRELATION_ID, b"answer")
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
    rig.session.on_list_recordings(5, 0, 10)
    assert rig.conductor.calls == []
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS + 1
    rig.work()
    assert rig.state is State.DONE


# -- ACTIVE: requests -----------------------------------------------------------------------------------------
CH = "aeron:ipc"
ROUTES: list[tuple[str, tuple[Any, ...], str, tuple[Any, ...]]] = [
    ("on_start_recording", (1, 10, 0, True, CH), "start_recording", (1, 10, 0, True, CH)),
    ("on_stop_recording", (2, 10, CH), "stop_recording", (2, 10, CH)),
    ("on_stop_recording_subscription", (3, 99), "stop_recording_subscription", (3, 99)),
    ("on_stop_recording_by_identity", (4, 5), "stop_recording_by_identity", (4, 5)),
    ("on_extend_recording", (5, 6, 10, 1, False, CH), "extend_recording", (5, 6, 10, 1, False, CH)),
    ("on_start_replay", (6, 7, 64, 100, 30, CH, 4096), "start_replay", (6, 7, 64, 100, 30, CH, -1, 4096)),
    ("on_start_bounded_replay", (7, 7, 0, 100, 12, 30, CH, None), "start_replay",
     (7, 7, 0, 100, 30, CH, 12, None)),
    ("on_stop_replay", (8, 1234), "stop_replay", (8, 1234)),
    ("on_stop_all_replays", (9, 7), "stop_all_replays", (9, 7)),
    ("on_list_recordings", (10, 0, 5), "list_recordings", (10, 0, 5)),
    ("on_list_recordings_for_uri", (11, 2, 5, 10, "ipc"), "list_recordings_for_uri", (11, 2, 5, 10, "ipc")),
    ("on_list_recording", (12, 3), "list_recording", (12, 3)),
    ("on_list_recording_subscriptions", (13, 1, 5, True, 10, "ipc"), "list_recording_subscriptions",
     (13, 1, 5, True, 10, "ipc")),
    ("on_get_recording_position", (14, 3), "get_recording_position", (14, 3)),
    ("on_get_stop_position", (15, 3), "get_stop_position", (15, 3)),
    ("on_get_start_position", (16, 3), "get_start_position", (16, 3)),
    ("on_get_max_recorded_position", (17, 3), "get_max_recorded_position", (17, 3)),
    ("on_find_last_matching_recording", (18, 0, 42, 10, "ipc"), "find_last_matching_recording",
     (18, 0, 42, 10, "ipc")),
    ("on_truncate_recording", (19, 3, 64), "truncate_recording", (19, 3, 64)),
    ("on_purge_recording", (20, 3), "purge_recording", (20, 3)),
]


@pytest.mark.parametrize(("method", "args", "conductor_method", "conductor_args"), ROUTES,
                         ids=[r[0] for r in ROUTES])
def test_an_active_session_hands_each_request_to_the_conductor_with_typed_arguments(
        method: str, args: tuple[Any, ...], conductor_method: str, conductor_args: tuple[Any, ...]) -> None:
    rig = Rig()
    rig.to_active()
    getattr(rig.session, method)(*args)
    assert rig.conductor.calls == [(conductor_method, (rig.session, *conductor_args))]


def test_a_refused_request_is_answered_with_its_error_code_and_message() -> None:
    rig = Rig()
    rig.to_active()
    rig.conductor.fail_with = ArchiveError("unknown recording id: 3", ErrorCode.UNKNOWN_RECORDING)
    rig.session.on_get_stop_position(21, 3)
    rig.conductor.fail_with = ChannelError("invalid channel: aeron:bogus")
    rig.session.on_start_recording(22, 10, 0, False, "aeron:bogus")
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
    rig.session.on_archive_id(23)
    (ok,) = rig.messages()
    assert (ok.correlation_id, ok.code, ok.relevant_id) == (23, ControlResponseCode.OK, FakeConductor.archive_id)


def test_an_unsupported_request_is_answered_with_an_error_naming_it() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.on_unsupported_request(24, "ReplicateRequest2", 66)
    (error,) = rig.messages()
    assert (error.correlation_id, error.code) == (24, ControlResponseCode.ERROR)
    assert error.error_message == "request ReplicateRequest2 (templateId=66) is not supported by this archive"


def test_a_keep_alive_is_not_answered() -> None:
    rig = Rig()
    rig.to_active()
    rig.session.on_keep_alive(25)
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
    rig.session.on_close_session()
    assert rig.state is State.DONE
    assert rig.session.abort_reason == "session closed"
    rig.session.send_ok(50, 0)
    rig.session.on_list_recordings(51, 0, 1)
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
