"""`format("aeron-archive")`: one DataSource serving `read`, `readStream`, `write` and `writeStream`.

The heavy pieces (Aeron, numpy, pyarrow) are imported only when a reader or writer is created, because Spark
imports this module in its data-source lookup worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

NAME = "aeron-archive"


class AeronArchiveDataSource(DataSource):
    """Aeron Archive recordings as a Spark table or stream, and DataFrames written into a recording exactly once.

    Name: `aeron-archive`

    Schema: `recordingId long, position long, sessionId int, streamId int, reservedValue long, value binary`, then
    typed payload columns with `sbeSchema`. A write takes `value` (binary or string) and, optionally, `reservedValue`.

    Options
    -------
    Where the recordings are (reads and writes unless marked):

    - `archiveDir` (reads): read the segment files of this archive directory directly, without a server
    - `aeronDir`: the media driver directory of the running archive's host; default $AERON_DIR or Aeron's default
    - `controlChannel`, `controlStreamId`: the archive's control requests; default `aeron:udp?endpoint=localhost:8010`,
      10
    - `controlChannels` (reads): instead of `controlChannel`, several archives holding copies of the recordings,
      separated by `;`: the first one's recording ids name them; reads spread over the copies and fail over
    - `controlResponseChannel`, `controlResponseStreamId`: where the archive answers; default
      `aeron:udp?endpoint=localhost:0`, 20
    - `replayChannel`, `replayStreamId` (reads): where executors receive replays; default
      `aeron:udp?endpoint=localhost:0` (`aeron:ipc` with an IPC `controlChannel`), 24295
    - `replayMtu` (reads): the datagram size replays over UDP are asked for, several recorded frames per datagram
      (our archive's extension; Java's replays at the recording's MTU); `recording` turns it off; default 8192
    - `responseChannels` (reads): true: control responses and replays come back over response channels, on
      connections the reading process opens, so executors and the driver need no inbound port; default false
    - `responseControlPort` (reads): with responseChannels, the UDP port on the archive's host its response
      publications bind (free there, reachable from every Spark host); default controlChannel's port + 1
    - `messageTimeout`: how long the archive may take to answer; default 10s
    - `archiveSecret`: the secret of an archive served with one: the read-only secret reads, writes need the read-write
      one

    Which recordings (exactly one of):

    - `recordingId`: that recording; a write extends it (stopped)
    - `recordingIds` (reads): comma-separated recording ids
    - `channel` + `streamId`: every recording whose channel contains this one, new ones too; a write starts one on
      its first batch and extends it

    Spark reads:

    - `startingPosition`: earliest, latest or `{"<recordingId>": position}`; default earliest (a restarted query
      resumes from its checkpoint)
    - `endingPosition` (batch): latest or `{"<recordingId>": position}`; default latest
    - `startingTimestamp`, `startingPositionByTimestamp` (`{"<recordingId>": time}`): start at the first message
      recorded at or after the time (ms since the epoch, or ISO-8601 with a zone), over startingPosition
    - `startingPositionByTimestampStrategy`: when a recording has no message that late, error or start at its end
      (latest); default error
    - `endingTimestamp`, `endingPositionByTimestamp` (batch): end before the first message recorded at or after the
      time (none: latest), over endingPosition
    - `maxBytesPerTrigger` (streaming): at most this many bytes per micro-batch, shared fairly across recordings and
      cut at message boundaries
    - `minBytesPerTrigger`, `maxTriggerDelay` (streaming): skip triggers until this many new bytes are recorded, or
      this long has passed; default 15m
    - `maxBytesPerPartition`: split a recording into tasks of at most this many bytes, at term boundaries; default 64m
    - `openCostInBytes`: what starting a read weighs, in bytes, when small recordings are packed into one task;
      default 256k (128k with `archiveDir`)
    - `failOnDataLoss`: fail when a recording was truncated or purged under the query; default true (false: warn,
      read what is left, go on)

    Payloads:

    - `sbeSchema`, `sbeMessage`: an SBE XML schema and its message: typed columns on reads, encoded on writes
    - `sbe.onError` (reads): fail, or null the decoded columns of a payload that does not decode; default fail
    - `timestampField` (reads): a decoded column with each message's own time, placing reads by time in recordings
      without a time index (assumed never to decrease; checked)
    - `timestampFieldUnit` (reads): what one unit of timestampField is: ns, us, ms or s; default ns

    Spark writes:

    - `sourceLocation`: where the archive finds the sink's publication, local or remote; default local if the archive
      is on this host (IPC or loopback control channel), else remote
    - `publishTimeout`: fail a commit when the archive makes no progress this long; default 30s
    - `taskResultCompression`: lz4, zstd or none, how executors compress the rows they hand to the driver; default lz4

    Sizes are bytes or `64k`, `16m`, `1g`; durations `250ms`, `30s`, `15m`. A streaming write needs Spark's
    `checkpointLocation`. Every option is parsed when the reader or writer is made: a mistake fails at once, naming
    the option (and, for an unknown one, the closest known one). README.md's option tables say more.

    Examples
    --------
    >>> spark.read.format("aeron-archive").option("archiveDir", "/data/archive").option("recordingId", "7").load()

    >>> stream = (spark.readStream.format("aeron-archive")
    ...           .option("aeronDir", "/dev/shm/aeron").option("controlChannel", "aeron:ipc")
    ...           .option("channel", "aeron:ipc").option("streamId", "1001")
    ...           .option("maxBytesPerTrigger", "16m").load())

    >>> (stream.selectExpr("value").writeStream.format("aeron-archive")
    ...        .option("aeronDir", "/dev/shm/aeron").option("controlChannel", "aeron:ipc")
    ...        .option("channel", "aeron:ipc?term-length=1m").option("streamId", "3003")
    ...        .option("checkpointLocation", "/tmp/checkpoint").start())
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from aeron_archive_spark.connector.source.schema import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from aeron_archive_spark.connector.source.batch_reader import AeronArchiveBatchReader

        return AeronArchiveBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from aeron_archive_spark.connector.source.stream_reader import AeronArchiveStreamReader

        return AeronArchiveStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from aeron_archive_spark.connector.sink.batch_writer import AeronArchiveBatchWriter

        return AeronArchiveBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from aeron_archive_spark.connector.sink.stream_writer import AeronArchiveStreamWriter

        return AeronArchiveStreamWriter(self.options, schema, overwrite)
