"""Response-mode control sessions (`control-mode=response`, Java 1.53): the archive's responses travel back on the
connection the client opened, so the client needs no port of its own reachable by the archive."""

from __future__ import annotations

import pytest
from conftest import free_udp_port
from system.harness import Harness, payloads_of, wait_for
from system.test_replay_fetch import record_stopped

from aeron_archive_spark.archive.channel import ChannelUri
from aeron_archive_spark.archive.client import AeronArchive
from aeron_archive_spark.archive.client.aeron_archive import replay_request
from aeron_archive_spark.archive.constants import ControlResponseCode
from aeron_archive_spark.archive.native import AeronClient


def params(channel: str) -> dict[str, str]:
    return ChannelUri.parse(channel).params


def response_channels(h: Harness, transport: str) -> tuple[str, int, str, str]:
    """An archive's control channel and stream for `transport` ("udp": its UDP control channel, "ipc": its local
    one), with a control response channel and a replay channel in response mode to go with them."""
    if transport == "udp":
        return (h.ctx.control_channel, h.ctx.control_stream_id,
                f"aeron:udp?control-mode=response|control=localhost:{free_udp_port()}",
                f"aeron:udp?control-mode=response|control=localhost:{free_udp_port()}")
    return (h.ctx.local_control_channel, h.ctx.local_control_stream_id, "aeron:ipc?control-mode=response",
            "aeron:ipc?control-mode=response")


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


def read_all(subscription, stop_position: int, timeout: float = 10.0) -> list[bytes]:
    """Every message of a replay, in order, until its image reaches `stop_position`."""
    messages: list[bytes] = []

    def poll() -> None:
        subscription.poll(lambda data, header: messages.append(bytes(data)), 100)

    wait_for(lambda: subscription.images() and subscription.images()[0].position >= stop_position, timeout,
             "the replay to reach the recording's stop", poll=poll)
    subscription.poll(lambda data, header: messages.append(bytes(data)), 100)
    return messages


@pytest.mark.parametrize("transport", ["udp", "ipc"])
def test_a_replay_via_a_response_channel_arrives_over_the_connection_the_client_opened(
        harness, transport, monkeypatch):
    payloads = payloads_of([300 + i % 700 for i in range(200)])
    d, _ = record_stopped(harness, payloads, 6302)
    request, stream_id, response, replay_channel = response_channels(harness, transport)
    added: list[tuple[str, int]] = []  # the publications the archive and the client add, as they add them
    add = AeronClient.async_add_exclusive_publication

    def recording_add(self, channel: str, stream: int):
        added.append((channel, stream))
        return add(self, channel, stream)

    monkeypatch.setattr(AeronClient, "async_add_exclusive_publication", recording_add)
    with AeronArchive.connect(harness.aeron_dir, request, stream_id, response, message_timeout_s=5) as client:
        subscription = client.replay(d.recording_id, replay_channel, 7301, position=d.start_position,
                                     length=d.stop_position - d.start_position)
        try:
            assert read_all(subscription, d.stop_position) == payloads
            (image,) = subscription.images()
        finally:
            subscription.close()
    # The client asked on a publication of its own to the control channel, naming its replay subscription; the
    # archive's replay publication answers that publication's image (a response publication).
    (ask, replay) = added
    assert ask[1] == stream_id and params(ask[0])["response-correlation-id"] == str(subscription.registration_id)
    assert "session-id" not in params(ask[0]) and params(ask[0])["term-length"] == "65536"
    assert replay[1] == 7301 and params(replay[0])["control-mode"] == "response"
    assert int(params(replay[0])["response-correlation-id"]) > 0
    assert image.join_position == d.start_position


def test_a_replay_token_works_for_its_recording_only_and_a_refused_one_is_answered(harness):
    """The archive's side step by step, on a media driver: a token for one recording; a replay of another with it is
    answered with an error naming the token (Java's client would time out); with its recording it replays."""
    d, _ = record_stopped(harness, payloads_of([200] * 20), 6303)
    other, _ = record_stopped(harness, payloads_of([200] * 5), 6304)
    request, stream_id, response, replay_channel = response_channels(harness, "udp")
    with AeronArchive.connect(harness.aeron_dir, request, stream_id, response, message_timeout_s=5) as client:
        token = client.request_replay_token(d.recording_id)
        assert token != -1
        with client.aeron.add_subscription(replay_channel, 7302) as subscription:
            publication = client.replay_request_publication(subscription.registration_id)
            try:
                proxy = wait_for(publication.poll, 5, "the request publication to connect")

                def replay(recording_id: int) -> int:
                    return client.send(lambda ids: replay_request(ids, recording_id, 0, -1, replay_channel, 7302, -1,
                                                                  token), via=proxy)

                refused = replay(other.recording_id)
                (error,) = wait_for(lambda: [m for m in client.poll_responses() if m.correlation_id == refused], 5,
                                    "the refusal")
                assert error.code == ControlResponseCode.ERROR
                assert error.error_message == (
                    f"Unknown session or token timeout for replayToken={token}: the token was issued for "
                    f"recordingId={d.recording_id}, not recordingId={other.recording_id}")
                accepted = replay(d.recording_id)
                (ok,) = wait_for(lambda: [m for m in client.poll_responses() if m.correlation_id == accepted], 5,
                                 "the replay's OK")
                assert ok.code == ControlResponseCode.OK
                assert len(read_all(subscription, d.stop_position)) == 20
            finally:
                while not publication.close():
                    pass
