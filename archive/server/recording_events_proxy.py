"""Publishes RecordingStarted / RecordingProgress / RecordingStopped on the optional recording events stream."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.codecs import load_archive_codec

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import Publication

log = logging.getLogger(__name__)


class RecordingEventsProxy:
    """Events are advisory (as in Aeron): an event that meets back pressure is dropped, never waited on."""

    def __init__(self, publication: Publication) -> None:
        self._publication = publication
        self._codec = load_archive_codec()

    def started(
        self,
        recording_id: int,
        start_position: int,
        session_id: int,
        stream_id: int,
        channel: str,
        source_identity: str,
    ) -> bool:
        return self._send(
            self._codec.encode(
                "RecordingStarted",
                recording_id=recording_id,
                start_position=start_position,
                session_id=session_id,
                stream_id=stream_id,
                channel=channel,
                source_identity=source_identity,
            )
        )

    def progress(self, recording_id: int, start_position: int, position: int) -> bool:
        return self._send(
            self._codec.encode(
                "RecordingProgress", recording_id=recording_id, start_position=start_position, position=position
            )
        )

    def stopped(self, recording_id: int, start_position: int, stop_position: int) -> bool:
        return self._send(
            self._codec.encode(
                "RecordingStopped",
                recording_id=recording_id,
                start_position=start_position,
                stop_position=stop_position,
            )
        )

    def _send(self, message: bytes) -> bool:
        return self._publication.offer(message) > 0

    def close(self) -> None:
        self._publication.close()
