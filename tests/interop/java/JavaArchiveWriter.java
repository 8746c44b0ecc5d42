import io.aeron.Aeron;
import io.aeron.Publication;
import io.aeron.archive.Archive;
import io.aeron.archive.ArchiveThreadingMode;
import io.aeron.archive.ArchivingMediaDriver;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.codecs.SourceLocation;
import io.aeron.archive.status.RecordingPos;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.CountersReader;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.zip.CRC32;

/**
 * Java writes, Python reads: launches an ArchivingMediaDriver (embedded Java media driver + Java archive) in its own
 * aeron and archive directories, records streams with messages of several sizes, stops the recordings, closes
 * everything (so the catalog is final) and prints what was published as one JSON line on stdout.
 *
 * Usage: JavaArchiveWriter aeronDir archiveDir controlPort eventsPort dataPort
 *
 * Recording "udp": aeron:udp?endpoint=localhost:dataPort|term-length=64k, stream 1001, remote source.
 * Recording "ipc": aeron:ipc?term-length=64k exclusive publication starting at a non-zero position
 *                  (init-term-id/term-id/term-offset), stream 1002, local source.
 * Payload byte j of message i (per recording seed s) is (s + i * 131 + j * 7 + (j >> 8)) & 0xFF.
 */
public final class JavaArchiveWriter
{
    static final int TERM_LENGTH = 64 * 1024;
    static final int SEGMENT_LENGTH = 128 * 1024;
    static final long MAX_CATALOG_ENTRIES = 16; // a 17 KiB catalog: smaller than any capacity a Python archive asks for
    static final long DEADLINE_NS = 20_000_000_000L;

    static byte payloadByte(final int seed, final int i, final int j)
    {
        return (byte)((seed + i * 131 + j * 7 + (j >> 8)) & 0xFF);
    }

    static int[] sizes()
    {
        // 0-byte, tiny, frame-alignment edges, one full MTU payload (1376 for mtu 1408), fragmented (> MTU), and the
        // max message length for a 64 KiB term (termLength / 8 = 8192); repeated to fill several terms and segments.
        final int[] pattern = { 0, 1, 31, 32, 33, 100, 1000, 1376, 1377, 3000, 4097, 8192, 0, 5000, 64, 2049 };
        final int[] sizes = new int[pattern.length * 12];
        for (int i = 0; i < sizes.length; i++)
        {
            sizes[i] = pattern[i % pattern.length];
        }
        return sizes;
    }

    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String archiveDir = args[1];
        final int controlPort = Integer.parseInt(args[2]);
        final int eventsPort = Integer.parseInt(args[3]);
        final int dataPort = Integer.parseInt(args[4]);

        final MediaDriver.Context driverCtx = new MediaDriver.Context()
            .aeronDirectoryName(aeronDir)
            .dirDeleteOnStart(true)
            .threadingMode(ThreadingMode.SHARED)
            .termBufferSparseFile(true)
            .publicationTermBufferLength(TERM_LENGTH)
            .ipcTermBufferLength(TERM_LENGTH)
            .spiesSimulateConnection(false);

        final Archive.Context archiveCtx = new Archive.Context()
            .aeronDirectoryName(aeronDir)
            .archiveDirectoryName(archiveDir)
            .deleteArchiveOnStart(true)
            .controlChannel("aeron:udp?endpoint=localhost:" + controlPort)
            .recordingEventsChannel("aeron:udp?endpoint=localhost:" + eventsPort)
            .segmentFileLength(SEGMENT_LENGTH)
            .maxCatalogEntries(MAX_CATALOG_ENTRIES)
            .threadingMode(ArchiveThreadingMode.SHARED)
            .fileSyncLevel(0);

