"""Response-mode control sessions (`control-mode=response`, Java 1.53): the archive's responses travel back on the
connection the client opened, so the client needs no port of its own reachable by the archive."""

from __future__ import annotations

import pytest
from conftest import free_udp_port
from system.harness import Harness, payloads_of
from system.test_replay_fetch import record_stopped

from aeron_archive_spark.archive.client import AeronArchive


@pytest.fixture
def harness(aeron_dir, tmp_path):
    port = free_udp_port()
    h = Harness(aeron_dir, str(tmp_path / "archive"), control_channel=f"aeron:udp?endpoint=localhost:{port}")
    yield h
    h.close()


@pytest.mark.parametrize("transport", ["udp", "ipc"])
def test_a_response_mode_client_connects_lists_and_asks(harness, transport):
    d, _ = record_stopped(harness, payloads_of([100] * 10), 6301)
    if transport == "udp":
        response = f"aeron:udp?control-mode=response|control=localhost:{free_udp_port()}"
        request = harness.ctx.control_channel
        stream_id = harness.ctx.control_stream_id
    else:
        request, response = harness.ctx.local_control_channel, "aeron:ipc?control-mode=response"
        stream_id = harness.ctx.local_control_stream_id
    with AeronArchive.connect(harness.aeron_dir, request, stream_id, response, message_timeout_s=5) as client:
        assert client.archive_id() == harness.client.archive_id()
        listed = client.list_recording(d.recording_id)
        assert listed is not None and listed.control_session_id == client.control_session_id
        assert (listed.recording_id, listed.stop_position, listed.stripped_channel) == (
            d.recording_id, d.stop_position, d.stripped_channel)
        assert client.get_stop_position(d.recording_id) == d.stop_position
        # The archive answered on a response publication tied to this client's request image.
        session = harness.archive.conductor.control_session(client.control_session_id)
        assert session is not None and "response-correlation-id=" in session.response_channel
        assert "control-mode=response" in session.response_channel
