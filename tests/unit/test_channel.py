"""archive.channel's endpoint helpers: the pure part of making a replay or response channel concrete for a host."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.channel import (
    ChannelError,
    ChannelUri,
    udp_endpoint,
    udp_endpoint_host,
    with_endpoint_host,
)


@pytest.mark.parametrize(("channel", "expected"), [
    ("aeron:udp?endpoint=localhost:8010", ("localhost", "8010")),
    ("aeron:udp?endpoint=0.0.0.0:0|mtu=8k", ("0.0.0.0", "0")),
    ("aeron:udp?endpoint=[::1]:40456", ("[::1]", "40456")),
    ("aeron:udp?endpoint=hostonly", None),
    ("aeron:udp?control=localhost:8030|control-mode=dynamic", None),
    ("aeron:ipc", None),
    ("not a channel", None),
    ("", None),
    (None, None),
])
def test_udp_endpoint(channel: str | None, expected: tuple[str, str] | None) -> None:
    assert udp_endpoint(channel) == expected


def test_the_endpoint_host_drops_ipv6_brackets() -> None:
    assert udp_endpoint_host("aeron:udp?endpoint=[::1]:9") == "::1"
    assert udp_endpoint_host("aeron:udp?endpoint=10.0.0.1:9") == "10.0.0.1"
    assert udp_endpoint_host("aeron:ipc") is None


def test_with_endpoint_host_keeps_the_port_and_every_other_parameter() -> None:
    assert with_endpoint_host("aeron:udp?endpoint=0.0.0.0:0|mtu=8k", "10.1.2.3") == "aeron:udp?endpoint=10.1.2.3:0|mtu=8k"
    with pytest.raises(ChannelError, match="no UDP endpoint"):
        with_endpoint_host("aeron:ipc", "10.1.2.3")


@pytest.mark.parametrize(("channel", "resolved", "expected"), [
    ("aeron:udp?endpoint=localhost:0|mtu=8k", "127.0.0.1:40123", "aeron:udp?endpoint=localhost:40123|mtu=8k"),
    ("aeron:udp?endpoint=[::1]:0", "[::1]:40123", "aeron:udp?endpoint=[::1]:40123"),
    ("aeron:udp?endpoint=localhost:9000", "127.0.0.1:9000", "aeron:udp?endpoint=localhost:9000"),
    ("aeron:udp?control-mode=manual", "127.0.0.1:40123", "aeron:udp?control-mode=manual|endpoint=127.0.0.1:40123"),
])
def test_a_wildcard_endpoint_port_takes_the_bound_port_as_java_s_replace_endpoint_wildcard_port(
    channel: str, resolved: str, expected: str
) -> None:
    assert str(ChannelUri.parse(channel).with_endpoint_wildcard_port_replaced(resolved)) == expected


@pytest.mark.parametrize(("resolved", "error"), [
    ("127.0.0.1", "No port specified on resolvedEndpoint=127.0.0.1"),
    ("127.0.0.1:0", "Wildcard port specified on resolvedEndpoint=127.0.0.1:0"),
])
def test_a_resolved_endpoint_without_a_real_port_is_refused(resolved: str, error: str) -> None:
    with pytest.raises(ChannelError, match=error):
        ChannelUri.parse("aeron:udp?endpoint=localhost:0").with_endpoint_wildcard_port_replaced(resolved)
