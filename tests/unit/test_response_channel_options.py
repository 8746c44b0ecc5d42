"""Option `responseChannels` (and `responseControlPort`): what channels a read's connections get, and every
combination that cannot work refused up front, naming the option."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.client.connection import ConnectionOptions
from aeron_archive_spark.archive.client.pool import SessionKey
from aeron_archive_spark.archive.client.response_replay import is_response_channel, response_channel_toward
from aeron_archive_spark.archive.tables.option_table import OptionError
from aeron_archive_spark.archive.tables.options import SourceOptions
from aeron_archive_spark.archive.tables.ranges import ArchiveReplicas, RunningArchive
from aeron_archive_spark.connector.source.options import ReadOptions

ARCHIVE = "aeron:udp?endpoint=10.77.0.10:8010"


def connection(**raw: str) -> ConnectionOptions:
    location = SourceOptions.parse({"recordingId": "1", **raw}).location
    assert isinstance(location, RunningArchive)
    return location.connection


def test_off_by_default_and_the_channels_stay_as_they_were():
    plain = connection(controlChannel=ARCHIVE)
    assert plain == connection(controlChannel=ARCHIVE, responseChannels="false")
    assert not is_response_channel(plain.control_response_channel)
    assert not is_response_channel(plain.replay_channel)


def test_on_both_channels_answer_from_the_archive_s_host_on_the_port_after_its_control_port():
    c = connection(controlChannel=ARCHIVE, responseChannels="true")
    assert c.control_response_channel == "aeron:udp?control-mode=response|control=10.77.0.10:8011"
    # The replay channel is the same endpoint (one socket on each side), with the replays' MTU asked for.
    assert c.replay_channel.startswith("aeron:udp?control-mode=response|control=10.77.0.10:8011")
    assert is_response_channel(c.replay_channel)
    assert (c.control_channel, c.control_stream_id) == (ARCHIVE, 10)


def test_the_port_can_be_chosen():
    c = connection(controlChannel=ARCHIVE, responseChannels="true", responseControlPort="40999")
    assert c.control_response_channel == "aeron:udp?control-mode=response|control=10.77.0.10:40999"


def test_each_replica_archive_gets_response_channels_toward_its_own_host():
    location = SourceOptions.parse({
        "recordingId": "1", "responseChannels": "true",
        "controlChannels": "aeron:udp?endpoint=a-host:8010;aeron:udp?endpoint=b-host:9010",
    }).location
    assert isinstance(location, ArchiveReplicas)
    channels = [a.connection.control_response_channel for a in location.archives]
    assert channels == ["aeron:udp?control-mode=response|control=a-host:8011",
                        "aeron:udp?control-mode=response|control=b-host:9011"]


def test_pooled_sessions_of_response_reads_are_never_those_of_ordinary_reads():
    plain = connection(controlChannel=ARCHIVE)
    response = connection(controlChannel=ARCHIVE, responseChannels="true")
    assert SessionKey.of(plain, "/dev/shm/aeron") != SessionKey.of(response, "/dev/shm/aeron")


@pytest.mark.parametrize(("raw", "message"), [
    ({"controlChannel": "aeron:ipc", "responseChannels": "true"},
     "responseChannels=true cannot work with controlChannel=aeron:ipc"),
    ({"responseChannels": "true", "replayChannel": "aeron:udp?endpoint=localhost:0"},
     "responseChannels=true and replayChannel"),
    ({"responseChannels": "true", "controlResponseChannel": "aeron:udp?endpoint=localhost:0"},
     "responseChannels=true and controlResponseChannel"),
    ({"responseControlPort": "9000"}, "responseControlPort only applies with responseChannels=true"),
    ({"responseChannels": "maybe"}, "option responseChannels: expected true or false"),
    ({"responseChannels": "true", "responseControlPort": "70000"}, "option responseControlPort: expected an integer"),
])
def test_what_cannot_work_is_refused_naming_the_option(raw, message):
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse({"recordingId": "1", **raw})


def test_the_spark_source_takes_the_option_for_batch_and_streaming_reads():
    for streaming in (False, True):
        parsed = ReadOptions.parse({"controlchannel": ARCHIVE, "recordingid": "1", "responsechannels": "true"},
                                   streaming)
        location = parsed.recordings.location
        assert isinstance(location, RunningArchive)
        assert is_response_channel(location.connection.replay_channel)


def test_response_channel_toward_needs_a_udp_endpoint():
    assert response_channel_toward("aeron:udp?endpoint=localhost:8010|term-length=64k") == (
        "aeron:udp?control-mode=response|control=localhost:8011")
    for channel in ("aeron:ipc", "aeron:udp?control=host:1|control-mode=dynamic"):
        with pytest.raises(ValueError, match="need a UDP control channel with an endpoint"):
            response_channel_toward(channel)
