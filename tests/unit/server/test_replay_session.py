"""ReplaySession state by state: INIT → REPLAY → INACTIVE → DONE, with a fake publication, counters and clocks.

The recording is written with the real `RecordingWriter` into a temporary archive directory and read back by the
real `RecordingReader`; replayed frames must equal the recorded ones with the publication's session and stream
ids, at the same positions.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aeron_archive_spark.archive.exceptions import ErrorCode
from aeron_archive_spark.archive.native import BACK_PRESSURED, MAX_POSITION_EXCEEDED, NOT_CONNECTED, NativeAeronError
from aeron_archive_spark.archive.server.agent import SessionWorker
from aeron_archive_spark.archive.server.counters import WorkerTotals
from aeron_archive_spark.archive.server.replay_session import LimitCounter, ReplaySession, ReplaySessionState
from aeron_archive_spark.archive.server.session import Session
from aeron_archive_spark.archive.storage.checksums import Checksum, checksum_for_name
from aeron_archive_spark.archive.storage import frames
from aeron_archive_spark.archive.storage.frames import HDR_TYPE_PAD, HEADER_LENGTH, TYPE_FIELD_OFFSET
from aeron_archive_spark.archive.storage.recording_reader import RecordingReader
from aeron_archive_spark.archive.storage.recording_writer import RecordingWriter
from aeron_archive_spark.archive.storage.segments import segment_file_name
from tests.unit.server.fakes import SECOND, FakeClock, FakeCountersReader, FakeReplayPublication, FakeTermAppender
from tests.unit.storage_helpers import INITIAL_TERM_ID, SEGMENT_LENGTH, STREAM_ID, TERM_LENGTH, StreamBuilder

RECORDING_ID = 3
REPLAY_SESSION_ID = (1 << 32) | 555
CORRELATION_ID = 71
CONNECT_TIMEOUT_NS = 5 * SECOND
REPLAY_SESSION = 555  # the replay publication's session id
REPLAY_STREAM = 66
LIMIT_COUNTER_ID = 12
READ_TIME_NS = 700
State = ReplaySessionState
MAX_LENGTH = (1 << 63) - 1


def build(session_id: int, stream_id: int, fill: Callable[[StreamBuilder], object]) -> StreamBuilder:
    builder = StreamBuilder(session_id=session_id, stream_id=stream_id)
    fill(builder)
    return builder


class Recording:
    """A recording on disk plus the same stream as a replay to REPLAY_SESSION/REPLAY_STREAM must look."""

    def __init__(self, archive_dir: Path, fill: Callable[[StreamBuilder], object],
                 checksum: Checksum | None = None) -> None:
        self.archive_dir = archive_dir
        self.recorded = build(42, STREAM_ID, fill)
        self.replayed = build(REPLAY_SESSION, REPLAY_STREAM, fill)
        with RecordingWriter(archive_dir, RECORDING_ID, 0, 0, TERM_LENGTH, SEGMENT_LENGTH,
                             checksum=checksum) as writer:
            writer.init()
            for _, block in self.recorded.blocks():
                writer.on_block(block)

    @property
    def stop_position(self) -> int:
        return self.recorded.position

    def frame_positions(self) -> list[int]:
        return [f.position for f in self.recorded.frames if not f.is_pad]

    def expected(self, from_position: int, to_position: int) -> bytes:
        """The DATA frames a replay of [from, to) must offer, ids rewritten (a frame starting before `to` counts)."""
        return b"".join(f.data for f in self.replayed.frames
                        if not f.is_pad and from_position <= f.position < to_position)

    def layout(self, from_position: int, to_position: int) -> list[tuple[int, int, bool]]:
        """(position, aligned length, is PAD) of every frame a replay of [from, to) must append, PADs included."""
        return [(f.position, f.length, f.is_pad) for f in self.recorded.frames
                if from_position <= f.position < to_position]

    def pads(self) -> list[tuple[int, int]]:
        return [(f.position, f.length) for f in self.recorded.frames if f.is_pad]

    def segment(self, base: int = 0) -> Path:
        return self.archive_dir / segment_file_name(RECORDING_ID, base)


def messages(count: int, length: int = 200) -> Callable[[StreamBuilder], object]:
    return lambda b: b.append_many([length] * count)


class Rig:
    # Which replay path the session takes: offer_block (False) or blocks read straight into the term (True); the
    # autouse fixture below runs every test on both, but for those that script offer_block's results.
    into_term = False

    def __init__(self, archive_dir: Path, *, replay_position: int = 0, replay_length: int | None = None,
                 stop_position: int, limit_counter: LimitCounter | None = None, buffer_length: int = 4096,
                 publication: FakeReplayPublication | None = None, checksum: Checksum | None = None,
                 appender_factory: bool = True) -> None:
        self.clock = FakeClock()
        self.io_clock = FakeClock(step=READ_TIME_NS)
        self.start_ns = self.clock.now
        if publication is None:
            publication = FakeReplayPublication(REPLAY_SESSION, REPLAY_STREAM, initial_position=replay_position)
        self.publication = publication
        self.appenders_made: list[FakeTermAppender] = []
        self.reader = RecordingReader(archive_dir, RECORDING_ID, 0, TERM_LENGTH, SEGMENT_LENGTH, INITIAL_TERM_ID,
                                      STREAM_ID)
        self.totals = WorkerTotals()
        self.oks: list[tuple[int, int]] = []
        self.errors: list[tuple[int, int, str]] = []
        length = stop_position - replay_position if replay_length is None else replay_length
        self.session = ReplaySession(
            replay_session_id=REPLAY_SESSION_ID, correlation_id=CORRELATION_ID, control_session_id=9,
            recording_id=RECORDING_ID, replay_position=replay_position, replay_length=length, start_position=0,
            stop_position=stop_position, limit_counter=limit_counter, publication=self.publication,
            reader=self.reader, buffer=bytearray(buffer_length), term_length=TERM_LENGTH, stream_id=STREAM_ID,
            checksum=checksum, connect_timeout_ns=CONNECT_TIMEOUT_NS, totals=self.totals, now_ns=self.clock.now,
            nano_clock=self.io_clock, send_ok=lambda c, r: self.oks.append((c, r)),
            send_error=lambda c, code, message: self.errors.append((c, code, message)),
            appender=FakeTermAppender(self.publication, TERM_LENGTH) if self.into_term else None,
            appender_factory=self._make_appender if appender_factory else None)

    def _make_appender(self) -> FakeTermAppender:
        """What the conductor's factory gives a replay that meets a PAD the C client cannot append."""
        appender = FakeTermAppender(self.publication, TERM_LENGTH)
        self.appenders_made.append(appender)
        return appender

    @property
    def state(self) -> ReplaySessionState:
        return self.session.state

    def work(self) -> int:
        return self.session.do_work(self.clock.now)

    def start(self) -> None:
        """INIT → REPLAY with a connected publication."""
        self.publication.is_connected = True
        self.work()
        assert self.state is State.REPLAY

    def run(self, max_cycles: int = 10_000) -> None:
        for _ in range(max_cycles):
            if self.session.is_done():
                return
            self.work()
        raise AssertionError(f"replay not done after {max_cycles} cycles: {self.state}")

    def offered_layout(self) -> list[tuple[int, int, bool]]:
        return [(o.position, len(o.data), o.is_padding) for o in self.publication.offers]


