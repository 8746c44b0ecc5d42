import io.aeron.archive.Archive;
import io.aeron.archive.ArchiveThreadingMode;
import io.aeron.archive.ArchivingMediaDriver;
import io.aeron.archive.client.AeronArchive;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Python client -> Java archive: runs a Java 1.15.1 ArchivingMediaDriver with a UDP control channel until stdin is
 * closed (or maxSeconds pass), then checks that a Java client can still connect and list, and prints a JSON report
 * (errors the archive reported, the listing count).
 *
 * Usage: JavaArchiveServer aeronDir archiveDir controlPort eventsPort maxSeconds
 * Prints {"ready":true} once the archive is up.
 */
public final class JavaArchiveServer
{
    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String archiveDir = args[1];
        final int controlPort = Integer.parseInt(args[2]);
        final int eventsPort = Integer.parseInt(args[3]);
        final long maxMs = Long.parseLong(args[4]) * 1000;
        final List<String> errors = Collections.synchronizedList(new ArrayList<>());

        final MediaDriver.Context driverCtx = new MediaDriver.Context()
            .aeronDirectoryName(aeronDir)
            .dirDeleteOnStart(true)
            .threadingMode(ThreadingMode.SHARED)
            .termBufferSparseFile(true)
            .publicationTermBufferLength(64 * 1024)
            .ipcTermBufferLength(64 * 1024)
            .errorHandler((t) -> errors.add("driver: " + t));
        final Archive.Context archiveCtx = new Archive.Context()
            .aeronDirectoryName(aeronDir)
            .archiveDirectoryName(archiveDir)
            .deleteArchiveOnStart(true)
            .controlChannel("aeron:udp?endpoint=localhost:" + controlPort)
            .recordingEventsChannel("aeron:udp?endpoint=localhost:" + eventsPort)
            .threadingMode(ArchiveThreadingMode.SHARED)
            .maxCatalogEntries(16)
            .errorHandler((t) -> errors.add("archive: " + t));

        final StringBuilder json = new StringBuilder("{");
        try (ArchivingMediaDriver ignore = ArchivingMediaDriver.launch(driverCtx, archiveCtx))
        {
            System.out.println("{\"ready\":true}");
            System.out.flush();
            final CountDownLatch stdinClosed = new CountDownLatch(1);
            final Thread reader = new Thread(() ->
            {
                try
                {
                    while (System.in.read() >= 0)
                    {
                        // discard
                    }
                }
                catch (final IOException ex)
                {
                }
                stdinClosed.countDown();
            });
            reader.setDaemon(true);
            reader.start();
            stdinClosed.await(maxMs, TimeUnit.MILLISECONDS);

            try (AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeronDirectoryName(aeronDir)
                .controlRequestChannel("aeron:ipc")
                .controlRequestStreamId(11)
                .controlResponseChannel("aeron:ipc")
                .controlResponseStreamId(23)))
            {
                final int count = archive.listRecordings(0, 10,
                    (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) -> {});
                json.append("\"javaClientAfterwards\":\"connected, listed ").append(count).append("\"");
            }
        }
        json.append(",\"errors\":").append(errors.size()).append('}');
        System.out.println(json);
        System.out.flush();
    }
}
