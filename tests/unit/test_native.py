"""aeron_archive_spark.archive.native against a real embedded C media driver.

No mocks; every wait is bounded by a deadline.
"""

from __future__ import annotations

import gc
import itertools
import os
import pathlib
import queue
import re
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from aeron_archive_spark.archive.native import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    COUNTER_MAX_KEY_LENGTH,
    COUNTER_RECORD_ALLOCATED,
    NOT_CONNECTED,
    PUBLICATION_CLOSED,
    AeronClient,
    ControlledAction,
    EmbeddedMediaDriver,
    ExclusivePublication,
    HeaderValues,
    Image,
    NativeAeronError,
    Subscription,
    get_lib,
)
from aeron_archive_spark.archive.native.driver import default_driver_parent, default_settings, filesystem_type

HEADER = struct.Struct("<iBBhiiiiq")  # Aeron data frame header: length, version, flags, type, offset, session, stream,
#                                      term id, reserved value
HEADER_LENGTH = 32
UNFRAGMENTED = 0xC0
HDR_TYPE_PAD = 0
HDR_TYPE_DATA = 1
TIMEOUT_S = 10.0


def align32(length: int) -> int:
    return (length + 31) & ~31


def wait_until(predicate: Callable[[], object], what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def offer_until_accepted(offer: Callable[[], int], what: str = "offer") -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        result = offer()
        if result >= 0:
            return result
        assert result in (BACK_PRESSURED, ADMIN_ACTION, NOT_CONNECTED), f"{what} failed with {result}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out on {what}: {result}")
        time.sleep(0.0005)


def poll_messages(
    poll: Callable[[Callable[[memoryview, HeaderValues], None], int], int], count: int
) -> list[tuple[bytes, HeaderValues]]:
    received: list[tuple[bytes, HeaderValues]] = []

    def on_message(data: memoryview, header: HeaderValues) -> None:
        received.append((bytes(data), header))

    wait_until(lambda: poll(on_message, 100) >= 0 and len(received) >= count, f"{count} messages")
    return received


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def connected_image(subscription: Subscription, session_id: int) -> Image:
    holder: list[Image] = []

    def found() -> bool:
        image = subscription.image_by_session_id(session_id)
        if image is not None:
            holder.append(image)
        return bool(holder)

    wait_until(found, f"image for session {session_id}")
    return holder[0]


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedMediaDriver]:
    aeron_dir = tmp_path_factory.mktemp("native") / "aeron"
    # A short driver timer makes images of closed publications go unavailable in milliseconds, not a second.
    with EmbeddedMediaDriver(
        str(aeron_dir), settings={"AERON_TIMER_INTERVAL": "20ms", "AERON_PUBLICATION_LINGER_TIMEOUT": "200ms"}
    ) as media_driver:
        yield media_driver


@pytest.fixture(scope="module")
def client(driver: EmbeddedMediaDriver) -> Iterator[AeronClient]:
    with AeronClient(driver.aeron_dir, client_name="test-native") as aeron:
        yield aeron


_stream_ids = itertools.count(1001)


@pytest.fixture
def stream_id() -> int:
    return next(_stream_ids)


def test_driver_settings_do_not_leak_into_the_environment(driver: EmbeddedMediaDriver) -> None:
    assert "AERON_TIMER_INTERVAL" not in os.environ
    assert "AERON_TERM_BUFFER_SPARSE_FILE" not in os.environ
    assert os.path.isdir(driver.aeron_dir)


def test_client_identity(client: AeronClient, driver: EmbeddedMediaDriver) -> None:
    assert client.aeron_dir == driver.aeron_dir
    assert client.client_name == "test-native"
    assert client.client_id >= 0
    first, second = client.next_correlation_id(), client.next_correlation_id()
    assert second > first
    assert not client.is_closed


def test_ipc_fragment_poll_reassembles_large_and_empty_messages(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc?term-length=1m", stream_id
    ) as publication:
        wait_until(lambda: publication.is_connected and subscription.is_connected, "IPC connection")
        assert publication.max_payload_length < 100 * 1024 < publication.max_message_length
        large = np.random.default_rng(7).integers(0, 256, 100 * 1024, dtype=np.uint8)
        payloads: list[bytes] = [b"first", b"", large.tobytes(), b"after the large one"]
        sources: list[object] = [b"first", bytearray(), large, memoryview(b"after the large one")]
        ends = [offer_until_accepted(lambda s=s: publication.offer(s, reserved_value=11)) for s in sources]

        received = poll_messages(subscription.poll, len(payloads))

        assert [data for data, _ in received] == payloads
        starts = [0, *ends[:-1]]
        for (data, header), start, end in zip(received, starts, ends, strict=True):
            assert header.position == end
            assert header.start_position == start
            assert header.frame_length == HEADER_LENGTH + len(data)
            assert header.flags == UNFRAGMENTED
            assert header.type == HDR_TYPE_DATA
            assert header.session_id == publication.session_id
            assert header.stream_id == stream_id
            assert header.initial_term_id == publication.initial_term_id
            assert header.reserved_value == 11
        assert ends[1] - ends[0] == HEADER_LENGTH  # the 0-byte message is a bare header


