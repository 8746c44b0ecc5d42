"""The topology itself (issue 10): hosts share nothing by accident, Spark spans both workers, the archive records
the publisher and answers clients on other hosts. If these fail, every other cluster test is meaningless."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.cluster.topology import MASTER_PORT, Topology

pytestmark = pytest.mark.cluster

OTHER_HOSTS = ("worker2", "driver", "archive", "publisher")

# Run on the `driver` host: a plain job on the standalone cluster that reports where its tasks ran.
SPARK_JOB = """
import json, os, socket, sys, time
from pyspark.sql import SparkSession

master, driver_ip = sys.argv[1:3]
spark = (
    SparkSession.builder.master(master).appName("aas-topology-check")
    .config("spark.driver.host", driver_ip).config("spark.driver.bindAddress", driver_ip)
    .config("spark.driver.memory", "512m").config("spark.executor.memory", "512m")
    .config("spark.executor.cores", "1").config("spark.cores.max", "2")
    # Start tasks only once both executors are registered, so both get some.
    .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
    .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .getOrCreate()
)

def where(_):
    time.sleep(0.3)
    import aeron_archive_spark.archive as engine  # the project must be importable on every worker
    return {"hostname": socket.gethostname(), "localIp": os.environ.get("SPARK_LOCAL_IP"), "engine": engine.__file__}

