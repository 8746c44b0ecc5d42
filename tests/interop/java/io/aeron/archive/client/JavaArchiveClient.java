/*
 * Java client -> Python archive: the real Aeron 1.15.1 Java client (its own embedded Java media driver, its own aeron
 * directory) talks to the Python archive's UDP control channel.
 *
 * It lives in package io.aeron.archive.client only to reach AeronArchive's package-private constructor for the
 * "versioned" session below; every request and response is encoded/decoded by the 1.15.1 codecs and client classes.
 *
 * Usage: JavaArchiveClient aeronDir controlChannel controlStreamId legacyResponsePort responsePort replayPort expectFile
 *
 * 1. A genuine AeronArchive.connect(): 1.15 sends ConnectRequest (templateId 2, schema version 0, blockLength 12, no
 *    protocol version field). Its outcome (session id or the exception text) is reported as "legacyConnect".
 * 2. A "versioned" session: the same ConnectRequest with the int32 `version` field later schemas added at offset 12
 *    (blockLength 16) declaring protocol 1.x; then the stock 1.15 AeronArchive API: listRecordings, listRecording,
 *    listRecordingsForUri, findLastMatchingRecording, getStopPosition, getRecordingPosition, replay over UDP (payloads
 *    checked against expectFile), an error reply for an unknown recording, and close.
 *
 * expectFile: first line "recordingId startPosition stopPosition sessionId streamId", then one line per message "length crc32 endPosition".
 * Prints one JSON object on stdout. Exit code 0 even when checks fail: the Python test asserts on the JSON.
 */
package io.aeron.archive.client;

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.FragmentAssembler;
import io.aeron.Subscription;
import io.aeron.archive.codecs.MessageHeaderEncoder;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.zip.CRC32;

