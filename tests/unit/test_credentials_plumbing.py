"""The archive secret on its way from an option (or serve's file / environment variable) to the connect request,
and never into a repr, an error or a log line.
"""

from __future__ import annotations

import argparse
import logging
import pickle
import re

import pytest

from aeron_archive_spark.archive.cli import credentials as cli_credentials
from aeron_archive_spark.archive.cli.main import build_parser
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.tables.ranges import RunningArchive
from aeron_archive_spark.archive.client.pool import ArchiveConnectError, SessionKey
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.archive.tables.options import RECORDING_OPTIONS, SourceOptions

SECRET = "hunter2-sekrit"
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key"  # spark.redaction.regex's default


# -- ConnectionOptions and the pool's session key ---------------------------------------------------------------


def test_connection_options_carry_the_secret_but_never_show_it() -> None:
    options = ConnectionOptions(control_channel="aeron:udp?endpoint=archive:8010", credentials=SECRET)
    assert options.encoded_credentials == SECRET.encode()
    assert ConnectionOptions(credentials=b"\x00\xff").encoded_credentials == b"\x00\xff"
    assert ConnectionOptions().encoded_credentials == b""
    for text in (repr(options), str(options), options.describe(),
                 str(ArchiveConnectError(options, "authentication rejected"))):
        assert SECRET not in text
    assert pickle.loads(pickle.dumps(options)) == options  # executors receive it inside partitions


def test_sessions_of_different_secrets_have_different_keys_that_do_not_hold_the_secret() -> None:
    def key(credentials: str | None) -> SessionKey:
        return SessionKey.of(ConnectionOptions(credentials=credentials), "/dev/shm/aeron")

    assert key(SECRET) == key(SECRET) and hash(key(SECRET)) == hash(key(SECRET))
    assert key(SECRET) != key("other") and key(SECRET) != key(None)
    assert key(None).credentials_digest == ""
    assert SECRET not in repr(key(SECRET)) and SECRET.encode().hex() not in repr(key(SECRET))


# -- the archiveSecret option -----------------------------------------------------------------------------------


def test_archive_secret_option_reaches_the_connection_options_and_spark_redacts_its_name() -> None:
    spec = RECORDING_OPTIONS["archiveSecret"]
    assert re.search(SPARK_REDACTION_REGEX, spec.name)
    parsed = SourceOptions.parse({"recordingid": "1", "archivesecret": SECRET})
    assert isinstance(parsed.location, RunningArchive) and parsed.location.connection.credentials == SECRET
    assert SECRET not in repr(parsed)
    assert SourceOptions.parse({"recordingid": "1"}).location.connection.credentials is None  # type: ignore[union-attr]


def test_an_empty_archive_secret_is_an_error_that_names_the_option() -> None:
    with pytest.raises(OptionError, match="option archiveSecret: the secret is empty"):
        SourceOptions.parse({"recordingid": "1", "archivesecret": ""})


# -- serve's --secret-file / --secret-env -----------------------------------------------------------------------


def serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", "--dir", "/tmp/a", *argv])


def test_secrets_from_a_file_without_its_trailing_newline_and_from_the_environment(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rw"
    path.write_bytes(b"from-file-xyzzy \n")
    path.chmod(0o600)
    monkeypatch.setenv("RO_SECRET", "from-env-plugh")
    args = serve_args("--secret-file", str(path), "--read-only-secret-env", "RO_SECRET")
    assert cli_credentials.secrets_from_args(args) == (b"from-file-xyzzy ", b"from-env-plugh")
    description = cli_credentials.describe(args)
    assert str(path) in description and "$RO_SECRET" in description
    assert "xyzzy" not in description and "plugh" not in description
    assert cli_credentials.secrets_from_args(serve_args()) == (None, None)
    assert "none" in cli_credentials.describe(serve_args())


@pytest.mark.parametrize(("argv", "message"), [
    (["--secret-file", "{missing}"], "read-write secret file {missing} does not exist"),
    (["--secret-file", "{empty}"], "read-write secret file {empty} is empty"),
    (["--secret-env", "NO_SUCH_VARIABLE_X"], "read-write secret environment variable NO_SUCH_VARIABLE_X is not set"),
    (["--secret-env", "EMPTY_SECRET_X"], "read-write secret environment variable EMPTY_SECRET_X is empty"),
    (["--secret-env", "RW_X", "--read-only-secret-file", "{missing}"], "read-only secret file {missing} does not"),
    (["--read-only-secret-env", "RW_X"], "a read-only secret needs a read-write secret too"),
])
def test_unreadable_secrets_are_errors_naming_the_file_or_variable(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                                   argv: list[str], message: str) -> None:
    names = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty")}
    (tmp_path / "empty").write_bytes(b"\n")
    monkeypatch.setenv("EMPTY_SECRET_X", "")
    monkeypatch.setenv("RW_X", "rw")
    monkeypatch.delenv("NO_SUCH_VARIABLE_X", raising=False)
    with pytest.raises(cli_credentials.CredentialsError) as err:
        cli_credentials.secrets_from_args(serve_args(*(a.format(**names) for a in argv)))
    assert message.format(**names) in str(err.value)


def test_a_file_and_a_variable_for_the_same_secret_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        serve_args("--secret-file", "/x", "--secret-env", "Y")
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_file_other_users_can_read_is_warned_about(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "rw"
    path.write_bytes(b"s3cret")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert cli_credentials.secrets_from_args(serve_args("--secret-file", str(path))) == (b"s3cret", None)
    assert "readable by other users" in caplog.text and "s3cret" not in caplog.text.replace(str(path), "")