@pytest.fixture(autouse=True, params=[False, True], ids=["offer-block", "into-term"])
def replay_path(request: pytest.FixtureRequest) -> Iterator[bool]:
    Rig.into_term = request.param
    yield request.param
    Rig.into_term = False


def offer_block_path_only() -> None:
    if Rig.into_term:
        pytest.skip("scripts the C publication's offer results: the into-term path has no offer to refuse")


# -- INIT -----------------------------------------------------------------------------------------------------
def test_init_waits_for_the_first_segment_file_then_fails_after_the_connect_timeout(tmp_path: Path) -> None:
    rig = Rig(tmp_path, stop_position=4096)
    rig.publication.is_connected = True
    assert rig.work() == 0
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS
    assert rig.work() == 0
    assert rig.state is State.INIT
    rig.clock.advance(1)
    rig.work()
    assert rig.state is State.INACTIVE
    rig.work()
    assert rig.state is State.DONE
    assert rig.oks == []
    assert rig.publication.revoked
    assert rig.session.error is not None
    assert rig.session.error.message == (f"recording segment file not created for recordingId={RECORDING_ID} "
                                         f"position=0")
    assert rig.errors == []  # reported by the conductor once the replayer hands the session back
    rig.session.send_pending_error()
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC, rig.session.error.message)]


def test_init_confirms_the_replay_once_then_waits_for_the_publication_to_connect(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    assert rig.work() == 0
    assert rig.oks == [(CORRELATION_ID, REPLAY_SESSION_ID)]
    assert rig.state is State.INIT
    rig.work()
    assert rig.oks == [(CORRELATION_ID, REPLAY_SESSION_ID)]
    rig.publication.is_connected = True
    assert rig.work() == 1
    assert rig.state is State.REPLAY
    assert rig.publication.offers == []


def test_a_replay_publication_that_never_connects_times_out_with_an_error(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.clock.now = rig.start_ns + CONNECT_TIMEOUT_NS
    rig.work()
    assert rig.state is State.INIT
    rig.clock.advance(1)
    rig.work()
    assert rig.state is State.INACTIVE
    rig.work()
    assert rig.state is State.DONE
    assert rig.publication.revoked
    rig.session.send_pending_error()
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC,
                           f"no connection established for replay of recordingId={RECORDING_ID}")]