public final class JavaArchiveClient
{
    static final long TIMEOUT_NS = 15_000_000_000L;
    static final int PROTOCOL_VERSION_1_12_0 = (1 << 16) | (12 << 8);

    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String controlChannel = args[1];
        final int controlStreamId = Integer.parseInt(args[2]);
        final int legacyResponsePort = Integer.parseInt(args[3]);
        final int responsePort = Integer.parseInt(args[4]);
        final int replayPort = Integer.parseInt(args[5]);
        final List<String> expect = Files.readAllLines(Paths.get(args[6]));
        final String[] first = expect.get(0).trim().split(" ");
        final long recordingId = Long.parseLong(first[0]);
        final long startPosition = Long.parseLong(first[1]);
        final long stopPosition = Long.parseLong(first[2]);
        final int sessionId = Integer.parseInt(first[3]);
        final int streamId = Integer.parseInt(first[4]);
        final List<long[]> expected = new ArrayList<>();
        for (final String line : expect.subList(1, expect.size()))
        {
            if (!line.trim().isEmpty())
            {
                final String[] f = line.trim().split(" ");
                expected.add(new long[]{ Long.parseLong(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]) });
            }
        }

        final MediaDriver.Context driverCtx = new MediaDriver.Context()
            .aeronDirectoryName(aeronDir)
            .dirDeleteOnStart(true)
            .threadingMode(ThreadingMode.SHARED)
            .termBufferSparseFile(true)
            .publicationTermBufferLength(64 * 1024)
            .ipcTermBufferLength(64 * 1024);

        final StringBuilder json = new StringBuilder("{");
        try (MediaDriver ignore = MediaDriver.launch(driverCtx);
            Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(aeronDir)))
        {
            // 1. genuine 1.15 connect
            String legacy;
            try (AeronArchive archive = AeronArchive.connect(context(aeron, controlChannel, controlStreamId)
                .controlResponseChannel("aeron:udp?endpoint=localhost:" + legacyResponsePort)
                .controlResponseStreamId(21)))
            {
                legacy = "connected controlSessionId=" + archive.controlSessionId();
            }
            catch (final Exception ex)
            {
                legacy = ex.getClass().getName() + ": " + ex.getMessage();
            }
            json.append("\"legacyConnect\":").append(q(legacy));

            // 2. versioned session, then the stock 1.15 client API
            try (AeronArchive archive = connectVersioned(context(aeron, controlChannel, controlStreamId)
                .controlResponseChannel("aeron:udp?endpoint=localhost:" + responsePort)
                .controlResponseStreamId(22)))
            {
                json.append(",\"controlSessionId\":").append(archive.controlSessionId());

                final List<String> descriptors = new ArrayList<>();
                final RecordingDescriptorConsumer consumer =
                    (controlSessionId, correlationId, recId, startTimestamp, stopTimestamp, startPos, stopPos,
                    initialTermId, segmentFileLength, termBufferLength, mtuLength, dSessionId, dStreamId,
                    strippedChannel, originalChannel, sourceIdentity) -> descriptors.add(String.format(Locale.ROOT,
                    "{\"controlSessionId\":%d,\"correlationId\":%d,\"recordingId\":%d,\"startTimestamp\":%d," +
                    "\"stopTimestamp\":%d,\"startPosition\":%d,\"stopPosition\":%d,\"initialTermId\":%d," +
                    "\"segmentFileLength\":%d,\"termBufferLength\":%d,\"mtuLength\":%d,\"sessionId\":%d," +
                    "\"streamId\":%d,\"strippedChannel\":%s,\"originalChannel\":%s,\"sourceIdentity\":%s}",
                    controlSessionId, correlationId, recId, startTimestamp, stopTimestamp, startPos, stopPos,
                    initialTermId, segmentFileLength, termBufferLength, mtuLength, dSessionId, dStreamId,
                    q(strippedChannel), q(originalChannel), q(sourceIdentity)));

                final int listed = archive.listRecordings(0, 100, consumer);
                json.append(",\"listRecordingsCount\":").append(listed);
                json.append(",\"descriptors\":[").append(String.join(",", descriptors)).append(']');

                descriptors.clear();
                json.append(",\"listRecordingCount\":").append(archive.listRecording(recordingId, consumer));
                json.append(",\"listRecording\":[").append(String.join(",", descriptors)).append(']');
                json.append(",\"listUnknownRecordingCount\":").append(archive.listRecording(987_654, consumer));

                descriptors.clear();
                json.append(",\"listForUriCount\":")
                    .append(archive.listRecordingsForUri(0, 10, "term-length=65536", streamId, consumer));
                json.append(",\"listForUriNoMatchCount\":")
                    .append(archive.listRecordingsForUri(0, 10, "no-such-channel", streamId, consumer));
                json.append(",\"findLastMatching\":")
                    .append(archive.findLastMatchingRecording(0, "aeron:ipc", streamId, sessionId));
                json.append(",\"findLastMatchingOtherSession\":")
                    .append(archive.findLastMatchingRecording(0, "aeron:ipc", streamId, sessionId + 1));
                json.append(",\"stopPosition\":").append(archive.getStopPosition(recordingId));
                json.append(",\"recordingPosition\":").append(archive.getRecordingPosition(recordingId));

                // replay over UDP to this process's own Java media driver
                final String replayChannel = "aeron:udp?endpoint=localhost:" + replayPort;
                final List<long[]> received = new ArrayList<>();
                final long[] replayImageSessionId = { 0 };
                final FragmentAssembler assembler = new FragmentAssembler((buffer, offset, length, header) ->
                {
                    final byte[] bytes = new byte[length];
                    buffer.getBytes(offset, bytes);
                    final CRC32 crc = new CRC32();
                    crc.update(bytes, 0, length);
                    received.add(new long[]{ length, crc.getValue(), header.position() });
                    replayImageSessionId[0] = header.sessionId();
                });
                final long deadline = System.nanoTime() + TIMEOUT_NS;
                try (Subscription replay = archive.replay(
                    recordingId, startPosition, stopPosition - startPosition, replayChannel, 4343))
                {
                    while (received.size() < expected.size() && System.nanoTime() < deadline)
                    {
                        if (replay.poll(assembler, 64) == 0)
                        {
                            Thread.sleep(1);
                        }
                    }
                    json.append(",\"replaySubscriptionChannel\":").append(q(replay.channel()));
                }
                int mismatches = 0;
                for (int i = 0; i < Math.max(received.size(), expected.size()); i++)
                {
                    if (i >= received.size() || i >= expected.size() ||
                        received.get(i)[0] != expected.get(i)[0] || received.get(i)[1] != expected.get(i)[1] ||
                        received.get(i)[2] != expected.get(i)[2])
                    {
                        mismatches++;
                    }
                }
                final List<String> got = new ArrayList<>();
                for (final long[] r : received)
                {
                    got.add("[" + r[0] + "," + r[1] + "," + r[2] + "]");
                }
                json.append(",\"replayImageSessionId\":").append(replayImageSessionId[0]);
                json.append(",\"replayed\":[").append(String.join(",", got)).append(']');
                json.append(",\"replayMismatches\":").append(mismatches);

                String replayError;
                try
                {
                    archive.startReplay(987_654, 0, -1, replayChannel, 4344);
                    replayError = "no error";
                }
                catch (final ArchiveException ex)
                {
                    replayError = "errorCode=" + ex.errorCode() + " " + ex.getMessage();
                }
                json.append(",\"unknownReplayError\":").append(q(replayError));
            }
        }
        json.append('}');
        System.out.println(json);
        System.out.flush();
    }

    static AeronArchive.Context context(final Aeron aeron, final String controlChannel, final int controlStreamId)
    {
        return new AeronArchive.Context()
            .aeron(aeron)
            .ownsAeronClient(false)
            .controlRequestChannel(controlChannel)
            .controlRequestStreamId(controlStreamId)
            .messageTimeoutNs(5_000_000_000L);
    }

    /**
     * Like AeronArchive.connect(ctx) in 1.15.1, except that the ConnectRequest carries the protocol version field
     * (int32 at block offset 12, blockLength 16) that schema versions after 1.15's version 0 added.
     */
    static AeronArchive connectVersioned(final AeronArchive.Context ctx) throws InterruptedException
    {
        ctx.conclude();
        final Aeron aeron = ctx.aeron();
        final Subscription subscription =
            aeron.addSubscription(ctx.controlResponseChannel(), ctx.controlResponseStreamId());
        final ControlResponsePoller poller = new ControlResponsePoller(subscription);
        final ExclusivePublication publication =
            aeron.addExclusivePublication(ctx.controlRequestChannel(), ctx.controlRequestStreamId());
        final ArchiveProxy proxy = new ArchiveProxy(
            publication, ctx.idleStrategy(), aeron.context().nanoClock(), ctx.messageTimeoutNs(), 3);

        final long deadline = System.nanoTime() + TIMEOUT_NS;
        final long correlationId = aeron.nextCorrelationId();
        final byte[] channel = ctx.controlResponseChannel().getBytes(StandardCharsets.US_ASCII);
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[8 + 16 + 4 + channel.length]);
        new MessageHeaderEncoder().wrap(buffer, 0).blockLength(16).templateId(2).schemaId(101).version(0);
        buffer.putLong(8, correlationId, ByteOrder.LITTLE_ENDIAN);
        buffer.putInt(16, ctx.controlResponseStreamId(), ByteOrder.LITTLE_ENDIAN);
        buffer.putInt(20, PROTOCOL_VERSION_1_12_0, ByteOrder.LITTLE_ENDIAN);
        buffer.putInt(24, channel.length, ByteOrder.LITTLE_ENDIAN);
        buffer.putBytes(28, channel);
        while (publication.offer(buffer, 0, buffer.capacity()) < 0)
        {
            check(deadline, "offer of the ConnectRequest");
            Thread.sleep(1);
        }

        while (true)
        {
            check(deadline, "the connect response");
            if (poller.poll() == 0)
            {
                Thread.sleep(1);
                continue;
            }
            if (poller.isPollComplete() && poller.templateId() == 1 && poller.correlationId() == correlationId)
            {
                if (poller.code() != io.aeron.archive.codecs.ControlResponseCode.OK)
                {
                    throw new ArchiveException("connect rejected: " + poller.errorMessage(), (int)poller.relevantId());
                }
                break;
            }
        }
        final long controlSessionId = poller.controlSessionId();
        final RecordingDescriptorPoller descriptorPoller =
            new RecordingDescriptorPoller(subscription, ctx.errorHandler(), controlSessionId, 10);
        return new AeronArchive(ctx, poller, proxy, descriptorPoller, controlSessionId);
    }

    static void check(final long deadline, final String what)
    {
        if (System.nanoTime() > deadline)
        {
            throw new IllegalStateException("timed out waiting for " + what);
        }
    }

    static String q(final String s)
    {
        if (null == s)
        {
            return "null";
        }
        final StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++)
        {
            final char c = s.charAt(i);
            if (c == '"' || c == '\\')
            {
                b.append('\\').append(c);
            }
            else if (c < 0x20 || c > 0x7e)
            {
                b.append(String.format(Locale.ROOT, "\\u%04x", (int)c));
            }
            else
            {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
