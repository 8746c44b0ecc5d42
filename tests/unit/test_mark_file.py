"""archive-mark.dat: the layout against Java's schema 100, writing and reading back, short and torn files, the
liveness rule a start applies, taking over, and Agrona's distinct error log semantics (fake clock)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from aeron_archive_spark.archive.codecs.schema import SchemaParser
from aeron_archive_spark.archive.storage import mark_file as mf
from aeron_archive_spark.archive.storage.error_log import (
    DistinctErrorLog,
    ErrorObservation,
    exception_key,
    exception_text,
    format_error_log,
    read_error_log,
)

SCHEMA = Path(__file__).parent / "mark_file" / "aeron-archive-mark-codecs.xml"


class Clock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def _acquire(directory: Path, clock: Clock, **kwargs: object) -> mf.ArchiveMarkFile:
    return mf.ArchiveMarkFile.acquire(str(directory), archive_dir=str(directory), epoch_clock=clock, **kwargs)  # type: ignore[arg-type]


def _encode(mark: mf.ArchiveMarkFile, aeron_dir: str = "/dev/shm/aeron-x") -> None:
    mark.encode(
        control_stream_id=10,
        local_control_stream_id=11,
        events_stream_id=30,
        archive_id=77,
        error_buffer_length=mf.ERROR_BUFFER_LENGTH_DEFAULT,
        control_channel="aeron:udp?endpoint=localhost:8010",
        local_control_channel="aeron:ipc",
        events_channel=None,
        aeron_directory=aeron_dir,
    )


# -- layout -----------------------------------------------------------------------------------------------------------


def test_field_offsets_block_length_and_ids_are_those_of_javas_schema_100():
    parser = SchemaParser(ET.parse(SCHEMA).getroot())
    messages, _ = parser.messages()
    (header,) = messages
    assert parser.schema_id == mf.SCHEMA_ID and parser.version == mf.SCHEMA_VERSION
    assert header.template_id == mf.TEMPLATE_ID and header.block_length == mf.BLOCK_LENGTH
    assert {f.name: f.offset for f in header.fields} == mf.FIELD_OFFSETS
    assert tuple(v.name for v in header.var_fields) == mf.VAR_DATA_FIELDS
    assert all(v.length_size == 4 for v in header.var_fields)
    assert parser.header_layout()[2] == mf.MESSAGE_HEADER_LENGTH


def test_a_new_file_has_javas_length_header_and_version_written_last(tmp_path):
    clock = Clock()
    mark = _acquire(tmp_path, clock)
    try:
        path = tmp_path / mf.FILENAME
        assert path.stat().st_size == 8192 + 1024 * 1024  # align(8 KiB + 1 MiB, 4 KiB), as Java's
        _encode(mark)
        before = mf.read_mark_file(str(tmp_path)).header
        assert before.version == 0 and not before.is_ready  # still starting: Java's signalReady not yet called
        clock.now_ms += 5
        mark.signal_ready(clock.now_ms)
        data = path.read_bytes()
        assert struct.unpack_from("<HHHH", data, 0) == (128, 200, 100, 2)
        assert struct.unpack_from("<i", data, 8)[0] == mf.SEMANTIC_VERSION == 196864
        header = mf.read_mark_file(str(tmp_path)).header
        assert header.activity_timestamp == clock.now_ms and header.start_timestamp == clock.now_ms - 5
        assert header.pid == os.getpid() and header.archive_id == 77 and header.header_length == 8192
        assert (header.control_stream_id, header.local_control_stream_id, header.events_stream_id) == (10, 11, 30)
        assert header.control_channel == "aeron:udp?endpoint=localhost:8010"
        assert (header.local_control_channel, header.events_channel) == ("aeron:ipc", "")
        assert header.aeron_directory == "/dev/shm/aeron-x"
        assert header.version_text == "3.1.0"
        assert header.java_string().startswith(
            "[MarkFileHeader](sbeTemplateId=200|sbeSchemaId=100|sbeSchemaVersion=2|sbeBlockLength=128):version=196864|"
        )
        mark.update_activity_timestamp(clock.now_ms + 1000)
        assert mf.read_mark_file(str(tmp_path)).header.activity_timestamp == clock.now_ms + 1000
    finally:
        mark.signal_terminated()
        mark.close()
    assert mf.read_mark_file(str(tmp_path)).header.activity_timestamp == -1  # Java's signalTerminated
    assert (tmp_path / mf.FILENAME).exists()  # left in place, as Java leaves it


def test_a_header_too_long_for_8_kib_is_refused_as_java_refuses_it(tmp_path):
    with _acquire(tmp_path, Clock()) as mark, pytest.raises(mf.ArchiveError, match=r"headerLength=\d+ > headerLength"):
        _encode(mark, aeron_dir="/x" * 5000)


def test_short_and_torn_files_are_named_errors(tmp_path):
    path = tmp_path / mf.FILENAME
    with pytest.raises(mf.MarkFileError, match=r"no archive-mark\.dat"):
        mf.read_mark_file(str(tmp_path))
    path.write_bytes(b"\x80\x00\xc8\x00d\x00\x02\x00" + bytes(20))
    with pytest.raises(mf.MarkFileError, match="28 bytes: too short"):
        mf.read_mark_file(str(tmp_path))
    clock = Clock()
    path.unlink()
    with _acquire(tmp_path, clock) as mark:
        _encode(mark)
        mark.signal_ready(clock.now_ms)
    data = path.read_bytes()
    path.write_bytes(data[:150])  # cut inside the control channel
    with pytest.raises(mf.MarkFileError, match="torn: controlChannel"):
        mf.read_mark_file(str(tmp_path))


def test_a_legacy_file_reads_with_javas_null_values_and_is_rewritten_on_take_over(tmp_path):
    path = tmp_path / mf.FILENAME
    legacy = bytearray(4096)
    struct.pack_into("<i4xqqqiii", legacy, 0, mf.SEMANTIC_VERSION, 1000, 900, 4242, 1, 2, 3)  # no headerLength
    cursor = 128
    for text in (b"c", b"l", b"e", b"/a"):
        struct.pack_into("<I", legacy, cursor, len(text))
        legacy[cursor + 4 : cursor + 4 + len(text)] = text
        cursor += 4 + len(text)
    path.write_bytes(bytes(legacy))
    header = mf.read_mark_file(str(tmp_path)).header
    assert header.header_offset == 0 and header.acting_version == 0
    assert (header.pid, header.header_length, header.error_buffer_length, header.archive_id) == (4242, 0, 0, -1)
    assert header.aeron_directory == "/a"
    with _acquire(tmp_path, Clock()) as mark:  # timestamp 1000: long stale
        _encode(mark)
    header = mf.read_mark_file(str(tmp_path)).header
    assert header.header_offset == 8 and header.pid == os.getpid() and header.local_control_channel == "aeron:ipc"


def test_the_link_file_names_a_mark_file_kept_elsewhere_as_javas_mark_file_dir(tmp_path):
    archive_dir, mark_dir = tmp_path / "archive", tmp_path / "shm"
    archive_dir.mkdir()
    clock = Clock()
    with mf.ArchiveMarkFile.acquire(str(mark_dir), archive_dir=str(archive_dir), epoch_clock=clock) as mark:
        _encode(mark)
        mark.signal_ready(clock.now_ms)
        assert (archive_dir / mf.LINK_FILENAME).read_text() == str(mark_dir.resolve())
        assert mf.read_mark_file(str(archive_dir)).path == str(mark_dir.resolve() / mf.FILENAME)
    with _acquire(archive_dir, clock):  # back in the archive directory: the stale link goes
        assert not (archive_dir / mf.LINK_FILENAME).exists()


# -- liveness ---------------------------------------------------------------------------------------------------------


def _header(version: int = mf.SEMANTIC_VERSION, activity: int = 0, pid: int = 99) -> mf.MarkFileHeader:
    return mf.MarkFileHeader(version, activity, 0, pid, 0, 0, 0, 8192, 1 << 20, 1)


@pytest.mark.parametrize(
    ("header", "mtime", "exited", "live"),
    [
        (_header(activity=100_000 - 9_999), 0, None, True),  # age < timeout: Java's "active mark file detected"
        (_header(activity=100_000 - 10_000), 0, None, False),  # age == timeout: stale
        (_header(activity=-1), 100_000, None, False),  # closed cleanly
        (_header(activity=100_000 - 5), 100_000, True, False),  # one of ours, gone: at once
        (_header(activity=100_000 - 5), 100_000, False, True),  # one of ours, running
        (_header(version=0), 95_000, None, True),  # being created, recently
        (_header(version=0), 80_000, None, False),  # a creation that never finished
        (_header(activity=mf.ACTIVATION_IN_PROGRESS_TIMESTAMP), 99_000, None, True),  # being activated
        (_header(activity=mf.ACTIVATION_IN_PROGRESS_TIMESTAMP), 1_000, None, False),
        (None, 99_000, None, True),  # too short to read: being created
    ],
)
def test_liveness_is_javas_timestamp_rule_with_evidence_where_java_has_none(header, mtime, exited, live):
    assert mf.judge_holder(header, 100_000, 10_000, mtime, exited).live is live


def test_a_live_holder_is_refused_naming_directory_pid_and_activity_and_a_stale_one_taken_over(tmp_path):
    clock = Clock()
    first = _acquire(tmp_path, clock)
    _encode(first)
    first.error_log.record(RuntimeError("before the crash"))
    first.signal_ready(clock.now_ms)
    first._forget_after_fork()  # as if its process were gone: the flock is dropped, nothing more is written
    # Our record of the holder names this process (alive), so only Java's rule decides.
    clock.now_ms += 9_000
    with pytest.raises(mf.MarkFileActiveError) as refused:
        _acquire(tmp_path, clock)
    text = str(refused.value)
    assert str(tmp_path) in text and f"pid {os.getpid()}" in text and "ms ago" in text
    assert "active mark file detected" in text
    clock.now_ms += 1_000
    with _acquire(tmp_path, clock, liveness_timeout_ms=10_000) as second:
        assert mf.read_mark_file(str(tmp_path)).header.activity_timestamp == mf.ACTIVATION_IN_PROGRESS_TIMESTAMP
        assert second.error_log.record(RuntimeError("after"))
    saved = list(tmp_path.glob("archive-*-error.log"))  # Java's saveExistingErrors
    assert len(saved) == 1 and "before the crash" in saved[0].read_text()
    errors = mf.read_mark_file(str(tmp_path)).errors
    assert [e.text.splitlines()[0] for e in errors] == ["RuntimeError: after"]


def test_the_lock_refuses_a_second_holder_at_once_even_before_it_wrote_anything(tmp_path):
    with _acquire(tmp_path, Clock()), pytest.raises(mf.MarkFileActiveError, match="holds the file's lock"):
        _acquire(tmp_path, Clock(), lock_wait_s=0.0)


def test_a_holder_killed_with_9_is_taken_over_at_once_by_its_record(tmp_path):
    """A process of ours that held the file and was killed: on the same host its record proves it gone."""
    code = (
        "import os, signal, sys, time\n"
        "from aeron_archive_spark.archive.storage import mark_file as mf\n"
        "m = mf.ArchiveMarkFile.acquire(sys.argv[1], archive_dir=sys.argv[1])\n"
        "m.signal_ready(time.time_ns() // 1_000_000)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -9, err
    assert mf.read_mark_file(str(tmp_path)).header.pid == proc.pid
    with mf.ArchiveMarkFile.acquire(str(tmp_path), archive_dir=str(tmp_path)) as mark:  # fresh timestamp: no wait
        assert mark.header().pid == os.getpid()


def test_another_major_version_is_refused_in_javas_words(tmp_path):
    path = tmp_path / mf.FILENAME
    data = bytearray(8192 + (1 << 20))
    struct.pack_into("<HHHHi", data, 0, 128, 200, 100, 2, 4 << 16)
    path.write_bytes(bytes(data))
    with pytest.raises(mf.MarkFileError, match=r"major version 4 does not match software: 3"):
        _acquire(tmp_path, Clock())


# -- the distinct error log -------------------------------------------------------------------------------------------


def _raise(message: str) -> BaseException:
    try:
        raise ValueError(message)
    except ValueError as ex:
        return ex


def test_the_same_error_counts_up_and_a_new_one_gets_its_own_record():
    clock = Clock(1000)
    buffer = bytearray(4096)
    errors = DistinctErrorLog(memoryview(buffer), clock)
    for i in range(3):
        clock.now_ms = 1000 + i
        assert errors.record(_raise("same"))  # same type, message and stack (one raise site)
    clock.now_ms = 2000
    assert errors.record(_raise("other"))
    assert errors.record_text("k", "text")
    log = read_error_log(buffer)
    assert [(e.observation_count, e.first_observation_timestamp, e.last_observation_timestamp) for e in log] == [
        (3, 1000, 1002),
        (1, 2000, 2000),
        (1, 2000, 2000),
    ]
    assert log[0].text.startswith("ValueError: same\n\tat ")
    assert "test_mark_file._raise(test_mark_file.py:" in log[0].text
    assert [e.text for e in read_error_log(buffer, since_timestamp=1500)] == [log[1].text, "text"]


def test_records_are_8_aligned_javas_layout_and_a_full_log_refuses_new_errors():
    buffer = bytearray(64)
    errors = DistinctErrorLog(memoryview(buffer), Clock(7))
    assert errors.record_text(1, "abc")  # 24 + 3 = 27 bytes, next at 32
    assert struct.unpack_from("<iiqq", buffer, 0) == (27, 1, 7, 7)
    assert buffer[24:27] == b"abc"
    assert not errors.record_text(2, "x" * 20)  # 32 + 24 + 20 > 64
    assert errors.record_text(1, "ignored")  # a known error still counts
    assert errors.record_text(3, "12345678")  # 32 + 24 + 8 == 64: fits exactly
    assert [e.observation_count for e in read_error_log(buffer)] == [2, 1]


def test_causes_and_non_ascii_text_are_encoded_as_javas_archive_does():
    try:
        try:
            raise OSError("disk é")
        except OSError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as ex:
        text = exception_text(ex)
        key = exception_key(ex)
    lines = text.splitlines()
    assert lines[0] == "RuntimeError: outer" and any(line == "Caused by: OSError: disk é" for line in lines)
    assert key == key and isinstance(hash(key), int)
    buffer = bytearray(1024)
    DistinctErrorLog(memoryview(buffer), Clock()).record_text(key, text)
    assert "disk ?" in read_error_log(buffer)[0].text  # US-ASCII, as Java's archive writes its log


def test_the_printed_log_is_javas_print_error_log():
    assert format_error_log([]) == "\n0 distinct errors observed\n"
    text = format_error_log([ErrorObservation(2, 0, 1000, "E: x\n")])
    lines = text.splitlines()
    assert lines[0] == "" and lines[1].startswith("2 observations from 19") and lines[1].endswith(" for:")
    assert lines[2] == "E: x" and lines[-1] == "1 distinct errors observed."


def test_a_forked_child_does_not_keep_a_dead_parents_directory(tmp_path):
    """The holder forks (a child that lives on) and is killed: the child's inherited descriptor was closed at
    the fork, so the flock went with the holder and its directory is taken over at once."""
    code = (
        "import os, signal, sys, time\n"
        "from aeron_archive_spark.archive.storage import mark_file as mf\n"
        "m = mf.ArchiveMarkFile.acquire(sys.argv[1], archive_dir=sys.argv[1])\n"
        "m.signal_ready(time.time_ns() // 1_000_000)\n"
        "if os.fork() == 0:\n"
        "    m.signal_terminated()  # a no-op in the child: it never writes its parent's file\n"
        "    time.sleep(20)\n"
        "    os._exit(0)\n"
        "print(flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "\n"  # (the child keeps the pipe open)
        assert proc.wait(60) == -9
        assert mf.read_mark_file(str(tmp_path)).header.activity_timestamp > 0  # the child wrote nothing
        with mf.ArchiveMarkFile.acquire(str(tmp_path), archive_dir=str(tmp_path), lock_wait_s=0.0) as mark:
            assert mark.header().pid == os.getpid()
    finally:
        os.killpg(proc.pid, 9)  # the sleeping child
        assert proc.stdout is not None
        proc.stdout.close()
