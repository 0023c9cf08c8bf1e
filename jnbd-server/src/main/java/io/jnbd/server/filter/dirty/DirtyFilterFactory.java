package io.jnbd.server.filter.dirty;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Backend.Trait;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FileBackend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.FilterFactory;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * {@code filter=dirty}: named, persistent dirty bitmaps (changed-block tracking), served as {@code qemu:dirty-bitmap:NAME}.
 * Keys: {@code dirty-bitmap=NAME} (repeatable: each is made, clean, if it does not exist), {@code dirty-granularity=SIZE}
 * (64K by default) and {@code dirty-dir=DIR} where the bitmaps live; over a {@code file:} export DIR defaults to
 * {@code IMAGE.bitmaps} beside the image.
 */
public final class DirtyFilterFactory implements FilterFactory {
    static final long DEFAULT_GRANULARITY = 64 * 1024, MIN_GRANULARITY = 512, MAX_GRANULARITY = 1L << 30;
    /** Bits of one bitmap at most (a 1 GiB file): 512 TiB at the default granularity. */
    static final long MAX_BLOCKS = 1L << 33;
    static final String DIR_SUFFIX = ".bitmaps";
    /** A memory export is new at each start, so a bitmap of one must never be trusted after a restart. */
    private static final String PROCESS = Long.toHexString(new java.security.SecureRandom().nextLong());
    /** Each memory backend's number in this process: a reload's new chain over the same one finds the same bitmaps. */
    private static final java.util.Map<Backend, Long> MEMORIES = java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());
    private static final java.util.concurrent.atomic.AtomicLong MEMORY_COUNT = new java.util.concurrent.atomic.AtomicLong();

    @Override public String name() { return "dirty"; }

    @Override
    public String usage() {
        return "filter=dirty[,dirty-bitmap=NAME]...[,dirty-granularity=SIZE][,dirty-dir=DIR]";
    }

    @Override public Set<String> options() { return Set.of("dirty-bitmap", "dirty-granularity", "dirty-dir"); }

    @Override public Set<String> repeatable() { return Set.of("dirty-bitmap"); }

    @Override
    public void check(BackendOptions options) {
        names(options);
        granularity(options);
    }

    @Override
    public void checkFor(BackendOptions options, Path image) {
        if (image == null && options.string("dirty-dir", null) == null) {
            throw new IllegalArgumentException("filter=dirty needs dirty-dir=DIR, where its bitmaps are kept"
                + " (only over a file: export do they go beside the image by default)");
        }
    }

    @Override
    public String describe(BackendOptions options) {
        List<String> names = names(options);
        String dir = options.string("dirty-dir", null);
        return "dirty(" + (names.isEmpty() ? "bitmaps" : String.join(", ", names)) + " at " + granularity(options)
            + " bytes a bit" + (dir == null ? ", beside the image" : " in " + dir) + ")";
    }

    /**
     * Every one: reads pass untouched, so sendfile and asynchronous reads stay, and asynchronous writes mark before they
     * start. Over a backend that never blocks (memory) no FLUSH or FUA waits for the bitmap files either: the data
     * does not outlive the process, and a restart finds its bitmaps all dirty whatever they say (see {@link #identity}).
     */
    @Override
    public Set<Trait> traits(Set<Trait> below) {
        return below;
    }

    @Override
    public FilterBackend wrap(Backend inner, BackendOptions options) {
        try {
            long granularity = granularity(options);
            if ((inner.size() + granularity - 1) / granularity > MAX_BLOCKS) {
                throw new IOException("dirty-granularity=" + granularity + " makes more than " + MAX_BLOCKS
                    + " blocks of this export; take a larger one");
            }
            BitmapFile.Shape shape = new BitmapFile.Shape(granularity, inner.size(), identity(inner));
            DirtyStore store = DirtyStore.open(dir(inner, options), shape, imageStamp(inner), names(options));
            return new DirtyFilter(inner, store, Set.copyOf(traits(inner.traits())), !inner.has(Trait.NEVER_BLOCKS));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static Path dir(Backend inner, BackendOptions options) throws IOException {
        String dir = options.string("dirty-dir", null);
        if (dir != null) return Path.of(dir);
        FileBackend file = FilterBackend.find(inner, FileBackend.class);
        if (file == null) throw new IOException("needs dirty-dir=DIR, where its bitmaps are kept (" + inner.describe() + " is not a file)");
        Path image = file.path().toAbsolutePath();
        return image.resolveSibling(image.getFileName() + DIR_SUFFIX);
    }

    /**
     * What the bitmaps are of: a file by its device and inode (a copy or a restored image is another, whose blocks may
     * all differ), a backend that holds its data in memory (it never blocks) by this process and instance, as it is new
     * at each start, anything else by its description.
     */
    static byte[] identity(Backend inner) throws IOException {
        String id;
        FileBackend file = FilterBackend.find(inner, FileBackend.class);
        Backend at = inner;
        while (at instanceof FilterBackend f) at = f.inner();
        if (file != null) {
            Object key = Files.readAttributes(file.path(), BasicFileAttributes.class).fileKey();
            id = "file " + (key != null ? key : file.path().toRealPath());
        } else if (at.has(Trait.NEVER_BLOCKS)) {
            id = "memory " + PROCESS + " " + MEMORIES.computeIfAbsent(at, m -> MEMORY_COUNT.incrementAndGet());
        } else {
            id = "backend " + at.describe();
        }
        try {
            return MessageDigest.getInstance("SHA-256").digest(id.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError("every JDK has SHA-256", e);
        }
    }

    /** When the image file was last modified, for a bitmap to find writes made while no server tracked it. */
    private static java.util.function.LongSupplier imageStamp(Backend inner) {
        FileBackend file = FilterBackend.find(inner, FileBackend.class);
        if (file == null) return () -> -1;
        return () -> {
            try {
                return Files.getLastModifiedTime(file.path()).to(java.util.concurrent.TimeUnit.NANOSECONDS);
            } catch (IOException e) {
                return -1;
            }
        };
    }

    static List<String> names(BackendOptions options) {
        String v = options.string("dirty-bitmap", null);
        if (v == null) return List.of();
        Set<String> names = new LinkedHashSet<>();
        for (String n : v.split(";", -1)) {
            String why = DirtyStore.nameRefusal(n);
            if (why != null) throw new IllegalArgumentException("dirty-bitmap=" + n + ": " + why);
            names.add(n);
        }
        return new ArrayList<>(names);
    }

    static long granularity(BackendOptions options) {
        long g = options.size("dirty-granularity", DEFAULT_GRANULARITY);
        if (Long.bitCount(g) != 1 || g < MIN_GRANULARITY || g > MAX_GRANULARITY) {
            throw new IllegalArgumentException("dirty-granularity=" + options.asMap().get("dirty-granularity")
                + " must be a power of two from 512 to 1G");
        }
        return g;
    }
}
