"""Aeron channel URIs: parse, build, and the archive's stripping rules.

The archive stores a *stripped* channel in the catalog, keys its recording subscriptions on a canonical subset
of parameters, and builds replay / response / extend channels by adding position parameters. These rules
follow `io.aeron.ChannelUri` and `ArchiveConductor.strippedChannelBuilder`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

AERON_SCHEME = "aeron"
SPY_PREFIX = "aeron-spy:"
IPC_MEDIA = "ipc"
UDP_MEDIA = "udp"

# Parameters kept by ArchiveConductor.strippedChannelBuilder (facts sheet §5.2).
_STRIPPED_PARAMS = (
    "endpoint",
    "interface",
    "control",
    "control-mode",
    "tags",
    "rejoin",
    "group",
    "tether",
    "fc",
    "gtag",
    "cc",
    "so-rcvbuf",
    "so-sndbuf",
    "rcv-wnd",
    "media-rcv-ts-offset",
    "channel-rcv-ts-offset",
    "channel-snd-ts-offset",
    "session-id",
    "alias",
    "response-correlation-id",
    "response-endpoint",
    "ttl",
    "stream-id",
)
# Parameters that identify a recording subscription (facts sheet §6.1).
_KEY_PARAMS = ("endpoint", "interface", "control", "session-id", "tags")


class ChannelError(ValueError):
    """A channel URI that cannot be parsed."""


@dataclass
class ChannelUri:
    media: str
    params: dict[str, str] = field(default_factory=dict)
    prefix: str = ""

    @classmethod
    def parse(cls, uri: str) -> ChannelUri:
        if not isinstance(uri, str) or not uri:
            raise ChannelError(f"invalid channel URI: {uri!r}")
        text = uri
        prefix = ""
        if text.startswith(SPY_PREFIX):
            prefix, text = SPY_PREFIX, text[len(SPY_PREFIX) :]
        if not text.startswith(AERON_SCHEME + ":"):
            raise ChannelError(f"channel URI must start with 'aeron:': {uri!r}")
        rest = text[len(AERON_SCHEME) + 1 :]
        media, _, query = rest.partition("?")
        if media not in (IPC_MEDIA, UDP_MEDIA):
            raise ChannelError(f"unknown media '{media}' in channel URI: {uri!r}")
        params: dict[str, str] = {}
        if query:
            for item in query.split("|"):
                if not item:
                    continue
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise ChannelError(f"malformed parameter '{item}' in channel URI: {uri!r}")
                params[key] = value
        return cls(media=media, params=params, prefix=prefix)

    def __str__(self) -> str:
        base = f"{self.prefix}{AERON_SCHEME}:{self.media}"
        if not self.params:
            return base
        return base + "?" + "|".join(f"{k}={v}" for k, v in self.params.items())

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.params.get(key, default)

    def with_params(self, **params: object) -> ChannelUri:
        """A copy with parameters set (underscores in keyword names become dashes); None removes a parameter."""
        new = dict(self.params)
        for key, value in params.items():
            name = key.replace("_", "-")
            if value is None:
                new.pop(name, None)
            else:
                new[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return ChannelUri(self.media, new, self.prefix)

    def with_endpoint_wildcard_port_replaced(self, resolved_endpoint: str) -> ChannelUri:
        """Java's `ChannelUri.replaceEndpointWildcardPort`: an endpoint `host:0` takes the port of
        `resolved_endpoint` (`host:port`, the address the driver bound); a channel without an endpoint takes the
        whole of it; any other endpoint is kept."""
        host, sep, port = resolved_endpoint.rpartition(":")
        if not sep or not host:
            raise ChannelError(f"No port specified on resolvedEndpoint={resolved_endpoint}")
        if port == "0":
            raise ChannelError(f"Wildcard port specified on resolvedEndpoint={resolved_endpoint}")
        endpoint = self.get("endpoint")
        if endpoint is None:
            return self.with_params(endpoint=resolved_endpoint)
        if endpoint.endswith(":0"):
            return self.with_params(endpoint=f"{endpoint[: -len(':0')]}:{port}")
        return self

    @property
    def is_udp(self) -> bool:
        return self.media == UDP_MEDIA

    @property
    def is_ipc(self) -> bool:
        return self.media == IPC_MEDIA


def strip_channel(channel: str) -> str:
    """The channel stored in the catalog: the URI without per-publication tuning parameters."""
    uri = ChannelUri.parse(channel)
    kept = {k: v for k, v in uri.params.items() if k in _STRIPPED_PARAMS}
    return str(ChannelUri(uri.media, kept))


def recording_subscription_key(channel: str, stream_id: int) -> str:
    """Key under which the archive refuses a second recording subscription of the same stream."""
    uri = ChannelUri.parse(channel)
    parts = [f"{k}={uri.params[k]}" for k in _KEY_PARAMS if k in uri.params]
    return f"{stream_id}:{uri.media}" + ("?" + "|".join(parts) if parts else "")


def spy_channel(channel: str) -> str:
    return channel if channel.startswith(SPY_PREFIX) else SPY_PREFIX + channel


def initial_position_params(position: int, initial_term_id: int, term_length: int) -> dict[str, int]:
    """`ChannelUriStringBuilder.initialPosition`: the parameters that make a publication start at `position`."""
    if position < 0 or position & 31:
        raise ChannelError(f"position must be a non-negative multiple of 32: {position}")
    shift = term_length.bit_length() - 1
    if term_length <= 0 or term_length & (term_length - 1):
        raise ChannelError(f"term length must be a power of two: {term_length}")
    term_id = ((position >> shift) + initial_term_id) & 0xFFFFFFFF
    if term_id >= 1 << 31:
        term_id -= 1 << 32
    return {
        "init-term-id": initial_term_id,
        "term-id": term_id,
        "term-offset": position & (term_length - 1),
        "term-length": term_length,
    }


# Aeron's largest datagram payload (`AERON_MAX_UDP_PAYLOAD_LENGTH`): the largest MTU a media driver accepts.
MAX_UDP_PAYLOAD_LENGTH = 65504
MTU_ALIGNMENT = 32


def validate_mtu(mtu: int, what: str) -> int:
    """`mtu` if a media driver accepts it as a channel's MTU (a multiple of 32, above the 32-byte data header, at
    most 65504: the C driver's `aeron_driver_context_validate_mtu_length`), else a ChannelError naming `what`."""
    if mtu <= MTU_ALIGNMENT or mtu > MAX_UDP_PAYLOAD_LENGTH or mtu % MTU_ALIGNMENT:
        raise ChannelError(
            f"{what}={mtu} is not a valid MTU: it must be a multiple of {MTU_ALIGNMENT} greater than "
            f"{MTU_ALIGNMENT} and at most {MAX_UDP_PAYLOAD_LENGTH} (Aeron's MAX_UDP_PAYLOAD_LENGTH)"
        )
    return mtu


