"""The extensions an archive names when it accepts a connect: parsed from its OK's text; a client asks only an
archive that named the time index, so Java's archive (which names nothing) is never left a request to ignore."""

from __future__ import annotations

import time

import pytest

from aeron_archive_spark.archive.client.aeron_archive import AeronArchive
from aeron_archive_spark.archive.client.async_connect import archive_features
from aeron_archive_spark.archive.constants import ARCHIVE_FEATURES, TIME_INDEX_FEATURE
from aeron_archive_spark.archive.exceptions import ArchiveError


def test_features_are_read_from_the_connect_ok_text():
    assert archive_features(ARCHIVE_FEATURES) == {TIME_INDEX_FEATURE}
    assert archive_features("features=time-index, other") == {"time-index", "other"}
    assert archive_features("") == frozenset()  # Java's archive
    assert archive_features("some text") == frozenset()


def test_an_archive_that_names_no_time_index_is_not_asked(monkeypatch):
    client = AeronArchive.__new__(AeronArchive)
    client.features = frozenset()
    client.control_request_channel, client.control_request_stream_id = "aeron:udp?endpoint=java:8010", 10

    def never(*_args, **_kwargs):
        raise AssertionError("a request was sent")

    monkeypatch.setattr(AeronArchive, "_request_ok", never, raising=False)
    started = time.monotonic()
    with pytest.raises(ArchiveError, match="java:8010 stream 10 does not answer time index requests"):
        client.position_at_time(1, 0)
    with pytest.raises(ArchiveError, match="does not answer time index requests"):
        client.time_index(1, 0)
    assert time.monotonic() - started < 1
