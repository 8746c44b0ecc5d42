"""Log buffers: a replay's is non-sparse when the replay will fill it, sparse when it is short; the archive's own
embedded driver makes them non-sparse by default, as Java's media driver does; control streams and sink commits
ask for small or sparse ones, so that such a driver does not allocate whole logs for them.

A replay through Java's archive gets a non-sparse log buffer (the Java media driver's default): its pages are
allocated when the publication is added, not touched one by one while the replay streams, and a full memory
filesystem fails the add instead of raising SIGBUS in the archive mid-replay. Ours asks for the same whenever the
replay covers three terms or more (it would touch every page anyway), and keeps short replays sparse, where
allocating three terms up front would cost more than the replay. A `sparse` in the replay channel wins.

The replay is looked at while it is held back: nobody polls its subscription, so it waits at its window with its
log buffer in place.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from system.harness import SMALL_TERM, Harness, collect, offer_all, payloads_of, wait_for

from aeron_archive_spark.archive import SourceLocation
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from aeron_archive_spark.archive.native import AeronClient
from aeron_archive_spark.archive.server.archive import SPARSE_ENV, Archive, archive_media_driver
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.connector.sink.archive_ops import sparse_unless_given

CHANNEL = f"aeron:ipc?term-length={SMALL_TERM}"


@pytest.fixture(params=["sparse-driver", "dense-driver"])
def harness(request: pytest.FixtureRequest, aeron_dir: str, tmp_path: Path):
    """An archive on the tests' driver (sparse logs by default) and on the archive's own (non-sparse by default):
    a replay's log is what its length asks for, whatever the driver's default."""
    driver = archive_media_driver() if request.param == "dense-driver" else None
    h = Harness(driver.aeron_dir if driver is not None else aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()
    if driver is not None:
        driver.close()


def record(h: Harness, payloads: list[bytes], stream_id: int) -> int:
    publication = h.client.aeron.add_exclusive_publication(CHANNEL, stream_id)
    channel = f"{CHANNEL}|session-id={publication.session_id}"
    h.client.start_recording(channel, stream_id, SourceLocation.LOCAL)
    recording_id = h.await_signal(RecordingSignal.START).recording_id
    offer_all(publication, payloads)
    wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position, what="recorded")
    h.client.stop_recording(channel, stream_id)
    h.await_signal(RecordingSignal.STOP, recording_id)
    publication.close()
    return recording_id


def log_buffers(aeron_dir: str) -> set[str]:
    directory = os.path.join(aeron_dir, "publications")
    if not os.path.isdir(directory):
        return set()
    return {name for name in os.listdir(directory) if name.endswith(".logbuffer")}


def replay_log_allocation(
    h: Harness, recording_id: int, length: int, stream_id: int, replay_channel: str = "aeron:ipc"
) -> tuple[float, object]:
    """Start a replay nobody polls yet; (allocated bytes / size of its new log buffer, its subscription)."""
    before = log_buffers(h.aeron_dir)
    subscription = h.client.replay(recording_id, replay_channel, stream_id, position=0, length=length)
    new = wait_for(lambda: sorted(log_buffers(h.aeron_dir) - before), what="the replay's log buffer")
    assert len(new) == 1, new
    st = os.stat(os.path.join(h.aeron_dir, "publications", new[0]))
    return st.st_blocks * 512 / st.st_size, subscription


def test_a_replay_of_three_terms_or_more_gets_a_non_sparse_log_and_delivers_every_message(harness: Harness) -> None:
    payloads = payloads_of([1000] * 300, seed=5)  # ~300 KiB: more than three 64 KiB terms
    recording_id = record(harness, payloads, 4401)
    allocated, subscription = replay_log_allocation(harness, recording_id, REPLAY_ALL_AND_STOP, 9401)
    try:
        assert allocated >= 1.0
        assert [g[0] for g in collect(subscription, len(payloads))] == payloads
    finally:
        subscription.close()


def test_a_short_replay_keeps_a_sparse_log(harness: Harness) -> None:
    payloads = payloads_of([1000] * 300, seed=6)
    recording_id = record(harness, payloads, 4402)
    allocated, subscription = replay_log_allocation(harness, recording_id, 8 * 1024, 9402)
    try:
        assert allocated < 0.5
        assert [g[0] for g in collect(subscription, 8)] == payloads[:8]  # the messages that start in 8 KiB
    finally:
        subscription.close()


def test_sparse_given_in_the_replay_channel_is_used_as_given(harness: Harness) -> None:
    payloads = payloads_of([1000] * 300, seed=7)
    recording_id = record(harness, payloads, 4403)
    allocated, subscription = replay_log_allocation(
        harness, recording_id, REPLAY_ALL_AND_STOP, 9403, replay_channel="aeron:ipc?sparse=true"
    )
    try:
        assert allocated < 0.5  # held at its window: at most half a term written
        assert [g[0] for g in collect(subscription, len(payloads))] == payloads
    finally:
        subscription.close()


def publication_log_allocation(aeron_dir: str) -> float:
    """Add a publication on the driver in `aeron_dir`: allocated bytes / size of its log buffer."""
    before = log_buffers(aeron_dir)
    aeron = AeronClient(aeron_dir, client_name="log-buffer-test")
    try:
        publication = aeron.add_exclusive_publication(CHANNEL, 4404)
        (name,) = sorted(log_buffers(aeron_dir) - before)
        st = os.stat(os.path.join(aeron_dir, "publications", name))
        publication.close()
        return st.st_blocks * 512 / st.st_size
    finally:
        aeron.close()


@pytest.mark.parametrize("env", [None, "true", "false"])
def test_the_archives_embedded_driver_makes_non_sparse_logs_unless_the_environment_says_sparse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str | None
) -> None:
    if env is None:
        monkeypatch.delenv(SPARSE_ENV, raising=False)
    else:
        monkeypatch.setenv(SPARSE_ENV, env)
    archive = Archive.launch(ArchiveContext(archive_dir=str(tmp_path / "archive"), control_channel=None))
    try:
        assert archive.driver is not None
        allocated = publication_log_allocation(archive.aeron_dir)
    finally:
        archive.close()
    if env == "true":
        assert allocated < 0.5
    else:
        assert allocated >= 1.0


def test_a_client_connection_adds_small_sparse_control_logs_on_a_non_sparse_driver(tmp_path: Path) -> None:
    """As Java's client: 64 KiB terms and sparse logs for the control request and response streams, unless the
    channels say otherwise (else each connection would cost a 192 MiB IPC log, allocated up front)."""
    driver = archive_media_driver()
    try:
        before = log_buffers(driver.aeron_dir)
        h = Harness(driver.aeron_dir, str(tmp_path / "archive"))
        try:
            names = sorted(log_buffers(driver.aeron_dir) - before)
            assert names  # the client's request publication and the archive's response publication
            for name in names:
                st = os.stat(os.path.join(driver.aeron_dir, "publications", name))
                assert st.st_size == 3 * 64 * 1024 + 4096, name
                assert st.st_blocks * 512 < st.st_size / 2, name
        finally:
            h.close()
    finally:
        driver.close()


def test_a_sink_commits_publication_is_sparse_unless_its_channel_says(tmp_path: Path) -> None:
    assert sparse_unless_given("aeron:ipc?term-length=65536") == "aeron:ipc?term-length=65536|sparse=true"
    assert sparse_unless_given("aeron:ipc?sparse=false") == "aeron:ipc?sparse=false"
    driver = archive_media_driver()
    try:
        before = log_buffers(driver.aeron_dir)
        aeron = AeronClient(driver.aeron_dir, client_name="sink-log-buffer-test")
        try:
            publication = aeron.add_exclusive_publication(sparse_unless_given(CHANNEL), 4405)
            (name,) = sorted(log_buffers(driver.aeron_dir) - before)
            st = os.stat(os.path.join(driver.aeron_dir, "publications", name))
            assert st.st_blocks * 512 < st.st_size / 2
            publication.close()
        finally:
            aeron.close()
    finally:
        driver.close()


FILL_AFTER_ADD = r"""
import os, sys, time
from aeron_archive_spark.archive.native import AeronClient
from aeron_archive_spark.archive.server.archive import archive_media_driver

