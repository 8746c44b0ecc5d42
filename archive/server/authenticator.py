"""Authentication hook for control sessions (Aeron's `Authenticator` SPI); the default accepts everyone.

An authenticator answers a connect (and, if it challenged, the challenge response) with a decision and, when it
authenticates, the session's *encoded principal*: who the client is, as the `AuthorisationService`
(`server.authorisation`) sees it on every later request. The default keeps the archive open, as Aeron's
`DefaultAuthenticatorSupplier` does; `CredentialsAuthenticator` is the one an operator turns on with
`aeron-archive serve --secret-file/--secret-env`, because on a cluster the control channel listens on a routable
address and anyone who can reach it could otherwise record, truncate or purge.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger(__name__)

# The principals `CredentialsAuthenticator` hands out; `server.authorisation.ReadOnlyAuthorisationService`
# decides what each may do.
READ_WRITE_PRINCIPAL = b"read-write"
READ_ONLY_PRINCIPAL = b"read-only"


class AuthDecision(Enum):
    AUTHENTICATED = "authenticated"
    CHALLENGE = "challenge"
    REJECTED = "rejected"
    PENDING = "pending"


@dataclass(frozen=True)
class AuthResult:
    decision: AuthDecision
    encoded_challenge: bytes = b""
    # Who the client is once AUTHENTICATED (Aeron's `SessionProxy.authenticate(encodedPrincipal)`); never a secret.
    encoded_principal: bytes = field(default=b"")


class Authenticator:
    """Override `on_connect` / `on_challenge_response` to authenticate clients from their encoded credentials."""

    def on_connect(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return AuthResult(AuthDecision.AUTHENTICATED)

    def on_challenge_response(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return AuthResult(AuthDecision.AUTHENTICATED)


def _secret_bytes(name: str, secret: bytes | str) -> bytes:
    value = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not value:
        raise ValueError(f"the {name} secret is empty")
    return value


class CredentialsAuthenticator(Authenticator):
    """Two shared secrets: the read-write one authenticates as `READ_WRITE_PRINCIPAL`, the read-only one (optional)
    as `READ_ONLY_PRINCIPAL`; anything else, including no credentials at all, is rejected.

    Credentials are compared with `hmac.compare_digest`, against both secrets every time, so the time a rejection
    takes says nothing about how much of a secret was guessed nor which secret exists. Secrets never appear in
    `repr`, logs or errors.
    """

    def __init__(self, read_write_secret: bytes | str, read_only_secret: bytes | str | None = None) -> None:
        self._read_write = _secret_bytes("read-write", read_write_secret)
        self._read_only = None if read_only_secret is None else _secret_bytes("read-only", read_only_secret)
        if self._read_only is not None and hmac.compare_digest(self._read_only, self._read_write):
            raise ValueError("the read-only secret must differ from the read-write secret")

    @property
    def has_read_only(self) -> bool:
        return self._read_only is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(read_only={'yes' if self.has_read_only else 'no'})"

    def on_connect(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        credentials = bytes(encoded_credentials)
        read_write = hmac.compare_digest(credentials, self._read_write)
        read_only = self._read_only is not None and hmac.compare_digest(credentials, self._read_only)
        if read_write:
            return AuthResult(AuthDecision.AUTHENTICATED, encoded_principal=READ_WRITE_PRINCIPAL)
        if read_only:
            return AuthResult(AuthDecision.AUTHENTICATED, encoded_principal=READ_ONLY_PRINCIPAL)
        log.warning(
            "control session %d: %s",
            control_session_id,
            "rejected: no credentials" if not credentials else "rejected: credentials match no secret",
        )
        return AuthResult(AuthDecision.REJECTED)

    def on_challenge_response(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return AuthResult(AuthDecision.REJECTED)  # never challenges, so an answer to a challenge is not expected


class SharedSecretAuthenticator(CredentialsAuthenticator):
    """One shared secret, which may do everything (a `CredentialsAuthenticator` without a read-only secret)."""

    def __init__(self, secret: bytes | str) -> None:
        super().__init__(secret)
