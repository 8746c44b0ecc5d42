"""Who may connect and what they may do: the two-secret authenticator, the authorisation service, and the adapter
asking it for every request (refusals answered with UNAUTHORISED_ACTION, never reaching the conductor).

Requests are encoded as a client sends them and fed through the adapter; the control session is real, its
conductor and response publication are fakes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest

from aeron_archive_spark.archive.codecs import CODEC
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import PROTOCOL_SEMANTIC_VERSION, ControlResponseCode
from aeron_archive_spark.archive.exceptions import ErrorCode
from aeron_archive_spark.archive.server.authenticator import (
    READ_ONLY_PRINCIPAL,
    READ_WRITE_PRINCIPAL,
    AuthDecision,
    Authenticator,
    CredentialsAuthenticator,
    SharedSecretAuthenticator,
)
from aeron_archive_spark.archive.server.authorisation import (
    ALLOW_ALL,
    DENY_ALL,
    READ_ONLY_ACTIONS,
    AuthorisationService,
    ReadOnlyAuthorisationService,
)
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.server.control_session import ControlSession, ControlSessionState
from aeron_archive_spark.archive.server.control_session_adapter import ControlSessionAdapter
from tests.unit.server.fakes import SECOND, FakeConductor

RW, RO = b"rw-s3cret", b"ro-s3cret"
CONTROL_SESSION_ID = 31
IMAGE_SESSION_ID = 5
CS = {"control_session_id": CONTROL_SESSION_ID}


# -- the authenticator ------------------------------------------------------------------------------------------


def test_the_read_write_and_read_only_secrets_authenticate_as_their_principals() -> None:
    auth = CredentialsAuthenticator(RW, RO)
    rw = auth.on_connect(1, RW, 0)
    ro = auth.on_connect(2, RO, 0)
    assert (rw.decision, rw.encoded_principal) == (AuthDecision.AUTHENTICATED, READ_WRITE_PRINCIPAL)
    assert (ro.decision, ro.encoded_principal) == (AuthDecision.AUTHENTICATED, READ_ONLY_PRINCIPAL)


@pytest.mark.parametrize("credentials", [b"", b"rw-s3cre", b"rw-s3cret ", b"RW-S3CRET", b"x" * 1000])
def test_anything_but_a_secret_is_rejected(credentials: bytes) -> None:
    assert CredentialsAuthenticator(RW, RO).on_connect(1, credentials, 0).decision is AuthDecision.REJECTED


def test_without_a_read_only_secret_only_the_read_write_secret_authenticates() -> None:
    auth = CredentialsAuthenticator(RW)
    assert auth.on_connect(1, RW, 0).encoded_principal == READ_WRITE_PRINCIPAL
    assert auth.on_connect(1, RO, 0).decision is AuthDecision.REJECTED
    assert SharedSecretAuthenticator("pw").on_connect(1, b"pw", 0).encoded_principal == READ_WRITE_PRINCIPAL


def test_secrets_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import aeron_archive_spark.archive.server.authenticator as module

    compared: list[tuple[bytes, bytes]] = []
    real = module.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(module.hmac, "compare_digest", spy)
    auth = CredentialsAuthenticator(RW, RO)
    compared.clear()  # the configuration check compared the two secrets
    auth.on_connect(1, b"guess", 0)
    assert compared == [(b"guess", RW), (b"guess", RO)]  # both secrets, every time


def test_a_challenge_response_is_rejected_because_the_authenticator_never_challenges() -> None:
    assert CredentialsAuthenticator(RW).on_challenge_response(1, RW, 0).decision is AuthDecision.REJECTED


@pytest.mark.parametrize(("read_write", "read_only", "message"), [
    (b"", None, "read-write secret is empty"),
    (RW, "", "read-only secret is empty"),
    (RW, RW, "must differ"),
])
def test_unusable_secrets_are_refused_at_configuration(read_write: bytes, read_only: bytes | str | None,
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CredentialsAuthenticator(read_write, read_only)


def test_secrets_never_show_in_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    auth = CredentialsAuthenticator(RW, RO)
    ctx = ArchiveContext(archive_dir="/tmp/x").require_credentials(RW, RO)
    with caplog.at_level(logging.DEBUG):
        auth.on_connect(7, b"wrong-guess", 0)
        auth.on_connect(8, b"", 0)
    text = repr(auth) + repr(ctx) + caplog.text
    assert b"s3cret" not in text.encode() and "wrong-guess" not in text
    assert "rejected: credentials match no secret" in caplog.text and "rejected: no credentials" in caplog.text


def test_a_string_secret_is_its_utf8_bytes() -> None:
    auth = CredentialsAuthenticator("pässword")
    assert auth.on_connect(1, "pässword".encode(), 0).decision is AuthDecision.AUTHENTICATED


# -- the authorisation service ----------------------------------------------------------------------------------

READ_ONLY_NAMES = {
    "KeepAliveRequest", "ArchiveIdRequest", "CloseSessionRequest", "ListRecordingsRequest",
    "ListRecordingsForUriRequest", "ListRecordingRequest", "ListRecordingSubscriptionsRequest",
    "RecordingPositionRequest", "StopPositionRequest", "StartPositionRequest", "MaxRecordedPositionRequest",
    "FindLastMatchingRecordingRequest", "ReplayRequest", "BoundedReplayRequest", "StopReplayRequest",
    "StopAllReplaysRequest", "PositionAtTimeRequest", "TimeIndexRequest",
}
WRITE_NAMES = {
    "StartRecordingRequest", "StartRecordingRequest2", "StopRecordingRequest", "StopRecordingSubscriptionRequest",
    "StopRecordingByIdentityRequest", "ExtendRecordingRequest", "ExtendRecordingRequest2",
    "TruncateRecordingRequest", "PurgeRecordingRequest", "DetachSegmentsRequest", "DeleteDetachedSegmentsRequest",
    "PurgeSegmentsRequest", "AttachSegmentsRequest", "MigrateSegmentsRequest", "ReplicateRequest",
    "ReplicateRequest2", "TaggedReplicateRequest", "StopReplicationRequest", "UpdateChannelRequest",
}


def template_id(name: str) -> int:
    return int(CODEC.message(name).template_id)


def test_read_write_may_do_everything_read_only_may_list_and_replay_and_nobody_else_anything() -> None:
    service = ReadOnlyAuthorisationService()
    for name in READ_ONLY_NAMES | WRITE_NAMES:
        action = template_id(name)
        assert service.is_authorised(t.SCHEMA_ID, action, None, READ_WRITE_PRINCIPAL), name
        assert service.is_authorised(t.SCHEMA_ID, action, None, READ_ONLY_PRINCIPAL) is (name in READ_ONLY_NAMES), name
        assert not service.is_authorised(t.SCHEMA_ID, action, None, b""), name
        assert not service.is_authorised(t.SCHEMA_ID, action, None, b"someone"), name
    assert not service.is_authorised(111, t.LIST_RECORDINGS_REQUEST, None, READ_WRITE_PRINCIPAL)  # another protocol
    assert not WRITE_NAMES & {m.name for m in CODEC.messages if m.template_id in READ_ONLY_ACTIONS}


def test_allow_all_and_deny_all() -> None:
    assert ALLOW_ALL.is_authorised(t.SCHEMA_ID, t.PURGE_RECORDING_REQUEST, None, b"")
    assert not DENY_ALL.is_authorised(t.SCHEMA_ID, t.LIST_RECORDINGS_REQUEST, None, READ_WRITE_PRINCIPAL)
    assert ArchiveContext(archive_dir="/tmp/x").authorisation_service is ALLOW_ALL
    assert type(ArchiveContext(archive_dir="/tmp/x").authenticator) is Authenticator


# -- the adapter asks for every request --------------------------------------------------------------------------


@dataclass
class Header:
    session_id: int


class FakeHost:
    def __init__(self, session: ControlSession) -> None:
        self.session = session
        self.protocol_errors: list[str] = []

    def new_control_session(self, **kwargs: Any) -> None:
        raise AssertionError("no connects in these tests")

    def control_session(self, control_session_id: int) -> ControlSession | None:
        return self.session if control_session_id == CONTROL_SESSION_ID else None

    def on_protocol_error(self, message: str, kind: str = "", error: BaseException | None = None) -> None:
        self.protocol_errors.append(message)


class RecordingService:
    """Answers from `allowed` and remembers every question."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.asked: list[tuple[int, int, object | None, bytes]] = []

    def is_authorised(self, protocol_id: int, action_id: int, type_: object | None, encoded_principal: bytes) -> bool:
        self.asked.append((protocol_id, action_id, type_, encoded_principal))
        return self.allowed


