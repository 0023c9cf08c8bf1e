package io.jnbd.server.backend;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * The block lock of one file, shared by every backend that has the file open.
 *
 * <p>A file may be exported twice, say cached and direct. The direct export's read-modify-write rewrites
 * whole blocks, so a write through the other export to different bytes of the same block must not land
 * between its read and its write. Backends are told apart per file (device and inode), not per path, so
 * a symbolic link or a second spelling of the path finds the same lock.
 */
final class SharedFileLock implements AutoCloseable {
    private static final Map<Object, Entry> OPEN = new HashMap<>();

    private static final class Entry {
        final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
        int users;
    }

    private final Object key;
    private final ReentrantReadWriteLock lock;
    private boolean closed;

    private SharedFileLock(Object key, ReentrantReadWriteLock lock) {
        this.key = key;
        this.lock = lock;
    }

    static SharedFileLock of(Path path) throws IOException {
        Object key = Files.readAttributes(path, BasicFileAttributes.class).fileKey();
        if (key == null) key = path.toRealPath();
        synchronized (OPEN) {
            Entry e = OPEN.computeIfAbsent(key, k -> new Entry());
            e.users++;
            return new SharedFileLock(key, e.lock);
        }
    }

    /** Held by changes that rewrite only their own bytes; many at once. */
    ReentrantReadWriteLock.ReadLock shared() {
        return lock.readLock();
    }

    /** Held by a read-modify-write, alone. */
    ReentrantReadWriteLock.WriteLock exclusive() {
        return lock.writeLock();
    }

    @Override
    public void close() {
        synchronized (OPEN) {
            if (closed) return;
            closed = true;
            Entry e = OPEN.get(key);
            if (e != null && --e.users == 0) OPEN.remove(key);
        }
    }
}
