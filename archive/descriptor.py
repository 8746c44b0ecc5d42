"""The 16-field recording descriptor, as stored in the catalog and sent to clients."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from aeron_archive_spark.archive.constants import NULL_POSITION


@dataclass(frozen=True, slots=True)
class RecordingDescriptor:
    control_session_id: int
    correlation_id: int
    recording_id: int
    start_timestamp: int
    stop_timestamp: int
    start_position: int
    stop_position: int
    initial_term_id: int
    segment_file_length: int
    term_buffer_length: int
    mtu_length: int
    session_id: int
    stream_id: int
    stripped_channel: str
    original_channel: str
    source_identity: str

    @property
    def is_active(self) -> bool:
        """True while recording: Aeron marks an active recording with stopPosition == NULL_POSITION."""
        return self.stop_position == NULL_POSITION

    def to_json_dict(self) -> dict[str, Any]:
        """Keyed by Aeron's camelCase field names (`aeron-archive list --json`)."""
        return {_camel(k): v for k, v in asdict(self).items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)
