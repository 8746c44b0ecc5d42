"""TermAppender against a real embedded media driver: blocks written into the term appear to an IPC image exactly
as `offer_block` would make them appear, nothing is visible before it is published, and terms rotate."""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator

import pytest

from aeron_archive_spark.archive.native import AeronClient, ExclusivePublication, Image, NativeAeronError, TermAppender
from aeron_archive_spark.archive.native.term_appender import _map_flags
from tests.unit.test_native import wait_until

HEADER = struct.Struct("<iBBHiiiiq")
TERM_LENGTH = 64 * 1024
_stream_ids = iter(range(7301, 7400))


@pytest.fixture(scope="module")
def client(aeron_dir: str) -> Iterator[AeronClient]:
    with AeronClient(aeron_dir, client_name="test-term-appender") as aeron:
        yield aeron


@pytest.fixture(params=["sparse", "non-sparse"])
def pair(
    request: pytest.FixtureRequest, client: AeronClient, aeron_dir: str
) -> Iterator[tuple[ExclusivePublication, Image, TermAppender]]:
    """An IPC publication, its image and an appender; every test runs on a sparse log and on a non-sparse one (the
    driver allocates its pages when it adds it; the appender's own mapping is then populated when it is made)."""
    stream_id = next(_stream_ids)
    sparse = "true" if request.param == "sparse" else "false"
    channel = f"aeron:ipc?term-length={TERM_LENGTH}|init-term-id=7|term-id=9|term-offset=1024|sparse={sparse}"
    with (
        client.add_subscription("aeron:ipc", stream_id) as subscription,
        client.add_exclusive_publication(channel, stream_id) as publication,
    ):
        holder: list[Image] = []

        def found() -> bool:
            image = subscription.image_by_session_id(publication.session_id)
            if image is not None:
                holder.append(image)
            return bool(holder)

        wait_until(found, "the image")
        appender = TermAppender(publication, aeron_dir)
        yield publication, holder[0], appender
        appender.close()
        holder[0].close()


def frames(appender: TermAppender, lengths: list[int]) -> bytes:
    """DATA frames of the given payload lengths at the appender's tail, this publication's ids, payload bytes = i."""
    out = bytearray()
    offset = appender.term_offset
    for i, length in enumerate(lengths):
        frame = bytearray((length + 32 + 31) & ~31)
        HEADER.pack_into(frame, 0, length + 32, 0, 0xC0, 1, offset, appender.session_id, appender.stream_id,
                         appender.term_id, i)
        frame[32 : 32 + length] = bytes([i & 0xFF]) * length
        out += frame
        offset += len(frame)
    return bytes(out)


def write(appender: TermAppender, block: bytes) -> int:
    """Lay `block` into the term the replay's way (first word held back), then publish it."""
    region = appender.term_region(len(block))
    region[8:] = block[8:]
    region.release()
    return appender.publish_block(len(block), struct.unpack_from("<q", block)[0])


def polled(image: Image, until: int) -> list[bytes]:
    seen: list[bytes] = []

    def on_block(block: memoryview, _session_id: int, _term_id: int) -> None:
        seen.append(bytes(block))

    wait_until(lambda: image.block_poll(on_block, TERM_LENGTH) >= 0 and image.position >= until, f"image at {until}")
    return seen


def test_starts_at_the_publications_position(pair) -> None:
    publication, _image, appender = pair
    assert appender.position == publication.position == 2 * TERM_LENGTH + 1024
    assert (appender.term_id, appender.term_offset) == (9, 1024)
    assert appender.available_window == publication.position_limit - appender.position > 0


def test_nothing_is_visible_before_publish_and_the_block_exactly_after(pair) -> None:
    _publication, image, appender = pair
    block = frames(appender, [100, 992, 0, 31])
    start = appender.position
    region = appender.term_region(len(block))
    region[8:] = block[8:]
    region.release()
    assert image.block_poll(lambda *_: pytest.fail("visible before publish"), TERM_LENGTH) == 0
    assert appender.publish_block(len(block), struct.unpack_from("<q", block)[0]) == start + len(block)
    assert b"".join(polled(image, start + len(block))) == block
    assert image.position == start + len(block)


