"""Spark applications the connector's cluster tests run on the `driver`/`driver2` hosts (see test_connector.py).

`python jobs.py COMMAND CONFIG_JSON`; every command prints its result as one JSON line on stdout (progress goes
to stderr). The config names the master, this host's address, the archive's control channel and the recording or
target; nothing else about the topology is known here, as for a user's job: no `aeronDir` (the driver host runs
no media driver), no archiveDir, default response and replay channels (each process finds its own address).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from typing import Any

from pyspark.sql import DataFrame, SparkSession


def log(message: str) -> None:
    print(f"[job {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def session(config: dict[str, Any], name: str) -> SparkSession:
    builder = (
        SparkSession.builder.master(config["master"])
        .appName(name)
        .config("spark.driver.host", config["driverIp"])
        .config("spark.driver.bindAddress", config["driverIp"])
        .config("spark.driver.memory", "768m")
        .config("spark.executor.memory", "768m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
        .config("spark.ui.port", "4040")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "4")
        .config("spark.sql.streaming.stopTimeout", "60s")
    )
    for key, value in config.get("sparkConf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def archive_options(config: dict[str, Any]) -> dict[str, str]:
    options = {"controlChannel": config["controlChannel"], "messageTimeout": "10s"}
    options.update(config.get("options", {}))
    return options


def task_hosts(spark: SparkSession, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every task of the application as Spark's own status API reports it: stage, partition, host, executor."""
    app = spark.sparkContext.applicationId
    base = f"http://{config['driverIp']}:4040/api/v1/applications/{app}"
    with urllib.request.urlopen(f"{base}/stages", timeout=10) as response:
        stages = json.load(response)
    tasks: list[dict[str, Any]] = []
    for stage in stages:
        url = f"{base}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=10000"
        with urllib.request.urlopen(url, timeout=10) as response:
            for task in json.load(response):
                tasks.append(
                    {
                        "stage": stage["stageId"],
                        "partition": task["index"],
                        "host": task["host"],
                        "executorId": task["executorId"],
                        "status": task["status"],
                        "speculative": task.get("speculative", False),
                    }
                )
    return tasks


def read(config: dict[str, Any]) -> dict[str, Any]:
    """Batch reads (`reads`: a list of option sets, else `options`), partitions replayed by the executors.

    Rows are [recordingId, position, tradeId, payload length] with SBE columns (`sbeSchema` set), else
    [recordingId, position, value as text (latin-1: any bytes, losslessly)].
    """
    spark = session(config, "aas-cluster-read")
    result = read_with(spark, config)
    spark.stop()
    return result


def read_with(spark: SparkSession, config: dict[str, Any]) -> dict[str, Any]:
    """`read` in an application that is already running (other jobs end with their checks in the same one)."""
    results = []
    for options in config.get("reads") or [config.get("options", {})]:
        frame = spark.read.format("aeron-archive").options(**archive_options({**config, "options": options})).load()
        if "sbeSchema" in options:
            rows = [
                [r.recordingId, r.position, r.tradeId, len(r.value)]
                for r in frame.select("recordingId", "position", "tradeId", "value").collect()
            ]
        else:
            rows = [
                [r.recordingId, r.position, bytes(r.value).decode("latin-1")]
                for r in frame.select("recordingId", "position", "value").orderBy("position").collect()
            ]
        results.append({"partitions": frame.rdd.getNumPartitions(), "rows": rows})
    # `timeWindow`: a read by time too, in the same application (a Spark application costs ~40 s to start here)
    window = time_window(spark, config) if config.get("timeWindow") else None
    firewalled = behind_firewall(spark, config, results[0]["rows"]) if config.get("firewall") else None
    return {
        **results[0],
        "reads": results,
        "timeWindow": window,
        "firewalled": firewalled,
        "tasks": task_hosts(spark, config),
    }


