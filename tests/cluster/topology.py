"""The multi-host test topology of issue 10: a Spark cluster, an archive and a live publisher on six "hosts".

Why: the connector must work on a real cluster where nothing is shared by accident: no common /tmp, /dev/shm
(Aeron's media driver directories), loopback or host name. Each host here is a set of Linux namespaces on this
machine, so the tests get that isolation without VMs or containers. The root filesystem stays visible to every
host, as an installed package would be on real machines: the project, its .venv, Java and Spark are the same
everywhere.

Network (every name starts with `aas`, so nothing else on the machine can collide with it):

    netns aas-switch:  bridge aas-br0 --- veth aas-<host> ===  eth0 of netns aas-<host>  (10.77.0.x/24)

The bridge sits in a namespace of its own, not in the root namespace: the root namespace gets no interface,
address or route, so its networking cannot break, and the root's iptables (br_netfilter) never see the traffic.
Hosts have no route out of 10.77.0.0/24. `cut_link(host)` takes the host's switch port down (a pulled cable).

Each host also has a mount and a UTS namespace, persisted as nsfs bind mounts under the run directory
(`unshare --mount=FILE --uts=FILE`), so any later process can join the host with `nsenter`: private tmpfs on
/tmp and /dev/shm, its own /etc/hosts (every host name -> its address; Spark uses host names) and hostname.
`driver` and `driver2` share /chk (a directory of the run directory bind-mounted in both), standing in for the
HDFS/S3 a checkpoint location would be on. `hide_project_on_workers()` covers the project's files (its .venv
install and the repository's package directories) inside the workers' mount namespaces, as on machines it was
never installed on; `show_project_on_workers()` uncovers them.

Services (`up` starts them, waits until each is ready):

    archive    aeron-archive serve --dir /tmp/archive (embedded media driver), control aeron:udp?endpoint=<ip>:8010
    publisher  tests/cluster/publisher.py: numbered SBE trades to aeron:udp?endpoint=<archive ip>:40456,
               recorded REMOTE by the archive
    master     Spark standalone master on `driver`: spark://<driver ip>:7077, web UI :8080
    worker1/2  Spark workers, 1 core and 2g each, on `worker1` and `worker2`

Everything the topology keeps lives in the run directory (default /run/aas-cluster, or $AAS_CLUSTER_RUN_DIR):
ns/ (namespace files), state.json (service pids), logs/<service>.log, chk/. So `up` in one process and
`status`, `run` or `down` in later ones work on the same topology. Command line: `bash ci/cluster.sh
up|down|status|run HOST CMD...` (this module's `main`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


PROJECT_DIR = Path(__file__).resolve().parents[2]
PUBLISHER_SCRIPT = Path(__file__).resolve().with_name("publisher.py")
SCHEMA_PATH = PROJECT_DIR / "examples" / "market_data.xml"

PREFIX = "aas"
SUBNET = "10.77.0"
PREFIX_LENGTH = 24
SWITCH_NETNS = f"{PREFIX}-switch"
BRIDGE = f"{PREFIX}-br0"
NETNS_DIR = Path("/var/run/netns")
RUN_DIR_DEFAULT = Path("/run/aas-cluster")

HOST_OCTETS: Mapping[str, int] = {
    "archive": 10,
    "publisher": 11,
    "driver": 20,
    "driver2": 21,
    "worker1": 31,
    "worker2": 32,
}
CHECKPOINT_HOSTS = ("driver", "driver2")
CHECKPOINT_DIR = "/chk"
WORKERS = ("worker1", "worker2")
SERVICES = ("archive", "publisher", "master", *WORKERS)
# Started on demand (`start_service("connect")`), not by `up`: a Spark Connect server on the driver host, whose
# executors run on the workers.
CONNECT_SERVICE = "connect"
CONNECT_PORT = 15002
CONNECT_READY_LINE = "Spark Connect server started"

ARCHIVE_DIR = "/tmp/archive"
ARCHIVE_CONTROL_PORT = 8010
ARCHIVE_CONTROL_STREAM_ID = 10
MARKET_DATA_PORT = 40456
MARKET_DATA_STREAM_ID = 1001
PUBLISHER_STATUS_FILE = "/tmp/publisher/status.json"
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_UI_PORT = 8081
# Spark's daemons need little; executors get their memory from the application (spark.executor.memory).
SPARK_DAEMON_MEMORY = "512m"
WORKER_CORES = 1
WORKER_MEMORY = "2g"
READY_TIMEOUT_S = 90.0
# What the Spark daemons log once ready (the master has bound its ports; a worker is registered).
MASTER_READY_LINE = "New state: ALIVE"
WORKER_READY_LINE = "Successfully registered with master"
STOP_TIMEOUT_S = 15.0


class TopologyError(RuntimeError):
    """A step of bringing the topology up or down failed (the message names the step and the log to read)."""


@dataclass(frozen=True)
class Host:
    """One host: its name (also its hostname) and address; its namespaces are named after it."""

    name: str
    ip: str

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def switch_port(self) -> str:
        """The bridge end of the host's veth pair, in the switch namespace (at most 15 characters)."""
        return f"{PREFIX}-{self.name}"


@dataclass(frozen=True)
class Service:
    """A long-running process of the topology: where it runs and how it is started (kept to restart it)."""

    name: str
    host: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "argv": list(self.argv), "env": dict(self.env)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Service:
        return cls(data["name"], data["host"], tuple(data["argv"]), dict(data["env"]))


