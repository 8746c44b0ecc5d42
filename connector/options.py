"""Every option of `format("aeron-archive")`: one immutable table, the read rows and the sink's.

The read rows (`archive.tables.options.RECORDING_OPTIONS`: where recordings are, which ones, what to read, how to
decode) are shared with the Spark-free tools; the rows only the sink has are here (`SINK_OPTIONS`; the sink's
typed view of them is `connector.sink.options`). Readers and writers parse against this whole table, so an option of
another mode is reported as such ("applies to writes only"), never as unknown. README.md's option tables are
checked against it (`tests/unit/test_readme_options.py`).
"""

from __future__ import annotations

from aeron_archive_spark.archive.tables.option_table import (
    Mode,
    OptionSpec,
    OptionTable,
    choice_parser,
    parse_duration_ms,
)
from aeron_archive_spark.archive.tables.options import RECORDING_OPTIONS

SINK_OPTIONS = OptionTable(
    (
        OptionSpec(
            "sourceLocation",
            choice_parser("local", "remote"),
            None,
            Mode.WRITE,
            "where the archive finds the sink's publication: local (same media driver, spy for UDP) or remote",
            "local if the archive is on this host (IPC or loopback control channel), else remote",
        ),
        OptionSpec(
            "publishTimeout",
            parse_duration_ms,
            30_000,
            Mode.WRITE,
            "fail a commit when the archive makes no progress (back pressure, recorder, signals) this long",
            "30s",
        ),
    )
)

OPTIONS: OptionTable = RECORDING_OPTIONS + SINK_OPTIONS


def options_table(mode: Mode = Mode.ANY) -> list[tuple[str, str, str]]:
    """(name, default, meaning) rows of every option that applies to `mode`, for docs and error messages."""
    return OPTIONS.rows(mode)