root = sys.argv[1]
driver = archive_media_driver(os.path.join(root, "driver"))
aeron = AeronClient(driver.aeron_dir, client_name="full-filesystem")
subscription = aeron.add_subscription("aeron:ipc", 77)
publication = aeron.add_exclusive_publication("aeron:ipc?term-length=1m", 77)
while not publication.is_connected:
    time.sleep(0.001)
fd = os.open(os.path.join(root, "filler"), os.O_CREAT | os.O_WRONLY)
try:
    while True:
        os.write(fd, bytes(65536))
except OSError:
    pass  # the filesystem is full
print("full", flush=True)
sent = 0
while sent < 4 * 1024 * 1024:  # every page of the three 1 MiB terms
    if publication.offer(bytes(1000)) > 0:
        sent += 1000
    subscription.poll(lambda data, header: None, 100)
print("streamed", flush=True)
"""


@pytest.mark.parametrize("sparse", ["false", "true"])
def test_a_publication_on_the_archives_driver_streams_on_after_its_filesystem_fills_up(
    tmp_path: Path, sparse: str
) -> None:
    """The reason for non-sparse logs besides speed: once a publication is added, another writer filling the memory
    filesystem cannot take its pages. With sparse logs the first write into a hole then raises SIGBUS and kills the
    process (here the publisher, sharing the process with the driver).

    Runs in a mount namespace of its own, on a 64 MiB tmpfs (root and `unshare` needed, as for the cluster tests)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    root = tmp_path / "small-shm"
    root.mkdir()
    script = f'mount -t tmpfs -o size=64m tmpfs {root} && exec {sys.executable} -c "$SCRIPT" {root}'
    env = {**os.environ, "SCRIPT": FILL_AFTER_ADD, SPARSE_ENV: sparse}
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "full" not in run.stdout:
        pytest.skip(f"could not set up the small tmpfs: rc={run.returncode} {run.stderr[-500:]}")
    if sparse == "false":
        assert run.returncode == 0 and "streamed" in run.stdout, run.stderr[-2000:]
    else:
        assert run.returncode == -signal.SIGBUS, (run.returncode, run.stdout, run.stderr[-2000:])


