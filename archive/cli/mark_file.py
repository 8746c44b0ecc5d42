"""`aeron-archive pid` and `aeron-archive errors`: ArchiveTool's verbs over `archive-mark.dat` (offline, read only),
and the `serve` options of the mark file.

`pid` prints the pid of the archive that holds (or last held) the directory; `errors` prints the archive's distinct
error log and then its media driver's, in `CommonContext.printErrorLog`'s words, as ArchiveTool does. Both read
the file through `archive-mark.lnk` when the mark file lives elsewhere, and wait up to 5 s for an archive that is
creating it (ArchiveTool's wait). `--json` gives the same as data.
"""

from __future__ import annotations

import argparse
import json
from typing import TypedDict

from aeron_archive_spark.archive.storage.mark_file import (
    ERROR_BUFFER_LENGTH_DEFAULT,
    LIVENESS_TIMEOUT_MS,
    MarkFileContents,
    read_mark_file,
)

type _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

ARCHIVE_TOOL_WAIT_S = 5.0  # ArchiveTool's openMarkFile timeout


def add_subparser(sub: _Sub) -> None:
    """Register `pid` and `errors` on `aeron-archive`'s subcommands, and the mark file's options on `serve`."""
    if "serve" in sub.choices:
        add_serve_arguments(sub.choices["serve"])
    pid = sub.add_parser("pid", help="the pid of the archive holding (or last to hold) the directory (offline)")
    pid.add_argument("--dir", required=True, help="archive directory")
    pid.add_argument("--json", action="store_true", help="the mark file's header as JSON, with the pid")
    pid.set_defaults(func=_pid)

    errors = sub.add_parser("errors", help="the archive's and its media driver's distinct error logs (offline)")
    errors.add_argument("--dir", required=True, help="archive directory")
    errors.add_argument(
        "--json", action="store_true", help="entries as data: observation count, first/last timestamps, text"
    )
    errors.set_defaults(func=_errors)


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """`serve`'s mark file options (Java's markFileDir and errorBufferLength, and the liveness timeout)."""
    serve.add_argument(
        "--mark-file-dir",
        help="keep archive-mark.dat here instead of in --dir (Java's aeron.archive.mark.file.dir; "
        "archive-mark.lnk in --dir names it)",
    )
    serve.add_argument(
        "--mark-file-timeout",
        metavar="DURATION",
        default=f"{LIVENESS_TIMEOUT_MS // 1000}s",
        help="a directory whose holder has not updated archive-mark.dat for this long is taken over (Java's fixed "
        "10s; shorter only for tests: a holder that stalls longer is taken for dead)",
    )
    serve.add_argument(
        "--error-buffer-length",
        type=int,
        default=ERROR_BUFFER_LENGTH_DEFAULT,
        help="bytes of archive-mark.dat's error log (Java's aeron.archive.error.buffer.length; at least 1 MiB)",
    )


class MarkFileOptions(TypedDict):
    mark_file_dir: str | None
    mark_file_liveness_timeout_ms: int
    error_buffer_length: int


def context_options(args: argparse.Namespace) -> MarkFileOptions:
    """The ArchiveContext fields of `add_serve_arguments`' options."""
    from aeron_archive_spark.archive.tables.option_table import parse_duration_ms

    timeout_ms = parse_duration_ms("--mark-file-timeout", args.mark_file_timeout)
    if timeout_ms <= 0:
        raise ValueError(f"option --mark-file-timeout: must be > 0, got {args.mark_file_timeout!r}")
    return {
        "mark_file_dir": args.mark_file_dir,
        "mark_file_liveness_timeout_ms": timeout_ms,
        "error_buffer_length": args.error_buffer_length,
    }


def _read(directory: str) -> MarkFileContents:
    return read_mark_file(directory, wait_s=ARCHIVE_TOOL_WAIT_S)


def _pid(args: argparse.Namespace) -> int:
    contents = _read(args.dir)
    if args.json:
        print(json.dumps({"path": contents.path, **contents.header.to_json_dict()}, indent=2))
    else:
        print(contents.header.pid)
    return 0


def _errors(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage.cnc_file import CncFileError, driver_errors
    from aeron_archive_spark.archive.storage.error_log import format_error_log

    contents = _read(args.dir)
    aeron_dir = contents.header.aeron_directory
    try:
        observed = driver_errors(aeron_dir)
        driver: list[dict[str, object]] | None = [e.to_json_dict() for e in observed]
        driver_text = format_error_log(observed)
        driver_problem = None
    except CncFileError as ex:  # Java's tool fails here; the archive's own log is still worth printing
        driver, driver_text, driver_problem = None, "", str(ex)
    if args.json:
        out: dict[str, object] = {
            "path": contents.path,
            "errors": [e.to_json_dict() for e in contents.errors],
            "aeronDirectory": aeron_dir,
            "driverErrors": driver,
        }
        if driver_problem is not None:
            out["driverErrorsUnavailable"] = driver_problem
        print(json.dumps(out, indent=2))
        return 0
    print("Archive error log:")
    print(format_error_log(contents.errors), end="")
    print()
    print(f"Aeron driver error log (directory: {aeron_dir}):")
    if driver_problem is not None:
        print(f"unavailable: {driver_problem}")
    else:
        print(driver_text, end="")
    return 0
