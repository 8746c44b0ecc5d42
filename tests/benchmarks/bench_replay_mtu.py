"""A replay over UDP on one host at the recording's MTU against the larger replay MTU the reads ask for (issue 36).

An archive on its own embedded media driver records `--mib` MiB of 1 KiB messages over IPC (MTU 1408), then the
replay reader of the Spark source (`ReplayChunkSource`) reads the whole recording through the archive over UDP on
loopback, alternately with `replayMtu` at the recording's MTU and at `--mtu` (the source's default, 8192), after one
warm-up round each; prints MB/s (medians) and the ratio. Only the datagram size differs: the frames read are the same.

Run: `bash ci/bench.sh replay-mtu [--mib 200] [--rounds 5] [--mtu 8192]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MESSAGE_LENGTH = 1024
STREAM_ID = 77


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200, help="MiB recorded")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mtu", type=int, default=8192, help="the larger replay MTU asked for")
    args = parser.parse_args(argv)

    import pyarrow as pa
    from conftest import free_udp_port
    from system.harness import Harness, wait_for

    from aeron_archive_spark.archive.client.connection import ConnectionOptions, with_replay_mtu
    from aeron_archive_spark.archive.constants import RecordingSignal
    from aeron_archive_spark.archive.native import EmbeddedMediaDriver
    from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, RunningArchive
    from aeron_archive_spark.archive.tables.replay_chunks import ReplayChunkSource
    from aeron_archive_spark.connector.sink.publisher import FramePublisher

    work = tempfile.mkdtemp(prefix="bench-replay-mtu-")
    driver = EmbeddedMediaDriver(f"{work}/driver")
    port = free_udp_port()
    control = f"aeron:udp?endpoint=localhost:{port}"
    h = Harness(driver.aeron_dir, f"{work}/archive", control_channel=control, segment_file_length=128 << 20)
    try:
        channel = "aeron:ipc?term-length=16m"
        h.client.start_recording(channel, STREAM_ID)
        publication = h.client.aeron.add_exclusive_publication(channel, STREAM_ID)
        started = h.await_signal(RecordingSignal.START)
        publisher = FramePublisher(publication, 60.0, "bench stream")
        values = pa.array([bytes(range(256)) * (MESSAGE_LENGTH // 256)] * 1024, pa.binary())  # 1 MiB per offer
        for _ in range(args.mib):
            publisher.publish(values)
        wait_for(
            lambda: h.client.get_recording_position(started.recording_id) == publication.position, 120, "the recording"
        )
        h.client.stop_recording(channel, STREAM_ID)
        h.await_signal(RecordingSignal.STOP, started.recording_id)
        publication.close()
        d = h.client.list_recording(started.recording_id)
        facts = RecordingFacts(
            d.recording_id,
            d.start_position,
            d.term_buffer_length,
            d.segment_file_length,
            d.initial_term_id,
            d.session_id,
            d.stream_id,
            d.mtu_length,
        )
        variants = {f"recording's MTU ({d.mtu_length})": None, f"replayMtu={args.mtu}": args.mtu}
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        source = ReplayChunkSource()
        for rounds in range(args.rounds + 1):  # the first round is a warm-up
            names = list(variants) if rounds % 2 else list(reversed(variants))
            for name in names:
                connection = ConnectionOptions(
                    aeron_dir=driver.aeron_dir,
                    control_channel=control,
                    replay_channel=with_replay_mtu("aeron:udp?endpoint=localhost:0", variants[name]),
                )
                read = ReadRange(
                    0, facts, d.start_position, d.stop_position, d.stop_position, RunningArchive(connection)
                )
                start, length = time.perf_counter(), 0
                for chunk, _position in source.iter_chunks(read):
                    length += len(chunk)
                if length != d.stop_position - d.start_position:
                    raise RuntimeError(f"{name}: read {length} bytes of {d.stop_position - d.start_position}")
                if rounds:
                    seconds[name].append(time.perf_counter() - start)
        megabytes = (d.stop_position - d.start_position) / 1e6
        rates = {name: megabytes / statistics.median(values) for name, values in seconds.items()}
        for name, rate in rates.items():
            print(f"  {name:<24} {rate:8.1f} MB/s")
        slow, fast = rates.values()
        print(f"  ratio larger replay MTU / recording's MTU {fast / slow:.2f}")
        print(json.dumps({**{k: round(v, 1) for k, v in rates.items()}, "ratio": round(fast / slow, 3)}))
    finally:
        h.close()
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
