"""The read-ahead tells a refusal of a replay it asked for ahead from the failure of another request.

Polling the control session for the answer to a replay asked for ahead also files (and raises) the failure of the
replay being read (`ControlResponses.poll` watches it). That failure is the read's: taking it for a refusal of the
replay asked for ahead would drop it, and the read would fail later with a vaguer error, or not at all.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aeron_archive_spark.archive.client.replay.read_ahead import ReplayReadAhead, _Requested
from aeron_archive_spark.archive.exceptions import ArchiveError, ErrorCode

THIS, OTHER = 5, 77


class Responses:
    def __init__(self, failing: int) -> None:
        self.failing = failing

    def answer(self, correlation_id: int) -> int | None:
        raise ArchiveError("replay failed", ErrorCode.GENERIC, self.failing)


class Setup:
    """A response-channel replay's set-up whose poll raises the error answered to `failing`."""

    correlation_id: int | None = None

    def __init__(self, failing: int) -> None:
        self.failing = failing
        self.closed = False

    def poll(self) -> int | None:
        raise ArchiveError("replay failed", ErrorCode.GENERIC, self.failing)

    def owns(self, correlation_id: int) -> bool:
        return correlation_id == THIS

    def close(self) -> None:
        self.closed = True


def ahead_with(responses: Any) -> ReplayReadAhead:
    ahead = ReplayReadAhead([], pool=None)  # type: ignore[arg-type]
    ahead.responses = responses
    return ahead


def requested(response: Any = None) -> _Requested:
    span = SimpleNamespace(recording_id=3)
    return _Requested(span, 100, THIS, response=response)  # type: ignore[arg-type]


@pytest.mark.parametrize("over_response_channel", [False, True])
def test_its_own_refusal_marks_the_replay_refused(over_response_channel: bool) -> None:
    setup = Setup(THIS) if over_response_channel else None
    request = requested(setup)
    assert ahead_with(Responses(THIS))._collect_answer(request) == -1
    assert request.replay_session_id == -1
    assert setup is None or setup.closed


@pytest.mark.parametrize("over_response_channel", [False, True])
def test_the_failure_of_another_request_is_raised_not_taken_for_a_refusal(over_response_channel: bool) -> None:
    setup = Setup(OTHER) if over_response_channel else None
    request = requested(setup)
    with pytest.raises(ArchiveError) as caught:
        ahead_with(Responses(OTHER))._collect_answer(request)
    assert caught.value.correlation_id == OTHER
    assert request.replay_session_id is None
    assert setup is None or not setup.closed
