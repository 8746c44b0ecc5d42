"""DeleteSegmentsSession: AWAIT_REPLAYS_STOP → DELETE_FILES → DONE over real segment files in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from aeron_archive_spark.archive.server.delete_segments_session import DeleteSegmentsSession, DeleteSegmentsState
from aeron_archive_spark.archive.storage.segments import segment_file_name

RECORDING_ID = 4
State = DeleteSegmentsState


class Rig:
    def __init__(self, archive_dir: Path, names: list[str], replays_active: bool = False) -> None:
        self.archive_dir = archive_dir
        self.replays_active = replays_active
        self.done: list[DeleteSegmentsSession] = []
        self.session = DeleteSegmentsSession(str(archive_dir), RECORDING_ID, names, lambda: self.replays_active,
                                             self.done.append)

    @property
    def state(self) -> DeleteSegmentsState:
        return self.session.state

    def work(self) -> int:
        return self.session.do_work(0)


def make_segments(archive_dir: Path, recording_id: int, count: int, length: int = 4096) -> list[str]:
    names = [segment_file_name(recording_id, i * length) for i in range(count)]
    for name in names:
        (archive_dir / name).write_bytes(b"\1" * 64)
    return names


def test_waits_while_replays_of_the_recording_are_active(tmp_path: Path) -> None:
    names = make_segments(tmp_path, RECORDING_ID, 2)
    rig = Rig(tmp_path, names, replays_active=True)
    assert rig.work() == 0
    assert rig.work() == 0
    assert rig.state is State.AWAIT_REPLAYS_STOP
    assert all((tmp_path / n).exists() for n in names)
    rig.replays_active = False
    assert rig.work() == 1
    assert rig.state is State.DELETE_FILES
    assert all((tmp_path / n).exists() for n in names)


def test_deletes_one_file_per_duty_cycle_then_reports_done_once(tmp_path: Path) -> None:
    names = make_segments(tmp_path, RECORDING_ID, 3)
    others = make_segments(tmp_path, RECORDING_ID + 1, 2)
    rig = Rig(tmp_path, names)
    rig.work()
    for i, name in enumerate(names):
        assert rig.work() == 1
        assert not (tmp_path / name).exists()
        assert all((tmp_path / n).exists() for n in names[i + 1:])
        assert rig.state is State.DELETE_FILES
    assert rig.done == []
    assert rig.work() == 1
    assert rig.state is State.DONE
    assert rig.session.is_done()
    assert rig.done == [rig.session]
    assert rig.work() == 0
    assert rig.done == [rig.session]
    assert all((tmp_path / n).exists() for n in others)
    assert rig.session.errors == []


def test_files_already_gone_or_renamed_for_deletion_are_handled(tmp_path: Path) -> None:
    names = make_segments(tmp_path, RECORDING_ID, 3)
    (tmp_path / names[0]).unlink()
    (tmp_path / names[1]).rename(tmp_path / (names[1] + ".del"))
    rig = Rig(tmp_path, names)
    while not rig.session.is_done():
        rig.work()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert rig.session.errors == []
    assert len(rig.done) == 1


def test_nothing_to_delete_finishes_as_soon_as_replays_stop(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [])
    rig.work()
    rig.work()
    assert rig.state is State.DONE
    assert len(rig.done) == 1


def test_abort_does_not_abandon_a_deletion(tmp_path: Path) -> None:
    names = make_segments(tmp_path, RECORDING_ID, 2)
    rig = Rig(tmp_path, names)
    rig.session.abort("archive closing")
    while not rig.session.is_done():
        rig.work()
    assert not any((tmp_path / n).exists() for n in names)
    assert len(rig.done) == 1


def test_close_ends_the_session(tmp_path: Path) -> None:
    rig = Rig(tmp_path, make_segments(tmp_path, RECORDING_ID, 1))
    rig.session.close()
    assert rig.session.is_done()


def test_a_file_that_cannot_be_removed_is_reported_and_the_others_are_still_deleted(tmp_path: Path) -> None:
    names = make_segments(tmp_path, RECORDING_ID, 3)
    stuck = tmp_path / names[1]
    stuck.unlink()
    stuck.mkdir()  # os.remove() of a directory fails: the storage layer raises ArchiveError for it
    (stuck / "keep").write_bytes(b"x")
    rig = Rig(tmp_path, names)
    while rig.state is not State.DONE:
        rig.work()
    assert not (tmp_path / names[0]).exists() and not (tmp_path / names[2]).exists()
    assert len(rig.session.errors) == 1 and names[1] in rig.session.errors[0]
    assert rig.done == [rig.session]
