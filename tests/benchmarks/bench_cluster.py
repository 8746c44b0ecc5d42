"""The connector on the namespace cluster of tests/cluster beside the same work on one host, same run (issue 10).

Sink: a streaming query from the in-memory bench source of `bench_spark_sink` (1 KiB values) into
- the aeron-archive sink on the cluster (driver on `driver`, two 1-core executors on `worker1`/`worker2`, the archive
  on `archive`, over UDP; rows travel to the driver in commit messages),
- the same sink on one host (`local[2]` on the archive host, IPC to the archive's own media driver),
- the no-op Arrow sink on the cluster (the Python sink API's ceiling there),
- with `--staging`, the other design issue 10 names, on the cluster: executors publish each task's rows into a
  staging recording of their own, which the commit replays to the driver and appends to the target
  (`tests/benchmarks/staging_sink.py`, built only to be measured against the product's design).
Read: a batch read of the recording the cluster sink wrote, on the cluster (no archiveDir: each executor replays
its partitions over UDP), with the source's default `replayMtu` and with `replayMtu=recording` (replays at the
recording's MTU, as Java's archive sends them), alternated in one Spark application, beside a `local[2]`
`archiveDir` read of the same recording on the archive host; MB/s in all and per executor.
Replay (issue 36, `cluster_java_archive.py`, first; `--replay-only` alone, a few minutes): a Java archive (1.53,
else 1.15.1) beside ours on the archive host records the same stream; a consumer on `worker1` replays each copy
over UDP, alternated: Java's, ours at the recording's MTU, ours asked for `--replay-mtu`; CPU seconds per 100 MB of
the serving archive process (its media driver included) and of the archive host, and ours / Java's.

Figures are MB/s of value bytes over the action's wall time (Spark application start-up excluded), medians of
`--reps` runs. The machine has 2 cores for every JVM, Python worker, media driver and the archive of all hosts, so
compare ratios taken in one run, never absolute figures.

Values: a fixed pattern by default, which the sink's LZ4-compressed commit messages shrink ~20x; with
`--random-values`, incompressible bytes (what compression cannot help). Run both before drawing conclusions.

Run (root; brings the topology up if it is not, and down again unless it was up):
`python -m tests.benchmarks.bench_cluster [--rows N] [--reps N] [--random-values] [--replay-only | --no-replay]
[--replay-mb 200] [--replay-mtu 8192] [--java auto|1.53|1.15|none]`, or `bash ci/bench.sh cluster ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2]
VALUE_SIZE = 1024


def _session(config: dict[str, Any], name: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(config["master"])
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
    )
    if config["master"].startswith("spark://"):
        builder = (
            builder.config("spark.driver.host", config["driverIp"])
            .config("spark.driver.bindAddress", config["driverIp"])
            .config("spark.executor.memory", "1g")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", "2")
            .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
            .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
            .config("spark.executorEnv.PYTHONPATH", str(PROJECT))
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def sink_job(config: dict[str, Any]) -> dict[str, Any]:
    """Alternated no-op / aeron-archive streaming queries; seconds per run, and the recording last written."""
    from aeron_archive_spark.archive.client.connection import ConnectionOptions
    from aeron_archive_spark.connector.sink import read_batch_map
    from tests.benchmarks.bench_spark_sink import BenchSource, NoopSink, run_query
    from tests.benchmarks.staging_sink import StagingRecordingsSink

    spark = _session(config, "bench-cluster-sink")
    spark.dataSource.register(BenchSource)
    spark.dataSource.register(NoopSink)
    spark.dataSource.register(StagingRecordingsSink)
    work = f"/tmp/bench-{uuid.uuid4().hex}"
    Path(work).mkdir()
    rows, batch_rows = config["rows"], config["batchRows"]
    sinks = [("aeron-archive", config["sinkOptions"])] + ([("bench-noop", {})] if config.get("noop") else [])
    if config.get("stagingOptions"):
        sinks.append(("bench-staging-recordings", config["stagingOptions"]))
    warm = max(batch_rows // 2, 1)
    kind = config.get("valueKind", "pattern")
    for sink, options in sinks:
        run_query(spark, sink, options, VALUE_SIZE, warm, warm, work, kind)
    seconds: dict[str, list[float]] = {sink: [] for sink, _ in sinks}
    intervals: dict[str, list[list[float]]] = {sink: [] for sink, _ in sinks}
    for _ in range(config["reps"]):
        for sink, options in sinks:
            wall = time.time()
            seconds[sink].append(run_query(spark, sink, options, VALUE_SIZE, rows, batch_rows, work, kind).seconds)
            intervals[sink].append([wall, time.time()])
    connection = ConnectionOptions(
        aeron_dir=config["sinkOptions"].get("aeronDir"), control_channel=config["sinkOptions"]["controlChannel"]
    )
    last = sorted(Path(work).glob("chk-aeron-archive-*"), key=lambda p: p.stat().st_mtime)[-1]
    entries = read_batch_map(connection, checkpoint_location=str(last))
    staged = sorted(Path(work).glob("chk-bench-staging-recordings-*"), key=lambda p: p.stat().st_mtime)
    if staged:  # design 2 wrote every row exactly once too: its last run's batch map covers `rows` rows
        staged_entries = read_batch_map(connection, checkpoint_location=str(staged[-1]))
        if sum(e.rows for e in staged_entries) != rows:
            raise RuntimeError(f"staging-recordings sink: {sum(e.rows for e in staged_entries)} rows, not {rows}")
    spark.stop()
    return {"seconds": seconds, "intervals": intervals, "recordingId": entries[-1].recording_id, "rows": rows}


def machine_jiffies() -> tuple[int, int]:
    """(busy, all) jiffies of the whole machine from /proc/stat: every host here shares its cores, and /proc/stat
    counts them whatever namespace reads it, exactly and at no cost (the per-host sampler reads every thread of
    every process twice a second and interpolates: on runs of a few seconds it lost whole hosts' CPU)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values[:8]) - idle, sum(values[:8])


def read_job(config: dict[str, Any]) -> dict[str, Any]:
    """Timed batch reads of one recording, one per variant (option sets) in turn each rep, in one Spark application
    so the variants share its executors; seconds and wall-clock intervals per variant."""
    spark = _session(config, "bench-cluster-read")
    variants: dict[str, dict[str, str]] = config["variants"]
    frames = {name: spark.read.format("aeron-archive").options(**options).load() for name, options in variants.items()}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    intervals: dict[str, list[list[float]]] = {name: [] for name in variants}
    busy: dict[str, list[float]] = {name: [] for name in variants}
    cores = os.cpu_count() or 1
    total = 0
    for rep in range(config["reps"] + 1):  # the first is a warm-up
        order = list(frames.items())  # each rep starts with another variant: none always runs first
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for name, frame in order:
            start, wall, jiffies = time.perf_counter(), time.time(), machine_jiffies()
            total = frame.selectExpr("sum(length(value)) AS bytes").collect()[0].bytes
            if rep:
                seconds[name].append(time.perf_counter() - start)
                intervals[name].append([wall, time.time()])
                used, spent = (b - a for a, b in zip(jiffies, machine_jiffies(), strict=True))
                busy[name].append(cores * used / max(1, spent))
    # Block managers: one per executor plus the driver's (local mode: the driver's alone, which runs the tasks).
    executors = max(1, spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)
    spark.stop()
    return {"seconds": seconds, "intervals": intervals, "busy": busy, "bytes": total, "executors": executors}


def _thread_group(name: str) -> str:
    """A thread name without its numbers, so that e.g. a pool's "Executor task launch worker-3" threads add up."""
    return re.sub(r"[-_ #]*\d+", "", name).strip() or name


def _cpu_seconds(topology: Any) -> dict[str, float]:
    """CPU seconds (user + system, with reaped children) of every process on each host so far.

    A host is a network namespace: `ip netns pids` lists its processes. Processes that ended and were reaped by a
    parent on the host (Python workers of an executor) count through the parent's cutime/cstime; the Spark
    application's executors are reaped by their worker daemon, which stays up.

    Besides one total per host, keys "host/process/thread" split each live process's own CPU by thread name (Aeron's
    C threads, the JVM's named pools, Python's main thread), so the cost of a run can be pinned on what spent it.
    """
    import os
    import subprocess

    from tests.cluster.topology import HOST_OCTETS

    tick = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for host in HOST_OCTETS:
        netns = topology.host(host).netns
        listed = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
        total = 0
        for pid in listed.stdout.split():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    comm, rest = f.read().split("(", 1)[1].rsplit(")", 1)
                fields = rest.split()
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # ended meanwhile
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
            children = int(fields[13]) + int(fields[14])
            if children:
                key = f"{host}/{comm}/(reaped children)"
                totals[key] = totals.get(key, 0.0) + children / tick
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
                except OSError:
                    continue
                used = sum(int(v) for v in rest.split()[11:13])
                if used:
                    key = f"{host}/{comm}/{_thread_group(name)}"
                    totals[key] = totals.get(key, 0.0) + used / tick
        totals[host] = total / tick
    return totals


class CpuSampler:
    """Samples every host's CPU seconds twice a second, so a job's timed runs can be costed after the fact."""

    def __init__(self, topology: Any, interval: float = 0.5) -> None:
        import threading

        self.topology = topology
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), _cpu_seconds(self.topology)))
            self._stop.wait(self.interval)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _at(self, when: float) -> dict[str, float]:
        """Totals at `when`, interpolated between the samples around it."""
        before = max((s for s in self.samples if s[0] <= when), default=self.samples[0], key=lambda s: s[0])
        after = min((s for s in self.samples if s[0] >= when), default=self.samples[-1], key=lambda s: s[0])
        if after[0] <= before[0]:
            return before[1]
        share = (when - before[0]) / (after[0] - before[0])
        keys = before[1].keys() | after[1].keys()
        return {
            h: before[1].get(h, 0.0) + share * (after[1].get(h, before[1].get(h, 0.0)) - before[1].get(h, 0.0))
            for h in keys
        }

    def between(self, intervals: list[list[float]]) -> dict[str, float]:
        """CPU seconds per host spent inside the given [start, end] wall-clock intervals."""
        total: dict[str, float] = {}
        for start, end in intervals:
            a, b = self._at(start), self._at(end)
            for host in a.keys() | b.keys():
                total[host] = total.get(host, 0.0) + max(0.0, b.get(host, a.get(host, 0.0)) - a.get(host, 0.0))
        return total


