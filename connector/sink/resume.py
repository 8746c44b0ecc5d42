"""Finishing an interrupted commit forward, so readers never see its rows taken back.

A commit that dies while publishing leaves a `pending` record and part of its batch in the target recording, where
a reader tailing the target may already have read it. Truncating that part and publishing the batch again (the
undo path) takes back rows a reader has seen. But Spark commits the same batch again after a restart (the same
offsets, so for a deterministic query the same rows in the same partitions), and the sink publishes rows in
partition order with a framing that depends only on the positions and the message lengths. So when the rows already
recorded are exactly the first rows of the batch being committed again, at exactly the positions this commit would
give them, the commit keeps them and publishes only the rest: every reader sees each row once, and nothing it saw is
ever taken back. Anything else (other rows, other order, other positions) falls back to the undo path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from aeron_archive_spark.archive.storage import frames


@dataclass(frozen=True, slots=True)
class Resume:
    """`rows` of the batch are recorded, whole, where this commit would put them; publishing goes on at `position`."""

    rows: int
    position: int


def framed_lengths(lengths: np.ndarray, max_payload: int) -> np.ndarray:
    """Bytes each message takes in a term, as Aeron's appenders lay them out (fragments of max_payload)."""
    lengths = lengths.astype(np.int64)
    full = lengths // max_payload
    rest = lengths - full * max_payload
    whole = frames.align(max_payload + frames.HEADER_LENGTH, frames.FRAME_ALIGNMENT)
    tail = (rest + (frames.HEADER_LENGTH + frames.FRAME_ALIGNMENT - 1)) & -frames.FRAME_ALIGNMENT
    # a message of n * max_payload bytes has no empty last fragment; an empty message is one header-only frame
    tail = np.where((rest == 0) & (full > 0), 0, tail)
    framed: np.ndarray = full * whole + tail
    return framed


def message_positions(lengths: np.ndarray, start: int, term_length: int, max_payload: int) -> np.ndarray:
    """Start position of each message published from `start`, then the end of the last (n + 1 values).

    A message that does not fit in the rest of its term starts at the next term (the appender pads the rest).
    """
    framed = framed_lengths(lengths, max_payload)
    positions = np.empty(len(framed) + 1, dtype=np.int64)
    position = start
    mask = term_length - 1
    for i, length in enumerate(framed.tolist()):
        if (position & mask) + length > term_length:
            position = (position | mask) + 1
        positions[i] = position
        position += length
    positions[len(framed)] = position
    return positions


def find_resume(
    recorded: Iterable[pa.RecordBatch],
    batch_values: pa.Array,
    batch_reserved: np.ndarray,
    start: int,
    stop: int,
    term_length: int,
    max_payload: int,
) -> Resume | None:
    """Where to go on if the whole messages recorded in `[start, stop)` are the batch's first rows, else None.

    `recorded`: batches of the source's columns (`position`, `reservedValue`, `value`) read from the target over
    `[start, stop)`, a message left open at `stop` dropped. `batch_values` / `batch_reserved`: every row of the
    batch, in publishing order.
    """
    values: list[pa.Array] = []
    reserved: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    for batch in recorded:
        values.append(batch.column("value"))
        reserved.append(batch.column("reservedValue").to_numpy(zero_copy_only=False))
        positions.append(batch.column("position").to_numpy(zero_copy_only=False))
    count = sum(len(v) for v in values)
    if count > len(batch_values):
        return None
    lengths = np.diff(
        np.frombuffer(batch_values.buffers()[1], dtype=np.int32, count=count + 1, offset=batch_values.offset * 4)
    )
    expected = message_positions(lengths, start, term_length, max_payload)
    if count:
        got_values = pa.concat_arrays(values).cast(pa.binary())
        if not got_values.equals(batch_values.slice(0, count)):
            return None
        if not np.array_equal(np.concatenate(reserved).astype(np.int64), batch_reserved[:count]):
            return None
        if not np.array_equal(np.concatenate(positions).astype(np.int64), expected[:count]):
            return None
    position = int(expected[count])  # the end of the last whole message (or `start`)
    if position > stop:
        return None
    return Resume(count, position)
