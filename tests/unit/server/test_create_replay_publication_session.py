"""CreateReplayPublicationSession: AWAIT_PUBLICATION -> DONE, state by state, over a fake add in flight."""

from __future__ import annotations

from typing import Any

import pytest

from aeron_archive_spark.archive.native import NativeAeronError
from aeron_archive_spark.archive.server.create_replay_publication_session import (
    CreateReplayPublicationSession,
    CreateReplayPublicationState,
)

State = CreateReplayPublicationState


class FakePublication:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakePendingAdd:
    """`PendingExclusivePublication`'s contract: None until answered, then the publication, or one raise."""

    def __init__(self) -> None:
        self.publication: FakePublication | None = None
        self.error: str | None = None
        self.abandoned = False
        self._done = False

    @property
    def is_done(self) -> bool:
        return self._done

    def abandon(self) -> None:
        self.abandoned = True

    def poll(self) -> Any:
        if self._done:
            return None
        if self.error is not None:
            self._done = True
            raise NativeAeronError(self.error)
        if self.publication is None:
            return None
        self._done = True
        if self.abandoned:
            self.publication.close()
            return None
        return self.publication


class Rig:
    def __init__(self) -> None:
        self.pending = FakePendingAdd()
        self.started: list[Any] = []
        self.errors: list[str] = []
        self.session = CreateReplayPublicationSession(
            7, 1234, 42, self.pending, self.started.append, self.errors.append  # type: ignore[arg-type]
        )

    def work(self) -> int:
        return self.session.do_work(0)


def test_waits_for_the_driver_then_hands_the_publication_over_once() -> None:
    rig = Rig()
    assert rig.session.state is State.AWAIT_PUBLICATION
    assert rig.work() == 0 and rig.work() == 0
    assert not rig.started and not rig.errors
    rig.pending.publication = FakePublication()
    assert rig.work() == 1
    assert rig.started == [rig.pending.publication]
    assert rig.session.is_done() and rig.session.is_settled
    assert rig.work() == 0
    assert len(rig.started) == 1 and not rig.errors
    assert not rig.pending.publication.closed


def test_a_refused_add_answers_the_request_with_the_drivers_reason() -> None:
    rig = Rig()
    rig.pending.error = "invalid channel"
    assert rig.work() == 1
    assert rig.session.is_done() and rig.session.is_settled
    assert not rig.started
    assert len(rig.errors) == 1
    assert "recordingId=42" in rig.errors[0] and "invalid channel" in rig.errors[0]


def test_abort_answers_at_once_and_closes_the_publication_when_it_comes() -> None:
    rig = Rig()
    rig.session.abort("recording truncated")
    assert rig.session.is_done() and not rig.session.is_settled  # still to be polled until the driver answers
    assert len(rig.errors) == 1 and "recording truncated" in rig.errors[0]
    assert rig.work() == 0
    publication = rig.pending.publication = FakePublication()
    rig.work()
    assert publication.closed
    assert rig.session.is_settled
    assert not rig.started and len(rig.errors) == 1
    rig.session.abort("again")  # a second abort says nothing more
    assert len(rig.errors) == 1


def test_abort_then_a_refused_add_answers_only_once() -> None:
    rig = Rig()
    rig.session.abort("stop all replays")
    rig.pending.error = "driver gone"
    rig.work()
    assert rig.session.is_settled
    assert len(rig.errors) == 1 and "stop all replays" in rig.errors[0]


@pytest.mark.parametrize("arrived", [False, True])
def test_close_abandons_the_add(arrived: bool) -> None:
    rig = Rig()
    if arrived:
        rig.pending.publication = FakePublication()
    rig.session.close()
    assert rig.pending.abandoned
    assert rig.session.is_done()
    assert not rig.started and not rig.errors
