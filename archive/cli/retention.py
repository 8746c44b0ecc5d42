"""`serve`'s retention options (Kafka's `retention.ms` / `retention.bytes`, per archive, with per-stream overrides):
parsed here into the archive's `RetentionLimits`, every bad value refused naming the option."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from aeron_archive_spark.archive.server.retention import RetentionLimits, RetentionOverride
from aeron_archive_spark.archive.tables.option_table import OptionError, parse_bytes, parse_duration_ms

RETENTION_CHECK_INTERVAL_DEFAULT = "10s"


def add_arguments(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "retention",
        "keep each recording, live ones included, within an age and/or a size by purging whole segments "
        "from its start (as Kafka's retention.ms / retention.bytes); never the segment being written, never one a "
        "replay is reading",
    )
    group.add_argument(
        "--retention-ms",
        metavar="AGE",
        help="purge segments whose newest data is older than this (7d, 12h, 30m, 1500ms or ms)",
    )
    group.add_argument(
        "--retention-bytes",
        metavar="SIZE",
        help="keep each recording to this size, give or take a segment (100g, 512m or bytes)",
    )
    group.add_argument(
        "--retention-override",
        metavar="STREAM:AGE:SIZE[:CHANNEL]",
        action="append",
        default=[],
        help="limits of their own for a stream's recordings ('-' for no limit), optionally only those "
        "whose channel contains CHANNEL; the first match wins (repeatable)",
    )
    group.add_argument(
        "--retention-check-interval",
        metavar="DURATION",
        default=RETENTION_CHECK_INTERVAL_DEFAULT,
        help=f"how often retention is applied (default {RETENTION_CHECK_INTERVAL_DEFAULT})",
    )


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    default: RetentionLimits
    overrides: tuple[RetentionOverride, ...]
    check_interval_ms: int

    @property
    def is_set(self) -> bool:
        return self.default.is_set or any(o.limits.is_set for o in self.overrides)


def from_args(args: argparse.Namespace) -> RetentionSettings:
    """The retention settings of `serve`'s arguments; `OptionError` names the option of a bad value."""
    default = _limits("--retention-ms", args.retention_ms, "--retention-bytes", args.retention_bytes)
    overrides = tuple(_override(text) for text in args.retention_override)
    interval = parse_duration_ms("--retention-check-interval", args.retention_check_interval)
    if interval <= 0:
        raise OptionError(f"option --retention-check-interval: must be > 0, got {args.retention_check_interval!r}")
    return RetentionSettings(default, overrides, interval)


def _limits(age_name: str, age: str | None, size_name: str, size: str | None) -> RetentionLimits:
    age_ms = None if age in (None, "-") else parse_duration_ms(age_name, age)
    max_bytes = None if size in (None, "-") else parse_bytes(size_name, size)
    if age_ms is not None and age_ms <= 0:
        raise OptionError(f"option {age_name}: must be > 0, got {age!r}")
    if max_bytes is not None and max_bytes <= 0:
        raise OptionError(f"option {size_name}: must be > 0, got {size!r}")
    return RetentionLimits(age_ms, max_bytes)


def _override(text: str) -> RetentionOverride:
    name = "--retention-override"
    parts = text.split(":", 3)
    if len(parts) < 3:
        raise OptionError(f"option {name}: expected STREAM:AGE:SIZE[:CHANNEL], got {text!r}")
    stream, age, size = parts[:3]
    try:
        stream_id = int(stream)
    except ValueError:
        raise OptionError(f"option {name}: stream id {stream!r} is not an integer in {text!r}") from None
    limits = _limits(f"{name} {text!r} age", age, f"{name} {text!r} size", size)
    return RetentionOverride(stream_id, limits, parts[3] if len(parts) == 4 else "")