def test_a_start_position_inside_a_frame_is_refused(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(10))
    inside = recording.frame_positions()[3] + 32 * 3
    rig = Rig(tmp_path, replay_position=inside, stop_position=recording.stop_position)
    rig.publication.is_connected = True
    rig.work()
    assert rig.state is State.INACTIVE
    assert rig.oks == []
    assert rig.session.error is not None
    assert rig.session.error.error_code == ErrorCode.INVALID_POSITION
    rig.work()
    assert rig.state is State.DONE
    assert rig.publication.revoked


# -- REPLAY ---------------------------------------------------------------------------------------------------
def test_a_full_replay_offers_every_frame_at_its_position_then_closes_the_publication(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(100, 300))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.data_bytes() == recording.expected(0, recording.stop_position)
    assert rig.publication.position == recording.stop_position
    layout = rig.offered_layout()
    assert layout[0][0] == 0
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(layout))
    assert rig.publication.closed and not rig.publication.revoked
    assert rig.session.error is None
    assert rig.session.replay_position == recording.stop_position
    # Read statistics: a read stops at the buffer end, so the partial frame there is read again next time.
    assert rig.totals.total_bytes == rig.reader.total_read_bytes >= recording.stop_position
    assert rig.totals.max_time_ns == READ_TIME_NS
    assert rig.totals.total_time_ns % READ_TIME_NS == 0 and rig.totals.total_time_ns >= READ_TIME_NS * len(layout)