        final StringBuilder json = new StringBuilder();
        try (ArchivingMediaDriver ignore = ArchivingMediaDriver.launch(driverCtx, archiveCtx);
            AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeronDirectoryName(aeronDir)
                .controlRequestChannel("aeron:ipc")
                .controlRequestStreamId(11)
                .controlResponseChannel("aeron:ipc")
                .controlResponseStreamId(21)))
        {
            final Aeron aeron = archive.context().aeron();
            json.append("{\"recordings\":[");

            final String udpChannel = "aeron:udp?endpoint=localhost:" + dataPort + "|term-length=" + TERM_LENGTH;
            final long udpSub = archive.startRecording(udpChannel, 1001, SourceLocation.REMOTE);
            try (Publication pub = aeron.addExclusivePublication(udpChannel, 1001))
            {
                record(json, "udp", udpChannel, udpChannel, 1001, 3, pub, archive, aeron.countersReader());
            }
            archive.stopRecording(udpSub);

            json.append(',');
            final String ipcBase = "aeron:ipc?term-length=" + TERM_LENGTH;
            final int initTermId = 1234567;
            final String ipcChannel = ipcBase + "|init-term-id=" + initTermId + "|term-id=" + (initTermId + 3) +
                "|term-offset=1024";
            final long ipcSub = archive.startRecording(ipcBase, 1002, SourceLocation.LOCAL);
            try (Publication pub = aeron.addExclusivePublication(ipcChannel, 1002))
            {
                record(json, "ipc", ipcBase, ipcChannel, 1002, 77, pub, archive, aeron.countersReader());
            }
            archive.stopRecording(ipcSub);
            json.append("]}");
        }
        System.out.println(json);
        System.out.flush();
    }

    static void record(
        final StringBuilder json,
        final String name,
        final String channel,
        final String publicationChannel,
        final int streamId,
        final int seed,
        final Publication pub,
        final AeronArchive archive,
        final CountersReader counters) throws InterruptedException
    {
        final long deadline = System.nanoTime() + DEADLINE_NS;
        int counterId;
        while ((counterId = RecordingPos.findCounterIdBySession(counters, pub.sessionId())) == CountersReader.NULL_COUNTER_ID)
        {
            check(deadline, "recording counter for " + name);
            Thread.sleep(1);
        }
        final long recordingId = RecordingPos.getRecordingId(counters, counterId);
        final long startPosition = pub.position();

        final int[] sizes = sizes();
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[8192]);
        final List<String> messages = new ArrayList<>();
        long position = startPosition;
        for (int i = 0; i < sizes.length; i++)
        {
            final int length = sizes[i];
            final byte[] bytes = new byte[length];
            for (int j = 0; j < length; j++)
            {
                bytes[j] = payloadByte(seed, i, j);
            }
            buffer.putBytes(0, bytes);
            long result;
            while ((result = pub.offer(buffer, 0, length)) < 0)
            {
                if (result == Publication.CLOSED || result == Publication.MAX_POSITION_EXCEEDED)
                {
                    throw new IllegalStateException("offer failed: " + result);
                }
                check(deadline, "offer " + i + " on " + name);
                Thread.yield();
            }
            final CRC32 crc = new CRC32();
            crc.update(bytes, 0, length);
            messages.add(String.format(Locale.ROOT, "[%d,%d,%d,%d]", length, crc.getValue(), position, result));
            position = result;
        }

        while (counters.getCounterValue(counterId) < position)
        {
            check(deadline, "recorded position " + position + " on " + name);
            Thread.sleep(1);
        }

        json.append(String.format(Locale.ROOT,
            "{\"name\":\"%s\",\"recordingId\":%d,\"channel\":\"%s\",\"publicationChannel\":\"%s\",\"streamId\":%d,\"sessionId\":%d," +
            "\"initialTermId\":%d,\"termLength\":%d,\"segmentLength\":%d,\"seed\":%d,\"startPosition\":%d," +
            "\"stopPosition\":%d,\"messages\":[%s]}",
            name, recordingId, channel, publicationChannel, streamId, pub.sessionId(), pub.initialTermId(), pub.termBufferLength(),
            SEGMENT_LENGTH, seed, startPosition, position, String.join(",", messages)));
    }

    static void check(final long deadline, final String what)
    {
        if (System.nanoTime() > deadline)
        {
            throw new IllegalStateException("timed out waiting for " + what);
        }
    }
}
