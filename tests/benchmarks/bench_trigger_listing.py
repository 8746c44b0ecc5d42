"""What a stream trigger costs when its channel holds many recordings: listing them, and `latestOffset`.

A stream selecting recordings by `channel` + `streamId` lists them on every trigger (new recordings, stops,
extensions and truncations all show in the listing), and Spark calls `latestOffset` every ~10 ms while a live
tail is idle. So its cost per recording is paid continuously, by the archive and by Spark's driver.

One `aeron-archive serve` runs in a process of its own (as in production: its conductor does not share this
process's interpreter); stream A of one channel holds `--recordings` stopped recordings of 4 small messages
plus one live one, stream B only a live one (the same-run baseline). Alternated, `--repeat` rounds of
`--triggers` each, medians:

- `list`: `ListRecordingsForUri` through the archive (client round trip for every descriptor), with the CPU the
  serve process and this process spent per listing;
- `trigger (replay)`: `AeronArchiveStreamReader.latestOffset` + `partitions` with no `archiveDir` (as above, plus
  planning), 10 new messages on the live recording before each;
- `trigger (archiveDir)`: the same reading the catalog file.

Printed: milliseconds per call for A and B, and the ratio A / B. Never timed assertions.
Run: `bash ci/bench.sh trigger-listing [--recordings 1000] [--repeat 3] [--triggers 20]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from aeron_archive_spark.archive import AeronArchive, SourceLocation

CHANNEL = "aeron:ipc?term-length=64k"
STREAMS = {"A": 1001, "B": 1002}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def record_stopped(archive: AeronArchive, stream_id: int, count: int) -> None:
    """`count` recordings of 4 x 100 B on `stream_id`, each stopped (one exclusive publication each)."""
    for _ in range(count):
        publication = archive.aeron.add_exclusive_publication(CHANNEL, stream_id)
        while not publication.is_connected:
            time.sleep(0.0001)
        for _ in range(4):
            while publication.offer(bytes(100)) <= 0:
                time.sleep(0.00001)
        rid = -1
        while rid == -1:
            rid = archive.find_last_matching_recording(0, CHANNEL, stream_id, publication.session_id)
        while archive.get_recording_position(rid) < publication.position:
            time.sleep(0.0005)
        publication.close()
        while archive.get_recording_position(rid) != -1:  # stopped once the image is gone
            time.sleep(0.0005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recordings", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--triggers", type=int, default=20)
    args = parser.parse_args()

    from pyspark.sql.datasource import ReadAllAvailable

    from aeron_archive_spark.connector.source.schema import FIXED_FIELDS
    from aeron_archive_spark.connector.source.stream_reader import AeronArchiveStreamReader

    root = tempfile.mkdtemp(prefix="bench-trigger-listing-")
    archive_dir = os.path.join(root, "archive")
    serve = subprocess.Popen(
        [sys.executable, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", archive_dir,
         "--control-channel", "none"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert serve.stdout is not None
        info = json.loads(serve.stdout.readline())
        location = {"aeronDir": info["aeronDir"], "controlChannel": info["localControlChannel"],
                    "controlStreamId": str(info.get("localControlStreamId", 10)),
                    "controlResponseChannel": "aeron:ipc"}
        with AeronArchive.connect(aeron_dir=location["aeronDir"], control_request_channel=location["controlChannel"],
                                  control_request_stream_id=int(location["controlStreamId"]),
                                  control_response_channel="aeron:ipc") as archive:
            started = time.perf_counter()
            live: dict[str, Any] = {}
            for name, stream_id in STREAMS.items():
                archive.start_recording(CHANNEL, stream_id, SourceLocation.LOCAL)
                record_stopped(archive, stream_id, args.recordings if name == "A" else 0)
                live[name] = archive.aeron.add_exclusive_publication(CHANNEL, stream_id)
            time.sleep(0.5)
            listed = {name: len(archive.list_recordings_for_uri(0, 2**31 - 1, CHANNEL, stream_id))
                      for name, stream_id in STREAMS.items()}
            print(f"recorded in {time.perf_counter() - started:.1f}s; recordings listed: A {listed['A']}, "
                  f"B {listed['B']}")

            results: dict[str, dict[str, list[float]]] = {}

            def note(case: str, name: str, values: list[float]) -> None:
                results.setdefault(case, {}).setdefault(name, []).extend(values)

            def listing(name: str) -> None:
                times, serve_cpu, own_cpu = [], cpu_seconds(serve.pid), time.process_time()
                for _ in range(args.triggers):
                    began = time.perf_counter()
                    archive.list_recordings_for_uri(0, 2**31 - 1, CHANNEL, STREAMS[name])
                    times.append(time.perf_counter() - began)
                note("list", name, times)
                note("list: serve CPU", name, [(cpu_seconds(serve.pid) - serve_cpu) / args.triggers])
                note("list: client CPU", name, [(time.process_time() - own_cpu) / args.triggers])

            def triggers(path: str, name: str) -> None:
                options = {**(location if path == "replay" else {"archiveDir": archive_dir}),
                           "channel": CHANNEL, "streamId": str(STREAMS[name])}
                reader = AeronArchiveStreamReader({k.lower(): v for k, v in options.items()}, FIXED_FIELDS)
                try:
                    start = reader.initialOffset()
                    times = []
                    for _ in range(args.triggers):
                        for _ in range(10):
                            while live[name].offer(bytes(100)) <= 0:
                                time.sleep(0.00001)
                        time.sleep(0.005)
                        began = time.perf_counter()
                        end = reader.latestOffset(start, ReadAllAvailable())
                        reader.partitions(start, end)
                        times.append(time.perf_counter() - began)
                        start = end
                    note(f"trigger ({path})", name, times)
                finally:
                    reader.stop()

            for _ in range(args.repeat):
                for name in ("A", "B"):
                    listing(name)
                    triggers("replay", name)
                    triggers("archiveDir", name)
            for publication in live.values():
                publication.close()

        print(f"\nmedians, ms per call; A: {args.recordings} stopped recordings + 1 live on the channel, "
              "B: 1 live")
        print(f"{'':24}{'A':>10}{'B':>10}{'A / B':>10}")
        for case, figures in results.items():
            a, b = statistics.median(figures["A"]) * 1e3, statistics.median(figures["B"]) * 1e3
            print(f"{case:24}{a:10.2f}{b:10.2f}{a / b if b else float('nan'):10.1f}")
    finally:
        serve.terminate()
        serve.wait(20)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
