"""Source offsets: `{"<recordingId>": position}` JSON, as the streaming reader checkpoints them.

Keys are in ascending numeric id order: Spark compares offsets by their `json.dumps` text (a batch with no new
data is detected by equality), so the same positions must always serialize identically.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class OffsetError(ValueError):
    """A checkpointed or computed offset is not of the `{"<recordingId>": position}` form."""


def to_offset(positions: Mapping[int, int]) -> dict[str, int]:
    """The JSON-able offset, keys in ascending recording id order."""
    return {str(rid): int(positions[rid]) for rid in sorted(positions)}


def from_offset(offset: Mapping[str, Any] | None, what: str = "offset") -> dict[int, int]:
    if offset is None:
        return {}
    positions: dict[int, int] = {}
    for key, value in offset.items():
        try:
            rid = int(key)
        except (TypeError, ValueError):
            raise OffsetError(f"{what} {dict(offset)!r}: key {key!r} is not a recording id") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise OffsetError(f"{what} {dict(offset)!r}: position of recording {key} is not an integer")
        positions[rid] = value
    return positions
