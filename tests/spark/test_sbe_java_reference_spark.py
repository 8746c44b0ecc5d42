"""The messages the SBE project's generated Java codecs encoded (tests/unit/sbe_java_fixtures) end to end through
Spark: recorded in the archive, read with `sbeSchema` (without `sbeMessage`, each row by its template id) on both
read paths and compared field by field with the Java decoders' values, then each message's rows written back with
the sink and the new recording compared byte for byte with the Java bytes."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from spark.test_sbe_groups_spark import harness, record  # noqa: F401  (harness: a fixture)
from spark.test_source_support import source_options
from system.harness import Harness
from system.test_sink_util import replay_recording, sink_option_map
from unit.test_sbe_java_reference import SAMPLES, SCHEMA_OF, expected_row, fixtures, payloads

from aeron_archive_spark.archive.codecs.codec import SbeCodec
from aeron_archive_spark.archive.tables.sbe.columns import message_columns

pytestmark = pytest.mark.spark

STREAM_IDS = {"car": 4471, "FixBinary": 4481, "ilinkbinary": 4581}
# The Car schema as the SBE samples publish it (xi:include of common-types.xml), on the driver and the executors.
SCHEMA = SCHEMA_OF | {"car": str(SAMPLES / "example-schema.xml")}


# Writing back costs a Spark job per message type: the default run writes back every 4th type of each schema (the
# codec-level test in tests/unit encodes every message of every schema back byte for byte); `-m slow` writes all.
@pytest.mark.parametrize("fixture,stride", [
    *((name, 4) for name in STREAM_IDS),
    *(pytest.param(name, 1, marks=pytest.mark.slow, id=f"{name}-every-message") for name in STREAM_IDS),
])
def test_java_encoded_messages_through_spark_and_back(spark, harness, fixture, stride):  # noqa: F811
    schema = SCHEMA[fixture]
    codec = SbeCodec.from_xml(schema)
    records = fixtures(fixture)
    data = payloads(records)
    stream_id = STREAM_IDS[fixture]
    recorder = record(harness, stream_id, data)
    for remote in (False, True):
        options = source_options(harness, remote=remote, recordingId=recorder.recording_id, sbeSchema=schema)
        df = spark.read.format("aeron-archive").options(**options).load()
        names = set(df.columns)
        rows = df.orderBy("position").collect()
        assert [bytes(row.value) for row in rows] == data
        for i, (row, r) in enumerate(zip(rows, records, strict=True)):
            got = row.asDict(recursive=True)
            name = r["message"]
            want = expected_row(message_columns(codec, name), r["values"])
            assert {k: got[f"{name}_{k}" if f"{name}_{k}" in names else k] for k in want} == want, f"#{i} {name}"
            assert got.get("sbeMessage", name) == name
    # each message's rows of that read, its columns under their own names, written back by the sink
    for offset, name in enumerate(dict.fromkeys(r["message"] for r in records)):
        own = [c.name for c in message_columns(codec, name)]
        if offset % stride and own:  # a message without fields takes the sink's other path: always written
            continue
        frame = df.orderBy("position")
        if "sbeMessage" in names:
            frame = frame.where(f"sbeMessage = '{name}'")
        frame = frame.select(*[F.col(f"{name}_{c}" if f"{name}_{c}" in names else c).alias(c) for c in own])
        if not own:
            # A message without fields (MDP 3.0's AdminHeartbeat12): a DataFrame with no column at all reaches the
            # sink with no rows, so keep the source's reservedValue (the sink takes it as each message's).
            frame = df.where(f"sbeMessage = '{name}'").orderBy("position").select("reservedValue")
        written = write(frame.coalesce(1), harness, schema, name, stream_id + 1 + offset)
        expected = [p for p, r in zip(data, records, strict=True) if r["message"] == name]
        assert [p for p, _ in replay_recording(harness.client, written)] == expected, name


def write(df, h: Harness, schema: str, message: str, stream_id: int) -> int:
    """Write `df` with the sink to a new recording of `stream_id`; returns its id."""
    options = sink_option_map(h, None, sbeSchema=schema, sbeMessage=message, streamId=stream_id)
    df.write.format("aeron-archive").mode("append").options(**options).save()
    [written] = [d.recording_id for d in h.client.list_recordings_for_uri(0, 100, "", stream_id)]
    return written
