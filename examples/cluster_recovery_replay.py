"""A cluster leader's recovery replay: two subscribers join ONE replay publication and see the same log.

This follows Aeron Cluster's LEADER_REPLAY state (seed document 004). A leader restarts with a Log Recording whose
entries are all committed. It has processed the log up to `logPosition` (its snapshot position), and the recording
ends at `appendPosition`. To catch up it replays [logPosition, appendPosition) from the archive into both of its
components, which run on different threads:

- the consensus module asks the archive for the replay (`start_replay(recording, logPosition,
  appendPosition - logPosition, replayChannel, replayStreamId)`), subscribes to the replay channel filtered by the
  replay's session id (the low 32 bits of the replay session id: the "logSessionId"), and waits for the Image;
- it then sends "JoinLog" (channel, stream, logSessionId, start and stop position) to the clustered service and
  does not poll until the service answers "ServiceAck": the service's subscription joins the publication at the
  slowest existing subscriber's position, so only while the consensus module has consumed nothing is the service
  sure to join at `logPosition`. Without the wait, a fast consensus module could drain the replay and let the
  publication close before the service has subscribed;
- the service subscribes, waits for the Image with logSessionId, checks its join position is `logPosition`, acks,
  and processes the log bounded by the consensus module's commit position (so it never gets ahead of it);
- the archive's ReplaySession publishes up to `appendPosition` (flow control holds it to the slower subscriber)
  and then closes the publication; each subscriber closes its subscription once it has reached that position.

Both end up with the same messages at the same positions, which this script checks.

Run it on its own (embedded archive in a temp dir; replay over UDP on a free localhost port):

    .venv/bin/python examples/cluster_recovery_replay.py [--entries 1000 --processed 600]
    .venv/bin/python examples/cluster_recovery_replay.py --replay-channel aeron:ipc   # Aeron Cluster's default

or against a running archive: add `--aeron-dir DIR --control-channel aeron:ipc --control-stream-id 10`.
"""

from __future__ import annotations

import argparse
import ctypes
import queue
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from aeron_archive_spark.archive import AeronArchive, SourceLocation
from aeron_archive_spark.archive.channel import add_session_id
from aeron_archive_spark.archive.constants import RecordingSignal
from aeron_archive_spark.archive.native import AeronClient, ControlledAction
from aeron_archive_spark.archive.storage.frames import FRAME_ALIGNMENT, HEADER_LENGTH, align

LOG_CHANNEL = "aeron:ipc?term-length=64k"
LOG_STREAM_ID = 100  # Aeron Cluster's log stream id
REPLAY_STREAM_ID = 103  # Aeron Cluster's replay stream id
TIMEOUT_S = 10.0


_say_lock = threading.Lock()


def say(who: str, message: str) -> None:
    """One whole line per call: print() writes the text and its newline separately, so two threads printing at
    once could otherwise join their lines."""
    with _say_lock:
        sys.stdout.write(f"[{who}] {message}\n")
        sys.stdout.flush()


def wait_until(condition, what: str, timeout: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.0005)
    return value


@dataclass(frozen=True)
class JoinLog:
    """What the consensus module tells the clustered service (Aeron Cluster's JoinLog message)."""

    channel: str
    stream_id: int
    log_session_id: int
    log_position: int  # start of the replay
    max_log_position: int  # stop of the replay (the append position)


class CommitPosition:
    """The consensus module's commit-pos: the service may process the log up to here, never further."""

    def __init__(self, value: int) -> None:
        self._value = value

    def set(self, value: int) -> None:
        self._value = value

    def get(self) -> int:
        return self._value