def test_padding_ends_the_term_and_the_next_block_starts_the_next(pair) -> None:
    _publication, image, appender = pair
    start = appender.position
    block = frames(appender, [992] * 40)
    write(appender, block)
    remaining = TERM_LENGTH - appender.term_offset
    end_of_term = appender.append_padding(remaining)
    assert end_of_term == 3 * TERM_LENGTH
    assert appender.ensure_term() and (appender.term_id, appender.term_offset) == (10, 0)
    polled(image, end_of_term)
    second = frames(appender, [64] * 10)
    write(appender, second)
    assert b"".join(polled(image, end_of_term + len(second))) == second
    assert image.position == appender.position == end_of_term + len(second) > start


def test_many_terms_rotate_through_all_partitions(pair) -> None:
    _publication, image, appender = pair
    seen = 0
    for _ in range(7):  # more than three terms: every partition is reused
        while appender.term_offset + 4096 <= TERM_LENGTH:
            wait_until(lambda: appender.available_window > 0 or image.block_poll(lambda *_: None, TERM_LENGTH) < 0,
                       "window")
            block = frames(appender, [992] * 4)
            write(appender, block)
            seen += len(b"".join(polled(image, appender.position)))
        if appender.term_offset < TERM_LENGTH:
            appender.append_padding(TERM_LENGTH - appender.term_offset)
            polled(image, appender.position)
        assert appender.ensure_term()
    assert image.position == appender.position and seen > 6 * (TERM_LENGTH - 4096)


def test_a_pad_in_the_middle_of_the_term_is_padding_to_the_image_and_the_next_block_follows(pair) -> None:
    _publication, image, appender = pair
    before = frames(appender, [100] * 3)
    write(appender, before)
    pad_at = appender.position
    long_pad = TERM_LENGTH // 8 + 1000  # longer than the C client's append_padding accepts in this term
    assert appender.append_padding(long_pad) == pad_at + ((long_pad + 31) & ~31)
    after = frames(appender, [200] * 2)
    write(appender, after)
    seen = polled(image, appender.position)
    pads = [block for block in seen if HEADER.unpack_from(block)[3] == 0]
    assert len(pads) == 1
    length, version, flags, frame_type, term_offset, session_id, stream_id, term_id, reserved = HEADER.unpack_from(
        pads[0])
    assert (length, version, flags, frame_type, reserved) == (long_pad, 0, 0xC0, 0, 0)
    assert (term_offset, session_id, stream_id, term_id) == (
        pad_at % TERM_LENGTH, appender.session_id, appender.stream_id, appender.term_id)
    assert b"".join(block for block in seen if block is not pads[0]) == before + after
    assert image.position == appender.position


def test_a_pad_that_does_not_fit_in_the_term_is_refused(pair) -> None:
    _publication, _image, appender = pair
    with pytest.raises(ValueError, match="does not fit"):
        appender.append_padding(TERM_LENGTH - appender.term_offset + 1)
    with pytest.raises(ValueError, match="does not fit"):
        appender.append_padding(31)
    with pytest.raises(ValueError, match="do not fit"):
        appender.term_region(TERM_LENGTH)


def test_a_log_buffer_that_is_not_the_publications_is_refused(pair, tmp_path) -> None:
    publication, _image, _appender = pair
    with pytest.raises(NativeAeronError, match="cannot open the log buffer"):
        TermAppender(publication, str(tmp_path))


def test_only_a_log_whose_pages_are_all_allocated_is_populated_when_mapped(tmp_path) -> None:
    sparse = tmp_path / "sparse.logbuffer"
    with open(sparse, "wb") as f:
        f.truncate(4 * 1024 * 1024)
    dense = tmp_path / "dense.logbuffer"
    dense.write_bytes(bytes(4 * 1024 * 1024))
    assert _map_flags(os.stat(sparse)) == mmap.MAP_SHARED
    assert _map_flags(os.stat(dense)) == mmap.MAP_SHARED | mmap.MAP_POPULATE


def test_a_non_sparse_log_is_mapped_populated(client: AeronClient, aeron_dir: str) -> None:
    """The driver allocates a non-sparse log when it adds the publication; the appender's mapping then comes whole."""
    stream_id = next(_stream_ids)
    channel = f"aeron:ipc?term-length={TERM_LENGTH}|sparse=false"
    with client.add_exclusive_publication(channel, stream_id) as publication:
        path = os.path.join(aeron_dir, "publications", f"{publication.registration_id}.logbuffer")
        assert _map_flags(os.stat(path)) & mmap.MAP_POPULATE
        appender = TermAppender(publication, aeron_dir)
        try:
            assert appender.position == publication.position
        finally:
            appender.close()
