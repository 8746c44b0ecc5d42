"""How to reach a running archive: the plain, picklable connection options every remote reader and writer shares.

Plain data only, no I/O: opening clients and control sessions for these options is the connection pool's job
(`archive.client.pool`), which keys its sessions on the fields a control session depends on (everything but the
replay channel and stream, which each replay request names itself), so it must stay frozen and hashable.

`credentials` is the secret an archive started with `serve --secret-file/--secret-env` asks for. It travels with
the options (executors connect too) but is left out of `repr`, `str` and `describe()`, which end up in logs,
Spark's UI and error messages.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from aeron_archive_spark.archive.channel import ChannelUri, validate_mtu
from aeron_archive_spark.archive.constants import (
    CONTROL_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_CHANNEL_DEFAULT,
    CONTROL_RESPONSE_STREAM_ID_DEFAULT,
    CONTROL_STREAM_ID_DEFAULT,
)

REPLAY_CHANNEL_DEFAULT = "aeron:udp?endpoint=localhost:0"
# When the archive is reached over IPC it shares this process's media driver, and so can replay over IPC too:
# no loopback UDP, and no per-replay network publication and image for the driver to run.
REPLAY_CHANNEL_DEFAULT_IPC = "aeron:ipc"


def default_replay_channel(control_channel: str) -> str:
    """The replay channel when none is given: IPC for an archive reached over IPC (the same media driver), else a
    UDP endpoint on an ephemeral port (`REPLAY_CHANNEL_DEFAULT`, localized for remote archives)."""
    return REPLAY_CHANNEL_DEFAULT_IPC if control_channel.strip().startswith("aeron:ipc") else REPLAY_CHANNEL_DEFAULT


# The MTU a read asks an archive to replay with over UDP (option `replayMtu`): frames recorded at Aeron's default
# 1408 then cross the network several to a datagram. Our archive honours it (`channel.replay_mtu_length`); Java's
# replays at the recording's MTU whatever the channel says, so asking is harmless there.
REPLAY_MTU_DEFAULT = 8192


def with_replay_mtu(replay_channel: str, mtu: int | None) -> str:
    """The replay channel asking for replays of `mtu` bytes per datagram: `mtu=N` added to a UDP channel that
    names no MTU of its own (a channel's own `mtu` is kept). IPC replays are left alone: an IPC image has no
    datagrams to save, and `mtu` would only raise its publication's largest message. None: the recording's MTU."""
    if mtu is None:
        return replay_channel
    uri = ChannelUri.parse(replay_channel)
    if not uri.is_udp or uri.get("mtu") is not None:
        return replay_channel
    return str(uri.with_params(mtu=validate_mtu(mtu, "replayMtu")))


REPLAY_STREAM_ID_DEFAULT = 0x5EE7
MESSAGE_TIMEOUT_MS_DEFAULT = 10_000

# Keys `credentials_digest` for this process only: equal secrets give equal digests here (the pool's session
# keys), while a digest that reaches a log cannot be tested against guessed secrets anywhere else.
_DIGEST_KEY = os.urandom(32)


def default_aeron_dir() -> str:
    """Where a media driver runs by default: $AERON_DIR, else Aeron's default directory for this user."""
    env = os.environ.get("AERON_DIR")
    if env:
        return env
    import pyaeron  # the C client's own default path rule (per user, under /dev/shm where it exists)

    return str(pyaeron.default_path())


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How to reach a running archive; picklable, so executors receive it inside partitions."""

    aeron_dir: str | None = None
    control_channel: str = CONTROL_CHANNEL_DEFAULT
    control_stream_id: int = CONTROL_STREAM_ID_DEFAULT
    control_response_channel: str = CONTROL_RESPONSE_CHANNEL_DEFAULT
    control_response_stream_id: int = CONTROL_RESPONSE_STREAM_ID_DEFAULT
    replay_channel: str = REPLAY_CHANNEL_DEFAULT
    replay_stream_id: int = REPLAY_STREAM_ID_DEFAULT
    message_timeout_ms: int = MESSAGE_TIMEOUT_MS_DEFAULT
    credentials: bytes | str | None = field(default=None, repr=False)  # a secret: never printed

    @property
    def encoded_credentials(self) -> bytes:
        """What the AuthConnectRequest carries: the credentials as bytes (a str UTF-8 encoded), else empty."""
        value = self.credentials
        return value.encode() if isinstance(value, str) else bytes(value or b"")

    @property
    def credentials_digest(self) -> str:
        """A process-keyed hash of the credentials ("" without any): tells sessions of different secrets apart
        without holding or showing the secret."""
        encoded = self.encoded_credentials
        if not encoded:
            return ""
        return hashlib.blake2b(encoded, key=_DIGEST_KEY, digest_size=16).hexdigest()

    def resolved_aeron_dir(self) -> str:
        """`aeronDir`, else $AERON_DIR, else Aeron's default directory for this user."""
        return self.aeron_dir or default_aeron_dir()

    def describe(self) -> str:
        return (
            f"archive on controlChannel={self.control_channel} controlStreamId={self.control_stream_id} "
            f"(aeronDir={self.resolved_aeron_dir()})"
        )
