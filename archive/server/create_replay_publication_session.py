"""A replay's publication being added, so that the conductor never waits on the media driver for it.

States AWAIT_PUBLICATION -> DONE (Aeron's `CreateReplayPublicationSession`). The conductor validates a replay
request, starts the add of its exclusive publication without waiting (`async_add_exclusive_publication`), and goes
on with other requests; this session polls the add each duty cycle. When the publication comes it is handed to
`on_publication`, which builds the `ReplaySession` and sends the OK, exactly what the conductor did in line
before; if the driver refuses it (or does not answer within its timeout), `on_error` answers the request with an
error. A session aborted meanwhile (its recording truncated or purged, the archive closing) answers with an error
at once and closes the publication whenever it comes.

Why: adding a publication is a round trip to the media driver's conductor, ~0.3-0.4 ms even with both awake, and
the conductor used to spend it blocked; a reader with several small replays in flight (a partition of many small
recordings) then found every request after the first queued behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from aeron_archive_spark.archive.native import ExclusivePublication, NativeAeronError, PendingExclusivePublication

log = logging.getLogger(__name__)


class CreateReplayPublicationState(Enum):
    AWAIT_PUBLICATION = 0
    DONE = 1


class CreateReplayPublicationSession:
    def __init__(
        self,
        session_id: int,
        correlation_id: int,
        recording_id: int,
        pending: PendingExclusivePublication,
        on_publication: Callable[[ExclusivePublication], None],
        on_error: Callable[[str], None],
    ) -> None:
        """`session_id`: the conductor's key for it; `on_publication` / `on_error` run on the conductor thread."""
        self._session_id = session_id
        self.correlation_id = correlation_id
        self.recording_id = recording_id
        self._pending = pending
        self._on_publication = on_publication
        self._on_error = on_error
        self.state = CreateReplayPublicationState.AWAIT_PUBLICATION

    @property
    def session_id(self) -> int:
        return self._session_id

    def is_done(self) -> bool:
        return self.state is CreateReplayPublicationState.DONE

    @property
    def is_settled(self) -> bool:
        """Done, and the add answered too (an aborted session still polls until the driver answers, to close the
        publication it may yet get): the conductor forgets it then."""
        return self.is_done() and self._pending.is_done

    def abort(self, reason: str = "") -> None:
        """Answer the request with an error now; the publication, if it still comes, is closed."""
        if self.is_done():
            return
        self.state = CreateReplayPublicationState.DONE
        self._pending.abandon()
        self._on_error(f"replay of recordingId={self.recording_id} aborted before it started: {reason}")

    def do_work(self, now_ns: int) -> int:
        if self._pending.is_done and self.is_done():
            return 0
        try:
            publication = self._pending.poll()
        except NativeAeronError as ex:
            if self.is_done():  # aborted: already answered
                return 1
            self.state = CreateReplayPublicationState.DONE
            log.warning("replay of recording %d: the replay publication was not added: %s", self.recording_id, ex)
            self._on_error(f"failed to create replay publication for recordingId={self.recording_id}: {ex}")
            return 1
        if publication is None:
            return 0
        if self.is_done():  # aborted meanwhile: `poll` closed it (abandoned)
            return 1
        self.state = CreateReplayPublicationState.DONE
        self._on_publication(publication)
        return 1

    def close(self) -> None:
        """The archive is closing: nobody will use the publication."""
        self._pending.abandon()
        self.state = CreateReplayPublicationState.DONE
