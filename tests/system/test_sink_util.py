"""Helpers shared by the sink's system and Spark tests (no tests here): options, staging, replaying back."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from system.harness import Harness

from aeron_archive_spark.archive import AeronArchive
from aeron_archive_spark.connector.sink.batch_map import BatchEntry
from aeron_archive_spark.connector.sink.columns import InputLayout
from aeron_archive_spark.connector.sink.options import SinkOptions, parse_sink_options
from aeron_archive_spark.connector.sink.log_store import SinkView, read_sink
from aeron_archive_spark.connector.sink.staging import StagedPartition, stage_partition

SINK_CHANNEL = "aeron:ipc?term-length=65536"
LAYOUT = InputLayout(0, 1, ("value", "reservedValue"))


def sink_option_map(harness: Harness, checkpoint: str | None, **extra: Any) -> dict[str, str]:
    """Options reaching the test archive over its local IPC control channel; `checkpoint` names a stream's sink."""
    options = {
        "aeronDir": harness.aeron_dir,
        "controlChannel": harness.ctx.local_control_channel,
        "controlStreamId": str(harness.ctx.local_control_stream_id),
        "controlResponseChannel": "aeron:ipc",
        "publishTimeout": "10s",
    }
    if checkpoint is not None:
        options["checkpointLocation"] = checkpoint
    if "recordingId" not in extra:
        options["channel"] = SINK_CHANNEL
        options["streamId"] = "5001"
    options.update({k: str(v) for k, v in extra.items()})
    return options


def sink_options(harness: Harness, checkpoint: str | None, streaming: bool = True, **extra: Any) -> SinkOptions:
    return parse_sink_options(sink_option_map(harness, checkpoint, **extra), streaming)


def sink_view(options: SinkOptions, streaming: bool = True) -> SinkView:
    """The sink's state as its log in the archive holds it (target, pending commit, batch map)."""
    if streaming:
        return read_sink(options.connection, checkpoint_location=options.checkpoint_location)
    return read_sink(options.connection, recording_id=options.recording_id, channel=options.channel,
                     stream_id=options.stream_id)


def batch_map(options: SinkOptions, streaming: bool = True) -> list[BatchEntry]:
    return sink_view(options, streaming).entries or []


def value_batch(values: Sequence[bytes], reserved: Sequence[int] | None = None) -> pa.RecordBatch:
    reserved = list(range(len(values))) if reserved is None else list(reserved)
    return pa.record_batch([pa.array(list(values), pa.binary()), pa.array(reserved, pa.int64())],
                           names=["value", "reservedValue"])


def stage(options: SinkOptions, label: str, partitions: Sequence[Iterable[pa.RecordBatch]],
          attempt: int = 0) -> list[StagedPartition]:
    """Stage each partition's batches as an executor task would."""
    return [stage_partition(iter(batches), LAYOUT, label, p, attempt) for p, batches in enumerate(partitions)]


def replay_range(client: AeronArchive, recording_id: int, start: int, stop: int, stream_id: int = 9301,
                 timeout: float = 30.0) -> list[tuple[bytes, int]]:
    """(payload, reservedValue) of every message in [start, stop) of a recording, through a real replay."""
    if stop <= start:
        return []
    subscription = client.replay(recording_id, "aeron:ipc", stream_id, position=start, length=stop - start)
    got: list[tuple[bytes, int]] = []
    reached = start

    def handler(data: memoryview, header: Any) -> None:
        nonlocal reached
        got.append((bytes(data), header.reserved_value))
        reached = header.position

    deadline = time.monotonic() + timeout
    try:
        while reached < stop:
            if subscription.poll(handler, 256) == 0:
                if time.monotonic() > deadline:
                    raise AssertionError(f"replay of recording {recording_id} reached {reached} of {stop}")
                time.sleep(0.0005)
    finally:
        subscription.close()
    return got


def replay_recording(client: AeronArchive, recording_id: int) -> list[tuple[bytes, int]]:
    descriptor = client.list_recording(recording_id)
    assert descriptor is not None and descriptor.stop_position != -1, f"recording {recording_id} not stopped"
    return replay_range(client, recording_id, descriptor.start_position, descriptor.stop_position)

