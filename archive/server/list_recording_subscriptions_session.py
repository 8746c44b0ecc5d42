"""ListRecordingSubscriptions: the active recording subscriptions matching a filter (Aeron's
`ListRecordingSubscriptionsSession`).

The conductor takes a snapshot of its recording subscriptions when the request arrives, so the answer describes
the archive at that moment even if a subscription stops while the listing is still being sent. Matching, paging
and the final SUBSCRIPTION_UNKNOWN keep this archive's wire behaviour: a negative `pseudo_index` counts from 0,
the descriptors from the (clamped) index on are sent up to `count`, and SUBSCRIPTION_UNKNOWN, whose relevant id
is the index one past the last descriptor sent, follows only when fewer than `count` were sent. Requests that
Java answers with SUBSCRIPTION_UNKNOWN before any listing starts (a `pseudo_index` outside the subscriptions, a
`count` <= 0) are answered so by the conductor and never reach this session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aeron_archive_spark.archive.constants import ControlResponseCode
from aeron_archive_spark.archive.server.conductor_port import ControlResponder
from aeron_archive_spark.archive.server.listing_session import ListingSession


@dataclass(frozen=True)
class SubscriptionDescriptor:
    """One recording subscription as the listing reports it."""

    subscription_id: int
    stream_id: int
    stripped_channel: str


class ListRecordingSubscriptionsSession(ListingSession):
    def __init__(
        self,
        control_session: ControlResponder,
        correlation_id: int,
        pseudo_index: int,
        count: int,
        apply_stream_id: bool,
        stream_id: int,
        channel: str,
        subscriptions: Iterable[SubscriptionDescriptor],
    ) -> None:
        super().__init__(control_session, correlation_id)
        self._count = count
        self._first_index = max(pseudo_index, 0)
        matching = [
            s
            for s in subscriptions
            if (not apply_stream_id or s.stream_id == stream_id) and channel in s.stripped_channel
        ]
        self._to_send = matching[self._first_index :]
        self._sent = 0

    @property
    def sent(self) -> int:
        """Descriptors sent so far."""
        return self._sent

    def do_work(self, now_ns: int) -> int:
        if self._done:
            return 0
        work = 0
        while self._sent < self._count and self._sent < len(self._to_send):
            d = self._to_send[self._sent]
            if not self._control_session.send_subscription_descriptor(
                self._correlation_id, d.subscription_id, d.stream_id, d.stripped_channel
            ):
                return work  # back-pressured: offer the same descriptor next cycle
            self._sent += 1
            work += 1
        if self._sent < self._count:
            self._control_session.send_response_code(
                self._correlation_id, self._first_index + self._sent, ControlResponseCode.SUBSCRIPTION_UNKNOWN
            )
            work += 1
        self._done = True
        return work
