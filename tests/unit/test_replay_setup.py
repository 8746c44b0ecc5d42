"""Replay set-up latency: what keeps the steps of a replay's set-up from waiting out idle sleeps.

- the Aeron C client conductor idles with Aeron's back-off strategy (unless the user set its sleep);
- an agent with something in flight (`is_awaiting`) idles in short sleeps, like a back-pressured one;
- the archive conductor is awaiting while a replay's OK has yet to be handed back to it;
- a replay waiting for its subscriber to connect marks itself back pressured (short sleeps on the replayer);
- a short replay reads through a buffer sized to its length plus one frame, and still sends its last frame whole.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from aeron_archive_spark.archive.native import AeronClient
from aeron_archive_spark.archive.native.client import IDLE_SLEEP_ENV
from aeron_archive_spark.archive.native.ffi import ffi, get_lib
from aeron_archive_spark.archive.server.agent import Agent
from aeron_archive_spark.archive.server.conductor import ArchiveConductor
from aeron_archive_spark.archive.server.replay_session import ReplaySessionState, replay_buffer_length
from tests.unit.server.test_replay_session import CORRELATION_ID, REPLAY_SESSION_ID, Recording, Rig, messages
from tests.unit.storage_helpers import MTU_LENGTH


# -- the C client's idle strategy ------------------------------------------------------------------------------
def _idle_strategy(client: AeronClient) -> str:
    name = get_lib().aeron_context_get_idle_strategy(client._n.context)
    return str(ffi.string(name).decode())


def test_the_c_client_conductor_idles_with_the_back_off_strategy(aeron_dir: str) -> None:
    client = AeronClient(aeron_dir, client_name="test-replay-setup")
    try:
        assert _idle_strategy(client) == "backoff"
        # ... and adds still complete (the strategy was accepted with its init args)
        subscription = client.add_subscription("aeron:ipc", 9191)
        subscription.close()
    finally:
        client.close()


def test_a_user_set_idle_sleep_keeps_the_c_clients_sleeping_strategy(
    aeron_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(IDLE_SLEEP_ENV, "2ms")
    client = AeronClient(aeron_dir, client_name="test-replay-setup-env")
    try:
        assert _idle_strategy(client) == "sleep-ns"
    finally:
        client.close()


# -- agents with something in flight ---------------------------------------------------------------------------
class _RecordingIdle:
    def __init__(self) -> None:
        self.calls: list[tuple[int, bool]] = []

    def idle(self, work_count: int, back_pressured: bool = False) -> None:
        self.calls.append((work_count, back_pressured))
        time.sleep(0.0005)


class _IdleAgent(Agent):
    def __init__(self, awaiting: bool) -> None:
        self.idle_strategy = _RecordingIdle()
        super().__init__("test-agent", lambda ex: None, idle=self.idle_strategy)  # type: ignore[arg-type]
        self.awaiting = awaiting
        self.cycles = threading.Event()

    def do_work(self, now_ns: int) -> int:
        if len(self.idle_strategy.calls) >= 3:
            self.cycles.set()
        return 0

    def is_awaiting(self) -> bool:
        return self.awaiting


@pytest.mark.parametrize("awaiting", [True, False])
def test_an_agent_awaiting_an_answer_idles_as_if_back_pressured(awaiting: bool) -> None:
    agent = _IdleAgent(awaiting)
    agent.start()
    try:
        assert agent.cycles.wait(5)
    finally:
        agent.close()
    assert agent.idle_strategy.calls[0] == (0, awaiting)


def test_the_conductor_awaits_a_replays_ok_and_any_handed_back_task() -> None:
    import queue

    conductor = SimpleNamespace(_tasks=queue.SimpleQueue(), _replays={}, _pending_replays={})
    awaiting = ArchiveConductor.is_awaiting
    assert not awaiting(conductor)  # type: ignore[arg-type]
    conductor._replays[1] = SimpleNamespace(ok_sent=False)
    assert awaiting(conductor)  # type: ignore[arg-type]
    conductor._replays[1].ok_sent = True
    assert not awaiting(conductor)  # type: ignore[arg-type]
    conductor._tasks.put(lambda: None)  # the OK, enqueued just before `ok_sent` was read
    assert awaiting(conductor)  # type: ignore[arg-type]
    conductor._tasks.get()
    conductor._pending_replays[1] = object()  # a replay's publication being added by the media driver
    assert awaiting(conductor)  # type: ignore[arg-type]


# -- the replay session ----------------------------------------------------------------------------------------
def test_a_replay_waiting_for_its_subscriber_idles_the_replayer_briefly(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    assert not rig.session.ok_sent
    assert rig.work() == 0
    assert rig.oks == [(CORRELATION_ID, REPLAY_SESSION_ID)]
    assert rig.session.ok_sent
    assert rig.session.back_pressured  # not connected yet: the subscriber is expected any moment
    rig.publication.is_connected = True
    assert rig.work() == 1
    assert rig.state is ReplaySessionState.REPLAY
    assert not rig.session.back_pressured


def test_replay_buffer_length_is_the_replay_plus_one_frame_capped_by_file_io_max_length() -> None:
    one_mib = 1 << 20
    assert replay_buffer_length(one_mib, 640, MTU_LENGTH) == 640 + MTU_LENGTH + 32
    assert replay_buffer_length(one_mib, (1 << 63) - 1, MTU_LENGTH) == one_mib
    assert replay_buffer_length(4096, 10_000, MTU_LENGTH) == 4096
    assert replay_buffer_length(one_mib, 0, MTU_LENGTH) >= MTU_LENGTH


@pytest.mark.parametrize("cut", [0, 32, 100])
def test_a_short_replay_through_its_sized_buffer_sends_every_frame_starting_before_the_limit(
    tmp_path: Path, cut: int
) -> None:
    recording = Recording(tmp_path, messages(12, MTU_LENGTH - 32))  # frames of a whole MTU
    positions = recording.frame_positions()
    start = positions[2]
    limit = positions[7] + cut  # `cut` > 0: the limit falls inside a frame, which is sent whole
    length = limit - start
    rig = Rig(
        tmp_path,
        replay_position=start,
        replay_length=length,
        stop_position=recording.stop_position,
        buffer_length=replay_buffer_length(1 << 20, length, MTU_LENGTH),
    )
    rig.start()
    rig.run()
    assert rig.session.error is None
    assert rig.publication.data_bytes() == recording.expected(start, limit)