def image_log_buffers(aeron_dir: str) -> set[str]:
    directory = os.path.join(aeron_dir, "images")
    if not os.path.isdir(directory):
        return set()
    return {name for name in os.listdir(directory) if name.endswith(".logbuffer")}


@pytest.mark.parametrize("sparse", [None, "true"])
def test_a_recorded_udp_images_log_is_sparse_when_the_recorded_channel_asks(tmp_path: Path, sparse: str | None) -> None:
    """On serve's non-sparse driver an image of a recorded UDP publication gets its whole log when it appears,
    unless the channel given to StartRecording says `sparse=true` (what the sink asks for each commit)."""
    from conftest import free_udp_port

    driver = archive_media_driver()
    try:
        h = Harness(driver.aeron_dir, str(tmp_path / "archive"))
        try:
            channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length={SMALL_TERM}"
            if sparse:
                channel += f"|sparse={sparse}"
            before = image_log_buffers(driver.aeron_dir)
            h.client.start_recording(channel, 4406, SourceLocation.REMOTE)
            publication = h.client.aeron.add_exclusive_publication(channel, 4406)
            recording_id = h.await_signal(RecordingSignal.START).recording_id
            offer_all(publication, payloads_of([100] * 3, seed=9))
            wait_for(lambda: h.client.get_recording_position(recording_id) == publication.position, what="recorded")
            (name,) = sorted(image_log_buffers(driver.aeron_dir) - before)
            st = os.stat(os.path.join(driver.aeron_dir, "images", name))
            allocated = st.st_blocks * 512 / st.st_size
            descriptor = h.client.list_recording(recording_id)
            assert "sparse" not in descriptor.stripped_channel  # the catalog keeps Java's stripped channel
            publication.close()
        finally:
            h.close()
    finally:
        driver.close()
    if sparse:
        assert allocated < 0.5
    else:
        assert allocated >= 1.0