def test_a_replay_from_a_frame_in_the_middle_starts_there(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(30))
    start = recording.frame_positions()[7]
    rig = Rig(tmp_path, replay_position=start, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.offers[0].position == start
    assert rig.publication.data_bytes() == recording.expected(start, recording.stop_position)


def test_a_replay_length_ends_the_replay_at_that_position(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(60, 300))
    end = recording.frame_positions()[40]
    rig = Rig(tmp_path, replay_length=end, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.data_bytes() == recording.expected(0, end)
    assert rig.publication.position == end
    assert rig.publication.closed and not rig.publication.revoked


def test_a_replay_length_inside_a_frame_still_sends_that_whole_frame(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(20, 300))
    frame = recording.frame_positions()[12]
    rig = Rig(tmp_path, replay_length=frame + 32, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.data_bytes() == recording.expected(0, frame + 32)
    assert rig.publication.position == recording.frame_positions()[13]


def test_a_bounded_replay_follows_its_limit_counter_and_ends_when_the_counter_goes(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(60, 300))
    positions = recording.frame_positions()
    first_limit, second_limit = positions[20], positions[45]
    counters = FakeCountersReader()
    counters.allocate(LIMIT_COUNTER_ID, first_limit)
    limit = LimitCounter(counters, LIMIT_COUNTER_ID)
    rig = Rig(tmp_path, replay_length=MAX_LENGTH, stop_position=first_limit, limit_counter=limit)
    rig.start()
    for _ in range(50):
        rig.work()
    assert rig.state is State.REPLAY  # caught up with the limit: waits for it to move
    assert rig.publication.position == first_limit
    assert rig.work() == 0
    counters.values[LIMIT_COUNTER_ID] = second_limit
    for _ in range(50):
        rig.work()
    assert rig.state is State.REPLAY
    assert rig.publication.position == second_limit
    counters.states[LIMIT_COUNTER_ID] = FakeCountersReader.RECLAIMED
    rig.run()
    assert rig.publication.data_bytes() == recording.expected(0, second_limit)
    assert rig.publication.closed and not rig.publication.revoked
    assert rig.session.error is None


def test_a_limit_counter_closed_after_a_last_move_lets_the_replay_reach_its_final_value(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(40, 300))
    positions = recording.frame_positions()
    counters = FakeCountersReader()
    counters.allocate(LIMIT_COUNTER_ID, positions[10])
    rig = Rig(tmp_path, replay_length=MAX_LENGTH, stop_position=positions[10],
              limit_counter=LimitCounter(counters, LIMIT_COUNTER_ID))
    rig.start()
    for _ in range(20):
        rig.work()
    counters.values[LIMIT_COUNTER_ID] = positions[30]
    counters.states[LIMIT_COUNTER_ID] = FakeCountersReader.RECLAIMED  # the recording stopped at positions[30]
    rig.run()
    assert rig.publication.position == positions[30]
    assert rig.publication.data_bytes() == recording.expected(0, positions[30])


def test_back_pressure_offers_the_same_batch_again_without_rereading(tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, messages(40, 300))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.work()
    position = rig.session.replay_position
    read = rig.reader.total_read_bytes
    rig.publication.results = [BACK_PRESSURED, BACK_PRESSURED]
    assert rig.work() == 0
    refused_batch_read = rig.reader.total_read_bytes
    assert refused_batch_read > read  # the refused batch was read once...
    assert rig.work() == 0
    assert rig.session.replay_position == position
    assert rig.reader.total_read_bytes == refused_batch_read  # ...and not again while refused
    assert rig.work() == 1
    assert rig.reader.total_read_bytes == refused_batch_read  # ...nor when it finally goes
    assert rig.session.replay_position > position
    assert rig.state is State.REPLAY
    rig.run()
    assert rig.publication.data_bytes() == recording.expected(0, recording.stop_position)
    assert rig.publication.refused == 2


def test_no_window_means_no_offer(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.publication.available_window = 0
    assert rig.work() == 0
    assert rig.publication.offers == []
    rig.publication.available_window = 1 << 20
    assert rig.work() > 0


def test_a_publication_that_is_no_longer_connected_ends_the_replay_by_revoking_it(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(40, 300))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.work()
    rig.publication.is_connected = False
    rig.work()
    assert rig.state is State.INACTIVE
    rig.work()
    assert rig.state is State.DONE
    assert rig.publication.revoked
    assert rig.session.error is None


def test_an_offer_refused_as_not_connected_ends_the_replay_by_revoking(tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.publication.results = [NOT_CONNECTED]
    rig.work()
    assert rig.state is State.INACTIVE
    rig.run()
    assert rig.publication.revoked


def test_max_position_exceeded_ends_the_replay_with_a_normal_close(tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.publication.results = [MAX_POSITION_EXCEEDED]
    rig.run()
    assert rig.publication.closed and not rig.publication.revoked


def test_abort_mid_replay_stops_offering_and_revokes_the_publication(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(60, 300))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.work()
    offers = len(rig.publication.offers)
    rig.session.abort("stopped by client")
    assert rig.state is State.REPLAY  # the replayer thread acts on it at its next duty cycle
    assert rig.work() == 1
    assert rig.state is State.DONE
    assert len(rig.publication.offers) == offers
    assert rig.publication.revoked
    assert rig.session.error is None


def test_a_read_error_mid_replay_fails_the_replay_and_its_error_reaches_the_control_session(
        tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(80, 300))
    corrupt_at = recording.frame_positions()[50]
    with open(recording.segment(), "r+b") as f:  # a torn recording: zeros where a frame should be
        f.seek(corrupt_at)
        f.write(bytes(1024))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.revoked
    assert rig.publication.data_bytes() == recording.expected(0, corrupt_at)
    expected = f"unexpected end of recording at position={corrupt_at} of recordingId={RECORDING_ID}"
    assert rig.session.error is not None and rig.session.error.message == expected
    rig.session.send_pending_error()
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC, expected)]


def test_a_missing_segment_mid_replay_is_an_error(tmp_path: Path) -> None:
    recording = Recording(tmp_path, lambda b: b.fill_to(SEGMENT_LENGTH + 8192, 400))
    os.remove(recording.segment(SEGMENT_LENGTH))
    rig = Rig(tmp_path, stop_position=recording.stop_position, buffer_length=TERM_LENGTH)
    rig.start()
    rig.run()
    assert rig.publication.revoked
    assert rig.session.error is not None
    assert "recording segment not found" in rig.session.error.message


def test_a_pad_at_the_end_of_a_term_becomes_padding_on_the_publication(tmp_path: Path) -> None:
    def fill(b: StreamBuilder) -> None:
        b.fill_to(TERM_LENGTH - 1000, 300)
        b.append(2000)  # does not fit in the rest of the term: PAD to the term end first
        b.append_many([300] * 5)

    recording = Recording(tmp_path, fill)
    (pad,) = [f for f in recording.recorded.frames if f.is_pad]
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.padding() == [(pad.position, TERM_LENGTH - pad.position)]
    assert rig.publication.data_bytes() == recording.expected(0, recording.stop_position)
    after = [o for o in rig.publication.offers if o.position >= TERM_LENGTH]
    assert after[0].position == TERM_LENGTH
    assert rig.publication.position == recording.stop_position


def test_a_pad_that_starts_a_batch_goes_alone_and_back_pressure_appends_it_on_a_later_cycle(tmp_path: Path) -> None:
    offer_block_path_only()
    def fill(b: StreamBuilder) -> None:
        b.fill_to(TERM_LENGTH - 600, 300)
        b.append(2000)
        b.append_many([300] * 3)

    recording = Recording(tmp_path, fill)
    (pad,) = [f for f in recording.recorded.frames if f.is_pad]
    rig = Rig(tmp_path, replay_position=pad.position, stop_position=recording.stop_position)
    rig.start()
    rig.publication.results = [BACK_PRESSURED]  # offer_block wants a DATA frame first: the PAD goes alone, refused
    assert rig.work() == 0
    assert rig.session.replay_position == pad.position and rig.publication.offers == []
    rig.run()
    assert rig.publication.offers[0].is_padding
    assert rig.publication.padding() == [(pad.position, TERM_LENGTH - pad.position)]
    assert rig.publication.position == recording.stop_position
    assert rig.publication.data_bytes() == recording.expected(pad.position, recording.stop_position)


def test_close_before_done_releases_the_publication(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(10))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.session.close()
    assert rig.state is State.DONE
    assert rig.publication.closed


# -- failures that must reach the control session (issue 11) ----------------------------------------------------
MAX_MESSAGE_LENGTH = TERM_LENGTH // 8  # what the Aeron C client's append_padding accepts at most in a 64 KiB term
LONG_PAD = 8320  # an end-of-term PAD longer than MAX_MESSAGE_LENGTH + header: left by a near-max-size message


class NativeLimitedPublication(FakeReplayPublication):
    """The fake publication with the C client's limit, as `ExclusivePublication.append_padding` has it: up to
    max_message_length anywhere, longer only where the PAD ends the term."""

    def __init__(self, *args: int, **kwargs: int) -> None:
        super().__init__(*args, **kwargs)
        self.max_message_length = MAX_MESSAGE_LENGTH

    def append_padding(self, length: int) -> int:
        aligned = frames.align(length + HEADER_LENGTH, frames.FRAME_ALIGNMENT)
        if length > MAX_MESSAGE_LENGTH and (self.position % TERM_LENGTH) + aligned != TERM_LENGTH:
            raise ValueError(f"append_padding: a PAD frame of {aligned} bytes longer than max_message_length="
                             f"{MAX_MESSAGE_LENGTH} can only be written to end the term")
        return super().append_padding(length)


class NativeFailingPublication(FakeReplayPublication):
    """offer_block fails as the C client does on a block it refuses, once the publication reaches `fail_at`."""

    fail_at = 0

    def offer_block(self, block: object) -> int:
        if self.position >= self.fail_at:
            raise NativeAeronError(
                "aeron_exclusive_publication_offer_block improperly formatted block (errcode=22)", 22)
        return super().offer_block(block)


def long_pad_recording(b: StreamBuilder) -> None:
    b.fill_to(TERM_LENGTH - LONG_PAD - 2048, 864)  # frames of 896 bytes up to less than 2 KiB before the PAD...
    b.append(TERM_LENGTH - LONG_PAD - b.position - HEADER_LENGTH)  # ...and one frame reaching where it starts
    b.append(LONG_PAD)  # (a near-max message, one frame here) does not fit in the rest: PAD to the term end first
    b.append_many([300] * 5)


def run_on_replayer(rig: Rig, max_cycles: int = 10_000) -> list[ReplaySession]:
    """Drive the session as the archive does: on a replayer `SessionWorker`, whose hand-back reports any error."""
    done: list[ReplaySession] = []
    agent_errors: list[BaseException] = []

    def on_done(session: Session) -> None:
        assert isinstance(session, ReplaySession)
        done.append(session)
        session.send_pending_error()  # what the conductor's hand-back does with a finished replay

    worker = SessionWorker("replayer", agent_errors.append, on_done, nano_clock=rig.io_clock)
    worker.add_session(rig.session)
    for _ in range(max_cycles):
        if done:
            return done
        worker.do_work(rig.clock.now)
    raise AssertionError(f"replay not done after {max_cycles} cycles: {rig.state}, agent errors {agent_errors}")


def test_a_native_error_of_the_publication_fails_the_replay_with_an_error_to_the_control_session(
        tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, messages(80, 300))
    publication = NativeFailingPublication(REPLAY_SESSION, REPLAY_STREAM)
    publication.fail_at = recording.frame_positions()[40]
    rig = Rig(tmp_path, stop_position=recording.stop_position, publication=publication)
    rig.publication.is_connected = True
    assert run_on_replayer(rig) == [rig.session]
    assert rig.state is State.DONE
    assert rig.publication.revoked
    failed_at = rig.publication.position
    assert publication.fail_at <= failed_at < recording.stop_position
    assert rig.publication.data_bytes() == recording.expected(0, failed_at)
    assert rig.oks == [(CORRELATION_ID, REPLAY_SESSION_ID)]
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC,
                           f"replay of recordingId={RECORDING_ID} failed at position={failed_at}: NativeAeronError: "
                           "aeron_exclusive_publication_offer_block improperly formatted block (errcode=22)")]


def turn_into_pad(recording: Recording, position: int) -> int:
    """Overwrite the type of the DATA frame at `position` with PAD (what verify calls a DATA frame turned into PAD)."""
    with open(recording.segment(), "r+b") as f:
        f.seek(position)
        header = bytearray(f.read(HEADER_LENGTH))
        length = int.from_bytes(header[:4], "little", signed=True)
        header[TYPE_FIELD_OFFSET:TYPE_FIELD_OFFSET + 2] = HDR_TYPE_PAD.to_bytes(2, "little")
        f.seek(position)
        f.write(header)
    return length


def test_a_pad_in_the_middle_of_a_term_fails_the_replay_naming_recording_position_and_length(
        tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(80, 300))
    corrupt_at = recording.frame_positions()[50]
    assert corrupt_at % TERM_LENGTH != 0
    pad_length = turn_into_pad(recording, corrupt_at)
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    assert run_on_replayer(rig) == [rig.session]
    assert rig.publication.revoked
    assert not any(o.is_padding for o in rig.publication.offers)
    assert rig.publication.data_bytes() == recording.expected(0, corrupt_at)  # everything before it, then stop
    expected = (f"corrupt recording: PAD frame at position={corrupt_at} of recordingId={RECORDING_ID} with "
                f"length={pad_length} holds non-zero bytes after its header (a DATA frame turned into padding?)")
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC, expected)]


