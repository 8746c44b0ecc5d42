"""Helpers shared by the source tests (no tests here): record payloads into a real archive, read back rows."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from aeron_archive_spark.archive.constants import RecordingSignal, SourceLocation
from system.harness import Harness, wait_for


def source_options(h: Harness, remote: bool = False, **extra: Any) -> dict[str, str]:
    """Options naming the harness's archive: its directory, or its (IPC) control endpoint."""
    if remote:
        options = {
            "aeronDir": h.aeron_dir,
            "controlChannel": h.ctx.local_control_channel,
            "controlStreamId": str(h.ctx.local_control_stream_id),
            "controlResponseChannel": "aeron:ipc",
            "replayChannel": "aeron:ipc",
        }
    else:
        options = {"archiveDir": h.ctx.archive_dir}
    options.update({k: str(v) for k, v in extra.items()})
    return options


def framed_length(length: int, max_payload: int) -> int:
    """Bytes a message of `length` occupies in a term (Aeron's `FrameDescriptor.computeFragmentedFrameLength`)."""
    whole, rest = divmod(length, max_payload)
    if whole == 0 or (whole == 1 and rest == 0):
        return (length + 32 + 31) & ~31
    last = (rest + 32 + 31) & ~31 if rest else 0
    return whole * (max_payload + 32) + last


class Recorder:
    """One recorded exclusive publication: publish, and remember each message's (position, payload)."""

    def __init__(self, h: Harness, channel: str, stream_id: int, start: bool = True) -> None:
        """`start=False`: the channel is already being recorded; a new publication makes a new recording."""
        self.h = h
        self.channel = channel
        self.stream_id = stream_id
        starts = len(h.signals.of(RecordingSignal.START))
        self.subscription_id = (h.client.start_recording(channel, stream_id, SourceLocation.LOCAL) if start
                                else None)
        self.publication = h.client.aeron.add_exclusive_publication(channel, stream_id)
        self.recording_id = self._await_own_start(starts)
        self.messages: list[tuple[int, bytes]] = []
        self.reserved: list[int] = []

    def _await_own_start(self, starts: int) -> int:
        """The recording of this publication's session, skipping any other START.

        The driver is shared by the whole test session: a publication of an earlier test that is closed but still
        draining accepts the new recording subscription too (the driver links draining IPC publications), and is
        then recorded first, as an empty recording at its old position. Taking the first START would bind this
        Recorder to that recording and wait forever for it to grow.
        """
        session_id = self.publication.session_id
        count = starts
        while True:
            count += 1
            recording_id = self.h.await_signal(RecordingSignal.START, count=count).recording_id
            descriptor = self.h.client.list_recording(recording_id)
            if descriptor is not None and descriptor.session_id == session_id:
                return recording_id

    def publish(self, payloads: Iterable[bytes], wait: bool = True, reserved: int | None = None
                ) -> list[tuple[int, bytes]]:
        """Offer each payload (retrying back pressure); `reserved`: reserved value of message i is reserved + i."""
        sent = []
        max_payload = self.publication.max_payload_length
        for i, payload in enumerate(payloads):
            value = 0 if reserved is None else reserved + i
            deadline = time.monotonic() + 20
            while (end := self.publication.offer(payload, value)) <= 0:
                if time.monotonic() > deadline:
                    raise AssertionError(f"offer failed with {end} for 20s")
                time.sleep(0.0001)
            # A message that does not fit in the rest of a term goes after padding: derive its start from its end.
            sent.append((end - framed_length(len(payload), max_payload), payload))
            self.reserved.append(value)
        self.messages.extend(sent)
        if wait:
            self.wait_recorded()
        return sent

    @property
    def position(self) -> int:
        return int(self.publication.position)

    def wait_recorded(self) -> None:
        target = self.position
        wait_for(lambda: self.h.client.get_recording_position(self.recording_id) >= target,
                 what=f"recording {self.recording_id} to reach {target}")

    def stop(self) -> int:
        self.wait_recorded()
        assert self.subscription_id is not None
        self.h.client.stop_recording_subscription(self.subscription_id)
        self.h.await_signal(RecordingSignal.STOP, self.recording_id)
        return self.position

    def close(self) -> None:
        self.publication.close()


def rows_of(df: Any) -> list[tuple[int, int, bytes]]:
    """(recordingId, position, value) of a DataFrame, in (recordingId, position) order."""
    return sorted((r.recordingId, r.position, bytes(r.value)) for r in df.select("recordingId", "position", "value")
                  .collect())
