"""`ControlResponses` state by state, against a fake control session: requests sent without waiting, each response
filed by the correlation id of the request it answers, a replay's later failure raised only while it is read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aeron_archive_spark.archive.client.replay import ControlResponses
from aeron_archive_spark.archive.codecs import templates as t
from aeron_archive_spark.archive.constants import ControlResponseCode
from aeron_archive_spark.archive.exceptions import ArchiveError, ArchiveTimeoutError, ErrorCode

SESSION = 77


class FakeArchive:
    """A control session: `send` gives correlation ids from 100 on; the test queues what each poll returns."""

    def __init__(self) -> None:
        self.control_session_id = SESSION
        self.sent: list[Any] = []
        self.arriving: list[list[Any]] = []
        self.polls = 0

    def send(self, build: Any, via: Any = None) -> int:
        assert via is None, "these tests send on the session's own publication"
        correlation_id = 100 + len(self.sent)
        self.sent.append(build({"control_session_id": SESSION, "correlation_id": correlation_id}))
        return correlation_id

    def poll_responses(self) -> list[Any]:
        self.polls += 1
        return self.arriving.pop(0) if self.arriving else []


def ok(correlation_id: int, relevant_id: int = 0, session: int = SESSION) -> Any:
    return SimpleNamespace(template_id=t.CONTROL_RESPONSE, control_session_id=session, correlation_id=correlation_id,
                           code=ControlResponseCode.OK, relevant_id=relevant_id, error_message="")


def error(correlation_id: int, message: str, code: int = ErrorCode.GENERIC) -> Any:
    return SimpleNamespace(template_id=t.CONTROL_RESPONSE, control_session_id=SESSION, correlation_id=correlation_id,
                           code=ControlResponseCode.ERROR, relevant_id=code, error_message=message)


@pytest.fixture
def archive() -> FakeArchive:
    return FakeArchive()


@pytest.fixture
def responses(archive: FakeArchive) -> ControlResponses:
    return ControlResponses(archive)  # type: ignore[arg-type]


def test_a_replay_request_is_sent_whole_and_answered_by_its_correlation_id(archive, responses):
    first = responses.send_replay(5, 64, 1024, "aeron:ipc", 9)
    second = responses.send_replay(6, 0, 32, "aeron:ipc", 9)
    request = archive.sent[0]
    assert (request.name, request.recording_id, request.position, request.length, request.replay_stream_id,
            request.replay_channel, request.replay_token) == ("ReplayRequest", 5, 64, 1024, 9, "aeron:ipc", -1)
    assert responses.answer(first) is None  # nothing came: one poll
    # Answers arrive out of order, with a signal and another session's response among them.
    archive.arriving.append([
        ok(second, 2002),
        SimpleNamespace(template_id=t.RECORDING_SIGNAL_EVENT),
        ok(first, 9999, session=SESSION + 1),
        ok(first, 1001),
    ])
    assert responses.answer(first) == 1001
    assert responses.answer(second) == 2002  # filed by the poll made for `first`
    assert archive.polls == 2


def test_an_error_answer_raises_once_and_ends_the_request(archive, responses):
    bad = responses.send_replay(10_000, 0, 64, "aeron:ipc", 9)
    archive.arriving.append([error(bad, "unknown recording id: 10000", ErrorCode.UNKNOWN_RECORDING)])
    with pytest.raises(ArchiveError, match="unknown recording") as info:
        responses.answer(bad)
    assert info.value.error_code == ErrorCode.UNKNOWN_RECORDING and info.value.correlation_id == bad
    with pytest.raises(KeyError):
        responses.answer(bad)
    assert responses.awaited == 0


def test_a_failure_after_the_ok_is_kept_while_nobody_reads_the_replay_and_raised_once_it_is_read(archive, responses):
    ahead = responses.send_replay(1, 0, 64, "aeron:ipc", 9)
    read = responses.send_replay(2, 0, 64, "aeron:ipc", 9)
    archive.arriving.append([ok(ahead, 11), ok(read, 12)])
    assert responses.answer(ahead) == 11 and responses.answer(read) == 12
    assert responses.watch(read) is None
    # The replay asked for ahead fails before its turn: kept, not raised.
    archive.arriving.append([error(ahead, "no subscriber connected")])
    responses.poll()
    assert responses.watch(ahead) == "no subscriber connected"
    # The replay being read fails: raised from the poll, after what came with it is filed.
    other = responses.send_replay(3, 0, 64, "aeron:ipc", 9)
    archive.arriving.append([error(read, "recording truncated"), ok(other, 13)])
    with pytest.raises(ArchiveError, match="recording truncated"):
        responses.poll()
    assert responses.answer(other) == 13


def test_responses_to_released_requests_are_dropped(archive, responses):
    replay = responses.send_replay(1, 0, 64, "aeron:ipc", 9)
    archive.arriving.append([ok(replay, 11)])
    assert responses.answer(replay) == 11
    responses.watch(replay)
    responses.release(replay)
    archive.arriving.append([error(replay, "late"), ok(12345, 1)])
    responses.poll()  # neither raises: one was released, the other never this reader's
    assert responses.awaited == 0


def test_waiting_for_an_answer_gives_up_after_the_timeout_and_abandons_the_request(archive, responses):
    replay = responses.send_replay(1, 0, 64, "aeron:ipc", 9)
    assert responses.await_answer(replay, 0.01) is None
    assert responses.awaited == 0
    archive.arriving.append([ok(replay, 11)])
    responses.poll()  # the late answer is dropped
    with pytest.raises(KeyError):
        responses.answer(replay)


def test_replay_waits_for_its_answer_and_watches_it(archive, responses):
    archive.arriving.extend([[], [ok(100, 4242)]])
    assert responses.replay(1, 0, 64, "aeron:ipc", 9, timeout_s=5) == (4242, 100)
    archive.arriving.append([error(100, "replay failed")])
    with pytest.raises(ArchiveError, match="replay failed"):
        responses.poll()
    with pytest.raises(ArchiveTimeoutError, match="no response to ReplayRequest"):
        responses.replay(1, 0, 64, "aeron:ipc", 9, timeout_s=0.01)


def test_stop_replay_waits_for_its_own_answer_and_keeps_the_others(archive, responses):
    ahead = responses.send_replay(1, 0, 64, "aeron:ipc", 9)
    stop = ahead + 1  # the next correlation id the fake gives
    archive.arriving.append([ok(ahead, 11), ok(stop)])
    responses.stop_replay(4242, timeout_s=5)
    assert archive.sent[-1].name == "StopReplayRequest" and archive.sent[-1].replay_session_id == 4242
    assert responses.answer(ahead) == 11
    archive.arriving.append([error(stop + 1, "unknown replay session")])
    with pytest.raises(ArchiveError, match="unknown replay session"):
        responses.stop_replay(4243, timeout_s=5)
    with pytest.raises(ArchiveTimeoutError, match="StopReplayRequest for replay 4244"):
        responses.stop_replay(4244, timeout_s=0.01)
    assert responses.awaited == 1  # only the replay asked for ahead


def test_any_request_can_be_sent_and_answered_this_way(archive, responses):
    from aeron_archive_spark.archive.codecs import messages as m

    stop_all = responses.send(lambda ids: m.StopAllReplaysRequest.of(**ids, recording_id=-1))
    archive.arriving.append([ok(stop_all)])
    assert responses.await_answer(stop_all, 5) == 0
    assert archive.sent[0].name == "StopAllReplaysRequest"
