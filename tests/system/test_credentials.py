"""Who may connect, with a real archive, media driver and our client: the two-secret scheme of `serve`.

No credentials and wrong credentials are refused at connect with an error naming the archive's control channel;
the read-only secret lists and replays but gets UNAUTHORISED_ACTION for anything that records or deletes; the
read-write secret records. The connection pool passes `ConnectionOptions.credentials`, and `aeron-archive serve`
reads its secrets from a file and an environment variable without them showing in its argv or its logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import free_udp_port
from system.harness import SMALL_TERM, Harness, collect, payloads_of
from system.test_record_replay import record

from aeron_archive_spark.archive import AeronArchive, ArchiveError, ErrorCode, SourceLocation
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.pool import ArchiveConnectError, ConnectionPool
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.server.authenticator import AuthDecision, AuthResult, CredentialsAuthenticator
from aeron_archive_spark.archive.server.authorisation import ReadOnlyAuthorisationService

RW, RO = b"rw-Xq7-secret", b"ro-Zk2-secret"


@pytest.fixture
def secured(aeron_dir: str, tmp_path) -> Iterator[Harness]:
    """An archive requiring credentials, also on UDP, with a read-write client as `h.client`."""
    control = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    h = Harness(aeron_dir, str(tmp_path / "archive"), connect=False, control_channel=control, control_stream_id=4300,
                authenticator=CredentialsAuthenticator(RW, RO), authorisation_service=ReadOnlyAuthorisationService())
    try:
        h.client = h.connect(credentials=RW)
        yield h
    finally:
        h.close()


def connect_udp(h: Harness, **kwargs: object) -> AeronArchive:
    assert h.ctx.control_channel is not None
    client = AeronArchive.connect(aeron_dir=h.aeron_dir, control_request_channel=h.ctx.control_channel,
                                  control_request_stream_id=h.ctx.control_stream_id,
                                  control_response_channel="aeron:udp?endpoint=localhost:0",
                                  message_timeout_s=5.0, **kwargs)  # type: ignore[arg-type]
    h.clients.append(client)
    return client


def test_no_credentials_and_wrong_credentials_are_refused_naming_the_control_channel(secured: Harness) -> None:
    channel = secured.ctx.control_channel
    with pytest.raises(ArchiveError) as none_given:
        connect_udp(secured)
    assert none_given.value.error_code == ErrorCode.AUTHENTICATION_REJECTED
    assert str(none_given.value).startswith(
        f"AUTHENTICATION_REJECTED: archive at {channel} stream 4300 rejected the credentials (authentication "
        "rejected); no credentials were given")
    with pytest.raises(ArchiveError) as wrong:
        connect_udp(secured, credentials=b"rw-Xq7-secreT")
    assert wrong.value.error_code == ErrorCode.AUTHENTICATION_REJECTED
    assert f"archive at {channel} stream 4300 rejected the credentials (authentication rejected)" in str(wrong.value)
    assert "secre" not in str(wrong.value)


def test_read_only_lists_and_replays_but_may_not_record_extend_truncate_or_purge(secured: Harness) -> None:
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = payloads_of([100, 2000, 5] * 20)
    recording_id, spans, pub, _ = record(secured, channel, 4301, payloads)
    secured.client.stop_recording(channel, 4301)
    secured.await_signal(RecordingSignal.STOP, recording_id)
    reader = connect_udp(secured, credentials=RO.decode())  # a str secret is sent as its UTF-8 bytes

    assert [d.recording_id for d in reader.list_recordings()] == [recording_id]
    assert reader.list_recording(recording_id) is not None
    assert [d.recording_id for d in reader.list_recordings_for_uri(0, 10, "aeron:ipc", 4301)] == [recording_id]
    assert reader.get_stop_position(recording_id) == spans[-1][1]
    assert reader.get_recording_position(recording_id) == -1
    assert reader.archive_id() == secured.archive.archive_id  # type: ignore[union-attr]
    sub = reader.replay(recording_id, "aeron:ipc", 4302)
    try:
        assert [got[0] for got in collect(sub, len(payloads))] == payloads
    finally:
        sub.close()

    refused = {
        "start_recording": lambda: reader.start_recording(channel, 4303, SourceLocation.LOCAL),
        "extend_recording": lambda: reader.extend_recording(recording_id, channel, 4301, SourceLocation.LOCAL),
        "truncate_recording": lambda: reader.truncate_recording(recording_id, 0),
        "purge_recording": lambda: reader.purge_recording(recording_id),
        "stop_recording": lambda: reader.stop_recording(channel, 4301),
    }
    for what, call in refused.items():
        with pytest.raises(ArchiveError) as err:
            call()
        assert err.value.error_code == ErrorCode.UNAUTHORISED_ACTION, what
        assert err.value.message.startswith("unauthorised action: "), what
    assert reader.get_stop_position(recording_id) == spans[-1][1]  # nothing was changed
    assert reader.list_recordings()  # the session is still usable after the refusals
    pub.close()


def test_read_write_records_and_purges(secured: Harness) -> None:
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    recording_id, _, pub, _ = record(secured, channel, 4304, payloads_of([500] * 50))
    secured.client.stop_recording(channel, 4304)
    secured.await_signal(RecordingSignal.STOP, recording_id)
    assert secured.client.purge_recording(recording_id) >= 1
    pub.close()


def test_the_connection_pool_passes_the_secret_and_keeps_sessions_of_different_secrets_apart(
        secured: Harness) -> None:
    def options(credentials: str | bytes | None) -> ConnectionOptions:
        return ConnectionOptions(aeron_dir=secured.aeron_dir, control_channel=secured.ctx.local_control_channel,
                                 control_stream_id=secured.ctx.local_control_stream_id,
                                 control_response_channel="aeron:ipc", message_timeout_ms=5_000,
                                 credentials=credentials)

    pool = ConnectionPool()
    try:
        with pool.archive(options(RO.decode())) as reader:
            reader.list_recordings()
            reader_session = reader.control_session_id
        with pool.archive(options(RW)) as writer:
            assert writer.control_session_id != reader_session  # not the read-only session
            writer.list_recordings()
        with pool.archive(options(RO.decode())) as again:
            assert again.control_session_id == reader_session  # same secret: reused
        with pytest.raises(ArchiveConnectError) as err, pool.archive(options(None)):
            pass
        assert "rejected the credentials" in str(err.value)
        with pytest.raises(ArchiveConnectError) as err, pool.archive(options("not-the-secret")):
            pass
        assert "not-the-secret" not in str(err.value) and "not-the-secret" not in repr(err.value.options)
    finally:
        pool.close()


def test_serve_reads_its_secrets_from_a_file_and_the_environment_and_never_shows_them(aeron_dir: str,
                                                                                      tmp_path) -> None:
    secret_file = tmp_path / "archive.secret"
    secret_file.write_bytes(RW + b"\n")
    secret_file.chmod(0o600)
    env = {**os.environ, "ARCHIVE_RO_SECRET": RO.decode()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "-vv", "serve", "--dir",
         str(tmp_path / "a"), "--aeron-dir", aeron_dir, "--control-channel", "none", "--local-control-stream-id",
         "4310", "--low-storage-threshold", "0", "--secret-file", str(secret_file), "--read-only-secret-env",
         "ARCHIVE_RO_SECRET"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    clients: list[AeronArchive] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        assert json.loads(line)["credentialsRequired"] is True
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            argv = f.read()
        assert RW not in argv and RO not in argv and b"archive.secret" in argv

        def connect(credentials: bytes | None) -> AeronArchive:
            client = AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel="aeron:ipc",
                                          control_request_stream_id=4310, control_response_channel="aeron:ipc",
                                          message_timeout_s=5.0, credentials=credentials)
            clients.append(client)
            return client

        with pytest.raises(ArchiveError) as err:
            connect(None)
        assert err.value.error_code == ErrorCode.AUTHENTICATION_REJECTED
        with pytest.raises(ArchiveError) as err:
            connect(RW + b"\n")  # the file's newline is not part of the secret
        assert err.value.error_code == ErrorCode.AUTHENTICATION_REJECTED
        reader = connect(RO)
        assert reader.list_recordings() == []
        with pytest.raises(ArchiveError) as err:
            reader.start_recording("aeron:ipc", 4311, SourceLocation.LOCAL)
        assert err.value.error_code == ErrorCode.UNAUTHORISED_ACTION
        writer = connect(RW)
        writer.stop_recording_subscription(writer.start_recording("aeron:ipc", 4311, SourceLocation.LOCAL))
    finally:
        for client in clients:
            client.close()
        proc.send_signal(signal.SIGTERM)
        out, err_text = proc.communicate(timeout=20)
    assert proc.returncode == 0
    logs = err_text + out
    assert b"control session" in logs and b"credentials: read-write secret from file" in logs
    assert RW not in logs and RO not in logs and b"Xq7" not in logs and b"Zk2" not in logs


def test_serve_refuses_to_start_on_an_unreadable_secret(aeron_dir: str, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_SUCH_SECRET_VARIABLE"}
    proc = subprocess.run(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", str(tmp_path / "a"),
         "--aeron-dir", aeron_dir, "--control-channel", "none", "--secret-env", "NO_SUCH_SECRET_VARIABLE"],
        capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert "read-write secret environment variable NO_SUCH_SECRET_VARIABLE is not set" in proc.stderr
    assert not (tmp_path / "a").exists()  # refused before anything was created


def test_tail_presents_a_secret_read_from_the_environment(secured: Harness, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from aeron_archive_spark.archive.cli.main import main

    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = [f"message {i}".encode() for i in range(5)]
    recording_id, _, pub, _ = record(secured, channel, 4320, payloads)
    secured.client.stop_recording(channel, 4320)
    secured.await_signal(RecordingSignal.STOP, recording_id)
    argv = ["tail", str(recording_id), "--aeron-dir", secured.aeron_dir, "--control-stream-id",
            str(secured.ctx.local_control_stream_id), "--from-start", "--format", "text", "-n", "5"]
    assert main(argv) == 2
    assert "rejected the credentials" in capsys.readouterr().err
    monkeypatch.setenv("TAIL_SECRET", RO.decode())
    assert main([*argv, "--secret-env", "TAIL_SECRET"]) == 0
    out = capsys.readouterr().out
    assert [line.split(None, 2)[2] for line in out.splitlines()] == [p.decode() for p in payloads]
    pub.close()


class ChallengingAuthenticator(CredentialsAuthenticator):
    """Challenges every connect with a nonce and accepts the read-write secret followed by it as the answer."""

    def on_connect(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return AuthResult(AuthDecision.CHALLENGE, encoded_challenge=b"nonce-%d" % control_session_id)

    def on_challenge_response(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return super().on_connect(control_session_id, encoded_credentials.replace(b"nonce-%d" % control_session_id,
                                                                                  b""), now_ms)


def test_a_challenge_is_answered_by_the_callback_or_refused_clearly(aeron_dir: str, tmp_path) -> None:
    h = Harness(aeron_dir, str(tmp_path / "archive"), connect=False, authenticator=ChallengingAuthenticator(RW),
                authorisation_service=ReadOnlyAuthorisationService())
    try:
        with pytest.raises(ArchiveError) as err:
            h.connect(credentials=RW)
        assert err.value.error_code == ErrorCode.AUTHENTICATION_REJECTED
        assert "sent an authentication challenge, which this client cannot answer without an on_challenge" in str(
            err.value)
        challenges: list[bytes] = []

        def answer(challenge: bytes) -> bytes:
            challenges.append(challenge)
            return RW + challenge

        client = h.connect(on_challenge=answer)
        assert client.list_recordings() == [] and challenges == [b"nonce-%d" % client.control_session_id]
        with pytest.raises(ArchiveError) as err:
            h.connect(on_challenge=lambda challenge: b"wrong" + challenge)
        assert "rejected the credentials (authentication rejected)" in str(err.value)
    finally:
        h.close()
