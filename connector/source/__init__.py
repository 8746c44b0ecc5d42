"""The read side of `format("aeron-archive")`: Spark's reader interfaces over the Spark-free `archive.tables`.

Options are parsed into `options.ReadOptions`: the engine's `SourceOptions` plus Spark's positions, triggers,
partitions and data loss. Driver side: `batch_reader` / `stream_reader` (offsets in `offsets`, admission control,
data loss) plan through `archive.tables.recording_source` (descriptors and message-boundary-clamped ends, for
`archiveDir` or a running archive) and `archive.tables.planning` (term-aligned `ReadRange`s), each wrapped in a
`partition`. Executor side: `reader.read()` hands a partition's range to `archive.tables.read`, which takes its
frames from segment files or bounded replays and decodes them into Arrow batches, with typed columns when
`sbeSchema` is set. `schema` maps the Arrow row schema to Spark's.
"""
