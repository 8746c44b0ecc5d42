import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Publication;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.codecs.SourceLocation;
import io.aeron.logbuffer.LogBufferDescriptor;
import org.agrona.concurrent.UnsafeBuffer;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

/**
 * A Java Aeron 1.53 publication that calls ExclusivePublication.appendPadding between its messages, recorded by the
 * archive it connects to (Java's or ours), for the PAD-frame interop tests (tests/interop/test_java153_padding.py).
 *
 * <pre>
 * JavaPadPublisher AERON_DIR CONTROL_REQUEST_CHANNEL CONTROL_REQUEST_STREAM_ID CONTROL_RESPONSE_CHANNEL
 *                  SCRIPT_FILE SEED STREAM_ID (PUBLICATION_CHANNEL RECORDING_CHANNEL LOCAL|REMOTE)...
 * </pre>
 *
 * For each channel triple in turn: startRecording(RECORDING_CHANNEL, STREAM_ID, LOCAL or REMOTE; a UDP publication
 * recorded LOCAL has only the archive's spy, so it never connects: record UDP as REMOTE), add an ExclusivePublication on
 * PUBLICATION_CHANNEL, wait until it is connected, run the script, wait until the recording has caught up, stop it
 * and wait for its stop position. Script lines (one operation each, '#' comments):
 * <ul>
 * <li>{@code M len}: offer message number i (counted over M lines) of {@code len} bytes, payload byte j =
 *     (SEED + i * 131 + j * 7 + (j >> 8)) &amp; 0xFF, reserved value of each fragment ((i + 1) &lt;&lt; 32) | termOffset;</li>
 * <li>{@code P len}: appendPadding(len), retried while it answers a negative position (back pressure, or the
 *     ADMIN_ACTION of a term rotation, after which the term ended in the appender's own PAD);</li>
 * <li>{@code F}: fill the current term to its end with appendPadding (as many as needed, each at most
 *     maxFramedLength), so the next operation starts a term;</li>
 * <li>{@code X len}: appendPadding(len) is expected to throw; the exception's message is reported.</li>
 * </ul>
 * Prints one JSON line: per recording the descriptor fields, the publication's limits and the position after every
 * operation (or the exception message of an X line).
 */
public final class JavaPadPublisher
{
    private static final long TIMEOUT_NS = 20_000_000_000L;

    private static long messageIndex;

    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String controlRequestChannel = args[1];
        final int controlRequestStreamId = Integer.parseInt(args[2]);
        final String controlResponseChannel = args[3];
        final List<String> script = Files.readAllLines(Paths.get(args[4]), StandardCharsets.UTF_8);
        final int seed = Integer.parseInt(args[5]);
        final int streamId = Integer.parseInt(args[6]);

