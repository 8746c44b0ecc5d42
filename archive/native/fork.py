"""What a forked child does with the Aeron objects it inherited from its parent: nothing, ever.

After fork() the child holds copies of the parent's clients, sessions and embedded media driver, but none of the
threads behind them. Closing them would act on state the parent still uses: the embedded driver's destructor shuts
the driver down and deletes the parent's driver directory, and `aeron_close` joins a conductor thread that does
not exist in the child (and whose thread id a child thread may have been given, so the join may never return).

So a child abandons them: each is referenced for the child's whole life, its reference count is raised once more
so that the interpreter's teardown at exit cannot run its destructor either, and an `AeronClient`'s close-at-exit
finalizer is detached. PySpark's daemon forks its Python workers, so this is the normal case on executors.
"""

from __future__ import annotations

import contextlib
import ctypes

from aeron_archive_spark.archive.native.client import AeronClient

_ABANDONED: list[object] = []


def abandon_after_fork(*objects: object) -> None:
    """Never close, finalize or destroy `objects` in this (forked child) process."""
    for obj in objects:
        _ABANDONED.append(obj)
        if isinstance(obj, AeronClient):
            obj.detach_finalizer()
        with contextlib.suppress(Exception):  # not CPython: the list reference still covers the child's own run
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
