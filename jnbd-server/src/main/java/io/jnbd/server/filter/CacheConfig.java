package io.jnbd.server.filter;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * What a cache filter does, read from its keys by {@link CacheFilterFactory#config}.
 *
 * @param blockSize the unit the cache holds, a power of two ({@code cache-min-block-size})
 * @param maxSize   {@code cache-max-size} in bytes, or -1: the cache may grow to the export's size
 * @param high      percent of {@code maxSize} at which reclaiming starts ({@code cache-high-threshold})
 * @param low       percent of {@code maxSize} at which it stops ({@code cache-low-threshold})
 * @param onReadPath with {@link OnRead#WHILE_PATH_EXISTS}, the path; else null
 */
record CacheConfig(Mode mode, int blockSize, long maxSize, int high, int low, OnRead onRead, Path onReadPath) {

    enum Mode {
        /** Writes stay in the cache until a flush (or eviction) writes them back. */
        WRITEBACK,
        /** Every write reaches the backend before its reply. */
        WRITETHROUGH,
        /** As writeback, but flushes and FUA are ignored. */
        UNSAFE;

        String key() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    enum OnRead { OFF, ON, WHILE_PATH_EXISTS }

    /** Whether a block read from the backend now is kept: nbdkit's cache-on-read, the path looked at per request. */
    boolean cacheOnRead() {
        return switch (onRead) {
            case OFF -> false;
            case ON -> true;
            case WHILE_PATH_EXISTS -> Files.exists(onReadPath);
        };
    }

    /** {@code cache(writeback, 64K blocks, at most 1G, on read)}. */
    String describe() {
        List<String> parts = new ArrayList<>();
        parts.add(mode.key());
        parts.add(size(blockSize) + " blocks");
        if (maxSize >= 0) parts.add("at most " + size(maxSize) + " (reclaim " + high + "% to " + low + "%)");
        switch (onRead) {
            case ON -> parts.add("on read");
            case WHILE_PATH_EXISTS -> parts.add("on read while " + onReadPath + " exists");
            default -> { }
        }
        return "cache(" + String.join(", ", parts) + ")";
    }

    /** {@code 64K}, {@code 1G}, or bytes where no suffix is exact. */
    static String size(long bytes) {
        String[] units = {"", "K", "M", "G", "T", "P"};
        int u = 0;
        while (u < units.length - 1 && bytes != 0 && bytes % 1024 == 0) {
            bytes /= 1024;
            u++;
        }
        return bytes + units[u];
    }
}