        final StringBuilder out = new StringBuilder("{\"recordings\":[");
        try (Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(aeronDir));
            AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeron(aeron)
                .controlRequestChannel(controlRequestChannel)
                .controlRequestStreamId(controlRequestStreamId)
                .controlResponseChannel(controlResponseChannel)))
        {
            for (int i = 7; i + 2 < args.length; i += 3)
            {
                if (i > 7)
                {
                    out.append(',');
                }
                out.append(publish(
                    aeron, archive, args[i], args[i + 1], SourceLocation.valueOf(args[i + 2]), streamId, seed, script));
            }
        }
        out.append("]}");
        System.out.println(out);
    }

    private static String publish(
        final Aeron aeron,
        final AeronArchive archive,
        final String publicationChannel,
        final String recordingChannel,
        final SourceLocation sourceLocation,
        final int streamId,
        final int seed,
        final List<String> script)
    {
        final long subscriptionId = archive.startRecording(recordingChannel, streamId, sourceLocation);
        final ExclusivePublication pub = aeron.addExclusivePublication(publicationChannel, streamId);
        long deadline = System.nanoTime() + TIMEOUT_NS;
        while (!pub.isConnected())
        {
            check(deadline, "publication connected");
            Thread.yield();
        }

        // Publication.maxFramedLength is package-private: the largest length appendPadding accepts.
        final int maxFramedLength = LogBufferDescriptor.computeFragmentedFrameLength(
            pub.maxMessageLength(), pub.maxPayloadLength());
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[pub.maxMessageLength()]);
        final List<String> results = new ArrayList<>();
        messageIndex = 0;
        for (final String raw : script)
        {
            final String line = raw.trim();
            if (line.isEmpty() || line.startsWith("#"))
            {
                continue;
            }
            final String[] words = line.split("\\s+");
            switch (words[0])
            {
                case "M":
                {
                    final int length = Integer.parseInt(words[1]);
                    for (int j = 0; j < length; j++)
                    {
                        buffer.putByte(j, (byte)((seed + messageIndex * 131 + j * 7L + (j >> 8)) & 0xFF));
                    }
                    final long reserved = (messageIndex + 1) << 32;
                    final long position = retry("offer", () -> pub.offer(
                        buffer, 0, length, (termBuffer, termOffset, frameLength) -> reserved | termOffset));
                    results.add(Long.toString(position));
                    messageIndex++;
                    break;
                }

                case "P":
                {
                    final int length = Integer.parseInt(words[1]);
                    results.add(Long.toString(retry("appendPadding", () -> pub.appendPadding(length))));
                    break;
                }

                case "F":
                {
                    final int termLength = pub.termBufferLength();
                    long position = pub.position();
                    while (pub.termOffset() < termLength)
                    {
                        final int remaining = termLength - pub.termOffset();
                        final int length = Math.min(remaining - 32, maxFramedLength);
                        position = retry("appendPadding", () -> pub.appendPadding(length));
                    }
                    results.add(Long.toString(position));
                    break;
                }

                case "X":
                {
                    final int length = Integer.parseInt(words[1]);
                    String message = "no exception";
                    try
                    {
                        pub.appendPadding(length);
                    }
                    catch (final IllegalArgumentException ex)
                    {
                        message = ex.getMessage();
                    }
                    results.add(quote(message));
                    break;
                }

                default:
                    throw new IllegalArgumentException("unknown script line: " + line);
            }
        }

        final long finalPosition = pub.position();
        deadline = System.nanoTime() + TIMEOUT_NS;
        long recordingId;
        while ((recordingId = archive.findLastMatchingRecording(0, "aeron:", streamId, pub.sessionId())) ==
            Aeron.NULL_VALUE)
        {
            check(deadline, "recording found");
            Thread.yield();
        }
        while (archive.getRecordingPosition(recordingId) < finalPosition)
        {
            check(deadline, "recording caught up with " + finalPosition);
            sleep();
        }
        archive.stopRecording(subscriptionId);
        long stopPosition;
        while ((stopPosition = archive.getStopPosition(recordingId)) == AeronArchive.NULL_POSITION)
        {
            check(deadline, "stop position");
            sleep();
        }

        final long[] descriptor = new long[4];
        final String[] channels = new String[1];
        archive.listRecording(recordingId,
            (controlSessionId, correlationId, id, startTimestamp, stopTimestamp, startPosition, stop,
            initialTermId, segmentFileLength, termBufferLength, mtuLength, sessionId, stream, strippedChannel,
            originalChannel, sourceIdentity) ->
            {
                descriptor[0] = startPosition;
                descriptor[1] = initialTermId;
                descriptor[2] = segmentFileLength;
                descriptor[3] = termBufferLength;
                channels[0] = originalChannel;
            });

        final String json = "{\"publicationChannel\":" + quote(publicationChannel) +
            ",\"recordingChannel\":" + quote(recordingChannel) +
            ",\"originalChannel\":" + quote(channels[0]) +
            ",\"recordingId\":" + recordingId +
            ",\"sessionId\":" + pub.sessionId() +
            ",\"streamId\":" + streamId +
            ",\"initialTermId\":" + pub.initialTermId() +
            ",\"descriptorInitialTermId\":" + descriptor[1] +
            ",\"startPosition\":" + descriptor[0] +
            ",\"stopPosition\":" + stopPosition +
            ",\"finalPosition\":" + finalPosition +
            ",\"segmentFileLength\":" + descriptor[2] +
            ",\"termBufferLength\":" + pub.termBufferLength() +
            ",\"maxPayloadLength\":" + pub.maxPayloadLength() +
            ",\"maxMessageLength\":" + pub.maxMessageLength() +
            ",\"maxFramedLength\":" + maxFramedLength +
            ",\"messages\":" + messageIndex +
            ",\"results\":[" + String.join(",", results) + "]}";
        pub.close();
        return json;
    }

    interface Op
    {
        long apply();
    }

    private static long retry(final String what, final Op op)
    {
        final long deadline = System.nanoTime() + TIMEOUT_NS;
        while (true)
        {
            final long result = op.apply();
            if (result > 0)
            {
                return result;
            }
            if (result == Publication.CLOSED || result == Publication.MAX_POSITION_EXCEEDED)
            {
                throw new IllegalStateException(what + " failed: " + result);
            }
            check(deadline, what);
            Thread.yield();
        }
    }

    private static void check(final long deadline, final String what)
    {
        if (System.nanoTime() > deadline)
        {
            throw new IllegalStateException("timed out waiting for: " + what);
        }
    }

    private static void sleep()
    {
        try
        {
            Thread.sleep(1);
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
        }
    }

    static String quote(final String s)
    {
        final StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++)
        {
            final char c = s.charAt(i);
            if (c == '"' || c == '\\')
            {
                sb.append('\\').append(c);
            }
            else if (c < 0x20)
            {
                sb.append(String.format("\\u%04x", (int)c));
            }
            else
            {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
