"""`aeron-archive mirror` reaches archives on other hosts with its default response channel: `localhost` toward a
remote archive becomes this host's address there (a source on another host cannot answer to its own localhost)."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.client import aeron_archive


def test_the_default_response_channel_is_this_hosts_address_toward_a_remote_archive(monkeypatch):
    asked: list[tuple[str, str]] = []

    def connect(**kw):
        asked.append((kw["control_request_channel"], kw["control_response_channel"]))
        raise SystemExit(0)  # one connection is all this test needs

    monkeypatch.setattr(aeron_archive.AeronArchive, "connect", staticmethod(connect))
    with pytest.raises(SystemExit):
        main(["mirror", "--source-channel", "aeron:udp?endpoint=192.0.2.50:8010", "--once"])
    ((request, response),) = asked
    assert request == "aeron:udp?endpoint=192.0.2.50:8010"
    assert response.startswith("aeron:udp?endpoint=") and "localhost" not in response and response.endswith(":0")
