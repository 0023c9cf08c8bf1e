package io.jnbd.server.filter;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * {@code DIR/lock}, held by the one server whose filter keeps its state in DIR (cow's overlays, dirty's bitmaps): two
 * processes writing one overlay or bitmap would each overwrite what the other made durable.
 */
public final class DirectoryLock {
    private DirectoryLock() {}

    /**
     * Takes the lock of {@code dir} (made if missing), or fails with a message naming {@code key} (the filter's key
     * that gave the directory) and who else may hold it; closing the channel releases it.
     */
    public static FileChannel take(Path dir, String key, String holders) throws IOException {
        Files.createDirectories(dir);
        Path file = dir.resolve("lock");
        FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
        FileLock held;
        try {
            held = ch.tryLock();
        } catch (OverlappingFileLockException e) {
            held = null; // this very process holds it
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
        if (held == null) {
            ch.close();
            throw new IOException(key + " " + dir + " is in use by another " + holders + " (" + file + " is locked)");
        }
        return ch;
    }
}
