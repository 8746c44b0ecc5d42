"""The one-pass RecordingDescriptor decode (catalog entries and listing responses) against the generic SBE codec."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace

import pytest

from aeron_archive_spark.archive.client.aeron_archive import DescriptorMessage, descriptor_from_message
from aeron_archive_spark.archive.client.response_poller import ResponsePoller
from aeron_archive_spark.archive.codecs import CODEC, CodecError
from aeron_archive_spark.archive.descriptor import (
    DESCRIPTOR_BLOCK,
    DescriptorDecodeError,
    RecordingDescriptor,
    descriptor_from_body,
)
from aeron_archive_spark.archive.server.control_response_proxy import ControlResponseProxy

HEADER = struct.Struct("<HHHH")


def random_body(rng: random.Random, extra_block: bytes = b"", padding: int = 0) -> tuple[tuple[object, ...], bytes]:
    """Field values and the body bytes (block, any newer block fields, three var fields, padding)."""
    block = tuple(rng.randrange(-(2**63), 2**63) for _ in range(7)) + tuple(
        rng.randrange(-(2**31), 2**31) for _ in range(6)
    )
    texts = tuple("".join(rng.choice("aeron:udp?=|,.0123456789") for _ in range(rng.randrange(0, 300))) for _ in "abc")
    var = b"".join(struct.pack("<I", len(t)) + t.encode() for t in texts)
    return block + texts, DESCRIPTOR_BLOCK.pack(*block) + extra_block + var + bytes(padding)


@pytest.mark.parametrize("seed", range(20))
def test_decoded_in_one_pass_as_the_generic_codec_decodes_it(seed: int) -> None:
    rng = random.Random(seed)
    values, body = random_body(rng, padding=rng.randrange(0, 64))
    assert descriptor_from_body(body, 0, len(body)) == RecordingDescriptor(*values)
    message = ControlResponseProxy().recording_descriptor(values[0], values[1], body[16:])  # type: ignore[arg-type]
    generic = CODEC.decode(message)
    fast = ResponsePoller.decode(SimpleNamespace(_codec=CODEC), memoryview(message))  # type: ignore[arg-type]
    assert isinstance(fast, DescriptorMessage)
    assert (fast.control_session_id, fast.correlation_id) == (generic.control_session_id, generic.correlation_id)
    assert descriptor_from_message(fast) == descriptor_from_message(generic) == RecordingDescriptor(*values)


def test_a_newer_senders_longer_block_is_skipped_to_its_var_fields() -> None:
    values, body = random_body(random.Random(1), extra_block=b"\x7f" * 8)
    assert descriptor_from_body(body, 0, len(body), block_length=DESCRIPTOR_BLOCK.size + 8) == RecordingDescriptor(
        *values
    )
    message = HEADER.pack(DESCRIPTOR_BLOCK.size + 8, 22, 101, 14) + body
    fast = ResponsePoller.decode(SimpleNamespace(_codec=CODEC), memoryview(message))  # type: ignore[arg-type]
    assert descriptor_from_message(fast) == RecordingDescriptor(*values)


def test_a_truncated_body_is_refused_never_read_past_its_end() -> None:
    values, body = random_body(random.Random(2))
    end = len(body)
    for cut in range(end):  # every prefix: inside the block, a var length, or a var field
        with pytest.raises(DescriptorDecodeError):
            descriptor_from_body(body + b"\0" * 64, 0, cut)  # the bytes after `cut` are not the descriptor's
    with pytest.raises(DescriptorDecodeError):
        descriptor_from_body(body, 0, end, block_length=DESCRIPTOR_BLOCK.size - 8)  # an older, shorter block
    message = ControlResponseProxy().recording_descriptor(1, 2, body[16:])
    with pytest.raises(CodecError, match="RecordingDescriptor"):
        ResponsePoller.decode(SimpleNamespace(_codec=CODEC), memoryview(message[:-1]))  # type: ignore[arg-type]


def test_an_older_senders_shorter_block_goes_through_the_codec() -> None:
    values, body = random_body(random.Random(3))
    short = DESCRIPTOR_BLOCK.size - 8  # the last two int32 fields missing: the codec fills them in as null
    message = HEADER.pack(short, 22, 101, 14) + body[:short] + body[DESCRIPTOR_BLOCK.size :]
    decoded = ResponsePoller.decode(SimpleNamespace(_codec=CODEC), memoryview(message))  # type: ignore[arg-type]
    assert not isinstance(decoded, DescriptorMessage)
    assert decoded == CODEC.decode(message)
    assert (decoded.recording_id, decoded.original_channel) == (values[2], values[14])


def test_other_responses_still_go_through_the_codec() -> None:
    ok = ControlResponseProxy().control_response(7, 8, 9, 0, "")
    decoded = ResponsePoller.decode(SimpleNamespace(_codec=CODEC), memoryview(ok))  # type: ignore[arg-type]
    assert decoded == CODEC.decode(ok)
