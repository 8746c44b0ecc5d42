"""Record and replay throughput driven from outside the archive: ours vs the Java 1.15.1 archive vs raw file I/O.

Three kinds of process, as an application would use an archive:

* the archive in its own process with its own media driver: ours (`Archive` + embedded C driver, shared driver
  threading, three agent threads) or Java's (`ArchivingMediaDriver` 1.15.1 from the jar of `ci/java_aeron.sh`,
  SHARED driver threading, DEDICATED archive threading, i.e. a conductor, a recorder and a replayer thread as
  ours), each taking control commands on stdin from this orchestrator (start/stop recording, start replay);
* a publisher process: attaches to the archive's driver, adds an exclusive IPC publication (16 MiB terms), builds
  one term of pre-built frames, waits for the archive's recording-position counter of its session, then offers
  the term's blocks with `offer_block` (256 KiB blocks of whole frames) until the stream reaches the run length,
  and stops the clock when the recording-position counter (type 100, read from the driver's counters) reaches the
  end: record throughput = stream bytes / that time;
* a subscriber process: subscribes to the replay channel, and, once the archive's replay image appears, block-polls
  it (`block_poll`, a term per call at most) until the image reaches the end position: replay throughput.

Transport: IPC for both archives, with the SAME publisher and subscriber programs (our Aeron C 1.53 client). The C
1.53 client attaches to a Java 1.15.1 media driver's CnC (CnC version 15 has semantic major 0, as the C client's
0.2.0; the counter and log-buffer layouts it reads are unchanged): offer, offer_block, block_poll and counter reads
all work. One difference matters: the 1.53 client heartbeats by writing a counter that 1.15 does not know, never by
the CLIENT_KEEPALIVE command 1.15 waits for, so the Java driver runs here with a one-hour client liveness timeout
(its default of 5 s drops our clients mid-run). So both archives see the same client code, the same transport,
the same log-buffer layout and the same counters; what differs is the archive and its media driver (C driver for
ours, Java driver for Java's, both SHARED threading, driver directory on /dev/shm, archive directory in the work
directory, and each driver's log buffers as its archive runs them by default: non-sparse for both, Java's driver
default and our `archive_media_driver`'s; `--impls java-sparse` runs Java with sparse ones, the C driver's
default). UDP was the alternative and was rejected: on two shared cores the loopback sender/receiver threads would
bound both archives at the same figure and hide the archives. The Java archive is
controlled by a small Java program (source below, compiled against the jar once per content hash into
`.venv/java/bench-<hash>`; its JVM runs with C2 and a 512 MiB pre-touched heap), because our archive client's
AuthConnectRequest is unknown to 1.15; the control plane is not timed. Note that 1.15's replayer copies one
fragment at a time (`tryClaim`), where later Javas offer blocks as ours does.

Raw baseline: sequential `pwrite` then `pread` (1 MiB chunks) of as many bytes into a pre-sized file in the work
directory, every round: the same bytes through the same page cache from Python, with no frames, no driver, no
second process and a single copy each way.

Every round runs ours, Java and raw in an order rotated each round; each archive process first records and replays
a warm-up stream (not measured: JIT for Java, first use of code paths for ours). Printed: every run with the load
average, then medians of the rounds as MB/s (10^6 stream bytes/s, 32-byte frame headers included) and M msgs/s,
and medians of the per-round ratios ours/Java and ours/raw. Because the figures swing with the machine's load, a
second table gives the CPU cost, which moves much less: stream bytes per CPU second (from /proc schedstat) of the
archive's recorder or replayer thread and of its whole process (driver and every other thread included), taken
over the timed part of each run.

Run: `bash ci/bench.sh archive-external [--quick] [--rounds N] [--total-mib M] [--sizes 32,992] [--impls ours,java]`.
`--impls ours,ours-noindex` adds our archive keeping no time index (`time_index_interval_ns=0`): the ratio
ours/ours-noindex is what keeping the index costs the recorder. `--impls ours,java,base --base-tree DIR` adds our
archive imported from another checkout (DIR holding an
`aeron_archive_spark` package with `archive/` in it) for before/after comparisons in one run;
`--wrap-ours "py-spy record -o out.txt -f raw --"` (or `perf record -g --`) runs our archive process under a profiler.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

TERM_LENGTH = 16 * 1024 * 1024
SEGMENT_LENGTH = 128 * 1024 * 1024
CHANNEL = f"aeron:ipc?term-length={TERM_LENGTH}"
REPLAY_CHANNEL = "aeron:ipc"
RECORDING_POSITION_TYPE_ID = 100
ROOT = Path(__file__).resolve().parents[2]

JAVA_SOURCE = r"""
import io.aeron.archive.Archive;
import io.aeron.archive.ArchiveThreadingMode;
import io.aeron.archive.ArchivingMediaDriver;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.codecs.SourceLocation;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;

