"""The read side of `format("aeron-archive")`.

Driver side: `batch_reader` / `stream_reader` (offsets, admission control, data loss) plan through `location`
(`RecordingSource`: descriptors and message-boundary-clamped ends, for `archiveDir` or a running archive) and
`planning` (offsets, term-aligned partitions). Executor side: `reader.read()` takes a `partition`, gets its frames
from a `chunks.ChunkSource` (`DiskChunkSource`, or `replay_fetch.ReplayChunkSource` for a running archive) and turns
them into Arrow batches with `decode`, plus typed columns from a `payload.PayloadDecoder` (`sbe_decode`) when
`sbeSchema` is set. `schema` holds the row schema.
"""
