"""Record a stream with the Python archive client, list it, replay it (from the start and from the middle), truncate it.

The client mirrors Java's `AeronArchive` in snake_case: `start_recording`, `list_recordings`, `replay`/`start_replay`,
`stop_recording`, `truncate_recording`, with recording signals (START, STOP, DELETE) delivered to a callback.

Run it on its own (it starts an archive with an embedded media driver in a temporary directory):

    .venv/bin/python examples/record_and_replay.py [--messages 2000]

or against a running archive (`aeron-archive serve ...`), through that archive's media driver and control channel:

    .venv/bin/python examples/record_and_replay.py --aeron-dir /dev/shm/aeron-root --control-channel aeron:ipc
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time

from aeron_archive_spark.archive import AeronArchive, SourceLocation
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, RecordingSignal
from aeron_archive_spark.archive.storage.frames import FRAME_ALIGNMENT, HEADER_LENGTH, align

CHANNEL = "aeron:ipc?term-length=64k"  # small terms, so the recording spans several terms and segment files
STREAM_ID = 1001
REPLAY_CHANNEL = "aeron:ipc"
REPLAY_STREAM_ID = 1002


def say(message: str) -> None:
    print(f"[record_and_replay] {message}", flush=True)


def await_signal(client: AeronArchive, signals: list, signal: RecordingSignal, timeout: float = 10.0):
    """Poll the control response stream until the archive sends `signal`; returns the RecordingSignalEvent."""
    deadline = time.monotonic() + timeout
    while True:
        for event in signals:
            if event.signal == signal:
                signals.remove(event)
                return event
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {signal.name} signal within {timeout}s")
        client.poll_for_recording_signals()
        time.sleep(0.001)


def publish(publication, payloads: list[bytes]) -> list[int]:
    """Offer every payload, retrying on back pressure; returns each message's start position in the stream."""
    starts = []
    for payload in payloads:
        while (end := publication.offer(payload)) < 0:
            if end in (-4, -5):  # PUBLICATION_CLOSED, MAX_POSITION_EXCEEDED: retrying cannot help
                raise RuntimeError(f"offer failed: {end}")
            time.sleep(0.0001)  # NOT_CONNECTED (archive not subscribed yet), BACK_PRESSURED, ADMIN_ACTION
        # offer returns where the message ends; it starts one aligned frame earlier (payloads here fit in one
        # frame). That is not always where the previous message ended: a message that does not fit in the rest of
        # a term goes to the next term, after a PAD frame.
        starts.append(end - align(HEADER_LENGTH + len(payload), FRAME_ALIGNMENT))
    return starts


def replay(client: AeronArchive, recording_id: int, position: int, length: int, expected: int,
           timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """Replay [position, position + length) and collect (start position, payload) of `expected` messages."""
    subscription = client.replay(recording_id, REPLAY_CHANNEL, REPLAY_STREAM_ID, position=position, length=length)
    received: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(received) < expected:
            # header.start_position: where the message's first frame starts (the recording position, since a
            # replay publication starts at the recording's position).
            if subscription.poll(lambda data, header: received.append((header.start_position, bytes(data))),
                                 100) == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"replay delivered {len(received)} of {expected} messages")
                time.sleep(0.0005)
    finally:
        subscription.close()
    return received


def describe(d) -> str:
    stop = "active" if d.stop_position == -1 else d.stop_position
    return (f"recording {d.recording_id}: [{d.start_position}, {stop}) session {d.session_id} stream {d.stream_id} "
            f"channel {d.original_channel}")


