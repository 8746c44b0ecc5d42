"""ConnectionPool against a real media driver and a real archive: clients, leases, capacity, timeouts, fork, exit.

Each test builds its own pool (the process-wide one is left to the readers and writers); idle timeouts run on an
injected clock, so nothing waits for minutes.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from conftest import free_udp_port
from system.harness import SMALL_TERM, Harness, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.host import localize_channel, requires_host_driver, route_address
from aeron_archive_spark.archive.client.pool import (
    CAPACITY_ENV,
    DEFAULT_CAPACITY,
    DEFAULT_IDLE_TIMEOUT_S,
    IDLE_TIMEOUT_ENV,
    ArchiveConnectError,
    ConnectionPool,
    NoMediaDriverError,
    SessionKey,
    connection_pool,
    settings_from_env,
)
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.tables.open_source import open_recording_source
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.ranges import RunningArchive
from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def harness(aeron_dir: str, tmp_path: Any) -> Iterator[Harness]:
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pool(clock: FakeClock) -> Iterator[ConnectionPool]:
    p = ConnectionPool(clock=clock)
    yield p
    p.close()


def ipc_options(h: Harness, **kw: Any) -> ConnectionOptions:
    kw.setdefault("message_timeout_ms", 5_000)
    kw.setdefault("control_stream_id", h.ctx.local_control_stream_id)
    return ConnectionOptions(aeron_dir=h.aeron_dir, control_channel=h.ctx.local_control_channel,
                             control_response_channel="aeron:ipc", **kw)


def udp_harness(aeron_dir: str, tmp_path: Any, stream_id: int) -> tuple[Harness, ConnectionOptions]:
    """An archive also listening on UDP, and options that reach it from a process without a driver of its own."""
    control = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    h = Harness(aeron_dir, str(tmp_path / "archive"), control_channel=control, control_stream_id=stream_id)
    options = ConnectionOptions(aeron_dir=str(tmp_path / "no-driver-here"), control_channel=control,
                                control_stream_id=stream_id, control_response_channel="aeron:udp?endpoint=localhost:0",
                                message_timeout_ms=5_000)
    return h, options


def server_sessions(h: Harness) -> set[int]:
    assert h.archive is not None
    return set(h.archive.conductor._control_sessions)


def works(archive: AeronArchive) -> bool:
    """A request round trip on the session succeeds."""
    archive.list_recordings()
    return True


def assert_closed(archive: AeronArchive) -> None:
    with pytest.raises(ArchiveError, match="client is closed"):
        archive.poll_for_recording_signals()


def record_stopped(h: Harness, stream_id: int, count: int = 200) -> Any:
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    h.client.start_recording(channel, stream_id)
    publication = h.client.aeron.add_exclusive_publication(channel, stream_id)
    start = h.await_signal(RecordingSignal.START)
    offer_all(publication, payloads_of([100, 3000, 7] * count))
    wait_for(lambda: h.client.get_recording_position(start.recording_id) == publication.position,
             what="recording caught up")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, start.recording_id)
    publication.close()
    return h.client.list_recording(start.recording_id)


# -- clients -----------------------------------------------------------------------------------------------------

def test_one_client_per_driver_shared_by_every_session(pool, harness, tmp_path, monkeypatch):
    client = pool.client(harness.aeron_dir)
    assert pool.client(harness.aeron_dir) is client
    monkeypatch.setenv("AERON_DIR", harness.aeron_dir)
    assert pool.client() is client  # None: $AERON_DIR
    options = ipc_options(harness)
    with pool.archive(options) as a, pool.archive(options, purpose="sink", host_driver_only=True) as b:
        assert a.aeron is client and b.aeron is client
    assert pool.stats().clients == 1
    # No driver in the directory: one embedded driver for the pool, one client on it, whatever the directory.
    first = pool.client(str(tmp_path / "nothing-here"))
    embedded = pool.embedded_driver_dir()
    assert embedded is not None and embedded != harness.aeron_dir and first.aeron_dir == embedded
    assert pool.client(str(tmp_path / "nor-here")) is first
    assert pool.client(embedded) is first
    assert pool.stats().clients == 2
    with pytest.raises(NoMediaDriverError, match=re.escape(f"no media driver at aeronDir={tmp_path / 'nothing-here'}")):
        pool.client(str(tmp_path / "nothing-here"), host_driver_only=True)
    pool.close()
    assert pool.stats().clients == 0 and pool.embedded_driver_dir() is None
    assert first.is_closed and client.is_closed
    assert not os.path.exists(embedded)  # the embedded driver's directory is deleted at close
    assert pool.client(harness.aeron_dir) is not client  # usable again after close


def test_the_process_wide_pool_has_kafka_like_defaults():
    pool = connection_pool()
    assert pool is connection_pool()
    assert (pool.capacity, pool.idle_timeout_s) == (DEFAULT_CAPACITY, DEFAULT_IDLE_TIMEOUT_S) == (64, 300.0)


def test_pool_settings_come_from_the_environment_and_bad_values_name_the_variable():
    assert settings_from_env({}) == (DEFAULT_CAPACITY, DEFAULT_IDLE_TIMEOUT_S)
    assert settings_from_env({CAPACITY_ENV: "8", IDLE_TIMEOUT_ENV: "2.5"}) == (8, 2.5)
    for env, bad in ((CAPACITY_ENV, "-1"), (CAPACITY_ENV, "lots"), (IDLE_TIMEOUT_ENV, "nan"), (IDLE_TIMEOUT_ENV, "5m")):
        with pytest.raises(ValueError, match=f"{env}={bad!r}"):
            settings_from_env({env: bad})
    # The process-wide pool of a fresh process (an executor's Python worker) takes them at import.
    probe = subprocess.run(
        [sys.executable, "-c", "from aeron_archive_spark.archive.client.pool import connection_pool as p; "
         "print(p().capacity, p().idle_timeout_s)"],
        env={**os.environ, CAPACITY_ENV: "3", IDLE_TIMEOUT_ENV: "7"}, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == ["3", "7.0"], probe.stderr


# -- leases ------------------------------------------------------------------------------------------------------

def test_concurrent_leases_get_different_sessions_and_a_returned_session_is_reused(pool, harness):
    options = ipc_options(harness)
    before = server_sessions(harness)
    with pool.archive(options) as a, pool.archive(options) as b:
        assert a is not b and a.control_session_id != b.control_session_id
        assert works(a) and works(b)
        assert pool.stats().leased == 2
    assert pool.stats().idle == 2 and pool.stats().leased == 0
    with pool.archive(options) as c:
        assert c is a  # the most recently returned (b's lease ended first)
        with pool.archive(options) as d:
            assert d is b
            with pool.archive(options) as e:
                assert e not in (a, b)
    assert len(server_sessions(harness) - before) == 3
    # The replay channel is not part of a session's key; the message timeout is.
    with pool.archive(dataclasses.replace(options, replay_channel="aeron:ipc", replay_stream_id=9)) as f:
        assert f in (a, b, e)
    with pool.archive(ipc_options(harness, message_timeout_ms=4_000)) as g:
        assert g not in (a, b, e)
    key = SessionKey.of(options, harness.aeron_dir)
    assert key == SessionKey.of(ipc_options(harness, replay_channel="aeron:ipc", replay_stream_id=9), harness.aeron_dir)
    assert key != SessionKey.of(ipc_options(harness, control_response_stream_id=99), harness.aeron_dir)


def test_threads_leasing_at_once_each_get_their_own_session(pool, harness):
    options = ipc_options(harness)
    threads = 4
    barrier = threading.Barrier(threads)
    held: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def lease() -> None:
        try:
            with pool.archive(options, purpose="replay") as archive:
                works(archive)
                with lock:
                    held.append(id(archive))
                barrier.wait(timeout=30)  # every thread holds its lease here at the same time
        except BaseException as ex:
            errors.append(ex)

    workers = [threading.Thread(target=lease) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not errors
    assert len(set(held)) == threads
    assert pool.stats().idle == threads and pool.stats().leased == 0


def test_idle_sessions_beyond_capacity_are_closed(harness, clock):
    pool = ConnectionPool(capacity=2, clock=clock)
    try:
        options = ipc_options(harness)
        with ExitStack() as stack:
            sessions = [stack.enter_context(pool.archive(options)) for _ in range(4)]
            assert pool.stats().leased == 4  # the capacity limits what is kept, not what is leased
            ids = [s.control_session_id for s in sessions]
        # Returned in reverse order (ExitStack): sessions[3] first ... sessions[0] last; the two oldest are closed.
        for closed in sessions[3], sessions[2]:
            assert_closed(closed)
        assert works(sessions[0]) and works(sessions[1])
        assert pool.stats().idle == 2
        wait_for(lambda: not {ids[2], ids[3]} & server_sessions(harness), what="archive closed the sessions")
        pool.capacity = 0
        assert pool.stats().idle == 0
        for closed in sessions[:2]:
            assert_closed(closed)
        with pool.archive(options) as again:
            assert again not in sessions
        assert pool.stats().idle == 0  # capacity 0: nothing is kept
        assert_closed(again)
        with pytest.raises(ValueError, match="capacity"):
            pool.capacity = -1
    finally:
        pool.close()


def test_a_background_evictor_closes_expired_sessions_while_nobody_uses_the_pool(harness):
    # 2 s: long enough that a loaded machine does not evict the session before it is seen idle (0.5 s failed so
    # twice in full runs on two busy cores).
    def evictor_names() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("aeron-archive-pool-evictor")}

    others = evictor_names()  # e.g. the process-wide pool's, when other tests used it first
    background = ConnectionPool(idle_timeout_s=2.0, evict_in_background=True)
    try:
        with background.archive(ipc_options(harness)) as a:
            pass
        assert background.stats().idle == 1
        wait_for(lambda: background.stats().idle == 0, timeout=10, what="the evictor to close the idle session")
        assert_closed(a)
        evictors = evictor_names() - others
        assert len(evictors) == 1, f"not one evictor thread of its own: {evictors}"
    finally:
        background.close()
    wait_for(lambda: not evictor_names() & evictors, timeout=10, what="the evictor to end with its pool")
    # Pools without it (tests with fake clocks) never start one.
    assert not ConnectionPool()._evict_in_background and connection_pool()._evict_in_background


def test_idle_sessions_expire_after_the_idle_timeout(pool, harness, clock):
    assert pool.idle_timeout_s == 300.0
    options = ipc_options(harness)
    with pool.archive(options) as a:
        pass
    clock.advance(299)
    assert pool.evict_idle() == 0
    with pool.archive(options) as b:
        assert b is a
    clock.advance(299)  # idle time counts from the last return
    with pool.archive(options) as c:
        assert c is a
    clock.advance(300)
    with pool.archive(options) as d:  # taking a lease closes what expired
        assert d is not a
    assert_closed(a)
    clock.advance(301)
    assert pool.evict_idle() == 1
    assert_closed(d)
    assert pool.stats().idle == 0
    pool.idle_timeout_s = 10
    with pool.archive(options) as e:
        pass
    clock.advance(10)
    with pool.archive(ipc_options(harness, message_timeout_ms=4_000)):
        pass  # a lease of another key closes what expired too
    assert_closed(e)


def test_a_lease_that_ends_with_an_error_closes_its_session(pool, harness):
    options = ipc_options(harness)
    with pytest.raises(RuntimeError, match="boom"), pool.archive(options) as a:
        works(a)
        raise RuntimeError("boom")
    assert_closed(a)
    assert pool.stats().idle == 0 and pool.stats().leased == 0
    wait_for(lambda: a.control_session_id not in server_sessions(harness), what="archive closed the session")
    # Exceptions the caller names in keep_on end the lease normally.
    with pytest.raises(KeyError), pool.archive(options, keep_on=(KeyError,)) as b:
        raise KeyError("not about the session")
    assert works(b)
    with pool.archive(options) as c:
        assert c is b
    # A lease spread over several methods: acquire, then discard when the caller saw the session fail.
    lease = pool.archive(options)
    assert lease.acquire() is b and lease.acquire() is b
    lease.discard()
    assert_closed(b)
    lease.release()  # idempotent
    with pytest.raises(RuntimeError, match="released"):
        lease.acquire()


def test_a_broken_idle_session_is_replaced_and_signals_go_to_the_lessee_only(pool, harness):
    options = ipc_options(harness)
    with pool.archive(options) as a:
        pass
    a.close()  # as if the archive or the driver had dropped it while idle
    with pool.archive(options) as b:
        assert b is not a and works(b)
    received: list[Any] = []
    with pool.archive(options, recording_signal_consumer=received.append) as c:
        assert c is b and c.recording_signal_consumer is not None
    assert c.recording_signal_consumer is None


def test_errors_name_the_driver_and_the_archive(pool, harness, tmp_path):
    missing = str(tmp_path / "no-driver")
    with pytest.raises(NoMediaDriverError, match=re.escape(f"no media driver at aeronDir={missing}")), \
            pool.archive(ConnectionOptions(aeron_dir=missing), host_driver_only=True):
        pass
    unreachable = ipc_options(harness, control_stream_id=harness.ctx.local_control_stream_id + 50_000,
                              message_timeout_ms=300)
    with pytest.raises(ArchiveConnectError, match="cannot reach the archive on controlChannel=aeron:ipc "
                                                  f"controlStreamId={unreachable.control_stream_id}"), \
            pool.archive(unreachable):
        pass
    assert pool.stats().leased == 0 and pool.stats().idle == 0


def test_localize_channel_replaces_only_a_wildcard_udp_host(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    assert localize_channel("aeron:udp?endpoint=0.0.0.0:0") == "aeron:udp?endpoint=10.1.2.3:0"
    assert localize_channel("aeron:udp?endpoint=localhost:0") == "aeron:udp?endpoint=localhost:0"
    assert localize_channel("aeron:ipc") == "aeron:ipc"


def test_localize_channel_finds_the_address_toward_the_archive(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    remote = "aeron:udp?endpoint=192.0.2.7:8010"  # TEST-NET-1: routed by the default route, never answered
    toward = route_address("192.0.2.7")
    if toward is None:
        pytest.skip("this host has no route toward 192.0.2.7 (no default route)")
    # the defaults' localhost and a wildcard both become this host's address on the archive's network
    assert localize_channel("aeron:udp?endpoint=localhost:0", remote) == f"aeron:udp?endpoint={toward}:0"
    assert localize_channel("aeron:udp?endpoint=0.0.0.0:0|mtu=8k", remote) == f"aeron:udp?endpoint={toward}:0|mtu=8k"
    assert localize_channel("aeron:udp?endpoint=10.9.9.9:0", remote) == "aeron:udp?endpoint=10.9.9.9:0"
    # an archive on this host: loopback stays, a wildcard becomes the loopback address toward it
    local = "aeron:udp?endpoint=localhost:8010"
    assert localize_channel("aeron:udp?endpoint=localhost:0", local) == "aeron:udp?endpoint=localhost:0"
    assert localize_channel("aeron:udp?endpoint=0.0.0.0:0", local) == "aeron:udp?endpoint=127.0.0.1:0"
    assert localize_channel("aeron:udp?endpoint=localhost:0", "aeron:ipc") == "aeron:udp?endpoint=localhost:0"


def test_only_an_ipc_control_channel_requires_the_host_driver():
    assert requires_host_driver(ConnectionOptions(control_channel="aeron:ipc"))
    assert not requires_host_driver(ConnectionOptions(control_channel="aeron:udp?endpoint=10.0.0.1:8010"))


# -- callers -----------------------------------------------------------------------------------------------------

def test_the_planner_and_its_replays_share_one_pooled_session(pool, harness):
    descriptor = record_stopped(harness, 3301)
    before = server_sessions(harness)
    options = SourceOptions.parse({"aerondir": harness.aeron_dir, "controlchannel": harness.ctx.local_control_channel,
                                   "controlstreamid": str(harness.ctx.local_control_stream_id),
                                   "controlresponsechannel": "aeron:ipc", "replaychannel": "aeron:ipc",
                                   "recordingid": str(descriptor.recording_id)})
    source = open_recording_source(options, pool)
    try:
        assert list(source.selected()) == [descriptor.recording_id]
        middle = descriptor.stop_position // 2
        assert source.boundary_at_or_before(descriptor, middle, 0, descriptor.stop_position) <= middle  # replays
        assert source.safe_end(descriptor) == descriptor.stop_position
        assert isinstance(options.location, RunningArchive)
        assert source.location() == options.location
        source.selected()
    finally:
        source.close()
    assert pool.stats().idle == 1 and pool.stats().leased == 0  # one session, reused by every question and replay
    assert len(server_sessions(harness) - before) == 1
    wait_for(lambda: not harness.archive.conductor._replays, what="replays finished")
    # A replay read of a whole recording through the same pool takes that session too.
    chunks = ReplayChunkSource(pool=pool).iter_chunks(source._partition(descriptor, 0, descriptor.stop_position,
                                                                         descriptor.stop_position))
    assert sum(len(chunk) for chunk, _ in chunks) == descriptor.stop_position
    assert pool.stats().idle == 1 and len(server_sessions(harness) - before) == 1


# -- fork and exit ------------------------------------------------------------------------------------------------

def _child_uses_the_pool(pool: ConnectionPool, options: ConnectionOptions, out: Any) -> None:
    try:
        inherited = pool.stats()
        with pool.archive(options, purpose="child") as archive:
            works(archive)
            out.put({"inherited": [inherited.clients, inherited.idle, inherited.leased, inherited.embedded_driver_dir],
                     "session": archive.control_session_id, "embedded": pool.embedded_driver_dir()})
        pool.close()  # closes the child's own connections only
        gc.collect()
    except BaseException as ex:
        out.put({"error": repr(ex)})
        raise


def test_a_forked_child_opens_its_own_connections_and_never_closes_the_parents(pool, aeron_dir, tmp_path):
    h, options = udp_harness(aeron_dir, tmp_path, 7721)
    try:
        # On this pool's embedded driver (there is no driver in options.aeron_dir).
        with pool.archive(options) as idle, pool.archive(options) as held:
            works(idle)
            works(held)
        embedded = pool.embedded_driver_dir()
        assert embedded is not None
        context = multiprocessing.get_context("fork")
        out = context.Queue()
        with pool.archive(options) as leased:  # leased while the child runs; `held` waits idle
            assert leased is idle
            child = context.Process(target=_child_uses_the_pool, args=(pool, options, out))
            child.start()
            report = out.get(timeout=120)
            child.join(120)
            assert child.exitcode == 0, report
            assert report["inherited"] == [0, 0, 0, None]  # the parent's objects are forgotten in the child
            assert report["session"] not in (idle.control_session_id, held.control_session_id)
            assert report["embedded"] not in (None, embedded)
            # The parent's driver, client and sessions, leased or idle, are untouched.
            assert os.path.exists(embedded) and not leased.aeron.is_closed
            assert works(leased)
            assert {idle.control_session_id, held.control_session_id} <= server_sessions(h)
        assert pool.stats().idle == 2
        with pool.archive(options) as first, pool.archive(options) as second:
            assert {id(first), id(second)} == {id(idle), id(held)}
            assert works(first) and works(second)
    finally:
        h.close()


_EXIT_SCRIPT = r"""
import atexit, json, os, sys