def session_for(conductor: FakeConductor, credentials: bytes, authenticator: Authenticator) -> ControlSession:
    """A real control session authenticated by `authenticator` from `credentials`, with no request yet."""
    session = ControlSession(conductor, CONTROL_SESSION_ID, 1, 20, "aeron:ipc", PROTOCOL_SEMANTIC_VERSION,
                             credentials, "", IMAGE_SESSION_ID, authenticator, 5 * SECOND, SECOND, now_ns=0,
                             epoch_clock=lambda: 0)
    conductor.publication.is_connected = True
    for _ in range(4):
        session.do_work(0)
    conductor.publication.offered.clear()
    return session


def rig(credentials: bytes, service: AuthorisationService,
        authenticator: Authenticator | None = None) -> tuple[ControlSessionAdapter, FakeConductor, ControlSession]:
    conductor = FakeConductor()
    session = session_for(conductor, credentials, authenticator or CredentialsAuthenticator(RW, RO))
    return ControlSessionAdapter(FakeHost(session), [], service), conductor, session


def feed(adapter: ControlSessionAdapter, name: str, **fields: Any) -> None:
    adapter._on_fragment(memoryview(CODEC.encode(name, **CS, **fields)), Header(IMAGE_SESSION_ID))


WRITES: list[tuple[str, dict[str, Any]]] = [
    ("StartRecordingRequest", {"correlation_id": 2, "stream_id": 10, "source_location": 0, "channel": "aeron:ipc"}),
    ("StartRecordingRequest2", {"correlation_id": 3, "stream_id": 10, "source_location": 0, "auto_stop": 0,
                                "channel": "aeron:ipc"}),
    ("StopRecordingRequest", {"correlation_id": 4, "stream_id": 10, "channel": "aeron:ipc"}),
    ("StopRecordingSubscriptionRequest", {"correlation_id": 5, "subscription_id": 7}),
    ("StopRecordingByIdentityRequest", {"correlation_id": 6, "recording_id": 8}),
    ("ExtendRecordingRequest", {"correlation_id": 7, "recording_id": 8, "stream_id": 10, "source_location": 0,
                                "channel": "aeron:ipc"}),
    ("ExtendRecordingRequest2", {"correlation_id": 8, "recording_id": 8, "stream_id": 10, "source_location": 0,
                                 "auto_stop": 0, "channel": "aeron:ipc"}),
    ("TruncateRecordingRequest", {"correlation_id": 9, "recording_id": 8, "position": 0}),
    ("PurgeRecordingRequest", {"correlation_id": 10, "recording_id": 8}),
    ("ReplicateRequest2", {"correlation_id": 12, "src_recording_id": 1, "dst_recording_id": -1, "stop_position": -1,
                           "channel_tag_id": -1, "subscription_tag_id": -1, "src_control_stream_id": 10,
                           "src_control_channel": "aeron:ipc", "live_destination": "", "replication_channel": ""}),
    ("StopReplicationRequest", {"correlation_id": 11, "replication_id": 3}),
]
READS: list[tuple[str, dict[str, Any], str]] = [
    ("ListRecordingsRequest", {"correlation_id": 20, "from_recording_id": 0, "record_count": 5}, "list_recordings"),
    ("ListRecordingRequest", {"correlation_id": 21, "recording_id": 8}, "list_recording"),
    ("RecordingPositionRequest", {"correlation_id": 22, "recording_id": 8}, "get_recording_position"),
    ("MaxRecordedPositionRequest", {"correlation_id": 23, "recording_id": 8}, "get_max_recorded_position"),
    ("BoundedReplayRequest", {"correlation_id": 24, "recording_id": 8, "position": 0, "length": -1,
                              "limit_counter_id": 12, "replay_stream_id": 30, "file_io_max_length": 0,
                              "replay_token": 0, "replay_channel": "aeron:ipc"}, "start_replay"),
    ("StopAllReplaysRequest", {"correlation_id": 25, "recording_id": 8}, "stop_all_replays"),
    ("PositionAtTimeRequest", {"correlation_id": 26, "recording_id": 8, "timestamp_ns": 5}, "position_at_time"),
    ("TimeIndexRequest", {"correlation_id": 27, "recording_id": 8, "from_position": 0, "to_position": -1},
     "time_index"),
]