class ClusteredService(threading.Thread):
    """The service's side: join the replay when told to, ack, then process the log gated by the commit position."""

    def __init__(self, aeron_dir: str, commit: CommitPosition) -> None:
        super().__init__(name="clustered-service", daemon=True)
        self.aeron_dir = aeron_dir
        self.commit = commit
        self.join_log: queue.Queue[JoinLog] = queue.Queue()
        self.service_ack: queue.Queue[int] = queue.Queue()
        self.received: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        # The service has its own Aeron client, as it would in its own process.
        try:
            with AeronClient(self.aeron_dir, client_name="clustered-service") as aeron:
                self._run(aeron)
        except BaseException as ex:  # reported by the main thread
            self.error = ex
            self.service_ack.put(-1)

    def _run(self, aeron: AeronClient) -> None:
        event = self.join_log.get(timeout=TIMEOUT_S)
        say("service", f"JoinLog received: logSessionId {event.log_session_id}, "
                       f"[{event.log_position}, {event.max_log_position})")
        channel = add_session_id(event.channel, event.log_session_id)
        with aeron.add_subscription(channel, event.stream_id) as subscription:
            image = wait_until(lambda: subscription.image_by_session_id(event.log_session_id), "the replay image")
            if image.join_position != event.log_position:
                raise RuntimeError(f"joined the replay at {image.join_position}, not at {event.log_position}")
            say("service", f"joined the replay at position {image.join_position}; sending ServiceAck")
            self.service_ack.put(image.join_position)

            def on_message(data: memoryview, header) -> ControlledAction:
                if header.position > self.commit.get():
                    return ControlledAction.ABORT  # not committed by the consensus module yet: retry later
                self.received.append((header.start_position, bytes(data)))
                return ControlledAction.CONTINUE

            while image.position < event.max_log_position:
                if image.poll(on_message, 10) == 0:
                    if image.is_closed and image.position < event.max_log_position:
                        raise RuntimeError(f"replay image closed at {image.position}")
                    time.sleep(0.0002)
            say("service", f"processed {len(self.received)} log entries up to position {image.position}")


def leader_replay(client: AeronArchive, recording_id: int, log_position: int, append_position: int,
                  replay_channel: str) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """The consensus module's LEADER_REPLAY: returns what it and the service each received."""
    commit = CommitPosition(log_position)
    service = ClusteredService(client.aeron.aeron_dir, commit)
    service.start()

    # LogReplay: ask the archive to replay exactly [logPosition, appendPosition).
    replay_session_id = client.start_replay(recording_id, log_position, append_position - log_position,
                                            replay_channel, REPLAY_STREAM_ID)
    log_session_id = ctypes.c_int32(replay_session_id).value  # Java: (int)replaySessionId
    say("consensus", f"replay {replay_session_id} started: logSessionId {log_session_id} on {replay_channel} "
                     f"stream {REPLAY_STREAM_ID}")
    received: list[tuple[int, bytes]] = []
    with client.aeron.add_subscription(add_session_id(replay_channel, log_session_id),
                                       REPLAY_STREAM_ID) as subscription:
        image = wait_until(lambda: subscription.image_by_session_id(log_session_id), "the replay image")
        say("consensus", f"replay image connected at position {image.join_position}; sending JoinLog")

        # JoinLog, then wait for ServiceAck before polling anything.
        service.join_log.put(JoinLog(replay_channel, REPLAY_STREAM_ID, log_session_id, log_position, append_position))
        acked = service.service_ack.get(timeout=TIMEOUT_S)
        if service.error is not None:
            raise RuntimeError(f"clustered service failed: {service.error}") from service.error
        say("consensus", f"ServiceAck received (service at {acked}); replaying the log")

        def on_message(data: memoryview, header) -> None:
            received.append((header.start_position, bytes(data)))

        while image.position < append_position:
            if image.poll(on_message, 10) == 0:
                if image.is_closed and image.position < append_position:
                    raise RuntimeError(f"replay image closed at {image.position}")
                time.sleep(0.0002)
            commit.set(image.position)  # lets the service process what the consensus module has processed
        say("consensus", f"replayed {len(received)} log entries up to the append position {image.position}")
    # Closing the consensus module's subscription leaves the service's subscription on the publication.
    service.join(TIMEOUT_S)
    if service.is_alive() or service.error is not None:
        raise RuntimeError(f"clustered service did not finish: {service.error}")
    return received, service.received