def report_after_the_pool_closed():  # registered before the pool module: atexit runs it after the pool's hook
    if os.getpid() == PARENT:
        print(json.dumps({"closed": closed(idle), "embedded_left": os.path.exists(embedded)}), flush=True)

PARENT = os.getpid()
atexit.register(report_after_the_pool_closed)

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.archive.exceptions import ArchiveError

def closed(archive):
    try:
        archive.poll_for_recording_signals()
        return False
    except ArchiveError as ex:
        return "client is closed" in str(ex)

options = ConnectionOptions(**json.loads(sys.argv[1]))
pool = connection_pool()
with pool.archive(options) as idle:
    idle.list_recordings()
embedded = pool.embedded_driver_dir()
pid = os.fork()
if pid == 0:  # a child that uses the pool and then exits normally (atexit, interpreter teardown)
    import faulthandler
    faulthandler.dump_traceback_later(15, exit=True)  # a hung child must not hang the test (stderr shows where)
    with pool.archive(options) as mine:
        mine.list_recordings()
    sys.exit(0)
_, status = os.waitpid(pid, 0)
with pool.archive(options) as again:
    again.list_recordings()
print(json.dumps({"child_status": status, "reused": again is idle, "session": idle.control_session_id,
                  "embedded": embedded, "embedded_alive": os.path.exists(embedded),
                  "client_open": not idle.aeron.is_closed}), flush=True)
