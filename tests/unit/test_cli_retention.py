"""`serve`'s retention options: Kafka-like limits and overrides parsed, bad values refused naming the option."""

from __future__ import annotations

import pytest

from aeron_archive_spark.archive.cli.main import build_parser
from aeron_archive_spark.archive.cli.retention import from_args
from aeron_archive_spark.archive.server.retention import RetentionLimits, RetentionOverride
from aeron_archive_spark.archive.tables.option_table import OptionError


def settings(*argv: str):
    return from_args(build_parser().parse_args(["serve", "--dir", "/tmp/x", *argv]))


def test_no_options_no_retention():
    s = settings()
    assert not s.is_set and s.check_interval_ms == 10_000


def test_limits_and_overrides_parse():
    s = settings("--retention-ms", "7d", "--retention-bytes", "100g", "--retention-check-interval", "500ms",
                 "--retention-override", "1001:1h:-", "--retention-override", "1002:-:64m:aeron:udp?endpoint=md:4000")
    assert s.default == RetentionLimits(7 * 86_400_000, 100 << 30)
    assert s.overrides == (RetentionOverride(1001, RetentionLimits(3_600_000, None)),
                           RetentionOverride(1002, RetentionLimits(None, 64 << 20), "aeron:udp?endpoint=md:4000"))
    assert s.check_interval_ms == 500 and s.is_set


@pytest.mark.parametrize("argv,named", [
    (("--retention-ms", "soon"), "--retention-ms"),
    (("--retention-bytes", "lots"), "--retention-bytes"),
    (("--retention-ms", "0"), "--retention-ms"),
    (("--retention-check-interval", "0"), "--retention-check-interval"),
    (("--retention-override", "x:1h:-"), "--retention-override"),
    (("--retention-override", "1001:1h"), "--retention-override"),
    (("--retention-override", "1001:1h:big"), "--retention-override"),
])
def test_bad_values_are_refused_naming_the_option(argv, named):
    with pytest.raises(OptionError, match=f"option {named}"):
        settings(*argv)