def test_fragment_poll_without_header_passes_none_and_the_same_messages(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc?term-length=1m", stream_id
    ) as publication:
        wait_until(lambda: publication.is_connected and subscription.is_connected, "IPC connection")
        first, second = [b"a", bytes(range(256)) * 400], [b"", b"last"]  # the large one is fragmented
        for payload in first:
            offer_until_accepted(lambda p=payload: publication.offer(p))
        received: list[tuple[bytes, object]] = []

        def without(data: memoryview, header: object) -> None:
            received.append((bytes(data), header))

        wait_until(lambda: subscription.poll(without, 10, with_header=False) >= 0 and len(received) >= 2, "two")
        for payload in second:  # then with headers again: the flag is per poll, not sticky
            offer_until_accepted(lambda p=payload: publication.offer(p))
        with_headers = poll_messages(subscription.poll, 2)
        assert received == [(first[0], None), (first[1], None)]
        assert [data for data, _ in with_headers] == second
        assert all(header.session_id == publication.session_id for _, header in with_headers)


def test_block_poll_delivers_whole_frames(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc?term-length=64k", stream_id
    ) as publication:
        image = connected_image(subscription, publication.session_id)
        payloads = [bytes([i]) * size for i, size in enumerate([1, 31, 32, 33, 100, 0, 1000])]
        for i, payload in enumerate(payloads):
            offer_until_accepted(lambda p=payload, r=i: publication.offer(p, reserved_value=r + 1))
        end = publication.position

        # A limit smaller than the first frame delivers nothing; a limit of two aligned frames delivers exactly two.
        assert image.block_poll(lambda *_: pytest.fail("no block expected"), 16) == 0
        two_frames = align32(HEADER_LENGTH + 1) + align32(HEADER_LENGTH + 31)
        blocks: list[tuple[bytes, int, int]] = []
        assert image.block_poll(lambda b, s, t: blocks.append((bytes(b), s, t)), two_frames + 31) == two_frames
        wait_until(lambda: image.block_poll(lambda b, s, t: blocks.append((bytes(b), s, t)), 1 << 20) >= 0
                   and image.position == end, "the rest of the frames")

        data = b"".join(block for block, _, _ in blocks)
        assert len(data) == end
        assert all(session == publication.session_id for _, session, _ in blocks)
        assert all(term == publication.initial_term_id for _, _, term in blocks)
        offset = 0
        for i, payload in enumerate(payloads):
            length, version, flags, type_, term_offset, session, stream, term_id, reserved = HEADER.unpack_from(
                data, offset
            )
            assert (length, version, flags, type_) == (HEADER_LENGTH + len(payload), 0, UNFRAGMENTED, HDR_TYPE_DATA)
            assert (term_offset, session, stream, term_id) == (
                offset, publication.session_id, stream_id, publication.initial_term_id
            )
            assert reserved == i + 1
            assert data[offset + HEADER_LENGTH:offset + length] == payload
            offset += align32(length)
        assert offset == end
        image.close()


def test_subscription_block_poll_and_views_are_zero_copy_numpy_friendly(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc?term-length=64k", stream_id
    ) as publication:
        wait_until(lambda: subscription.image_count == 1, "image")
        offer_until_accepted(lambda: publication.offer(np.arange(16, dtype=np.int64)))
        totals: list[int] = []

        def on_block(block: memoryview, session_id: int, term_id: int) -> None:
            assert isinstance(block, memoryview) and block.readonly
            words = np.frombuffer(block, dtype=np.int64, offset=HEADER_LENGTH, count=16)
            totals.append(int(words.sum()))

        wait_until(lambda: subscription.block_poll(on_block, 1 << 16) > 0, "block")
        assert totals == [sum(range(16))]


def test_exclusive_publication_at_recorded_position_replays_captured_frames(
    client: AeronClient, stream_id: int
) -> None:
    replay_stream_id = stream_id + 50_000
    term_length = 64 * 1024
    payloads = [i.to_bytes(4, "little") * 250 for i in range(100)]  # 1000-byte messages, 1056-byte frames
    with client.add_subscription("aeron:ipc", stream_id) as source_sub, client.add_exclusive_publication(
        f"aeron:ipc?term-length={term_length}", stream_id
    ) as source:
        image = connected_image(source_sub, source.session_id)
        captured = bytearray()
        ends: list[int] = []
        for payload in payloads:
            ends.append(offer_until_accepted(lambda p=payload: source.offer(p)))
            while image.position < ends[-1]:  # capture as we go so the publisher is never back pressured
                image.block_poll(lambda block, s, t: captured.extend(block), 1 << 20)
        assert len(captured) == source.position == ends[-1] > term_length  # includes the end-of-term PAD frame
        initial_term_id = source.initial_term_id
        image.close()

    first = 70
    start = ends[first - 1]
    assert start > term_length, "replay should start in the second term"
    block = bytearray(captured[start:ends[-1]])

    with client.add_subscription("aeron:ipc", replay_stream_id) as replay_sub, client.add_exclusive_publication(
        f"aeron:ipc?term-length={term_length}|init-term-id={initial_term_id}"
        f"|term-id={initial_term_id + start // term_length}|term-offset={start % term_length}",
        replay_stream_id,
    ) as replay:
        assert replay.position == start
        assert replay.initial_term_id == initial_term_id
        offset = 0
        while offset < len(block):  # point the captured frames at the new publication
            frame_length = struct.unpack_from("<i", block, offset)[0]
            struct.pack_into("<ii", block, offset + 12, replay.session_id, replay_stream_id)
            offset += align32(frame_length)
        replay_image = connected_image(replay_sub, replay.session_id)
        assert replay_image.join_position == start

        assert offer_until_accepted(lambda: replay.offer_block(block), "offer_block") == ends[-1]

        received = poll_messages(replay_sub.poll, len(payloads) - first)
        assert [data for data, _ in received] == payloads[first:]
        assert [header.position for _, header in received] == ends[first:]
        assert [header.start_position for _, header in received] == ends[first - 1:-1]
        assert all(header.session_id == replay.session_id for _, header in received)
        replay_image.close()


