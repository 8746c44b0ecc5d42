"""Fakes of the Aeron-facing objects and clocks the server sessions use, for unit tests without a media driver.

Only what talks to Aeron is faked here (publications, images, counters, the conductor as a control session sees
it, the control session as a listing sees it) plus the clocks; catalogs, segment files, writers and readers in
the tests are the real storage classes over temporary directories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints

from aeron_archive_spark.archive.codecs import CODEC, Message
from aeron_archive_spark.archive.codecs import messages as m
from aeron_archive_spark.archive.constants import PROTOCOL_SEMANTIC_VERSION, ControlResponseCode, RecordingSignal
from aeron_archive_spark.archive.native import BACK_PRESSURED, NOT_CONNECTED
from aeron_archive_spark.archive.server.authenticator import Authenticator
from aeron_archive_spark.archive.server.control_session import ControlSession, ControlSessionState
from aeron_archive_spark.archive.server.session import Session
from aeron_archive_spark.archive.storage import frames

MS = 1_000_000  # nanoseconds
SECOND = 1_000 * MS


class FakeClock:
    """A clock that only moves when told to; callable like `time.monotonic_ns` (or an epoch-ms clock)."""

    def __init__(self, now: int = 1_000 * SECOND, step: int = 0) -> None:
        self.now = now
        self.step = step  # added after every reading, to make elapsed times visible
        self.readings = 0

    def __call__(self) -> int:
        self.readings += 1
        value = self.now
        self.now += self.step
        return value

    def advance(self, delta: int) -> int:
        self.now += delta
        return self.now


M = TypeVar("M", bound=Message)


def request(cls: type[M], **fields: Any) -> M:
    """A decoded-alike request of class `cls` (`codecs.messages`): `fields` as given, the rest 0, "" or b""."""
    hints = get_type_hints(cls)
    blank = {"int": 0, "str": "", "bytes": b""}
    values = {attr: fields.pop(attr) if attr in fields else blank[hints[attr].__name__] for attr in cls._attrs}
    assert not fields, f"{cls.__name__} has no field(s) {sorted(fields)}"
    return cls._of(**values)


def decode(message: bytes) -> Any:
    """A control-protocol message as the client would decode it."""
    return CODEC.decode(message)


class FakeResponsePublication:
    """A control session's response publication: connects when told, refuses offers while back-pressured."""

    def __init__(self, connected: bool = False) -> None:
        self.is_connected = connected
        self.back_pressured = False
        self.offered: list[bytes] = []
        self.refused = 0
        self.closed = False
        self._position = 0

    def offer(self, data: bytes, /) -> int:
        if not self.is_connected:
            self.refused += 1
            return NOT_CONNECTED
        if self.back_pressured:
            self.refused += 1
            return BACK_PRESSURED
        self.offered.append(bytes(data))
        self._position += frames.align(len(data) + frames.HEADER_LENGTH, frames.FRAME_ALIGNMENT)
        return self._position

    def close(self) -> None:
        self.closed = True

    def messages(self) -> list[Any]:
        return [decode(m) for m in self.offered]

    def names(self) -> list[str]:
        return [m.name for m in self.messages()]


class FakeConductor:
    """The `ConductorPort` a control session talks to: records each request with its typed arguments.

    `fail_with` makes the next request raise (as the conductor does when it refuses a request); `publication`
    is what `add_response_publication` hands out, unless `add_publication_error` is set.
    """

    archive_id = 4242

    def __init__(self) -> None:
        self.publication = FakeResponsePublication()
        self.publications_added: list[tuple[str, int]] = []
        self.add_publication_error: Exception | None = None
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail_with: Exception | None = None

    def add_response_publication(self, channel: str, stream_id: int) -> FakeResponsePublication:
        self.publications_added.append((channel, stream_id))
        if self.add_publication_error is not None:
            raise self.add_publication_error
        return self.publication

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)

        def request(*args: Any) -> None:
            self.calls.append((name, args))
            if self.fail_with is not None:
                error, self.fail_with = self.fail_with, None
                raise error

        return request


