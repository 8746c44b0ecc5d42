"""Recording and replay throughput of the archive, beside raw sequential file I/O of the same bytes.

The publisher offers pre-built blocks of frames (`offer_block`), so what is measured is the archive: block poll
+ `pwrite` on the recorder thread, `pread` + frame scan + header rewrite + `offer_block` on the replayer thread.
Each figure is printed as MB/s and msgs/s, and as a ratio against the raw file baseline measured in the same run.
Peak RSS is sampled while recording and replaying a multi-GiB recording to show that memory stays flat.

Run: `bash ci/bench.sh archive [--total-mib N] [--big-gib G]`.

`--metrics compare [--rounds R] [--scrape-interval S]` measures what serving Prometheus metrics costs: the same runs
with no metrics and with `metrics_address` set and a separate process scraping `/metrics` every S seconds (0.1:
150 times Prometheus' default 15 s), alternated, printing medians and the on/off ratio.

`--time-index compare [--rounds R]` measures what keeping the time index costs: the same runs with it off and at its
default interval, alternated, printing medians and the on/off ratio.

`--driver-on compare [--rounds R]` instead measures where the media driver keeps its log buffers: the same runs
with the driver directory on the temporary directory (a disk here) and on /dev/shm (a memory filesystem, the
default of `aeron-archive serve` where it has room), alternated, printing medians and the shm/tmp ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver
from aeron_archive_spark.archive.server.archive import Archive
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.archive.storage.time_index import INTERVAL_DEFAULT_NS as TIME_INDEX_DEFAULT_NS

TERM_LENGTH = 16 * 1024 * 1024
BLOCK_LENGTH = 256 * 1024


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> RssSampler:
        self.peak = rss_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class TermImage:
    """One term's worth of pre-built frames; every term is laid out the same, only term ids change."""

    def __init__(self, message_length: int, session_id: int, stream_id: int) -> None:
        self.frame_length = frames.HEADER_LENGTH + message_length
        self.aligned = frames.align(self.frame_length, frames.FRAME_ALIGNMENT)
        self.count = TERM_LENGTH // self.aligned
        self.used = self.count * self.aligned
        self.buffer = np.zeros(TERM_LENGTH, dtype=np.uint8)
        rng = np.random.default_rng(1)
        self.buffer[:self.used] = rng.integers(0, 256, self.used, dtype=np.uint8)
        offsets = np.arange(self.count, dtype=np.int64) * self.aligned
        i32 = self.buffer.view(np.int32)
        i32[offsets // 4] = self.frame_length
        self.buffer[offsets + 4] = 0
        self.buffer[offsets + 5] = 0xC0
        self.buffer.view(np.uint16)[(offsets + 6) // 2] = frames.HDR_TYPE_DATA
        i32[(offsets + 8) // 4] = offsets.astype(np.int32)
        i32[(offsets + 12) // 4] = session_id
        i32[(offsets + 16) // 4] = stream_id
        self.buffer.view(np.int64)[(offsets + 24) // 8] = 0
        self._term_id_index = (offsets + 20) // 4
        pad = offsets[-1] + self.aligned
        self.pad_length = TERM_LENGTH - pad
        # blocks of whole frames, at most BLOCK_LENGTH each
        per_block = max(1, BLOCK_LENGTH // self.aligned)
        self.blocks = [(i * self.aligned, min(per_block, self.count - i) * self.aligned)
                       for i in range(0, self.count, per_block)]

    def set_term_id(self, term_id: int) -> None:
        self.buffer.view(np.int32)[self._term_id_index] = term_id


def publish(pub, image: TermImage, total_bytes: int) -> int:
    """Offer whole terms of pre-built blocks until `total_bytes` of stream; returns messages published."""
    view = memoryview(image.buffer)
    messages = 0
    term_id = pub.initial_term_id
    while pub.position < total_bytes:
        image.set_term_id(term_id)
        for offset, length in image.blocks:
            while True:
                result = pub.offer_block(view[offset:offset + length])
                if result > 0:
                    break
                if result in (-4, -5):
                    raise RuntimeError(f"publication closed: {result}")
        messages += image.count
        if image.pad_length:
            while pub.append_padding(image.pad_length - frames.HEADER_LENGTH) < 0:
                pass
        term_id += 1
    return messages


@dataclass
class Result:
    label: str
    mb_s: float
    msgs_s: float
    baseline_mb_s: float

    def line(self) -> str:
        ratio = self.mb_s / self.baseline_mb_s if self.baseline_mb_s else float("nan")
        return (f"{self.label:<28} {self.mb_s:9.1f} MB/s {self.msgs_s / 1e6:8.3f} M msgs/s   "
                f"raw file {self.baseline_mb_s:8.1f} MB/s   ratio {ratio:5.2f}")


def raw_file_baseline(directory: str, total_bytes: int, passes: int = 2) -> tuple[float, float]:
    """Sequential pwrite then pread of 1 MiB chunks into pre-sized files (as segment files are): best of passes.

    This is the ceiling for moving the same bytes through the page cache from Python on this machine.
    """
    chunk = os.urandom(1 << 20)
    buf = bytearray(len(chunk))
    best_write = best_read = 0.0
    for n in range(passes):
        path = os.path.join(directory, f"baseline-{n}.bin")
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, total_bytes)
            start = time.perf_counter()
            for off in range(0, total_bytes, len(chunk)):
                os.pwrite(fd, chunk, off)
            best_write = max(best_write, total_bytes / (time.perf_counter() - start) / 1e6)
            start = time.perf_counter()
            for off in range(0, total_bytes, len(chunk)):
                os.preadv(fd, [buf], off)
            best_read = max(best_read, total_bytes / (time.perf_counter() - start) / 1e6)
        finally:
            os.close(fd)
            os.remove(path)
    return best_write, best_read


def run_size(driver_dir: str, work_dir: str, message_length: int, total_bytes: int,
             baseline: tuple[float, float], scrape_interval: float | None = None,
             time_index_ns: int = TIME_INDEX_DEFAULT_NS) -> tuple[Result, Result, int, int]:
    """One recording and one replay of it; with `scrape_interval`, the archive serves metrics and another process
    scrapes them that often throughout; `time_index_ns` is the time index's interval (0: none kept)."""
    archive_dir = os.path.join(work_dir, f"archive-{message_length}")
    ctx = ArchiveContext(archive_dir=archive_dir, aeron_dir=driver_dir, control_channel=None,
                         segment_file_length=128 * 1024 * 1024, low_storage_space_threshold=0,
                         local_control_stream_id=10 + message_length,
                         metrics_address="127.0.0.1:0" if scrape_interval is not None else None,
                         time_index_interval_ns=time_index_ns)
    archive = Archive.launch(ctx)
    scraper = None
    if archive.metrics is not None:
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, archive.metrics.url, str(scrape_interval)])
    signals = []
    client = AeronArchive.connect(aeron_dir=driver_dir, control_request_channel="aeron:ipc",
                                  control_request_stream_id=ctx.local_control_stream_id,
                                  control_response_channel="aeron:ipc", recording_signal_consumer=signals.append)
    try:
        channel = f"aeron:ipc?term-length={TERM_LENGTH}"
        stream_id = 5000 + message_length
        client.start_recording(channel, stream_id)
        pub = client.aeron.add_exclusive_publication(channel, stream_id)
        while not any(s.signal == RecordingSignal.START for s in signals):
            client.poll_for_recording_signals()
        recording_id = next(s.recording_id for s in signals if s.signal == RecordingSignal.START)
        image = TermImage(message_length, pub.session_id, stream_id)
        with RssSampler() as rss_record:
            start = time.perf_counter()
            messages = publish(pub, image, total_bytes)
            end_position = pub.position
            while client.get_recording_position(recording_id) < end_position:
                time.sleep(0.0005)
            record_s = time.perf_counter() - start
        client.stop_recording(channel, stream_id)
        while not any(s.signal == RecordingSignal.STOP for s in signals):
            client.poll_for_recording_signals()
        pub.close()
        recorded = Result(f"record {message_length:>5} B messages", end_position / record_s / 1e6,
                          messages / record_s, baseline[0])

        sub = client.replay(recording_id, "aeron:ipc", 7000 + message_length, position=0,
                            length=REPLAY_ALL_AND_STOP)
        received = 0

        def on_block(block: memoryview, session_id: int, term_id: int) -> None:
            nonlocal received
            received += len(block)

        with RssSampler() as rss_replay:
            while sub.image_count == 0:
                time.sleep(0.0001)
            start = time.perf_counter()
            while True:
                images = sub.images()
                if not images:
                    break
                img = images[0]
                if img.block_poll(on_block, TERM_LENGTH) == 0:
                    if img.position >= end_position or img.is_end_of_stream or img.is_closed:
                        break
            replay_s = time.perf_counter() - start
        replay_bytes = sub.images()[0].position if sub.images() else end_position
        sub.close()
        replayed = Result(f"replay {message_length:>5} B messages", replay_bytes / replay_s / 1e6,
                          messages * replay_bytes / end_position / replay_s, baseline[1])
        return recorded, replayed, rss_record.peak, rss_replay.peak
    finally:
        if scraper is not None:
            scraper.terminate()
            scraper.wait()
        client.close()
        archive.close()
        shutil.rmtree(archive_dir, ignore_errors=True)


def print_medians(figures: dict[tuple[str, str, int], list[float]], sizes: list[int], first: str, second: str) -> None:
    """Each size's record and replay medians of two alternated set-ups, and their ratio second/first."""
    for what in ("record", "replay"):
        for size in sizes:
            a = statistics.median(figures[(first, what, size)])
            b = statistics.median(figures[(second, what, size)])
            print(f"{what} {size:>5} B messages   {first} {a:9.1f} MB/s   {second} {b:9.1f} MB/s   "
                  f"{second}/{first} {b / a:5.2f}")


# A Prometheus stand-in: scrape, parse (so a scrape that fails, or yields nothing, stops the run), sleep.
SCRAPER = """
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
url, interval = sys.argv[1], float(sys.argv[2])
while True:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert any(f.name == "aeron_archive_recorder_write_bytes" for f in text_string_to_metric_families(
            response.read().decode()))
    time.sleep(interval)
"""


def compare_runs(args: argparse.Namespace, title: str, modes: list[tuple[str, dict[str, Any]]]) -> None:
    """Record and replay under two set-ups (`run_size` keyword arguments), alternated each round; medians."""
    total = args.total_mib * 1024 * 1024
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: dict[tuple[str, str, int], list[float]] = {}
    work = tempfile.mkdtemp(prefix="aeron-archive-bench-", dir=args.dir)
    driver = EmbeddedMediaDriver(os.path.join(work, "driver"))
    try:
        baseline = raw_file_baseline(work, total)
        for round_no in range(args.rounds):
            for mode, settings in (modes if round_no % 2 == 0 else list(reversed(modes))):
                for size in sizes:
                    recorded, replayed, _, _ = run_size(driver.aeron_dir, work, size, total, baseline, **settings)
                    figures.setdefault((mode, "record", size), []).append(recorded.mb_s)
                    figures.setdefault((mode, "replay", size), []).append(replayed.mb_s)
        print(f"{title}: {args.total_mib} MiB per run, {args.rounds} alternated rounds, medians")
        print_medians(figures, sizes, modes[0][0], modes[1][0])
    finally:
        driver.close()
        shutil.rmtree(work, ignore_errors=True)


def compare_metrics(args: argparse.Namespace) -> None:
    """Record and replay with metrics off and on (scraped every `--scrape-interval`), alternated; medians."""
    compare_runs(args, f"metrics off vs on (scraped every {args.scrape_interval} s)",
                 [("off", {}), ("on", {"scrape_interval": args.scrape_interval})])


def compare_time_index(args: argparse.Namespace) -> None:
    """Record and replay with the time index off and at its default interval, alternated; medians."""
    compare_runs(args, f"time index off vs on ({TIME_INDEX_DEFAULT_NS // 1_000_000} ms)",
                 [("off", {"time_index_ns": 0}), ("on", {"time_index_ns": TIME_INDEX_DEFAULT_NS})])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=1024, help="stream bytes per message size")
    parser.add_argument("--big-gib", type=float, default=3.0, help="size of the multi-GiB RSS run (0 to skip)")
    parser.add_argument("--sizes", default="32,256,1024,4096")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--driver-on", choices=["work", "compare"], default="work",
                        help="driver directory in the work directory, or compare the temp dir with /dev/shm")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds for --driver-on / --metrics compare")
    parser.add_argument("--metrics", choices=["off", "compare"], default="off",
                        help="compare runs without metrics and with metrics scraped every --scrape-interval")
    parser.add_argument("--scrape-interval", type=float, default=0.1, help="seconds between scrapes (--metrics)")
    parser.add_argument("--time-index", choices=["on", "compare"], default="on",
                        help="compare runs without the time index and with it at its default interval")
    args = parser.parse_args()
    if args.metrics == "compare":
        compare_metrics(args)
        return
    if args.time_index == "compare":
        compare_time_index(args)
        return
    if args.driver_on == "compare":
        compare_driver_places(args)
        return
    work = tempfile.mkdtemp(prefix="aeron-archive-bench-", dir=args.dir)
    driver = EmbeddedMediaDriver(os.path.join(work, "driver"))
    try:
        total = args.total_mib * 1024 * 1024
        baseline = raw_file_baseline(work, total)
        print(f"raw sequential file: write {baseline[0]:.1f} MB/s, read {baseline[1]:.1f} MB/s "
              f"({args.total_mib} MiB in 1 MiB chunks)")
        for size in [int(s) for s in args.sizes.split(",")]:
            recorded, replayed, rss_rec, rss_rep = run_size(driver.aeron_dir, work, size, total, baseline)
            print(recorded.line() + f"   peak RSS {rss_rec / 2**20:5.0f} MiB")
            print(replayed.line() + f"   peak RSS {rss_rep / 2**20:5.0f} MiB")
        if args.big_gib > 0:
            big = int(args.big_gib * (1 << 30))
            before = rss_bytes()
            recorded, replayed, rss_rec, rss_rep = run_size(driver.aeron_dir, work, 1024, big, baseline)
            print(f"multi-GiB run ({args.big_gib:.1f} GiB, 1 KiB messages): {recorded.line().strip()}")
            print(f"  {replayed.line().strip()}")
            print(f"  RSS before {before / 2**20:.0f} MiB, peak while recording {rss_rec / 2**20:.0f} MiB, "
                  f"peak while replaying {rss_rep / 2**20:.0f} MiB (term buffers {3 * TERM_LENGTH / 2**20:.0f} MiB "
                  f"per publication/image are shared mappings)")
    finally:
        driver.close()
        shutil.rmtree(work, ignore_errors=True)


def compare_driver_places(args: argparse.Namespace) -> None:
    """Record and replay with the driver's log buffers on the temp dir and on /dev/shm, alternated; medians."""
    places = {"tmp": tempfile.gettempdir(), "shm": "/dev/shm"}
    total = args.total_mib * 1024 * 1024
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: dict[tuple[str, str, int], list[float]] = {}
    work = tempfile.mkdtemp(prefix="aeron-archive-bench-", dir=args.dir)
    try:
        baseline = raw_file_baseline(work, total)
        for round_no in range(args.rounds):
            for place, parent in (places.items() if round_no % 2 == 0 else reversed(places.items())):
                driver_dir = tempfile.mkdtemp(prefix="aeron-archive-bench-driver-", dir=parent)
                os.rmdir(driver_dir)
                driver = EmbeddedMediaDriver(driver_dir)
                try:
                    for size in sizes:
                        recorded, replayed, _, _ = run_size(driver.aeron_dir, work, size, total, baseline)
                        figures.setdefault((place, "record", size), []).append(recorded.mb_s)
                        figures.setdefault((place, "replay", size), []).append(replayed.mb_s)
                finally:
                    driver.close()
        print(f"driver log buffers on {places['tmp']} vs /dev/shm: {args.total_mib} MiB per run, "
              f"{args.rounds} alternated rounds, medians")
        print_medians(figures, sizes, "tmp", "shm")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