def record_log(client: AeronArchive, signals: list, entries: int) -> tuple[int, list[int], int]:
    """Record a "log" of `entries` messages; returns (recording id, each entry's start position, append position)."""
    client.start_recording(LOG_CHANNEL, LOG_STREAM_ID, SourceLocation.LOCAL)
    publication = client.aeron.add_exclusive_publication(LOG_CHANNEL, LOG_STREAM_ID)

    def start_signal():
        client.poll_for_recording_signals()  # signals arrive on the control response stream
        return next((s for s in signals if s.signal == RecordingSignal.START), None)

    started = wait_until(start_signal, "the recording to start")
    starts = []
    for i in range(entries):
        payload = f"log entry {i};".encode() + bytes(i % 200)  # varying sizes
        while (end := publication.offer(payload)) < 0:
            if end in (-4, -5):
                raise RuntimeError(f"offer failed: {end}")
            time.sleep(0.0001)
        # offer returns where the message ends. It starts one aligned frame earlier: not necessarily where the
        # previous message ended, since a message that does not fit in the rest of a term follows a PAD frame.
        starts.append(end - align(HEADER_LENGTH + len(payload), FRAME_ALIGNMENT))
    append_position = publication.position
    wait_until(lambda: client.get_recording_position(started.recording_id) >= append_position, "the recording")
    client.stop_recording(LOG_CHANNEL, LOG_STREAM_ID)
    publication.close()
    return started.recording_id, starts, append_position


def entry_name(payload: bytes) -> str:
    return payload.split(b";", 1)[0].decode()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000, help="log entries to record")
    parser.add_argument("--processed", type=int, help="entries the leader had processed before it restarted "
                                                      "(default: 60%% of them)")
    parser.add_argument("--replay-channel", help="where the archive replays to (default: UDP on a free localhost "
                                                 "port; Aeron Cluster's default is aeron:ipc)")
    own = parser.add_argument_group("use a running archive instead of starting one")
    own.add_argument("--aeron-dir", help="the media driver directory of the running archive")
    own.add_argument("--archive-dir", help="where the embedded archive keeps its files (default: a temp dir)")
    own.add_argument("--control-channel", default="aeron:ipc", help="the archive's control request channel")
    own.add_argument("--control-stream-id", type=int, default=10)
    args = parser.parse_args(argv)
    processed = args.entries * 6 // 10 if args.processed is None else args.processed
    if not 0 <= processed <= args.entries:
        parser.error("--processed must be between 0 and --entries")
    replay_channel = args.replay_channel or f"aeron:udp?endpoint=localhost:{free_udp_port()}"

    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    archive = temp_dir = None
    if args.aeron_dir is None:
        archive_dir = args.archive_dir or (temp_dir := tempfile.mkdtemp(prefix="cluster-replay-"))
        archive = Archive.launch(ArchiveContext(
            archive_dir=archive_dir, control_channel=None, local_control_channel=args.control_channel,
            local_control_stream_id=args.control_stream_id, segment_file_length=1024 * 1024))
        say("archive", f"started in {archive_dir} (embedded media driver {archive.aeron_dir})")
    signals: list = []
    try:
        with AeronArchive.connect(aeron_dir=args.aeron_dir or archive.aeron_dir,
                                  control_request_channel=args.control_channel,
                                  control_request_stream_id=args.control_stream_id,
                                  control_response_channel="aeron:ipc",
                                  recording_signal_consumer=signals.append) as client:
            recording_id, starts, append_position = record_log(client, signals, args.entries)
            log_position = starts[processed] if processed < args.entries else append_position
            say("leader", f"log recording {recording_id}: {args.entries} entries, append position "
                          f"{append_position}; processed {processed} entries, log position {log_position}")
            if log_position == append_position:
                say("leader", "log position == append position: nothing to replay, on to LEADER_INIT")
                return 0
            consensus, service = leader_replay(client, recording_id, log_position, append_position, replay_channel)

        expected = starts[processed:]
        assert [p for p, _ in consensus] == expected, "the consensus module missed or repeated entries"
        assert service == consensus, "the service saw a different log from the consensus module"
        say("leader", f"both subscribers saw the same {len(consensus)} entries at the same positions: "
                      f"{entry_name(consensus[0][1])!r} at {consensus[0][0]} to "
                      f"{entry_name(consensus[-1][1])!r} at {consensus[-1][0]}")
        say("leader", "log position = append position: on to LEADER_INIT")
        return 0
    finally:
        if archive is not None:
            archive.close()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
