"""Option parsing: every mistake is reported up front, naming the option (and the value)."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.tables.option_table import (
    Mode,
    OptionError,
    OptionSpec,
    OptionTable,
    parse_options,
    parse_string,
)
from aeron_archive_spark.archive.tables.options import RECORDING_OPTIONS, SourceOptions
from aeron_archive_spark.archive.tables.ranges import RunningArchive, SegmentFiles
from aeron_archive_spark.connector.options import (
    EARLIEST,
    LATEST,
    OPTIONS,
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    options_table,
)
from aeron_archive_spark.connector.source.options import ReadOptions

BASE = {"archivedir": "/tmp/a", "recordingid": "3"}  # Spark lowercases keys


def parse(streaming: bool | None = True, **extra: str) -> ReadOptions:
    return ReadOptions.parse({**BASE, **{k.lower(): v for k, v in extra.items()}}, streaming)


def test_defaults_and_types():
    o = parse()
    assert o.recordings.location == SegmentFiles("/tmp/a")
    assert o.recordings.selection.recording_ids == (3,)
    assert o.starting.kind == "earliest" and o.ending.kind == "latest"
    assert o.max_bytes_per_partition == 64 << 20 and o.fail_on_data_loss is True
    assert o.max_bytes_per_trigger is None and o.min_bytes_per_trigger is None and o.max_trigger_delay_ms == 900_000
    o = parse(maxBytesPerTrigger="16m", minBytesPerTrigger="1024", maxTriggerDelay="30s", failOnDataLoss="FALSE",
              maxBytesPerPartition="1g")
    assert (o.max_bytes_per_trigger, o.min_bytes_per_trigger, o.max_trigger_delay_ms) == (16 << 20, 1024, 30_000)
    assert o.fail_on_data_loss is False and o.max_bytes_per_partition == 1 << 30


def test_running_archive_location_defaults():
    o = SourceOptions.parse({"recordingids": "1, 2,7", "controlstreamid": "11"})
    assert isinstance(o.location, RunningArchive) and o.selection.recording_ids == (1, 2, 7)
    c = o.location.connection
    assert isinstance(c, ConnectionOptions)
    assert (c.control_channel, c.control_stream_id, c.replay_stream_id) == (
        "aeron:udp?endpoint=localhost:8010", 11, 0x5EE7)
    assert c.replay_channel == "aeron:udp?endpoint=localhost:0|mtu=8192"


def connection_of(raw: dict[str, str]) -> ConnectionOptions:
    location = SourceOptions.parse(raw).location
    assert isinstance(location, RunningArchive)
    return location.connection


def test_an_archive_reached_over_ipc_replays_over_ipc_unless_told_otherwise():
    """IPC reaches only an archive on this process's media driver, so its replays can come over IPC too."""
    c = connection_of({"recordingid": "1", "controlchannel": "aeron:ipc"})
    assert c.replay_channel == "aeron:ipc"
    c = connection_of({"recordingid": "1", "controlchannel": "aeron:ipc?term-length=64k"})
    assert c.replay_channel == "aeron:ipc"
    c = connection_of({"recordingid": "1", "controlchannel": "aeron:ipc", "replaychannel": "aeron:udp?endpoint=localhost:0"})
    assert c.replay_channel == "aeron:udp?endpoint=localhost:0|mtu=8192"
    c = connection_of({"recordingid": "1", "controlchannel": "aeron:udp?endpoint=archive:8010"})
    assert c.replay_channel == "aeron:udp?endpoint=localhost:0|mtu=8192"


