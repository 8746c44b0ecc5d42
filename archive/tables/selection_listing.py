"""`SelectionListing`: the selected recordings' descriptors as a stream's triggers need them, without listing every
recording on every trigger.

Spark asks a stream for its latest offset on every trigger, every ~10 ms while a live tail is idle. Listing the
selection in full each time costs the archive and Spark's driver ~25 us per recording each (a thousand recordings:
~25 ms, on both sides, for every trigger, forever). Most of those recordings are *settled*: stopped, and read up to
their stop. What a settled recording can still do (be extended, truncated or purged) is seen at the next full
listing; everything else is looked at on every trigger:

- a full listing when the last one is older than `FULL_LISTING_FACTOR` times its own duration (at most
  `FULL_LISTING_MAX_INTERVAL_S`), so listing takes ~1/`FULL_LISTING_FACTOR` of the time whatever the number of
  recordings: with a few recordings that is every trigger or so, with a thousand every ~0.3 s;
- in between, the recordings that are not settled (active, or with data left to read) are listed one by one, and
  new recordings (ids above every id seen: ids only grow) with one listing from there; with more than
  `MAX_REFRESHED` unsettled recordings a full listing is cheaper and is made instead.

So a settled recording's extension, truncation or purge shows up to one full-listing interval (<= 1 s) late (nothing is
read from it meanwhile, so nothing is read wrongly); an active recording, a recording being read and a new one are
seen at once, exactly as with a full listing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.recording_source import RecordingSource

FULL_LISTING_FACTOR = 10
FULL_LISTING_MAX_INTERVAL_S = 1.0  # the first listing includes connecting; a slow one may have waited on a retry
MAX_REFRESHED = 16


def is_settled(descriptor: RecordingDescriptor, position: int | None) -> bool:
    """Stopped, and read (the stream's next batch starting) at or past its stop."""
    return not descriptor.is_active and position is not None and position >= descriptor.stop_position


class SelectionListing:
    """Descriptors of a source's selected recordings, listed in full only now and then (see the module)."""

    def __init__(self, source: RecordingSource, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self._clock = clock
        self._known: dict[int, RecordingDescriptor] | None = None
        self._highest_seen = -1
        self._full_due = 0.0
        self.full_listings = 0  # counted, for tests and debugging
        self.partial_listings = 0

    def full(self) -> dict[int, RecordingDescriptor]:
        """List every selected recording now."""
        began = self._clock()
        listed = self.source.list_selected()
        ended = self._clock()
        self._full_due = ended + min(FULL_LISTING_FACTOR * (ended - began), FULL_LISTING_MAX_INTERVAL_S)
        self.full_listings += 1
        return self._keep(listed)

    def current(self, positions: Mapping[int, int]) -> dict[int, RecordingDescriptor]:
        """The selected recordings now, `positions` being where each one's next batch starts (absent: unknown).

        Unsettled recordings, new ones and named ones not yet seen are fresh; settled ones may be one
        full-listing interval old. A recording missing from the last full listing stays missing until the next.
        """
        known = self._known
        if known is None or self._clock() > self._full_due:
            return self.full()
        named = self.source.options.selection.recording_ids
        stale = {rid for rid, d in known.items() if not is_settled(d, positions.get(rid))}
        if named is not None:  # a named recording that does not exist (yet) is looked for on every trigger
            stale.update(rid for rid in named if rid not in known)
        if len(stale) > MAX_REFRESHED:
            return self.full()
        fresh = {rid: d for rid, d in known.items() if rid not in stale}
        fresh.update(self.source.refresh(sorted(stale), None if named is not None else self._highest_seen + 1))
        self.partial_listings += 1
        return self._keep(fresh)

    def _keep(self, listed: dict[int, RecordingDescriptor]) -> dict[int, RecordingDescriptor]:
        self._known = listed
        if listed:
            self._highest_seen = max(self._highest_seen, max(listed))
        return listed
