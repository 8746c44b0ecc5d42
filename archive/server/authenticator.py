"""Authentication hook for control sessions (Aeron's `Authenticator` SPI); the default accepts everyone."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class AuthDecision(Enum):
    AUTHENTICATED = "authenticated"
    CHALLENGE = "challenge"
    REJECTED = "rejected"
    PENDING = "pending"


@dataclass(frozen=True)
class AuthResult:
    decision: AuthDecision
    encoded_challenge: bytes = b""


class Authenticator:
    """Override `on_connect` / `on_challenge_response` to authenticate clients from their encoded credentials."""

    def on_connect(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return AuthResult(AuthDecision.AUTHENTICATED)

    def on_challenge_response(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        return AuthResult(AuthDecision.AUTHENTICATED)


class SharedSecretAuthenticator(Authenticator):
    """Accepts a client whose credentials equal a shared secret; useful for tests and simple deployments."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def on_connect(self, control_session_id: int, encoded_credentials: bytes, now_ms: int) -> AuthResult:
        if encoded_credentials == self._secret:
            return AuthResult(AuthDecision.AUTHENTICATED)
        return AuthResult(AuthDecision.REJECTED)