@dataclass
class Response:
    kind: str  # "ok", "error", "code", "descriptor", "subscription", "signal", "samples"
    correlation_id: int
    values: tuple[Any, ...] = ()


@dataclass
class FakeResponder:
    """The requesting control session as a listing sees it (a `ControlResponder`).

    While `back_pressured`, throttled descriptor sends are refused (returns False, nothing recorded), as the real
    control session refuses them while earlier responses are still queued.
    """

    control_session_id: int = 77
    back_pressured: bool = False
    responses: list[Response] = field(default_factory=list)
    active_listing: Session | None = None

    def send_ok(self, correlation_id: int, relevant_id: int = 0) -> None:
        self.responses.append(Response("ok", correlation_id, (relevant_id,)))

    def send_error(self, correlation_id: int, error_code: int, message: str) -> None:
        self.responses.append(Response("error", correlation_id, (error_code, message)))

    def send_response_code(self, correlation_id: int, relevant_id: int, code: ControlResponseCode,
                           message: str = "") -> None:
        self.responses.append(Response("code", correlation_id, (relevant_id, code)))

    def send_descriptor(self, correlation_id: int, catalog_bytes: bytes, throttle: bool = True) -> bool:
        if throttle and self.back_pressured:
            return False
        self.responses.append(Response("descriptor", correlation_id, (bytes(catalog_bytes),)))
        return True

    def send_subscription_descriptor(self, correlation_id: int, subscription_id: int, stream_id: int,
                                     stripped_channel: str) -> bool:
        if self.back_pressured:
            return False
        self.responses.append(Response("subscription", correlation_id, (subscription_id, stream_id,
                                                                         stripped_channel)))
        return True

    def send_signal(self, correlation_id: int, recording_id: int, subscription_id: int, position: int,
                    signal: RecordingSignal) -> None:
        self.responses.append(Response("signal", correlation_id, (recording_id, subscription_id, position, signal)))

    def send_time_index_samples(self, correlation_id: int, recording_id: int, interval_ns: int,
                                samples: bytes) -> bool:
        if self.back_pressured:
            return False
        self.responses.append(Response("samples", correlation_id, (recording_id, interval_ns, bytes(samples))))
        return True

    def of_kind(self, kind: str) -> list[Response]:
        return [r for r in self.responses if r.kind == kind]


class FakeCounter:
    """A rec-pos counter: the recording session only sets it."""

    def __init__(self, counter_id: int = 9, value: int = 0) -> None:
        self.counter_id = counter_id
        self.value = value
        self.history: list[int] = []
        self.closed = False

    def set(self, value: int) -> None:
        self.value = value
        self.history.append(value)

    def get(self) -> int:
        return self.value

    def close(self) -> None:
        self.closed = True


class FakeCountersReader:
    """Counter values by id, as the replay's `LimitCounter` reads them (value, state, registration id)."""

    ALLOCATED = 1
    RECLAIMED = 2

    def __init__(self) -> None:
        self.values: dict[int, int] = {}
        self.states: dict[int, int] = {}
        self.registrations: dict[int, int] = {}

    def allocate(self, counter_id: int, value: int, registration_id: int = 1000) -> None:
        self.values[counter_id] = value
        self.states[counter_id] = self.ALLOCATED
        self.registrations[counter_id] = registration_id

    def get(self, counter_id: int) -> int:
        return self.values.get(counter_id, 0)

    def state(self, counter_id: int) -> int:
        return self.states.get(counter_id, 0)

    def registration_id(self, counter_id: int) -> int:
        return self.registrations.get(counter_id, -1)


