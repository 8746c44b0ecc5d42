"""Spark Connect on the cluster (issue 10): a thin client on another host uses format("aeron-archive") both ways.

The Connect server runs on the `driver` host (`start_service("connect")`), its executors on the two workers; the
client runs on `driver2` with nothing but pyspark's `connect` extra (this project's `connect` extra). Each
direction is checked against the data itself: the source recording's numbered trades, and what the sink wrote.
"""

from __future__ import annotations

import json
import random
import textwrap
import uuid

import pytest

from tests.cluster.test_connector import result_of
from tests.cluster.topology import CONNECT_SERVICE, Topology

pytestmark = pytest.mark.cluster

CLIENT = """
import json, sys, time
from pyspark.sql import SparkSession

config = json.loads(sys.argv[1])
spark = SparkSession.builder.remote(config["url"]).getOrCreate()
archive = {"controlChannel": config["controlChannel"]}
source = {**archive, "recordingId": config["recordingId"]}

# read: the live recording up to now
frame = spark.read.format("aeron-archive").options(**source).load()
read_rows = [[r.position, len(r.value)] for r in frame.select("position", "value").orderBy("position").collect()]

# write: numbered rows into a new recording, all or nothing
rows = spark.range(0, 3000, numPartitions=3).selectExpr("CAST(format_string('row-%08d', id) AS BINARY) AS value")
target = {**archive, "channel": config["writeChannel"], "streamId": config["writeStreamId"]}
rows.write.format("aeron-archive").mode("append").options(**target).save()
written = [bytes(r.value).decode() for r in spark.read.format("aeron-archive").options(**target).load()
           .select("position", "value").orderBy("position").collect()]

# readStream -> writeStream: what the live recording holds now, copied exactly once into another recording
copy = {**archive, "channel": config["copyChannel"], "streamId": config["copyStreamId"]}
query = (spark.readStream.format("aeron-archive").options(**source).option("startingPosition", "earliest")
         .option("maxBytesPerTrigger", "64k").load().select("value")
         .writeStream.format("aeron-archive").options(**copy)
         .option("checkpointLocation", config["checkpoint"]).trigger(availableNow=True).start())
query.awaitTermination(300)
copied = [bytes(r.value) for r in spark.read.format("aeron-archive").options(**copy).load()
          .select("position", "value").orderBy("position").collect()]
# the source read again, now: the copy must be its prefix (each message once, in order). A new plan (another
# option), since Spark Connect caches analysed plans and a Python source plans its partitions when analysed.
fresh = spark.read.format("aeron-archive").options(**source).option("endingPosition", "latest").load()
source_values = [bytes(r.value) for r in fresh.select("position", "value").orderBy("position").collect()]
print(json.dumps({"result": {
    "read": read_rows,
    "written": written,
    "copied": len(copied),
    "copyIsSourcePrefix": copied == source_values[: len(copied)],
    "sourceLength": len(source_values),
    "copiedUnique": len(set(copied)),
    "copyRecordings": sorted({r.recordingId for r in spark.read.format("aeron-archive").options(**copy).load()
                              .select("recordingId").collect()}),
    "progress": [{"batchId": p["batchId"], "rows": p["numInputRows"]} for p in query.recentProgress],
    "firstDifference": next((i for i, (a, b) in enumerate(zip(copied, source_values)) if a != b), None),
    "queryError": None if query.exception() is None else str(query.exception()),
}}))
spark.stop()
"""


@pytest.mark.timeout(900)
def test_a_connect_client_reads_and_writes_both_ways(healthy_cluster: Topology) -> None:
    cluster = healthy_cluster
    if cluster.service_pid(CONNECT_SERVICE) is None:
        cluster.start_service(CONNECT_SERVICE)
    live = [r for r in cluster.market_data_recordings() if r["stopPosition"] == -1][-1]
    archive_ip = cluster.ip("archive")
    config = {
        "url": cluster.connect_url,
        "controlChannel": cluster.archive_control_channel,
        "recordingId": str(live["recordingId"]),
        "writeChannel": f"aeron:udp?endpoint={archive_ip}:40610",
        "writeStreamId": str(7500 + random.randrange(400)),
        "copyChannel": f"aeron:udp?endpoint={archive_ip}:40611",
        "copyStreamId": str(7900 + random.randrange(90)),
        "checkpoint": f"{cluster.checkpoint_dir}/connect-{uuid.uuid4().hex}",
    }
    try:
        result = cluster.run(
            "driver2", [cluster.python, "-c", textwrap.dedent(CLIENT), json.dumps(config)], timeout=800
        )
    finally:
        cluster.kill_service(CONNECT_SERVICE)  # its application holds both workers' cores
    assert result.returncode == 0, result.stderr[-5000:]
    out = result_of(result.stdout)
    positions = [p for p, _ in out["read"]]
    assert positions and positions[0] == live["startPosition"]
    assert len(set(positions)) == len(positions)
    assert out["written"] == [f"row-{i:08d}" for i in range(3000)]
    assert out["queryError"] is None, out["queryError"]
    assert out["copied"] >= len(positions), "the stream copied less than the batch read saw earlier"
    assert out["copyIsSourcePrefix"], {
        k: out[k] for k in ("copied", "sourceLength", "firstDifference", "copiedUnique", "copyRecordings", "progress")
    }
