"""The media driver under the archive of the Spark benchmarks: by default the one `aeron-archive serve` embeds.

`serve` puts its driver's files on /dev/shm when that is a roomy memory filesystem and makes non-sparse log buffers
(`archive_media_driver`), so that is what a user's archive runs on. These benchmarks ran theirs in a directory of
the temporary directory with the C driver's sparse logs until 2026-11-27: on this machine a disk, where every
replay's log buffer is a file the kernel writes back. `--driver tmp` keeps that set-up, to compare.
"""

from __future__ import annotations

import argparse
import os

from aeron_archive_spark.archive.native import EmbeddedMediaDriver
from aeron_archive_spark.archive.server.archive import archive_media_driver

DRIVER_CHOICES = ("serve", "tmp")


def add_driver_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--driver",
        choices=DRIVER_CHOICES,
        default="serve",
        help="the archive's media driver: as `aeron-archive serve` runs it (default: /dev/shm when roomy, "
        "non-sparse logs), or `tmp`: sparse logs in a directory of the work directory (before 2026-11-27)",
    )


def archive_driver(kind: str, work_dir: str) -> EmbeddedMediaDriver:
    """A started driver for the benchmark's archive; `work_dir` holds it only for `tmp`."""
    if kind == "serve":
        return archive_media_driver()
    if kind == "tmp":
        return EmbeddedMediaDriver(os.path.join(work_dir, "driver"))
    raise ValueError(f"--driver {kind!r}: one of {', '.join(DRIVER_CHOICES)}")
