"""The connector on the cluster (issue 10): executors on other hosts, nothing shared, exactly once both ways.

Each test runs a Spark application (tests/cluster/jobs.py) on the `driver` or `driver2` host against the
standalone master, as a user would: only the archive's control channel is configured (no `aeronDir`: the driver
hosts run no media driver; no `archiveDir`; default response and replay channels, which every process resolves to
its own address), and the SBE schema is a file only the driver host has. What the tests check comes from outside
Spark: the publisher numbers its messages (`tradeId` 1, 2, 3, ...), positions must follow frame lengths exactly,
and task placement comes from Spark's own status API.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.topology import MARKET_DATA_STREAM_ID, Topology

pytestmark = pytest.mark.cluster

JOBS = Path(__file__).with_name("jobs.py")
SCHEMA_ON_DRIVER = "/tmp/aas-market-data.xml"  # in the driver hosts' private /tmp: workers have no copy
COPY_PORT = 40600
# Fresh target streams per run, so a topology kept up between runs (AAS_CLUSTER_KEEP=1) holds no earlier copy.
COPY_STREAM_ID = 7000 + random.randrange(1000)
WRITE_STREAM_ID = 8000 + random.randrange(1000)
HEADER = 32
TERM_LENGTH = 64 * 1024  # the publisher's (tests/cluster/publisher.py --term-length)


def frame_length(payload: int) -> int:
    return (payload + HEADER + 31) & ~31


def config_for(cluster: Topology, host: str, **config: Any) -> dict[str, Any]:
    return {
        "master": cluster.master_url,
        "driverIp": cluster.ip(host),
        "controlChannel": cluster.archive_control_channel,
        **config,
    }


def job(
    cluster: Topology, host: str, command: str, timeout: float = 300, env: dict[str, str] | None = None, **config: Any
) -> dict[str, Any]:
    """Run a job of jobs.py on `host` to its end; its result."""
    argv = [cluster.python, str(JOBS), command, json.dumps(config_for(cluster, host, **config))]
    result = cluster.run(host, argv, timeout=timeout, env=env)
    assert result.returncode == 0, f"{command} on {host} failed:\n{result.stderr[-6000:]}"
    return result_of(result.stdout)


def result_of(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith('{"result"'):
            value: dict[str, Any] = json.loads(line)["result"]
            return value
    raise AssertionError(f"no result in the job's output:\n{stdout[-3000:]}")


def copy_schema(cluster: Topology, host: str) -> None:
    cluster.run(host, ["cp", str(cluster.schema_path), SCHEMA_ON_DRIVER], check=True, timeout=10)


def live_recording(cluster: Topology, min_bytes: int) -> dict[str, Any]:
    """The publisher's active recording, once it holds at least `min_bytes`."""
    deadline = time.monotonic() + 120
    while True:
        rows = [r for r in cluster.market_data_recordings("archive") if r["stopPosition"] == -1]
        if rows and rows[-1]["recordedPosition"] - rows[-1]["startPosition"] >= min_bytes:
            return rows[-1]
        assert time.monotonic() < deadline, f"no live market-data recording of {min_bytes} bytes: {rows}"
        time.sleep(1)


def assert_exact(rows: list[list[int]], start_position: int | None = None) -> None:
    """Rows [recordingId, position, tradeId, (length)] of one recording: consecutive messages, each once."""
    assert rows, "no rows"
    rows = sorted(rows, key=lambda r: r[1])
    positions = [r[1] for r in rows]
    trade_ids = [r[2] for r in rows]
    assert len(set(positions)) == len(positions), "a message was delivered twice"
    assert trade_ids == list(range(trade_ids[0], trade_ids[0] + len(trade_ids))), "messages missing or repeated"
    if start_position is not None:
        assert positions[0] == start_position
    length = frame_length(rows[0][3]) if len(rows[0]) > 3 else positions[1] - positions[0]
    # consecutive frames; a term ends with a padding frame when the next message does not fit in it
    bad = [
        (a, b)
        for a, b in itertools.pairwise(positions)
        if b - a != length and not (b % TERM_LENGTH == 0 and length < b - a < 2 * length)
    ]
    assert not bad, f"positions do not follow frame lengths: {bad[:5]}"