class FakeImage:
    """An image that hands the recorder prepared blocks, one per `block_poll`, like `Image.blockPoll`.

    `blocks` are (position, bytes) pairs as `StreamBuilder.blocks()` yields them; more can be appended while the
    session runs. `poll_error` makes the next poll raise (a failing native call).
    """

    def __init__(self, blocks: Iterable[tuple[int, bytes]] = (), *, session_id: int = 42,
                 source_identity: str = "aeron:ipc") -> None:
        self.blocks = list(blocks)
        self.session_id = session_id
        self.source_identity = source_identity
        self.is_end_of_stream = False
        self.is_closed = False
        self.poll_error: Exception | None = None
        self.polls = 0
        self.closed_by_session = False

    def block_poll(self, handler: Callable[[memoryview, int, int], object], block_length_limit: int) -> int:
        self.polls += 1
        if self.poll_error is not None:
            raise self.poll_error
        if not self.blocks:
            return 0
        _, block = self.blocks.pop(0)
        handler(memoryview(block), self.session_id, 0)
        return len(block)

    def close(self) -> None:
        self.closed_by_session = True


@dataclass
class Offer:
    position: int
    data: bytes
    is_padding: bool = False


class FakeReplayPublication:
    """The replay's exclusive publication: connects when told; `results` scripts the next offer outcomes."""

    def __init__(self, session_id: int = 555, stream_id: int = 66, initial_position: int = 0) -> None:
        self.session_id = session_id
        self.stream_id = stream_id
        self.is_connected = False
        self.available_window = 1 << 20
        self.max_message_length = 1 << 20  # a C publication's limit for append_padding (see NativeLimitedPublication)
        self.position = initial_position
        # Scripted outcomes of the next offers, in order: a negative Aeron code refuses, None accepts.
        self.results: list[int | None] = []
        self.offers: list[Offer] = []
        self.refused = 0
        self.revoked = False
        self.closed = False

    def _scripted(self) -> int | None:
        result = self.results.pop(0) if self.results else None
        if result is not None:
            self.refused += 1
        return result

    def offer_block(self, block: Any) -> int:
        scripted = self._scripted()
        if scripted is not None:
            return scripted
        data = bytes(block)
        self.offers.append(Offer(self.position, data))
        self.position += len(data)
        return self.position

    def append_padding(self, length: int) -> int:
        scripted = self._scripted()
        if scripted is not None:
            return scripted
        total = frames.align(length + frames.HEADER_LENGTH, frames.FRAME_ALIGNMENT)
        self.offers.append(Offer(self.position, bytes(total), is_padding=True))
        self.position += total
        return self.position

    def revoke(self) -> None:
        self.revoked = True

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[tuple[int, bytes, bool]]:
        """Every frame appended, in order: (position, aligned frame bytes, is PAD), PADs inside blocks included."""
        out: list[tuple[int, bytes, bool]] = []
        for offer in self.offers:
            if offer.is_padding:
                out.append((offer.position, offer.data, True))
                continue
            offset = 0
            while offset < len(offer.data):
                length = int.from_bytes(offer.data[offset : offset + 4], "little", signed=True)
                frame_type = int.from_bytes(offer.data[offset + 6 : offset + 8], "little")
                assert length >= frames.HEADER_LENGTH, f"a frame of length {length} in an offered block"
                aligned = frames.align(length, frames.FRAME_ALIGNMENT)
                data = offer.data[offset : offset + aligned]
                out.append((offer.position + offset, data, frame_type == frames.HDR_TYPE_PAD))
                offset += aligned
        return out

    def data_bytes(self) -> bytes:
        """The DATA frames appended, joined (PAD frames, alone or inside blocks, left out)."""
        return b"".join(data for _, data, is_pad in self.frames() if not is_pad)

    def padding(self) -> list[tuple[int, int]]:
        """(position, aligned length) of every PAD appended, alone or inside a block."""
        return [(position, len(data)) for position, data, is_pad in self.frames() if is_pad]