def test_offer_block_rejects_a_block_shorter_than_a_header(client: AeronClient, stream_id: int) -> None:
    with client.add_exclusive_publication("aeron:ipc", stream_id) as publication, pytest.raises(
        ValueError, match="at least one 32-byte frame"
    ):
        publication.offer_block(b"")


def test_offer_block_rejects_frames_of_another_session(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id), client.add_exclusive_publication(
        "aeron:ipc", stream_id
    ) as publication:
        wait_until(lambda: publication.is_connected, "connection")
        frame = bytearray(64)
        HEADER.pack_into(frame, 0, 64, 0, UNFRAGMENTED, HDR_TYPE_DATA, 0, publication.session_id + 1, stream_id,
                         publication.initial_term_id, 0)
        with pytest.raises(NativeAeronError, match="offer_block"):
            publication.offer_block(frame)


def test_append_padding_is_a_single_pad_block_skipped_by_fragment_poll(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc?term-length=64k", stream_id
    ) as publication:
        image = connected_image(subscription, publication.session_id)
        after_first = offer_until_accepted(lambda: publication.offer(b"before"))
        after_pad = offer_until_accepted(lambda: publication.append_padding(100))
        assert after_pad - after_first == align32(HEADER_LENGTH + 100)
        end = offer_until_accepted(lambda: publication.offer(b"after"))

        blocks: list[bytes] = []
        wait_until(lambda: image.block_poll(lambda b, s, t: blocks.append(bytes(b)), 1 << 16) >= 0
                   and image.position == end, "all blocks")
        assert [len(b) for b in blocks] == [after_first, after_pad - after_first, end - after_pad]
        pad_length, _, _, pad_type = HEADER.unpack_from(blocks[1])[:4]
        assert (pad_length, pad_type) == (HEADER_LENGTH + 100, HDR_TYPE_PAD)
        image.close()


def test_fragment_poll_skips_padding(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc?term-length=64k", stream_id
    ) as publication:
        wait_until(lambda: subscription.image_count == 1, "image")
        first_end = offer_until_accepted(lambda: publication.offer(b"one"))
        pad_end = offer_until_accepted(lambda: publication.append_padding(200))
        offer_until_accepted(lambda: publication.offer(b"two"))
        received = poll_messages(subscription.poll, 2)
        assert [data for data, _ in received] == [b"one", b"two"]
        assert received[0][1].position == first_end
        assert received[1][1].start_position == pad_end


def test_result_codes_not_connected_back_pressured_closed(client: AeronClient, stream_id: int) -> None:
    publication = client.add_exclusive_publication("aeron:ipc?term-length=64k", stream_id)
    assert publication.offer(b"nobody listening") == NOT_CONNECTED
    with client.add_subscription("aeron:ipc", stream_id) as subscription:
        wait_until(lambda: publication.is_connected and subscription.image_count == 1, "connection")
        message = bytes(1000)
        results: set[int] = set()
        deadline = time.monotonic() + TIMEOUT_S
        while BACK_PRESSURED not in results:  # nobody polls, so the window fills up
            results.add(min(publication.offer(message), 0))
            assert time.monotonic() < deadline, f"never back pressured: {results}"
        assert results <= {0, BACK_PRESSURED, ADMIN_ACTION}
        assert publication.available_window < align32(HEADER_LENGTH + len(message))  # may overshoot: < 0
        assert publication.position_limit - publication.position == publication.available_window
    publication.close()
    assert publication.is_closed
    assert publication.offer(b"late") == PUBLICATION_CLOSED
    assert publication.offer_block(bytes(32)) == PUBLICATION_CLOSED
    assert publication.append_padding(32) == PUBLICATION_CLOSED
    assert publication.position == PUBLICATION_CLOSED
    assert publication.available_window == PUBLICATION_CLOSED
    assert not publication.is_connected


