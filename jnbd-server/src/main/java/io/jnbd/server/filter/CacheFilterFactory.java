package io.jnbd.server.filter;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Backend.Capability;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.FilterFactory;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * {@code filter=cache}: nbdkit's cache filter, with its keys: {@code cache=writeback|writethrough|unsafe},
 * {@code cache-min-block-size=}, {@code cache-max-size=}, {@code cache-high-threshold=}, {@code cache-low-threshold=}
 * and {@code cache-on-read=true|false|/PATH}. The blocks live in an unlinked sparse file under {@code $TMPDIR} (or
 * {@code java.io.tmpdir}).
 */
public final class CacheFilterFactory implements FilterFactory {
    /** nbdkit's floor for {@code cache-max-size}, to keep a cache that thrashes on every request out of reach. */
    static final long MIN_MAX_SIZE = 1L << 20;

    @Override public String name() { return "cache"; }

    @Override
    public String usage() {
        return "filter=cache[,cache=writeback|writethrough|unsafe][,cache-min-block-size=SIZE][,cache-max-size=SIZE]"
            + "[,cache-high-threshold=N][,cache-low-threshold=N][,cache-on-read=true|false|/PATH]";
    }

    @Override
    public Set<String> options() {
        return new LinkedHashSet<>(List.of("cache", "cache-min-block-size", "cache-max-size", "cache-high-threshold",
            "cache-low-threshold", "cache-on-read"));
    }

    @Override
    public void check(BackendOptions options) {
        config(options);
    }

    @Override
    public String describe(BackendOptions options) {
        return config(options).describe();
    }

    /**
     * Only {@link Backend.Trait#REMOTE}: its reads change what the inner's would return (sendfile and the inner's
     * asynchronous calls would skip it), and a miss waits on the inner; a remote inner's misses still wait on other
     * machines, so its calls stay on virtual threads.
     */
    @Override
    public Set<Backend.Trait> traits(Set<Backend.Trait> below) {
        return below.contains(Backend.Trait.REMOTE) ? Set.of(Backend.Trait.REMOTE) : Set.of();
    }

    @Override
    public Set<Capability> capabilities(BackendOptions options, Set<Capability> below) {
        return capabilities(config(options).mode(), below);
    }

    /**
     * The inner's, and: CACHE (the filter fills itself), FLUSH and FUA wherever it takes writes (it makes them
     * durable itself, by writing back, or ignores them when unsafe), and MULTI_CONN where a flush on one connection
     * writes back every connection's blocks (all but writethrough, as nbdkit decides).
     */
    static Set<Capability> capabilities(CacheConfig.Mode mode, Set<Capability> below) {
        EnumSet<Capability> c = EnumSet.noneOf(Capability.class);
        c.addAll(below);
        c.add(Capability.CACHE);
        if (below.contains(Capability.WRITE)) {
            c.add(Capability.FLUSH);
            c.add(Capability.FUA);
            if (mode != CacheConfig.Mode.WRITETHROUGH) c.add(Capability.MULTI_CONN);
        }
        return c;
    }

    /**
     * Over a backend that takes no writes the cache can only hold what is read: it needs {@code cache-on-read}, and a
     * {@code cache=} mode, which says how writes are cached, is a mistake.
     */
    @Override
    public String refusal(BackendOptions options, Set<Capability> below) {
        if (below.contains(Capability.WRITE)) return null;
        CacheConfig c = config(options);
        if (options.has("cache")) {
            return "cache=" + c.mode().key() + " caches writes, but what is behind it is read-only; a cache in front of a"
                + " read-only backend caches reads only: drop cache= and give cache-on-read=true";
        }
        if (c.onRead() == CacheConfig.OnRead.OFF) {
            return "what is behind it is read-only, so the cache would hold nothing: give cache-on-read=true (or /PATH)";
        }
        return null;
    }

    @Override
    public FilterBackend wrap(Backend inner, BackendOptions options) {
        Path dir = tmpdir();
        try {
            if (!Files.isDirectory(dir)) throw new NoSuchFileException(dir.toString(), null, "no such directory");
            return new CacheFilter(inner, config(options), dir);
        } catch (IOException e) {
            // The interface's wrap throws nothing checked; FilterStack's callers report this one line as it is.
            throw new UncheckedIOException("filter=cache: cannot make its file in " + dir + " ($TMPDIR, else java.io.tmpdir): "
                + (e instanceof NoSuchFileException n && n.getReason() != null ? n.getReason() : e.toString()), e);
        }
    }

    /** Where nbdkit puts its cache file: {@code $TMPDIR}, here with the JVM's own temporary directory as fallback. */
    static Path tmpdir() {
        String t = System.getenv("TMPDIR");
        return Path.of(t != null && !t.isEmpty() ? t : System.getProperty("java.io.tmpdir"));
    }

    /** The filter's configuration read from its keys, each mistake one line naming the key. */
    static CacheConfig config(BackendOptions o) {
        String modeText = o.choice("cache", "writeback", "writeback", "writethrough", "unsafe");
        CacheConfig.Mode mode = CacheConfig.Mode.valueOf(modeText.toUpperCase(Locale.ROOT));
        long blockSize = size(o, "cache-min-block-size", 64 * 1024);
        if (blockSize < 4096 || Long.bitCount(blockSize) != 1 || blockSize > (1 << 30)) {
            throw new IllegalArgumentException("cache-min-block-size=" + o.string("cache-min-block-size", null)
                + " must be a power of 2 from 4K to 1G");
        }
        long maxSize = size(o, "cache-max-size", -1);
        if (maxSize != -1 && maxSize < MIN_MAX_SIZE) {
            throw new IllegalArgumentException("cache-max-size=" + o.string("cache-max-size", null) + " is too small: at least 1M");
        }
        if (maxSize != -1 && maxSize < blockSize) {
            throw new IllegalArgumentException("cache-max-size=" + o.string("cache-max-size", null)
                + " holds no block of cache-min-block-size=" + o.string("cache-min-block-size", null));
        }
        int high = o.integer("cache-high-threshold", 1, 100, 95);
        int low = o.integer("cache-low-threshold", 1, 100, 80);
        if (low >= high) {
            throw new IllegalArgumentException("cache-low-threshold=" + low + " must be less than cache-high-threshold=" + high);
        }
        CacheConfig.OnRead onRead = CacheConfig.OnRead.OFF;
        Path onReadPath = null;
        if (o.has("cache-on-read")) {
            String v = o.asMap().get("cache-on-read");
            String t = v == null ? "true" : v.strip(); // a bare key, as TOML's cache-on-read = true gives it
            if (t.startsWith("/")) {
                onRead = CacheConfig.OnRead.WHILE_PATH_EXISTS;
                onReadPath = Path.of(t);
            } else {
                onRead = switch (t.toLowerCase(Locale.ROOT)) {
                    case "true", "on", "yes", "1" -> CacheConfig.OnRead.ON;
                    case "false", "off", "no", "0" -> CacheConfig.OnRead.OFF;
                    default -> throw new IllegalArgumentException("cache-on-read must be true, false or an absolute /PATH, not '" + v + "'");
                };
            }
        }
        return new CacheConfig(mode, (int) blockSize, maxSize, high, low, onRead, onReadPath);
    }

    private static long size(BackendOptions o, String key, long fallback) {
        try {
            return o.size(key, fallback);
        } catch (IllegalArgumentException e) {
            if (!o.has(key) || o.asMap().get(key) == null || o.asMap().get(key).isEmpty()) throw e;
            throw new IllegalArgumentException(key + "=" + o.asMap().get(key) + " is not a size (examples: 4096, 64K, 1G)");
        }
    }
}
