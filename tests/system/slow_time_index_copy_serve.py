"""`aeron-archive serve` whose time index copy stops in the middle of replacing its `HANG_AT`-th `.tix` file until
the process is killed, so that a kill -9 lands exactly there (`test_replication_time_index_crash`). Run as a script:
`python slow_time_index_copy_serve.py [--in-place] serve ...`.

- By default each file is renamed over the old one as the archive does; the `HANG_AT`-th waits before its rename: the
  kill finds the new file written beside the old one, not yet renamed.
- `--in-place` stands for a copy without the atomic rename: the new bytes are written over the old file itself (its
  header and half its samples, then the rest), the `HANG_AT`-th stopping after the first half, to show that the test
  catches the torn file that leaves.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from aeron_archive_spark.archive.cli.main import main
from aeron_archive_spark.archive.storage.time_index import HEADER_LENGTH, SAMPLE_LENGTH

HANG_AT = 5
_real_replace = os.replace
_replaced = [0]


def _pause() -> None:
    """The `HANG_AT`-th replacement waits for the kill; the others go on after a few ms (the test sees them)."""
    _replaced[0] += 1
    time.sleep(3600 if _replaced[0] == HANG_AT else 0.005)


def _slow_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
    if not os.fspath(dst).endswith(".tix"):  # the catalog's, the mark file's: as they are
        _real_replace(src, dst, *args, **kwargs)
        return
    _pause()
    _real_replace(src, dst, *args, **kwargs)


def _in_place_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
    if not os.fspath(dst).endswith(".tix"):
        _real_replace(src, dst, *args, **kwargs)
        return
    with open(src, "rb") as file:
        data = file.read()
    half = HEADER_LENGTH + (len(data) - HEADER_LENGTH) // SAMPLE_LENGTH // 2 * SAMPLE_LENGTH
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data[:half])
        _pause()
        os.write(fd, data[half:])
    finally:
        os.close(fd)
    os.remove(src)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--in-place":
        argv = argv[1:]
        os.replace = _in_place_replace
    else:
        os.replace = _slow_replace
    sys.exit(main(argv))
