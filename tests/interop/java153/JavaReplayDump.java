import io.aeron.Aeron;
import io.aeron.Image;
import io.aeron.Subscription;
import io.aeron.archive.client.AeronArchive;
import io.aeron.archive.client.ArchiveException;
import io.aeron.archive.client.ReplayParams;
import io.aeron.logbuffer.LogBufferDescriptor;
import org.agrona.DirectBuffer;

import java.nio.ByteOrder;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/**
 * Replays recordings with the Java Aeron 1.53 AeronArchive client from an archive (Java's or ours) and reports every
 * frame the replay image delivers, padding included, for the PAD-frame interop tests.
 *
 * <pre>
 * JavaReplayDump AERON_DIR CONTROL_REQUEST_CHANNEL CONTROL_REQUEST_STREAM_ID CONTROL_RESPONSE_CHANNEL
 *                REPLAY_CHANNEL REPLAY_STREAM_ID IDLE_TIMEOUT_MS RECORDING_ID...
 * </pre>
 *
 * Each recording is replayed from its start with length REPLAY_ALL_AND_STOP (through the ReplayParams form of
 * AeronArchive.replay, so a REPLAY_CHANNEL in response mode is replayed over a response channel). The image is read with
 * {@link Image#blockPoll}, which delivers a PAD frame as a block of its own (Image.poll would skip it), and each
 * block is walked frame by frame. A frame is reported as [position, frameLength, type, flags, version, reservedValue,
 * sessionId, streamId, termId, termOffset, sha256 of the frame's body (frameLength - 32 bytes)], position being the
 * image position of its first byte. The replay ends when the image reaches the recording's stop position ("stop"),
 * reports end of stream ("endOfStream") or closes ("closed"), or delivers nothing for IDLE_TIMEOUT_MS
 * ("idleTimeout"). Prints one JSON line.
 */
public final class JavaReplayDump
{
    private static final HexFormat HEX = HexFormat.of();

    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String controlRequestChannel = args[1];
        final int controlRequestStreamId = Integer.parseInt(args[2]);
        final String controlResponseChannel = args[3];
        final String replayChannel = args[4];
        final int replayStreamId = Integer.parseInt(args[5]);
        final long idleTimeoutNs = Long.parseLong(args[6]) * 1_000_000L;

