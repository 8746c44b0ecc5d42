"""The conductor's side of archive-mark.dat, over a fake Aeron client and fake clocks: the activity timestamp
written once a second of its duty cycles (Java's MARK_FILE_UPDATE_INTERVAL_MS), and every error it counts recorded
in the mark file's distinct error log (same error: one entry counted up)."""

from __future__ import annotations

from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.server.conductor import ArchiveConductor
from aeron_archive_spark.archive.server.context import ArchiveContext
from aeron_archive_spark.archive.storage.mark_file import ArchiveMarkFile, read_mark_file
from tests.unit.server.fakes import MS, SECOND, FakeClock
from tests.unit.server.test_conductor_hostile_input import FakeAeron


def test_the_activity_timestamp_moves_once_a_second_and_errors_are_logged_distinctly(tmp_path):
    nanos, epoch = FakeClock(), FakeClock(now=1_700_000_000_000)
    ctx = ArchiveContext(archive_dir=str(tmp_path), control_channel=None, nano_clock=nanos, epoch_clock=epoch)
    mark = ArchiveMarkFile.acquire(str(tmp_path), archive_dir=str(tmp_path), epoch_clock=epoch)
    try:
        mark.signal_ready(epoch.now)
        conductor = ArchiveConductor(ctx, FakeAeron(), None, 77, mark)  # type: ignore[arg-type]
        written = []
        for _ in range(25):  # 2.4 s of duty cycles, 100 ms apart
            conductor.do_work(nanos.now)
            written.append(read_mark_file(str(tmp_path)).header.activity_timestamp)
            nanos.advance(100 * MS)
            epoch.advance(100)
        assert sorted(set(written)) == [1_700_000_000_000, 1_700_000_001_000, 1_700_000_002_000]
        nanos.advance(SECOND)
        for _ in range(2):
            conductor.on_protocol_error("unexpected message X on the control stream")
        conductor.on_protocol_error("another")  # the same kind of fault: counted in the first one's entry
        for n in range(3):  # texts that vary, of one kind: one entry, so a hostile client cannot fill the log
            conductor.on_protocol_error(f"no control session {n}", "unknown session")
        conductor._on_agent_error(ArchiveError("segment file gone"))
        conductor._on_agent_error(ArchiveError("segment file gone"))
        errors = read_mark_file(str(tmp_path)).errors
        assert [(e.observation_count, e.text) for e in errors] == [
            (3, f"{ArchiveError.__module__}.ArchiveError: GENERIC: unexpected message X on the control stream\n"),
            (3, f"{ArchiveError.__module__}.ArchiveError: GENERIC: no control session 0\n"),
            (2, f"{ArchiveError.__module__}.ArchiveError: GENERIC: segment file gone\n"),
        ]
        assert conductor.counters.errors.get() == 8
    finally:
        mark.close()
