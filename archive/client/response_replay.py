"""Replays over a response channel (`control-mode=response`): the request publication they are asked for on.

A response-channel replay reaches the requester on a connection the requester opened, so the requester needs no
address the archive can reach. As Java 1.53's `AeronArchive.replayViaResponseChannel` (and its archive's
`ReplicationSession` in its REPLAY_TOKEN and GET_ARCHIVE_PROXY states) do it:

1. subscribe on the response channel (e.g. `aeron:udp?control-mode=response|control=host:port`);
2. ask the control session for a replay token of the recording (ReplayTokenRequest);
3. add a publication to the archive's control channel and stream that names the subscription
   (`response-correlation-id=<its registration id>`; `ReplayRequestPublication`), and wait until it is connected
   with room to send;
4. send the replay request, with the token and the control session's id, on that publication: the archive finds
   the control session by the token and adds the replay publication as a response to this publication's image;
   the OK (or an error) comes on the control session;
5. the replay arrives on the subscription; the request publication can go.

`AeronArchive.replay` / `start_replay` take this path for a response channel; the archive's replication uses
`ReplayRequestPublication` step by step.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.channel import ChannelError, ChannelUri, udp_endpoint
from aeron_archive_spark.archive.client.archive_proxy import ArchiveProxy
from aeron_archive_spark.archive.native import NativeAeronError

if TYPE_CHECKING:
    from aeron_archive_spark.archive.native import AeronClient, ExclusivePublication, PendingExclusivePublication

# The request publication carries one request: a small log (Java's 64 KiB).
REQUEST_TERM_LENGTH = 64 * 1024


def is_response_channel(channel: str) -> bool:
    """Whether a channel asks for a response publication (`control-mode=response`); False for one that does not
    parse (whoever uses it reports that)."""
    try:
        return ChannelUri.parse(channel).get("control-mode") == "response"
    except ChannelError:
        return False


def response_channel_toward(control_channel: str, port: int | None = None) -> str:
    """The response channel a client on any host uses toward the archive at `control_channel` (a UDP endpoint):
    `aeron:udp?control-mode=response|control=<the archive's host>:<port>`, `port` defaulting to the control
    port + 1.

    Why the archive's host: in a response channel, as in a dynamic multi-destination one, `control` is where the
    *publisher* listens. The archive's response and replay publications bind it (one socket for all of them, as
    they share its canonical form); the client's subscription binds an ephemeral port of its own and sends its
    status messages there first, so everything the archive sends back answers traffic the client started, and no
    port of the client's host has to be reachable (a `ct state new` firewall lets it through). The port must be
    free on the archive's host and reachable from the clients, as the control port is. Raises `ValueError` for a
    control channel with no UDP endpoint (IPC: the archive shares this host's media driver, no port is involved).
    """
    endpoint = udp_endpoint(control_channel)
    if endpoint is None:
        raise ValueError(
            f"response channels need a UDP control channel with an endpoint (host:port), not {control_channel}"
        )
    host, control_port = endpoint
    if port is None:
        try:
            port = int(control_port) + 1
        except ValueError:
            raise ValueError(f"the control channel's port is not a number: {control_channel}") from None
    if not 0 < port < 65536:
        raise ValueError(f"response control port {port} is not a UDP port (1 to 65535)")
    return f"aeron:udp?control-mode=response|control={host}:{port}"


def replay_request_channel(control_request_channel: str, response_subscription_id: int) -> str:
    """The request publication's channel (Java's): the control request channel without a session id or a starting
    position, naming the response subscription, with a 64 KiB term and spies not counted as a connection."""
    uri = ChannelUri.parse(control_request_channel).with_params(
        session_id=None,
        init_term_id=None,
        term_id=None,
        term_offset=None,
        response_correlation_id=response_subscription_id,
        term_length=REQUEST_TERM_LENGTH,
        ssc="false",
    )
    return str(uri)


class ReplayRequestPublication:
    """The publication a response-channel replay is asked for on (step 3), added without waiting: `poll` gives the
    proxy to send the request with once the publication is connected and can take it."""

    def __init__(
        self,
        aeron: AeronClient,
        control_request_channel: str,
        control_request_stream_id: int,
        response_subscription_id: int,
        message_timeout_ns: int,
    ) -> None:
        self.channel = replay_request_channel(control_request_channel, response_subscription_id)
        self.stream_id = control_request_stream_id
        self._timeout_ns = message_timeout_ns
        self._pending: PendingExclusivePublication | None = aeron.async_add_exclusive_publication(
            self.channel, control_request_stream_id
        )
        self._publication: ExclusivePublication | None = None
        self._proxy: ArchiveProxy | None = None

    def poll(self) -> ArchiveProxy | None:
        """The proxy once the publication is added, connected and has a window to send in (Java: `isConnected()`
        and `availableWindow() > 0`), else None; raises `NativeAeronError` if the media driver refused it."""
        if self._proxy is not None:
            return self._proxy
        if self._publication is None:
            if self._pending is None:
                return None
            self._publication = self._pending.poll()
            if self._publication is None:
                return None
            self._pending = None
        if not self._publication.is_connected or self._publication.available_window <= 0:
            return None
        self._proxy = ArchiveProxy(self._publication, message_timeout_ns=self._timeout_ns)
        return self._proxy

    def close(self) -> bool:
        """Close the publication; True once settled. False while its add is still with the media driver: call again
        until True (the publication is closed as soon as it comes)."""
        publication, self._publication, self._proxy = self._publication, None, None
        if publication is not None:
            publication.close()
        pending = self._pending
        if pending is None:
            return True
        pending.abandon()
        with contextlib.suppress(NativeAeronError):  # refused: nothing to close
            pending.poll()
        if pending.is_done:
            self._pending = None
            return True
        return False
