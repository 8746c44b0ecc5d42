"""SelectionListing: a stream's triggers list the selection in full only now and then, never missing what matters.

A fake source (an in-memory catalog that counts its calls) and a fake clock; each test checks which descriptors a
trigger gets and what the source was asked for.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from aeron_archive_spark.archive.constants import NULL_POSITION
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.recording_source import RecordingSource
from aeron_archive_spark.archive.tables.selection_listing import (
    FULL_LISTING_FACTOR,
    FULL_LISTING_MAX_INTERVAL_S,
    MAX_REFRESHED,
    SelectionListing,
    is_settled,
)


def descriptor(rid: int, stop: int = 1024, start: int = 0) -> RecordingDescriptor:
    return RecordingDescriptor(0, 0, rid, 0, 0, start, stop, 0, 1 << 20, 1 << 16, 1408, 100 + rid, 1001,
                               "aeron:ipc", "aeron:ipc", "src")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeSource:
    """Recordings by id; a full listing takes `listing_seconds` on the clock."""

    def __init__(self, clock: Clock, named: list[int] | None = None, listing_seconds: float = 0.01) -> None:
        selection = {"recordingIds": ",".join(map(str, named))} if named else {"channel": "aeron:ipc",
                                                                              "streamId": "1001"}
        self.options = SourceOptions.parse({"archiveDir": "/x", **selection})
        self.clock = clock
        self.listing_seconds = listing_seconds
        self.recordings: dict[int, RecordingDescriptor] = {}
        self.calls: list[tuple[str, object]] = []

    def add(self, d: RecordingDescriptor) -> None:
        self.recordings[d.recording_id] = d

    def list_selected(self, from_id: int = 0) -> dict[int, RecordingDescriptor]:
        self.calls.append(("list", from_id))
        if from_id == 0:
            self.clock.now += self.listing_seconds
        named = self.options.selection.recording_ids
        return {rid: d for rid, d in self.recordings.items()
                if rid >= from_id and (named is None or rid in named)}

    def find_recordings(self, ids: Iterable[int]) -> dict[int, RecordingDescriptor]:
        wanted = list(ids)
        self.calls.append(("find", wanted))
        return {rid: self.recordings[rid] for rid in wanted if rid in self.recordings}

    refresh = RecordingSource.refresh


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_settled_means_stopped_and_read_to_its_stop() -> None:
    assert is_settled(descriptor(1, stop=1024), 1024)
    assert not is_settled(descriptor(1, stop=1024), 512)  # data left to read
    assert not is_settled(descriptor(1, stop=NULL_POSITION), 4096)  # active
    assert not is_settled(descriptor(1, stop=1024), None)  # not yet in the offsets


def test_between_full_listings_only_unsettled_and_new_recordings_are_asked_for(clock: Clock) -> None:
    source = FakeSource(clock)
    for rid in range(5):
        source.add(descriptor(rid))
    source.add(descriptor(5, stop=NULL_POSITION))  # live
    listing = SelectionListing(source, clock)  # type: ignore[arg-type]
    assert set(listing.current({})) == set(range(6))
    assert source.calls == [("list", 0)]

    positions = {0: 1024, 1: 1024, 2: 1024, 3: 512, 4: 1024, 5: 2048}  # 3 has data left, 5 is live
    source.calls.clear()
    source.add(descriptor(6))  # a new recording
    source.add(descriptor(0, stop=2048))  # a settled one extended and stopped again: not seen yet
    got = listing.current(positions)
    assert source.calls == [("find", [3, 5]), ("list", 6)]
    assert set(got) == set(range(7))
    assert got[0].stop_position == 1024  # settled: as last listed
    assert listing.full_listings == 1 and listing.partial_listings == 1

    # The next full listing is due FULL_LISTING_FACTOR x its duration after the last one ended: then it is seen.
    clock.now += FULL_LISTING_FACTOR * source.listing_seconds + 1e-6
    source.calls.clear()
    got = listing.current({**positions, 6: 0})
    assert source.calls == [("list", 0)]
    assert got[0].stop_position == 2048


def test_a_recording_that_stops_or_vanishes_while_unsettled_is_seen_at_once(clock: Clock) -> None:
    source = FakeSource(clock)
    source.add(descriptor(1, stop=NULL_POSITION))
    source.add(descriptor(2, stop=4096))
    listing = SelectionListing(source, clock)  # type: ignore[arg-type]
    listing.current({})
    source.add(descriptor(1, stop=3072))  # stopped
    del source.recordings[2]  # purged with data left to read
    got = listing.current({1: 1024, 2: 1024})
    assert got == {1: descriptor(1, stop=3072)}
    assert listing.partial_listings == 1


def test_a_purged_settled_recording_goes_at_the_next_full_listing(clock: Clock) -> None:
    source = FakeSource(clock)
    source.add(descriptor(1))
    listing = SelectionListing(source, clock)  # type: ignore[arg-type]
    listing.current({})
    del source.recordings[1]
    assert set(listing.current({1: 1024})) == {1}
    clock.now += 1
    assert listing.current({1: 1024}) == {}


def test_many_unsettled_recordings_are_listed_in_full(clock: Clock) -> None:
    source = FakeSource(clock)
    for rid in range(MAX_REFRESHED + 1):
        source.add(descriptor(rid))
    listing = SelectionListing(source, clock)  # type: ignore[arg-type]
    listing.current({})
    source.calls.clear()
    listing.current({rid: 0 for rid in range(MAX_REFRESHED + 1)})  # all with data left to read
    assert source.calls == [("list", 0)]
    source.calls.clear()
    listing.current({rid: 1024 for rid in range(MAX_REFRESHED + 1)})  # all read
    assert source.calls == [("find", []), ("list", MAX_REFRESHED + 1)]


@pytest.mark.parametrize("listing_seconds", [0.001, 0.05, 0.5, 30.0])
def test_the_full_listing_interval_follows_the_listings_own_duration_up_to_a_cap(
    clock: Clock, listing_seconds: float
) -> None:
    source = FakeSource(clock, listing_seconds=listing_seconds)  # 30 s: a listing that waited on a retry
    source.add(descriptor(1))
    listing = SelectionListing(source, clock)  # type: ignore[arg-type]
    listing.current({})
    interval = min(FULL_LISTING_FACTOR * listing_seconds, FULL_LISTING_MAX_INTERVAL_S)
    clock.now += interval - 1e-4
    listing.current({1: 1024})
    assert listing.full_listings == 1
    clock.now += 2e-4
    listing.current({1: 1024})
    assert listing.full_listings == 2


def test_named_recordings_that_do_not_exist_yet_are_looked_for_on_every_trigger(clock: Clock) -> None:
    source = FakeSource(clock, named=[1, 7])
    source.add(descriptor(1))
    listing = SelectionListing(source, clock)  # type: ignore[arg-type]
    assert set(listing.current({})) == {1}
    source.calls.clear()
    source.add(descriptor(7, stop=NULL_POSITION))
    assert set(listing.current({1: 1024})) == {1, 7}
    assert source.calls == [("find", [7])]  # no listing of new ids: the selection names its recordings
