"""What an authenticated client may do (Aeron's `AuthorisationService`), asked for every control request.

The control session adapter asks `is_authorised(protocol_id, action_id, type, encoded_principal)` with the
archive schema id, the request's template id, no type (as Java's archive does) and the principal the
`Authenticator` gave the session; a refusal is answered with an ERROR whose relevantId is
`ErrorCode.UNAUTHORISED_ACTION`, as Java's `ControlSessionAdapter` answers it. The default allows everything, so
an archive without credentials behaves exactly as before.

`ReadOnlyAuthorisationService` is the one `aeron-archive serve` uses with credentials: the read-write principal
may do everything; the read-only principal may connect, list, query positions and times (this archive's time
index requests) and replay (what the Spark source needs) but nothing that creates, changes or deletes a recording.
It allows by list, so a request template added later is refused to read-only clients until someone decides otherwise.
"""

from __future__ import annotations

from typing import Protocol

from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.server.authenticator import READ_ONLY_PRINCIPAL, READ_WRITE_PRINCIPAL


class AuthorisationService(Protocol):
    """Aeron's `AuthorisationService.isAuthorised`, snake_cased."""

    def is_authorised(self, protocol_id: int, action_id: int, type_: object | None, encoded_principal: bytes) -> bool:
        """True if the client authenticated as `encoded_principal` may perform `action_id` of `protocol_id`."""
        ...


class _Constant:
    def __init__(self, allowed: bool, name: str) -> None:
        self._allowed = allowed
        self._name = name

    def is_authorised(self, protocol_id: int, action_id: int, type_: object | None, encoded_principal: bytes) -> bool:
        return self._allowed

    def __repr__(self) -> str:
        return self._name


ALLOW_ALL: AuthorisationService = _Constant(True, "ALLOW_ALL")
DENY_ALL: AuthorisationService = _Constant(False, "DENY_ALL")

# Requests the read-only principal may send: the session's own housekeeping, listings and position queries, and
# replays (including stopping them). Not: start/stop/extend recording, truncate, purge, segment detach/delete/
# attach/migrate, replication, update channel.
READ_ONLY_ACTIONS: frozenset[int] = frozenset(
    {
        t.CONNECT_REQUEST,
        t.AUTH_CONNECT_REQUEST,
        t.CHALLENGE_RESPONSE,
        t.CLOSE_SESSION_REQUEST,
        t.KEEP_ALIVE_REQUEST,
        t.ARCHIVE_ID_REQUEST,
        t.LIST_RECORDINGS_REQUEST,
        t.LIST_RECORDINGS_FOR_URI_REQUEST,
        t.LIST_RECORDING_REQUEST,
        t.LIST_RECORDING_SUBSCRIPTIONS_REQUEST,
        t.FIND_LAST_MATCHING_RECORDING_REQUEST,
        t.RECORDING_POSITION_REQUEST,
        t.STOP_POSITION_REQUEST,
        t.START_POSITION_REQUEST,
        t.MAX_RECORDED_POSITION_REQUEST,
        t.REPLAY_REQUEST,
        t.BOUNDED_REPLAY_REQUEST,
        t.STOP_REPLAY_REQUEST,
        t.STOP_ALL_REPLAYS_REQUEST,
        t.REPLAY_TOKEN_REQUEST,
        t.POSITION_AT_TIME_REQUEST,
        t.TIME_INDEX_REQUEST,
        t.TIME_INDEXES_REQUEST,
    }
)


class ReadOnlyAuthorisationService:
    """`READ_WRITE_PRINCIPAL` may do everything, `READ_ONLY_PRINCIPAL` only `READ_ONLY_ACTIONS`; anyone else
    (an unknown principal, another protocol) nothing."""

    def is_authorised(self, protocol_id: int, action_id: int, type_: object | None, encoded_principal: bytes) -> bool:
        if protocol_id != t.SCHEMA_ID:
            return False
        principal = bytes(encoded_principal)
        if principal == READ_WRITE_PRINCIPAL:
            return True
        return principal == READ_ONLY_PRINCIPAL and action_id in READ_ONLY_ACTIONS

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