def test_concurrent_publication_offer(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_publication(
        "aeron:ipc", stream_id
    ) as publication:
        wait_until(lambda: publication.is_connected, "connection")
        offer_until_accepted(lambda: publication.offer(b"shared", reserved_value=5))
        [(data, header)] = poll_messages(subscription.poll, 1)
        assert (data, header.session_id, header.reserved_value) == (b"shared", publication.session_id, 5)


def test_counter_found_from_second_client(client: AeronClient, driver: EmbeddedMediaDriver) -> None:
    key = struct.pack("<qi", 123456789, 42) + b"archive-id"
    label = "rec-pos: 7 12 IPC test"
    counter = client.add_counter(100, key, label)
    counter.set(987654321)
    assert counter.get() == 987654321
    with AeronClient(driver.aeron_dir, client_name="reader") as other:
        reader = other.counters_reader
        assert counter.counter_id in reader.find_by_type(100)
        cid = counter.counter_id
        assert reader.type_id(cid) == 100
        assert reader.state(cid) == COUNTER_RECORD_ALLOCATED
        assert reader.registration_id(cid) == counter.registration_id
        assert reader.owner_id(cid) == client.client_id
        full_key = reader.key(cid)
        assert len(full_key) == COUNTER_MAX_KEY_LENGTH and full_key[:len(key)] == key
        assert reader.label(cid) == label
        assert reader.get(cid) == 987654321
        counter.set(-5)
        assert reader.get(cid) == -5
        assert reader.find_by_type_and_registration_id(100, counter.registration_id) == cid
        [info] = [info for info in reader.counters() if info.counter_id == cid]
        assert (info.type_id, info.registration_id, info.value, info.key, info.label) == (
            100, counter.registration_id, -5, full_key, label
        )
        with pytest.raises(NativeAeronError, match="out of range"):
            reader.get(reader.max_counter_id + 1)

        counter.close()
        counter.close()
        assert counter.is_closed
        with pytest.raises(NativeAeronError, match="closed"):
            counter.set(1)
        wait_until(lambda: reader.state(cid) != COUNTER_RECORD_ALLOCATED, "counter freed")
    with pytest.raises(NativeAeronError, match="closed"):
        reader.get(cid)


def test_image_callbacks_and_image_outlives_its_publication(client: AeronClient, stream_id: int) -> None:
    events: queue.Queue[tuple[str, Image]] = queue.Queue()
    subscription = client.add_subscription(
        "aeron:ipc", stream_id,
        on_available_image=lambda image: events.put(("available", image)),
        on_unavailable_image=lambda image: events.put(("unavailable", image)),
    )
    publication = client.add_exclusive_publication("aeron:ipc?term-length=64k", stream_id)
    kind, image = events.get(timeout=TIMEOUT_S)
    assert kind == "available"
    assert (image.session_id, image.initial_term_id) == (publication.session_id, publication.initial_term_id)
    assert image.term_buffer_length == 64 * 1024
    assert image.subscription_registration_id == subscription.registration_id
    assert image.source_identity == "aeron:ipc"
    assert not image.is_closed and not image.is_end_of_stream

    end = offer_until_accepted(lambda: publication.offer(b"last words"))
    [(data, header)] = poll_messages(image.poll, 1)
    assert (data, header.position) == (b"last words", end)

    publication.close()
    kind, gone = events.get(timeout=TIMEOUT_S)
    assert kind == "unavailable" and gone is image
    # Our reference keeps the C image (and its log buffer) alive: it is safe to keep using it.
    assert image.is_closed and image.is_end_of_stream
    assert image.position == end == image.end_of_stream_position
    assert image.poll(lambda d, h: None, 10) == 0
    assert image.block_poll(lambda b, s, t: None, 1 << 16) == 0
    wait_until(lambda: subscription.image_count == 0, "image removed from the subscription")
    image.close()
    image.close()
    assert image.is_closed and image.position == end
    subscription.close()


def test_unkept_callback_images_are_released(client: AeronClient, stream_id: int) -> None:
    seen: list[int] = []
    subscription = client.add_subscription(
        "aeron:ipc", stream_id,
        on_available_image=lambda image: seen.append(image.session_id),
        on_unavailable_image=lambda image: seen.append(-1 if image.is_closed else 0),
    )
    publication = client.add_exclusive_publication("aeron:ipc", stream_id)
    wait_until(lambda: len(seen) == 1, "available callback")
    gc.collect()
    publication.close()
    wait_until(lambda: len(seen) == 2, "unavailable callback")
    assert seen == [publication.session_id, -1]
    subscription.close()


def test_image_references_are_counted_and_released(client: AeronClient, stream_id: int) -> None:
    lib = get_lib()
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc", stream_id
    ):
        wait_until(lambda: subscription.image_count == 1, "image")
        [held] = subscription.images()

        def refcnt() -> int:  # the C image's reference count, through the wrapper's private pointer
            return int(lib.aeron_image_refcnt_acquire(held._n.ptr))

        assert refcnt() == 2  # the subscription's own reference + ours
        extra = [*subscription.images(), subscription.image_by_session_id(held.session_id)]
        assert refcnt() == 4
        extra[0].close()
        assert refcnt() == 3
        del extra
        gc.collect()
        assert refcnt() == 2  # dropped wrappers release their reference
        held.close()


def test_polling_thread_and_closing_thread_do_not_race(client: AeronClient, stream_id: int) -> None:
    subscription = client.add_subscription("aeron:ipc", stream_id)
    with client.add_exclusive_publication("aeron:ipc?term-length=64k", stream_id) as publication:
        image = connected_image(subscription, publication.session_id)
        stop = threading.Event()
        polled: list[int] = []

        def poll_forever() -> None:
            while not stop.is_set():
                polled.append(image.block_poll(lambda b, s, t: None, 4096))
                subscription.poll(lambda d, h: None, 10)

        poller = threading.Thread(target=poll_forever)
        poller.start()
        try:
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                publication.offer(b"z" * 100)
            subscription.close()  # waits for any in-flight poll, then releases the image under the poller
            assert image.is_closed
            polled.clear()
            wait_until(lambda: len(polled) > 10, "polls after close")
            assert set(polled) == {0}
        finally:
            stop.set()
            poller.join(TIMEOUT_S)
        assert not poller.is_alive()


def test_client_closed_from_an_image_callback_closes_asynchronously(
    driver: EmbeddedMediaDriver, client: AeronClient, stream_id: int
) -> None:
    doomed = AeronClient(driver.aeron_dir, client_name="closed-from-callback")
    doomed.add_subscription("aeron:ipc", stream_id, on_available_image=lambda image: doomed.close())
    with client.add_exclusive_publication("aeron:ipc", stream_id):
        wait_until(lambda: doomed.is_closed, "client closed by its own callback")


def test_closing_a_subscription_closes_its_images(client: AeronClient, stream_id: int) -> None:
    subscription = client.add_subscription("aeron:ipc", stream_id)
    with client.add_exclusive_publication("aeron:ipc", stream_id) as publication:
        image = connected_image(subscription, publication.session_id)
        [listed] = subscription.images()
        assert listed.session_id == image.session_id
        assert subscription.image_by_session_id(publication.session_id + 1) is None
        subscription.close()
        subscription.close()
        assert image.is_closed and listed.is_closed
        assert subscription.is_closed and subscription.image_count == 0 and subscription.images() == []
        assert subscription.poll(lambda d, h: None, 10) == 0
        assert subscription.block_poll(lambda b, s, t: None, 1024) == 0