def test_replays_over_udp_ask_for_the_replay_mtu_unless_told_otherwise():
    udp = {"recordingid": "1", "controlchannel": "aeron:udp?endpoint=archive:8010"}
    assert connection_of({**udp, "replayMtu": "16384"}).replay_channel == "aeron:udp?endpoint=localhost:0|mtu=16384"
    assert connection_of({**udp, "replayMtu": "Recording"}).replay_channel == "aeron:udp?endpoint=localhost:0"
    own = {**udp, "replayChannel": "aeron:udp?endpoint=0.0.0.0:0|mtu=4096"}
    assert connection_of({**own, "replayMtu": "16384"}).replay_channel == "aeron:udp?endpoint=0.0.0.0:0|mtu=4096"
    assert connection_of({"recordingid": "1", "controlchannel": "aeron:ipc", "replayMtu": "16384"}).replay_channel == (
        "aeron:ipc")
    for bad in ("1000", "65536", "32", "big"):
        with pytest.raises(OptionError, match="replayMtu"):
            connection_of({**udp, "replayMtu": bad})
    replicas = SourceOptions.parse({"recordingid": "1", "controlChannels": "aeron:udp?endpoint=a:8010;aeron:ipc",
                                    "replayMtu": "16384"}).location
    assert [a.connection.replay_channel for a in replicas.archives] == [
        "aeron:udp?endpoint=localhost:0|mtu=16384", "aeron:ipc"]


def test_position_specs():
    o = parse(startingPosition='{"3": 4096}')
    assert o.starting.for_recording(3) == 4096 and o.starting.for_recording(9) == EARLIEST
    o = parse(False, startingPosition="latest", endingPosition='{"3": -1}')
    assert o.starting.for_recording(3) == LATEST and o.ending.for_recording(3) == LATEST
    o = ReadOptions.parse({"channel": "aeron:ipc", "streamid": "5", "startingposition": '{"8": 64}'}, True)
    assert o.recordings.selection.channel == "aeron:ipc" and o.starting.for_recording(8) == 64


@pytest.mark.parametrize(("options", "message"), [
    ({"bogus": "1"}, "unknown option 'bogus'"),
    ({"recordingId": "x"}, "option recordingId: expected an integer, got 'x'"),
    ({"recordingId": "-1"}, "option recordingId: expected an integer >= 0, got '-1'"),
    ({"maxBytesPerTrigger": "lots"}, "option maxBytesPerTrigger: expected a byte size"),
    ({"maxBytesPerTrigger": "0"}, "option maxBytesPerTrigger: expected a positive byte size"),
    ({"maxBytesPerPartition": "-5"}, "option maxBytesPerPartition"),
    ({"maxTriggerDelay": "soon", "minBytesPerTrigger": "1"}, "option maxTriggerDelay: expected a duration"),
    ({"maxTriggerDelay": "1m"}, "option maxTriggerDelay only applies together with minBytesPerTrigger"),
    ({"minBytesPerTrigger": "2m", "maxBytesPerTrigger": "1m"}, "option minBytesPerTrigger"),
    ({"failOnDataLoss": "sometimes"}, "option failOnDataLoss: expected true or false, got 'sometimes'"),
    ({"startingPosition": "first"}, "option startingPosition: expected earliest or latest or JSON"),
    ({"startingPosition": "{\"3\": 33}"}, "position 33 of recording 3 is not a frame boundary"),
    ({"startingPosition": "{\"3\": \"a\"}"}, "option startingPosition: position of recording 3 is not an integer"),
    ({"startingPosition": "{\"x\": 0}"}, "option startingPosition: key 'x' is not a recording id"),
    ({"startingPosition": "{\"4\": 0}"}, "option startingPosition names recording 4, which is not among"),
    ({"startingPosition": "{\"3\": -7}"}, "option startingPosition: position of recording 3 must be >= 0"),
    ({"endingPosition": "latest"}, "option endingPosition applies to batch reads"),
    ({"controlChannel": "aeron:ipc"}, "options archiveDir and controlChannel name two locations"),
    ({"recordingIds": "1,2"}, "give exactly one of the options recordingId, recordingIds, or channel"),
    ({"streamId": "4"}, "option streamId only applies together with channel"),
    ({"sbeMessage": "Trade"}, "option sbeMessage needs sbeSchema"),
    ({"sbeSchema": "/no/such/schema.xml"}, "option sbeSchema: no such file"),
    ({"sbe.onError": "ignore"}, "option sbe.onError: expected fail or null, got 'ignore'"),
    ({"controlStreamId": "99999999999"}, "option controlStreamId: expected an integer <= 2147483647"),
])
def test_each_mistake_names_the_option(options, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace("{", r"\{").replace("[", r"\[")
                       .replace("?", r"\?")):
        parse(True, **options)