@pytest.mark.parametrize(("name", "fields"), WRITES, ids=[w[0] for w in WRITES])
def test_a_read_only_client_gets_unauthorised_action_naming_each_write_request(name: str,
                                                                               fields: dict[str, Any]) -> None:
    adapter, conductor, session = rig(RO, ReadOnlyAuthorisationService())
    feed(adapter, name, **fields)
    assert conductor.calls == []  # never reached the conductor
    (error,) = conductor.publication.messages()
    assert (error.name, error.correlation_id, error.code) == ("ControlResponse", fields["correlation_id"],
                                                             ControlResponseCode.ERROR)
    assert error.relevant_id == ErrorCode.UNAUTHORISED_ACTION == 13
    assert error.error_message.startswith("unauthorised action")  # Java's text, then the request
    assert f"{name} (templateId={template_id(name)})" in error.error_message
    assert session.state is ControlSessionState.ACTIVE  # a refused request does not end the session


@pytest.mark.parametrize(("name", "fields", "method"), READS, ids=[r[0] for r in READS])
def test_a_read_only_client_may_list_query_and_replay(name: str, fields: dict[str, Any], method: str) -> None:
    adapter, conductor, _ = rig(RO, ReadOnlyAuthorisationService())
    feed(adapter, name, **fields)
    assert [call[0] for call in conductor.calls] == [method]
    assert conductor.publication.messages() == []