def test_handler_exception_propagates_and_the_message_is_not_consumed(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:ipc", stream_id) as subscription, client.add_exclusive_publication(
        "aeron:ipc", stream_id
    ) as publication:
        wait_until(lambda: subscription.image_count == 1, "image")
        offer_until_accepted(lambda: publication.offer(b"m1"))
        offer_until_accepted(lambda: publication.offer(b"m2"))

        def explode(data: memoryview, header: HeaderValues) -> None:
            raise ValueError(bytes(data).decode())

        with pytest.raises(ValueError, match="m1"):
            wait_until(lambda: subscription.poll(explode, 10) > 0, "a delivery")
        seen: list[bytes] = []

        def first_only(data: memoryview, header: HeaderValues) -> ControlledAction:
            seen.append(bytes(data))
            return ControlledAction.BREAK

        wait_until(lambda: subscription.poll(first_only, 10) > 0, "redelivery")
        assert seen == [b"m1"]
        assert poll_messages(subscription.poll, 1)[0][0] == b"m2"


def test_close_from_inside_a_handler_is_deferred(client: AeronClient, stream_id: int) -> None:
    subscription = client.add_subscription("aeron:ipc", stream_id)
    with client.add_exclusive_publication("aeron:ipc", stream_id) as publication:
        image = connected_image(subscription, publication.session_id)
        offer_until_accepted(lambda: publication.offer(b"x"))
        offer_until_accepted(lambda: publication.offer(b"y"))

        def close_everything(data: memoryview, header: HeaderValues) -> None:
            image.close()
            subscription.close()

        wait_until(lambda: image.poll(close_everything, 1) > 0, "a message")
        assert image.is_closed
        wait_until(lambda: subscription.poll(close_everything, 1) > 0 or subscription.is_closed, "close")
        assert subscription.is_closed


def test_udp_channel(client: AeronClient, stream_id: int) -> None:
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    with client.add_subscription(channel, stream_id) as subscription, client.add_exclusive_publication(
        channel + "|term-length=64k", stream_id
    ) as publication:
        wait_until(lambda: publication.is_connected and subscription.is_connected, "UDP connection")
        assert publication.channel_status == 1 and subscription.channel_status == 1
        image = connected_image(subscription, publication.session_id)
        assert image.source_identity.startswith("127.0.0.1:")
        assert subscription.try_resolve_channel_endpoint_port() == channel  # no wildcard: unchanged
        end = offer_until_accepted(lambda: publication.offer(b"over udp" * 300))
        [(data, header)] = poll_messages(subscription.poll, 1)
        assert (data, header.position) == (b"over udp" * 300, end)
        image.close()


def test_udp_wildcard_port_is_resolved(client: AeronClient, stream_id: int) -> None:
    with client.add_subscription("aeron:udp?endpoint=localhost:0", stream_id) as subscription:
        resolved = subscription.try_resolve_channel_endpoint_port(timeout_s=TIMEOUT_S)
        assert resolved is not None
        match = re.fullmatch(r"aeron:udp\?endpoint=127\.0\.0\.1:(\d+)", resolved)
        assert match is not None and int(match.group(1)) > 0


def test_resolved_endpoint_is_the_bound_address_also_of_a_multi_destination_subscription(
    client: AeronClient, stream_id: int
) -> None:
    with client.add_subscription("aeron:udp?endpoint=localhost:0", stream_id) as plain:
        wait_until(plain.resolved_endpoint, "the subscription's port bound")
        assert re.fullmatch(r"127\.0\.0\.1:[1-9]\d*", plain.resolved_endpoint() or "")
    # A multi-destination subscription's channel has no endpoint: its first destination's bound address is the one
    # (what try_resolve_channel_endpoint_port cannot tell: it answers the channel unchanged).
    with client.add_subscription("aeron:udp?control-mode=manual", stream_id) as mds:
        assert mds.resolved_endpoint() is None
        change = mds.async_add_destination("aeron:udp?endpoint=localhost:0")
        wait_until(change.poll, "the destination added")
        wait_until(mds.resolved_endpoint, "the destination's port bound")
        port = int((mds.resolved_endpoint() or "").rpartition(":")[2])
        assert port > 0 and mds.try_resolve_channel_endpoint_port() == "aeron:udp?control-mode=manual"
    with client.add_subscription("aeron:ipc", stream_id) as ipc:
        assert ipc.resolved_endpoint() is None  # IPC binds nothing
    assert mds.resolved_endpoint() is None  # closed


def test_closing_twice_is_safe_and_closed_objects_are_inert(driver: EmbeddedMediaDriver, stream_id: int) -> None:
    aeron = AeronClient(driver.aeron_dir, client_name="short-lived")
    subscription = aeron.add_subscription("aeron:ipc", stream_id)
    publication = aeron.add_exclusive_publication("aeron:ipc", stream_id)
    counter = aeron.add_counter(1001, b"", "short-lived counter")
    image = connected_image(subscription, publication.session_id)
    reader = aeron.counters_reader
    aeron.close()
    aeron.close()
    assert aeron.is_closed
    assert subscription.is_closed and publication.is_closed and counter.is_closed and image.is_closed
    assert subscription.poll(lambda d, h: None, 10) == 0
    assert image.block_poll(lambda b, s, t: None, 1024) == 0
    assert publication.offer(b"x") == PUBLICATION_CLOSED
    image.close()
    subscription.close()
    publication.close()
    counter.close()
    with pytest.raises(NativeAeronError, match="closed"):
        aeron.add_subscription("aeron:ipc", stream_id)
    with pytest.raises(NativeAeronError, match="closed"):
        reader.get(0)
    with pytest.raises(NativeAeronError, match="closed"):
        aeron.next_correlation_id()