def test_a_pad_in_the_middle_of_a_term_fails_even_as_the_first_frame_replayed(tmp_path: Path) -> None:
    recording = Recording(tmp_path, messages(80, 300))
    corrupt_at = recording.frame_positions()[20]
    turn_into_pad(recording, corrupt_at)
    rig = Rig(tmp_path, replay_position=corrupt_at, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.offers == []
    assert rig.session.error is not None and f"PAD frame at position={corrupt_at}" in rig.session.error.message


def test_an_unexpected_exception_in_the_replay_is_an_error_for_the_control_session(tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, messages(40, 300))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.work()
    position = rig.session.replay_position

    def broken(block: object) -> int:
        raise RuntimeError("boom")

    rig.publication.offer_block = broken  # type: ignore[method-assign]
    assert run_on_replayer(rig) == [rig.session]
    assert rig.publication.revoked
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC,
                           f"replay of recordingId={RECORDING_ID} failed at position={position}: RuntimeError: boom")]


def test_an_unexpected_exception_publishing_into_the_term_is_an_error_for_the_control_session(tmp_path: Path) -> None:
    if not Rig.into_term:
        pytest.skip("the into-term path's own publish")
    recording = Recording(tmp_path, messages(40, 300))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.work()
    position = rig.session.replay_position
    appender = rig.session._appender
    assert isinstance(appender, FakeTermAppender)

    def broken(length: int, first_word: int) -> int:
        raise RuntimeError("boom")

    appender.publish_block = broken  # type: ignore[method-assign]
    assert run_on_replayer(rig) == [rig.session]
    assert rig.publication.revoked and appender.closed
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC,
                           f"replay of recordingId={RECORDING_ID} failed at position={position}: RuntimeError: boom")]


