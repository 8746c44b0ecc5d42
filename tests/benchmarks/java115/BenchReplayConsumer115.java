import io.aeron.Aeron;
import io.aeron.Image;
import io.aeron.Subscription;
import io.aeron.archive.client.AeronArchive;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import org.agrona.concurrent.BackoffIdleStrategy;

import java.io.BufferedReader;
import java.io.InputStreamReader;

/**
 * The remote replay consumer of bench_cluster's replay section for a Java 1.15.1 archive, which our client cannot
 * connect to. Same work as the Python consumer of tests/benchmarks/cluster_java_archive.py: subscribe first (so the
 * replay's setup finds a bound port, no setup retry), ask for the replay, read every frame with block polls, check
 * the end position. Its own Java media driver (shared threading) stands in for the executor's embedded one.
 *
 * Usage: BenchReplayConsumer115 aeronDir controlChannel thisHostIp replayStreamId
 * Prints {"ready":true}; answers each stdin line "replay recordingId position length" with
 * {"bytes":N,"endPosition":P,"seconds":S}.
 */
public final class BenchReplayConsumer115
{
    private static final int CONTROL_RESPONSE_PORT = 40910;
    private static final int FIRST_REPLAY_PORT = 40911;

    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String ip = args[2];
        final int streamId = Integer.parseInt(args[3]);
        try (MediaDriver driver = MediaDriver.launch(new MediaDriver.Context()
                .aeronDirectoryName(aeronDir)
                .dirDeleteOnStart(true)
                .threadingMode(ThreadingMode.SHARED));
            AeronArchive archive = AeronArchive.connect(new AeronArchive.Context()
                .aeronDirectoryName(aeronDir)
                .controlRequestChannel(args[1])
                .controlRequestStreamId(10)
                .controlResponseChannel("aeron:udp?endpoint=" + ip + ":" + CONTROL_RESPONSE_PORT)))
        {
            final Aeron aeron = archive.context().aeron();
            System.out.println("{\"ready\":true}");
            System.out.flush();
            final BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            final BackoffIdleStrategy idle = new BackoffIdleStrategy(1, 0, 50_000, 1_000_000);
            int replays = 0;
            String line;
            while ((line = in.readLine()) != null)
            {
                final String[] words = line.trim().split(" ");
                if (words.length != 4 || !"replay".equals(words[0]))
                {
                    continue;
                }
                final long recordingId = Long.parseLong(words[1]);
                final long position = Long.parseLong(words[2]);
                final long length = Long.parseLong(words[3]);
                final String channel = "aeron:udp?endpoint=" + ip + ":" + (FIRST_REPLAY_PORT + replays++ % 64);
                final long[] received = new long[1];
                final long start = System.nanoTime();
                long end;
                try (Subscription subscription = aeron.addSubscription(channel, streamId))
                {
                    final int sessionId = (int)archive.startReplay(recordingId, position, length, channel, streamId);
                    Image image;
                    while ((image = subscription.imageBySessionId(sessionId)) == null)
                    {
                        idle.idle();
                    }
                    idle.reset();
                    while (image.position() < position + length)
                    {
                        final int work = image.blockPoll(
                            (buffer, offset, blockLength, blockSessionId, termId) -> received[0] += blockLength,
                            1 << 21);
                        if (work == 0 && image.isClosed())
                        {
                            break;
                        }
                        idle.idle(work);
                    }
                    end = image.position();
                }
                final double seconds = (System.nanoTime() - start) / 1e9;
                System.out.println("{\"bytes\":" + received[0] + ",\"endPosition\":" + end + ",\"seconds\":" +
                    seconds + "}");
                System.out.flush();
            }
        }
    }
}