"""


def test_close_at_exit_and_a_child_that_exits_normally(aeron_dir, tmp_path, caplog):
    h, options = udp_harness(aeron_dir, tmp_path, 7731)
    try:
        before = server_sessions(h)
        fields = {"aeron_dir": options.aeron_dir, "control_channel": options.control_channel,
                  "control_stream_id": options.control_stream_id,
                  "control_response_channel": options.control_response_channel, "message_timeout_ms": 5_000}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
        done = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, json.dumps(fields)], env=env, timeout=180,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == 2, done.stdout + done.stderr[-4000:]
        during, at_exit = lines
        # The child's exit closed nothing of the parent's: same session, same driver, same client.
        assert during["child_status"] == 0
        assert during["reused"] and during["embedded_alive"] and during["client_open"]
        # At exit the pool closed its session and its embedded driver (whose directory is deleted).
        assert at_exit == {"closed": True, "embedded_left": False}
        wait_for(lambda: not (server_sessions(h) - before), timeout=30, what="the archive saw the sessions close")
        # Closed at exit, not left to time out: by the CloseSessionRequest, or (when the machine is loaded and the
        # request arrives over UDP after the client's response subscription is already gone) by the archive seeing
        # that subscription go. Either way within the wait above, far below the session's liveness timeout.
        closing = [m for m in caplog.messages if f"control session {during['session']} closed" in m]
        assert closing and ("session closed" in closing[0] or "response publication not connected" in closing[0])
    finally:
        h.close()