def worker_of(cluster: Topology, host: str) -> str | None:
    return next((w for w in cluster.workers if host in (w, cluster.ip(w))), None)


# New inbound UDP dropped on a host (issue 36), as on a Kubernetes node or a firewalled machine: what the host
# started itself still gets its answers (conntrack's established flows), nothing else reaches it.
FIREWALL_TABLE = "aas_no_inbound_udp"
FIREWALL_RULES = f"""table inet {FIREWALL_TABLE} {{
    chain input {{
        type filter hook input priority 0; policy accept;
        iifname "lo" accept
        meta l4proto udp ct state new counter drop
    }}
}}
"""
FIREWALLED = ("driver", "worker1", "worker2")


def nft() -> str:
    found = shutil.which("nft")
    assert found, "nft not found: install Debian's nftables package (ci/bootstrap.sh does so as root)"
    return found


def raise_firewall(cluster: Topology, hosts: tuple[str, ...]) -> None:
    for host in hosts:
        cluster.run(host, [nft(), "-f", "-"], input=FIREWALL_RULES, check=True, timeout=10)


def lower_firewall(cluster: Topology, hosts: tuple[str, ...]) -> None:
    for host in hosts:
        cluster.run(host, [nft(), "delete", "table", "inet", FIREWALL_TABLE], timeout=10)


def firewall_drops(cluster: Topology, host: str) -> int:
    listed = cluster.run(host, [nft(), "list", "table", "inet", FIREWALL_TABLE], timeout=10).stdout
    return sum(int(n) for n in re.findall(r"counter packets (\d+)", listed))