tasks = spark.sparkContext.parallelize(range(8), 8).map(where).collect()
infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
executors = sorted(info.host() for info in infos)
print(json.dumps({"driver": socket.gethostname(), "tasks": tasks, "executorHosts": executors}))
spark.stop()
"""


def on(cluster: Topology, host: str, code: str, *args: str, timeout: float = 60) -> str:
    """Run Python `code` on `host`; its stdout (the test fails with its stderr if it fails)."""
    result = cluster.run(host, [cluster.python, "-c", textwrap.dedent(code), *args], timeout=timeout)
    assert result.returncode == 0, f"on {host}: {result.stderr[-4000:]}"
    return str(result.stdout)


def exists_on(cluster: Topology, host: str, path: str) -> bool:
    return cluster.run(host, ["test", "-e", path], timeout=10).returncode == 0


@pytest.mark.parametrize("directory", ["/tmp", "/dev/shm"])
def test_each_host_has_its_own_tmp_and_shm(cluster: Topology, directory: str) -> None:
    path = f"{directory}/aas-{uuid.uuid4().hex}"
    cluster.run("worker1", ["sh", "-c", f"echo hello > {path}"], check=True, timeout=10)
    assert exists_on(cluster, "worker1", path)
    for other in OTHER_HOSTS:
        assert not exists_on(cluster, other, path), f"{path} written on worker1 is visible on {other}"
    assert not Path(path).exists(), f"{path} written on worker1 is visible outside the hosts"


def test_checkpoint_dir_is_shared_by_the_two_drivers_only(cluster: Topology) -> None:
    path = f"{cluster.checkpoint_dir}/aas-{uuid.uuid4().hex}"
    cluster.run("driver", ["sh", "-c", f"echo offsets > {path}"], check=True, timeout=10)
    try:
        assert cluster.run("driver2", ["cat", path], timeout=10).stdout.strip() == "offsets"
        for other in ("worker1", "worker2", "archive", "publisher"):
            assert not exists_on(cluster, other, path), f"the checkpoint {path} is visible on {other}"
    finally:
        cluster.run("driver", ["rm", "-f", path], timeout=10)


def test_hosts_have_their_own_names_and_addresses(cluster: Topology) -> None:
    for host in cluster.hosts:
        out = on(cluster, host, "import socket; name = socket.gethostname(); print(name, socket.gethostbyname(name))")
        assert out.split() == [host, cluster.ip(host)]
    addresses = cluster.run("worker1", ["ip", "-o", "-4", "addr", "show"], check=True, timeout=10).stdout
    assert sorted(line.split()[3] for line in addresses.splitlines()) == ["10.77.0.31/24", "127.0.0.1/8"]


def test_the_root_namespace_gets_no_interface(cluster: Topology) -> None:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert "aas-" not in links


def test_spawn_pipes_stdout_and_logs_stderr(cluster: Topology) -> None:
    code = "import socket, sys; print(socket.gethostname()); print('to the log', file=sys.stderr)"
    process = cluster.spawn("driver2", [cluster.python, "-c", code])
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and out.strip() == "driver2"
    assert any("to the log" in log.read_text() for log in cluster.logs_dir.glob("spawn-driver2-*.log"))


def test_cut_link_isolates_a_host_until_restored(cluster: Topology) -> None:
    probe = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"
    argv = [cluster.python, "-c", probe, cluster.ip("driver"), str(MASTER_PORT)]
    assert cluster.run("worker2", argv, timeout=30).returncode == 0
    cluster.cut_link("worker2")
    try:
        assert not cluster.link_is_up("worker2")
        assert cluster.run("worker2", argv, timeout=30).returncode != 0, "worker2 reached the master while cut off"
    finally:
        cluster.restore_link("worker2")
    deadline = time.monotonic() + 10
    while cluster.run("worker2", argv, timeout=30).returncode != 0:
        assert time.monotonic() < deadline, "worker2 did not reach the master after its link was restored"
        time.sleep(0.2)


def test_a_spark_job_from_the_driver_host_runs_on_both_workers(cluster: Topology) -> None:
    assert sorted(cluster.alive_workers()) == sorted(cluster.ip(w) for w in cluster.workers)
    out = on(cluster, "driver", SPARK_JOB, cluster.master_url, cluster.ip("driver"), timeout=240)
    report = json.loads(out.strip().splitlines()[-1])
    assert report["driver"] == "driver"
    assert {task["hostname"] for task in report["tasks"]} == set(cluster.workers)
    assert {task["localIp"] for task in report["tasks"]} == {cluster.ip(w) for w in cluster.workers}
    assert {Path(task["engine"]).parent.name for task in report["tasks"]} == {"archive"}
    assert cluster.ip("worker1") in report["executorHosts"] and cluster.ip("worker2") in report["executorHosts"]


def test_the_archive_answers_a_client_on_the_driver_host_over_udp(cluster: Topology) -> None:
    """The project's client on `driver` (its own embedded media driver) reaches the archive's control channel."""
    from_driver = cluster.market_data_recordings("driver")
    from_archive = cluster.market_data_recordings("archive")
    assert from_driver, "the driver host sees no market-data recording"
    assert [r["recordingId"] for r in from_driver] == [r["recordingId"] for r in from_archive]


def test_the_publisher_stream_is_recorded_live(cluster: Topology) -> None:
    status = cluster.publisher_status()
    assert status is not None and status["connected"], status
    before = cluster.market_data_recordings("driver")[-1]
    assert before["sessionId"] == status["sessionId"], "the newest recording is not the running publisher's"
    assert before["stopPosition"] == -1, "the publisher's recording is not active"
    time.sleep(1.5)
    after = cluster.market_data_recordings("driver")[-1]
    later = cluster.publisher_status()
    assert later is not None
    assert after["recordingId"] == before["recordingId"]
    assert after["recordedPosition"] > before["recordedPosition"] > 0
    assert later["lastSeq"] > status["lastSeq"]


def test_a_killed_worker_comes_back_with_heal(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    cluster.kill_service("worker2")
    assert cluster.service_pid("worker2") is None
    deadline = time.monotonic() + 30
    while cluster.ip("worker2") in cluster.alive_workers():  # the master notices the lost connection
        assert time.monotonic() < deadline, "the master still sees the killed worker2"
        time.sleep(0.5)
    cluster.heal()
    assert cluster.service_pid("worker2") is not None
    assert sorted(cluster.alive_workers()) == sorted(cluster.ip(w) for w in cluster.workers)


def test_a_restarted_archive_records_the_publisher_again(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    before = {r["recordingId"] for r in cluster.market_data_recordings()}
    cluster.kill_service("archive")
    cluster.heal()  # restarts it on the same /tmp/archive and starts the recording again
    deadline = time.monotonic() + 60
    while not (new := [r for r in cluster.market_data_recordings() if r["recordingId"] not in before]):
        assert time.monotonic() < deadline, "the restarted archive did not record the publisher again"
        time.sleep(0.5)
    status = cluster.publisher_status()
    assert status is not None
    assert new[-1]["stopPosition"] == -1 and new[-1]["sessionId"] == status["sessionId"]