        final StringBuilder out = new StringBuilder("{\"replays\":[");
        try (Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(aeronDir));
            AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeron(aeron)
                .controlRequestChannel(controlRequestChannel)
                .controlRequestStreamId(controlRequestStreamId)
                .controlResponseChannel(controlResponseChannel)))
        {
            for (int i = 7; i < args.length; i++)
            {
                if (i > 7)
                {
                    out.append(',');
                }
                out.append(dump(archive, Long.parseLong(args[i]), replayChannel, replayStreamId, idleTimeoutNs));
            }
        }
        out.append("]}");
        System.out.println(out);
    }

    private static String dump(
        final AeronArchive archive,
        final long recordingId,
        final String replayChannel,
        final int replayStreamId,
        final long idleTimeoutNs) throws Exception
    {
        final long[] d = new long[4];
        final int found = archive.listRecording(recordingId,
            (controlSessionId, correlationId, id, startTimestamp, stopTimestamp, startPosition, stopPosition,
            initialTermId, segmentFileLength, termBufferLength, mtuLength, sessionId, streamId, strippedChannel,
            originalChannel, sourceIdentity) ->
            {
                d[0] = startPosition;
                d[1] = stopPosition;
                d[2] = termBufferLength;
                d[3] = initialTermId;
            });
        final StringBuilder json = new StringBuilder("{\"recordingId\":").append(recordingId);
        if (found != 1)
        {
            return json.append(",\"closedReason\":\"unknownRecording\"}").toString();
        }
        final long startPosition = d[0];
        final long stopPosition = d[1];
        json.append(",\"startPosition\":").append(startPosition)
            .append(",\"stopPosition\":").append(stopPosition)
            .append(",\"termBufferLength\":").append(d[2])
            .append(",\"initialTermId\":").append(d[3]);

        final Subscription subscription;
        try
        {
            // The ReplayParams form: a response replay channel (control-mode=response) goes through Java's
            // replayViaResponseChannel (replay token, a request publication naming the subscription).
            subscription = archive.replay(recordingId, replayChannel, replayStreamId,
                new ReplayParams().position(startPosition).length(AeronArchive.REPLAY_ALL_AND_STOP));
        }
        catch (final ArchiveException ex)
        {
            return json.append(",\"closedReason\":\"replayError\",\"error\":")
                .append(JavaPadPublisher.quote(String.valueOf(ex.getMessage()))).append('}').toString();
        }

        try (subscription)
        {
            long deadline = System.nanoTime() + idleTimeoutNs;
            while (subscription.imageCount() == 0)
            {
                if (System.nanoTime() > deadline)
                {
                    return json.append(",\"closedReason\":\"noImage\"}").toString();
                }
                Thread.yield();
            }
            final Image image = subscription.imageAtIndex(0);
            json.append(",\"imageMtuLength\":").append(image.mtuLength());
            final int shift = LogBufferDescriptor.positionBitsToShift(image.termBufferLength());
            final MessageDigest sha = MessageDigest.getInstance("SHA-256");
            final List<String> frames = new ArrayList<>();
            final String[] error = new String[1];

            final String reason;
            deadline = System.nanoTime() + idleTimeoutNs;
            while (true)
            {
                if (image.position() >= stopPosition)
                {
                    reason = "stop";
                    break;
                }
                final int bytes = image.blockPoll(
                    (buffer, offset, length, sessionId, termId) ->
                    {
                        final long blockPosition = LogBufferDescriptor.computePosition(
                            termId, offset, shift, image.initialTermId());
                        int frameOffset = offset;
                        while (frameOffset < offset + length)
                        {
                            final int frameLength = buffer.getInt(frameOffset, ByteOrder.LITTLE_ENDIAN);
                            if (frameLength < 32)
                            {
                                error[0] = "frame length " + frameLength + " in a block at " +
                                    (blockPosition + frameOffset - offset);
                                break;
                            }
                            frames.add(frame(buffer, frameOffset, frameLength,
                                blockPosition + frameOffset - offset, sha));
                            frameOffset += (frameLength + 31) & ~31;
                        }
                    },
                    image.termBufferLength());
                if (bytes > 0)
                {
                    deadline = System.nanoTime() + idleTimeoutNs;
                    continue;
                }
                if (image.isEndOfStream())
                {
                    reason = "endOfStream";
                    break;
                }
                if (image.isClosed())
                {
                    reason = "closed";
                    break;
                }
                if (System.nanoTime() > deadline)
                {
                    reason = "idleTimeout";
                    break;
                }
                Thread.yield();
            }

            json.append(",\"closedReason\":\"").append(reason).append('"')
                .append(",\"endPosition\":").append(image.position())
                .append(",\"imageSessionId\":").append(image.sessionId())
                .append(",\"imageInitialTermId\":").append(image.initialTermId())
                .append(",\"imageJoinPosition\":").append(image.joinPosition());
            if (null != error[0])
            {
                json.append(",\"error\":").append(JavaPadPublisher.quote(error[0]));
            }
            json.append(",\"frames\":[").append(String.join(",", frames)).append("]}");
            return json.toString();
        }
    }

    private static String frame(
        final DirectBuffer buffer, final int offset, final int frameLength, final long position, final MessageDigest sha)
    {
        final byte[] body = new byte[frameLength - 32];
        buffer.getBytes(offset + 32, body);
        return "[" + position +
            "," + frameLength +
            "," + (buffer.getShort(offset + 6, ByteOrder.LITTLE_ENDIAN) & 0xFFFF) +
            "," + (buffer.getByte(offset + 5) & 0xFF) +
            "," + (buffer.getByte(offset + 4) & 0xFF) +
            "," + buffer.getLong(offset + 24, ByteOrder.LITTLE_ENDIAN) +
            "," + buffer.getInt(offset + 12, ByteOrder.LITTLE_ENDIAN) +
            "," + buffer.getInt(offset + 16, ByteOrder.LITTLE_ENDIAN) +
            "," + buffer.getInt(offset + 20, ByteOrder.LITTLE_ENDIAN) +
            "," + buffer.getInt(offset + 8, ByteOrder.LITTLE_ENDIAN) +
            ",\"" + HEX.formatHex(sha.digest(body)) + "\"]";
    }
}