def behind_firewall(spark: SparkSession, config: dict[str, Any], rows: list[list[Any]]) -> dict[str, Any]:
    """Once the test has dropped new inbound UDP on the driver and worker hosts (it is told on stdout, and answers
    on stdin): the first read again up to where it ended, with `responseChannels=true`, and then without the option
    and a short message timeout (a session key of its own, so no pooled session's established flows help it),
    which must fail: rows of the first, and the second's error and how long it took."""
    options = archive_options({**config, "options": (config.get("reads") or [config.get("options", {})])[0]})
    last = max(rows, key=lambda r: r[1])
    end = last[1] + ((last[3] + 32 + 31) & ~31)  # the frame after the last message read (rows with SBE columns)
    options["endingPosition"] = json.dumps({str(last[0]): end})
    print("FIREWALL?", flush=True)
    if sys.stdin.readline().strip() != "FIREWALL UP":
        raise RuntimeError("the test did not raise the firewall")
    frame = spark.read.format("aeron-archive").options(**options, responseChannels="true").load()
    response_rows = [
        [r.recordingId, r.position, r.tradeId, len(r.value)]
        for r in frame.select("recordingId", "position", "tradeId", "value").collect()
    ]
    started = time.monotonic()
    try:
        spark.read.format("aeron-archive").options(**{**options, "messageTimeout": "1500ms"}).load().count()
        refused = None
    except Exception as ex:
        refused = str(ex)[-3000:]
    return {"rows": response_rows, "refused": refused, "refusedAfterS": time.monotonic() - started}


