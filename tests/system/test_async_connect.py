"""`AsyncConnect` against a real archive: a connect advanced one non-blocking poll at a time (as the archive's
conductor drives one when it replicates), its steps in Java's order, its failures closing what it added."""

from __future__ import annotations

import time

import pytest
from system.harness import Harness

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.async_connect import AsyncConnect, ConnectStep
from aeron_archive_spark.archive.exceptions import ArchiveTimeoutError
from aeron_archive_spark.archive.native import AeronClient


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


@pytest.fixture
def client(aeron_dir):
    c = AeronClient(aeron_dir, client_name="test-async-connect")
    yield c
    c.close()


def connect_of(h: Harness, client: AeronClient, **kw) -> AsyncConnect:
    kw.setdefault("message_timeout_ns", 5_000_000_000)
    return AsyncConnect(client, h.ctx.local_control_channel, h.ctx.local_control_stream_id, "aeron:ipc", 20,
                        client_name="async-test", **kw)


def test_polls_never_block_and_pass_java_s_steps_in_order(harness, client):
    connect = connect_of(harness, client)
    steps = [connect.step]
    slowest = 0.0
    deadline = time.monotonic() + 5
    connected = None
    while connected is None:
        assert time.monotonic() < deadline, f"not connected; at {connect.step.name}"
        started = time.perf_counter()
        connected = connect.poll()
        slowest = max(slowest, time.perf_counter() - started)
        if connect.step != steps[-1]:
            steps.append(connect.step)
        time.sleep(0.0002)
    assert steps == sorted(steps) and steps[-1] is ConnectStep.DONE
    assert ConnectStep.AWAIT_CONNECT_RESPONSE in steps or ConnectStep.AWAIT_ARCHIVE_ID_RESPONSE in steps
    assert slowest < 0.05  # adds are synchronous (about a millisecond); nothing waits for the archive
    archive = AeronArchive.of(connected)
    try:
        assert archive.archive_id() == harness.client.archive_id()
        assert archive.control_session_id == connected.control_session_id > 0
        assert archive.list_recordings() == []  # a working session
    finally:
        archive.close()
    connect.close()  # nothing to do once done: the session is the client's
    assert not client.is_closed


def test_no_archive_times_out_on_the_injected_clock_and_closes_what_it_added(aeron_dir, client):
    now = [0]
    connect = AsyncConnect(client, "aeron:ipc", 9876, "aeron:ipc", 20, message_timeout_ns=1_000,
                           client_name="async-test", nano_clock=lambda: now[0])
    assert connect.poll() is None and connect.step is ConnectStep.AWAIT_PUBLICATION_CONNECTED
    now[0] = 2_000
    with pytest.raises(ArchiveTimeoutError, match="no archive on control channel aeron:ipc stream 9876"):
        connect.poll()
    assert connect._publication is None and connect._subscription is None
