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
            "taskResultCompression",
            choice_parser("lz4", "zstd", "none"),
            "lz4",
            Mode.WRITE,
            "how executors compress the rows they hand to the driver in Spark's task results (Arrow IPC buffer "
            "compression); the recording is never compressed",
            "lz4",
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

# Options of earlier versions, refused in every mode (a read given one too) with what replaced them.
REMOVED_OPTIONS = {
    "sinkStateDir": (
        "option sinkStateDir was removed: the sink keeps its exactly-once state in the archive itself (a sink "
        "log recording found by the query's checkpointLocation, or by the target of a batch write), so nothing "
        "has to be shared between hosts; remove the option (see docs/cluster.md)"
    ),
    "stagingLocation": (
        "option stagingLocation was removed: executors hand their rows to the driver in Spark's commit "
        "messages, so no staging directory is shared between executors and the driver; remove the option"
    ),
}

OPTIONS: OptionTable = (RECORDING_OPTIONS + SINK_OPTIONS).with_removed(REMOVED_OPTIONS)


def options_table(mode: Mode = Mode.ANY) -> list[tuple[str, str, str]]:
    """(name, default, meaning) rows of every option that applies to `mode`, for docs and error messages."""
    return OPTIONS.rows(mode)