def test_batch_only_and_stream_only_options_are_rejected_in_the_other_mode():
    with pytest.raises(OptionError, match="option maxBytesPerTrigger applies to streaming reads"):
        parse(False, maxBytesPerTrigger="1m")
    parse(False, endingPosition="latest")
    parse(None, maxBytesPerTrigger="1m")  # schema(): either mode


def test_channel_needs_a_stream_id_and_no_selection_is_an_error():
    with pytest.raises(OptionError, match="option channel needs streamId"):
        SourceOptions.parse({"archivedir": "/a", "channel": "aeron:ipc"})
    with pytest.raises(OptionError, match="got none"):
        ReadOptions.parse({"archivedir": "/a"}, True)


def test_spark_path_key_is_ignored_and_a_write_option_on_a_read_is_named_as_such():
    parse(path="/somewhere")
    with pytest.raises(OptionError, match="option publishTimeout applies to writes only"):
        parse(publishTimeout="5s")
    # Without the sink's rows (the Spark-free tools), the same option is simply unknown.
    with pytest.raises(OptionError, match="unknown option 'publishtimeout'"):
        SourceOptions.parse({**BASE, "publishtimeout": "5s"})
    names = [row[0] for row in options_table(Mode.READ)]
    assert "maxBytesPerTrigger" in names and "startingPosition" in names and "publishTimeout" not in names
    # The sink's file-based state options are gone from the table; given to a read (in any case) they are named
    # as removed, with what replaced them, as they are to the sink (tests/unit/test_sink_options.py).
    assert not {"sinkStateDir", "stagingLocation"} & {row[0] for row in options_table(Mode.ANY)}
    with pytest.raises(OptionError, match="option sinkStateDir was removed: the sink keeps"):
        parse(sinkStateDir="/s")
    with pytest.raises(OptionError, match="option stagingLocation was removed"):
        ReadOptions.parse({"channel": "aeron:ipc", "streamid": "1", "STAGINGLOCATION": "/x"}, False)
    # The Spark-free tools' table never had them: unknown there.
    with pytest.raises(OptionError, match="unknown option 'sinkstatedir'"):
        SourceOptions.parse({**BASE, "sinkstatedir": "/s"})


def test_removed_options_survive_extension_and_cannot_be_redefined():
    extended = OPTIONS + [OptionSpec("testOnlyOption", parse_string, "x", Mode.WRITE, "for this test")]
    assert extended.removed("SINKSTATEDIR") is not None and OPTIONS.removed("recordingId") is None
    with pytest.raises(ValueError, match="both defined and removed"):
        OPTIONS.with_removed({"RecordingId": "gone"})


def test_archive_secret_with_archive_dir_is_refused_without_showing_the_secret():
    with pytest.raises(OptionError, match="archiveSecret has no use with archiveDir") as raised:
        parse(archiveSecret="hunter2-very-secret")
    assert "hunter2" not in str(raised.value)


def test_tables_are_immutable_and_extended_only_into_new_tables():
    before = len(OPTIONS)
    extended = OPTIONS + [OptionSpec("testOnlyOption", parse_string, "x", Mode.WRITE, "for this test")]
    assert len(OPTIONS) == before and "testOnlyOption" not in OPTIONS and "testonlyoption" in extended
    parsed = parse_options({"testonlyoption": "y", "recordingid": "1"}, Mode.STREAM_WRITE, extended)
    assert parsed["testOnlyOption"] == "y" and parsed.is_set("recordingId")
    with pytest.raises(TypeError):
        OPTIONS._rows["x"] = OPTIONS["recordingId"]  # type: ignore[index]
    with pytest.raises(ValueError, match="option RecordingID is defined twice \\(already as recordingId\\)"):
        OptionTable([*RECORDING_OPTIONS, OptionSpec("RecordingID", parse_string, None, Mode.ANY, "dup")])
    # The connector's table is exactly the engine's read rows, the Spark source's and the sink's, each once.
    assert [s.name for s in OPTIONS] == [s.name for table in (RECORDING_OPTIONS, SOURCE_OPTIONS, SINK_OPTIONS)
                                         for s in table]