def run(client: AeronArchive, signals: list, messages: int) -> None:
    # 1. Record: the archive subscribes first; the recording starts when it sees our publication's image.
    subscription_id = client.start_recording(CHANNEL, STREAM_ID, SourceLocation.LOCAL)
    publication = client.aeron.add_exclusive_publication(CHANNEL, STREAM_ID)
    started = await_signal(client, signals, RecordingSignal.START)
    recording_id = started.recording_id
    say(f"recording {recording_id} started at position {started.position} (subscription {subscription_id})")

    payloads = [f"message {i:05d} ".encode() + bytes(80) for i in range(messages)]
    starts = publish(publication, payloads)
    end = publication.position
    while client.get_recording_position(recording_id) < end:  # the recorder writes asynchronously
        time.sleep(0.001)
    say(f"published {messages} messages; recorded up to position {end}")

    client.stop_recording(CHANNEL, STREAM_ID)
    stopped = await_signal(client, signals, RecordingSignal.STOP)
    publication.close()
    say(f"recording {recording_id} stopped at position {stopped.position}")

    # 2. List: the catalog's descriptors, as Java's listRecordings gives them.
    for d in client.list_recordings():
        say(f"listed {describe(d)}")

    # 3. Replay all of it, with an explicit length.
    start = started.position
    everything = replay(client, recording_id, start, end - start, messages)
    assert everything == list(zip(starts, payloads)), "replay differs from what was published"
    say(f"replayed from {start}: {len(everything)} messages, first {everything[0][1][:13].decode()!r} at "
        f"{everything[0][0]}, last {everything[-1][1][:13].decode()!r} at {everything[-1][0]}")

    # 4. Replay from the middle: any message's start position is a valid replay position.
    middle = messages // 2
    mid_position = starts[middle]
    second_half = replay(client, recording_id, mid_position, REPLAY_ALL_AND_STOP, messages - middle)
    assert second_half == list(zip(starts[middle:], payloads[middle:]))
    say(f"replayed from {mid_position}: {len(second_half)} messages, first {second_half[0][1][:13].decode()!r}")

    # 5. Truncate at the middle: the stop position moves back, whole segment files past it are deleted.
    files = client.truncate_recording(recording_id, mid_position)
    await_signal(client, signals, RecordingSignal.DELETE)
    d = client.list_recording(recording_id)
    say(f"truncated at {mid_position}: {files} segment file(s) deleted; now {describe(d)}")
    first_half = replay(client, recording_id, start, REPLAY_ALL_AND_STOP, middle)
    assert [p for p, _ in first_half] == starts[:middle]
    say(f"after truncation a full replay gives {len(first_half)} messages, "
        f"last {first_half[-1][1][:13].decode()!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="how many messages to record")
    own = parser.add_argument_group("use a running archive instead of starting one")
    own.add_argument("--aeron-dir", help="the media driver directory of the running archive")
    own.add_argument("--archive-dir", help="where the embedded archive keeps its files (default: a temp dir)")
    own.add_argument("--control-channel", default="aeron:ipc", help="the archive's control request channel")
    own.add_argument("--control-stream-id", type=int, default=10)
    args = parser.parse_args(argv)

    from aeron_archive_spark.archive.server.archive import Archive
    from aeron_archive_spark.archive.server.context import ArchiveContext

    archive = temp_dir = None
    if args.aeron_dir is None:
        archive_dir = args.archive_dir or (temp_dir := tempfile.mkdtemp(prefix="record-and-replay-"))
        # 128 KiB segment files (the default is 128 MiB), so that truncation visibly deletes files.
        archive = Archive.launch(ArchiveContext(
            archive_dir=archive_dir, control_channel=None, local_control_channel=args.control_channel,
            local_control_stream_id=args.control_stream_id, segment_file_length=128 * 1024))
        say(f"started an archive in {archive_dir} (embedded media driver {archive.aeron_dir})")
    aeron_dir = args.aeron_dir or archive.aeron_dir
    signals: list = []
    try:
        with AeronArchive.connect(aeron_dir=aeron_dir, control_request_channel=args.control_channel,
                                  control_request_stream_id=args.control_stream_id,
                                  control_response_channel="aeron:ipc",
                                  recording_signal_consumer=signals.append) as client:
            say(f"connected: control session {client.control_session_id}, archive id {client.archive_id()}")
            run(client, signals, args.messages)
    finally:
        if archive is not None:
            archive.close()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
