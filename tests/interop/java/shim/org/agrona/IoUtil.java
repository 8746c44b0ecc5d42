/*
 * Java 17 compatibility shim for the Agrona bundled in aeron-all-1.15.1.jar (Agrona 0.9.x).
 *
 * That IoUtil looks up sun.nio.ch.FileChannelImpl.map0(int, long, long) in its static initialiser to map files at raw
 * addresses. The method's signature changed in JDK 14, so on JDK 17 IoUtil fails to initialise and no media driver,
 * archive or client can start. This class has the same public API and semantics, built on public JDK APIs
 * (FileChannel.map, sun.misc.Unsafe.invokeCleaner), and is put on the class path ahead of the jar. It is test
 * infrastructure only; nothing of the archive under test is replaced.
 */
package org.agrona;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiConsumer;

public class IoUtil
{
    public static final int BLOCK_SIZE = 4 * 1024;

    private static final byte[] FILLER = new byte[BLOCK_SIZE];
    private static final Map<Long, MappedByteBuffer> MAPPED_BY_ADDRESS = new ConcurrentHashMap<>();
    private static final sun.misc.Unsafe UNSAFE;
    private static final long ADDRESS_OFFSET;

    static
    {
        try
        {
            final Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            UNSAFE = (sun.misc.Unsafe)f.get(null);
            ADDRESS_OFFSET = UNSAFE.objectFieldOffset(java.nio.Buffer.class.getDeclaredField("address"));
        }
        catch (final Exception ex)
        {
            throw new ExceptionInInitializerError(ex);
        }
    }

    public IoUtil()
    {
    }

    public static void fill(final FileChannel fileChannel, final long position, final long length, final byte value)
    {
        try
        {
            final byte[] filler;
            if (0 != value)
            {
                filler = new byte[BLOCK_SIZE];
                Arrays.fill(filler, value);
            }
            else
            {
                filler = FILLER;
            }

            final ByteBuffer byteBuffer = ByteBuffer.wrap(filler);
            fileChannel.position(position);

            final int blocks = (int)(length / BLOCK_SIZE);
            final int blockRemainder = (int)(length % BLOCK_SIZE);

            for (int i = 0; i < blocks; i++)
            {
                byteBuffer.position(0);
                fileChannel.write(byteBuffer);
            }

            if (blockRemainder > 0)
            {
                byteBuffer.position(0);
                byteBuffer.limit(blockRemainder);
                fileChannel.write(byteBuffer);
            }
        }
        catch (final IOException ex)
        {
            LangUtil.rethrowUnchecked(ex);
        }
    }

    public static void delete(final File file, final boolean ignoreFailures)
    {
        if (file.isDirectory())
        {
            final File[] files = file.listFiles();
            if (null != files)
            {
                for (final File f : files)
                {
                    delete(f, ignoreFailures);
                }
            }
        }

        if (!file.delete() && !ignoreFailures)
        {
            try
            {
                Files.delete(file.toPath());
            }
            catch (final IOException ex)
            {
                LangUtil.rethrowUnchecked(ex);
            }
        }
    }

    public static void ensureDirectoryExists(final File directory, final String descriptionLabel)
    {
        if (!directory.exists())
        {
            if (!directory.mkdirs())
            {
                throw new IllegalArgumentException("could not create " + descriptionLabel + " directory: " + directory);
            }
        }
    }

    public static void ensureDirectoryIsRecreated(
        final File directory, final String descriptionLabel, final BiConsumer<String, String> callback)
    {
        if (directory.exists())
        {
            delete(directory, false);
            callback.accept(directory.getAbsolutePath(), descriptionLabel);
        }

        if (!directory.mkdirs())
        {
            throw new IllegalArgumentException("could not create " + descriptionLabel + " directory: " + directory);
        }
    }

    public static void deleteIfExists(final File file)
    {
        if (file.exists())
        {
            try
            {
                Files.delete(file.toPath());
            }
            catch (final IOException ex)
            {
                LangUtil.rethrowUnchecked(ex);
            }
        }
    }

    public static FileChannel createEmptyFile(final File file, final long length)
    {
        return createEmptyFile(file, length, true);
    }

