"""The file side of segment management (Java's detach/delete detached/purge/attach/migrate segments), the catalog's
start-position updates and the deletion session's two modes, over real files in a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.server.delete_segments_session import DeleteSegmentsSession, DeleteSegmentsState
from aeron_archive_spark.archive.storage.catalog import Catalog
from aeron_archive_spark.archive.storage.segments import (
    AttachableSegment,
    detached_segment_files,
    find_attachable_segments,
    lowest_segment_file_position,
    move_segment_files,
    plan_segment_migration,
    segment_file_name,
)
from tests.unit.storage_helpers import INITIAL_TERM_ID, STREAM_ID, frame_bytes, make_descriptor

T = 64 * 1024
S = 2 * T
RID = 3


def test_detached_files_run_from_the_old_start_segment_to_the_one_before_the_new_start() -> None:
    assert detached_segment_files(RID, 0, 3 * S, T, S) == [f"{RID}-0.rec", f"{RID}-{S}.rec", f"{RID}-{2 * S}.rec"]
    # A start that is not segment aligned: segments are aligned to its term base.
    start = 2 * T + 64
    assert detached_segment_files(RID, start, start - 64 + 2 * S, T, S) == [
        f"{RID}-{2 * T}.rec", f"{RID}-{2 * T + S}.rec"]
    assert detached_segment_files(RID, S, S + 96, T, S) == []  # same segment: nothing detached


def test_lowest_segment_file_position_counts_pending_deletions_and_skips_other_names(tmp_path: Path) -> None:
    assert lowest_segment_file_position(tmp_path, RID) is None
    for name in (f"{RID}-{2 * S}.rec", f"{RID}-{S}.rec.del", f"{RID}-{3 * S}.rec", f"{RID}1-0.rec", "3-x.rec"):
        (tmp_path / name).write_bytes(b"")
    assert lowest_segment_file_position(tmp_path, RID) == S


def write_segment(archive_dir: Path, base: int, *, offset: int = 0, term_id: int | None = None,
                  stream_id: int = STREAM_ID, length: int = S) -> None:
    term = INITIAL_TERM_ID + base // T if term_id is None else term_id
    frame = frame_bytes(b"x" * 100, term_offset=offset, term_id=term, stream_id=stream_id)
    with open(archive_dir / segment_file_name(RID, base), "wb") as f:
        f.truncate(length)
        f.seek(offset)
        f.write(frame)


def descriptor(start: int, stop: int = 10 * S) -> RecordingDescriptor:
    return make_descriptor(RID, start_position=start, stop_position=stop, term_length=T, segment_length=S)


def test_attach_walks_back_whole_segments_until_a_file_is_missing(tmp_path: Path) -> None:
    for k in (1, 2, 3):
        write_segment(tmp_path, k * S)
    found = list(find_attachable_segments(tmp_path, descriptor(4 * S)))
    assert found == [AttachableSegment(3 * S, 0), AttachableSegment(2 * S, 0), AttachableSegment(S, 0)]


def test_attach_stops_at_the_recording_first_segment_whose_data_starts_mid_term(tmp_path: Path) -> None:
    write_segment(tmp_path, 2 * S, offset=96)
    write_segment(tmp_path, S)  # before the recording began: never reached
    found = list(find_attachable_segments(tmp_path, descriptor(3 * S)))
    assert found == [AttachableSegment(2 * S, 96)]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"length": S // 2}, f"fileLength={S // 2} not equal to segmentLength={S}"),
    ({"term_id": 99}, f"term id does not match: actual=99 expected={INITIAL_TERM_ID + 4}"),
    ({"stream_id": 5}, f"stream id does not match: actual=5 expected={STREAM_ID}"),
])
def test_attach_refuses_a_file_that_does_not_fit_with_javas_text(tmp_path: Path, kwargs: dict[str, int],
                                                                 message: str) -> None:
    write_segment(tmp_path, 3 * S)
    write_segment(tmp_path, 2 * S, **kwargs)
    segments = find_attachable_segments(tmp_path, descriptor(4 * S))
    assert next(segments) == AttachableSegment(3 * S, 0)  # what comes before the bad file stays attachable
    with pytest.raises(ArchiveError) as err:
        next(segments)
    assert err.value.message == message


def test_attach_refuses_a_first_term_without_any_frame(tmp_path: Path) -> None:
    with open(tmp_path / segment_file_name(RID, S), "wb") as f:
        f.truncate(S)
    with pytest.raises(ArchiveError, match="fragment not found in first term of segment .*3-131072.rec"):
        list(find_attachable_segments(tmp_path, descriptor(2 * S)))


def test_migration_moves_every_segment_but_the_empty_one_at_the_stop(tmp_path: Path) -> None:
    for k in (0, 1, 2):
        (tmp_path / segment_file_name(RID, k * S)).write_bytes(b"seg%d" % k)
    plan = plan_segment_migration(tmp_path, descriptor(0, 2 * S), 9)
    assert plan.moves == ((f"{RID}-0.rec", "9-0.rec"), (f"{RID}-{S}.rec", f"9-{S}.rec"))
    assert plan.empty_following == (f"{RID}-{2 * S}.rec",)
    assert move_segment_files(tmp_path, plan.moves) == 2
    assert sorted(os.listdir(tmp_path)) == sorted([f"{RID}-{2 * S}.rec", "9-0.rec", f"9-{S}.rec"])
    assert (tmp_path / f"9-{S}.rec").read_bytes() == b"seg1"


def test_migration_checks_every_file_before_moving_any(tmp_path: Path) -> None:
    (tmp_path / segment_file_name(RID, 0)).write_bytes(b"")
    with pytest.raises(ArchiveError) as err:
        plan_segment_migration(tmp_path, descriptor(0, S + 64), 9)
    assert err.value.message == f"missing src segment file {tmp_path / f'{RID}-{S}.rec'}"
    (tmp_path / segment_file_name(RID, S)).write_bytes(b"")
    (tmp_path / f"9-{S}.rec").write_bytes(b"")
    with pytest.raises(ArchiveError) as err:
        plan_segment_migration(tmp_path, descriptor(0, S + 64), 9)
    assert err.value.message == f"preexisting dst segment file {tmp_path / f'9-{S}.rec'}"
    assert (tmp_path / segment_file_name(RID, 0)).exists()


def test_a_purge_deletes_at_once_and_knows_its_highest_position(tmp_path: Path) -> None:
    names = [segment_file_name(RID, k * S) for k in range(3)]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    done: list[DeleteSegmentsSession] = []
    session = DeleteSegmentsSession(str(tmp_path), RID, names, lambda: True, done.append, await_replays_stop=False)
    assert session.state is DeleteSegmentsState.DELETE_FILES  # replays never hold a purge of segments back
    assert session.max_delete_position == 2 * S
    while not session.is_done():
        session.do_work(0)
    assert os.listdir(tmp_path) == [] and done == [session]
    truncation = DeleteSegmentsSession(str(tmp_path), RID, [], lambda: True, done.append)
    assert truncation.state is DeleteSegmentsState.AWAIT_REPLAYS_STOP
    assert truncation.max_delete_position == -(1 << 63)


def test_start_position_updates_are_durable_and_checksummed(tmp_path: Path) -> None:
    with Catalog(tmp_path, capacity=4096) as catalog:
        rid = catalog.add_new_recording(start_position=0, start_timestamp=1, initial_term_id=7,
                                        segment_file_length=S, term_buffer_length=T, mtu_length=1408,
                                        session_id=1, stream_id=2, stripped_channel="aeron:ipc",
                                        original_channel="aeron:ipc", source_identity="aeron:ipc")
        catalog.recording_stopped(rid, 5 * S, 2)
        catalog.update_start_position(rid, 3 * S)
    with Catalog(tmp_path) as catalog:
        d = catalog.get(rid)
        assert (d.start_position, d.stop_position) == (3 * S, 5 * S)
        assert catalog.entry_checksum_ok(rid)


def test_a_file_that_cannot_be_deleted_is_reported_and_the_rest_deleted(tmp_path: Path) -> None:
    stuck, gone = segment_file_name(RID, 0), segment_file_name(RID, S)
    (tmp_path / stuck).mkdir()  # os.remove refuses a directory, even for root
    (tmp_path / gone).write_bytes(b"")
    errors: list[str] = []
    done: list[DeleteSegmentsSession] = []
    session = DeleteSegmentsSession(str(tmp_path), RID, [stuck, gone], lambda: False, done.append,
                                    await_replays_stop=False, on_error=errors.append)
    while not session.is_done():
        session.do_work(0)
    assert len(errors) == 1 and errors[0].startswith(f"unable to delete segment file: {tmp_path / stuck}")
    assert not (tmp_path / gone).exists() and done == [session]
