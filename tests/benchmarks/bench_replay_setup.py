"""Replay set-up cost: N replays of small recordings vs one replay of the same bytes, timed phase by phase.

One archive (its own embedded media driver, in this process) holds `--recordings` stopped recordings of
`--rows-per` messages of `--payload` bytes, and one recording of all those messages. Each small recording is then
replayed through the archive the way `archive.client.replay` does it (StartReplay request on a control
session, then a session-filtered IPC subscription, block polls until the replay's end), one after the other, and
the phases of each are timed:

- `request`: the StartReplay round trip (request sent -> OK response received by the client);
- `conductor`: of which the archive conductor's handling of the request (`ArchiveConductor.start_replay`), and
  `pub add` the replay's exclusive publication added inside it (instrumented by wrapping, in this process);
- `sub add`: the client's session-filtered subscription add;
- `image`: waiting for the replay image after the add;
- `first data`: image -> first block received; `rest`: first block -> all bytes; `close`: image + subscription;
- `total`: request sent -> replay done and closed.

Baseline, same run: replaying the one big recording (the same bytes, one set-up), timed the same way. Then
`--ranges` ranges are read through `archive.tables.read.read_ranges` (the Spark executors' code path, on
`--replay-channel`, by default the connector's) against one range of the big recording. Printed: medians, and the ratio N small / one. Rounds alternate small and big.

Run: `python -m tests.benchmarks.bench_replay_setup [--recordings 200] [--rounds 3]`. Never timed assertions.
`BENCH_REPLAY_TRACE=1` also prints a timeline of the hops inside the archive (conductor, replayer, OK sent).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.client.connection import REPLAY_CHANNEL_DEFAULT, ConnectionOptions
from aeron_archive_spark.archive.client.response_replay import response_channel_toward
from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver
from aeron_archive_spark.archive.server.conductor import ArchiveConductor
from aeron_archive_spark.archive.tables.ranges import ReadRange, RecordingFacts, RunningArchive
from tests.benchmarks.bench_many_recordings import MANY_STREAM, TERM_LENGTH, record_many, record_one
from tests.system.harness import Harness

REPLAY_STREAM = 7801
PHASES = ("request", "conductor", "pub add", "sub add", "image", "first data", "rest", "close", "total")

_conductor_times: list[tuple[int, int]] = []  # (start_replay ns, of which add_exclusive_publication ns)
_pub_add_ns: list[int] = []


def _instrument() -> None:
    """Wrap the conductor's start_replay and its client's publication add (class attributes, this process only)."""
    original_start = ArchiveConductor.start_replay
    original_add = AeronClient.add_exclusive_publication

    def start_replay(self: ArchiveConductor, *args: Any, **kwargs: Any) -> None:
        _pub_add_ns.clear()
        began = time.perf_counter_ns()
        try:
            original_start(self, *args, **kwargs)
        finally:
            _conductor_times.append((time.perf_counter_ns() - began, sum(_pub_add_ns)))

    def add_exclusive_publication(self: AeronClient, channel: str, stream_id: int) -> Any:
        if threading.current_thread().name != "archive-conductor":
            return original_add(self, channel, stream_id)
        began = time.perf_counter_ns()
        try:
            return original_add(self, channel, stream_id)
        finally:
            _pub_add_ns.append(time.perf_counter_ns() - began)

    ArchiveConductor.start_replay = start_replay  # type: ignore[method-assign]
    if os.environ.get("BENCH_REPLAY_TRACE"):
        _trace_events()
    AeronClient.add_exclusive_publication = add_exclusive_publication  # type: ignore[method-assign]


_events: dict[str, int] = {}
_traces: list[dict[str, float]] = []


def _trace_events() -> None:
    """Timestamps of the hops inside the archive (BENCH_REPLAY_TRACE=1): conductor entry, replayer pickup, OK sent."""
    from aeron_archive_spark.archive.server.replay_session import ReplaySession, ReplaySessionState

    original_start = ArchiveConductor.start_replay
    original_init = ReplaySession._init
    original_send_ok = ArchiveConductor._send_ok
    original_set_state = ReplaySession._set_state

    def start_replay(self: ArchiveConductor, *args: Any, **kwargs: Any) -> None:
        _events["conductor in"] = time.perf_counter_ns()
        original_start(self, *args, **kwargs)
        _events["conductor out"] = time.perf_counter_ns()

    def init(self: ReplaySession, now: int) -> int:
        _events.setdefault("replayer in", time.perf_counter_ns())
        return original_init(self, now)

    def send_ok(self: ArchiveConductor, *args: Any) -> None:
        _events["ok sent"] = time.perf_counter_ns()
        original_send_ok(self, *args)

    def set_state(self: ReplaySession, state: ReplaySessionState) -> None:
        if state is ReplaySessionState.REPLAY:
            _events["connected"] = time.perf_counter_ns()
        original_set_state(self, state)

    ArchiveConductor.start_replay = start_replay  # type: ignore[method-assign]
    ReplaySession._init = init  # type: ignore[method-assign]
    ArchiveConductor._send_ok = send_ok  # type: ignore[method-assign]
    ReplaySession._set_state = set_state  # type: ignore[method-assign]


def replay_once(archive: Any, recording_id: int, length: int) -> dict[str, float]:
    """One replay of `[0, length)` as the replay reader does it; phase durations in ms."""
    client = archive.aeron
    _events.clear()
    t0 = time.perf_counter_ns()
    replay_session_id = archive.start_replay(recording_id, 0, length, "aeron:ipc", REPLAY_STREAM)
    t1 = time.perf_counter_ns()
    session_id = replay_session_id & 0xFFFFFFFF
    if session_id >= 1 << 31:
        session_id -= 1 << 32
    subscription = client.add_subscription(add_session_id("aeron:ipc", session_id), REPLAY_STREAM)
    t2 = time.perf_counter_ns()
    deadline = time.monotonic() + 10
    idle = 0
    while (image := subscription.image_by_session_id(session_id)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("replay image did not appear")
        idle += 1
        if idle > 3:
            time.sleep(0.0001)
    t3 = time.perf_counter_ns()
    received = 0
    t4 = 0
    idle = 0

    def on_block(block: memoryview, _session: int, _term: int) -> None:
        nonlocal received
        received += len(block)

    while received < length:
        if image.block_poll(on_block, 1 << 20) > 0:
            idle = 0
            if t4 == 0:
                t4 = time.perf_counter_ns()
            continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"replay stalled at {received} of {length} bytes")
        idle += 1
        if idle > 3:
            time.sleep(0.0001)
    t5 = time.perf_counter_ns()
    image.close()
    subscription.close()
    t6 = time.perf_counter_ns()
    conductor_ns, pub_ns = _conductor_times[-1] if _conductor_times else (0, 0)
    ms = 1e-6
    if _events:
        marks = {"sent": t0, **_events, "ok received": t1, "sub added": t2, "image": t3, "first data": t4}
        _traces.append({k: (v - t0) * ms for k, v in marks.items()})
    return {
        "request": (t1 - t0) * ms,
        "conductor": conductor_ns * ms,
        "pub add": pub_ns * ms,
        "sub add": (t2 - t1) * ms,
        "image": (t3 - t2) * ms,
        "first data": (t4 - t3) * ms,
        "rest": (t5 - t4) * ms,
        "close": (t6 - t5) * ms,
        "total": (t6 - t0) * ms,
    }


def read_ranges_seconds(ranges: list[ReadRange]) -> tuple[float, int]:
    from aeron_archive_spark.archive.tables.read import read_ranges
    from aeron_archive_spark.connector.source.schema import FIXED_FIELDS, arrow_schema

    schema = arrow_schema(FIXED_FIELDS)
    began = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_ranges(ranges, schema, None))
    return time.perf_counter() - began, rows


def timed_read(ranges: list[ReadRange], rows_expected: int, into: list[float]) -> Callable[[], None]:
    """A run reading `ranges` through `read_ranges`, its seconds appended to `into`, its rows checked."""

    def run() -> None:
        seconds, rows = read_ranges_seconds(ranges)
        assert rows == rows_expected, (rows, rows_expected)
        into.append(seconds)

    return run


def whole_range(index: int, d: Any, conn: ConnectionOptions) -> ReadRange:
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
    return ReadRange(index, facts, d.start_position, d.stop_position, d.stop_position, RunningArchive(conn), ends_at_stop=True)


def median_table(rows: list[dict[str, float]]) -> dict[str, float]:
    return {phase: statistics.median(r[phase] for r in rows) for phase in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recordings", type=int, default=200)
    parser.add_argument("--rows-per", type=int, default=4)
    parser.add_argument("--payload", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranges", type=int, default=100, help="ranges read through read_ranges (0: skip)")
    parser.add_argument(
        "--replay-channel",
        default=REPLAY_CHANNEL_DEFAULT,
        help="replay channel of the read_ranges reads (default: the connector's; aeron:ipc reads one at a time)",
    )
    parser.add_argument("--driver-dir", default=None, help="driver directory parent (default: /dev/shm if roomy)")
    parser.add_argument(
        "--response-channels",
        action="store_true",
        help="A/B of the read_ranges reads over UDP: the archive's control channel on a UDP port, each read done "
        "with ordinary response and replay channels and with responseChannels=true (alternated); medians, ratios",
    )
    args = parser.parse_args()

    _instrument()
    root = tempfile.mkdtemp(prefix="bench-replay-setup-")
    driver_dir = os.path.join(args.driver_dir, f"bench-replay-setup-{os.getpid()}") if args.driver_dir else None
    driver = EmbeddedMediaDriver(driver_dir)
    udp_control = f"aeron:udp?endpoint=localhost:{_free_udp_port()}" if args.response_channels else None
    h = Harness(
        driver.aeron_dir,
        os.path.join(root, "archive"),
        segment_file_length=TERM_LENGTH * 4,
        control_channel=udp_control,
    )
    payload = bytes(range(256)) * (args.payload // 256) + bytes(args.payload % 256)
    small: list[dict[str, float]] = []
    big: list[dict[str, float]] = []
    small_round_s: list[float] = []
    big_round_s: list[float] = []
    ranges_s: list[float] = []
    one_range_s: list[float] = []
    rsp_ranges_s: list[float] = []
    rsp_one_range_s: list[float] = []
    try:
        began = time.perf_counter()
        channel = record_many(h, args.recordings, args.rows_per, payload)
        one = record_one(h, args.recordings * args.rows_per, payload)
        print(
            f"driver {driver.aeron_dir}; recorded {args.recordings} x {args.rows_per} + 1 x "
            f"{args.recordings * args.rows_per} messages of {args.payload} B in {time.perf_counter() - began:.1f}s"
        )
        descriptors = [d for d in h.client.list_recordings_for_uri(0, 1_000_000, channel, MANY_STREAM)]
        big_d = h.client.list_recording(one)
        assert big_d is not None and len(descriptors) == args.recordings
        reader = h.connect(recording_signal_consumer=None)
        replay_once(reader, descriptors[0].recording_id, descriptors[0].stop_position)  # warm up
        replay_once(reader, one, big_d.stop_position)
        runs: list[tuple[str, Callable[[], None]]] = []

        def run_small() -> None:
            started = time.perf_counter()
            for d in descriptors:
                small.append(replay_once(reader, d.recording_id, d.stop_position - d.start_position))
            small_round_s.append(time.perf_counter() - started)

        def run_big() -> None:
            started = time.perf_counter()
            big.append(replay_once(reader, one, big_d.stop_position - big_d.start_position))
            big_round_s.append(time.perf_counter() - started)

        runs = [("small", run_small), ("big", run_big)]
        if args.ranges > 0:
            conn = ConnectionOptions(
                aeron_dir=h.aeron_dir,
                control_channel=udp_control or h.ctx.local_control_channel,
                control_stream_id=h.ctx.control_stream_id if udp_control else h.ctx.local_control_stream_id,
                control_response_channel="aeron:udp?endpoint=localhost:0" if udp_control else "aeron:ipc",
                replay_channel=args.replay_channel,
                replay_stream_id=REPLAY_STREAM + 1,
            )
            some = [whole_range(i, d, conn) for i, d in enumerate(descriptors[: args.ranges])]
            per_range_bytes = descriptors[0].stop_position - descriptors[0].start_position
            big_range = whole_range(0, big_d, conn)
            rows_expected = len(some) * args.rows_per

            read_ranges_seconds(some[:2])  # warm up the pool's session
            runs += [
                ("ranges", timed_read(some, rows_expected, ranges_s)),
                ("one range", timed_read([big_range], args.recordings * args.rows_per, one_range_s)),
            ]
            if udp_control is not None:
                # The same reads with responseChannels=true's channels (the option's own helper builds them).
                rsp_channel = response_channel_toward(udp_control, _free_udp_port())
                rsp = replace(conn, control_response_channel=rsp_channel, replay_channel=rsp_channel)
                rsp_some = [whole_range(i, d, rsp) for i, d in enumerate(descriptors[: args.ranges])]
                rsp_big = whole_range(0, big_d, rsp)
                read_ranges_seconds(rsp_some[:2])
                runs += [
                    ("ranges rsp", timed_read(rsp_some, rows_expected, rsp_ranges_s)),
                    ("one range rsp", timed_read([rsp_big], args.recordings * args.rows_per, rsp_one_range_s)),
                ]
        for round_no in range(args.rounds):
            order = runs if round_no % 2 == 0 else list(reversed(runs))
            for _, run in order:
                run()
    finally:
        h.close()
        driver.close()
        shutil.rmtree(root, ignore_errors=True)

    n = args.recordings
    print(
        f"\nper-replay phases, ms (medians over {len(small)} small replays / {len(big)} big ones, "
        f"{args.rounds} alternated rounds)"
    )
    ms, mb = median_table(small), median_table(big)
    print(f"{'phase':<12} {'small':>8} {'big':>8}")
    for phase in PHASES:
        print(f"{phase:<12} {ms[phase]:>8.3f} {mb[phase]:>8.3f}")
    p90 = sorted(r["total"] for r in small)[int(0.9 * len(small))]
    print(f"small replay set-up total: median {ms['total']:.3f} ms, p90 {p90:.3f} ms")
    if _traces:
        keys = sorted(_traces[-1], key=lambda k: statistics.median(t.get(k, 0.0) for t in _traces))
        print(
            "trace (ms after the request was sent, medians): "
            + ", ".join(f"{k} {statistics.median(t[k] for t in _traces if k in t):.3f}" for k in keys)
        )
    small_s, big_s = statistics.median(small_round_s), statistics.median(big_round_s)
    print(
        f"{n} small replays: {small_s:.3f} s; one replay of the same bytes: {big_s * 1000:.3f} ms; "
        f"ratio {small_s / big_s:.1f}x"
    )
    if ranges_s:
        rs, os_ = statistics.median(ranges_s), statistics.median(one_range_s)
        print(
            f"read_ranges: {len(some)} ranges {rs:.3f} s ({rs / len(some) * 1000:.2f} ms/range; "
            f"{per_range_bytes} B each); one range of {n} recordings' bytes {os_ * 1000:.2f} ms; "
            f"{len(some)} ranges / one: {rs / os_:.1f}x"
        )
    if rsp_ranges_s:
        rs, os_ = statistics.median(ranges_s), statistics.median(one_range_s)
        rr, or_ = statistics.median(rsp_ranges_s), statistics.median(rsp_one_range_s)
        print(
            f"responseChannels A/B (medians of {len(rsp_ranges_s)} alternated rounds): {len(some)} small ranges "
            f"{rs:.3f} s ordinary / {rr:.3f} s response channels = {rr / rs:.2f}x; one range of "
            f"{n} recordings' bytes {os_ * 1000:.1f} ms / {or_ * 1000:.1f} ms = {or_ / os_:.2f}x"
        )


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    main()
