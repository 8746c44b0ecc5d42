"""Our time index beside Java 1.53 (issue 35): its `.tix` files do not disturb Java's ArchiveTool nor Java's archive
on the same directory, and Java's archive is never sent our time index requests.

- `ArchiveTool verify -a` and `count-entries` give the same answers on a directory our archive wrote, with its `.tix`
  files and without them, and change none of them;
- Java's archive runs on that directory: our client lists and replays the recording from it, byte for byte, and
  asks it nothing it would leave unanswered (no `features=time-index` at connect: `position_at_time` fails at once);
- afterwards the `.tix` files are as they were, and our reads by time still find them;
- a recording Java's archive made (no index) is read by time through its SBE messages' own time (timestampField).

Skipped unless JAVA_AERON_HOME names a Java Aeron 1.53 build (see /work/shared/java-aeron/README.md).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_udp_port
from interop.java153env import Java153Env, JavaArchive, OurArchive, start_java_archive
from interop.test_java153_replication import CONTROL_STREAM_ID, RESPONSE, record

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.archive.constants import REPLAY_ALL_AND_STOP, SourceLocation
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from aeron_archive_spark.archive.storage.time_index import read_time_index
from aeron_archive_spark.archive.storage.time_index_search import RecordingGeometry, RecordingTimeIndex


def tix_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.tix"))}


def without_tix(directory: Path, copy: Path) -> Path:
    shutil.copytree(directory, copy)
    for path in copy.glob("*.tix"):
        path.unlink()
    return copy


def without_session_ids(stream: bytes) -> bytes:
    """The frames of a replayed stream with their session id zeroed (each replay has a session of its own)."""
    out = bytearray(stream)
    offset = 0
    while offset + 32 <= len(out):
        length = int.from_bytes(out[offset : offset + 4], "little", signed=True)
        if length <= 0:
            break
        out[offset + 12 : offset + 16] = bytes(4)
        offset += (length + 31) & ~31
    return bytes(out)


def replayed(client: AeronArchive, recording_id: int, stop: int) -> bytes:
    subscription = client.replay(recording_id, f"aeron:udp?endpoint=localhost:{free_udp_port()}", 7001, position=0,
                                 length=REPLAY_ALL_AND_STOP)
    got = bytearray()
    deadline = time.monotonic() + 30
    try:
        while len(got) < stop:
            for image in subscription.images():
                image.block_poll(lambda block, _s, _t: got.extend(block), 1 << 20)
            assert time.monotonic() < deadline, f"replayed {len(got)} of {stop} bytes"
    finally:
        subscription.close()
    return without_session_ids(bytes(got))


@pytest.fixture
def client_driver(tmp_path: Path) -> Iterator[EmbeddedMediaDriver]:
    """A media driver of the test's own, for the client of Java's archive (ours stops, with its driver)."""
    driver = EmbeddedMediaDriver(str(tmp_path / "client-driver"))
    yield driver
    driver.close()


def test_the_time_index_disturbs_neither_java_s_archive_tool_nor_java_s_archive(
    env: Java153Env, ours: OurArchive, client_driver: EmbeddedMediaDriver, tmp_path: Path
) -> None:
    with AeronArchive.connect(ours.aeron_dir, ours.control_channel, CONTROL_STREAM_ID, RESPONSE) as client:
        assert client.answers_time_index
        recording_id, stop = record(client, 600, 7301)
        ours_bytes = replayed(client, recording_id, stop)
    ours.stop()
    directory = ours.archive_dir
    index_before = tix_files(directory)
    assert index_before, "our archive kept no time index"

    bare = without_tix(directory, tmp_path / "bare")
    for verb in (["verify", "-a"], ["count-entries"]):
        with_index = env.archive_tool(directory, *verb)
        without_index = env.archive_tool(bare, *verb)
        assert with_index.returncode == without_index.returncode == 0, with_index.stdout + with_index.stderr
        assert with_index.stdout.replace(str(directory), "D") == without_index.stdout.replace(str(bare), "D")
    assert tix_files(directory) == index_before

    java_dir = tmp_path / "java"
    shutil.copytree(directory, java_dir / "archive")
    (java_dir / "archive" / "archive-mark.dat").unlink(missing_ok=True)  # ours, had the other helper written one
    java = start_java_archive(env, java_dir, free_udp_port())
    try:
        with AeronArchive.connect(client_driver.aeron_dir, java.control_channel, CONTROL_STREAM_ID, RESPONSE,
                                  message_timeout_s=10) as client:
            assert not client.answers_time_index
            assert client.list_recording(recording_id).stop_position == stop
            assert replayed(client, recording_id, stop) == ours_bytes
            started = time.monotonic()
            with pytest.raises(ArchiveError, match="does not answer time index requests"):
                client.position_at_time(recording_id, time.time_ns())
            assert time.monotonic() - started < 1  # never sent, so never waited for
    finally:
        java.stop()
    assert tix_files(java_dir / "archive") == index_before
    index = read_time_index(java_dir / "archive", recording_id, 0, stop)
    assert not index.is_empty and int(index.positions[0]) == 0
    search = RecordingTimeIndex(java_dir / "archive", RecordingGeometry(recording_id, 0, stop, 64 * 1024, 128 * 1024))
    assert search.position_at_or_after(int(index.times_ns[0])) == 0


def test_a_java_written_recording_is_read_by_time_through_its_messages_time_field(
    java: JavaArchive, client_driver: EmbeddedMediaDriver
) -> None:
    """A recording Java 1.53's archive made (no time index: Java keeps none) is placed by its SBE messages' own
    time field (timestampField), through the same planner and reads as the Spark source, from its directory."""
    from aeron_archive_spark.archive.codecs.codec import SbeCodec
    from aeron_archive_spark.archive.tables.open_source import open_recording_source
    from aeron_archive_spark.archive.tables.options import SourceOptions
    from aeron_archive_spark.archive.tables.payload import payload_decoder
    from aeron_archive_spark.archive.tables.planning import plan_ranges
    from aeron_archive_spark.archive.tables.ranges import RecordingFacts, SegmentFiles
    from aeron_archive_spark.archive.tables.read import read_ranges
    from aeron_archive_spark.archive.tables.schema import row_schema

    schema_path = str(Path(__file__).resolve().parents[2] / "examples" / "market_data.xml")
    codec = SbeCodec.from_xml(schema_path)
    t0 = 1_764_322_200_000_000_000  # the exchange's clock
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}|term-length=65536"
    with AeronArchive.connect(client_driver.aeron_dir, java.control_channel, CONTROL_STREAM_ID, RESPONSE,
                              message_timeout_s=10) as client:
        subscription_id = client.start_recording(channel, 7401, SourceLocation.REMOTE)
        publication = client.aeron.add_exclusive_publication(channel, 7401)
        deadline = time.monotonic() + 10
        while not publication.is_connected:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for i in range(3000):  # ~5 terms: the search probes terms, then decodes one
            payload = codec.encode("Trade", symbol="AAPL", price_mantissa=i, quantity=1, side=i % 2,
                                   timestamp_ns=t0 + i * 1_000_000, trade_id=i)
            while publication.offer(payload) <= 0:
                time.sleep(0.0001)
        stop = publication.position
        recording_id = -1
        while recording_id < 0 or client.get_recording_position(recording_id) < stop:
            recording_id = client.find_last_matching_recording(0, channel, 7401, publication.session_id)
            assert time.monotonic() < deadline + 20
            time.sleep(0.01)
        client.stop_recording_subscription(subscription_id)
        publication.close()
    assert not list(java.archive_dir.glob("*.tix"))

    options = SourceOptions.parse({"archiveDir": str(java.archive_dir), "recordingId": str(recording_id),
                                   "sbeSchema": schema_path, "timestampField": "timestampNs"})
    source = open_recording_source(options)
    try:
        descriptor = source.selected()[recording_id]
        end = source.planning_end(descriptor)
        start = source.position_at_time(descriptor, t0 + 1000 * 1_000_000, end)
        until = source.position_at_time(descriptor, t0 + 2500 * 1_000_000, end)
        assert start is not None and until is not None
        decoder = payload_decoder(options)
        ranges = plan_ranges([(RecordingFacts.of(descriptor), start, until, end)], 64 * 1024,
                             SegmentFiles(str(java.archive_dir)))
        trade_ids = [i for batch in read_ranges(ranges, row_schema(decoder), decoder)
                     for i in batch.column("tradeId").to_pylist()]
    finally:
        source.close()
    assert trade_ids == list(range(1000, 2500))