def test_the_engine_table_holds_only_what_export_and_the_engine_read_and_spark_s_options_are_the_connector_s():
    """Positions, admission control, partitions and data loss are Spark's: the Spark-free tools do not know them,
    the data source accepts them (and suggests them for a typo)."""
    spark_only = {"startingPosition", "endingPosition", "maxBytesPerTrigger", "minBytesPerTrigger",
                  "maxTriggerDelay", "maxBytesPerPartition", "openCostInBytes", "failOnDataLoss",
                  "startingTimestamp", "startingPositionByTimestamp", "startingPositionByTimestampStrategy",
                  "endingTimestamp", "endingPositionByTimestamp"}
    assert {s.name for s in SOURCE_OPTIONS} == spark_only
    assert not spark_only & {s.name for s in RECORDING_OPTIONS}
    with pytest.raises(OptionError, match="unknown option 'maxbytespertrigger'"):
        SourceOptions.parse({**BASE, "maxbytespertrigger": "1m"})
    with pytest.raises(OptionError, match="did you mean maxBytesPerTrigger\\?.*known options: .*failOnDataLoss"):
        parse(True, maxBytesPerTriger="1m")


def test_times_in_ms_or_iso_8601_with_a_zone_and_kafka_s_precedence():
    o = parse(False, startingTimestamp="1764322200000", endingTimestamp="2025-11-28T09:40:00+01:00")
    assert o.starting_time.for_recording(3) == 1764322200000 and o.starting_time.for_recording(9) == 1764322200000
    assert o.ending_time.for_recording(3) == 1764319200000
    assert o.starting_time_strategy == "error"
    assert parse(startingTimestamp="2025-11-28T09:30:00Z").starting_time.every_ms == 1764322200000
    # startingTimestamp wins over the JSON one, as Kafka's startingTimestamp over startingOffsetsByTimestamp
    both = parse(startingTimestamp="5", startingPositionByTimestamp='{"3": 7}')
    assert both.starting_time.for_recording(3) == 5
    by_id = ReadOptions.parse({"archivedir": "/tmp/a", "recordingids": "3,4", "startingpositionbytimestamp":
                               '{"3": 7, "4": "2025-11-28T09:30:00Z"}', "startingpositionbytimestampstrategy": "LATEST"},
                              False)
    assert by_id.starting_time.for_recording(4) == 1764322200000 and by_id.starting_time.for_recording(5) is None
    assert by_id.starting_time_strategy == "latest"
    assert parse().starting_time is None and parse(False).ending_time is None


@pytest.mark.parametrize(("extra", "message"), [
    ({"startingTimestamp": "2025-11-28T09:30:00"}, "startingTimestamp: .* has no time zone"),
    ({"startingTimestamp": "yesterday"}, "startingTimestamp: 'yesterday' is not a time"),
    ({"startingTimestamp": "-5"}, "startingTimestamp: '-5' is not a time"),
    ({"startingPositionByTimestamp": '{"3": -1}'}, r"startingPositionByTimestamp \(recording 3\): a time must be >= 0"),
    ({"startingPositionByTimestamp": '{"x": 1}'}, "key 'x' is not a recording id"),
    ({"startingPositionByTimestamp": '{"8": 1}'}, "names recording 8, which is not among the selected"),
    ({"startingPositionByTimestamp": '[1]'}, "startingPositionByTimestamp"),
    ({"startingPositionByTimestampStrategy": "earliest"}, "startingPositionByTimestampStrategy"),
    ({"startingPositionByTimestamp": '{"3": true}'}, "is not a time"),
])
def test_bad_times_are_refused_naming_the_option(extra, message):
    with pytest.raises(OptionError, match=message):
        parse(False, **extra)


def test_ending_times_are_for_batch_reads_only():
    with pytest.raises(OptionError, match="endingTimestamp"):
        parse(True, endingTimestamp="5")


def test_iso_times_are_exact_to_the_millisecond():
    # a float of seconds times 1000 once gave ...549 for this one
    assert parse(startingTimestamp="1987-03-12T00:11:34.550Z").starting_time.every_ms == 542_506_294_550