def _print_cpu(name: str, megabytes: float, cpu: dict[str, float], seconds: float) -> dict[str, float]:
    """CPU seconds per 100 MB by host, and how many of the machine's cores the run kept busy; then the threads that
    spent the most (threads of processes that ended inside the run are missing there, not from the host totals)."""
    busy = {host: value for host, value in cpu.items() if "/" not in host and value >= 0.05}
    total = sum(busy.values())
    per = ", ".join(f"{host} {value * 100 / megabytes:.1f}" for host, value in sorted(busy.items()))
    cores = os.cpu_count() or 1
    print(
        f"  {name:<26} CPU s per 100 MB: {total * 100 / megabytes:5.1f} ({per}); "
        f"{total / seconds:.2f} of {cores} cores busy"
    )
    threads = sorted(((v, k) for k, v in cpu.items() if "/" in k and v * 100 / megabytes >= 0.1), reverse=True)
    for value, key in threads[:14]:
        print(f"      {value * 100 / megabytes:5.2f}  {key}")
    return {"cpuSecondsPer100MB": total * 100 / megabytes, "coresBusy": total / seconds}


def _on(topology: Any, host: str, command: str, config: dict[str, Any]) -> dict[str, Any]:
    from tests.benchmarks.cluster_java_archive import run_on

    value: dict[str, Any] = run_on(topology, host, "tests.benchmarks.bench_cluster", command, config, 1800)
    return value


