"""ExclusivePublication.append_padding past the C client's limit, against a real embedded media driver (issue 11).

The C client refuses PAD lengths above max_message_length; Java accepts up to the max framed length, and the PAD
an appender leaves at a term end when a near-max message does not fit is longer than max_message_length. The
native layer writes such a PAD through the C appender's end-of-term path: one PAD frame of exactly that length.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from aeron_archive_spark.archive.native import (
    AeronClient,
    ExclusivePublication,
    Image,
    Subscription,
)
from tests.unit.test_native import offer_until_accepted, wait_until

HEADER = struct.Struct("<iBBhiiiiq")  # length, version, flags, type, term offset, session, stream, term id, reserved
HEADER_LENGTH = 32
HDR_TYPE_PAD = 0
HDR_TYPE_DATA = 1
TERM_LENGTH = 64 * 1024
CHANNEL = f"aeron:ipc?term-length={TERM_LENGTH}"
TIMEOUT_S = 10.0

accepted = offer_until_accepted


def framed(length: int, max_payload_length: int) -> int:
    """What a message takes in a term (this test's own reckoning): full MTU fragments, then the aligned rest."""
    full, rest = divmod(length, max_payload_length)
    return full * (max_payload_length + HEADER_LENGTH) + ((rest + HEADER_LENGTH + 31) & ~31 if rest or not full else 0)




@pytest.fixture(scope="module")
def client(aeron_dir: str) -> Iterator[AeronClient]:
    with AeronClient(aeron_dir, client_name="test-native-padding") as aeron:
        yield aeron


_stream_ids = iter(range(7101, 7200))


@pytest.fixture
def pair(client: AeronClient) -> Iterator[tuple[ExclusivePublication, Subscription, Image]]:
    stream_id = next(_stream_ids)
    with (
        client.add_subscription("aeron:ipc", stream_id) as subscription,
        client.add_exclusive_publication(CHANNEL, stream_id) as publication,
    ):
        holder: list[Image] = []

        def found() -> bool:
            image = subscription.image_by_session_id(publication.session_id)
            if image is not None:
                holder.append(image)
            return bool(holder)

        wait_until(found, "the image")
        yield publication, subscription, holder[0]
        holder[0].close()


def advance_to(publication: ExclusivePublication, image: Image, term_offset: int) -> None:
    """Offer unfragmented messages until the publication stands at `term_offset` of its first term.

    The image is consumed as it goes (an IPC publication's window is half a term) and stands there too.
    """
    mtu = publication.max_payload_length + HEADER_LENGTH
    while publication.position < term_offset:
        frame = min(mtu, term_offset - publication.position)
        accepted(lambda length=frame - HEADER_LENGTH: publication.offer(bytes(length)), "offer")
        image.block_poll(lambda *_: None, TERM_LENGTH)
    assert publication.position == term_offset
    wait_until(lambda: image.block_poll(lambda *_: None, TERM_LENGTH) >= 0 and image.position == term_offset, "drain")


def frames_of(image: Image, end: int) -> list[tuple[int, int, int]]:
    """(position, frame length, type) of every frame of the image up to `end`, read with block polls."""
    found: list[tuple[int, int, int]] = []

    def on_block(block: memoryview, _session_id: int, _term_id: int) -> None:
        offset = 0
        while offset < len(block):
            length, _, _, frame_type, term_offset = HEADER.unpack_from(block, offset)[:5]
            found.append((term_offset, length, frame_type))
            offset += (length + 31) & ~31

    def polled() -> bool:
        image.block_poll(on_block, TERM_LENGTH)
        return image.position >= end

    wait_until(polled, f"the image to reach {end}")
    return found


def test_the_framed_length_matches_what_the_c_appender_takes(
    pair: tuple[ExclusivePublication, Subscription, Image],
) -> None:
    from aeron_archive_spark.archive.native.publications import fragmented_length

    publication, _, image = pair
    for length in (0, 1, 1376, 1377, 5000, publication.max_message_length):
        before = publication.position
        after = accepted(lambda: publication.offer(bytes(length)), "offer")  # noqa: B023
        assert (
            after - before
            == fragmented_length(length, publication.max_payload_length)
            == framed(length, publication.max_payload_length)
        ), length
        frames_of(image, after)


def test_a_pad_longer_than_max_message_length_ending_the_term_is_one_pad_frame(
    pair: tuple[ExclusivePublication, Subscription, Image],
) -> None:
    publication, _, image = pair
    pad = 8320  # what a max-size message (framed 8384 bytes) leaves when 8320 bytes remain in a 64 KiB term
    assert pad - HEADER_LENGTH > publication.max_message_length == TERM_LENGTH // 8
    advance_to(publication, image, TERM_LENGTH - pad)
    assert accepted(lambda: publication.append_padding(pad - HEADER_LENGTH), "append_padding") == TERM_LENGTH
    assert publication.position == TERM_LENGTH
    after = accepted(lambda: publication.offer(b"next term"), "offer")
    assert after == TERM_LENGTH + 64  # no ADMIN_ACTION first: the term had already rotated
    found = frames_of(image, after)
    assert found[-2:] == [(TERM_LENGTH - pad, pad, HDR_TYPE_PAD), (0, HEADER_LENGTH + 9, HDR_TYPE_DATA)]


def test_the_longest_pad_an_appender_can_leave_is_written(
    pair: tuple[ExclusivePublication, Subscription, Image],
) -> None:
    publication, _, image = pair
    longest = framed(publication.max_message_length, publication.max_payload_length) - 32
    advance_to(publication, image, TERM_LENGTH - longest)
    assert accepted(lambda: publication.append_padding(longest - HEADER_LENGTH), "append_padding") == TERM_LENGTH
    assert frames_of(image, TERM_LENGTH)[-1] == (TERM_LENGTH - longest, longest, HDR_TYPE_PAD)


def test_long_pads_the_c_client_cannot_write_as_one_frame_are_refused(
    pair: tuple[ExclusivePublication, Subscription, Image],
) -> None:
    publication, _, image = pair
    max_framed = framed(publication.max_message_length, publication.max_payload_length)
    advance_to(publication, image, 1024)
    with pytest.raises(ValueError, match="can only be written to end the term"):
        publication.append_padding(8200)  # a long PAD inside the term
    with pytest.raises(ValueError, match="max framed length"):
        publication.append_padding(max_framed + 1)
    advance_to(publication, image, TERM_LENGTH - max_framed)
    with pytest.raises(ValueError, match="no message of at most"):
        publication.append_padding(max_framed - HEADER_LENGTH)  # longer than any appender leaves
    assert publication.position == TERM_LENGTH - max_framed
    assert accepted(lambda: publication.append_padding(100), "append_padding") == TERM_LENGTH - max_framed + 160


def test_shortest_message_longer_than() -> None:
    from aeron_archive_spark.archive.native.publications import fragmented_length, shortest_message_longer_than

    assert shortest_message_longer_than(8320, 8192, 1376) == 8129  # framed: 5 x 1408 + align(1281) = 8352
    assert fragmented_length(8128, 1376) == 8320
    assert shortest_message_longer_than(8384, 8192, 1376) == -1