def test_a_replay_with_checksums_does_not_read_into_the_term(tmp_path: Path) -> None:
    """Frames must be checked before they enter the log: a checksum replay closes the appender and copies."""
    recording = Recording(tmp_path, messages(10))
    appender = FakeTermAppender(FakeReplayPublication(REPLAY_SESSION, REPLAY_STREAM), TERM_LENGTH)
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    session = ReplaySession(
        replay_session_id=REPLAY_SESSION_ID, correlation_id=CORRELATION_ID, control_session_id=9,
        recording_id=RECORDING_ID, replay_position=0, replay_length=recording.stop_position, start_position=0,
        stop_position=recording.stop_position, limit_counter=None, publication=rig.publication, reader=rig.reader,
        buffer=bytearray(4096), term_length=TERM_LENGTH, stream_id=STREAM_ID, checksum=checksum_for_name("crc-32"),
        connect_timeout_ns=CONNECT_TIMEOUT_NS, totals=rig.totals, now_ns=rig.clock.now, nano_clock=rig.io_clock,
        send_ok=lambda c, r: None, send_error=lambda c, code, message: None, appender=appender)
    assert session._appender is None and appender.closed


# -- PAD frames anywhere in a term (issue 30) --------------------------------------------------------------------
# Payload lengths of PADs left mid-term by a publisher's appendPadding (Java's takes up to the max framed length) or a
# receiver's gap fill (any length): a bare header, short ones, one just above what the C client's append_padding
# takes, and one far above it.
MID_TERM_PADS = (0, 200, 1000, MAX_MESSAGE_LENGTH + 100, 3 * MAX_MESSAGE_LENGTH)