def _sink_and_read(topology: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The Spark part: sinks on the cluster and on one host, then the batch reads; prints figures, returns the
    JSON line's fields."""
    archive_ip, master = topology.ip("archive"), topology.master_url
    mtu = f"|mtu={args.mtu}" if args.mtu else ""
    cluster_sink = {
        "controlChannel": topology.archive_control_channel,
        "channel": f"aeron:udp?endpoint={archive_ip}:40700|term-length=16m{mtu}",
        "streamId": "9100",
    }
    one_host_sink = {
        "aeronDir": topology.archive_aeron_dir,
        "controlChannel": topology.archive_control_channel,
        "sourceLocation": "local",
        "channel": f"aeron:ipc?term-length=16m{mtu}",
        "streamId": "9200",
    }
    common = {
        "rows": args.rows,
        "batchRows": args.batch_rows,
        "reps": args.reps,
        "valueKind": "random" if args.random_values else "pattern",
    }
    with CpuSampler(topology) as sampler:
        cluster = _on(
            topology,
            "driver",
            "sink",
            {
                **common,
                "master": master,
                "driverIp": topology.ip("driver"),
                "sinkOptions": cluster_sink,
                "noop": True,
                "stagingOptions": {**cluster_sink, "streamId": "9300"} if args.staging else None,
            },
        )
        one_host = _on(
            topology,
            "archive",
            "sink",
            {**common, "master": "local[2]", "driverIp": archive_ip, "sinkOptions": one_host_sink},
        )
        recording = str(cluster["recordingId"])
        remote = {"controlChannel": topology.archive_control_channel, "recordingId": recording}
        # The source's default replay MTU against replays at the recording's MTU (Java's archive's only way).
        read_variants = {
            "cluster read": remote,
            "cluster read replayMtu=recording": {**remote, "replayMtu": "recording"},
            # Control responses and replays over response channels (no inbound port on the executors).
            "cluster read responseChannels": {**remote, "responseChannels": "true"},
        }
        read_cluster = _on(
            topology,
            "driver",
            "read",
            {"master": master, "driverIp": topology.ip("driver"), "reps": args.reps, "variants": read_variants},
        )
        read_local = _on(
            topology,
            "archive",
            "read",
            {
                "master": "local[2]",
                "driverIp": archive_ip,
                "reps": args.reps,
                "variants": {
                    "local[2] archiveDir read": {"archiveDir": topology.archive_dir, "recordingId": recording}
                },
            },
        )
    cpu_sinks = {
        "cluster aeron-archive": sampler.between(cluster["intervals"]["aeron-archive"]),
        "cluster no-op": sampler.between(cluster["intervals"]["bench-noop"]),
        "one host aeron-archive": sampler.between(one_host["intervals"]["aeron-archive"]),
    }
    if args.staging:
        cpu_sinks["cluster staging recordings"] = sampler.between(cluster["intervals"]["bench-staging-recordings"])
    reads = {**read_cluster["seconds"], **read_local["seconds"]}
    cpu_reads = {
        name: sampler.between(run["intervals"][name]) for run in (read_cluster, read_local) for name in run["seconds"]
    }

    megabytes = args.rows * VALUE_SIZE / 1e6
    sink = {
        "cluster aeron-archive": megabytes / statistics.median(cluster["seconds"]["aeron-archive"]),
        "cluster no-op": megabytes / statistics.median(cluster["seconds"]["bench-noop"]),
        "one host aeron-archive": megabytes / statistics.median(one_host["seconds"]["aeron-archive"]),
    }
    if args.staging:
        sink["cluster staging recordings"] = megabytes / statistics.median(
            cluster["seconds"]["bench-staging-recordings"]
        )
    read_mb = read_cluster["bytes"] / 1e6
    read = {name: read_mb / statistics.median(seconds) for name, seconds in reads.items()}
    for name, value in sink.items():
        print(f"  {name:<34} {value:8.1f} MB/s")
    for name, value in read.items():
        executors = read_cluster["executors"]
        per = f", {value / executors:6.1f} MB/s per executor ({executors})" if name in read_cluster["seconds"] else ""
        machine = {**read_cluster["busy"], **read_local["busy"]}[name]
        print(f"  {name:<34} {value:8.1f} MB/s{per}; machine's cores busy {statistics.median(machine):.2f}")
    # What bounds the cluster read on one machine: CPU seconds per byte over every host (archive replaying, media
    # drivers sending and receiving UDP, executors decoding) beside the local read's, all on the same cores, counted
    # inside the timed runs only (sampled every 0.5 s, interpolated).
    sink_seconds = {
        "cluster aeron-archive": sum(cluster["seconds"]["aeron-archive"]),
        "cluster no-op": sum(cluster["seconds"]["bench-noop"]),
        "one host aeron-archive": sum(one_host["seconds"]["aeron-archive"]),
    }
    if args.staging:
        sink_seconds["cluster staging recordings"] = sum(cluster["seconds"]["bench-staging-recordings"])
    cpu_figures = {
        **{name: _print_cpu(name, megabytes * args.reps, cpu_sinks[name], sink_seconds[name]) for name in sink_seconds},
        **{name: _print_cpu(name, read_mb * args.reps, cpu_reads[name], sum(reads[name])) for name in reads},
    }
    ratios = {
        "sink_cluster_vs_one_host": sink["cluster aeron-archive"] / sink["one host aeron-archive"],
        "sink_cluster_vs_noop": sink["cluster aeron-archive"] / sink["cluster no-op"],
        "read_cluster_vs_local_archive_dir": read["cluster read"] / read["local[2] archiveDir read"],
        "read_cluster_recording_mtu_vs_local_archive_dir": read["cluster read replayMtu=recording"]
        / read["local[2] archiveDir read"],
        "read_cluster_response_channels_vs_ordinary": read["cluster read responseChannels"] / read["cluster read"],
    }
    if args.staging:
        ratios["sink_staging_recordings_vs_noop"] = sink["cluster staging recordings"] / sink["cluster no-op"]
        ratios["sink_staging_vs_commit_messages"] = sink["cluster staging recordings"] / sink["cluster aeron-archive"]
    for name, value in ratios.items():
        print(f"  ratio {name:<48} {value:.2f}")
    per_executor = {f"{name} per executor": read[name] / read_cluster["executors"] for name in read_cluster["seconds"]}
    return {
        **{k: round(v, 3) for k, v in {**sink, **read, **per_executor, **ratios}.items()},
        "cpu": {k: {n: round(x, 2) for n, x in v.items()} for k, v in cpu_figures.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="1 KiB rows per sink run")
    parser.add_argument("--batch-rows", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--mtu",
        type=int,
        default=None,
        help="mtu of the sink's channels and of the replay section's stream (Aeron's default 1408): the recording, "
        "and so its replays, keep it",
    )
    parser.add_argument(
        "--random-values",
        action="store_true",
        help="incompressible values (the default is a fixed pattern that compresses ~20x: the sink's commit "
        "messages are LZ4-compressed)",
    )
    parser.add_argument(
        "--staging",
        action="store_true",
        help="also time issue 10's other sink design (executors publish to per-task staging recordings)",
    )
    parser.add_argument("--replay-only", action="store_true", help="only the replay section (ours against Java's)")
    parser.add_argument("--no-replay", action="store_true", help="skip the replay section")
    parser.add_argument("--replay-mb", type=float, default=200.0, help="MB the replay section records in each archive")
    parser.add_argument(
        "--replay-mtu", type=int, default=8192, help="the larger replay MTU our archive is asked for (mtu=N)"
    )
    parser.add_argument(
        "--java",
        choices=("auto", "1.53", "1.15", "none"),
        default="auto",
        help="the Java archive of the replay section: 1.53 where JAVA_AERON_HOME (or ~/.cache/java-aeron) is built, "
        "else 1.15.1 from ci/java_aeron.sh; none: ours alone",
    )
    args = parser.parse_args(argv)

    from tests.benchmarks.cluster_java_archive import print_figures, replay_section
    from tests.cluster.topology import Topology

    topology = Topology()
    was_up = topology.service_pid("archive") is not None and topology.service_pid("master") is not None
    if not was_up:
        topology.up()
    line: dict[str, Any] = {}
    try:
        if not args.no_replay:
            replay = replay_section(
                topology,
                megabytes=args.replay_mb,
                mtu=args.mtu or 1408,
                replay_mtu=args.replay_mtu,
                reps=args.reps,
                java=args.java,
            )
            ratios = print_figures(replay)
            line["replay"] = {
                name: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in f.items() if k != "threads"}
                for name, f in replay.items()
            }
            line.update({k: round(v, 3) for k, v in ratios.items()})
        if not args.replay_only:
            line.update(_sink_and_read(topology, args))
    finally:
        if not was_up:
            topology.down()
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("sink", "read"):
        job = sink_job if sys.argv[1] == "sink" else read_job
        print(json.dumps({"result": job(json.loads(sys.argv[2]))}), flush=True)
    else:
        sys.exit(main())