def test_a_read_only_client_keeps_its_session_alive_asks_the_archive_id_and_closes() -> None:
    adapter, conductor, session = rig(RO, ReadOnlyAuthorisationService())
    feed(adapter, "ArchiveIdRequest", correlation_id=40)
    feed(adapter, "KeepAliveRequest", correlation_id=41)
    (ok,) = conductor.publication.messages()
    assert (ok.correlation_id, ok.code, ok.relevant_id) == (40, ControlResponseCode.OK, FakeConductor.archive_id)
    feed(adapter, "CloseSessionRequest")
    assert session.state is ControlSessionState.DONE


@pytest.mark.parametrize(("name", "fields"), WRITES, ids=[w[0] for w in WRITES])
def test_a_read_write_client_reaches_the_conductor_with_every_request(name: str, fields: dict[str, Any]) -> None:
    adapter, conductor, _ = rig(RW, ReadOnlyAuthorisationService())
    feed(adapter, name, **fields)
    errors = [m for m in conductor.publication.messages() if m.code == ControlResponseCode.ERROR]
    assert all(e.relevant_id != ErrorCode.UNAUTHORISED_ACTION for e in errors)
    assert len(conductor.calls) == 1 and not errors


def test_the_service_is_asked_with_schema_template_no_type_and_the_principal() -> None:
    service = RecordingService(allowed=True)
    adapter, _, _ = rig(RO, service)
    feed(adapter, "ListRecordingRequest", correlation_id=2, recording_id=8)
    feed(adapter, "CloseSessionRequest")  # not asked, as in Java
    assert service.asked == [(t.SCHEMA_ID, t.LIST_RECORDING_REQUEST, None, READ_ONLY_PRINCIPAL)]


def test_without_credentials_configured_everything_is_allowed_as_before() -> None:
    adapter, conductor, session = rig(b"", ALLOW_ALL, Authenticator())
    assert session.encoded_principal == b""
    for name, fields in WRITES:
        feed(adapter, name, **fields)
    assert len(conductor.calls) == len(WRITES)
    assert conductor.publication.messages() == []


def test_a_session_refused_at_connect_gets_no_answer_to_its_requests_but_the_rejection() -> None:
    adapter, conductor, session = rig(b"guess", ReadOnlyAuthorisationService())
    assert session.state is ControlSessionState.REJECTED
    conductor.publication.offered.clear()
    feed(adapter, "ListRecordingsRequest", correlation_id=2, from_recording_id=0, record_count=5)
    assert conductor.calls == [] and conductor.publication.offered == []
