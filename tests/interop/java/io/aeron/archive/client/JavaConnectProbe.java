/*
 * Java client -> Python archive that requires credentials: does the real Aeron 1.15.1 client get an answer?
 *
 * 1.15 predates AuthConnectRequest and cannot send credentials, so against an archive started with a secret both of
 * its connects must be refused with an ERROR response (never left to time out):
 * 1. "legacyConnect": a genuine AeronArchive.connect() (ConnectRequest without the protocol version field);
 * 2. "versionedConnect": the same ConnectRequest with the version field (JavaArchiveClient.connectVersioned), which
 *    passes the version check and so reaches the authenticator with empty credentials.
 * Each outcome is "connected controlSessionId=..." or "errorCode=<code> <message>" / the exception text.
 *
 * Usage: JavaConnectProbe aeronDir controlChannel controlStreamId legacyResponsePort responsePort
 * Prints one JSON object on stdout.
 */
package io.aeron.archive.client;

import io.aeron.Aeron;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;

public final class JavaConnectProbe
{
    public static void main(final String[] args) throws Exception
    {
        final String aeronDir = args[0];
        final String controlChannel = args[1];
        final int controlStreamId = Integer.parseInt(args[2]);
        final int legacyResponsePort = Integer.parseInt(args[3]);
        final int responsePort = Integer.parseInt(args[4]);

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
            String legacy;
            try (AeronArchive archive = AeronArchive.connect(
                JavaArchiveClient.context(aeron, controlChannel, controlStreamId)
                    .controlResponseChannel("aeron:udp?endpoint=localhost:" + legacyResponsePort)
                    .controlResponseStreamId(21)))
            {
                legacy = "connected controlSessionId=" + archive.controlSessionId();
            }
            catch (final ArchiveException ex)
            {
                legacy = "errorCode=" + ex.errorCode() + " " + ex.getMessage();
            }
            catch (final Exception ex)
            {
                legacy = ex.getClass().getName() + ": " + ex.getMessage();
            }
            json.append("\"legacyConnect\":").append(JavaArchiveClient.q(legacy));

            String versioned;
            try (AeronArchive archive = JavaArchiveClient.connectVersioned(
                JavaArchiveClient.context(aeron, controlChannel, controlStreamId)
                    .controlResponseChannel("aeron:udp?endpoint=localhost:" + responsePort)
                    .controlResponseStreamId(22)))
            {
                versioned = "connected controlSessionId=" + archive.controlSessionId();
            }
            catch (final ArchiveException ex)
            {
                versioned = "errorCode=" + ex.errorCode() + " " + ex.getMessage();
            }
            catch (final Exception ex)
            {
                versioned = ex.getClass().getName() + ": " + ex.getMessage();
            }
            json.append(",\"versionedConnect\":").append(JavaArchiveClient.q(versioned));
        }
        json.append('}');
        System.out.println(json);
        System.out.flush();
    }
}