def padded_recording(b: StreamBuilder) -> None:
    """PADs mid-term, at the start of the term that opens the second segment, and right before the stop."""
    b.append_many([300] * 5)
    for length in MID_TERM_PADS:
        b.append_padding(length)
        b.append_many([250] * 7)
    b.append_padding(200)
    b.append_padding(40)  # two PADs in a row
    while b.position < SEGMENT_LENGTH - 1000:
        b.append(300)
    b.pad_to_term_end()
    assert b.position == SEGMENT_LENGTH
    b.append_padding(500)  # the first frame of a segment file
    b.append_many([100] * 20)
    b.append_padding(MAX_MESSAGE_LENGTH + 300)
    b.append_many([100] * 3)
    b.append_padding(100)  # the last frame before the stop position


def replayed_layout(rig: Rig) -> list[tuple[int, int, bool]]:
    return [(position, len(data), is_pad) for position, data, is_pad in rig.publication.frames()]


@pytest.mark.parametrize("buffer_length", [4096, 1504, TERM_LENGTH], ids=["4k", "mtu", "term"])
def test_pads_anywhere_in_a_term_are_replayed_as_padding_at_their_positions(
        tmp_path: Path, buffer_length: int) -> None:
    recording = Recording(tmp_path, padded_recording)
    pads = recording.pads()
    assert len(pads) >= 10 and any(p % TERM_LENGTH == 0 for p, _ in pads)
    assert any(length - HEADER_LENGTH > MAX_MESSAGE_LENGTH and (p + length) % TERM_LENGTH for p, length in pads)
    stop = recording.stop_position
    rig = Rig(tmp_path, stop_position=stop, buffer_length=buffer_length,
              publication=NativeLimitedPublication(REPLAY_SESSION, REPLAY_STREAM))
    rig.start()
    rig.run()
    assert rig.session.error is None
    assert replayed_layout(rig) == recording.layout(0, stop)
    assert rig.publication.padding() == pads
    assert rig.publication.data_bytes() == recording.expected(0, stop)
    assert rig.publication.position == rig.session.replay_position == stop
    assert rig.publication.closed and not rig.publication.revoked


def test_a_pad_inside_a_block_carries_the_replays_ids_and_its_recorded_header(tmp_path: Path) -> None:
    recording = Recording(tmp_path, padded_recording)
    rig = Rig(tmp_path, stop_position=recording.stop_position, buffer_length=TERM_LENGTH)
    rig.start()
    rig.run()
    replayed = {f.position: f.data for f in recording.replayed.frames if f.is_pad}
    inside = [(position, data) for position, data, is_pad in rig.publication.frames()
              if is_pad and any(data)]  # PADs appended alone are the fake's zeros
    assert inside, "some PADs travel inside blocks"
    for position, data in inside:
        assert data == replayed[position]


def test_a_long_pad_mid_term_moves_an_offer_block_replay_onto_the_term_appender(tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, padded_recording)
    long_pad = next(p for p, length in recording.pads() if length - HEADER_LENGTH > 2 * MAX_MESSAGE_LENGTH)
    rig = Rig(tmp_path, replay_position=long_pad, stop_position=recording.stop_position,
              publication=NativeLimitedPublication(REPLAY_SESSION, REPLAY_STREAM, initial_position=long_pad))
    rig.start()
    rig.run()
    assert len(rig.appenders_made) == 1 and rig.appenders_made[0].closed
    assert replayed_layout(rig) == recording.layout(long_pad, recording.stop_position)
    assert rig.publication.data_bytes() == recording.expected(long_pad, recording.stop_position)


def test_a_long_pad_mid_term_without_a_term_appender_fails_naming_the_limit(tmp_path: Path) -> None:
    offer_block_path_only()
    recording = Recording(tmp_path, padded_recording)
    position, length = next((p, n) for p, n in recording.pads() if n - HEADER_LENGTH > 2 * MAX_MESSAGE_LENGTH)
    rig = Rig(tmp_path, replay_position=position, stop_position=recording.stop_position, appender_factory=False,
              publication=NativeLimitedPublication(REPLAY_SESSION, REPLAY_STREAM, initial_position=position))
    rig.start()
    assert run_on_replayer(rig) == [rig.session]
    assert rig.publication.offers == [] and rig.publication.revoked
    assert rig.errors == [(CORRELATION_ID, ErrorCode.GENERIC,
                           f"PAD frame at position={position} of recordingId={RECORDING_ID} with length={length}"
                           f" is longer than the Aeron C client's append_padding accepts (max_message_length="
                           f"{MAX_MESSAGE_LENGTH}) and the replay publication's log buffer cannot be mapped")]


