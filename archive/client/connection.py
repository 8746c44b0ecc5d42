"""How to reach a running archive: the plain, picklable connection options every remote reader and writer shares.

Plain data only, no I/O: opening clients and control sessions for these options is the connection pool's job
(`archive.client.pool`), which keys its sessions on the fields a control session depends on (everything but the
replay channel and stream, which each replay request names itself), so it must stay frozen and hashable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from aeron_archive_spark.archive.constants import (
    CONTROL_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_STREAM_ID_DEFAULT,
    CONTROL_STREAM_ID_DEFAULT,
)

REPLAY_CHANNEL_DEFAULT = "aeron:udp?endpoint=localhost:0"
REPLAY_STREAM_ID_DEFAULT = 0x5EE7
MESSAGE_TIMEOUT_MS_DEFAULT = 10_000


def default_aeron_dir() -> str:
    """Where a media driver runs by default: $AERON_DIR, else Aeron's default directory for this user."""
    env = os.environ.get("AERON_DIR")
    if env:
        return env
    import pyaeron  # the C client's own default path rule (per user, under /dev/shm where it exists)

    return str(pyaeron.default_path())


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How to reach a running archive; picklable, so executors receive it inside partitions."""

    aeron_dir: str | None = None
    control_channel: str = CONTROL_CHANNEL_DEFAULT
    control_stream_id: int = CONTROL_STREAM_ID_DEFAULT
    control_response_channel: str = CONTROL_RESPONSE_CHANNEL_DEFAULT
    control_response_stream_id: int = CONTROL_RESPONSE_STREAM_ID_DEFAULT
    replay_channel: str = REPLAY_CHANNEL_DEFAULT
    replay_stream_id: int = REPLAY_STREAM_ID_DEFAULT
    message_timeout_ms: int = MESSAGE_TIMEOUT_MS_DEFAULT

    def resolved_aeron_dir(self) -> str:
        """`aeronDir`, else $AERON_DIR, else Aeron's default directory for this user."""
        return self.aeron_dir or default_aeron_dir()

    def describe(self) -> str:
        return (
            f"archive on controlChannel={self.control_channel} controlStreamId={self.control_stream_id} "
            f"(aeronDir={self.resolved_aeron_dir()})"
        )
