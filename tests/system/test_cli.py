"""The `aeron-archive` command line: offline tools on a real archive directory, live stats and tail."""

from __future__ import annotations

import json
import os

import pytest

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.constants import RecordingSignal
from system.harness import SMALL_TERM, Harness, collect, payloads_of
from system.test_record_replay import record


@pytest.fixture
def recorded(aeron_dir, tmp_path):
    # Stream 5021 is this module's own: the shared test driver may still hold publications of other modules' tests
    # (after the sink commit tests two are left open on stream 5001), which a recording subscription would record.
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    channel = f"aeron:ipc?term-length={SMALL_TERM}"
    payloads = [f"message {i}".encode() for i in range(50)] + payloads_of([3000] * 100)
    recording_id, spans, pub, _ = record(h, channel, 5021, payloads)
    yield h, recording_id, spans, pub, payloads, channel
    pub.close()
    h.close()


def test_list_describe_and_verify_offline(recorded, capsys):
    h, recording_id, spans, pub, payloads, channel = recorded
    h.client.stop_recording(channel, 5021)
    h.await_signal(RecordingSignal.STOP, recording_id)
    archive_dir = h.ctx.archive_dir
    h.close()  # offline: no server running
    assert main(["list", "--dir", archive_dir, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [d["recordingId"] for d in listed] == [recording_id]
    assert listed[0]["stopPosition"] == spans[-1][1] and listed[0]["streamId"] == 5021
    assert set(listed[0]) >= {"startPosition", "initialTermId", "segmentFileLength", "termBufferLength",
                              "mtuLength", "sessionId", "strippedChannel", "originalChannel", "sourceIdentity"}
    assert main(["list", "--dir", archive_dir]) == 0
    assert channel in capsys.readouterr().out
    assert main(["describe", "--dir", archive_dir, str(recording_id)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in described["segmentFiles"]][0] == f"{recording_id}-0.rec"
    assert main(["verify", "--dir", archive_dir]) == 0
    assert "1 ok" in capsys.readouterr().out
    # Corrupt the header of the 120th message: verify reports its position, --fix truncates there.
    bad = spans[120][0]
    segment = os.path.join(archive_dir, f"{recording_id}-{bad - bad % (128 * 1024)}.rec")
    with open(segment, "r+b") as f:
        f.seek(bad % (128 * 1024) + 8)
        f.write(b"\xff\xff\xff\x7f")
    assert main(["verify", "--dir", archive_dir]) == 1
    out = capsys.readouterr().out
    assert str(bad) in out
    assert main(["verify", "--dir", archive_dir, "--fix"]) == 0
    capsys.readouterr()
    assert main(["list", "--dir", archive_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["stopPosition"] == bad


def test_describe_unknown_recording_is_an_error(recorded):
    h, *_ = recorded
    with pytest.raises(SystemExit) as err:
        main(["describe", "--dir", h.ctx.archive_dir, "999"])
    assert "unknown recording id: 999" in str(err.value)


def test_stats_and_tail(recorded, capsys, aeron_dir):
    h, recording_id, spans, pub, payloads, channel = recorded
    assert main(["stats", "--aeron-dir", aeron_dir, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    labels = [r["label"] for r in rows]
    assert any(label.startswith(f"rec-pos: {recording_id} ") for label in labels)
    assert any(label.startswith("archive-recorder total write bytes") for label in labels)
    assert main(["tail", str(recording_id), "--aeron-dir", aeron_dir, "--control-stream-id",
                 str(h.ctx.local_control_stream_id), "--from-start", "--format", "text", "-n", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 50
    assert lines[7].split()[0] == str(spans[7][0]) and lines[7].endswith("message 7")


def test_export_to_parquet(recorded, tmp_path, capsys):
    import pyarrow.parquet as pq
    h, recording_id, spans, pub, payloads, channel = recorded
    h.client.stop_recording(channel, 5021)
    h.await_signal(RecordingSignal.STOP, recording_id)
    out = str(tmp_path / "export.parquet")
    assert main(["export", str(recording_id), "--dir", h.ctx.archive_dir, "--to", out]) == 0
    assert f"exported {len(payloads)} messages" in capsys.readouterr().out
    table = pq.read_table(out)
    assert table.column("value").to_pylist() == payloads
    # A message starts where its first frame is: after a term-end pad, not where the previous message ended.
    replay = h.client.replay(recording_id, "aeron:ipc", 5002, position=0, length=-2)
    starts = [header.start_position for _, _, header in collect(replay, len(payloads))]
    replay.close()
    assert table.column("position").to_pylist() == starts
    assert set(table.column("recordingId").to_pylist()) == {recording_id}
    assert main(["export", "999", "--dir", h.ctx.archive_dir, "--to", out]) == 2
    assert "999" in capsys.readouterr().err
