"""One replay over a response channel (`control-mode=response`), set up step by step without blocking.

Why: over a response channel the replay comes back on a connection the reader opened, so the reading host needs no
port the archive can reach (`responseChannels=true`). Aeron's design costs each such replay a subscription of its
own, a replay token and a request publication naming that subscription (see `client.response_replay`), each a
round trip, and its image then waits for the response publication's setup, which Aeron's media drivers (C and
Java alike) send at most every 100 ms: the first one leaves before the reader's status message has told the
archive's driver where to send. Blocking on each step in turn, as `AeronArchive.replay` does, would cost a span
that ~100 ms in full; `ResponseChannelReplay` starts what it can at once (the token request and the
subscription's add), goes on with each step as its inputs come (`poll`), and so lets a reader overlap many of
them: the read-ahead keeps a window of them in flight while it reads the span before (`read_ahead`), and a single
span's read (`fetch`) drives one.

Steps, each started by `poll` once what it needs is there:
1. a replay token for the recording asked for on the control session, and the subscription's add, both at once;
2. once the subscription is added: the request publication, to the archive's control channel and stream, naming
   the subscription (`response-correlation-id`);
3. once the token is answered and the publication is connected: the replay request, on that publication, with the
   token; the archive answers on the control session (`ControlResponses` files it by its correlation id);
4. once answered: the replay's image comes on the subscription, its session id the low 32 bits of the replay
   session id; once it did, the request publication is closed (Java closes it when the subscription connects;
   before, the response setup that binds the subscription to the replay might not have reached this host).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from aeron_archive_spark.archive.native import NativeAeronError
from aeron_archive_spark.archive.storage.frames import to_int32

if TYPE_CHECKING:
    from aeron_archive_spark.archive.client.replay.responses import ControlResponses
    from aeron_archive_spark.archive.client.response_replay import ReplayRequestPublication
    from aeron_archive_spark.archive.native import Image, PendingSubscription, Subscription

# Waiting for the media driver to settle the request publication's add when it is closed early.
SETTLE_TIMEOUT_S = 1.0
SETTLE_SLEEP_S = 0.0001


class ResponseChannelReplay:
    """The set-up of one replay over a response channel (see the module docstring). One thread."""

    def __init__(
        self,
        responses: ControlResponses,
        recording_id: int,
        position: int,
        length: int,
        channel: str,
        stream_id: int,
    ) -> None:
        """Starts step 1 at once. `channel` is the response channel (`control-mode=response|control=...`)."""
        self.responses = responses
        self.recording_id = recording_id
        self.position = position
        self.length = length
        self.channel = channel
        self.stream_id = stream_id
        self._token_correlation_id: int | None = responses.send_replay_token(recording_id)
        self._token: int | None = None
        self._subscribing: PendingSubscription | None = responses.archive.aeron.async_add_subscription(
            channel, stream_id
        )
        self.subscription: Subscription | None = None
        self._owns_subscription = True
        self._publication: ReplayRequestPublication | None = None
        self.correlation_id: int | None = None  # of the replay request, once sent
        self.replay_session_id: int | None = None

    def owns(self, correlation_id: int) -> bool:
        """Whether `correlation_id` is one of this set-up's requests (its token request, its replay request): an
        error answered to another request on the same session is not this replay's."""
        return correlation_id != -1 and correlation_id in (self._token_correlation_id, self.correlation_id)

    def poll(self) -> int | None:
        """Go on with whatever step can go on; the replay session id once the archive accepted the replay, else
        None. A refusal (of the token or the replay) raises `ArchiveError`, a media driver's refusal of the
        subscription or the publication `NativeAeronError`; the caller then `close`s."""
        if self.replay_session_id is not None:
            self.close_request_if_connected()
            return self.replay_session_id
        if self._token is None and self._token_correlation_id is not None:
            token = self.responses.answer(self._token_correlation_id)
            if token is not None:
                self._token = token
                self.responses.release(self._token_correlation_id)
                self._token_correlation_id = None
        if self.subscription is None and self._subscribing is not None:
            self.subscription = self._subscribing.poll()
            if self.subscription is not None:
                self._subscribing = None
                self._publication = self.responses.archive.replay_request_publication(self.subscription.registration_id)
        if self.correlation_id is None:
            proxy = self._publication.poll() if self._publication is not None else None
            if proxy is None or self._token is None:
                return None
            self.correlation_id = self.responses.send_replay(
                self.recording_id, self.position, self.length, self.channel, self.stream_id, self._token, proxy
            )
        answer = self.responses.answer(self.correlation_id)
        if answer is None:
            return None
        self.replay_session_id = answer
        return answer

    def image(self) -> Image | None:
        """The replay's image once it came (the request publication is then closed)."""
        if self.replay_session_id is None or self.subscription is None:
            return None
        image = self.subscription.image_by_session_id(to_int32(self.replay_session_id))
        if image is not None:
            self._close_request()
        return image

    def close_request_if_connected(self) -> bool:
        """Close the request publication once the replay's image is there; True once it is closed (or gone)."""
        if self._publication is not None:
            self.image()
        return self._publication is None

    def take_subscription(self) -> Subscription:
        """The subscription the replay comes on, now the caller's to close (once the replay was accepted)."""
        assert self.subscription is not None and self.replay_session_id is not None
        self._owns_subscription = False
        return self.subscription

    def _close_request(self) -> None:
        publication, self._publication = self._publication, None
        if publication is None:
            return
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not publication.close() and time.monotonic() < deadline:  # an add still pending: settle it
            time.sleep(SETTLE_SLEEP_S)

    def close(self) -> None:
        """Let go of everything this set-up holds: the request publication, the subscription unless taken (or its
        add), and the answers still filed (the replay's not once taken). A replay the archive accepted is not
        stopped here (the caller knows whether it must be: `replay_session_id`)."""
        self._close_request()
        pending, self._subscribing = self._subscribing, None
        if pending is not None:
            pending.abandon()  # the subscription is closed as soon as the driver adds it
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while time.monotonic() < deadline:
                with contextlib.suppress(NativeAeronError):  # refused: nothing to close
                    pending.poll()
                if pending.is_done:
                    break
                time.sleep(SETTLE_SLEEP_S)
        subscription = self.subscription
        if subscription is not None and self._owns_subscription:
            self.subscription = None
            subscription.close()
        # The replay's answer and later failures are the taker's to release once it took the subscription.
        for correlation_id in (self._token_correlation_id, self.correlation_id if self._owns_subscription else None):
            if correlation_id is not None:
                self.responses.release(correlation_id)
        self._token_correlation_id = None
