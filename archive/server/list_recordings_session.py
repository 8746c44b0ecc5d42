"""Listing sessions: stream descriptors to one control session a few at a time (Aeron's `List*Session`).

A listing scans at most `MAX_SCANS_PER_WORK_CYCLE` catalog entries per duty cycle and pauses while the client's
responses are queued, so a huge catalog or a slow client never stalls the conductor. It answers through a
`ControlResponder` (the requesting control session), so it needs neither the control session nor the conductor.

Entries are matched and sent as the catalog holds them, never decoded: a stream that lists a channel's recordings
on every trigger makes the archive list thousands of descriptors a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.constants import ControlResponseCode
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.server.conductor_port import ControlResponder
from aeron_archive_spark.archive.server.listing_session import ListingSession

if TYPE_CHECKING:
    from aeron_archive_spark.archive.storage.catalog import Catalog

log = logging.getLogger(__name__)

MAX_SCANS_PER_WORK_CYCLE = 64


class ListRecordingsSession(ListingSession):
    """ListRecordings / ListRecordingsForUri: up to `count` matching descriptors from `from_id` upwards."""

    def __init__(
        self,
        control_session: ControlResponder,
        catalog: Catalog,
        correlation_id: int,
        from_id: int,
        count: int,
        matches: Callable[[int], bool] | None = None,
    ) -> None:
        super().__init__(control_session, correlation_id)
        self._catalog = catalog
        self._remaining = count
        self._matches = matches
        self._cursor = max(from_id, 0)
        self._ids: Iterator[int] = iter(catalog.recording_ids(self._cursor))
        self._pending_id: int | None = None
        self._pending_bytes = b""  # the pending id's descriptor, kept while the client's responses are queued
        self._done = count <= 0
        if self._done:
            control_session.send_response_code(correlation_id, self._cursor, ControlResponseCode.RECORDING_UNKNOWN)

    def do_work(self, now_ns: int) -> int:
        if self._done:
            return 0
        work = 0
        while work < MAX_SCANS_PER_WORK_CYCLE:
            recording_id = self._pending_id if self._pending_id is not None else next(self._ids, None)
            if recording_id is None:
                next_id = max(self._cursor, self._catalog.next_recording_id)  # the next id Aeron would probe
                self._control_session.send_response_code(
                    self._correlation_id, next_id, ControlResponseCode.RECORDING_UNKNOWN
                )
                self._done = True
                return work + 1
            work += 1
            if self._pending_id is None:
                if self._matches is not None and not self._matches(recording_id):
                    self._cursor = recording_id + 1
                    continue
                try:
                    self._pending_bytes = self._catalog.descriptor_wire_bytes(recording_id)
                except ArchiveError:  # invalidated since the listing took its snapshot of ids
                    self._cursor = recording_id + 1
                    continue
                self._pending_id = recording_id
            if not self._control_session.send_descriptor(self._correlation_id, self._pending_bytes):
                return work  # back-pressured: retry this id next cycle
            self._pending_id = None
            self._pending_bytes = b""
            self._cursor = recording_id + 1
            self._remaining -= 1
            if self._remaining == 0:
                self._done = True
                return work
        return work


def uri_filter(catalog: Catalog, channel_fragment: str, stream_id: int) -> Callable[[int], bool]:
    """Aeron matches the *original* channel as a byte substring (the fragment's US-ASCII bytes, '?' for what has
    none), and the stream id exactly; by recording id, on the catalog's bytes."""
    fragment = channel_fragment.encode("ascii", errors="replace")

    def matches(recording_id: int) -> bool:
        return catalog.matches_uri(recording_id, stream_id, fragment)

    return matches