class ArchiveSession:
    """The test's end of publisher.py `session` on a host: `call(command, **args)` sends one JSON request and
    returns the result (AssertionError with the process's error, or if it gives no answer in `answer_within_s`)."""

    def __init__(self, process: subprocess.Popen[Any], host: str) -> None:
        self.process = process
        self.host = host
        self.ready = self._answer("connect", READY_TIMEOUT_S)

    def _answer(self, what: str, timeout_s: float) -> Any:
        stdout = self.process.stdout
        assert stdout is not None
        readable, _, _ = select.select([stdout], [], [], timeout_s)
        line = stdout.readline() if readable else ""
        if not line:
            raise AssertionError(f"the archive session on {self.host} gave no answer to {what} in {timeout_s:.0f}s")
        reply = json.loads(line)
        if "error" in reply:
            raise AssertionError(f"{what} on {self.host}: {reply['error']}")
        return reply["result"]

    def call(self, command: str, answer_within_s: float = 60.0, **args: Any) -> Any:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"command": command, **args}) + "\n")
        stdin.flush()
        return self._answer(command, answer_within_s)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()  # end of input: the session closes its client and exits
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


# -- processes ----------------------------------------------------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if it is gone or a zombie.

    A pid together with its start time names one process for good: pids are reused, start times are not.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _sh(argv: Sequence[str], *, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a command in the root namespaces; a failure raises TopologyError with its stderr."""
    log.debug("$ %s", " ".join(argv))
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise TopologyError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _wait_until[T](condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll `condition` until it returns something truthy; TopologyError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TopologyError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _mount_points() -> set[str]:
    """Mount points of this process's mount namespace (os.path.ismount misses bind mounts of a directory)."""
    points = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.add(point.encode().decode("unicode_escape"))  # octal escapes such as \040 for a space
    return points


def _venv_python() -> str:
    """The project's .venv interpreter: every host runs it (the root filesystem is shared)."""
    candidate = PROJECT_DIR / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def _spark_home() -> str:
    """pyspark's own directory: it ships bin/spark-class and the jars the standalone daemons need."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise TopologyError("pyspark is not installed in this interpreter")
    return str(next(iter(spec.submodule_search_locations)))


def unavailable_reason() -> str | None:
    """Why this machine cannot build the topology, or None if it can (used to skip or fail the cluster tests)."""
    if not sys.platform.startswith("linux"):
        return "the cluster topology needs Linux namespaces"
    if os.geteuid() != 0:
        return "the cluster topology needs root (network and mount namespaces, bridges, mounts)"
    missing = [tool for tool in ("ip", "unshare", "nsenter", "mount", "umount", "java") if shutil.which(tool) is None]
    if missing:
        return f"the cluster topology needs {', '.join(missing)} on PATH"
    if importlib.util.find_spec("pyspark") is None:
        return "the cluster topology needs pyspark"
    probe = subprocess.run(["unshare", "--net", "--mount", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create namespaces here: {probe.stderr.strip() or probe.returncode}"
    return None


# -- the topology -------------------------------------------------------------------------------------------------


class Topology:
    """The hosts, their services, and how to run commands on them; `up()` builds it, `down()` removes it all."""

    archive_control_stream_id = ARCHIVE_CONTROL_STREAM_ID
    market_data_stream_id = MARKET_DATA_STREAM_ID
    archive_dir = ARCHIVE_DIR
    checkpoint_dir = CHECKPOINT_DIR
    schema_path = SCHEMA_PATH
    workers = WORKERS

    def __init__(self, run_dir: Path | str | None = None, *, publisher_rate: float = 500.0) -> None:
        self.run_dir = Path(run_dir or os.environ.get("AAS_CLUSTER_RUN_DIR") or RUN_DIR_DEFAULT)
        self.hosts: dict[str, Host] = {name: Host(name, f"{SUBNET}.{octet}") for name, octet in HOST_OCTETS.items()}
        self.publisher_rate = publisher_rate
        self.python = _venv_python()
        self.spark_home = _spark_home()
        self._children: dict[int, subprocess.Popen[Any]] = {}
        self._spawned = 0  # numbers the stderr logs of spawned processes

    # -- names, addresses, paths ------------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise ValueError(f"no host {name!r} (hosts: {', '.join(self.hosts)})") from None

    def ip(self, host: str) -> str:
        return self.host(host).ip

    @property
    def master_url(self) -> str:
        return f"spark://{self.ip('driver')}:{MASTER_PORT}"

    @property
    def master_ui_url(self) -> str:
        return f"http://{self.ip('driver')}:{MASTER_UI_PORT}"

    @property
    def connect_url(self) -> str:
        """The Spark Connect server's address (start it with `start_service("connect")`)."""
        return f"sc://{self.ip('driver')}:{CONNECT_PORT}"

    @property
    def archive_control_channel(self) -> str:
        return f"aeron:udp?endpoint={self.ip('archive')}:{ARCHIVE_CONTROL_PORT}"

    @property
    def market_data_channel(self) -> str:
        """The publisher's channel, as the archive records it (a unicast endpoint on the archive host)."""
        return f"aeron:udp?endpoint={self.ip('archive')}:{MARKET_DATA_PORT}"

    def control_response_channel(self, host: str) -> str:
        """A control response (or replay) channel for a client on `host`: its own address, an ephemeral port."""
        return f"aeron:udp?endpoint={self.ip(host)}:0"

    @property
    def archive_aeron_dir(self) -> str:
        """The archive's embedded media driver directory (in the archive host's private /dev/shm)."""
        ready = self._load_state().get("archive")
        if not ready:
            raise TopologyError("the archive has not reported ready (is the topology up?)")
        return str(ready["aeronDir"])

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def log_path(self, service: str) -> Path:
        """The service's stdout and stderr (kept after `down`, cleared by the next `up`)."""
        return self.logs_dir / f"{service}.log"

    @property
    def _ns_dir(self) -> Path:
        return self.run_dir / "ns"

    @property
    def _chk_dir(self) -> Path:
        return self.run_dir / "chk"

    @property
    def _hosts_file(self) -> Path:
        return self.run_dir / "hosts"

    @property
    def _state_file(self) -> Path:
        return self.run_dir / "state.json"

    def _ns_file(self, host: str, kind: str) -> Path:
        return self._ns_dir / f"{host}.{kind}"

    # -- state shared between processes (CLI `up` in one, `down` in another) ----------------------------------
    def _load_state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {"services": {}}
        return state

    def _save_state(self, state: Mapping[str, Any]) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self._state_file)

    def _update_state(self, **fields: Any) -> None:
        state = self._load_state()
        state.update(fields)
        self._save_state(state)

    @contextlib.contextmanager
    def lock(self, timeout: float = 0.0) -> Iterator[None]:
        """Hold the machine-wide topology lock: one test session (or CLI `up`/`down`) at a time.

        The names are fixed (one topology per machine), so two sessions at once would tear down each other's.
        """
        lock_file = self.run_dir.with_name(self.run_dir.name + ".lock")  # outside: down() unmounts the run dir
        with open(lock_file, "w") as handle:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TopologyError(f"another process holds {lock_file}") from None
                    time.sleep(1.0)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- running commands on hosts ----------------------------------------------------------------------------
    def command(self, host: str, argv: Sequence[str], cwd: str = "/tmp") -> list[str]:
        """`argv` prefixed so that it runs on `host`: its network, mount and UTS namespaces, `cwd` inside them."""
        h = self.host(host)
        return [
            "nsenter",
            f"--net={NETNS_DIR / h.netns}",
            f"--mount={self._ns_file(host, 'mnt')}",
            f"--uts={self._ns_file(host, 'uts')}",
            f"--wdns={cwd}",
            "--",
            *argv,
        ]

    def env(self, host: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A host's environment: a clean one (nothing of the caller's leaks in) plus what Spark and Python need."""
        env = {name: os.environ[name] for name in ("HOME", "LANG", "LC_ALL", "TERM", "JAVA_HOME") if name in os.environ}
        venv_bin = str(Path(self.python).parent)
        env.update(
            PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
            HOSTNAME=host,
            TMPDIR="/tmp",
            PYTHONUNBUFFERED="1",
            SPARK_HOME=self.spark_home,
            SPARK_LOCAL_IP=self.ip(host),
            PYSPARK_PYTHON=self.python,
            PYSPARK_DRIVER_PYTHON=self.python,
            AAS_CLUSTER_HOST=host,
        )
        env.update(extra or {})
        return env

    def run(
        self,
        host: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = "/tmp",
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[Any]:
        """`subprocess.run` on `host` (output captured as text unless told otherwise; `check` etc. pass through)."""
        if "stdout" not in kwargs and "stderr" not in kwargs:
            kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(host, argv, cwd), env=self.env(host, env), **kwargs)

    def spawn(
        self,
        host: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = "/tmp",
        log_file: Path | None = None,
        **kwargs: Any,
    ) -> subprocess.Popen[Any]:
        """`subprocess.Popen` on `host`, in a session of its own (`down()` ends it; a test need not, but may).

        Output, unless `stdout`/`stderr` are given: with `log_file`, both are appended there (as for services);
        otherwise stdout is a text pipe to read, as with `run`, and stderr (Spark logs a lot there, which would
        fill an unread pipe and stall the process) goes to a log of its own in `logs_dir`, named in our log.
        """
        kwargs.setdefault("start_new_session", True)
        with contextlib.ExitStack() as stack:
            if log_file is not None:
                log_file.parent.mkdir(parents=True, exist_ok=True)
                kwargs.setdefault("stdout", stack.enter_context(open(log_file, "ab")))
                kwargs.setdefault("stderr", subprocess.STDOUT)
            else:
                kwargs.setdefault("stdout", subprocess.PIPE)
                kwargs.setdefault("text", True)
                if "stderr" not in kwargs:
                    self._spawned += 1
                    stderr_log = self.logs_dir / f"spawn-{host}-{self._spawned}.log"
                    stderr_log.parent.mkdir(parents=True, exist_ok=True)
                    kwargs["stderr"] = stack.enter_context(open(stderr_log, "ab"))
                    log.info("stderr of %s on %s: %s", " ".join(argv)[:200], host, stderr_log)
            proc = subprocess.Popen(self.command(host, argv, cwd), env=self.env(host, env), **kwargs)
        self._children[proc.pid] = proc
        return proc

    # -- links --------------------------------------------------------------------------------------------------
    def cut_link(self, host: str) -> None:
        """Take the host's switch port down: nothing reaches it or leaves it until `restore_link`."""
        _sh(["ip", "-n", SWITCH_NETNS, "link", "set", self.host(host).switch_port, "down"])
        log.info("link of %s cut", host)

    def restore_link(self, host: str) -> None:
        _sh(["ip", "-n", SWITCH_NETNS, "link", "set", self.host(host).switch_port, "up"])
        log.info("link of %s restored", host)

    def link_is_up(self, host: str) -> bool:
        out = _sh(["ip", "-n", SWITCH_NETNS, "-o", "link", "show", self.host(host).switch_port], check=False)
        return out.returncode == 0 and ",UP" in out.stdout.split(">", 1)[0]

    # -- services -----------------------------------------------------------------------------------------------
    def _default_service(self, name: str) -> Service:
        """How `up` starts each service."""
        if name == "archive":
            argv = [self.python, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", ARCHIVE_DIR]
            argv += ["--control-channel", self.archive_control_channel]
            return Service(name, "archive", tuple(argv))
        if name == "publisher":
            return self._publisher_service(self.publisher_rate, 0, 1)
        spark_class = str(Path(self.spark_home) / "bin" / "spark-class")
        daemon_env = {"SPARK_DAEMON_MEMORY": SPARK_DAEMON_MEMORY, "SPARK_LOG_DIR": "/tmp/spark-logs"}
        if name == "master":
            ip = self.ip("driver")
            argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", ip]
            argv += ["--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)]
            return Service(name, "driver", tuple(argv), daemon_env)
        if name in WORKERS:
            ip = self.ip(name)
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", str(WORKER_CORES)]
            argv += ["--memory", WORKER_MEMORY, "--host", ip, "--webui-port", str(WORKER_UI_PORT)]
            argv += ["--work-dir", "/tmp/spark-worker", self.master_url]
            env = {**daemon_env, "SPARK_WORKER_DIR": "/tmp/spark-worker", "SPARK_LOCAL_DIRS": "/tmp/spark-local"}
            return Service(name, name, tuple(argv), env)
        if name == CONNECT_SERVICE:
            ip = self.ip("driver")
            argv = [spark_class, "org.apache.spark.deploy.SparkSubmit", "--master", self.master_url]
            argv += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "aas-connect"]
            for key, value in (
                ("spark.connect.grpc.binding.address", ip),
                ("spark.connect.grpc.binding.port", str(CONNECT_PORT)),
                ("spark.driver.host", ip),
                ("spark.driver.bindAddress", ip),
                ("spark.driver.memory", "768m"),
                ("spark.executor.memory", "768m"),
                ("spark.executor.cores", "1"),
                ("spark.cores.max", "2"),
                ("spark.ui.enabled", "false"),
                ("spark.sql.shuffle.partitions", "2"),
            ):
                argv += ["--conf", f"{key}={value}"]
            argv += ["spark-internal"]
            return Service(name, "driver", tuple(argv), {"SPARK_LOG_DIR": "/tmp/spark-logs"})
        raise ValueError(f"no service {name!r} (services: {', '.join((*SERVICES, CONNECT_SERVICE))})")

    def _publisher_service(self, rate: float, count: int, first_seq: int) -> Service:
        argv = [self.python, str(PUBLISHER_SCRIPT), "publish", "--channel", self.market_data_channel]
        argv += ["--stream-id", str(MARKET_DATA_STREAM_ID), "--rate", str(rate), "--count", str(count)]
        argv += ["--first-seq", str(first_seq), "--status-file", PUBLISHER_STATUS_FILE]
        return Service("publisher", "publisher", tuple(argv))

    def _service(self, name: str) -> Service:
        """The service as last started (its arguments may differ from the default, e.g. the publisher's rate)."""
        saved = self._load_state()["services"].get(name)
        return Service.from_json(saved["service"]) if saved else self._default_service(name)

    def service_pid(self, name: str) -> int | None:
        """The pid of the running service, or None if it is not running."""
        self._reap()
        saved = self._load_state()["services"].get(name)
        if not saved or _start_time(saved["pid"]) != saved["start"]:
            return None
        pid: int = saved["pid"]
        return pid

    def start_service(self, name: str, service: Service | None = None, *, wait: bool = True) -> int:
        """Start a service (again, e.g. after `kill_service`) and wait until it is ready; returns its pid."""
        if self.service_pid(name) is not None:
            raise TopologyError(f"service {name} is already running")
        service = service or self._service(name)
        log_file = self.log_path(name)
        offset = log_file.stat().st_size if log_file.exists() else 0
        proc = self.spawn(service.host, service.argv, env=service.env, log_file=log_file)
        start = _start_time(proc.pid)
        state = self._load_state()
        state["services"][name] = {"pid": proc.pid, "start": start, "service": service.to_json()}
        self._save_state(state)
        log.info("started %s on %s (pid %d), log %s", name, service.host, proc.pid, log_file)
        if wait:
            self.await_service(name, offset)
        return proc.pid

    def await_service(self, name: str, log_offset: int = 0) -> None:
        """Wait until the service is ready, judged from what it wrote after `log_offset` of its log (the archive's
        JSON line, the Spark daemons' "ALIVE"/"registered"), or for the publisher from its status file."""

        def ready() -> bool:
            if self.service_pid(name) is None:
                raise TopologyError(f"service {name} exited; see {self.log_path(name)}:\n{self.log_tail(name)}")
            if self._is_archive(name):
                return self._archive_ready(name, log_offset)
            if name == "publisher":
                status = self.publisher_status()
                return bool(status and status.get("connected") and status.get("published", 0) > 0)
            marker = {"master": MASTER_READY_LINE, CONNECT_SERVICE: CONNECT_READY_LINE}.get(name, WORKER_READY_LINE)
            return marker in self._log_since(name, log_offset)

        _wait_until(ready, READY_TIMEOUT_S, f"service {name} (log {self.log_path(name)})", interval=0.5)

    def _log_since(self, service: str, offset: int) -> str:
        try:
            with open(self.log_path(service), "rb") as handle:
                handle.seek(offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def _is_archive(self, name: str) -> bool:
        """The topology's archive, or one started by `start_archive`."""
        return name == "archive" or name in self._load_state().get("archives", {})

    def _archive_ready(self, name: str, log_offset: int) -> bool:
        """An archive prints one JSON line when ready: remember it (its aeronDir above all)."""
        for line in self._log_since(name, log_offset).splitlines():
            if line.startswith("{") and '"aeronDir"' in line:
                if name == "archive":
                    self._update_state(archive=json.loads(line))
                else:
                    archives = self._load_state().get("archives", {})
                    self._update_state(archives={**archives, name: json.loads(line)})
                return True
        return False

    def start_archive(
        self, name: str, host: str, *, archive_dir: str, control_port: int, args: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Start another archive on `host` as the service `name` (not one of `up`'s: `heal()` leaves it alone;
        `kill_service(name)` ends it): `aeron-archive serve --dir archive_dir` with its embedded media driver and
        a UDP control channel on the host's address, plus `args`. Waits until ready; returns its ready line
        (aeronDir, controlChannel, ...), also `archive_info(name)` later."""
        argv = [self.python, "-m", "aeron_archive_spark.archive.cli.main", "serve", "--dir", archive_dir]
        argv += ["--control-channel", f"aeron:udp?endpoint={self.ip(host)}:{control_port}", *args]
        archives = self._load_state().get("archives", {})
        self._update_state(archives={**archives, name: None})  # an archive: readiness is its JSON line
        self.start_service(name, Service(name, host, tuple(argv)))
        return self.archive_info(name)

    def archive_info(self, name: str) -> dict[str, Any]:
        """The ready line of an archive `start_archive` started."""
        ready: dict[str, Any] | None = self._load_state().get("archives", {}).get(name)
        if not ready:
            raise TopologyError(f"archive {name} has not reported ready")
        return ready

    def archive_session(self, host: str, aeron_dir: str, archive_dir: str | None = None) -> ArchiveSession:
        """A client of the archive whose media driver is `aeron_dir` on `host`, in a process there that takes
        commands (publisher.py `session`); close it when done."""
        argv = [self.python, str(PUBLISHER_SCRIPT), "session", "--aeron-dir", aeron_dir]
        if archive_dir is not None:
            argv += ["--archive-dir", archive_dir]
        return ArchiveSession(self.spawn(host, argv, stdin=subprocess.PIPE), host)

    def kill_service(self, name: str, sig: int = signal.SIGKILL, *, group: bool = True, timeout: float = 30.0) -> None:
        """Send `sig` to the service (with `group`, to its whole process group: executors die with a worker, as
        with a crashed machine) and wait until it has exited."""
        pid = self.service_pid(name)
        if pid is None:
            log.info("service %s is not running", name)
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        _wait_until(lambda: self.service_pid(name) is None, timeout, f"service {name} to exit after signal {sig}")
        log.info("service %s (pid %d) ended by signal %d", name, pid, sig)

    def log_tail(self, service: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path(service).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- archive and publisher helpers --------------------------------------------------------------------------
    def _archive_helper(self, host: str, command: str, *args: str) -> Any:
        """Run a publisher.py archive command on `host`: through the archive's driver on the archive host, else
        over UDP from an embedded driver of its own."""
        argv = [self.python, str(PUBLISHER_SCRIPT), command, *args]
        if host == "archive":
            argv += ["--aeron-dir", self.archive_aeron_dir]
        else:
            argv += ["--control-channel", self.archive_control_channel]
            argv += ["--control-response-channel", self.control_response_channel(host)]
        result = self.run(host, argv, timeout=60)
        if result.returncode != 0:
            raise TopologyError(f"{command} on {host} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def start_recording(self) -> int:
        """Have the archive record the market-data channel REMOTE; returns the recording subscription id."""
        reply = self._archive_helper(
            "archive",
            "start-recording",
            "--channel",
            self.market_data_channel,
            "--stream-id",
            str(MARKET_DATA_STREAM_ID),
        )
        subscription_id: int = reply["subscriptionId"]
        log.info(
            "archive records %s stream %d (subscription %d)",
            self.market_data_channel,
            MARKET_DATA_STREAM_ID,
            subscription_id,
        )
        return subscription_id

    def recordings(self, from_host: str = "archive") -> list[dict[str, Any]]:
        """The archive's recordings (Aeron's descriptor field names) plus `recordedPosition`, asked from a host."""
        rows: list[dict[str, Any]] = self._archive_helper(from_host, "recordings")
        return rows

    def market_data_recordings(self, from_host: str = "archive") -> list[dict[str, Any]]:
        return [
            row
            for row in self.recordings(from_host)
            if row["streamId"] == MARKET_DATA_STREAM_ID and row["strippedChannel"] == self.market_data_channel
        ]

    def publisher_status(self) -> dict[str, Any] | None:
        """The publisher's last status (lastSeq, published, position, connected, done, sessionId), if any."""
        result = self.run("publisher", ["cat", PUBLISHER_STATUS_FILE], timeout=10)
        if result.returncode != 0 or not result.stdout.strip():
            return None
        status: dict[str, Any] = json.loads(result.stdout)
        return status

    def start_publisher(self, *, rate: float | None = None, count: int = 0, first_seq: int = 1) -> int:
        """(Re)start the publisher: `count` messages (0: endless) from `first_seq` at `rate`/s; returns its pid.

        A new publisher is a new Aeron session, so the archive records it as a new recording.
        """
        self.kill_service("publisher", signal.SIGTERM)
        self.run("publisher", ["rm", "-f", PUBLISHER_STATUS_FILE], timeout=10)
        service = self._publisher_service(self.publisher_rate if rate is None else rate, count, first_seq)
        return self.start_service("publisher", service)

    # -- Spark helpers ------------------------------------------------------------------------------------------
    def http_json(self, host: str, url: str, timeout: float = 3.0) -> Any:
        """GET `url` from `host` (the root namespace has no route to the hosts) as JSON; None if unreachable."""
        script = (
            "import sys, urllib.request\n"
            "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read().decode())"
        )
        result = self.run(host, [self.python, "-c", script, url, str(timeout)], timeout=timeout + 30)
        if result.returncode != 0:
            return None
        return json.loads(result.stdout)

    def master_state(self) -> dict[str, Any] | None:
        """The master's JSON state (status, workers, activeapps...), or None if it does not answer."""
        state: dict[str, Any] | None = self.http_json("driver", f"{self.master_ui_url}/json/")
        return state

    def alive_workers(self) -> list[str]:
        """Addresses of the workers the master sees ALIVE."""
        state = self.master_state() or {}
        return [w["host"] for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def heal(self) -> None:
        """Undo what tests break: restore every link and restart every service that is not running.

        A restarted archive no longer records (recording subscriptions do not survive a restart), so the
        market-data recording is started again; the publisher then reconnects as a new recording.
        """
        for host in self.hosts:
            if not self.link_is_up(host):
                self.restore_link(host)
        for name in SERVICES:
            if self.service_pid(name) is None:
                log.info("service %s is not running: restarting it", name)
                self.start_service(name)
                if name == "archive":
                    self.start_recording()

    # -- the project's visibility on the workers ----------------------------------------------------------------
    def project_paths(self) -> list[str]:
        """What makes this project importable with the .venv's python, as absolute paths (directories and files).

        The distribution's installed files (the editable install's .pth, which names its link tree, its dist-info,
        the `aeron-archive` script), any other .pth of site-packages naming the repository, whatever site-packages
        holds under the package's names, and the repository's package directories (archive/, connector/) and
        egg-info. pyspark (SPARK_HOME), its dependencies and the interpreter are not among them.
        """
        script = (
            "import importlib.metadata as m, json, os, sys, sysconfig\n"
            "project, site = sys.argv[1], sysconfig.get_paths()['purelib']\n"
            "paths = set()\n"
            "try:\n"
            "    dist = m.distribution(sys.argv[2])\n"
            "    paths.update(os.path.normpath(str(dist.locate_file(f))) for f in dist.files or [])\n"
            "except m.PackageNotFoundError:\n"
            "    pass\n"
            "for name in os.listdir(site):\n"
            "    path = os.path.join(site, name)\n"
            "    if name.startswith(('aeron_archive_spark', 'pyspark_aeron_archive', '__editable__.aeron_archive')):\n"
            "        paths.add(path)\n"
            "    elif name.endswith('.pth') and project in open(path, errors='replace').read():\n"
            "        paths.add(path)\n"
            "print(json.dumps(sorted(paths)))"
        )
        # -I: not the working directory's egg-info (a checkout's aeron_archive_spark.egg-info lists the sources)
        result = _sh([self.python, "-I", "-c", script, str(PROJECT_DIR), "aeron-archive-spark"])
        paths = {Path(p) for p in json.loads(result.stdout) if os.path.isabs(p)}
        paths |= {PROJECT_DIR / "archive", PROJECT_DIR / "connector", *PROJECT_DIR.glob("*.egg-info")}
        # a file of a dist-info hides with its directory; nothing is hidden twice (a path inside another)
        paths = {next((q for q in p.parents if q.suffix == ".dist-info"), p) for p in paths}
        existing = sorted(p for p in paths if p.exists() or p.is_symlink())
        return [str(p) for p in existing if not any(q in existing for q in p.parents)]

    def hide_project_on_workers(self, hosts: Sequence[str] = WORKERS) -> list[str]:
        """Make this project invisible on `hosts`, as on machines it was never installed on; returns the paths.

        Inside each host's mount namespace, an empty read-only tmpfs covers each of `project_paths()`' directories
        and /dev/null each file (the root namespace and the other hosts are untouched). The .venv's python, pyspark
        (SPARK_HOME, from which the workers run) and Java stay, so Spark workers keep running but their executors'
        Python can no longer import the package unless it is shipped to them (`spark.archives`). A mount namespace
        is shared by all its processes, so running workers see this at once; executors start fresh per
        application. Idempotent; `show_project_on_workers()` undoes it, `down()` drops it with the hosts.
        """
        paths = self.project_paths()
        for host in hosts:
            mounted = self._host_mount_points(host)
            steps = []
            for path in paths:
                if path in mounted:
                    continue
                if os.path.isdir(path) and not os.path.islink(path):
                    steps.append(f"mount -t tmpfs -o ro,size=4k,mode=755 aas-hidden-project '{path}'")
                else:
                    steps.append(f"mount --bind /dev/null '{path}'")
            if steps:
                result = self.run(host, ["sh", "-ec", "\n".join(steps)], timeout=30)
                if result.returncode != 0:
                    raise TopologyError(f"hiding the project on {host} failed: {result.stderr.strip()}")
        state = self._load_state()
        hidden = state.get("projectHidden", {"hosts": [], "paths": []})
        hidden = {
            "hosts": sorted({*hidden["hosts"], *hosts}),
            "paths": sorted({*hidden["paths"], *paths}),
        }
        self._update_state(projectHidden=hidden)
        log.info("project hidden on %s: %s", ", ".join(hosts), ", ".join(paths))
        return paths

    def show_project_on_workers(self, hosts: Sequence[str] | None = None) -> None:
        """Undo `hide_project_on_workers` on `hosts` (default: every host it was hidden on); idempotent."""
        hidden = self._load_state().get("projectHidden") or {"hosts": [], "paths": []}
        hosts = list(hidden["hosts"] if hosts is None else hosts)
        paths = hidden["paths"] or self.project_paths()
        ours = _mount_points()
        for host in hosts:
            mounted = self._host_mount_points(host)
            # only mounts this namespace has and the root namespace has not: never one the host was built with
            targets = [p for p in paths if p in mounted and p not in ours]
            if targets:
                result = self.run(host, ["umount", *targets], timeout=30)
                if result.returncode != 0:
                    raise TopologyError(f"showing the project on {host} failed: {result.stderr.strip()}")
        left = sorted(set(hidden["hosts"]) - set(hosts))
        self._update_state(projectHidden={"hosts": left, "paths": hidden["paths"] if left else []})
        log.info("project visible again on %s", ", ".join(hosts) or "no host")

    def _host_mount_points(self, host: str) -> set[str]:
        """Mount points of the host's mount namespace."""
        result = self.run(host, ["cat", "/proc/self/mountinfo"], timeout=10, check=True)
        return {line.split()[4].encode().decode("unicode_escape") for line in result.stdout.splitlines()}

    # -- up ------------------------------------------------------------------------------------------------------
    def up(self) -> None:
        """Build every host and start every service, waiting until all are ready; on failure, tear it all down.

        Starts with `down()`, so leftovers of an earlier run (e.g. a killed test session) never get in the way.
        """
        self.down()
        started = time.monotonic()
        try:
            self._prepare_run_dir()
            self._create_network()
            for host in self.hosts:
                self._create_host(host)
            self.start_service("archive", wait=False)
            self.start_service("master", wait=False)
            self.await_service("archive")
            self.start_recording()
            self.start_service("publisher", wait=False)
            self.await_service("master")
            for worker in WORKERS:
                self.start_service(worker, wait=False)
            self.await_service("publisher")
            for worker in WORKERS:
                self.await_service(worker)
            _wait_until(lambda: len(self.alive_workers()) == len(WORKERS), READY_TIMEOUT_S, "both workers ALIVE")
            _wait_until(lambda: self.market_data_recordings(), READY_TIMEOUT_S, "the market-data recording")
        except BaseException:
            log.exception("topology up failed; tearing down (logs stay in %s)", self.logs_dir)
            self.down()
            raise
        log.info("topology up in %.1fs: %s", time.monotonic() - started, self.describe())

    def _prepare_run_dir(self) -> None:
        """The run directory, bind-mounted on itself and private: `unshare --mount=FILE` refuses shared mounts."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if str(self.run_dir) not in _mount_points():
            _sh(["mount", "--bind", str(self.run_dir), str(self.run_dir)])
        _sh(["mount", "--make-private", str(self.run_dir)])
        shutil.rmtree(self.logs_dir, ignore_errors=True)
        for directory in (self._ns_dir, self.logs_dir, self._chk_dir):
            directory.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{h.ip} {h.name}" for h in self.hosts.values()]
        self._hosts_file.write_text("\n".join(lines) + "\n")
        created_chk = not os.path.exists(CHECKPOINT_DIR)
        if created_chk:
            os.mkdir(CHECKPOINT_DIR)  # the mount point only; its content lives in the run directory
        self._save_state({"services": {}, "created_chk": created_chk})

    def _create_network(self) -> None:
        """The switch namespace with its bridge, and each host's namespace with a veth pair into the bridge."""
        _sh(["ip", "netns", "add", SWITCH_NETNS])
        _sh(["ip", "-n", SWITCH_NETNS, "link", "add", BRIDGE, "type", "bridge"])
        _sh(["ip", "-n", SWITCH_NETNS, "link", "set", BRIDGE, "up"])
        for h in self.hosts.values():
            _sh(["ip", "netns", "add", h.netns])
            veth = ["type", "veth", "peer", "name", "eth0", "netns", h.netns]
            _sh(["ip", "-n", SWITCH_NETNS, "link", "add", h.switch_port, *veth])
            _sh(["ip", "-n", SWITCH_NETNS, "link", "set", h.switch_port, "master", BRIDGE, "up"])
            _sh(["ip", "-n", h.netns, "addr", "add", f"{h.ip}/{PREFIX_LENGTH}", "dev", "eth0"])
            _sh(["ip", "-n", h.netns, "link", "set", "eth0", "up"])
            _sh(["ip", "-n", h.netns, "link", "set", "lo", "up"])

    def _create_host(self, host: str) -> None:
        """The host's persistent mount and UTS namespaces: private /tmp, /dev/shm, /etc/hosts and hostname.

        Inside, the run directory and /var/run/netns are detached and covered by an empty read-only tmpfs, so a
        host neither sees the other hosts' namespace files, the logs or the checkpoint directory's backing store,
        nor holds references that would keep the other namespaces alive after `down`.
        """
        mnt, uts = self._ns_file(host, "mnt"), self._ns_file(host, "uts")
        mnt.touch()
        uts.touch()
        steps = [f"hostname {host}"]
        # A checkout under /tmp or /dev/shm (a clone made there) would vanish under the host's own tmpfs: it is
        # set aside before and put back at the same path after, so every host runs the same .venv and code.
        covered = [d for d in ("/tmp", "/dev/shm") if PROJECT_DIR.is_relative_to(d)]
        stash = self.run_dir / f"project-{host}"
        if covered:
            stash.mkdir(exist_ok=True)
            steps.append(f"mount --bind '{PROJECT_DIR}' '{stash}'")
        steps += [
            "mount -t tmpfs -o mode=1777 aas-tmp /tmp",
            "mount -t tmpfs -o mode=1777 aas-shm /dev/shm",
            f"mount --bind {self._hosts_file} /etc/hosts",
        ]
        if covered:
            steps += [f"mkdir -p '{PROJECT_DIR}'", f"mount --move '{stash}' '{PROJECT_DIR}'"]
        if host in CHECKPOINT_HOSTS:
            steps.append(f"mount --bind {self._chk_dir} {CHECKPOINT_DIR}")
        for hidden in (str(self.run_dir), os.path.realpath(NETNS_DIR)):
            steps += [f"umount -l {hidden}", f"mount -t tmpfs -o ro,size=4k,mode=755 aas-hidden {hidden}"]
        unshare = ["unshare", f"--mount={mnt}", f"--uts={uts}", "--propagation", "private"]
        _sh([*unshare, "sh", "-ec", "\n".join(steps)])

    # -- down ----------------------------------------------------------------------------------------------------
    def down(self) -> None:
        """Remove everything `up` made, even after a partial `up`; idempotent. Logs stay in `logs_dir`.

        Every process of every host is ended (they are all ours: we made the namespaces), then the namespaces,
        links and mounts go. The root namespace's own interfaces and mounts are never touched.
        """
        netns = [h.netns for h in self.hosts.values() if (NETNS_DIR / h.netns).exists()]
        try:
            self._end_processes(netns)
        except TopologyError as ex:  # e.g. a process stuck in the kernel: remove the rest regardless
            log.error("%s", ex)
        points = _mount_points()
        for host in self.hosts:
            for kind in ("mnt", "uts"):
                path = self._ns_file(host, kind)
                if str(path) in points:
                    _sh(["umount", str(path)], check=False)
                path.unlink(missing_ok=True)
        for name in [*netns, SWITCH_NETNS]:
            if (NETNS_DIR / name).exists():
                _sh(["ip", "netns", "delete", name], check=False)
        state = self._load_state()
        if state.get("created_chk") and os.path.isdir(CHECKPOINT_DIR) and not os.listdir(CHECKPOINT_DIR):
            os.rmdir(CHECKPOINT_DIR)
        shutil.rmtree(self._chk_dir, ignore_errors=True)
        shutil.rmtree(self._ns_dir, ignore_errors=True)
        self._hosts_file.unlink(missing_ok=True)
        self._state_file.unlink(missing_ok=True)
        if str(self.run_dir) in _mount_points():
            _sh(["umount", str(self.run_dir)], check=False)
        self._reap()
        log.info("topology down")

    def _end_processes(self, netns: Sequence[str]) -> None:
        """SIGTERM every process in the hosts' network namespaces, SIGKILL what is left after a grace period."""
        for sig, grace in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
            pids = self._netns_pids(netns)
            if not pids:
                return
            log.info("sending signal %d to %d processes of the hosts", sig, len(pids))
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            with contextlib.suppress(TopologyError):
                _wait_until(lambda: not self._netns_pids(netns), grace, "the hosts' processes to exit", 0.2)
        left = self._netns_pids(netns)
        if left:
            raise TopologyError(f"processes {left} of the hosts did not exit")

    def _netns_pids(self, netns: Sequence[str]) -> list[int]:
        self._reap()
        pids: list[int] = []
        for name in netns:
            out = _sh(["ip", "netns", "pids", name], check=False).stdout
            pids += [int(pid) for pid in out.split() if _start_time(int(pid)) is not None]
        return pids

    def _reap(self) -> None:
        """Collect exited children of this process, so they do not linger as zombies."""
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]

    # -- status --------------------------------------------------------------------------------------------------
    def is_up(self) -> bool:
        return self._state_file.exists() and all((NETNS_DIR / h.netns).exists() for h in self.hosts.values())

    def status(self) -> dict[str, Any]:
        """Hosts (address, link), services (pid, log), the master's workers, the archive and the publisher."""
        state = self._load_state()
        up = self.is_up()
        hosts = {
            name: {"ip": h.ip, "netns": h.netns, "link": ("up" if self.link_is_up(name) else "down") if up else None}
            for name, h in self.hosts.items()
        }
        services = {
            name: {"host": self._service(name).host, "pid": self.service_pid(name), "log": str(self.log_path(name))}
            for name in SERVICES
        }
        report: dict[str, Any] = {"up": up, "runDir": str(self.run_dir), "hosts": hosts, "services": services}
        report["projectHiddenOn"] = (state.get("projectHidden") or {}).get("hosts", [])
        if up:
            report["masterUrl"] = self.master_url
            report["aliveWorkers"] = self.alive_workers()
            report["archive"] = state.get("archive")
            report["archiveControlChannel"] = self.archive_control_channel
            report["marketDataChannel"] = self.market_data_channel
            report["publisher"] = self.publisher_status()
        return report

    def describe(self) -> str:
        hosts = ", ".join(f"{h.name}={h.ip}" for h in self.hosts.values())
        return f"hosts {hosts}; master {self.master_url}; archive control {self.archive_control_channel}"


# -- command line (ci/cluster.sh) ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ci/cluster.sh", description="The multi-host test topology (issue 10).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every command")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build the hosts and start the services (after tearing down any leftovers)")
    up.add_argument("--publisher-rate", type=float, default=500.0, help="market-data messages per second")
    sub.add_parser("down", help="stop everything and remove the hosts (idempotent)")
    sub.add_parser("status", help="hosts, services and readiness as JSON")
    run = sub.add_parser("run", help="run a command on a host (exec: its exit status is ours)")
    run.add_argument("host", choices=sorted(HOST_OCTETS))
    run.add_argument("argv", nargs=argparse.REMAINDER, help="the command (default: a shell)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    reason = unavailable_reason()
    if reason is not None and args.command != "status":
        log.error("%s", reason)
        return 2
    topology = Topology(publisher_rate=getattr(args, "publisher_rate", 500.0))
    if args.command == "up":
        with topology.lock():
            topology.up()
    elif args.command == "down":
        with topology.lock():
            topology.down()
    elif args.command == "status":
        print(json.dumps(topology.status(), indent=2))
    else:
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        full = topology.command(args.host, command or ["bash"])
        os.execvpe(full[0], full, topology.env(args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
