import io.aeron.archive.Archive;
import io.aeron.archive.ArchivingMediaDriver;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.codecs.SourceLocation;
import io.aeron.driver.MediaDriver;

import java.io.BufferedReader;
import java.io.InputStreamReader;

/**
 * The Java 1.15.1 yardstick archive of bench_cluster's replay section (tests/benchmarks/cluster_java_archive.py).
 *
 * Why a program of its own: our client cannot connect to a 1.15 archive (it only speaks AuthConnectRequest), so the
 * recording is started, and the catalog read, by a Java client here, over IPC on the archive's own media driver.
 * The media driver and the archive keep Java's defaults (threading, idle strategies, socket buffers): the yardstick
 * is Java's archive as shipped.
 *
 * Usage: BenchJavaArchive115 aeronDir archiveDir controlChannel recordChannel streamId
 * Prints {"ready":true} once recording; then answers each "describe" line on stdin with {"recordings":[...]}
 * (Aeron's field names), until stdin ends.
 */
public final class BenchJavaArchive115
{
    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final MediaDriver.Context driverCtx = new MediaDriver.Context()
            .aeronDirectoryName(aeronDir)
            .dirDeleteOnStart(true);
        final Archive.Context archiveCtx = new Archive.Context()
            .aeronDirectoryName(aeronDir)
            .archiveDirectoryName(args[1])
            .deleteArchiveOnStart(true)
            .controlChannel(args[2]);
        try (ArchivingMediaDriver ignore = ArchivingMediaDriver.launch(driverCtx, archiveCtx);
            AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeronDirectoryName(aeronDir)
                .controlRequestChannel("aeron:ipc")
                .controlRequestStreamId(11)
                .controlResponseChannel("aeron:ipc")
                .controlResponseStreamId(23)))
        {
            archive.startRecording(args[3], Integer.parseInt(args[4]), SourceLocation.REMOTE);
            System.out.println("{\"ready\":true}");
            System.out.flush();
            final BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null)
            {
                if (!"describe".equals(line.trim()))
                {
                    continue;
                }
                final StringBuilder json = new StringBuilder("{\"recordings\":[");
                archive.listRecordings(0, 1000,
                    (controlSessionId, correlationId, recordingId, startTimestamp, stopTimestamp, startPosition,
                    stopPosition, initialTermId, segmentFileLength, termBufferLength, mtuLength, sessionId, streamId,
                    strippedChannel, originalChannel, sourceIdentity) ->
                    {
                        if (json.charAt(json.length() - 1) != '[')
                        {
                            json.append(',');
                        }
                        json.append("{\"recordingId\":").append(recordingId)
                            .append(",\"startPosition\":").append(startPosition)
                            .append(",\"stopPosition\":").append(stopPosition)
                            .append(",\"segmentFileLength\":").append(segmentFileLength)
                            .append(",\"termBufferLength\":").append(termBufferLength)
                            .append(",\"mtuLength\":").append(mtuLength)
                            .append(",\"streamId\":").append(streamId).append('}');
                    });
                System.out.println(json.append("]}"));
                System.out.flush();
            }
        }
    }
}