def test_every_wrapped_type_after_close_raises_naming_it_or_answers_its_closed_value(
    driver: EmbeddedMediaDriver, stream_id: int
) -> None:
    aeron = AeronClient(driver.aeron_dir, client_name="closed-checks")
    subscription = aeron.add_subscription("aeron:ipc", stream_id)
    exclusive = aeron.add_exclusive_publication("aeron:ipc", stream_id)
    concurrent = aeron.add_publication("aeron:ipc", stream_id)
    image = connected_image(subscription, exclusive.session_id)
    reader = aeron.counters_reader
    counter = aeron.add_counter(1001, b"", "closed-checks counter")
    counter_id = counter.counter_id
    assert reader.get(counter_id) == counter.get() == 0

    # Counters have no value that could stand for "closed": they raise, naming the counter.
    counter.close()
    for closed_counter_call in (counter.get, lambda: counter.set(1)):
        with pytest.raises(NativeAeronError, match=f"^counter {counter_id} is closed$"):
            closed_counter_call()

    aeron.close()
    client_closed = "^" + re.escape("Aeron client 'closed-checks' is closed") + "$"
    client_calls: list[Callable[[], object]] = [
        aeron.next_correlation_id,
        lambda: aeron.add_subscription("aeron:ipc", stream_id),
        lambda: aeron.add_publication("aeron:ipc", stream_id),
        lambda: aeron.add_exclusive_publication("aeron:ipc", stream_id),
        lambda: aeron.add_counter(1001, b"", "too late"),
        lambda: reader.get(0),
        lambda: reader.state(0),
        lambda: reader.type_id(0),
        lambda: reader.registration_id(0),
        lambda: reader.owner_id(0),
        lambda: reader.reference_id(0),
        lambda: reader.key(0),
        lambda: reader.label(0),
        lambda: list(reader.counters()),
        lambda: reader.find_by_type(1001),
        lambda: reader.find_by_type_and_registration_id(1001, 0),
    ]
    for client_call in client_calls:
        with pytest.raises(NativeAeronError, match=client_closed):
            client_call()
    for closed_counter_call in (counter.get, lambda: counter.set(1)):
        with pytest.raises(NativeAeronError, match=f"^counter {counter_id} is closed$"):
            closed_counter_call()
    assert aeron.is_closed and counter.is_closed

    # Stream objects answer the values the C API gives for closed objects.
    assert subscription.is_closed and not subscription.is_connected
    assert subscription.image_count == 0 and subscription.channel_status == 0
    assert subscription.images() == [] and subscription.image_by_session_id(exclusive.session_id) is None
    assert subscription.try_resolve_channel_endpoint_port() is None
    assert subscription.poll(lambda d, h: pytest.fail("closed"), 10) == 0
    assert subscription.block_poll(lambda b, s, t: pytest.fail("closed"), 1024) == 0
    assert image.is_closed and image.active_transport_count == 0 and not image.is_publication_revoked
    assert image.poll(lambda d, h: pytest.fail("closed"), 10) == 0
    assert image.block_poll(lambda b, s, t: pytest.fail("closed"), 1024) == 0
    for publication in (exclusive, concurrent):
        assert publication.is_closed and not publication.is_connected and publication.channel_status == 0
        assert publication.position == publication.position_limit == PUBLICATION_CLOSED
        assert publication.available_window == PUBLICATION_CLOSED
        assert publication.offer(b"x") == publication.offer(b"x", reserved_value=7) == PUBLICATION_CLOSED
    assert exclusive.offer_block(bytes(HEADER_LENGTH)) == PUBLICATION_CLOSED
    assert exclusive.append_padding(HEADER_LENGTH) == PUBLICATION_CLOSED


def test_bad_channels_raise_with_a_clear_message(client: AeronClient, stream_id: int) -> None:
    with pytest.raises(NativeAeronError, match=r"add_subscription\(channel='aeron:bogus', stream_id=\d+\)"):
        client.add_subscription("aeron:bogus", stream_id)
    with pytest.raises(NativeAeronError, match="not-a-uri"):
        client.add_exclusive_publication("not-a-uri", stream_id)
    with pytest.raises(NativeAeronError, match="add_exclusive_publication"):
        client.add_exclusive_publication("aeron:udp?endpoint=localhost:not-a-port", stream_id)
    with pytest.raises(ValueError, match="key"):
        client.add_counter(1, bytes(COUNTER_MAX_KEY_LENGTH + 1), "too long a key")
    assert not client.is_closed  # failures leave the client usable
    with client.add_subscription("aeron:ipc", stream_id):
        pass


def test_client_without_driver_fails_fast(tmp_path: os.PathLike[str]) -> None:
    started = time.monotonic()
    with pytest.raises(NativeAeronError, match="aeron_init"):
        AeronClient(str(tmp_path), driver_timeout_ms=200)
    assert time.monotonic() - started < 5.0


def test_images_are_only_created_by_subscriptions() -> None:
    with pytest.raises(TypeError):
        Image()


def _departed_log_buffer_mappings(aeron_dir: str) -> list[str]:
    """Mappings of this process onto log buffers of `aeron_dir` the driver has already deleted."""
    with open("/proc/self/maps") as maps:
        return [line for line in maps if aeron_dir in line and line.rstrip().endswith("(deleted)")]


def come_and_go(publication: ExclusivePublication, image: Image) -> None:
    """One message through `image`, polled directly; then the publication goes and the image is released."""
    offer_until_accepted(lambda: publication.offer(b"x" * 100))
    wait_until(lambda: image.block_poll(lambda *_: None, 1 << 16) >= 0 and image.position == publication.position,
               "the message")
    publication.close()
    wait_until(lambda: image.is_closed, "the image to go unavailable")
    image.close()


