"""Deletes segment files after truncate/purge once replays of the recording have stopped, then signals DELETE.

States AWAIT_REPLAYS_STOP → DELETE_FILES → DONE (Aeron's `DeleteSegmentsSession`); one file per duty cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.segments import delete_segment_file

log = logging.getLogger(__name__)


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
    ) -> None:
        self.recording_id = recording_id
        self._archive_dir = archive_dir
        self._files = list(file_names)
        self._replays_active = replays_active
        self._on_done = on_done
        self.state = DeleteSegmentsState.AWAIT_REPLAYS_STOP
        self.errors: list[str] = []

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

    def close(self) -> None:
        self.state = DeleteSegmentsState.DONE