import java.io.BufferedReader;
import java.io.InputStreamReader;

/** Java 1.15.1 archive for bench_archive_external: line commands on stdin, one JSON line per reply. */
public final class BenchJavaArchive
{
    public static void main(final String[] args) throws Exception
    {
        final MediaDriver.Context driverCtx = new MediaDriver.Context()
            .aeronDirectoryName(args[0])
            .dirDeleteOnStart(true)
            .threadingMode(ThreadingMode.SHARED)
            .termBufferSparseFile(Boolean.parseBoolean(args[5]))
            .clientLivenessTimeoutNs(3_600_000_000_000L);
        final Archive.Context archiveCtx = new Archive.Context()
            .aeronDirectoryName(args[0])
            .archiveDirectoryName(args[1])
            .deleteArchiveOnStart(true)
            .segmentFileLength(Integer.parseInt(args[2]))
            .fileSyncLevel(0)
            .controlChannel("aeron:udp?endpoint=localhost:" + args[3])
            .recordingEventsChannel("aeron:udp?endpoint=localhost:" + args[4])
            .threadingMode(ArchiveThreadingMode.DEDICATED);
        try (ArchivingMediaDriver ignore = ArchivingMediaDriver.launch(driverCtx, archiveCtx);
            AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeronDirectoryName(args[0])
                .controlRequestChannel("aeron:ipc")
                .controlRequestStreamId(11)
                .controlResponseChannel("aeron:ipc")
                .controlResponseStreamId(23)))
        {
            System.out.println("{\"ready\":true}");
            System.out.flush();
            final BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null)
            {
                final String[] c = line.trim().split(" ");
                long result = 0;
                switch (c[0])
                {
                    case "record":
                        result = archive.startRecording(c[1], Integer.parseInt(c[2]), SourceLocation.LOCAL);
                        break;
                    case "stop":
                        archive.stopRecording(c[1], Integer.parseInt(c[2]));
                        break;
                    case "replay":
                        result = archive.startReplay(Long.parseLong(c[1]), Long.parseLong(c[2]),
                            Long.parseLong(c[3]), c[4], Integer.parseInt(c[5]));
                        break;
                    case "quit":
                        System.out.println("{\"ok\":0}");
                        System.out.flush();
                        return;
                    default:
                        throw new IllegalArgumentException(line);
                }
                System.out.println("{\"ok\":" + result + "}");
                System.out.flush();
            }
        }
    }
}
"""

JVM_FLAGS = [
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "-Djava.net.preferIPv4Stack=true",
    "-Xms512m",
    "-Xmx512m",
    "-XX:+AlwaysPreTouch",
]


def load_averages() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java_command(aeron_dir: str, archive_dir: str, sparse: bool) -> list[str]:
    """The command that runs the Java 1.15.1 archive (compiling the controller once per content hash).

    `sparse`: the Java media driver's `termBufferSparseFile`; false is its own default, true the C driver's."""
    from tests.interop.javaenv import JavaEnv  # raises JavaUnavailable with the reason

    env = JavaEnv.get()
    javac = shutil.which("javac")
    assert javac is not None
    digest = hashlib.sha256(JAVA_SOURCE.encode() + str(env.jar).encode()).hexdigest()[:16]
    target = ROOT / ".venv" / "java" / f"bench-{digest}"
    if not (target / ".complete").is_file():
        src = Path(tempfile.mkdtemp(prefix="bench-java-src-"))
        try:
            (src / "BenchJavaArchive.java").write_text(JAVA_SOURCE)
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [javac, "-nowarn", "-cp", env.classpath, "-d", str(target), str(src / "BenchJavaArchive.java")],
                check=True,
                capture_output=True,
                timeout=180,
            )
            (target / ".complete").write_text("ok\n")
        finally:
            shutil.rmtree(src, ignore_errors=True)
    # the compiled shim org.agrona.IoUtil (env.classes) must come before the jar
    classpath = os.pathsep.join([str(target), str(env.classes), str(env.jar)])
    return [
        env.java,
        *JVM_FLAGS,
        "-cp",
        classpath,
        "BenchJavaArchive",
        aeron_dir,
        archive_dir,
        str(SEGMENT_LENGTH),
        str(free_udp_port()),
        str(free_udp_port()),
        "true" if sparse else "false",
    ]


# ---------------------------------------------------------------------------------------------------------------------
# child roles

NO_TIME_INDEX_ENV = "AAS_BENCH_NO_TIME_INDEX"


def role_archive_ours(aeron_dir: str, archive_dir: str) -> None:
    """Our archive with its own embedded media driver; the same stdin protocol as BenchJavaArchive."""
    from aeron_archive_spark.archive import AeronArchive
    from aeron_archive_spark.archive.server import archive as archive_module
    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    # the driver `aeron-archive serve` embeds (a tree from before `archive_media_driver` gets the plain one)
    make_driver = getattr(archive_module, "archive_media_driver", None)
    if make_driver is None:
        from aeron_archive_spark.archive.native import EmbeddedMediaDriver as make_driver
    driver = make_driver(aeron_dir, dir_delete_on_start=True)
    ctx = ArchiveContext(
        archive_dir=archive_dir,
        aeron_dir=driver.aeron_dir,
        control_channel=None,
        segment_file_length=SEGMENT_LENGTH,
        low_storage_space_threshold=0,
        delete_archive_on_start=True,
    )
    if os.environ.get(NO_TIME_INDEX_ENV):  # "ours-noindex"
        ctx.time_index_interval_ns = 0
    archive = Archive.launch(ctx)
    client = AeronArchive.connect(
        aeron_dir=driver.aeron_dir,
        control_request_channel="aeron:ipc",
        control_request_stream_id=ctx.local_control_stream_id,
        control_response_channel="aeron:ipc",
    )
    try:
        threads = {t.name: t.native_id for t in threading.enumerate()}
        print(json.dumps({"ready": True, "threads": threads}), flush=True)
        for line in sys.stdin:
            c = line.split()
            result = 0
            if c[0] == "record":
                result = client.start_recording(c[1], int(c[2]))
            elif c[0] == "stop":
                client.stop_recording(c[1], int(c[2]))
            elif c[0] == "replay":
                result = client.start_replay(int(c[1]), int(c[2]), int(c[3]), c[4], int(c[5]))
            elif c[0] == "quit":
                print(json.dumps({"ok": 0}), flush=True)
                break
            else:
                raise ValueError(line)
            print(json.dumps({"ok": result}), flush=True)
    finally:
        client.close()
        archive.close()
        driver.close()


def role_publisher(aeron_dir: str, stream_id: int, message_length: int, total_bytes: int) -> None:
    from aeron_archive_spark.archive.native import AeronClient
    from tests.benchmarks.bench_archive import TermImage, publish

    aeron = AeronClient(aeron_dir, client_name="bench-publisher")
    try:
        pub = aeron.add_exclusive_publication(CHANNEL, stream_id)
        image = TermImage(message_length, pub.session_id, stream_id)
        reader = aeron.counters_reader
        deadline = time.monotonic() + 30
        counter_id = recording_id = -1
        while counter_id < 0:
            for info in reader.counters():
                if (
                    info.type_id == RECORDING_POSITION_TYPE_ID
                    and int.from_bytes(info.key[8:12], "little", signed=True) == pub.session_id
                ):
                    counter_id = info.counter_id
                    recording_id = int.from_bytes(info.key[0:8], "little", signed=True)
            if time.monotonic() > deadline:
                raise TimeoutError("the archive did not start recording the publication")
            time.sleep(0.001)
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()  # go: the orchestrator has taken its CPU snapshot
        start = time.perf_counter()
        messages = publish(pub, image, total_bytes)
        end_position = pub.position
        offered_s = time.perf_counter() - start
        while reader.get(counter_id) < end_position:
            pass
        seconds = time.perf_counter() - start
        print(
            json.dumps(
                {
                    "recording_id": recording_id,
                    "end_position": end_position,
                    "messages": messages,
                    "seconds": seconds,
                    "offered_seconds": offered_s,
                }
            ),
            flush=True,
        )
        pub.close()
    finally:
        aeron.close()


def role_subscriber(aeron_dir: str, stream_id: int, end_position: int) -> None:
    from aeron_archive_spark.archive.native import AeronClient

    aeron = AeronClient(aeron_dir, client_name="bench-subscriber")
    try:
        sub = aeron.add_subscription(REPLAY_CHANNEL, stream_id)
        print(json.dumps({"ready": True}), flush=True)
        deadline = time.monotonic() + 60
        while sub.image_count == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("no replay image")
            time.sleep(0.0001)
        image = sub.images()[0]
        received = 0

        def on_block(block: memoryview, session_id: int, term_id: int) -> None:
            nonlocal received
            received += len(block)

        polls = empty = 0
        cpu = time.process_time()
        start = time.perf_counter()
        while image.position < end_position:
            polls += 1
            if image.block_poll(on_block, TERM_LENGTH) == 0:
                empty += 1
                if image.is_closed or image.is_end_of_stream:
                    break
        seconds = time.perf_counter() - start
        print(
            json.dumps(
                {
                    "bytes": image.position,
                    "received": received,
                    "seconds": seconds,
                    "polls": polls,
                    "empty_polls": empty,
                    "cpu_seconds": time.process_time() - cpu,
                }
            ),
            flush=True,
        )
        sub.close()
    finally:
        aeron.close()


# ---------------------------------------------------------------------------------------------------------------------
# orchestrator


def child(role: str, *args: object) -> list[str]:
    return [sys.executable, "-m", "tests.benchmarks.bench_archive_external", "--role", role, *map(str, args)]


def read_json(stream: IO[str], what: str) -> Any:
    while True:
        line = stream.readline()
        if not line:
            raise RuntimeError(f"{what} ended without a reply")
        if line.startswith("{"):
            return json.loads(line)


def task_cpu_ns(pid: int, tid: int) -> int:
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # the thread has gone


class ArchiveProcess:
    """An archive in its own process: "java" (1.15.1 with its media driver's default, non-sparse log buffers),
    "java-sparse" (1.15.1 with sparse log buffers, the C driver's default), "ours" (its embedded driver as `serve`
    runs it), or "base" (ours, imported from `base_tree`)."""

    def __init__(self, impl: str, work: str, wrap: list[str], base_tree: str | None = None) -> None:
        self.impl = impl
        self.aeron_dir = tempfile.mkdtemp(prefix=f"bench-ext-{impl}-driver-", dir="/dev/shm")
        os.rmdir(self.aeron_dir)  # a fresh name: both drivers create (and delete) their own directory
        self.archive_dir = os.path.join(work, f"archive-{impl}")
        env = None
        if impl in ("java", "java-sparse"):
            cmd = java_command(self.aeron_dir, self.archive_dir, sparse=impl == "java-sparse")
        else:
            cmd = wrap + child("archive-ours", self.aeron_dir, self.archive_dir)
            if impl == "ours-noindex":
                env = {**os.environ, NO_TIME_INDEX_ENV: "1"}
            if impl == "base":
                assert base_tree is not None, "--impls base needs --base-tree"
                env = {**os.environ, "PYTHONPATH": base_tree}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        ready = read_json(self.stdout, f"{impl} archive start")
        self.pid = self.proc.pid
        self.tids: dict[str, int] = {}
        if "threads" in ready:  # ours: Python threads carry no OS name
            self.tids = {role: ready["threads"][f"archive-{role}"] for role in ("recorder", "replayer")}
        else:  # Java names its threads (truncated to 15 characters in /proc)
            for task in os.listdir(f"/proc/{self.pid}/task"):
                with open(f"/proc/{self.pid}/task/{task}/comm") as f:
                    comm = f.read().strip()
                for role in ("recorder", "replayer"):
                    if f"archive-{role}".startswith(comm) and len(comm) >= 14:
                        self.tids[role] = int(task)

    def cpu_ns(self) -> dict[str, int]:
        """CPU time (ns, /proc schedstat) of the recorder and replayer threads and of the whole archive process."""
        out = {role: task_cpu_ns(self.pid, tid) for role, tid in self.tids.items()}
        out["process"] = sum(task_cpu_ns(self.pid, int(t)) for t in os.listdir(f"/proc/{self.pid}/task"))
        return out

    def command(self, *words: object) -> int:
        self.stdin.write(" ".join(map(str, words)) + "\n")
        self.stdin.flush()
        return int(read_json(self.stdout, f"{self.impl} archive {words[0]}")["ok"])

    def close(self) -> None:
        try:
            self.command("quit")
            self.stdin.close()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.aeron_dir, ignore_errors=True)
        shutil.rmtree(self.archive_dir, ignore_errors=True)


def record_and_replay(
    archive: ArchiveProcess, stream_id: int, message_length: int, total_bytes: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record `total_bytes` from a publisher process, then replay them to a subscriber process; their reports, each
    with the archive's CPU time while it ran ("cpu": recorder/replayer thread and whole process, ns)."""
    archive.command("record", CHANNEL, stream_id)
    pub = subprocess.Popen(
        child("publisher", archive.aeron_dir, stream_id, message_length, total_bytes),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert pub.stdin is not None and pub.stdout is not None
    try:
        read_json(pub.stdout, "publisher start")
        before = archive.cpu_ns()
        pub.stdin.write("go\n")
        pub.stdin.flush()
        recorded = read_json(pub.stdout, "publisher")
        after = archive.cpu_ns()
        pub.wait(timeout=60)
    finally:
        if pub.poll() is None:
            pub.kill()
            pub.wait()
    recorded["cpu"] = {k: after[k] - before[k] for k in after}
    archive.command("stop", CHANNEL, stream_id)
    end = recorded["end_position"]
    sub = subprocess.Popen(
        child("subscriber", archive.aeron_dir, stream_id + 50_000, end), stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert sub.stdout is not None
    try:
        read_json(sub.stdout, "subscriber start")
        before = archive.cpu_ns()
        archive.command("replay", recorded["recording_id"], 0, end, REPLAY_CHANNEL, stream_id + 50_000)
        replayed = read_json(sub.stdout, "subscriber")
        after = archive.cpu_ns()
        sub.wait(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    replayed["cpu"] = {k: after[k] - before[k] for k in after}
    if replayed["bytes"] < end:
        raise RuntimeError(f"{archive.impl} replay stopped at {replayed['bytes']} of {end}")
    return recorded, replayed


def raw_round(directory: str, total_bytes: int) -> tuple[float, float]:
    """One pass of pwrite then pread, 1 MiB chunks, pre-sized file: (write s, read s)."""
    chunk = os.urandom(1 << 20)
    buf = bytearray(len(chunk))
    path = os.path.join(directory, "raw-baseline.bin")
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, total_bytes)
        start = time.perf_counter()
        for off in range(0, total_bytes, len(chunk)):
            os.pwrite(fd, chunk, off)
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        for off in range(0, total_bytes, len(chunk)):
            os.preadv(fd, [buf], off)
        read_s = time.perf_counter() - start
    finally:
        os.close(fd)
        os.remove(path)
    return write_s, read_s


def orchestrate(args: argparse.Namespace) -> None:
    total = args.total_mib * 1024 * 1024
    sizes = [int(s) for s in args.sizes.split(",")]
    impls = args.impls.split(",")
    wrap = shlex.split(args.wrap_ours) if args.wrap_ours else []
    work = tempfile.mkdtemp(prefix="bench-archive-external-", dir=args.dir)
    runs: dict[tuple[str, str, int], list[tuple[float, float]]] = {}  # (impl, what, size) -> [(MB/s, msgs/s)]
    cpu: dict[tuple[str, str, int], list[tuple[float, float]]] = {}  # -> [(MB per worker CPU s, per process CPU s)]
    print(
        f"load averages before: {load_averages()}   ({os.cpu_count()} cpus, {args.rounds} rounds, "
        f"{args.total_mib} MiB per run, warm-up {args.warmup_mib} MiB, 16 MiB terms, work dir {work})",
        flush=True,
    )
    stream = 1000
    members = [*impls, "raw"]
    try:
        for round_no in range(args.rounds):
            k = round_no % len(members)
            for impl in members[k:] + members[:k]:
                if impl == "raw":
                    write_s, read_s = raw_round(work, total)
                    for size in sizes:
                        msgs = total / frame_bytes(size)
                        runs.setdefault(("raw", "record", size), []).append((total / write_s / 1e6, msgs / write_s))
                        runs.setdefault(("raw", "replay", size), []).append((total / read_s / 1e6, msgs / read_s))
                    print(
                        f"  round {round_no} raw  pwrite {total / write_s / 1e6:8.1f} MB/s  "
                        f"pread {total / read_s / 1e6:8.1f} MB/s   load {load_averages()}",
                        flush=True,
                    )
                    continue
                archive = ArchiveProcess(impl, work, wrap if impl == "ours" else [], args.base_tree)
                try:
                    if args.warmup_mib:
                        stream += 1
                        record_and_replay(archive, stream, sizes[0], args.warmup_mib * 1024 * 1024)
                    for size in sizes:
                        stream += 1
                        recorded, replayed = record_and_replay(archive, stream, size, total)
                        rec_s, rep_s = recorded["seconds"], replayed["seconds"]
                        rec = (recorded["end_position"] / rec_s / 1e6, recorded["messages"] / rec_s)
                        rep = (replayed["bytes"] / rep_s / 1e6, recorded["messages"] / rep_s)
                        runs.setdefault((impl, "record", size), []).append(rec)
                        runs.setdefault((impl, "replay", size), []).append(rep)
                        for what, result in (("record", recorded), ("replay", replayed)):
                            worker = result["cpu"]["recorder" if what == "record" else "replayer"]
                            # bytes per CPU second of the archive's worker thread and of its whole process
                            cpu.setdefault((impl, what, size), []).append(
                                (total / max(worker, 1) * 1e9, total / max(result["cpu"]["process"], 1) * 1e9)
                            )
                        print(
                            f"  round {round_no} {impl:<4} {size:>4} B: record {rec[0]:8.1f} MB/s "
                            f"(offered in {recorded['offered_seconds'] * 1e3:6.1f} of {rec_s * 1e3:6.1f} ms)  "
                            f"replay {rep[0]:8.1f} MB/s (subscriber cpu {replayed['cpu_seconds'] / rep_s:4.0%}; "
                            f"replayer cpu {replayed['cpu']['replayer'] / 1e9 / rep_s:4.0%})   "
                            f"load {load_averages()}",
                            flush=True,
                        )
                finally:
                    archive.close()
        print(f"\nload averages after: {load_averages()}")
        report(runs, cpu, members, sizes, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(
    runs: dict[tuple[str, str, int], list[tuple[float, float]]],
    cpu: dict[tuple[str, str, int], list[tuple[float, float]]],
    members: list[str],
    sizes: list[int],
    args: argparse.Namespace,
) -> None:
    """Medians per archive and the medians of per-round ratios of ours to each other member."""
    print(
        f"medians of {args.rounds} alternated rounds, {args.total_mib} MiB of stream per run; MB/s = 10^6 stream "
        f"bytes/s (32-byte frame headers included), M/s = 10^6 messages/s; raw = pwrite/pread of as many bytes"
    )
    others = [m for m in members if m != "ours"] if "ours" in members else []
    header = f"{'':<14}" + "".join(f"{m:>24}" for m in members) + "".join(f"{'ours/' + o:>12}" for o in others)
    print(header)
    for what in ("record", "replay"):
        for size in sizes:
            line = f"{what} {size:>4} B "
            for member in members:
                figures = runs[(member, what, size)]
                mb = statistics.median(f[0] for f in figures)
                msgs = statistics.median(f[1] for f in figures)
                line += f"{mb:8.0f} MB/s {msgs / 1e6:6.2f} M/s"
            for other in others:
                pairs = zip(runs[("ours", what, size)], runs[(other, what, size)], strict=True)
                line += f"{statistics.median(o[0] / b[0] for o, b in pairs):12.2f}"
            print(line, flush=True)
    archives = [m for m in members if m != "raw"]
    print(
        "\nCPU cost (less sensitive to the machine's load): MB of stream per CPU second of the archive's recorder or "
        "replayer thread, and of its whole process (media driver and every other thread included), medians"
    )
    print(f"{'':<14}" + "".join(f"{m + ' worker':>14}{m + ' process':>14}" for m in archives))
    for what in ("record", "replay"):
        for size in sizes:
            line = f"{what} {size:>4} B "
            for member in archives:
                figures = cpu[(member, what, size)]
                line += f"{statistics.median(f[0] for f in figures) / 1e6:14.0f}"
                line += f"{statistics.median(f[1] for f in figures) / 1e6:14.0f}"
            print(line, flush=True)


def frame_bytes(message_length: int) -> int:
    return (32 + message_length + 31) & ~31


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("role_args", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 64 MiB (under two minutes)")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds (default 5)")
    parser.add_argument("--total-mib", type=int, default=256, help="stream MiB per run (default 256)")
    parser.add_argument("--warmup-mib", type=int, default=64, help="unmeasured warm-up stream per archive process")
    parser.add_argument("--sizes", default="32,992", help="payload lengths (default 32,992)")
    parser.add_argument(
        "--impls",
        default="ours,java",
        help="archives to run: ours,java[,java-sparse][,ours-noindex][,base] (java-sparse: Java with sparse log "
        "buffers; ours-noindex: ours keeping no time index)",
    )
    parser.add_argument(
        "--base-tree",
        default=None,
        help="for --impls base: a directory holding another aeron_archive_spark package (before/after comparisons)",
    )
    parser.add_argument("--dir", default=None, help="work directory parent (default: the temp dir)")
    parser.add_argument("--wrap-ours", default=None, help="command prefix for our archive process (a profiler)")
    args = parser.parse_args()
    if args.role == "archive-ours":
        role_archive_ours(*args.role_args)
    elif args.role == "publisher":
        role_publisher(args.role_args[0], *map(int, args.role_args[1:]))
    elif args.role == "subscriber":
        role_subscriber(args.role_args[0], *map(int, args.role_args[1:]))
    else:
        if args.quick:
            args.rounds, args.total_mib, args.warmup_mib = 2, 64, 16
        orchestrate(args)


if __name__ == "__main__":
    main()
