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


@pytest.fixture
def sink_harness(aeron_dir, tmp_path):
    from aeron_archive_spark.archive.client.pool import connection_pool
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    connection_pool().close()
    h.close()


def test_batches_reads_every_sink_log_from_the_archive(sink_harness, aeron_dir, capsys):
    from aeron_archive_spark.connector.sink import faults
    from aeron_archive_spark.connector.sink.committer import commit_batch
    from aeron_archive_spark.connector.sink.errors import InjectedFault
    from aeron_archive_spark.connector.sink.log_identity import SINK_LOG_STREAM_ID
    from system.test_sink_util import SINK_CHANNEL, batch_map, sink_options, stage, value_batch

    h = sink_harness
    archive = ["--aeron-dir", aeron_dir, "--control-channel", h.ctx.local_control_channel,
               "--control-stream-id", str(h.ctx.local_control_stream_id)]
    assert main(["batches", *archive]) == 0
    assert "no aeron-archive sinks in the" in capsys.readouterr().out
    assert main(["batches", *archive, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []

    # A stream sink with three committed batches and a commit of batch 3 that failed after publishing: pending.
    stream = sink_options(h, "hdfs://nn/chk/q1", streamId=5031)
    for b in range(4):
        messages = stage(stream, str(b), [[value_batch([b"a" * 10, b"b" * 20])], [value_batch([b"c" * b])]])
        if b == 3:
            faults.arm({"point": "before-entry", "action": "raise"})
            with pytest.raises(InjectedFault):
                commit_batch(stream, messages, b, str(b), True)
        else:
            commit_batch(stream, messages, b, str(b), True)
    stream_entries = batch_map(stream)
    # Two batch writes to a channel + stream target: batch ids 0 and 1 of that target, one recording.
    batch = sink_options(h, None, streaming=False, streamId=5032)
    for label in ("wA", "wB"):
        commit_batch(batch, stage(batch, label, [[value_batch([b"x", b"yy"])]]), None, label, False)
    batch_entries = batch_map(batch, streaming=False)
    assert [e.batch_id for e in batch_entries] == [0, 1]

    assert main(["batches", *archive, "--checkpoint", "hdfs://nn/chk/q1"]) == 0
    out = capsys.readouterr().out
    target = stream_entries[0].recording_id
    assert "checkpoint hdfs://nn/chk/q1 (sink log recording " in out
    assert f"recording {target} (stream 5031, created by the sink, stream), 3 committed batch(es)" in out
    assert f"pending: batch 3 started at position {stream_entries[-1].stop_position} of recording {target}" in out
    lines = [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert [line[:4] for line in lines] == [[str(e.batch_id), str(e.recording_id), str(e.start_position),
                                             str(e.stop_position)] for e in stream_entries]
    assert [int(line[5]) for line in lines] == [3, 3, 3]  # rows
    assert main(["batches", *archive, "--checkpoint", "hdfs://nn/chk/q1/"]) == 0  # the same sink
    assert capsys.readouterr().out == out

    assert main(["batches", *archive, "--json"]) == 0
    sinks = json.loads(capsys.readouterr().out)
    assert len(sinks) == 2 and len({s["key"] for s in sinks}) == 2
    by_kind = {s["sink"]["kind"]: s for s in sinks}
    assert by_kind["stream"]["sink"]["recordingId"] == target and by_kind["stream"]["pending"]["batchId"] == 3
    assert [b["stopPosition"] for b in by_kind["stream"]["batches"]] == [e.stop_position for e in stream_entries]
    assert by_kind["batch"]["pending"] is None and by_kind["batch"]["sink"]["streamId"] == 5032
    assert [b["batchId"] for b in by_kind["batch"]["batches"]] == [0, 1]
    logs = {s["logRecordingId"] for s in sinks}
    assert all(h.client.list_recording(i).stream_id == SINK_LOG_STREAM_ID for i in logs)
    assert not logs & {target, batch_entries[0].recording_id}

    assert main(["batches", *archive, "--channel", SINK_CHANNEL, "--stream-id", "5032", "--json"]) == 0
    [only] = json.loads(capsys.readouterr().out)
    assert only == by_kind["batch"]
    with pytest.raises(SystemExit, match="no such sink"):
        main(["batches", *archive, "--recording-id", str(target)])  # no batch write ever named it
    with pytest.raises(SystemExit, match="--channel and --stream-id go together"):
        main(["batches", *archive, "--channel", SINK_CHANNEL])
