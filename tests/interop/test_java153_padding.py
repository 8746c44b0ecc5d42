"""PAD frames in the middle of terms (issue 30), checked against the real Java Aeron 1.53 archive.

A Java 1.53 `ExclusivePublication` (tests/interop/java153/JavaPadPublisher.java) publishes 400 messages on 64 KiB
terms and calls the public `appendPadding` between them: 200 bytes after every 10th message, a header-only PAD
(length 0) followed at once by one above the max message length, one of the largest length Java accepts
(maxFramedLength), a PAD that does not fit its term (so the appender closes the term with its own PAD and the
requested one starts the next term), a fill of a term to its end followed by a PAD at a segment boundary, a PAD right
before the last message, and three after it (the recording's stop position is the end of a PAD). It is recorded over
IPC (LOCAL) and over UDP (REMOTE).

The reference is Java's own replay of Java's recording, read by the Java 1.53 client frame by frame, padding included
(JavaReplayDump.java: `Image.blockPoll` delivers each PAD as a block of its own). The model below (`JavaAppender`)
predicts every frame; the reference must match it, which pins what Java 1.53 does with PADs. Then:

a. our `aeron-archive serve` on a copy of the Java archive's directory: the Java client's replay of each recording
   equals Java's, frame for frame (positions, lengths, types, flags, versions, reserved values, stream and term ids,
   term offsets, body digests; the session id is the replay's own on both sides), and reaches the stop position;
b. `aeron-archive verify` accepts that directory (and changes nothing), as Java's `ArchiveTool verify -a` does;
c. our archive records the same publication (the publisher on our archive's media driver, recording through our
   archive's UDP control channel) and the Java client's replay from ours equals Java's replay of Java's recording;
d. `aeron-archive export` of the Java-written directory yields all 400 messages.

Every test skips unless JAVA_AERON_HOME names a Java Aeron 1.53 build (see /work/shared/java-aeron/README.md):
    JAVA_AERON_HOME=~/.cache/java-aeron .venv/bin/python -m pytest tests/interop/test_java153_padding.py
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import free_udp_port
from interop.java153env import (
    Java153Env,
    JavaArchive,
    OurArchive,
    aeron_archive_cli,
    start_java_archive,
    start_our_archive,
    udp,
)

TERM_LENGTH = 64 * 1024
LARGER_REPLAY_MTU = 8192  # asked for in a replay channel (our archive's extension; at most a quarter of the term)
SEGMENT_LENGTH = 128 * 1024
MTU = 1408
HEADER_LENGTH = 32
MAX_PAYLOAD = MTU - HEADER_LENGTH  # 1376
MAX_MESSAGE = TERM_LENGTH // 8  # 8192: FrameDescriptor.computeMaxMessageLength
HDR_TYPE_PAD, HDR_TYPE_DATA = 0, 1
BEGIN, END = 0x80, 0x40
STREAM_ID = 1001
REPLAY_STREAM_ID = 2002
SEED = 7
MESSAGES = 400
SIZES = (100, MAX_PAYLOAD, MAX_PAYLOAD + 1, 3000, MAX_MESSAGE, 0, 31, MAX_MESSAGE - 92, 500, 2000)
CONTROL_RESPONSE = "aeron:udp?endpoint=localhost:0"
IDLE_TIMEOUT_MS = 5000


def align(length: int) -> int:
    return (length + 31) & ~31


def fragmented_frame_length(length: int) -> int:
    """LogBufferDescriptor.computeFragmentedFrameLength: the bytes a message of `length` takes in a term."""
    full, rest = divmod(length, MAX_PAYLOAD)
    return full * MTU + (align(rest + HEADER_LENGTH) if rest else 0)


MAX_FRAMED = fragmented_frame_length(MAX_MESSAGE)  # 8384: the largest length appendPadding accepts


@functools.cache
def payload(index: int, length: int) -> bytes:
    """Message `index` of JavaPadPublisher: byte j = (SEED + index * 131 + j * 7 + (j >> 8)) & 0xFF."""
    return bytes((SEED + index * 131 + j * 7 + (j >> 8)) & 0xFF for j in range(length))


# ---------------------------------------------------------------------------------------------------------------------
# the model: Java's ExclusivePublication appender (ExclusivePublication.java of Aeron 1.53)


@dataclass(frozen=True)
class Frame:
    """A frame as a replay delivers it: position, frame length, type, flags, reserved value, body digest."""

    position: int
    length: int
    type: int
    flags: int
    reserved: int
    digest: str


class JavaAppender:
    """What the Java publication writes for each script line: a message that does not fit the rest of its term, or a
    padding that does not, makes the appender close the term with a PAD to its end (handleEndOfLog), and the
    operation is retried at the start of the next term; appendPadding(n) writes one PAD frame of n + 32 bytes."""

    def __init__(self) -> None:
        self.term_begin = 0
        self.term_offset = 0
        self.frames: list[Frame] = []
        self.messages = 0

    @property
    def position(self) -> int:
        return self.term_begin + self.term_offset

    def _reserve(self, required: int) -> int:
        if self.term_offset + required > TERM_LENGTH:
            if self.term_offset < TERM_LENGTH:
                self._pad(self.position, TERM_LENGTH - self.term_offset)
            self.term_begin += TERM_LENGTH
            self.term_offset = 0
        start = self.position
        self.term_offset += required
        return start

    def _pad(self, position: int, frame_length: int) -> None:
        digest = hashlib.sha256(bytes(frame_length - HEADER_LENGTH)).hexdigest()
        self.frames.append(Frame(position, frame_length, HDR_TYPE_PAD, BEGIN | END, 0, digest))

    def message(self, length: int) -> int:
        index, data = self.messages, payload(self.messages, length)
        self.messages += 1
        chunks = [data[i:i + MAX_PAYLOAD] for i in range(0, length, MAX_PAYLOAD)] or [b""]
        position = self._reserve(fragmented_frame_length(length) if length > MAX_PAYLOAD else align(length + 32))
        for n, chunk in enumerate(chunks):
            flags = (BEGIN if n == 0 else 0) | (END if n == len(chunks) - 1 else 0)
            reserved = ((index + 1) << 32) | (position % TERM_LENGTH)  # JavaPadPublisher's ReservedValueSupplier
            self.frames.append(Frame(position, len(chunk) + HEADER_LENGTH, HDR_TYPE_DATA, flags, reserved,
                                     hashlib.sha256(chunk).hexdigest()))
            position += align(len(chunk) + HEADER_LENGTH)
        return self.position

    def padding(self, length: int) -> int:
        self._pad(self._reserve(align(length + HEADER_LENGTH)), length + HEADER_LENGTH)
        return self.position

    def fill_term(self) -> int:
        while self.term_offset < TERM_LENGTH:
            self.padding(min(TERM_LENGTH - self.term_offset - HEADER_LENGTH, MAX_FRAMED))
        return self.position


@dataclass(frozen=True)
class Plan:
    script: str
    results: list[int | str]  # what JavaPadPublisher reports per line: the position after it, or X's message
    frames: list[Frame]
    stop_position: int
    messages: list[tuple[int, int]]  # per message: (position of its first frame, length)


def plan() -> Plan:
    """The script JavaPadPublisher runs, with the positions and frames the model predicts for it."""
    model = JavaAppender()
    lines: list[str] = []
    results: list[int | str] = []
    starts: list[tuple[int, int]] = []

    def op(line: str, result: int | str) -> None:
        lines.append(line)
        results.append(result)

    filled = moved = False
    for i in range(MESSAGES):
        size = SIZES[i % len(SIZES)]
        if i == MESSAGES - 1:
            op("P 200", model.padding(200))  # right before the last message
        frames_before = len(model.frames)
        op(f"M {size}", model.message(size))
        first = next(f for f in model.frames[frames_before:] if f.type == HDR_TYPE_DATA)
        starts.append((first.position, size))
        if i % 10 == 9:
            op("P 200", model.padding(200))  # the publisher
        if i == 54:  # a header-only PAD, then at once one longer than the max message length
            op("P 0", model.padding(0))
            op(f"P {MAX_MESSAGE + 100}", model.padding(MAX_MESSAGE + 100))
        if i == 94:  # above maxFramedLength is refused; maxFramedLength itself is taken
            lines.append(f"X {MAX_FRAMED + 1}")
            results.append(f"padding exceeds maxFramedLength of {MAX_FRAMED}, length={MAX_FRAMED + 1}")
            op(f"P {MAX_FRAMED}", model.padding(MAX_FRAMED))
        remaining = TERM_LENGTH - model.term_offset
        if not filled and i >= 130 and (model.position // TERM_LENGTH) % 2 == 1 and remaining > 0:
            # fill a term that ends a segment, then a PAD at the start of the next segment
            op("F", model.fill_term())
            op("P 64", model.padding(64))
            filled = True
        elif not moved and i >= 200 and 2 * HEADER_LENGTH <= remaining <= MAX_FRAMED:
            # a PAD one frame too long for the rest of the term: the appender pads the term out, the PAD starts the
            # next term
            op(f"P {remaining}", model.padding(remaining))
            moved = True
    op("P 96", model.padding(96))
    op("P 200", model.padding(200))  # with the 400th message's own, three PADs end the recording
    assert filled and moved
    return Plan("\n".join(lines) + "\n", results, model.frames, model.position, starts)


# ---------------------------------------------------------------------------------------------------------------------
# replays as the Java client reports them (JavaReplayDump)


def frames_of(dump: dict[str, Any]) -> list[Frame]:
    return [Frame(f[0], f[1], f[2], f[3], f[5], f[10]) for f in dump["frames"]]


def headers_of(dump: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    """Per frame: (version, stream id, term id - initial term id, term offset), as the replay wrote them."""
    initial = dump["initialTermId"]
    return [(f[4], f[7], f[8] - initial, f[9]) for f in dump["frames"]]


def assert_replay_matches(actual: dict[str, Any], expected: list[Frame], stop_position: int, what: str) -> None:
    """The replay delivered exactly `expected` (frame for frame) and reached `stop_position`."""
    assert "error" not in actual, f"{what}: {actual['error']}"
    got = frames_of(actual)
    for n, (a, e) in enumerate(zip(got, expected, strict=False)):  # a short replay is reported below
        assert a == e, f"{what}: frame {n} differs\n  got      {a}\n  expected {e}\n  previous {expected[n - 1:n]}"
    if actual.get("closedReason") != "stop" or actual.get("endPosition") != stop_position:
        nxt = expected[len(got)] if len(got) < len(expected) else None
        raise AssertionError(
            f"{what}: the replay ended at position {actual.get('endPosition')} ({actual.get('closedReason')}) after "
            f"{len(got)} of {len(expected)} frames, not at the stop position {stop_position}; the last frame "
            f"delivered: {got[-1] if got else None}; the next expected: {nxt}")
    assert len(got) == len(expected), f"{what}: {len(got)} frames delivered, {len(expected)} expected"
    # Headers: version 0, the replay's stream id, term ids and offsets of the frame's position; every frame carries
    # the replay's session id (Java's replay rewrites DATA frames' ids and writes its PADs with appendPadding).
    headers = headers_of(actual)
    assert headers == [(0, REPLAY_STREAM_ID, f.position // TERM_LENGTH, f.position % TERM_LENGTH) for f in got]
    sessions = {f[6] for f in actual["frames"]}
    assert sessions == {actual["imageSessionId"]}, f"{what}: frames with other session ids than the replay's"
    assert actual["imageInitialTermId"] == actual["initialTermId"]
    assert actual["imageJoinPosition"] == actual["startPosition"] == 0


def java_dump(env: Java153Env, aeron_dir: str | Path, control_channel: str, replay_channel: str,
              *recording_ids: int) -> list[dict[str, Any]]:
    result = env.run("JavaReplayDump", aeron_dir, control_channel, 10, CONTROL_RESPONSE, replay_channel,
                     REPLAY_STREAM_ID, IDLE_TIMEOUT_MS, *recording_ids, timeout=120)
    replays: list[dict[str, Any]] = result.json()["replays"]
    return replays


def publish(env: Java153Env, aeron_dir: str | Path, control_channel: str, script: Path, udp_port: int
            ) -> dict[str, dict[str, Any]]:
    """Run JavaPadPublisher: the script over IPC (recorded LOCAL), then over UDP (recorded REMOTE)."""
    channel = udp(udp_port)
    report = env.run("JavaPadPublisher", aeron_dir, control_channel, 10, CONTROL_RESPONSE, script, SEED, STREAM_ID,
                     f"aeron:ipc?term-length={TERM_LENGTH}", "aeron:ipc", "LOCAL",
                     f"{channel}|term-length={TERM_LENGTH}", channel, "REMOTE", timeout=120).json()
    ipc, over_udp = report["recordings"]
    return {"ipc": ipc, "udp": over_udp}


# ---------------------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def the_plan() -> Plan:
    return plan()


@dataclass(frozen=True)
class JavaReference:
    archive_dir: Path  # the stopped Java archive's directory: copy it, never change it
    published: dict[str, dict[str, Any]]  # "ipc"/"udp" -> JavaPadPublisher's report
    replays: dict[tuple[str, str], dict[str, Any]]  # (recording, replay channel kind) -> JavaReplayDump's report


@pytest.fixture(scope="module")
def java_reference(env: Java153Env, the_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> JavaReference:
    """The Java archive records the padded publication over IPC and UDP; Java's replays of both are the reference."""
    base = tmp_path_factory.mktemp("java153")
    script = base / "script.txt"
    script.write_text(the_plan.script)
    archive: JavaArchive = start_java_archive(env, base / "java", free_udp_port(),
                                              f"-Daeron.archive.segment.file.length={SEGMENT_LENGTH}")
    try:
        published = publish(env, archive.aeron_dir, archive.control_channel, script, free_udp_port())
        ids = [published["ipc"]["recordingId"], published["udp"]["recordingId"]]
        replays: dict[tuple[str, str], dict[str, Any]] = {}
        for kind, channel in (("ipc", "aeron:ipc"), ("udp", udp(free_udp_port())),
                              ("udp-mtu", f"{udp(free_udp_port())}|mtu={LARGER_REPLAY_MTU}")):
            ipc, over_udp = java_dump(env, archive.aeron_dir, archive.control_channel, channel, *ids)
            replays["ipc", kind], replays["udp", kind] = ipc, over_udp
    except BaseException:
        print(archive.logs())
        raise
    finally:
        code = archive.stop()
    assert code in (0, 143), f"Java archive exited with {code}\n{archive.logs()}"
    return JavaReference(archive.archive_dir, published, replays)