def job_with_firewall(
    cluster: Topology, host: str, command: str, timeout: float = 300, **config: Any
) -> dict[str, Any]:
    """`job`, with new inbound UDP to `FIREWALLED` hosts dropped when the job asks for it (it prints "FIREWALL?"
    and waits for the answer on stdin); the firewall comes down when the job ends, whatever happened. The result
    gets the packets the firewall dropped on `host` (`firewallDrops`)."""
    argv = [cluster.python, str(JOBS), command, json.dumps(config_for(cluster, host, firewall=True, **config))]
    process = cluster.spawn(host, argv, stdin=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    raised = False
    try:
        for line in process.stdout:
            if line.strip() == "FIREWALL?":
                raise_firewall(cluster, FIREWALLED)
                raised = True
                process.stdin.write("FIREWALL UP\n")
                process.stdin.flush()
                break
        out, _ = process.communicate(timeout=timeout)
        drops = firewall_drops(cluster, host) if raised else 0
    finally:
        if raised:
            lower_firewall(cluster, FIREWALLED)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, f"{command} on {host} failed (its stderr is in the spawn log named above)"
    return {**result_of(out), "firewallDrops": drops}


def test_batch_read_replays_one_recording_on_both_workers(healthy_cluster: Topology) -> None:
    """Also, in the same application: a time window read gives exactly the rows of the whole read whose recorded
    time is in it (executors on other hosts date rows and place the window through the archive's requests); and,
    with new inbound UDP then dropped on the driver and both workers, the same read with `responseChannels=true`
    gives exactly its rows, while without the option it fails at once."""
    cluster = healthy_cluster
    copy_schema(cluster, "driver")
    live = live_recording(cluster, 256 * 1024)
    result = job_with_firewall(
        cluster,
        "driver",
        "read",
        options={
            "recordingId": str(live["recordingId"]),
            "sbeSchema": SCHEMA_ON_DRIVER,
            "maxBytesPerPartition": "32k",
        },
        timeWindow=True,
    )
    firewalled = result["firewalled"]
    assert sorted(firewalled["rows"]) == sorted(result["rows"]), "response channels read other rows"
    assert firewalled["refused"] is not None, "the read without responseChannels worked behind the firewall"
    assert "cannot reach" in firewalled["refused"], firewalled["refused"]
    assert firewalled["refusedAfterS"] < 30
    assert result["firewallDrops"] > 0, "the firewall dropped nothing: the refusal proves nothing"
    by_time = result["timeWindow"]
    whole, window = by_time["whole"], by_time["window"]
    start_us, end_us = (edge * 1000 for edge in by_time["edges"])
    assert [r[2] for r in whole] == sorted(r[2] for r in whole), "recorded times decrease"
    expected = [r for r in whole if start_us <= r[2] < end_us]
    assert expected and window == expected
    rows = result["rows"]
    assert_exact(rows, start_position=live["startPosition"])
    assert {r[0] for r in rows} == {live["recordingId"]}
    assert rows and max(r[1] for r in rows) >= live["recordedPosition"] - 1024, "read stopped short of the live end"
    assert result["partitions"] >= 8
    read_tasks = [t for t in result["tasks"] if t["status"] == "SUCCESS"]
    by_worker = {worker_of(cluster, t["host"]) for t in read_tasks}
    assert by_worker == set(cluster.workers), f"tasks ran on {by_worker}: {read_tasks[:4]}"
    assert len({t["executorId"] for t in read_tasks}) == 2


def test_stream_read_tails_the_live_recording_exactly_once(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    copy_schema(cluster, "driver")
    live = live_recording(cluster, 4096)
    result = job(
        cluster,
        "driver",
        "stream-read",
        minRows=1500,
        seconds=90,
        checkpoint=f"/tmp/aas-chk-{uuid.uuid4().hex}",
        options={
            "recordingId": str(live["recordingId"]),
            "sbeSchema": SCHEMA_ON_DRIVER,
            "startingPosition": "earliest",
            "maxBytesPerTrigger": "64k",
        },
    )
    assert result["error"] is None, result["error"]
    assert len(result["batches"]) >= 2, "the live tail should span several micro-batches"
    assert len(result["rows"]) >= 1500
    assert_exact(result["rows"], start_position=live["startPosition"])


def _copy_source(recording_id: int) -> dict[str, str]:
    return {"recordingId": str(recording_id), "startingPosition": "earliest", "maxBytesPerTrigger": "64k"}


def _copy_target(cluster: Topology) -> dict[str, str]:
    return {
        "channel": f"aeron:udp?endpoint={cluster.ip('archive')}:{COPY_PORT}",
        "streamId": str(COPY_STREAM_ID),
        "publishTimeout": "20s",
    }


def _spawn_copy(
    cluster: Topology, host: str, checkpoint: str, source: int, env: dict[str, str] | None = None, **config: Any
) -> subprocess.Popen[str]:
    copy_config = config_for(
        cluster,
        host,
        checkpoint=checkpoint,
        untilBatches=10_000,
        seconds=600,
        options=_copy_source(source),
        sinkOptions=_copy_target(cluster),
        sparkConf={
            "spark.speculation": "true",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.multiplier": "1.5",
        },
        **config,
    )
    return cluster.spawn(
        host,
        [cluster.python, str(JOBS), "stream-copy", json.dumps(copy_config)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


class JobOutput:
    """A spawned job's stdout, read by a thread: progress lines (one per micro-batch with rows) and its result."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def batches(self) -> int:
        return sum(1 for line in list(self.lines) if line.startswith('{"progress"'))

    def await_batches(self, count: int, timeout: float) -> bool:
        """True once `count` more batches than now were reported; False if the job ended first."""
        target = self.batches + count
        deadline = time.monotonic() + timeout
        while self.batches < target:
            if self.process.poll() is not None:
                self._reader.join(timeout=10)
                return self.batches >= target
            assert time.monotonic() < deadline, f"{self.batches} batches, {target} expected within {timeout}s"
            time.sleep(0.2)
        return True

    def result(self, timeout: float) -> dict[str, Any]:
        self.process.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return result_of("".join(self.lines))

    def kill(self) -> None:
        """kill -9 of the job's whole session: its JVM and Python workers alike (a driver host dying)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)


@pytest.mark.timeout(900)
def test_stream_copy_survives_worker_and_driver_deaths_exactly_once(healthy_cluster: Topology) -> None:
    """Live recording -> readStream -> writeStream -> a new recording, while workers and drivers die."""
    cluster = healthy_cluster
    checkpoint = f"{cluster.checkpoint_dir}/copy-{uuid.uuid4().hex}"
    for host in ("driver", "driver2"):
        copy_schema(cluster, host)
    source = live_recording(cluster, 4096)["recordingId"]

    # 1. a run on `driver`; a worker is killed -9 mid-stream and its tasks are retried on the other one
    first = JobOutput(_spawn_copy(cluster, "driver", checkpoint, source))
    try:
        assert first.await_batches(2, timeout=240)
        cluster.kill_service("worker1")
        assert first.await_batches(2, timeout=240), "the query did not survive losing a worker"
        cluster.heal()
        assert first.await_batches(1, timeout=240)
    finally:
        # 2. the driver dies (kill -9 of the whole job: JVM and Python workers) at an arbitrary moment
        first.kill()

    # 3. the query restarts on `driver2` from the same checkpoint; its commit process crashes mid-publish
    fault_env = {"AERON_ARCHIVE_SPARK_FAULT_DIR": "/tmp/aas-faults"}
    arm = (
        "from aeron_archive_spark.connector.sink import faults; "
        "faults.arm({'point': 'publish', 'afterRows': 20, 'action': 'exit'})"
    )
    cluster.run("driver2", [cluster.python, "-c", arm], env=fault_env, check=True, timeout=60)
    second = JobOutput(_spawn_copy(cluster, "driver2", checkpoint, source, env=fault_env))
    try:
        crashed = second.result(timeout=300)
    finally:
        second.kill()
    assert crashed["error"] is not None, "the armed commit crash did not fail the query"

    # 4. and once more on `driver`, to the end; then the same application reads the copy and the source
    final = job(
        cluster,
        "driver",
        "stream-copy",
        timeout=400,
        checkpoint=checkpoint,
        untilBatches=2,
        seconds=300,
        options=_copy_source(source),
        sinkOptions=_copy_target(cluster),
        thenRead=[
            {
                "channel": _copy_target(cluster)["channel"],
                "streamId": str(COPY_STREAM_ID),
                "sbeSchema": SCHEMA_ON_DRIVER,
            },
            {"recordingId": str(source), "sbeSchema": SCHEMA_ON_DRIVER},
        ],
    )
    assert final["error"] is None, final["error"]

    # The copy holds the source recording's messages from its first one, each once, in order.
    both = final["read"]
    copied, original = both["reads"][0]["rows"], both["reads"][1]["rows"]
    assert len({r[0] for r in copied}) == 1, "the sink wrote more than one recording"
    assert_exact(copied, start_position=0)
    copied_trades = [r[2] for r in sorted(copied, key=lambda r: r[1])]
    source_trades = [r[2] for r in sorted(original, key=lambda r: r[1])]
    assert copied_trades == source_trades[: len(copied_trades)], "the copy is not the source's prefix"
    _assert_no_sessions_left(cluster)


def _assert_no_sessions_left(cluster: Topology) -> None:
    """Killed executors and drivers leave no replay or recording of theirs running on the archive."""
    deadline = time.monotonic() + 30
    while True:
        rows = cluster.recordings("archive")
        active = [r for r in rows if r["stopPosition"] == -1 and r["streamId"] != MARKET_DATA_STREAM_ID]
        if not active:
            return
        assert time.monotonic() < deadline, f"recordings left active by dead sinks: {active}"
        time.sleep(1)


def test_batch_write_is_all_or_nothing_and_reads_back_exactly(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    port = COPY_PORT + 1
    target = {"channel": f"aeron:udp?endpoint={cluster.ip('archive')}:{port}", "streamId": str(WRITE_STREAM_ID)}
    result = job(cluster, "driver", "batch-write", rows=4000, partitions=4, failPartition=2, sinkOptions=target)
    assert result["failedError"] is not None and "fails on purpose" in result["failedError"]
    assert result["afterFailure"] == [], "a failed write left a recording behind"
    assert result["error"] is None, result["error"]
    back = result["read"]
    assert [r[2] for r in back["rows"]] == [f"row-{i:08d}" for i in range(4000)]
    assert len({r[0] for r in back["rows"]}) == 1
    hosts = {worker_of(cluster, t["host"]) for t in back["tasks"] if t["status"] == "SUCCESS"}
    assert hosts == set(cluster.workers), "the write's tasks ran on both workers"


def _spawn_job(cluster: Topology, host: str, command: str, **config: Any) -> subprocess.Popen[str]:
    argv = [cluster.python, str(JOBS), command, json.dumps(config_for(cluster, host, **config))]
    return cluster.spawn(host, argv, stdout=subprocess.PIPE, text=True)


@pytest.mark.timeout(400)
def test_a_short_link_cut_of_the_publisher_loses_nothing(healthy_cluster: Topology) -> None:
    """3 s without the publisher's link (under the 10 s image liveness timeout): the recording goes on, and the
    stream reads through the cut to what was recorded after it."""
    cluster = healthy_cluster
    copy_schema(cluster, "driver")
    live = live_recording(cluster, 4096)
    process = _spawn_job(
        cluster,
        "driver",
        "stream-read",
        minRows=10**9,
        seconds=20,
        checkpoint=f"/tmp/aas-chk-{uuid.uuid4().hex}",
        options={"recordingId": str(live["recordingId"]), "sbeSchema": SCHEMA_ON_DRIVER, "startingPosition": "latest"},
    )
    output = JobOutput(process)
    assert output.await_batches(1, timeout=180), "the query is not running"
    cluster.cut_link("publisher")
    time.sleep(3)
    cluster.restore_link("publisher")
    at_restore = [r for r in cluster.market_data_recordings() if r["recordingId"] == live["recordingId"]]
    result = output.result(timeout=240)
    assert result["error"] is None, result["error"]
    after = [r for r in cluster.market_data_recordings() if r["recordingId"] == live["recordingId"]]
    assert after and after[0]["stopPosition"] == -1, "the recording stopped during a 3 s cut"
    rows = result["rows"]
    assert len(rows) > 2000, len(rows)
    assert_exact(rows)  # consecutive tradeIds and positions across the cut: nothing lost, nothing twice
    restored_at = at_restore[0]["recordedPosition"]
    assert max(r[1] for r in rows) > restored_at, f"no row recorded after the link came back (at {restored_at})"


@pytest.mark.timeout(400)
def test_a_long_link_cut_starts_a_new_recording_that_a_channel_stream_picks_up(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    copy_schema(cluster, "driver")
    old = live_recording(cluster, 4096)
    process = _spawn_job(
        cluster,
        "driver",
        "stream-read",
        minRows=10**9,
        seconds=45,
        checkpoint=f"/tmp/aas-chk-{uuid.uuid4().hex}",
        options={
            "channel": cluster.market_data_channel,
            "streamId": str(MARKET_DATA_STREAM_ID),
            "sbeSchema": SCHEMA_ON_DRIVER,
            "startingPosition": "latest",
        },
    )
    output = JobOutput(process)
    assert output.await_batches(1, timeout=180), "the query is not running"
    cluster.cut_link("publisher")
    time.sleep(14)  # past the image liveness timeout: the archive's image goes, the recording stops
    cluster.restore_link("publisher")
    result = output.result(timeout=300)
    assert result["error"] is None, result["error"]
    stopped = [r for r in cluster.market_data_recordings() if r["recordingId"] == old["recordingId"]]
    assert stopped[0]["stopPosition"] != -1, "the recording should stop after a long cut"
    by_recording: dict[int, list[list[int]]] = {}
    for row in result["rows"]:
        by_recording.setdefault(row[0], []).append(row)
    newer = [rid for rid in by_recording if rid > old["recordingId"]]
    assert old["recordingId"] in by_recording and newer, f"rows of recordings {sorted(by_recording)}"
    for rows in by_recording.values():
        assert_exact(rows)
    last_old = max(r[2] for r in by_recording[old["recordingId"]])
    assert min(r[2] for rid in newer for r in by_recording[rid]) > last_old


@pytest.mark.timeout(900)
def test_an_archive_restart_mid_stream_is_survived_or_named(healthy_cluster: Topology) -> None:
    """kill -9 of the archive while a query copies: it recovers, or fails naming the archive's control endpoint and
    goes on when restarted from its checkpoint; no source message is ever copied twice."""
    cluster = healthy_cluster
    checkpoint = f"{cluster.checkpoint_dir}/restart-{uuid.uuid4().hex}"
    copy_schema(cluster, "driver")
    live_recording(cluster, 4096)
    source = {
        "channel": cluster.market_data_channel,
        "streamId": str(MARKET_DATA_STREAM_ID),
        "startingPosition": "earliest",
        "maxBytesPerTrigger": "64k",
    }
    port = COPY_PORT + 2
    stream_id = COPY_STREAM_ID + 1
    target = {
        "channel": f"aeron:udp?endpoint={cluster.ip('archive')}:{port}",
        "streamId": str(stream_id),
        "publishTimeout": "10s",
    }
    first = JobOutput(_spawn_copy_to(cluster, "driver", checkpoint, source, target))
    try:
        assert first.await_batches(1, timeout=240)
        cluster.kill_service("archive")
        time.sleep(5)
        cluster.heal()  # the archive restarts on its directory; the publisher is recorded again (new recording)
        # it recovers by itself, or fails (never hangs) with an error naming the archive's control endpoint
        recovered = first.await_batches(2, timeout=240)
        if not recovered:
            failed = first.result(timeout=60)
            assert failed["error"] and f"{cluster.ip('archive')}:8010" in failed["error"], failed["error"]
    finally:
        first.kill()
    # restarted from its checkpoint it goes on; then the same application reads the copy and every source message
    final = job(
        cluster,
        "driver",
        "stream-copy",
        timeout=400,
        checkpoint=checkpoint,
        untilBatches=2,
        seconds=240,
        options=source,
        sinkOptions=target,
        thenRead=[
            {"channel": target["channel"], "streamId": target["streamId"]},
            {"channel": cluster.market_data_channel, "streamId": str(MARKET_DATA_STREAM_ID)},
        ],
    )
    assert final["error"] is None, final["error"]
    # Whole messages compared (each carries its trade id and timestamp): none copied twice, none made up.
    copied = [r[2] for r in sorted(final["read"]["reads"][0]["rows"], key=lambda r: r[1])]
    recorded = {r[2] for r in final["read"]["reads"][1]["rows"]}
    assert len(copied) == len(set(copied)), "a message was copied twice"
    assert set(copied) <= recorded, "the copy holds a message the source does not"
    assert len(copied) > 1000


def _spawn_copy_to(
    cluster: Topology, host: str, checkpoint: str, source: dict[str, str], target: dict[str, str]
) -> subprocess.Popen[str]:
    config = config_for(
        cluster, host, checkpoint=checkpoint, untilBatches=10_000, seconds=600, options=source, sinkOptions=target
    )
    return cluster.spawn(
        host, [cluster.python, str(JOBS), "stream-copy", json.dumps(config)], stdout=subprocess.PIPE, text=True
    )