def time_window(spark: SparkSession, config: dict[str, Any]) -> dict[str, Any]:
    """The recording read whole, then the middle third of its recorded times read as a window (startingTimestamp,
    endingTimestamp): rows [position, tradeId, recorded time in us] of each, and the window's edges (ms)."""
    options = archive_options(config)

    def rows_of(extra: dict[str, str]) -> list[list[int]]:
        frame = spark.read.format("aeron-archive").options(**options, **extra).load()
        return [
            [r.position, r.tradeId, int(r.timestamp.timestamp() * 1_000_000)]
            for r in frame.select("position", "tradeId", "timestamp").orderBy("position").collect()
        ]

    whole = rows_of({})
    times = [r[2] for r in whole]
    edges = [times[len(times) // 3] // 1000, times[2 * len(times) // 3] // 1000]
    window = rows_of({"startingTimestamp": str(edges[0]), "endingTimestamp": str(edges[1])})
    return {"whole": whole, "window": window, "edges": edges}


def stream_read(config: dict[str, Any]) -> dict[str, Any]:
    """Tail the live recording with readStream until `minRows` rows arrived or `seconds` passed since the first batch.

    The clock starts at the first batch, not at the query's start: that batch pays the executors' and Python
    workers' start, 15-25 s on a loaded two-core machine, and a test's window is about the stream after it. A
    query that stops on its own without an exception (Spark's stream thread can die of a StackOverflowError in its
    own error handling) is reported as an error, never as a short but clean result.
    """
    spark = session(config, "aas-cluster-stream-read")
    seen: list[list[int]] = []
    batches: list[int] = []

    def collect(frame: DataFrame, batch_id: int) -> None:
        rows = frame.select("recordingId", "position", "tradeId").collect()
        seen.extend([r.recordingId, r.position, r.tradeId] for r in rows)
        batches.append(batch_id)
        log(f"batch {batch_id}: {len(rows)} rows")
        if rows:
            print(json.dumps({"progress": batch_id, "rows": len(rows)}), flush=True)

    query = (
        spark.readStream.format("aeron-archive")
        .options(**archive_options(config))
        .load()
        .writeStream.foreachBatch(collect)
        .trigger(processingTime="1 second")
        .option("checkpointLocation", config["checkpoint"])
        .start()
    )
    window = config.get("seconds", 60)
    deadline = time.monotonic() + config.get("startupSeconds", 180) + window
    while len(seen) < config["minRows"] and time.monotonic() < deadline and query.exception() is None:
        if batches and deadline - time.monotonic() > window:
            deadline = time.monotonic() + window  # the first batch arrived: `seconds` from now
        if not query.isActive:
            break
        time.sleep(0.5)
    error = query.exception()
    stopped = None if error is not None or query.isActive else "the query stopped on its own, without an exception"
    query.stop()
    result = {"rows": seen, "batches": batches, "error": str(error) if error is not None else stopped}
    spark.stop()
    return result


def stream_copy(config: dict[str, Any]) -> dict[str, Any]:
    """readStream of the live recording -> writeStream into a new recording of the archive, exactly once.

    Runs until `untilBatches` batches were committed in this run or `seconds` passed; a test may kill it at any
    moment (the driver dies) and run it again on another host with the same checkpoint.
    """
    spark = session(config, "aas-cluster-stream-copy")
    source = spark.readStream.format("aeron-archive").options(**archive_options(config)).load()
    sink_options = {"controlChannel": config["controlChannel"], **config.get("sinkOptions", {})}
    query = (
        source.select("value")
        .writeStream.format("aeron-archive")
        .options(**sink_options)
        .option("checkpointLocation", config["checkpoint"])
        .trigger(processingTime=config.get("trigger", "1 second"))
        .start()
    )
    committed = 0
    deadline = time.monotonic() + config.get("seconds", 120)
    last_batch = None
    while committed < config.get("untilBatches", 5) and time.monotonic() < deadline:
        if query.exception() is not None:
            break
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != last_batch and progress.get("numInputRows", 0) > 0:
            last_batch = progress["batchId"]
            committed += 1
            log(f"batch {last_batch} done ({progress['numInputRows']} rows)")
            print(json.dumps({"progress": last_batch}), flush=True)
        time.sleep(0.2)
    error = query.exception()
    query.stop()
    result: dict[str, Any] = {"batches": committed, "error": None if error is None else str(error)}
    if error is None and config.get("thenRead"):
        result["read"] = read_with(spark, {**config, "reads": config["thenRead"]})
    spark.stop()
    return result


def write_numbered(spark: SparkSession, config: dict[str, Any], fail: int | None) -> str | None:
    """df.write of `rows` numbered rows into the target; with `fail`, that partition always fails. The error."""

    def values(index: int, iterator: Any) -> Any:
        if fail is not None and index == fail:
            raise RuntimeError(f"partition {index} fails on purpose")
        for row in iterator:
            yield (f"row-{row.id:08d}".encode(),)

    frame = spark.range(0, config["rows"], numPartitions=config.get("partitions", 4))
    data = spark.createDataFrame(frame.rdd.mapPartitionsWithIndex(values), "value binary")
    writer = data.write.format("aeron-archive").mode("append").options(**config["sinkOptions"])
    try:
        writer.option("controlChannel", config["controlChannel"]).save()
    except Exception as ex:  # the failing variant: the job fails, nothing may be visible
        return str(ex)[:2000]
    return None


def batch_write(config: dict[str, Any]) -> dict[str, Any]:
    """A write whose task `failPartition` always fails (the job fails), the same write succeeding, then a read."""
    spark = session(config, "aas-cluster-batch-write")
    failed = write_numbered(spark, config, config["failPartition"])
    listed = recordings_of(config)
    error = write_numbered(spark, config, None)
    result = {"failedError": failed, "afterFailure": listed, "error": error}
    if error is None:
        result["read"] = read_with(spark, {**config, "options": config["sinkOptions"]})
    spark.stop()
    return result


def recordings_of(config: dict[str, Any]) -> list[int]:
    """Recording ids of the target's channel and stream, asked from the archive (no Spark)."""
    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.archive.client.pool import connection_pool

    options = config["sinkOptions"]
    with connection_pool().archive(ConnectionOptions(control_channel=config["controlChannel"])) as archive:
        found = archive.list_recordings_for_uri(0, 1000, options["channel"], int(options["streamId"]))
    return [d.recording_id for d in found]


COMMANDS = {
    "read": read,
    "stream-read": stream_read,
    "stream-copy": stream_copy,
    "batch-write": batch_write,
}


def main() -> None:
    command, raw = sys.argv[1], sys.argv[2]
    result = COMMANDS[command](json.loads(raw))
    print(json.dumps({"result": result}), flush=True)


if __name__ == "__main__":
    main()
