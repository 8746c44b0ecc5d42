import io.aeron.Aeron;
import io.aeron.ChannelUriStringBuilder;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.client.ArchiveException;
import io.aeron.archive.codecs.RecordingSignal;
import io.aeron.archive.codecs.SourceLocation;
import org.agrona.concurrent.UnsafeBuffer;

import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * Drives an archive (Java's or ours) through one fixed sequence of segment management requests with the Java Aeron
 * 1.53 client, as ManageRecordingHistoryTest and MigrateSegmentsTest drive Java's archive, and prints one line per
 * step: what the call answered (its return value, or the error code and message), the recording signals that came
 * with it, the start and stop positions of the recordings it touched and their files on disk. The interop test runs
 * it against both archives and compares the lines.
 *
 * <pre>
 * JavaSegmentSequence AERON_DIR CONTROL_REQUEST_CHANNEL CONTROL_RESPONSE_CHANNEL ARCHIVE_DIR
 * </pre>
 *
 * Recordings are made over IPC (64 KiB terms, 992-byte messages: 1024-byte frames, 128 to a 128 KiB segment), so
 * the client must run on the archive's own media driver. The archive directory is printed as ${ARCHIVE_DIR}.
 */
public final class JavaSegmentSequence
{
    private static final int TERM = 64 * 1024;
    private static final long SEG = 128 * 1024;
    private static final int PER_SEGMENT = (int)(SEG / 1024);
    private static final List<String> SIGNALS = new ArrayList<>();

    private static Aeron aeron;
    private static AeronArchive archive;
    private static File archiveDir;

    public static void main(final String[] args) throws Exception
    {
        archiveDir = new File(args[3]);
        try (Aeron a = Aeron.connect(new Aeron.Context().aeronDirectoryName(args[0]));
            AeronArchive aa = AeronArchive.connect(new AeronArchive.Context()
                .aeron(a)
                .controlRequestChannel(args[1])
                .controlRequestStreamId(10)
                .controlResponseChannel(args[2])
                .recordingSignalConsumer((controlSessionId, correlationId, recordingId, subscriptionId, position,
                    signal) -> SIGNALS.add(signal + "(" + recordingId + "," + position + ")"))))
        {
            aeron = a;
            archive = aa;
            run();
        }
    }

    private static void run() throws Exception
    {
        final long r = record(7301, 0, 7 * PER_SEGMENT + 40, true)[0];
        step("detach 3 segments", () -> { archive.detachSegments(r, 3 * SEG); return "ok"; }, false, r);
        step("replay before the start", () -> archive.startReplay(r, 0, -1, "aeron:ipc", 7401), false, r);
        step("attach", () -> archive.attachSegments(r), false, r);
        step("attach again", () -> archive.attachSegments(r), false, r);
        step("detach 2 segments", () -> { archive.detachSegments(r, 2 * SEG); return "ok"; }, false, r);
        step("delete detached", () -> archive.deleteDetachedSegments(r), true, r);
        step("delete detached again", () -> archive.deleteDetachedSegments(r), true, r);
        step("attach after delete", () -> archive.attachSegments(r), false, r);
        step("purge to 4 segments", () -> archive.purgeSegments(r, 4 * SEG), true, r);
        step("detach not on a segment", () -> { archive.detachSegments(r, 5 * SEG + 32); return "ok"; }, false, r);
        step("purge below the lower bound", () -> archive.purgeSegments(r, 4 * SEG), false, r);
        step("purge past the last segment", () -> archive.purgeSegments(r, 9 * SEG), false, r);
        step("detach unknown", () -> { archive.detachSegments(r + 100, SEG); return "ok"; }, false, r);
        step("delete detached unknown", () -> archive.deleteDetachedSegments(r + 100), false, r);
        step("purge unknown", () -> archive.purgeSegments(r + 100, SEG), false, r);
        step("attach unknown", () -> archive.attachSegments(r + 100), false, r);
        step("migrate unknown", () -> archive.migrateSegments(r + 100, r), false, r);

        try (Subscription replay = archive.replay(r, 6 * SEG, Long.MAX_VALUE, "aeron:ipc", 7402))
        {
            // Connected, and so in the archive's REPLAY state (never polled: it stays in its first segment).
            final long deadline = System.nanoTime() + 10_000_000_000L;
            while (replay.imageCount() == 0)
            {
                check(deadline, "replay image");
                Thread.yield();
            }
            Thread.sleep(100);
            step("purge past a running replay", () -> archive.purgeSegments(r, 7 * SEG), false, r);
            step("purge up to a running replay", () -> archive.purgeSegments(r, 6 * SEG), true, r);
            System.out.println("replay subscribed | " + replay.streamId());
        }

        final long[] bc = record(7302, 0, 2 * PER_SEGMENT, false);
        final long b = bc[0];
        final long c = record(7302, 2 * SEG, 2 * PER_SEGMENT + 3, true)[0];
        step("migrate across streams", () -> archive.migrateSegments(r, c), false, r, c);
        step("migrate other stream", () -> archive.migrateSegments(b, r), false, b, r);
        step("migrate prepend", () -> archive.migrateSegments(b, c), true, b, c);
        step("migrate the empty source again", () -> archive.migrateSegments(b, c), false, b, c);
        step("attach after migrate", () -> archive.attachSegments(c), false, c);

        // Append: a recording that starts where c stops (c truncated to a segment boundary first).
        step("truncate to a segment boundary", () -> archive.truncateRecording(c, 4 * SEG), true, c);
        final long[] de = record(7303, 4 * SEG, PER_SEGMENT + 7, true);
        final long d = de[0];
        step("migrate append across streams", () -> archive.migrateSegments(d, c), false, d, c);
        final long e = record(7302, 4 * SEG, PER_SEGMENT + 7, true)[0];
        step("migrate not contiguous", () -> archive.migrateSegments(e, b), false, e, b);
        step("migrate append", () -> archive.migrateSegments(e, c), true, e, c);
        final long f = record(7302, 0, PER_SEGMENT / 2, true)[0];
        final long g = record(7302, SEG / 2, PER_SEGMENT, true)[0];
        step("migrate seam off a segment", () -> archive.migrateSegments(f, g), false, f, g);

        // A recording that starts mid-term, then a live one.
        final long h = record(7304, 2 * TERM + 64, 3 * PER_SEGMENT, true)[0];
        step("detach unaligned start", () -> { archive.detachSegments(h, 2 * TERM + 2 * SEG); return "ok"; }, false, h);
        step("attach unaligned start", () -> archive.attachSegments(h), false, h);
        step("purge unaligned start", () -> archive.purgeSegments(h, 2 * TERM + SEG), true, h);
        final long live = record(7305, 0, 3 * PER_SEGMENT + 10, false)[0];
        step("purge live past the recording", () -> archive.purgeSegments(live, 4 * SEG), false, live);
        step("purge live", () -> archive.purgeSegments(live, 3 * SEG), true, live);
        step("migrate live", () -> archive.migrateSegments(live, c), false, live, c);
        archive.stopRecording(SUBSCRIPTIONS.remove(0));
        PUBLICATIONS.forEach(ExclusivePublication::close);
        PUBLICATIONS.clear();
    }

    private static final List<Long> SUBSCRIPTIONS = new ArrayList<>();
    private static final List<ExclusivePublication> PUBLICATIONS = new ArrayList<>();
    private static final List<Long> RECORDINGS = new ArrayList<>();

    /**
     * Record `count` messages on stream `streamId` from `start` with a publication of its own; returns the recording
     * id. One recording subscription serves the calls until one with `stop`, which stops it and waits for every
     * recording it made to stop.
     */
    private static long[] record(final int streamId, final long start, final int count, final boolean stop)
        throws Exception
    {
        if (SUBSCRIPTIONS.isEmpty())
        {
            SUBSCRIPTIONS.add(archive.startRecording("aeron:ipc", streamId, SourceLocation.LOCAL));
        }
        final String channel = new ChannelUriStringBuilder().media("ipc").termLength(TERM)
            .initialPosition(start, 7, TERM).build();
        final ExclusivePublication publication = aeron.addExclusivePublication(channel, streamId);
        PUBLICATIONS.add(publication);
        long recordingId = -1;
        final long deadline = System.nanoTime() + 20_000_000_000L;
        while (recordingId < 0)
        {
            recordingId = archive.findLastMatchingRecording(0, "aeron:ipc", streamId, publication.sessionId());
            check(deadline, "recording");
        }
        RECORDINGS.add(recordingId);
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[992]);
        for (int i = 0; i < count; i++)
        {
            buffer.setMemory(0, 992, (byte)(i % 251));
            while (publication.offer(buffer, 0, 992) < 0)
            {
                check(deadline, "offer");
                Thread.yield();
            }
        }
        while (archive.getRecordingPosition(recordingId) != publication.position())
        {
            check(deadline, "recorded");
            Thread.yield();
        }
        if (stop)
        {
            archive.stopRecording(SUBSCRIPTIONS.remove(0));
            for (final long id : RECORDINGS)
            {
                while (archive.getStopPosition(id) == -1)
                {
                    check(deadline, "stopped");
                    archive.pollForRecordingSignals();
                    Thread.yield();
                }
            }
            RECORDINGS.clear();
            PUBLICATIONS.forEach(ExclusivePublication::close);
            PUBLICATIONS.clear();
        }
        pollSignals(false, recordingId);
        SIGNALS.clear();
        return new long[]{ recordingId };
    }

    private static void step(
        final String name, final Callable<Object> call, final boolean awaitDelete, final long... recordingIds)
        throws Exception
    {
        SIGNALS.clear();
        String answer;
        try
        {
            answer = "ok " + call.call();
        }
        catch (final ArchiveException ex)
        {
            answer = "error " + ex.errorCode() + " " +
                String.valueOf(ex.getMessage()).replaceFirst("(?s).* error: ", "");
        }
        pollSignals(awaitDelete, recordingIds[0]);
        final StringBuilder line = new StringBuilder(name).append(" | ").append(answer)
            .append(" | signals=").append(SIGNALS);
        for (final long id : recordingIds)
        {
            line.append(" | ").append(id).append(": ").append(position(id, true)).append(' ')
                .append(position(id, false)).append(' ').append(files(id));
        }
        System.out.println(line.toString().replace(archiveDir.getAbsolutePath(), "${ARCHIVE_DIR}"));
    }

    private static String position(final long recordingId, final boolean start)
    {
        try
        {
            return String.valueOf(start ? archive.getStartPosition(recordingId) : archive.getStopPosition(recordingId));
        }
        catch (final ArchiveException ex)
        {
            return "error " + ex.errorCode();
        }
    }

    private static String files(final long recordingId)
    {
        final String prefix = recordingId + "-";
        // Our archive's time index files (<id>-<base>.tix, its own extension) have no Java counterpart.
        final String[] names = archiveDir.list((dir, name) -> name.startsWith(prefix) && !name.endsWith(".tix"));
        if (null == names)
        {
            return "[]";
        }
        Arrays.sort(names, Comparator.comparingLong(
            (String n) -> Long.parseLong(n.substring(prefix.length(), n.indexOf('.')))));
        return Arrays.toString(names);
    }

    /** Signals that come after the answer: until DELETE for the recording if one is due, else for 200 ms. */
    private static void pollSignals(final boolean awaitDelete, final long recordingId) throws Exception
    {
        final long deadline = System.nanoTime() + (awaitDelete ? 10_000_000_000L : 200_000_000L);
        final String delete = RecordingSignal.DELETE + "(" + recordingId + ",";
        while (System.nanoTime() < deadline)
        {
            archive.pollForRecordingSignals();
            if (awaitDelete && SIGNALS.stream().anyMatch((s) -> s.startsWith(delete)))
            {
                break;
            }
            Thread.sleep(1);
        }
    }

    private static void check(final long deadline, final String what)
    {
        if (System.nanoTime() > deadline)
        {
            throw new IllegalStateException("timed out: " + what);
        }
    }
}
