"""What every listing session shares (Aeron's `AbstractListRecordingsSession`): the control session it answers,
its correlation id as its session id, and being done once aborted, closed or finished."""

from __future__ import annotations

from aeron_archive_spark.archive.server.conductor_port import ControlResponder


class ListingSession:
    def __init__(self, control_session: ControlResponder, correlation_id: int) -> None:
        self._control_session = control_session
        self.owner_id = control_session.control_session_id
        self._correlation_id = correlation_id
        self._done = False

    @property
    def session_id(self) -> int:
        return self._correlation_id

    def is_done(self) -> bool:
        return self._done

    def abort(self, reason: str = "") -> None:
        self._done = True

    def close(self) -> None:
        self._done = True
