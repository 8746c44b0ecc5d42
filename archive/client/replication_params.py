"""What a replication may be asked for: Java's `ReplicationParams`, its ten settings with Java's defaults.

The archive that replicates (the destination) reads them from the ReplicateRequest2 the client sends; see
`docs/control-protocol.md` ("Replication") for what each does there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aeron_archive_spark.archive.constants import NULL_POSITION

NULL_VALUE = -1


@dataclass(slots=True)
class ReplicationParams:
    """Settings of one replication (Java's `ReplicationParams`; `reset()` restores the defaults).

    - `stop_position`: replicate up to this position (-1: the whole recording, following a live one);
    - `dst_recording_id`: extend this recording of the destination archive (-1: create a new one);
    - `live_destination`: once caught up, merge onto the live stream here (the source must be recording);
    - `replication_channel`: where the source's replay comes in (None: the destination archive's own);
    - `channel_tag_id`, `subscription_tag_id`: tag the recording subscription, so others can join it by tag;
    - `file_io_max_length`: the source replay's read size (-1: the source's default; never below the MTU);
    - `replication_session_id`: the replay's (and so the new recording's) session id (-1: the source's);
    - `encoded_credentials`: sent to the source archive when the destination connects to it;
    - `src_response_channel`: where the source archive answers the destination (None: the destination's default).
    """

    stop_position: int = NULL_POSITION
    dst_recording_id: int = NULL_VALUE
    live_destination: str | None = None
    replication_channel: str | None = None
    channel_tag_id: int = NULL_VALUE
    subscription_tag_id: int = NULL_VALUE
    file_io_max_length: int = NULL_VALUE
    replication_session_id: int = NULL_VALUE
    encoded_credentials: bytes = field(default=b"", repr=False)
    src_response_channel: str | None = None

    def reset(self) -> ReplicationParams:
        """Back to the defaults (returns self, as Java's fluent setters do)."""
        for name, value in ReplicationParams().as_fields().items():
            setattr(self, name, value)
        return self

    def as_fields(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    def check(self) -> None:
        """Refuse what Java's `ArchiveProxy.replicate` refuses before it sends."""
        if self.live_destination and self.replication_session_id != NULL_VALUE:
            raise ValueError(
                "ReplicationParams.liveDestination and ReplicationParams.sessionId can not be specified together"
            )
