"""The narrow surfaces sessions see of each other: what a control session asks of the conductor, and back.

Aeron hands every `ControlSession` the whole `ArchiveConductor` and every listing session the whole
`ControlSession`, which in Python makes an import circle (conductor → control session → conductor) and leaves a
session testable only next to a live conductor. Naming just the methods each side calls breaks the circle (this
module imports no session and no conductor) and lets unit tests drive a session with small fakes.
"""

from __future__ import annotations

from typing import Protocol

from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.constants import ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.server.session import Session


class ResponsePublication(Protocol):
    """The exclusive publication a control session answers on (the client's response channel)."""

    @property
    def is_connected(self) -> bool: ...

    def offer(self, data: bytes, /) -> int:
        """The new position, or a negative Aeron code (back pressure, not connected, ...)."""

    def close(self) -> None: ...


class ControlResponder(Protocol):
    """Where a listing session sends its descriptors: the control session that asked for the listing."""

    @property
    def control_session_id(self) -> int: ...

    def send_ok(self, correlation_id: int, relevant_id: int = 0) -> None: ...

    def send_error(self, correlation_id: int, error_code: int, message: str) -> None: ...

    def send_response_code(
        self, correlation_id: int, relevant_id: int, code: ControlResponseCode, message: str = ""
    ) -> None: ...

    def send_descriptor(self, correlation_id: int, catalog_bytes: bytes, throttle: bool = True) -> bool:
        """False (nothing sent) while earlier responses are still queued and `throttle` is set: retry later."""

    def send_subscription_descriptor(
        self, correlation_id: int, subscription_id: int, stream_id: int, stripped_channel: str
    ) -> bool:
        """False when nothing was sent and the listing must offer the same descriptor again later."""

    def send_signal(
        self, correlation_id: int, recording_id: int, subscription_id: int, position: int, signal: RecordingSignal
    ) -> None: ...

    def send_time_index_samples(self, correlation_id: int, recording_id: int, interval_ns: int, samples: bytes) -> bool:
        """False (nothing sent) while earlier responses are still queued: retry later, as `send_descriptor`."""


class ControlClient(ControlResponder, Protocol):
    """The control session a request came from, as the conductor sees it: where to answer, and its listing.

    A control session runs at most one listing at a time (Aeron's ACTIVE_LISTING rule); the conductor checks and
    sets `active_listing` and clears it when the listing is done.
    """

    active_listing: Session | None


class ConductorPort(Protocol):
    """What a `ControlSession` needs from the conductor: its response publication and one method per request.

    Every request method takes the decoded request (a class of `codecs.messages`) and answers on `session` (OK,
    descriptors, signals) or raises `ArchiveError` / `ChannelError`, which the control session turns into an
    error response for the request's correlation id.
    """

    @property
    def archive_id(self) -> int: ...

    def add_response_publication(self, channel: str, stream_id: int) -> ResponsePublication: ...

    def start_recording(
        self, session: ControlClient, request: m.StartRecordingRequest | m.StartRecordingRequest2
    ) -> None: ...

    def extend_recording(
        self, session: ControlClient, request: m.ExtendRecordingRequest | m.ExtendRecordingRequest2
    ) -> None: ...

    def stop_recording(self, session: ControlClient, request: m.StopRecordingRequest) -> None: ...

    def stop_recording_subscription(
        self, session: ControlClient, request: m.StopRecordingSubscriptionRequest
    ) -> None: ...

    def stop_recording_by_identity(self, session: ControlClient, request: m.StopRecordingByIdentityRequest) -> None: ...

    def start_replay(self, session: ControlClient, request: m.ReplayRequest | m.BoundedReplayRequest) -> None: ...

    def stop_replay(self, session: ControlClient, request: m.StopReplayRequest) -> None: ...

    def stop_all_replays(self, session: ControlClient, request: m.StopAllReplaysRequest) -> None: ...

    def list_recordings(self, session: ControlClient, request: m.ListRecordingsRequest) -> None: ...

    def list_recordings_for_uri(self, session: ControlClient, request: m.ListRecordingsForUriRequest) -> None: ...

    def list_recording(self, session: ControlClient, request: m.ListRecordingRequest) -> None: ...

    def list_recording_subscriptions(
        self, session: ControlClient, request: m.ListRecordingSubscriptionsRequest
    ) -> None: ...

    def get_recording_position(self, session: ControlClient, request: m.RecordingPositionRequest) -> None: ...

    def get_stop_position(self, session: ControlClient, request: m.StopPositionRequest) -> None: ...

    def get_start_position(self, session: ControlClient, request: m.StartPositionRequest) -> None: ...

    def get_max_recorded_position(self, session: ControlClient, request: m.MaxRecordedPositionRequest) -> None: ...

    def find_last_matching_recording(
        self, session: ControlClient, request: m.FindLastMatchingRecordingRequest
    ) -> None: ...

    def truncate_recording(self, session: ControlClient, request: m.TruncateRecordingRequest) -> None: ...

    def purge_recording(self, session: ControlClient, request: m.PurgeRecordingRequest) -> None: ...

    def detach_segments(self, session: ControlClient, request: m.DetachSegmentsRequest) -> None: ...

    def delete_detached_segments(self, session: ControlClient, request: m.DeleteDetachedSegmentsRequest) -> None: ...

    def purge_segments(self, session: ControlClient, request: m.PurgeSegmentsRequest) -> None: ...

    def attach_segments(self, session: ControlClient, request: m.AttachSegmentsRequest) -> None: ...

    def migrate_segments(self, session: ControlClient, request: m.MigrateSegmentsRequest) -> None: ...

    def replicate(
        self, session: ControlClient, request: m.ReplicateRequest | m.TaggedReplicateRequest | m.ReplicateRequest2
    ) -> None: ...

    def stop_replication(self, session: ControlClient, request: m.StopReplicationRequest) -> None: ...

    def replay_token(self, session: ControlClient, request: m.ReplayTokenRequest) -> None:
        """A replay token for the request's recording, owned by `session` (OK, relevantId = the token)."""

    def position_at_time(self, session: ControlClient, request: m.PositionAtTimeRequest) -> None:
        """Ours (1001): OK(the first position recorded at or after the time, or -1)."""

    def time_index(self, session: ControlClient, request: m.TimeIndexRequest) -> None:
        """Ours (1002): TimeIndexSamples messages, then OK(their sample count)."""

    def time_indexes(self, session: ControlClient, request: m.TimeIndexesRequest) -> None:
        """Ours (1004): each range's TimeIndexSamples then an empty one closing it, then OK(the range count)."""