class FakeTermAppender:
    """`TermAppender` over an in-memory log: what it publishes is recorded as offers of the fake publication.

    It checks what the real one makes safe: a block's first frame length is still zero in the term when it is published
    (nothing of the block was visible before), and blocks and PADs fit their term.
    """

    def __init__(self, publication: FakeReplayPublication, term_length: int) -> None:
        self.publication = publication
        self.term_length = term_length
        self.session_id = publication.session_id
        self.stream_id = publication.stream_id
        self._terms = [bytearray(term_length) for _ in range(3)]
        position = publication.position
        self.term_begin_position = position - position % term_length
        self.term_offset = position % term_length
        self._index = (position // term_length) % 3
        self.closed = False

    @property
    def position(self) -> int:
        return self.term_begin_position + self.term_offset

    @property
    def available_window(self) -> int:
        return int(self.publication.available_window)

    def ensure_term(self) -> bool:
        if self.term_offset < self.term_length:
            return True
        self._index = (self._index + 1) % 3
        self._terms[self._index] = bytearray(self.term_length)  # what the driver's cleaning leaves
        self.term_begin_position += self.term_length
        self.term_offset = 0
        return True

    def term_region(self, length: int) -> memoryview:
        assert self.term_offset + length <= self.term_length
        return memoryview(self._terms[self._index])[self.term_offset : self.term_offset + length]

    def term_buffer(self) -> memoryview:
        return memoryview(self._terms[self._index])

    def clear_length_at(self, term_offset: int) -> None:
        if term_offset < self.term_length:
            self._terms[self._index][term_offset : term_offset + 4] = bytes(4)

    def publish_block(self, length: int, first_word: int) -> int:
        term = self._terms[self._index]
        offset = self.term_offset
        assert 0 < length <= self.term_length - offset
        assert term[offset : offset + 4] == bytes(4), "the block's first frame was visible before it was published"
        data = first_word.to_bytes(8, "little", signed=True) + bytes(term[offset + 8 : offset + length])
        self.publication.offers.append(Offer(self.position, data))
        self.term_offset += length
        self.publication.position = self.position
        return self.position

    def append_padding(self, frame_length: int) -> int:
        aligned = frames.align(frame_length, frames.FRAME_ALIGNMENT)
        assert frame_length >= frames.HEADER_LENGTH and self.term_offset + aligned <= self.term_length
        term = self._terms[self._index]
        assert term[self.term_offset : self.term_offset + 4] == bytes(4), "a frame length where the PAD goes"
        end = self.term_offset + aligned
        assert end == self.term_length or term[end : end + 4] == bytes(4), "bytes read past the PAD are reachable"
        self.publication.offers.append(Offer(self.position, bytes(aligned), is_padding=True))
        self.term_offset = end
        self.publication.position = self.position
        return self.position

    def close(self) -> None:
        self.closed = True


class EventsPublication:
    """The recording-events publication: keeps what was offered (events are advisory, never back-pressured)."""

    def __init__(self) -> None:
        self.offered: list[bytes] = []

    def offer(self, data: bytes, reserved_value: int = 0) -> int:
        self.offered.append(bytes(data))
        return len(self.offered) * 64

    def close(self) -> None:
        pass

    def messages(self) -> list[Any]:
        return [decode(m) for m in self.offered]


def active_control_session(conductor: FakeConductor, control_session_id: int = 31, image_session_id: int = 5,
                           now_ns: int = 0) -> ControlSession:
    """A real control session over `conductor`'s fake publication, taken through the handshake to ACTIVE."""
    session = ControlSession(conductor, control_session_id, 1, 20, "aeron:ipc", PROTOCOL_SEMANTIC_VERSION, b"",
                             "", image_session_id, Authenticator(), 5 * SECOND, SECOND, now_ns=now_ns,
                             epoch_clock=lambda: 0)
    conductor.publication.is_connected = True
    for _ in range(4):  # INIT -> CONNECTING -> CONNECTED -> AUTHENTICATED, then the connect OK
        session.do_work(now_ns)
    session.on_keep_alive(request(m.KeepAliveRequest, control_session_id=control_session_id, correlation_id=1))
    assert session.state is ControlSessionState.ACTIVE
    conductor.publication.offered.clear()
    return session
