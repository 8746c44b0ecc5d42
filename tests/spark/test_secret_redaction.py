"""`archiveSecret` never shows: not in explain(), progress reports, errors, nor the connector's logs (issue 10)."""

from __future__ import annotations

import logging

import pytest
from spark.test_source_support import Recorder, source_options
from system.harness import SMALL_TERM, Harness, payloads_of

pytestmark = pytest.mark.spark

SECRET = "s3cr3t-Aeron-7f1c"


@pytest.fixture
def harness(aeron_dir, tmp_path):
    h = Harness(aeron_dir, str(tmp_path / "archive"))
    yield h
    h.close()


def test_the_secret_is_in_no_plan_progress_error_or_log(spark, harness, tmp_path, capsys, caplog):
    recorder = Recorder(harness, f"aeron:ipc?term-length={SMALL_TERM}", 4301)
    recorder.publish(payloads_of([10, 20, 30] * 20, seed=3))
    recorder.stop()
    options = source_options(harness, remote=True, recordingId=recorder.recording_id, archiveSecret=SECRET)
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="aeron_archive_spark"):
        frame = spark.read.format("aeron-archive").options(**options).load()
        frame.explain(True)
        seen.append(frame._jdf.queryExecution().toString())
        assert frame.count() == len(recorder.messages)

        query = (spark.readStream.format("aeron-archive").options(**options).load()
                 .writeStream.format("memory").queryName("redaction_check")
                 .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        seen.extend(str(p) for p in query.recentProgress)
        seen.append(str(query.lastProgress))

        unreachable = {**options, "controlStreamId": "4299", "messageTimeout": "1s"}
        with pytest.raises(Exception) as failure:
            spark.read.format("aeron-archive").options(**unreachable).load().collect()
        seen.append(str(failure.value))
    seen.append(capsys.readouterr().out)
    seen.extend(caplog.messages)
    assert "4299" in str(failure.value), "the error should name the archive it could not reach"
    leaked = [s[:300] for s in seen if SECRET in s]
    assert not leaked, f"the secret shows in: {leaked}"
