"""Task retries (`local[2,3]`): a failed write attempt's rows never reach the recording.

Spark only retries tasks when the master allows failures, so this runs a short-lived session in a child process
(the shared session stays `local[2]`). Attempt 0 of partition 0 fails after its rows are completely staged (its
commit message built, never delivered), and attempt 0 of partition 1 fails (raising, or crashing its Python
worker) halfway through staging, in every batch; the retries succeed. The recording must hold each row exactly
once, in order, and the sink must have made no recording but its target and its log. The child inherits
$AERON_ARCHIVE_SPARK_FAULT_DIR (tests/conftest.py), so its Spark workers see the faults armed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from spark.test_sink_stream import ROWS_PER_BATCH, assert_exactly_once
from system.harness import Harness
from system.test_sink_util import sink_option_map

from aeron_archive_spark.archive.client.pool import connection_pool
from aeron_archive_spark.connector.sink import faults

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import json, sys, time
from pyspark.sql import SparkSession
args = json.loads(sys.argv[1])
spark = (SparkSession.builder.master("local[2,3]").appName("sink-retries")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.python.worker.reuse", "true").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
frame = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", args["rows"])
         .option("numPartitions", 2).load()
         .selectExpr("CAST(value AS STRING) AS value", "value AS reservedValue"))
writer = frame.writeStream.format("aeron-archive").option("checkpointLocation", args["checkpoint"])
for key, value in args["options"].items():
    writer = writer.option(key, value)
query = writer.trigger(processingTime="0 seconds").start()
deadline = time.monotonic() + 180
while query.isActive and time.monotonic() < deadline:
    progress = query.lastProgress
    if progress is not None and progress["batchId"] >= args["batches"] - 1:
        break
    time.sleep(0.1)
error = query.exception()
query.stop()
spark.stop()
print(json.dumps({"error": None if error is None else str(error)}))
"""


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def test_failed_task_attempts_leave_no_trace(harness, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    batches = 4
    specs = []
    for batch in range(batches):
        specs.append({"point": "after-stage", "batchId": batch, "partition": 0, "attempt": 0, "action": "raise"})
        specs.append({"point": "write", "batchId": batch, "partition": 1, "attempt": 0,
                      "afterRows": ROWS_PER_BATCH // 4, "action": "exit" if batch % 2 else "raise"})
    faults.arm(*specs)
    args = {"rows": ROWS_PER_BATCH, "checkpoint": checkpoint, "batches": batches,
            "options": sink_option_map(harness, None)}
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], env=env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-4000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["error"] is None, result["error"]
    assert faults.armed() == [], "every armed task failure must have fired"
    # exactly the successful attempts' rows, in order, with nothing after the last committed batch; no recording
    # besides the target and the sink log (failed attempts leave nothing to sweep: their rows lived only in them)
    committed = assert_exactly_once(harness, checkpoint)
    assert committed >= batches
