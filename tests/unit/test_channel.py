"""archive.channel's endpoint helpers: the pure part of making a replay or response channel concrete for a host."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.channel import ChannelError, udp_endpoint, udp_endpoint_host, with_endpoint_host


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
