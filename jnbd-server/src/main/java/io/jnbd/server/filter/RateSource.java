package io.jnbd.server.filter;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where one of the rate filter's limits comes from: {@code rate=} (or {@code connection-rate=}) alone, or with a
 * {@code rate-file=} that overrides it, read again when a request finds the last reading older than
 * {@link #REREAD_NANOS}. As nbdkit's filter does: a file that is missing or does not hold a rate leaves the last rate
 * in force (before any reading, the key's; without the key, no limit), and a file saying 0 lifts the limit.
 */
final class RateSource {
    private static final Logger log = LoggerFactory.getLogger(RateSource.class);
    /**
     * nbdkit reads the file at every request; a tenth of a second is as prompt for a person changing the rate, and
     * keeps a file read off every request of a fast export.
     */
    static final long REREAD_NANOS = 100_000_000L;

    private final String key;
    private final Path file;
    private volatile long rate;
    /** When the file is next read, on the caller's clock; Long.MIN_VALUE: at the first call. */
    private final AtomicLong due = new AtomicLong(Long.MIN_VALUE);

    /** {@code rate}: bits per second, 0 for none; {@code file} null for a fixed rate; {@code key} names it in logs. */
    RateSource(String key, long rate, Path file) {
        this.key = key;
        this.rate = rate;
        this.file = file;
    }

    /** The rate in force at {@code now}, in bits per second (0: no limit); reads the file if it is due. */
    long rate(long now) {
        if (file != null) {
            long d = due.get();
            // One request reads the file; the others go on with the rate in force meanwhile.
            if ((d == Long.MIN_VALUE || now - d >= 0) && due.compareAndSet(d, now + REREAD_NANOS)) reread();
        }
        return rate;
    }

    private void reread() {
        String line;
        try {
            line = firstLine(file);
        } catch (IOException | RuntimeException e) {
            return; // missing, or being replaced: the last rate stays
        }
        long r;
        try {
            r = RateFilterFactory.parseBits(key, line);
        } catch (IllegalArgumentException e) {
            log.debug("{}: {}", file, e.getMessage());
            return;
        }
        if (r != rate) log.info("{}={}: the rate is now {} bits/s", key + "-file", file, RateFilterFactory.text(r));
        rate = r;
    }

    /** The file's first line, from its first bytes only: a rate is short, and a path to a device must not hang. */
    static String firstLine(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            return new String(in.readNBytes(256), StandardCharsets.US_ASCII).lines().findFirst().orElse("");
        }
    }

    /** {@code 800M bits/s}, {@code 800M bits/s or as /tmp/rate says}, {@code as /tmp/rate says}. */
    @Override
    public String toString() {
        String fixed = RateFilterFactory.text(rate) + " bits/s";
        if (file == null) return fixed;
        return (rate == 0 ? "" : fixed + " or ") + "as " + file + " says";
    }
}