    public static FileChannel createEmptyFile(final File file, final long length, final boolean fillWithZeros)
    {
        ensureDirectoryExists(file.getParentFile(), file.getParent());

        FileChannel templateFile = null;
        try
        {
            final RandomAccessFile randomAccessFile = new RandomAccessFile(file, "rw");
            randomAccessFile.setLength(length);
            templateFile = randomAccessFile.getChannel();

            if (fillWithZeros)
            {
                fill(templateFile, 0, length, (byte)0);
            }
        }
        catch (final IOException ex)
        {
            LangUtil.rethrowUnchecked(ex);
        }

        return templateFile;
    }

    public static MappedByteBuffer mapExistingFile(final File location, final String descriptionLabel)
    {
        checkFileExists(location, descriptionLabel);

        MappedByteBuffer mappedByteBuffer = null;
        try (RandomAccessFile file = new RandomAccessFile(location, "rw");
            FileChannel channel = file.getChannel())
        {
            mappedByteBuffer = channel.map(FileChannel.MapMode.READ_WRITE, 0, channel.size());
        }
        catch (final IOException ex)
        {
            LangUtil.rethrowUnchecked(ex);
        }

        return mappedByteBuffer;
    }

    public static MappedByteBuffer mapExistingFile(
        final File location, final String descriptionLabel, final long offset, final long length)
    {
        checkFileExists(location, descriptionLabel);

        MappedByteBuffer mappedByteBuffer = null;
        try (RandomAccessFile file = new RandomAccessFile(location, "rw");
            FileChannel channel = file.getChannel())
        {
            mappedByteBuffer = channel.map(FileChannel.MapMode.READ_WRITE, offset, length);
        }
        catch (final IOException ex)
        {
            LangUtil.rethrowUnchecked(ex);
        }

        return mappedByteBuffer;
    }

    public static MappedByteBuffer mapNewFile(final File location, final long length)
    {
        return mapNewFile(location, length, true);
    }

    public static MappedByteBuffer mapNewFile(final File location, final long length, final boolean fillWithZeros)
    {
        MappedByteBuffer mappedByteBuffer = null;
        try (FileChannel channel = FileChannel.open(
            location.toPath(), StandardOpenOption.CREATE_NEW, StandardOpenOption.READ, StandardOpenOption.WRITE))
        {
            mappedByteBuffer = channel.map(FileChannel.MapMode.READ_WRITE, 0, length);
            if (fillWithZeros)
            {
                for (int i = 0; i < length; i += BLOCK_SIZE)
                {
                    mappedByteBuffer.put(i, (byte)0);
                }
            }
        }
        catch (final IOException ex)
        {
            LangUtil.rethrowUnchecked(ex);
        }

        return mappedByteBuffer;
    }

    public static void checkFileExists(final File file, final String name)
    {
        if (!file.exists())
        {
            final String msg = "Missing file for " + name + " : " + file.getAbsolutePath();
            throw new IllegalStateException(msg);
        }
    }

    public static void unmap(final MappedByteBuffer buffer)
    {
        if (null != buffer)
        {
            try
            {
                UNSAFE.invokeCleaner(buffer);
            }
            catch (final Exception ignore)
            {
            }
        }
    }

    /**
     * Map a region of a file and return its address. The mapping is kept reachable (so it is not unmapped by the
     * garbage collector) until {@link #unmap(FileChannel, long, long)} is called with the returned address.
     */
    public static long map(
        final FileChannel fileChannel, final FileChannel.MapMode mode, final long offset, final long length)
    {
        try
        {
            final MappedByteBuffer buffer = fileChannel.map(mode, offset, length);
            final long address = UNSAFE.getLong(buffer, ADDRESS_OFFSET);
            MAPPED_BY_ADDRESS.put(address, buffer);
            return address;
        }
        catch (final IOException ex)
        {
            LangUtil.rethrowUnchecked(ex);
        }

        return 0;
    }

    public static void unmap(final FileChannel fileChannel, final long address, final long length)
    {
        final MappedByteBuffer buffer = MAPPED_BY_ADDRESS.remove(address);
        if (null != buffer)
        {
            unmap(buffer);
        }
    }

    public static void unmap(final ByteBuffer byteBuffer)
    {
        if (byteBuffer instanceof MappedByteBuffer)
        {
            unmap((MappedByteBuffer)byteBuffer);
        }
    }

    public static String tmpDirName()
    {
        String tmpDirName = System.getProperty("java.io.tmpdir");
        if (!tmpDirName.endsWith(File.separator))
        {
            tmpDirName += File.separator;
        }

        return tmpDirName;
    }
}
