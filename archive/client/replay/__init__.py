"""Reading recordings through a running archive, by replay: the reader's public face.

`ReplaySpan` says what to read, `ReplayReader` reads spans as chunks of frames (the small ones with their replays
asked for ahead, pipelined on one control session), `read_messages` joins a span's frames into whole messages, and
`ReplayFetchError` is what a failed read raises. `ControlResponses` matches the answers of requests sent without
waiting to their correlation ids, for callers that drive a control session asynchronously. The modules behind
them (`fetch`, `read_ahead`, `responses`) are the reader's own; an import contract keeps `archive.tables` to this
face.
"""

from aeron_archive_spark.archive.client.replay.fetch import ReplayFetchError
from aeron_archive_spark.archive.client.replay.messages import read_messages
from aeron_archive_spark.archive.client.replay.reader import ReplayReader
from aeron_archive_spark.archive.client.replay.responses import ControlResponses
from aeron_archive_spark.archive.client.replay.span import ReplaySpan

__all__ = ["ControlResponses", "ReplayFetchError", "ReplayReader", "ReplaySpan", "read_messages"]