def test_departed_images_of_a_subscription_never_polled_itself_are_unmapped(
    client: AeronClient, driver: EmbeddedMediaDriver, stream_id: int
) -> None:
    # The archive's recorder polls each image directly and never its subscription: the C client frees a departed
    # image only once the subscription acknowledges the image list without it, which the native layer must do.
    channel = "aeron:ipc?term-length=64k"
    arrived: queue.Queue[Image] = queue.Queue()
    subscription = client.add_subscription(channel, stream_id, on_available_image=arrived.put)
    try:
        for _ in range(20):
            come_and_go(client.add_exclusive_publication(channel, stream_id), arrived.get(timeout=TIMEOUT_S))
        wait_until(lambda: not _departed_log_buffer_mappings(driver.aeron_dir),
                   "no mapping of a deleted log buffer")
    finally:
        subscription.close()


def _mounts(tmp_path: pathlib.Path, *entries: tuple[str, str]) -> str:
    path = tmp_path / f"mounts-{len(list(tmp_path.glob('mounts-*')))}"
    path.write_text("".join(f"dev {point} {fs_type} rw 0 0\n" for point, fs_type in entries))
    return str(path)


def test_driver_files_go_to_shm_only_when_it_is_a_memory_filesystem_with_room(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    memory = _mounts(tmp_path, ("/", "ext4"), (str(tmp_path), "xfs"), (str(shm), "tmpfs"))
    assert filesystem_type(str(shm / "x"), memory) == "tmpfs"  # the longest mount point prefix wins
    assert filesystem_type(str(tmp_path / "shmx"), memory) == "xfs"  # a prefix of the name is no mount point
    assert default_driver_parent(16 << 20, shm_dir=str(shm), mounts_file=memory) == (str(shm), None)

    disk = _mounts(tmp_path, ("/", "ext4"))
    parent, why = default_driver_parent(16 << 20, shm_dir=str(shm), mounts_file=disk)
    assert parent == tempfile.gettempdir() and why == f"{shm} is not a memory filesystem (type ext4)"

    parent, why = default_driver_parent(16 << 20, shm_dir=str(tmp_path / "missing"), mounts_file=memory)
    assert parent == tempfile.gettempdir() and why is not None and "not a writable directory" in why

    real_statvfs = os.statvfs

    def container_shm(path: str) -> object:  # a container's 64 MiB /dev/shm
        stats = real_statvfs(path)
        return type("Stats", (), {"f_bavail": (64 << 20) // stats.f_frsize, "f_frsize": stats.f_frsize})()

    monkeypatch.setattr(os, "statvfs", container_shm)
    parent, why = default_driver_parent(16 << 20, shm_dir=str(shm), mounts_file=memory)
    assert parent == tempfile.gettempdir()
    assert why == f"{shm} has 64 MiB free, less than the 160 MiB of ten terms of log buffers"


def _udp_socket_bound_to(port: int) -> socket.socket:
    """A duplicate of this process's UDP socket bound to `port` (the embedded driver's, found through /proc)."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        if sock.type == socket.SOCK_DGRAM and sock.family == socket.AF_INET and sock.getsockname()[1] == port:
            return sock
        sock.close()  # closes the duplicate only
    raise AssertionError(f"no UDP socket bound to port {port} in this process")


def test_default_settings_ask_for_big_buffers_and_io_vectors_within_the_host_limits(tmp_path: pathlib.Path) -> None:
    sysctl = tmp_path / "core"
    sysctl.mkdir()
    assert default_settings(str(sysctl)) == {  # limits unknown: ask, and let the C driver warn about a clamp
        "AERON_SOCKET_SO_RCVBUF": 2 << 20,
        "AERON_SOCKET_SO_SNDBUF": 2 << 20,
        "AERON_RCV_INITIAL_WINDOW_LENGTH": 1 << 20,
        "AERON_RECEIVER_IO_VECTOR_CAPACITY": 16,
        "AERON_SENDER_IO_VECTOR_CAPACITY": 16,
        "AERON_NETWORK_PUBLICATION_MAX_MESSAGES_PER_SEND": 16,
        "AERON_SHARED_IDLE_STRATEGY": "backoff",
        "AERON_SHARED_IDLE_STRATEGY_INIT_ARGS": "1-0-50us-1ms",
    }
    (sysctl / "rmem_max").write_text("212992\n")  # a stock Linux host
    (sysctl / "wmem_max").write_text("8388608\n")
    settings = default_settings(str(sysctl))
    assert (settings["AERON_SOCKET_SO_RCVBUF"], settings["AERON_SOCKET_SO_SNDBUF"]) == (212992, 2 << 20)
    assert settings["AERON_RCV_INITIAL_WINDOW_LENGTH"] == 128 << 10  # Aeron's own, as the buffer holds it
    (sysctl / "rmem_max").write_text("1048576\n")
    assert default_settings(str(sysctl))["AERON_RCV_INITIAL_WINDOW_LENGTH"] == 512 << 10  # half the buffer
    (sysctl / "rmem_max").write_text("65536\n")
    settings = default_settings(str(sysctl))
    assert settings["AERON_SOCKET_SO_RCVBUF"] == settings["AERON_RCV_INITIAL_WINDOW_LENGTH"] == 65536


def test_embedded_driver_udp_sockets_get_the_buffers_asked_for(client: AeronClient, stream_id: int) -> None:
    port = free_udp_port()
    with client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", stream_id) as subscription:
        wait_until(lambda: subscription.channel_status == 1, "UDP subscription active")
        sock = _udp_socket_bound_to(port)
        try:
            asked = default_settings()["AERON_SOCKET_SO_RCVBUF"]
            # Linux doubles the value set, for its bookkeeping; Aeron's default would give 256 KiB.
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * asked
        finally:
            sock.close()


def test_default_settings_leave_a_coupled_group_to_whoever_sets_one_of_it() -> None:
    ours = default_settings()
    mine = default_settings(given={"AERON_SOCKET_SO_RCVBUF", "AERON_SHARED_IDLE_STRATEGY_INIT_ARGS"})
    assert set(ours) - set(mine) == {
        "AERON_SOCKET_SO_RCVBUF",
        "AERON_RCV_INITIAL_WINDOW_LENGTH",  # our 1 MiB window above the user's buffer: the C driver would refuse
        "AERON_SHARED_IDLE_STRATEGY",
        "AERON_SHARED_IDLE_STRATEGY_INIT_ARGS",
    }
    assert default_settings(given={"AERON_TERM_BUFFER_LENGTH"}) == ours


@pytest.mark.parametrize(
    "setting",
    [
        ("AERON_SOCKET_SO_RCVBUF", "131072"),  # Aeron's own buffer: our 1 MiB window would not fit in it
        ("AERON_SHARED_IDLE_STRATEGY", "sleep-ns"),  # a strategy that cannot read backoff's arguments
    ],
)
def test_a_driver_starts_with_one_setting_of_a_coupled_group_from_the_environment(
    setting: tuple[str, str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(*setting)
    with (
        EmbeddedMediaDriver(str(tmp_path / "aeron")) as media_driver,
        AeronClient(media_driver.aeron_dir, client_name="coupled") as aeron,
    ):
        assert aeron.client_id >= 0


def test_async_exclusive_publication_add_is_polled_to_the_publication(client: AeronClient, stream_id: int) -> None:
    """The conductor's replay set-up adds publications without waiting: poll None until the driver answers, then
    the same usable publication on every later poll."""
    pending = client.async_add_exclusive_publication("aeron:ipc", stream_id)
    deadline = time.monotonic() + 10
    publication = pending.poll()
    while publication is None:
        assert not pending.is_done
        assert time.monotonic() < deadline, "the driver never answered the add"
        time.sleep(0.0001)
        publication = pending.poll()
    assert pending.is_done
    assert pending.poll() is publication
    subscription = client.add_subscription("aeron:ipc", stream_id)
    try:
        wait_until(lambda: publication.is_connected, "connection")
        assert publication.offer(b"hello") > 0
    finally:
        subscription.close()
        publication.close()


def test_async_exclusive_publication_add_refused_raises_once(client: AeronClient, stream_id: int) -> None:
    pending = client.async_add_exclusive_publication("aeron:ipc?term-length=3000", stream_id)  # not a power of 2
    deadline = time.monotonic() + 10
    with pytest.raises(NativeAeronError):
        while pending.poll() is None:
            assert time.monotonic() < deadline, "the driver never answered the add"
            time.sleep(0.0001)
    assert pending.is_done
    assert pending.poll() is None


def test_abandoned_async_exclusive_publication_is_closed_when_it_comes(client: AeronClient, stream_id: int) -> None:
    pending = client.async_add_exclusive_publication("aeron:ipc", stream_id)
    pending.abandon()
    deadline = time.monotonic() + 10
    while not pending.is_done:
        assert pending.poll() is None
        assert time.monotonic() < deadline, "the driver never answered the add"
        time.sleep(0.0001)
    assert pending.poll() is None
    subscription = client.add_subscription("aeron:ipc", stream_id)
    try:
        time.sleep(0.05)
        assert subscription.image_count == 0  # no publication was left behind
    finally:
        subscription.close()


def test_async_subscription_add_is_polled_to_a_working_subscription(client: AeronClient, stream_id: int) -> None:
    pending = client.async_add_subscription("aeron:ipc", stream_id)
    deadline = time.monotonic() + 10
    subscription = pending.poll()
    while subscription is None:
        assert not pending.is_done
        assert time.monotonic() < deadline, "the driver never answered the add"
        time.sleep(0.0001)
        subscription = pending.poll()
    assert pending.is_done and pending.poll() is subscription
    try:
        with client.add_exclusive_publication("aeron:ipc", stream_id) as publication:
            wait_until(lambda: subscription.image_count == 1, "image")
            assert publication.offer(b"hello") > 0
            got: list[bytes] = []
            wait_until(lambda: subscription.poll(lambda data, _h: got.append(bytes(data)), 10) > 0 or got, "message")
            assert got == [b"hello"]
    finally:
        subscription.close()


def test_async_subscription_add_refused_raises_once_and_abandoned_is_closed(client: AeronClient, stream_id: int) -> None:
    refused = client.async_add_subscription("aeron:udp?endpoint=localhost:99999", stream_id)  # no such port
    abandoned = client.async_add_subscription("aeron:ipc", stream_id)
    abandoned.abandon()
    deadline = time.monotonic() + 10
    with pytest.raises(NativeAeronError):
        while refused.poll() is None:
            assert time.monotonic() < deadline, "the driver never answered the add"
            time.sleep(0.0001)
    assert refused.is_done and refused.poll() is None
    while not abandoned.is_done:
        assert abandoned.poll() is None
        assert time.monotonic() < deadline, "the driver never answered the add"
        time.sleep(0.0001)
    with client.add_exclusive_publication("aeron:ipc", stream_id) as publication:
        time.sleep(0.05)
        assert not publication.is_connected  # the abandoned subscription was closed when it came
