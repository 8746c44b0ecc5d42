"""Deletes segment files off the request's path, one per conductor duty cycle, then signals DELETE.

States AWAIT_REPLAYS_STOP → DELETE_FILES → DONE (Aeron's `DeleteSegmentsSession`). As in Java, only a truncation
waits for the recording's replays to stop first (`await_replays_stop`); a purge (of a recording, or of segments
before its start, detached or purged) deletes at once: nothing can replay what it removes.
`max_delete_position` is the highest segment base among the files, by which the conductor tells whether a replay
or an extension would touch what is being deleted (Java's `maxDeletePosition`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.segments import delete_segment_file, named_position

log = logging.getLogger(__name__)


def max_segment_position(recording_id: int, file_names: list[str]) -> int:
    """The highest position named by the files (`<id>-<position>.rec[.del]`); -2**63 for none (Java's start)."""
    positions = [named_position(recording_id, name) for name in file_names]
    return max((p for p in positions if p is not None), default=-(1 << 63))


class DeleteSegmentsState(Enum):
    AWAIT_REPLAYS_STOP = 0
    DELETE_FILES = 1
    DONE = 2


class DeleteSegmentsSession:
    def __init__(
        self,
        archive_dir: str,
        recording_id: int,
        file_names: list[str],
        replays_active: Callable[[], bool],
        on_done: Callable[[DeleteSegmentsSession], None],
        await_replays_stop: bool = True,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """`on_error` hears of each file that cannot be deleted (Java answers the request with an error naming it)."""
        self.recording_id = recording_id
        self.max_delete_position = max_segment_position(recording_id, file_names)
        self._archive_dir = archive_dir
        self._files = list(file_names)
        self._replays_active = replays_active
        self._on_done = on_done
        self.state = DeleteSegmentsState.AWAIT_REPLAYS_STOP if await_replays_stop else DeleteSegmentsState.DELETE_FILES
        self.errors: list[str] = []
        self._on_error = on_error

    @property
    def session_id(self) -> int:
        return self.recording_id

    def is_done(self) -> bool:
        return self.state is DeleteSegmentsState.DONE

    def abort(self, reason: str = "") -> None:
        """Deletion is never abandoned half way: the catalog already says these files are gone."""

    def do_work(self, now_ns: int) -> int:
        if self.state is DeleteSegmentsState.AWAIT_REPLAYS_STOP:
            if self._replays_active():
                return 0
            self.state = DeleteSegmentsState.DELETE_FILES
            return 1
        if self.state is DeleteSegmentsState.DELETE_FILES:
            if not self._files:
                self.state = DeleteSegmentsState.DONE
                self._on_done(self)
                return 1
            path = self._files.pop(0)
            self._delete(path)
            return 1
        return 0

    def _delete(self, name: str) -> None:
        """A file that cannot be removed is reported, never raised: the conductor (and its close) must go on."""
        try:
            delete_segment_file(self._archive_dir, name)
        except (ArchiveError, OSError) as ex:
            self.errors.append(f"failed to delete {name}: {ex}")
            log.warning("recording %d: failed to delete %s: %s", self.recording_id, name, ex)
            if self._on_error is not None:
                self._on_error(ex.message if isinstance(ex, ArchiveError) else f"unable to delete segment file: {ex}")

    def close(self) -> None:
        self.state = DeleteSegmentsState.DONE