def test_a_replay_may_start_and_end_at_a_pad_in_the_middle_of_a_term(tmp_path: Path) -> None:
    recording = Recording(tmp_path, padded_recording)
    pads = [p for p, _ in recording.pads() if p % TERM_LENGTH]
    start, end = pads[1], pads[4]
    rig = Rig(tmp_path, replay_position=start, replay_length=end + 32 - start, stop_position=recording.stop_position,
              publication=NativeLimitedPublication(REPLAY_SESSION, REPLAY_STREAM, initial_position=start))
    rig.start()
    rig.run()
    # A replay sends whole the frame its limit falls in, as Java's does: the PAD at `end` goes too.
    end_of_pad = end + dict(recording.pads())[end]
    assert replayed_layout(rig) == recording.layout(start, end_of_pad)
    assert rig.publication.position == end_of_pad


def test_a_replay_with_checksums_checks_frames_around_pads_on_both_paths(tmp_path: Path) -> None:
    crc = checksum_for_name("crc-32")
    recording = Recording(tmp_path, padded_recording, checksum=crc)
    rig = Rig(tmp_path, stop_position=recording.stop_position, checksum=crc,
              publication=NativeLimitedPublication(REPLAY_SESSION, REPLAY_STREAM))
    rig.start()
    rig.run()
    assert rig.session.error is None
    assert replayed_layout(rig) == recording.layout(0, recording.stop_position)
    assert rig.publication.data_bytes() == recording.expected(0, recording.stop_position)
    if not Rig.into_term:
        assert len(rig.appenders_made) == 1  # the long PAD mid-term: frames after it are checked in the term


def test_a_checksum_mismatch_after_a_long_pad_is_caught_in_the_term(tmp_path: Path) -> None:
    offer_block_path_only()
    crc = checksum_for_name("crc-32")
    recording = Recording(tmp_path, padded_recording, checksum=crc)
    long_pad = next(p for p, n in recording.pads() if n - HEADER_LENGTH > 2 * MAX_MESSAGE_LENGTH)
    victim = next(p for p in recording.frame_positions() if p > long_pad + 2000)
    with open(recording.segment(), "r+b") as f:
        f.seek(victim + HEADER_LENGTH + 7)
        f.write(b"\xff")
    rig = Rig(tmp_path, stop_position=recording.stop_position, checksum=crc,
              publication=NativeLimitedPublication(REPLAY_SESSION, REPLAY_STREAM))
    rig.start()
    rig.run()
    assert rig.appenders_made and rig.publication.revoked
    assert rig.session.error is not None
    assert rig.session.error.message == f"CRC checksum mismatch at position={victim} of recordingId={RECORDING_ID}"
    assert rig.publication.position <= victim
    assert rig.publication.data_bytes() == recording.expected(0, rig.publication.position)


def test_a_pad_that_runs_past_its_term_fails_the_replay(tmp_path: Path) -> None:
    recording = Recording(tmp_path, padded_recording)
    position, length = recording.pads()[2]
    with open(recording.segment(), "r+b") as f:
        f.seek(position)
        f.write((TERM_LENGTH - position % TERM_LENGTH + 64).to_bytes(4, "little"))
    rig = Rig(tmp_path, stop_position=recording.stop_position, buffer_length=TERM_LENGTH)
    rig.start()
    rig.run()
    assert rig.publication.revoked and rig.publication.position == position
    assert rig.session.error is not None
    assert rig.session.error.message.startswith(f"corrupt recording: PAD frame at position={position} ")
    assert rig.session.error.message.endswith("runs past its term")


def test_a_pad_shorter_than_a_header_fails_the_replay(tmp_path: Path) -> None:
    recording = Recording(tmp_path, padded_recording)
    position, _ = recording.pads()[1]
    with open(recording.segment(), "r+b") as f:
        f.seek(position)
        f.write((20).to_bytes(4, "little"))
    rig = Rig(tmp_path, stop_position=recording.stop_position)
    rig.start()
    rig.run()
    assert rig.publication.position == position
    assert rig.session.error is not None and rig.session.error.message == (
        f"corrupt recording: PAD frame at position={position} of recordingId={RECORDING_ID} with length=20 is "
        "shorter than a frame header")
