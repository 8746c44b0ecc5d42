"""`aeron-archive serve`'s credentials: two secrets, each read from a file or an environment variable (and the one
secret a client verb such as `tail` presents, read the same way).

Why not a flag with the secret in it: a command line is readable by every user of the host (`ps`, /proc/*/cmdline)
and lands in shell histories and process listings, so the flags only say *where* the secret is. A file's one
trailing newline (what `echo` and editors add) is not part of the secret. Nothing here logs or prints a secret;
errors name the file or variable, never its contents.

Two principals (see `server.authorisation`): the read-write secret may do everything; the read-only secret may list
and replay (the Spark source), not record, extend, truncate or purge. A read-only secret alone is refused: nobody
could then record, which is never what an operator means.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat

log = logging.getLogger("aeron_archive_spark.archive.cli")


class CredentialsError(ValueError):
    """A configured secret cannot be read: the message names the file or variable, never a secret."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "credentials",
        "require clients to authenticate (default: anyone who reaches the control channel may do everything); "
        "secrets are read from a file or an environment variable, never given on the command line",
    )
    read_write = group.add_mutually_exclusive_group()
    read_write.add_argument("--secret-file", metavar="PATH", help="file holding the read-write secret")
    read_write.add_argument("--secret-env", metavar="NAME", help="environment variable holding the read-write secret")
    read_only = group.add_mutually_exclusive_group()
    read_only.add_argument(
        "--read-only-secret-file", metavar="PATH", help="file holding the read-only secret (list and replay only)"
    )
    read_only.add_argument(
        "--read-only-secret-env", metavar="NAME", help="environment variable holding the read-only secret"
    )


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """The secret a client verb presents to an archive that requires credentials (the read-only one is enough to
    read)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--secret-file", metavar="PATH", help="file holding the archive's secret, if it requires one")
    group.add_argument("--secret-env", metavar="NAME", help="environment variable holding the archive's secret")


def client_secret(args: argparse.Namespace) -> bytes | None:
    """The secret `add_client_arguments` configured, None without one."""
    return _secret(args.secret_file, args.secret_env, "archive secret")


def _from_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read()
    except FileNotFoundError:
        raise CredentialsError(f"{what} file {path} does not exist") from None
    except OSError as ex:
        raise CredentialsError(f"cannot read the {what} file {path}: {ex.strerror or ex}") from None
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise CredentialsError(f"{what} file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the %s file %s is readable by other users (mode %o): chmod 600 it", what, path, mode & 0o777)
    return data


def _from_env(name: str, what: str) -> bytes:
    value = os.environb.get(os.fsencode(name))
    if value is None:
        raise CredentialsError(f"{what} environment variable {name} is not set")
    if not value:
        raise CredentialsError(f"{what} environment variable {name} is empty")
    return value


def _secret(path: str | None, env: str | None, what: str) -> bytes | None:
    if path is not None:
        return _from_file(path, what)
    if env is not None:
        return _from_env(env, what)
    return None


def secrets_from_args(args: argparse.Namespace) -> tuple[bytes | None, bytes | None]:
    """(read-write, read-only) secrets as configured, (None, None) when serve runs without credentials."""
    read_write = _secret(args.secret_file, args.secret_env, "read-write secret")
    read_only = _secret(args.read_only_secret_file, args.read_only_secret_env, "read-only secret")
    if read_only is not None and read_write is None:
        raise CredentialsError(
            "a read-only secret needs a read-write secret too (--secret-file or --secret-env): otherwise no "
            "client could record"
        )
    return read_write, read_only


def describe(args: argparse.Namespace) -> str:
    """Where the secrets come from, for the startup log: sources only."""

    def source(path: str | None, env: str | None) -> str:
        return f"file {path}" if path is not None else f"${env}"

    if args.secret_file is None and args.secret_env is None:
        return "none: every client may do everything"
    text = f"read-write secret from {source(args.secret_file, args.secret_env)}"
    if args.read_only_secret_file is not None or args.read_only_secret_env is not None:
        text += f", read-only secret from {source(args.read_only_secret_file, args.read_only_secret_env)}"
    return text
