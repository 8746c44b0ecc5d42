"""Finishing an interrupted commit forward: the framing arithmetic and the prefix comparison (no archive).

Against a real archive (a commit killed mid-publish, then committed again with the same or other rows):
tests/system/test_sink_commit.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aeron_archive_spark.connector.sink.resume import Resume, find_resume, framed_lengths, message_positions

MAX_PAYLOAD = 1408 - 32  # mtu 1408
TERM = 64 * 1024


def test_framed_lengths_follow_aerons_fragmentation():
    lengths = np.array([0, 1, 32, 33, MAX_PAYLOAD, MAX_PAYLOAD + 1, 2 * MAX_PAYLOAD, 5000])
    whole = 1408  # 1376 + 32, already aligned
    assert framed_lengths(lengths, MAX_PAYLOAD).tolist() == [
        32, 64, 64, 96, whole, whole + 64, 2 * whole, 3 * whole + ((5000 - 3 * MAX_PAYLOAD + 32 + 31) // 32) * 32,
    ]


def test_message_positions_skip_to_the_next_term_when_a_message_does_not_fit():
    lengths = np.array([100, 4000, 100])
    start = TERM - 300  # 128 bytes fit, then 4000 bytes (3 fragments) do not: padded to the term end
    positions = message_positions(lengths, start, TERM, MAX_PAYLOAD)
    assert positions[0] == start and positions[1] == TERM
    assert positions[2] == TERM + int(framed_lengths(np.array([4000]), MAX_PAYLOAD)[0])
    assert positions[3] == positions[2] + 160


def _recorded(values, positions, reserved=None):
    reserved = reserved if reserved is not None else [0] * len(values)
    return [pa.record_batch([pa.array(positions, pa.int64()), pa.array(reserved, pa.int64()),
                             pa.array(values, pa.binary())], names=["position", "reservedValue", "value"])]


def test_find_resume_keeps_an_exact_prefix_and_refuses_anything_else():
    values = [b"a" * 10, b"b" * 2000, b"", b"c" * 40]
    batch = pa.array(values, pa.binary())
    reserved = np.array([1, 2, 3, 4], dtype=np.int64)
    start = 4096
    expected = message_positions(np.array([len(v) for v in values]), start, TERM, MAX_PAYLOAD)
    stop = int(expected[2]) + 64  # two whole messages, then part of the third (or its padding)
    prefix = _recorded(values[:2], expected[:2].tolist(), [1, 2])
    assert find_resume(prefix, batch, reserved, start, stop, TERM, MAX_PAYLOAD) == Resume(2, int(expected[2]))
    # nothing whole recorded: go on at the start
    assert find_resume([], batch, reserved, start, start + 32, TERM, MAX_PAYLOAD) == Resume(0, start)
    # the whole batch recorded
    full = _recorded(values, expected[:4].tolist(), [1, 2, 3, 4])
    assert find_resume(full, batch, reserved, start, int(expected[4]), TERM, MAX_PAYLOAD) == Resume(4, int(expected[4]))
    # other payload, other reserved value, other position, more rows than the batch, a stop before the prefix end
    assert find_resume(_recorded([b"x" * 10, values[1]], expected[:2].tolist(), [1, 2]), batch, reserved, start,
                       stop, TERM, MAX_PAYLOAD) is None
    assert find_resume(_recorded(values[:2], expected[:2].tolist(), [1, 9]), batch, reserved, start, stop, TERM,
                       MAX_PAYLOAD) is None
    assert find_resume(_recorded(values[:2], [start, int(expected[1]) + 32], [1, 2]), batch, reserved, start, stop,
                       TERM, MAX_PAYLOAD) is None
    assert find_resume(_recorded(values + [b"z"], expected.tolist(), [1, 2, 3, 4, 0]), batch, reserved, start,
                       10**9, TERM, MAX_PAYLOAD) is None
    assert find_resume(prefix, batch, reserved, start, int(expected[2]) - 32, TERM, MAX_PAYLOAD) is None