def copy_of(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


@pytest.fixture(scope="module")
def ours_on_java_copy(java_reference: JavaReference, tmp_path_factory: pytest.TempPathFactory
                      ) -> Iterator[OurArchive]:
    base = tmp_path_factory.mktemp("ours-on-java")
    archive = start_our_archive(base, copy_of(java_reference.archive_dir, base / "archive"), free_udp_port())
    try:
        yield archive
    finally:
        archive.stop()


@dataclass(frozen=True)
class OurRecording:
    archive_dir: Path
    published: dict[str, dict[str, Any]]
    replays: dict[str, dict[str, Any]]  # recording kind -> the Java client's replay (IPC) from our archive


@pytest.fixture(scope="module")
def our_recording(env: Java153Env, the_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> OurRecording:
    """Our archive records the same Java publication (on our archive's embedded media driver); the Java client
    replays both recordings from it."""
    base = tmp_path_factory.mktemp("ours-recording")
    script = base / "script.txt"
    script.write_text(the_plan.script)
    archive = start_our_archive(base, base / "archive", free_udp_port(), "--segment-length", str(SEGMENT_LENGTH))
    try:
        published = publish(env, archive.aeron_dir, archive.control_channel, script, free_udp_port())
        ipc, over_udp = java_dump(env, archive.aeron_dir, archive.control_channel, "aeron:ipc",
                                  published["ipc"]["recordingId"], published["udp"]["recordingId"])
    except BaseException:
        print(archive.logs())
        raise
    finally:
        archive.stop()
    return OurRecording(base / "archive", published, {"ipc": ipc, "udp": over_udp})


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------------------------
# what Java 1.53 does (the reference; these pass on any archive code)


@pytest.mark.parametrize("kind", ["ipc", "udp"])
def test_java_publication_pads_as_the_model_says(java_reference: JavaReference, the_plan: Plan, kind: str) -> None:
    """appendPadding(n) writes one PAD of n + 32 bytes (n = 0 included: a header-only PAD) up to n = maxFramedLength
    (8384 for 64 KiB terms and MTU 1408, above the max message length 8192); n = maxFramedLength + 1 throws. A PAD
    that does not fit its term is moved to the next one, behind the appender's own end-of-term PAD."""
    report = java_reference.published[kind]
    assert (report["maxMessageLength"], report["maxPayloadLength"], report["maxFramedLength"]) == \
        (MAX_MESSAGE, MAX_PAYLOAD, MAX_FRAMED)
    assert report["results"] == the_plan.results
    assert report["messages"] == MESSAGES
    assert report["startPosition"] == 0
    assert report["stopPosition"] == report["finalPosition"] == the_plan.stop_position
    assert report["segmentFileLength"] == SEGMENT_LENGTH and report["termBufferLength"] == TERM_LENGTH
    assert report["descriptorInitialTermId"] == report["initialTermId"]
    pads = [f for f in the_plan.frames if f.type == HDR_TYPE_PAD]
    mid_term = [f for f in pads if (f.position + align(f.length)) % TERM_LENGTH]
    assert len(mid_term) > 40 and {HEADER_LENGTH, MAX_MESSAGE + 132, MAX_FRAMED + 32} <= {f.length for f in pads}
    assert any(f.position % SEGMENT_LENGTH == 0 for f in pads)  # a PAD opens a segment
    assert the_plan.frames[-1].type == the_plan.frames[-2].type == HDR_TYPE_PAD


@pytest.mark.parametrize(("kind", "replay"), [("ipc", "ipc"), ("udp", "ipc"), ("ipc", "udp"), ("udp", "udp")])
def test_java_replay_of_the_java_recording_is_the_model(java_reference: JavaReference, the_plan: Plan, kind: str,
                                                        replay: str) -> None:
    """Java's replay delivers every PAD as a PAD at its position, flags BEGIN|END, reserved value 0, zero body, the
    replay's session and stream ids (ReplaySession calls appendPadding(frameLength - 32)); DATA frames keep their
    reserved values. Over UDP a PAD's body is not sent (the sender sends its header), and reads as zeros."""
    assert_replay_matches(java_reference.replays[kind, replay], the_plan.frames, the_plan.stop_position,
                          f"Java's replay of Java's {kind} recording over {replay}")


@pytest.mark.parametrize("kind", ["ipc", "udp"])
def test_java_recording_on_disk_holds_the_pads(java_reference: JavaReference, the_plan: Plan, kind: str) -> None:
    """The segment files Java wrote: the frame chain of the model, PAD headers with the publication's session id,
    flags BEGIN|END, reserved value 0 and zero bodies, over IPC and UDP alike."""
    report = java_reference.published[kind]
    recording_id, session_id, initial = report["recordingId"], report["sessionId"], report["initialTermId"]
    files = sorted(java_reference.archive_dir.glob(f"{recording_id}-*.rec"), key=lambda p: int(p.stem.split("-")[1]))
    assert [p.name for p in files] == [f"{recording_id}-{base}.rec"
                                       for base in range(0, the_plan.stop_position, SEGMENT_LENGTH)]
    data = b"".join(p.read_bytes() for p in files)
    position, frames = 0, []
    while position < the_plan.stop_position:
        length = int.from_bytes(data[position:position + 4], "little", signed=True)
        version, flags = data[position + 4], data[position + 5]
        ftype = int.from_bytes(data[position + 6:position + 8], "little")
        term_offset, session, stream, term_id = (int.from_bytes(data[position + o:position + o + 4], "little",
                                                                signed=True) for o in (8, 12, 16, 20))
        reserved = int.from_bytes(data[position + 24:position + 32], "little", signed=True)
        assert (version, term_offset, session, stream, term_id - initial) == \
            (0, position % TERM_LENGTH, session_id, STREAM_ID, position // TERM_LENGTH), position
        body = data[position + HEADER_LENGTH:position + length]
        frames.append(Frame(position, length, ftype, flags, reserved, hashlib.sha256(body).hexdigest()))
        position += align(length)
    assert frames == the_plan.frames
    assert not any(data[the_plan.stop_position:])


# ---------------------------------------------------------------------------------------------------------------------
# a. our archive replays the Java-written recording as Java does


@pytest.mark.parametrize(("kind", "replay"), [("ipc", "ipc"), ("udp", "ipc"), ("ipc", "udp")])
def test_our_replay_of_the_java_recording_equals_javas(env: Java153Env, java_reference: JavaReference,
                                                       ours_on_java_copy: OurArchive, the_plan: Plan, kind: str,
                                                       replay: str) -> None:
    recording_id = java_reference.published[kind]["recordingId"]
    channel = "aeron:ipc" if replay == "ipc" else udp(free_udp_port())
    [ours] = java_dump(env, ours_on_java_copy.aeron_dir, ours_on_java_copy.control_channel, channel, recording_id)
    reference = java_reference.replays[kind, replay]
    assert ours["stopPosition"] == reference["stopPosition"] == the_plan.stop_position
    assert ours["initialTermId"] == reference["initialTermId"]
    assert_replay_matches(ours, frames_of(reference), the_plan.stop_position,
                          f"our replay of Java's {kind} recording over {replay}")
    assert headers_of(ours) == headers_of(reference)


def test_a_larger_replay_mtu_asked_for_by_the_java_client(env: Java153Env, java_reference: JavaReference,
                                                         ours_on_java_copy: OurArchive, the_plan: Plan) -> None:
    """The Java 1.53 client asks for `mtu=8192` in its replay channel: Java's archive ignores it (the recording's
    MTU), ours honours it (our extension); the frames the client receives are the same, PADs and reserved values
    included, as Java's replay of Java's recording."""
    java_replay = java_reference.replays["udp", "udp-mtu"]
    assert java_replay["imageMtuLength"] == 1408
    assert_replay_matches(java_replay, the_plan.frames, the_plan.stop_position, "Java's replay asked for mtu=8192")
    for kind in ("ipc", "udp"):
        channel = f"{udp(free_udp_port())}|mtu={LARGER_REPLAY_MTU}"
        [ours] = java_dump(env, ours_on_java_copy.aeron_dir, ours_on_java_copy.control_channel, channel,
                           java_reference.published[kind]["recordingId"])
        assert ours["imageMtuLength"] == LARGER_REPLAY_MTU
        reference = java_reference.replays[kind, "udp"]
        assert_replay_matches(ours, frames_of(reference), the_plan.stop_position,
                              f"our replay of Java's {kind} recording at mtu={LARGER_REPLAY_MTU}")
        assert headers_of(ours) == headers_of(reference)


# ---------------------------------------------------------------------------------------------------------------------
# b. verify


def test_verify_accepts_the_java_directory(env: Java153Env, java_reference: JavaReference, tmp_path: Path) -> None:
    ours_dir = copy_of(java_reference.archive_dir, tmp_path / "ours")
    java_dir = copy_of(java_reference.archive_dir, tmp_path / "java")
    java = env.archive_tool(java_dir, "verify", "-a")
    assert java.returncode == 0, f"Java's ArchiveTool verify -a refused it:\n{java.stdout[-3000:]}{java.stderr}"
    before = snapshot(ours_dir)
    proc = aeron_archive_cli("verify", "--dir", str(ours_dir))
    assert proc.returncode == 0, f"aeron-archive verify exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    assert "verified 2 recording(s): 2 ok" in proc.stdout
    assert snapshot(ours_dir) == before


# ---------------------------------------------------------------------------------------------------------------------
# c. our archive records the Java publication as Java's does


@pytest.mark.parametrize("kind", ["ipc", "udp"])
def test_our_recording_of_the_java_publication_replays_as_javas(java_reference: JavaReference,
                                                                our_recording: OurRecording, the_plan: Plan,
                                                                kind: str) -> None:
    ours, theirs = our_recording.published[kind], java_reference.published[kind]
    assert ours["results"] == theirs["results"] == the_plan.results  # same sequence, same positions
    assert (ours["startPosition"], ours["stopPosition"]) == (0, the_plan.stop_position)
    reference = java_reference.replays[kind, "ipc"]
    assert_replay_matches(our_recording.replays[kind], frames_of(reference), the_plan.stop_position,
                          f"our replay of our {kind} recording of the Java publication")
    assert headers_of(our_recording.replays[kind]) == headers_of(reference)


def test_our_recording_of_the_java_publication_verifies(env: Java153Env, our_recording: OurRecording,
                                                        tmp_path: Path) -> None:
    """`aeron-archive verify` and Java's ArchiveTool verify -a both accept the directory our archive wrote."""
    proc = aeron_archive_cli("verify", "--dir", str(our_recording.archive_dir))
    assert proc.returncode == 0, f"aeron-archive verify exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    java = env.archive_tool(copy_of(our_recording.archive_dir, tmp_path / "java"), "verify", "-a")
    assert java.returncode == 0, f"Java's ArchiveTool verify -a refused it:\n{java.stdout[-3000:]}{java.stderr}"


# ---------------------------------------------------------------------------------------------------------------------
# d. export


@pytest.mark.parametrize("kind", ["ipc", "udp"])
def test_export_of_the_java_directory_yields_every_message(java_reference: JavaReference, the_plan: Plan,
                                                           tmp_path: Path, kind: str) -> None:
    report = java_reference.published[kind]
    archive_dir = copy_of(java_reference.archive_dir, tmp_path / "archive")
    out = tmp_path / "out.parquet"
    proc = aeron_archive_cli("export", "--dir", str(archive_dir), "--to", str(out), "--no-progress",
                             str(report["recordingId"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = pq.read_table(out).to_pydict()
    assert len(table["value"]) == MESSAGES
    assert table["position"] == [start for start, _ in the_plan.messages]
    assert set(table["recordingId"]) == {report["recordingId"]}
    assert set(table["sessionId"]) == {report["sessionId"]} and set(table["streamId"]) == {STREAM_ID}
    assert table["reservedValue"] == [((i + 1) << 32) | (start % TERM_LENGTH)
                                      for i, (start, _) in enumerate(the_plan.messages)]
    for i, (value, (_, length)) in enumerate(zip(table["value"], the_plan.messages, strict=True)):
        assert value == payload(i, length), f"message {i}"
