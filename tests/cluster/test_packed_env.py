"""The package reaches workers that do not have it, in a packed environment shipped with `spark.archives` (issue 10).

Spark's documented way to ship Python dependencies
(https://spark.apache.org/docs/latest/api/python/user_guide/python_packaging.html): pack a venv
(tests/cluster/packaging.py: this project's wheel and its runtime dependencies but pyspark, packed with venv-pack),
pass it as `spark.archives=env.tar.gz#environment` and run Python as `./environment/bin/python`. Executors unpack it
in their working directory; they take pyspark from $SPARK_HOME/python/lib/pyspark.zip as always.

The workers must not see the project otherwise: `hide_project_on_workers()` covers its .venv install and the
repository's package directories inside the worker hosts' mount namespaces (the .venv's python, pyspark and Java
stay: the workers run from them). The test first shows that this really hides the package (no import on a worker
host, and a plain read fails on the executors), then reads the live recording with the packed environment, on both
workers, with the package imported from the archive each executor unpacked. The driver host keeps the project.

A Python data source's interpreter is one path for the driver and the executors: Spark gives the data source's
planning on the driver and its reads on the executors the same `pythonExec`, taken from the driver's
PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON. A relative `./environment/bin/python` therefore needs `environment` in
the driver's working directory too (here: the same archive unpacked there), and PYSPARK_DRIVER_PYTHON must not name
another interpreter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.packaging import PROJECT_DIR, packed_env
from tests.cluster.test_connector import (
    JOBS,
    SCHEMA_ON_DRIVER,
    assert_exact,
    config_for,
    copy_schema,
    live_recording,
    result_of,
    worker_of,
)
from tests.cluster.topology import Topology

pytestmark = pytest.mark.cluster

JOB_DIR = "/tmp/aas-packed-env"  # in the driver host's private /tmp: the driver's working directory
ENV_NAME = "environment"
PACKED_PYTHON = f"./{ENV_NAME}/bin/python"
NOT_INSTALLED = ("aeron_archive_spark", "aeron_archive_spark.connector.datasource", "pyspark_aeron_archive")

# Reads the recording and reports, from inside each partition's task, the host, the Python running it and where
# the package was imported from; plus Spark's own record of where the tasks ran.
PROBE_JOB = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import jobs

config = json.loads(sys.argv[2])
spark = jobs.session(config, "aas-cluster-packed-env")
frame = spark.read.format("aeron-archive").options(**jobs.archive_options(config)).load()


def probe(rows):
    import socket, sys
    import aeron_archive_spark.connector.datasource as datasource
    yield {
        "host": socket.gethostname(),
        "executable": sys.executable,
        "datasource": datasource.__file__,
        "rows": [[r.recordingId, r.position, r.tradeId, len(r.value)] for r in rows],
    }


probes = frame.select("recordingId", "position", "tradeId", "value").rdd.mapPartitions(probe).collect()
result = {"probes": probes, "tasks": jobs.task_hosts(spark, config)}
spark.stop()
print(json.dumps({"result": result}), flush=True)
"""


def read_options(live: dict[str, Any]) -> dict[str, str]:
    return {"recordingId": str(live["recordingId"]), "sbeSchema": SCHEMA_ON_DRIVER, "maxBytesPerPartition": "32k"}


def assert_not_importable(cluster: Topology, host: str) -> None:
    for module in NOT_INSTALLED:
        result = cluster.run(host, [cluster.python, "-c", f"import {module}"], timeout=60)
        assert result.returncode != 0, f"{module} is importable on {host}"
        assert "ModuleNotFoundError" in result.stderr, result.stderr[-2000:]
    listing = cluster.run(host, ["ls", "-A", str(PROJECT_DIR / "connector")], timeout=10, check=True)
    assert listing.stdout == "", f"{host} sees the repository's connector/: {listing.stdout[:200]}"


def unpack_on_driver(cluster: Topology, archive: Path) -> str:
    """The archive copied into the driver's working directory, and unpacked there as `environment`."""
    script = f"rm -rf {JOB_DIR}; mkdir -p {JOB_DIR}/{ENV_NAME}; cp {archive} {JOB_DIR}/env.tar.gz\n"
    script += f"tar -xzf {JOB_DIR}/env.tar.gz -C {JOB_DIR}/{ENV_NAME}"
    cluster.run("driver", ["sh", "-ec", script], timeout=120, check=True)
    return f"{JOB_DIR}/env.tar.gz"


@pytest.mark.timeout(900)
def test_a_packed_environment_brings_the_package_to_workers_without_it(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    archive = packed_env()  # built (or cached) before anything is hidden
    copy_schema(cluster, "driver")
    live = live_recording(cluster, 256 * 1024)
    cluster.hide_project_on_workers()
    try:
        # the workers do not have the package; the driver host does
        for worker in cluster.workers:
            assert_not_importable(cluster, worker)
        assert cluster.run("driver", [cluster.python, "-c", "import pyspark_aeron_archive"], timeout=60).returncode == 0

        # so a plain read (the driver plans it) fails on the executors
        config = config_for(cluster, "driver", options=read_options(live), sparkConf={"spark.task.maxFailures": "1"})
        plain = cluster.run("driver", [cluster.python, str(JOBS), "read", json.dumps(config)], timeout=300)
        assert plain.returncode != 0, "a read succeeded on workers without the package"
        assert "ModuleNotFoundError: No module named 'aeron_archive_spark'" in plain.stderr, plain.stderr[-4000:]

        # with the packed environment, it reads on both workers
        shipped = unpack_on_driver(cluster, archive)
        spark_conf = {
            "spark.archives": f"{shipped}#{ENV_NAME}",
            "spark.executorEnv.PYSPARK_PYTHON": PACKED_PYTHON,
        }
        config = config_for(cluster, "driver", options=read_options(live), sparkConf=spark_conf)
        env = {"PYSPARK_PYTHON": PACKED_PYTHON, "PYSPARK_DRIVER_PYTHON": PACKED_PYTHON}
        argv = [cluster.python, "-c", PROBE_JOB, str(JOBS.parent), json.dumps(config)]
        packed = cluster.run("driver", argv, env=env, cwd=JOB_DIR, timeout=600)
        assert packed.returncode == 0, f"the read with the packed environment failed:\n{packed.stderr[-6000:]}"
        result = result_of(packed.stdout)
    finally:
        cluster.show_project_on_workers()
        cluster.run("driver", ["rm", "-rf", JOB_DIR], timeout=60)

    probes = result["probes"]
    rows = [row for probe in probes for row in probe["rows"]]
    assert_exact(rows, start_position=live["startPosition"])
    assert {r[0] for r in rows} == {live["recordingId"]}
    assert len(probes) >= 8
    assert {probe["host"] for probe in probes} == set(cluster.workers), [p["host"] for p in probes]
    for probe in probes:
        assert probe["executable"].endswith(f"/{ENV_NAME}/bin/python"), probe["executable"]
        assert f"/{ENV_NAME}/lib/" in probe["datasource"], probe["datasource"]
        assert not probe["datasource"].startswith(str(PROJECT_DIR)), probe["datasource"]
    read_tasks = [t for t in result["tasks"] if t["status"] == "SUCCESS"]
    assert {worker_of(cluster, t["host"]) for t in read_tasks} == set(cluster.workers)
    # and the project is visible on the workers again
    for worker in cluster.workers:
        assert cluster.run(worker, [cluster.python, "-c", "import pyspark_aeron_archive"], timeout=60).returncode == 0
