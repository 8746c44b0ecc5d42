"""One UDP hop between two embedded media drivers: the embedded drivers' settings against Aeron's defaults, same run.

Every process of this project that sends or receives UDP does it through an embedded C media driver
(`archive.native.driver.EmbeddedMediaDriver`): the archive's `serve`, and each Spark driver and executor. Those
drivers depart from Aeron's defaults (`default_settings`: bigger socket buffers and receiver window, full I/O
vectors, a gentler idle strategy). This benchmark measures what that buys on one hop, in isolation:

- a run is one fresh process holding two embedded drivers, a sender and a receiver, joined by
  `aeron:udp?endpoint=127.0.0.1:<port>` (16 MiB terms);
- the sink's own `FramePublisher` offers 1 KiB messages as pre-built frame blocks, at `--rate` MB/s (0: as fast
  as it can), and a thread block-polls the image as the archive's recorder does (same idle strategy);
- a run reports MB/s and CPU seconds per 100 MB of each driver's agent thread and of the whole process;
- variants alternate round by round: `embedded` (the drivers as this project starts them) and `aeron` (Aeron's own
  defaults, set explicitly through the `AERON_*` variables); medians, and the ratio embedded / aeron.

Run: `bash ci/bench.sh udp-hop [--rounds 5] [--total-mib 200] [--rate 20]` (one run per variant and round, each
a few seconds at 20 MB/s). Compare ratios taken in one run, never absolute figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
MESSAGE_LENGTH = 1024
MESSAGES_PER_OFFER = 100

# Aeron's C driver defaults for what `default_settings` changes (aeron_driver_context.c, aeron_agent.h).
AERON_DEFAULTS: dict[str, str] = {
    "AERON_SOCKET_SO_RCVBUF": "131072",
    "AERON_SOCKET_SO_SNDBUF": "0",
    "AERON_RCV_INITIAL_WINDOW_LENGTH": "131072",
    "AERON_RECEIVER_IO_VECTOR_CAPACITY": "4",
    "AERON_SENDER_IO_VECTOR_CAPACITY": "4",
    "AERON_NETWORK_PUBLICATION_MAX_MESSAGES_PER_SEND": "4",
    "AERON_SHARED_IDLE_STRATEGY": "backoff",
    "AERON_SHARED_IDLE_STRATEGY_INIT_ARGS": "10-20-1us-1ms",
}
VARIANTS: dict[str, dict[str, str]] = {"embedded": {}, "aeron": AERON_DEFAULTS}


def _thread_cpu(tid: str) -> float:
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def run_once(settings: dict[str, str], total_bytes: int, rate_mb_s: float, port: int) -> dict[str, float]:
    """One hop in this process; the variant's settings are the drivers' explicit settings."""
    import pyarrow as pa

    from aeron_archive_spark.archive.native.client import AeronClient
    from aeron_archive_spark.archive.native.driver import EmbeddedMediaDriver
    from aeron_archive_spark.archive.server.agent import BackoffIdleStrategy
    from aeron_archive_spark.archive.server.conductor import RECORDER_TRICKLE_BYTES
    from aeron_archive_spark.connector.sink.publisher import FramePublisher

    existing = _threads()
    sender = EmbeddedMediaDriver(settings=settings)
    sender_threads = _threads() - existing
    receiver = EmbeddedMediaDriver(settings=settings)
    receiver_threads = _threads() - existing - sender_threads
    sending, receiving = AeronClient(sender.aeron_dir), AeronClient(receiver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}|term-length=16m"
    subscription = receiving.add_subscription(channel, 1)
    publication = sending.add_exclusive_publication(channel, 1)
    deadline = time.monotonic() + 10
    while not publication.is_connected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no connection on {channel}")
        time.sleep(0.01)
    publisher = FramePublisher(publication, 30.0, f"bench {channel}")
    values = pa.array([b"x" * MESSAGE_LENGTH] * MESSAGES_PER_OFFER, pa.binary())
    received = [0]
    target = [1 << 62]

    def consume() -> None:
        idle = BackoffIdleStrategy(trickle_work=RECORDER_TRICKLE_BYTES)
        while received[0] < target[0]:
            work = subscription.block_poll(lambda block, session_id, term_id: None, 1 << 20)
            received[0] += work
            idle.idle(work)

    reader = threading.Thread(target=consume, name="bench-subscriber", daemon=True)
    start_cpu = {tid: _thread_cpu(tid) for tid in _threads()}
    start = time.monotonic()
    reader.start()
    first = position = publisher.position
    while position - first < total_bytes:
        position = publisher.publish(values)
        if rate_mb_s > 0:
            ahead = (position - first) / (rate_mb_s * 1e6) - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    target[0] = position - first
    reader.join(60)
    if reader.is_alive():
        raise RuntimeError(f"subscriber stopped at {received[0]} of {target[0]} bytes")
    elapsed = time.monotonic() - start
    end_cpu = {tid: _thread_cpu(tid) for tid in _threads()}
    megabytes = target[0] / 1e6

    def per_100mb(tids: set[str]) -> float:
        return sum(end_cpu[t] - start_cpu.get(t, 0.0) for t in tids if t in end_cpu) * 100 / megabytes

    return {
        "MB/s": megabytes / elapsed,
        "sender driver": per_100mb(sender_threads),
        "receiver driver": per_100mb(receiver_threads),
        "process": per_100mb(set(end_cpu)),
    }


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--total-mib", type=int, default=200, help="stream bytes per run")
    parser.add_argument("--rate", type=float, default=20.0, help="offered MB/s (0: as fast as the hop goes)")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # one run in this process (JSON config)
    args = parser.parse_args(argv)
    if args.run:
        config = json.loads(args.run)
        result = run_once(config["settings"], config["totalBytes"], config["rate"], config["port"])
        print(json.dumps({"result": result}), flush=True)
        os._exit(0)  # the drivers' threads: a run's process is thrown away

    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    print(f"UDP hop, 1 KiB messages, {args.total_mib} MiB per run at {args.rate or 'full'} MB/s, {args.rounds} rounds")
    for round_no in range(args.rounds):
        order = list(VARIANTS) if round_no % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            config = {"settings": VARIANTS[name], "totalBytes": args.total_mib << 20, "rate": args.rate}
            config["port"] = _free_port()
            argv_run = [sys.executable, "-m", "tests.benchmarks.bench_udp_hop", "--run", json.dumps(config)]
            done = subprocess.run(argv_run, cwd=PROJECT, capture_output=True, text=True, timeout=600, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith('{"result"')]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"run {name} failed:\n{done.stderr[-3000:]}")
            result: dict[str, float] = json.loads(lines[-1])["result"]
            results[name].append(result)
            figures = ", ".join(f"{key} {value:.3f}" for key, value in result.items())
            print(f"  round {round_no} {name:<9} {figures}", flush=True)

    keys = list(results["embedded"][0])
    medians = {name: {key: statistics.median(r[key] for r in runs) for key in keys} for name, runs in results.items()}
    print("medians (MB/s, then CPU seconds per 100 MB):")
    print(f"  {'':<18}{'embedded':>10}{'aeron':>10}{'ratio':>8}")
    for key in keys:
        embedded, aeron = medians["embedded"][key], medians["aeron"][key]
        print(f"  {key:<18}{embedded:>10.3f}{aeron:>10.3f}{embedded / aeron if aeron else float('nan'):>8.2f}")
    print(json.dumps({"medians": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