def replay_mtu_length(replay_channel: str, recording_mtu: int, term_length: int) -> int:
    """The MTU of a replay publication: the recording's (Java's archive always forces it), or larger where the
    replay channel asks for more with `mtu=N` (our archive's extension).

    Why larger: a replay sends the recorded frames verbatim, and its media driver packs as many whole frames into
    one datagram as its MTU allows; frames recorded at 1408 then cross the network several to a datagram, and
    every per-datagram cost (system calls, both drivers' work, the kernel's) is paid that many times less. The
    frames, positions, fragments and reserved values stay exactly as recorded; only how they are grouped into
    datagrams changes. A smaller `mtu` than the recording's is ignored, as Java ignores any (a recorded frame may
    be as long as the recording's MTU); an invalid one is an error naming it, rather than a refusal by the media
    driver after the request was answered. At most a quarter of the term: a receiver's window is at most half a
    term, and a datagram as large as the window stalls the stream (measured: a 64 KiB term replayed at 16 KiB
    flows, at 32 KiB it stops after the first window).
    """
    requested = ChannelUri.parse(replay_channel).get("mtu")
    if requested is None:
        return recording_mtu
    try:
        value = int(requested)
    except ValueError:
        raise ChannelError(f"replay channel mtu={requested} is not a number: {replay_channel}") from None
    largest = max(recording_mtu, (term_length // 4) & ~(MTU_ALIGNMENT - 1))
    return max(recording_mtu, min(validate_mtu(value, "replay channel mtu"), largest))


def add_session_id(channel: str, session_id: int) -> str:
    return str(ChannelUri.parse(channel).with_params(session_id=session_id))


# Endpoint hosts that only mean something where the channel is used: bind any interface, or this host's loopback.
WILDCARD_HOST = "0.0.0.0"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def udp_endpoint(channel: str | None) -> tuple[str, str] | None:
    """(host, port) of a UDP channel's `endpoint` (brackets of an IPv6 host kept), else None (IPC, no endpoint,
    no port, or not a channel at all)."""
    if not channel:
        return None
    try:
        uri = ChannelUri.parse(channel)
    except ChannelError:
        return None
    endpoint = uri.get("endpoint")
    if not uri.is_udp or endpoint is None:
        return None
    host, sep, port = endpoint.rpartition(":")
    return (host, port) if sep else None


def udp_endpoint_host(channel: str | None) -> str | None:
    """The host of a UDP channel's endpoint (`aeron:udp?endpoint=host:port`, IPv6 brackets removed), else None."""
    endpoint = udp_endpoint(channel)
    return endpoint[0].strip("[]") if endpoint is not None else None


def with_endpoint_host(channel: str, host: str) -> str:
    """The UDP channel with its endpoint's host replaced by `host` (the port kept)."""
    endpoint = udp_endpoint(channel)
    if endpoint is None:
        raise ChannelError(f"channel has no UDP endpoint with a port: {channel}")
    return str(ChannelUri.parse(channel).with_params(endpoint=f"{host}:{endpoint[1]}"))
