"""The replay section of `bench_cluster`: our archive against Java's, replaying the same recording over UDP to a remote
host (issue 36's yardstick).

Why a Java archive beside ours: our archive's CPU per replayed byte only means something against the archive it
re-implements, run on the same host, the same network and the same bytes. So, on the cluster's `archive` host:
- our archive is the topology's `archive` service (`aeron-archive serve`, embedded C media driver);
- Java's is an ArchivingMediaDriver (Java media driver + Java archive in one JVM, with Java's own defaults) on its
  own Aeron directory, archive directory and control port: 1.53 where `JAVA_AERON_HOME` names a build of
  `../shared/java-aeron/build.sh`, else 1.15.1 from `ci/java_aeron.sh`. Our client cannot connect to 1.15 (it only
  speaks AuthConnectRequest, docs/compatibility.md), so with 1.15.1 the Java archive is driven by Java 1.15.1
  programs of `tests/benchmarks/java115/` (the archive's launcher starts the recording; a Java replay consumer with
  its own Java media driver runs on the remote host);
- a publisher on the `publisher` host sends the same stream (1 KiB messages) to both, on two exclusive publications
  with the same session id, initial term id, term length and MTU, so the two recordings hold identical bytes (checked:
  a SHA-256 of each recording's [start, stop) read from its segment files, whatever the file naming);
- a replay consumer on `worker1` (our client and an embedded C media driver; Java's client for 1.15.1) replays each
  recording to its own address over UDP, reading every byte (frames counted, end position checked), variants
  alternated over the repetitions: Java's archive, ours at the recording's MTU, ours asked for a larger replay MTU
  (`mtu=N` on the replay channel, which Java's archive ignores);
- around each replay the orchestrator reads the CPU time of the serving archive's process (its media driver is in
  the same process for both) and of the whole archive host from /proc, so each run is costed exactly, not sampled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2]
JAVA115_SRC = Path(__file__).resolve().parent / "java115"
MESSAGE_LENGTH = 1024
STREAM_ID = 9400
REPLAY_STREAM_ID = 9401
JAVA_CONTROL_PORT = 8020
OURS_PORT = 40800  # the bench stream's endpoint on the archive host, recorded by our archive
JAVA_PORT = 40801  # ... and by Java's
# Both publications share these, so both recordings hold the same frames byte for byte.
SESSION_ID = 0x5A5A
INITIAL_TERM_ID = 7
TERM_LENGTH = 16 * 1024 * 1024
JAVA_AERON_DIR = "/dev/shm/aas-bench-java-aeron"
JAVA_ARCHIVE_DIR = "/tmp/bench-java-archive"
READY_TIMEOUT_S = 90.0
RECORD_TIMEOUT_S = 600.0
REPLAY_TIMEOUT_S = 300.0


class JavaUnavailable(Exception):
    """No Java archive can run here; the message says why (the replay section then runs without it)."""


@dataclass(frozen=True)
class JavaBuild:
    """A Java Aeron to run the yardstick archive with: its version, the JVM command prefix and class path."""

    version: str
    java: str
    jvm_options: tuple[str, ...]
    classpath: str

    def command(self, main_class: str, *args: str, properties: tuple[str, ...] = ()) -> list[str]:
        return [self.java, *self.jvm_options, *properties, "-cp", self.classpath, main_class, *args]


def find_java(which: str = "auto") -> JavaBuild:
    """Java 1.53 when `JAVA_AERON_HOME` names a build (`which` "auto" or "1.53"), else 1.15.1 ("auto" or "1.15").

    The interop tests' environments find, fetch and check both (tests/interop); they are reused so the benchmark
    runs exactly the Java the interop tests run against."""
    sys.path.insert(0, str(PROJECT / "tests"))  # the interop modules import each other as `interop.*`
    built = Path.home() / ".cache" / "java-aeron"  # where shared/java-aeron/README.md builds it
    if not os.environ.get("JAVA_AERON_HOME") and (built / "env.sh").is_file():
        os.environ["JAVA_AERON_HOME"] = str(built)
    reasons = []
    if which in ("auto", "1.53"):
        from interop.java153env import Java153Env, Java153Unavailable

        try:
            env153 = Java153Env.get()
            return JavaBuild("1.53", env153.java, env153.jvm_options, env153.classpath_aeron)
        except Java153Unavailable as ex:
            reasons.append(f"Java 1.53: {ex}")
    if which in ("auto", "1.15"):
        from interop.javaenv import JVM_FLAGS, JavaEnv
        from interop.javaenv import JavaUnavailable as Java115Unavailable

        try:
            env115 = JavaEnv.get()
            classes = _compile_java115(env115.classpath)
            # The interop tests stop the JIT at C1 to start faster; a yardstick runs Java at full speed.
            flags = tuple(flag for flag in JVM_FLAGS if not flag.startswith("-XX:TieredStopAtLevel"))
            return JavaBuild("1.15.1", env115.java, flags, f"{classes}{os.pathsep}{env115.classpath}")
        except Java115Unavailable as ex:
            reasons.append(f"Java 1.15.1: {ex}")
    raise JavaUnavailable("; ".join(reasons) or ("--java none" if which == "none" else f"unknown Java {which!r}"))


def _compile_java115(classpath: str) -> Path:
    """The 1.15.1 launcher and consumer, compiled once per content hash (beside the interop tests' classes)."""
    sources = sorted(JAVA115_SRC.glob("*.java"))
    digest = hashlib.sha256(classpath.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    target = PROJECT / ".venv" / "java" / f"bench-classes-{digest.hexdigest()[:16]}"
    if (target / ".complete").is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise JavaUnavailable("javac not found on PATH")
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run(
        [javac, "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(tmp), *map(str, sources)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac of {JAVA115_SRC} failed:\n{proc.stdout}\n{proc.stderr}")
    (tmp / ".complete").write_text("ok\n")
    if not (target / ".complete").is_file():
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    shutil.rmtree(tmp, ignore_errors=True)
    return target


# -- on the hosts: publisher, replay consumer, digest ----------------------------------------------------------


def publish(config: dict[str, Any]) -> None:
    """`publisher` host: `config["megabytes"]` of 1 KiB messages on each of `config["channels"]` (one exclusive
    publication each, same session id and initial term id), then the final positions as one JSON line; the
    publications stay open until stdin ends, so the archives' images do not end before they have every byte."""
    import pyarrow as pa

    from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver
    from aeron_archive_spark.connector.sink.publisher import FramePublisher

    params = (
        f"|term-length={TERM_LENGTH}|mtu={config['mtu']}|session-id={SESSION_ID}"
        f"|init-term-id={INITIAL_TERM_ID}|term-id={INITIAL_TERM_ID}|term-offset=0"
    )
    with EmbeddedMediaDriver("/dev/shm/aas-bench-publisher", dir_delete_on_start=True) as driver:
        client = AeronClient(driver.aeron_dir, client_name="aas-bench-publisher")
        try:
            publications = [client.add_exclusive_publication(c + params, STREAM_ID) for c in config["channels"]]
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not all(p.is_connected for p in publications):
                if time.monotonic() > deadline:
                    raise RuntimeError("the archives did not connect to the bench stream")
                time.sleep(0.01)
            publishers = [FramePublisher(p, 60.0, f"bench stream {p.channel}") for p in publications]
            pattern = (bytes(range(256)) * (MESSAGE_LENGTH // 256 + 1))[:MESSAGE_LENGTH]
            values = pa.array([pattern] * 1024, pa.binary())  # 1 MiB of messages per offer
            for _ in range(max(1, int(config["megabytes"] * 1e6) // (MESSAGE_LENGTH * 1024))):
                for publisher in publishers:  # alternately, so neither archive is left idle while the other records
                    publisher.publish(values)
            print(json.dumps({"positions": [p.position for p in publishers]}), flush=True)
            sys.stdin.read()
            for publication in publications:
                publication.close()
            time.sleep(config.get("drainSeconds", 1.0))  # end of stream sent from the driver's threads
        finally:
            client.close()


def consume(config: dict[str, Any]) -> None:
    """Remote host: replays requested as JSON lines on stdin (`archive`, `recordingId`, `position`, `length`, `mtu`),
    each answered by one line: frame bytes read, the image's end position, seconds from the request to the last byte.

    One embedded C media driver and one control session per archive for the whole run (as an executor keeps them);
    each replay gets a subscription on an ephemeral port of this host, resolved before the request names it."""
    from aeron_archive_spark.archive import AeronArchive
    from aeron_archive_spark.archive.native import AeronClient, EmbeddedMediaDriver

    ip = config["ip"]
    with EmbeddedMediaDriver("/dev/shm/aas-bench-consumer", dir_delete_on_start=True) as driver:
        client = AeronClient(driver.aeron_dir, client_name="aas-bench-consumer")
        archives: dict[str, Any] = {}
        try:
            for name, channel in config["archives"].items():
                archives[name] = AeronArchive.connect(
                    aeron=client,
                    control_request_channel=channel,
                    control_response_channel=f"aeron:udp?endpoint={ip}:0",
                    message_timeout_s=30.0,
                )
            print(json.dumps({"ready": sorted(archives)}), flush=True)
            for line in sys.stdin:
                if line.strip():
                    request = json.loads(line)
                    result = _replay_once(client, archives[request["archive"]], ip, request)
                    print(json.dumps(result), flush=True)
        finally:
            for archive in archives.values():
                archive.close()
            client.close()


def _replay_once(client: Any, archive: Any, ip: str, request: dict[str, Any]) -> dict[str, Any]:
    """One replay of [position, position + length) to this host, every frame read; the end position checked."""
    from aeron_archive_spark.archive.server.agent import BackoffIdleStrategy
    from aeron_archive_spark.archive.storage.frames import to_int32

    position, length = int(request["position"]), int(request["length"])
    end = position + length
    subscription = client.add_subscription(f"aeron:udp?endpoint={ip}:0", REPLAY_STREAM_ID)
    try:
        channel = subscription.try_resolve_channel_endpoint_port(timeout_s=10.0)
        if channel is None:
            raise RuntimeError("the replay subscription's port was not bound within 10 s")
        if request.get("mtu"):
            channel += f"|mtu={int(request['mtu'])}"
        start = time.perf_counter()
        session_id = to_int32(
            archive.start_replay(int(request["recordingId"]), position, length, channel, REPLAY_STREAM_ID)
        )
        deadline = time.monotonic() + REPLAY_TIMEOUT_S
        image = None
        while image is None:
            image = subscription.image_by_session_id(session_id)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replay image {session_id} did not connect")
            time.sleep(0.0001)
        received = [0]

        def on_block(block: memoryview, _session_id: int, _term_id: int) -> None:
            received[0] += len(block)

        idle = BackoffIdleStrategy()
        while image.position < end:
            work = image.block_poll(on_block, 1 << 21)
            if not work and (image.is_end_of_stream or time.monotonic() > deadline):
                break
            idle.idle(work)
        seconds = time.perf_counter() - start
        reached = image.position
    finally:
        subscription.close()
    if reached != end or received[0] != length:
        raise RuntimeError(f"replay ended at {reached} with {received[0]} bytes read, expected {end} and {length}")
    return {"bytes": received[0], "endPosition": reached, "seconds": seconds}


def digest(config: dict[str, Any]) -> None:
    """Archive host: the SHA-256 of a recording's [start, stop) read from its segment files, named by base position
    (ours, Java >= 1.20: `<id>-<position>.rec`) or by index (Java 1.15: `<id>-<index>.rec`), so copies made by
    archives of different layouts compare by content alone."""
    start, stop, segment = int(config["start"]), int(config["stop"]), int(config["segmentLength"])
    base = start - start % segment
    sha = hashlib.sha256()
    while base < stop:
        name = base if config["naming"] == "position" else (base - (start - start % segment)) // segment
        with open(Path(config["dir"], f"{config['recordingId']}-{name}.rec"), "rb") as f:
            lo = max(start - base, 0)
            f.seek(lo)
            sha.update(f.read(min(segment, stop - base) - lo))
        base += segment
    print(json.dumps({"result": {"sha256": sha.hexdigest(), "length": stop - start}}), flush=True)


# -- the orchestrator's side (root namespace) --------------------------------------------------------------------


def process_cpu(pid: int) -> tuple[float, dict[str, float]]:
    """CPU seconds of a process (user + system, its ended threads included) and of its live threads by name."""
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    threads: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
            group = re.sub(r"[-_ #]*\d+", "", name).strip() or name
            threads[group] = threads.get(group, 0.0) + sum(int(v) for v in rest.split()[11:13]) / tick
    return (int(fields[11]) + int(fields[12])) / tick, threads


def host_cpu(topology: Any, host: str) -> float:
    """CPU seconds of every live process of a host so far (its network namespace's pids)."""
    listed = subprocess.run(["ip", "netns", "pids", topology.host(host).netns], capture_output=True, text=True)
    total = 0.0
    for pid in listed.stdout.split():
        with contextlib.suppress(OSError):
            total += process_cpu(int(pid))[0]
    return total


class _Lines:
    """A process on a host talking JSON lines over its stdin and stdout."""

    def __init__(self, process: subprocess.Popen[str], what: str) -> None:
        self.process = process
        self.what = what

    def read(self, timeout_s: float) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout_s
        while True:
            readable, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = stdout.readline() if readable else ""
            if not line:
                raise RuntimeError(f"{self.what} gave no answer within {timeout_s:.0f} s (exit {self.process.poll()})")
            if line.startswith("{"):
                value: dict[str, Any] = json.loads(line)
                return value

    def send(self, request: dict[str, Any] | str) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write((request if isinstance(request, str) else json.dumps(request)) + "\n")
        stdin.flush()

    def close(self, timeout_s: float = 30.0) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _module(topology: Any, host: str, command: str, config: dict[str, Any], **kwargs: Any) -> subprocess.Popen[str]:
    argv = [topology.python, "-m", "tests.benchmarks.cluster_java_archive", command, json.dumps(config)]
    return topology.spawn(  # type: ignore[no-any-return]
        host, argv, cwd=str(PROJECT), env={"PYTHONPATH": str(PROJECT)}, stdin=subprocess.PIPE, **kwargs
    )


def run_on(topology: Any, host: str, module: str, command: str, config: dict[str, Any], timeout: float) -> Any:
    """`python -m module command <config JSON>` on a host, to completion; the value of its `{"result": ...}` line."""
    argv = [topology.python, "-m", module, command, json.dumps(config)]
    result = topology.run(host, argv, cwd=str(PROJECT), timeout=timeout, env={"PYTHONPATH": str(PROJECT)})
    if result.returncode != 0:
        raise RuntimeError(f"{command} on {host} failed:\n{result.stderr[-4000:]}")
    for line in reversed(result.stdout.splitlines()):
        if line.startswith('{"result"'):
            return json.loads(line)["result"]
    raise RuntimeError(f"{command} on {host}: no result:\n{result.stdout[-2000:]}")


def _run_module(topology: Any, host: str, command: str, config: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = run_on(topology, host, "tests.benchmarks.cluster_java_archive", command, config, 600)
    return value


@dataclass
class _JavaArchive:
    """The Java archive running on the archive host: its JVM, and (1.15.1) the launcher's line protocol."""

    build: JavaBuild
    process: subprocess.Popen[str]
    control_channel: str
    lines: _Lines | None = None  # the 1.15.1 launcher answers `describe`

    @property
    def pid(self) -> int:
        return self.process.pid  # nsenter execs the command: this is the JVM


@contextlib.contextmanager
def java_archive(topology: Any, build: JavaBuild, record_channel: str) -> Iterator[_JavaArchive]:
    """Java's ArchivingMediaDriver on the archive host (Java's driver and archive defaults, its own directories and
    control port), recording `record_channel` (1.15.1: its launcher starts the recording; 1.53: the caller does)."""
    ip = topology.ip("archive")
    control = f"aeron:udp?endpoint={ip}:{JAVA_CONTROL_PORT}"
    topology.run("archive", ["rm", "-rf", JAVA_ARCHIVE_DIR, JAVA_AERON_DIR], check=True)
    properties = (
        f"-Daeron.dir={JAVA_AERON_DIR}",
        "-Daeron.dir.delete.on.start=true",
        "-Daeron.dir.delete.on.shutdown=true",
        f"-Daeron.archive.dir={JAVA_ARCHIVE_DIR}",
        f"-Daeron.archive.control.channel={control}",
        f"-Daeron.archive.replication.channel=aeron:udp?endpoint={ip}:0",
        "-Daeron.archive.id=7",
    )
    if build.version == "1.53":
        argv = build.command("io.aeron.archive.ArchivingMediaDriver", properties=properties)
    else:
        argv = build.command(
            "BenchJavaArchive115", JAVA_AERON_DIR, JAVA_ARCHIVE_DIR, control, record_channel, str(STREAM_ID)
        )
    process = topology.spawn("archive", argv, stdin=subprocess.PIPE)
    archive = _JavaArchive(build, process, control)
    try:
        if build.version == "1.53":
            marks = [f"{JAVA_ARCHIVE_DIR}/archive-mark.dat", f"{JAVA_AERON_DIR}/cnc.dat"]
            deadline = time.monotonic() + READY_TIMEOUT_S
            while topology.run("archive", ["sh", "-c", f"test -f {marks[0]} && test -f {marks[1]}"]).returncode:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Java archive did not start (exit {process.poll()})")
                time.sleep(0.2)
        else:
            archive.lines = _Lines(process, "the Java 1.15.1 archive")
            archive.lines.read(READY_TIMEOUT_S)
        yield archive
    finally:
        if archive.lines is not None:
            archive.lines.close()
        else:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        topology.run("archive", ["rm", "-rf", JAVA_ARCHIVE_DIR, JAVA_AERON_DIR])


def _last_of(recordings: list[dict[str, Any]]) -> dict[str, Any] | None:
    ours = [r for r in recordings if r["streamId"] == STREAM_ID]
    return ours[-1] if ours else None


def replay_section(
    topology: Any, *, megabytes: float, mtu: int, replay_mtu: int, reps: int, java: str = "auto"
) -> dict[str, Any]:
    """Record the same stream in both archives, then alternate timed replays to `worker1`; figures by variant."""
    from tests.cluster.topology import PUBLISHER_SCRIPT, ArchiveSession, _wait_until

    archive_ip = topology.ip("archive")
    ours_channel = f"aeron:udp?endpoint={archive_ip}:{OURS_PORT}"
    java_channel = f"aeron:udp?endpoint={archive_ip}:{JAVA_PORT}"
    build: JavaBuild | None = None
    try:
        build = find_java(java)
        print(f"replay section: Java archive {build.version}")
    except JavaUnavailable as ex:
        print(f"replay section: no Java archive, its part is skipped ({ex})")
    with contextlib.ExitStack() as stack:
        ours_session = topology.archive_session("archive", topology.archive_aeron_dir, topology.archive_dir)
        stack.callback(ours_session.close)
        java_archive_ = stack.enter_context(java_archive(topology, build, java_channel)) if build else None
        java_session = None
        if java_archive_ is not None and build is not None and build.version == "1.53":
            argv = [
                topology.python,
                str(PUBLISHER_SCRIPT),
                "session",
                "--control-channel",
                java_archive_.control_channel,
            ]
            argv += ["--control-response-channel", f"aeron:udp?endpoint={archive_ip}:0", "--timeout-s", "30"]
            java_session = ArchiveSession(topology.spawn("archive", argv, stdin=subprocess.PIPE), "archive")
            stack.callback(java_session.close)
            java_session.call("start_recording", channel=java_channel, stream_id=STREAM_ID)
        subscription_id = ours_session.call("start_recording", channel=ours_channel, stream_id=STREAM_ID)

        channels = [ours_channel] + ([java_channel] if java_archive_ else [])
        publisher = _Lines(
            _module(topology, "publisher", "publish", {"channels": channels, "mtu": mtu, "megabytes": megabytes}),
            "the bench publisher",
        )
        started = time.monotonic()
        positions = publisher.read(RECORD_TIMEOUT_S)["positions"]
        ours_rec = _wait_until(lambda: _last_of(ours_session.call("recordings")), 30, "our recording")
        ours_session.call("await_position", recording_id=ours_rec["recordingId"], position=positions[0], timeout_s=300)
        if java_session is not None:
            java_rec = _wait_until(lambda: _last_of(java_session.call("recordings")), 30, "Java's recording")
            java_session.call(
                "await_position", recording_id=java_rec["recordingId"], position=positions[1], timeout_s=300
            )
        publisher.close()
        ours_desc = ours_session.call("await_position", recording_id=ours_rec["recordingId"], position=-1, timeout_s=60)
        ours_session.call("stop_recording_subscription", subscription_id=subscription_id)
        recordings = {"ours": ours_desc}
        if java_session is not None:
            recordings["java"] = java_session.call(
                "await_position", recording_id=java_rec["recordingId"], position=-1, timeout_s=60
            )
        elif java_archive_ is not None and java_archive_.lines is not None:

            def stopped() -> dict[str, Any] | None:
                assert java_archive_ is not None and java_archive_.lines is not None
                java_archive_.lines.send("describe")
                found = _last_of(java_archive_.lines.read(30)["recordings"])
                return found if found and found["stopPosition"] >= positions[1] else None

            recordings["java"] = _wait_until(stopped, 60, "Java's recording to stop", 0.2)
        took = time.monotonic() - started
        print(f"  recorded {positions[0] / 1e6:.0f} MB in {' and '.join(recordings)} in {took:.1f} s")
        digests = {}
        for name, row in recordings.items():
            digests[name] = _run_module(
                topology,
                "archive",
                "digest",
                {
                    "dir": topology.archive_dir if name == "ours" else JAVA_ARCHIVE_DIR,
                    "recordingId": row["recordingId"],
                    "start": row["startPosition"],
                    "stop": row["stopPosition"],
                    "segmentLength": row["segmentFileLength"],
                    "naming": "index" if name == "java" and build and build.version == "1.15.1" else "position",
                },
            )
        if len({(d["sha256"], d["length"]) for d in digests.values()}) != 1:
            raise RuntimeError(f"the two recordings differ: {digests}")
        same = "identical, " if len(digests) > 1 else ""
        print(f"  recordings {same}{digests['ours']['length']} bytes, SHA-256 {digests['ours']['sha256'][:16]}...")
        # The sessions' processes (embedded media drivers) would otherwise idle on the archive host during the runs.
        ours_session.close()
        if java_session is not None:
            java_session.close()
        try:
            return _timed_replays(topology, recordings, java_archive_, mtu, replay_mtu, reps)
        finally:
            _run_module(
                topology,
                "archive",
                "purge",
                {"controlChannel": topology.archive_control_channel, "recordingId": ours_desc["recordingId"]},
            )


def purge(config: dict[str, Any]) -> None:
    """Archive host: purge the bench recording from our archive, so the topology's /tmp (RAM) gets its space back."""
    from aeron_archive_spark.archive import AeronArchive
    from aeron_archive_spark.archive.native import EmbeddedMediaDriver

    ip = config["controlChannel"].split("endpoint=")[1].split(":")[0]
    with (
        EmbeddedMediaDriver("/dev/shm/aas-bench-purge", dir_delete_on_start=True) as driver,
        AeronArchive.connect(
            aeron_dir=driver.aeron_dir,
            control_request_channel=config["controlChannel"],
            control_response_channel=f"aeron:udp?endpoint={ip}:0",
        ) as archive,
    ):
        archive.purge_recording(int(config["recordingId"]))
    print(json.dumps({"result": {}}), flush=True)


def _timed_replays(
    topology: Any,
    recordings: dict[str, dict[str, Any]],
    java_archive_: _JavaArchive | None,
    mtu: int,
    replay_mtu: int,
    reps: int,
) -> dict[str, Any]:
    """Warm-up, then `reps` rounds of every variant (order rotated each round); CPU of the serving archive process
    and of the whole archive host read right before the request and right after the last byte."""
    consumer_ip = topology.ip("worker1")
    ours_pid = topology.service_pid("archive")
    variants: dict[str, tuple[str, int | None, int]] = {
        f"ours, replay MTU {mtu}": ("ours", None, ours_pid),
        f"ours, replay MTU {replay_mtu}": ("ours", replay_mtu, ours_pid),
    }
    archives = {"ours": topology.archive_control_channel}
    java_consumer = None
    if java_archive_ is not None:
        variants = {f"Java {java_archive_.build.version}": ("java", None, java_archive_.pid), **variants}
        if java_archive_.build.version == "1.53":
            archives["java"] = java_archive_.control_channel
    with contextlib.ExitStack() as stack:
        consumer = _Lines(
            _module(topology, "worker1", "consume", {"ip": consumer_ip, "archives": archives}), "consumer"
        )
        stack.callback(consumer.close)
        consumer.read(READY_TIMEOUT_S)
        if java_archive_ is not None and java_archive_.build.version == "1.15.1":
            argv = java_archive_.build.command(
                "BenchReplayConsumer115",
                "/dev/shm/aas-bench-java-consumer",
                java_archive_.control_channel,
                consumer_ip,
                str(REPLAY_STREAM_ID),
            )
            java_consumer = _Lines(topology.spawn("worker1", argv, stdin=subprocess.PIPE), "Java consumer")
            stack.callback(java_consumer.close)
            java_consumer.read(READY_TIMEOUT_S)
        idle = _idle_cpu({name: pid for name, (_, _, pid) in variants.items()}, seconds=3.0)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        names = list(variants)
        for round_no in range(reps + 1):  # round 0 warms up the JIT, the page cache and both clients
            order = names[round_no % len(names) :] + names[: round_no % len(names)]
            for name in order:
                which, replay_mtu_, pid = variants[name]
                row = recordings[which]
                request = {
                    "archive": which,
                    "recordingId": row["recordingId"],
                    "position": row["startPosition"],
                    "length": row["stopPosition"] - row["startPosition"],
                    "mtu": replay_mtu_,
                }
                lines = java_consumer if which == "java" and java_consumer is not None else consumer
                before, before_threads = process_cpu(pid)
                host_before = host_cpu(topology, "archive")
                lines.send(
                    request
                    if lines is consumer
                    else f"replay {request['recordingId']} {request['position']} {request['length']}"
                )
                result = lines.read(REPLAY_TIMEOUT_S)
                after, after_threads = process_cpu(pid)
                host_after = host_cpu(topology, "archive")
                if result.get("bytes") != request["length"]:
                    raise RuntimeError(f"{name}: {result} for {request}")
                if round_no:
                    runs[name].append(
                        {
                            "seconds": result["seconds"],
                            "bytes": result["bytes"],
                            "cpu": after - before,
                            "hostCpu": host_after - host_before,
                            "threads": {k: v - before_threads.get(k, 0.0) for k, v in after_threads.items()},
                        }
                    )
    return _figures(runs, idle)


def _idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each archive process's CPU while nothing is replayed (our archive still records the topology's 500 msg/s
    feed): cores busy at rest, so a run's figure can be read against what the process spends anyway."""
    before = {name: process_cpu(pid)[0] for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: (process_cpu(pid)[0] - before[name]) / seconds for name, pid in pids.items()}


def _figures(runs: dict[str, list[dict[str, Any]]], idle: dict[str, float]) -> dict[str, Any]:
    """Medians by variant. `archiveCpuPer100MB` is what the archive process spent during the runs, all of it (the
    target's figure); `aboveRestPer100MB` takes away what it spends at rest over the same time (our archive records
    the topology's feed, Java's agents back off between spins), which is what the replay itself cost."""
    figures: dict[str, Any] = {}
    for name, rows in runs.items():
        per_100mb = [r["cpu"] * 1e8 / r["bytes"] for r in rows]
        above_rest = [(r["cpu"] - idle[name] * r["seconds"]) * 1e8 / r["bytes"] for r in rows]
        host_per_100mb = [r["hostCpu"] * 1e8 / r["bytes"] for r in rows]
        threads: dict[str, float] = {}
        for r in rows:
            for k, v in r["threads"].items():
                threads[k] = threads.get(k, 0.0) + v * 1e8 / r["bytes"] / len(rows)
        figures[name] = {
            "MB/s": statistics.median(r["bytes"] / 1e6 / r["seconds"] for r in rows),
            "archiveCpuPer100MB": statistics.median(per_100mb),
            "archiveCpuPer100MBRange": [round(min(per_100mb), 3), round(max(per_100mb), 3)],
            "hostCpuPer100MB": statistics.median(host_per_100mb),
            "aboveRestPer100MB": statistics.median(above_rest),
            "idleCores": idle[name],
            "threads": {k: round(v, 3) for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v >= 0.01},
        }
    return figures


def print_figures(figures: dict[str, Any]) -> dict[str, float]:
    """The table, then ratios of ours to Java's CPU per 100 MB (issue 36's target: <= 0.5 at the recording MTU)."""
    for name, f in figures.items():
        print(
            f"  replay {name:<26} {f['MB/s']:7.1f} MB/s  archive CPU s per 100 MB {f['archiveCpuPer100MB']:5.2f} "
            f"[{f['archiveCpuPer100MBRange'][0]:.2f}-{f['archiveCpuPer100MBRange'][1]:.2f}] "
            f"(archive host {f['hostCpuPer100MB']:5.2f}); above rest {f['aboveRestPer100MB']:5.2f} "
            f"(at rest {f['idleCores']:.3f} cores)"
        )
        for thread, value in list(f["threads"].items())[:6]:
            print(f"      {value:5.2f}  {thread}")
    java = next((f for name, f in figures.items() if name.startswith("Java")), None)
    ratios: dict[str, float] = {}
    if java is not None:
        for name, f in figures.items():
            if name.startswith("ours"):
                key = "replay_cpu_" + re.sub(r"\W+", "_", name).strip("_").lower() + "_vs_java"
                ratios[key] = f["archiveCpuPer100MB"] / java["archiveCpuPer100MB"]
                ratios[key + "_above_rest"] = f["aboveRestPer100MB"] / java["aboveRestPer100MB"]
    for key, value in ratios.items():
        print(f"  ratio {key:<44} {value:.2f}")
    return ratios


COMMANDS = {"publish": publish, "consume": consume, "digest": digest, "purge": purge}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
