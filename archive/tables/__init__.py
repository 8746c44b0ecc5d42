"""Recordings as Arrow tables, without Spark: the layer the Spark connector and the offline tools share.

The read chain runs one way (no module imports one that depends on it, which the import contracts check):
`options` (the read options, parsed from an immutable `option_table`) -> `recording_source` (which recordings,
where they end, at a message boundary) -> `planning` (cut into `ranges.ReadRange`s) -> `read` (a range's frames from
`chunks.DiskChunkSource` or `replay_chunks.ReplayChunkSource`, with the client's replay reader `archive.client.replay`
behind it) -> `decode` (frames -> Arrow batches of the `schema` row schema, typed payload columns from a `payload`
decoder such as `sbe.decode`). `sbe.encode` is the way back, for writers. Nothing here imports pyspark or the
connector.
"""
