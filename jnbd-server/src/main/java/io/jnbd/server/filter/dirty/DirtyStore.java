package io.jnbd.server.filter.dirty;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.MetaExtent;
import io.jnbd.server.backend.NbdErrorException;
import java.io.Closeable;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.StampedLock;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The bitmaps of one {@code dirty-dir}: {@code DIR/NAME.bitmap} each (see {@link BitmapFile}), and {@code DIR/lock}, held
 * while a server uses the directory. Every bitmap on disk is loaded, whatever the spec names, since one added while the
 * server ran must go on recording after a restart.
 *
 * <p>How a change is atomic with respect to writes: a write marks the recording bitmaps under the read side of {@link
 * #gate}, before its data goes down; a change (add, clear, remove, rotate) takes the write side, makes its new state
 * durable and publishes the new recording set, so every write marks wholly before or wholly after it. A change then
 * waits until the writes marked before it have reached the backend ({@link Epoch#inflight}), so that a backup reading
 * the blocks of a frozen bitmap after a rotate returned reads their new data.
 *
 * <p>One store serves every chain of a server over the same directory: a reload that changes an export's filters builds
 * a new chain while connections go on through the old one, and both must mark the same bitmaps.
 */
final class DirtyStore implements Closeable {
    private static final Logger log = LoggerFactory.getLogger(DirtyStore.class);
    static final String SUFFIX = ".bitmap";
    static final int MAX_NAME = 64;
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-][A-Za-z0-9._-]*");
    private static final long DRAIN_WARNING = TimeUnit.SECONDS.toNanos(30);
    /** The stores open in this process, by directory; guarded by itself. */
    private static final Map<Path, DirtyStore> OPEN = new HashMap<>();

    /** The recording set of one period between changes, and the writes that marked it and have not yet returned. */
    record Epoch(BitmapFile[] recording, LongAdder inflight) {}

    final Path dir;
    final BitmapFile.Shape shape;
    /** When the image was last modified, -1 where unknown (not a file). */
    private final java.util.function.LongSupplier imageStamp;
    private final FileChannel lock;
    private int holds; // under OPEN
    private final StampedLock gate = new StampedLock();
    private volatile Epoch epoch;
    /** Every bitmap by name, in the order made; replaced whole (under the gate's write side), never changed. */
    private volatile Map<String, BitmapFile> bitmaps = Map.of();
    private boolean closed; // under this

    private DirtyStore(Path dir, BitmapFile.Shape shape, java.util.function.LongSupplier imageStamp, FileChannel lock) {
        this.dir = dir;
        this.shape = shape;
        this.imageStamp = imageStamp;
        this.lock = lock;
        publish(Map.of());
    }

    /**
     * The store of {@code dir} for an export of {@code shape}, opened or shared, with every bitmap of {@code names} in
     * it (made, clean, where missing). Each call is one hold, given back by {@link #close}. {@code imageStamp}: when the
     * image was last modified, -1 where unknown.
     */
    static DirtyStore open(Path dir, BitmapFile.Shape shape, java.util.function.LongSupplier imageStamp, List<String> names)
            throws IOException {
        Files.createDirectories(dir);
        Path key = dir.toRealPath();
        synchronized (OPEN) {
            DirtyStore s = OPEN.get(key);
            if (s == null) {
                s = new DirtyStore(key, shape, imageStamp, lock(key));
                try {
                    s.load();
                    s.ensure(names);
                } catch (IOException | RuntimeException e) {
                    s.closeFiles();
                    throw e;
                }
                OPEN.put(key, s);
            } else {
                String why = s.shape.mismatch(shape);
                if (why != null) throw new IOException("dirty-dir " + dir + " is in use by another export of this server (" + why + ")");
                s.ensure(names);
            }
            s.holds++;
            return s;
        }
    }

    private static FileChannel lock(Path dir) throws IOException {
        return io.jnbd.server.filter.DirectoryLock.take(dir, "dirty-dir", "server");
    }

    /** Why {@code name} cannot name a bitmap, or null: 1 to 64 of {@code A-Z a-z 0-9 . _ -}, not starting with a dot. */
    static String nameRefusal(String name) {
        if (name == null || name.isEmpty()) return "a bitmap name cannot be empty";
        if (name.length() > MAX_NAME || !NAME.matcher(name).matches()) {
            return "bitmap name '" + name + "' is not 1 to " + MAX_NAME + " of A-Z a-z 0-9 . _ - (not starting with '.')";
        }
        return null;
    }

    private Path file(String name) {
        return dir.resolve(name + SUFFIX);
    }

    /** Loads every bitmap of the directory: pending ones are dropped, damaged or foreign ones rebuilt all dirty. */
    private void load() throws IOException {
        List<BitmapFile> found = new ArrayList<>();
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
            for (Path f : files) {
                String fn = f.getFileName().toString();
                if (fn.endsWith(SUFFIX + ".tmp")) {
                    Files.deleteIfExists(f); // a bitmap being made when the server stopped; it never took effect
                    continue;
                }
                if (!fn.endsWith(SUFFIX) || nameRefusal(fn.substring(0, fn.length() - SUFFIX.length())) != null) continue;
                String name = fn.substring(0, fn.length() - SUFFIX.length());
                BitmapFile.Opened o = BitmapFile.open(name, f, shape, imageStamp.getAsLong());
                if (o.state() == BitmapFile.PENDING) {
                    if (o.bitmap() != null) o.bitmap().discard();
                    log.info("dirty bitmap '{}' in {}: dropped, the add or rotate that made it did not finish", name, dir);
                    Files.delete(f);
                    continue;
                }
                if (o.bitmap() != null) {
                    found.add(o.bitmap());
                    continue;
                }
                // Never clean: every block could have changed since the file was good.
                log.warn("dirty bitmap '{}' in {}: {}; rebuilt as all dirty (the next incremental copy is a full one)",
                    name, dir, o.damage());
                int state = o.state() == BitmapFile.FROZEN ? BitmapFile.FROZEN : BitmapFile.RECORDING;
                found.add(BitmapFile.create(name, f, shape, o.created() >= 0 ? o.created() : Long.MAX_VALUE / 2, state, true));
            }
        } catch (IOException | RuntimeException e) {
            for (BitmapFile b : found) b.discard();
            throw e;
        }
        found.sort(Comparator.comparingLong((BitmapFile b) -> b.created).thenComparing(b -> b.name));
        Map<String, BitmapFile> all = new LinkedHashMap<>();
        for (BitmapFile b : found) all.put(b.name, b);
        publish(all);
    }

    private void ensure(List<String> names) throws IOException {
        for (String n : names) {
            if (!bitmaps.containsKey(n)) add(n);
        }
    }

    /** Makes {@code all} the bitmaps, and those of them recording the ones writes mark from now; under the gate's write side. */
    private Epoch publish(Map<String, BitmapFile> all) {
        Epoch before = epoch;
        bitmaps = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(all));
        epoch = new Epoch(all.values().stream().filter(b -> b.state() == BitmapFile.RECORDING).toArray(BitmapFile[]::new),
            new LongAdder());
        return before;
    }

    /**
     * Marks the blocks of a write, trim or zero in every recording bitmap; the caller passes the result to {@link #leave}
     * once the request has reached the backend (or failed).
     */
    Epoch enter(long offset, long length) {
        long stamp = gate.readLock();
        try {
            Epoch e = epoch;
            for (BitmapFile b : e.recording()) b.mark(offset, length);
            e.inflight().increment();
            return e;
        } finally {
            gate.unlockRead(stamp);
        }
    }

    static void leave(Epoch e) {
        e.inflight().decrement();
    }

    /** Makes every mark so far durable (FLUSH, FUA). */
    void force() {
        for (BitmapFile b : bitmaps.values()) {
            try {
                b.force();
            } catch (IllegalStateException removed) {
                // removed since the map was read: nothing of it needs keeping
            }
        }
    }

    List<String> names() {
        return List.copyOf(bitmaps.keySet());
    }

    List<DirtyBitmaps.Info> list() {
        long stamp = gate.readLock();
        try {
            List<DirtyBitmaps.Info> out = new ArrayList<>();
            for (BitmapFile b : bitmaps.values()) {
                out.add(new DirtyBitmaps.Info(b.name, b.state() == BitmapFile.RECORDING, shape.granularity(), b.dirtyBytes()));
            }
            return out;
        } finally {
            gate.unlockRead(stamp);
        }
    }

    boolean has(String name) {
        return bitmaps.containsKey(name);
    }

    List<MetaExtent> extents(String name, long offset, long length) throws IOException {
        long stamp = gate.readLock();
        try {
            BitmapFile b = bitmaps.get(name);
            if (b == null) throw new NbdErrorException(Nbd.EINVAL, unknown(name));
            return b.extents(offset, length);
        } finally {
            gate.unlockRead(stamp);
        }
    }

    private String unknown(String name) {
        return "there is no dirty bitmap '" + name + "' (" + (bitmaps.isEmpty() ? "there are none" : "bitmaps: " + String.join(", ", bitmaps.keySet())) + ")";
    }

    private BitmapFile existing(String name) throws IOException {
        BitmapFile b = bitmaps.get(name);
        if (b == null) throw new IOException(unknown(name));
        return b;
    }

    /** A change made under the gate's write side: it persists what it changes and publishes the new set. */
    private interface Change {
        void run() throws IOException;
    }

    private void change(Change c) throws IOException {
        Epoch before = epoch;
        long stamp = gate.writeLock();
        try {
            before = epoch;
            c.run();
        } finally {
            gate.unlockWrite(stamp);
        }
        drain(before);
    }

    /** Waits until every write that marked {@code e} has reached the backend. */
    private void drain(Epoch e) {
        long start = System.nanoTime();
        boolean warned = false;
        while (e.inflight().sum() != 0) {
            if (!warned && System.nanoTime() - start > DRAIN_WARNING) {
                log.warn("dirty bitmaps in {}: writes marked before a change are still not done after 30 s; waiting on", dir);
                warned = true;
            }
            LockSupport.parkNanos(100_000);
        }
    }

    private void checkNew(String name) throws IOException {
        String why = nameRefusal(name);
        if (why != null) throw new IOException(why);
        if (bitmaps.containsKey(name)) throw new IOException("dirty bitmap '" + name + "' exists already (bitmaps: " + String.join(", ", bitmaps.keySet()) + ")");
        if (closed) throw new IOException("the export is closing");
    }

    private long nextCreated() {
        long max = 0;
        for (BitmapFile b : bitmaps.values()) max = Math.max(max, b.created);
        return max + 1;
    }

    synchronized void add(String name) throws IOException {
        checkNew(name);
        BitmapFile b = BitmapFile.create(name, file(name), shape, nextCreated(), BitmapFile.PENDING, false);
        try {
            change(() -> {
                b.writeHeader(BitmapFile.RECORDING, false);
                Map<String, BitmapFile> all = new LinkedHashMap<>(bitmaps);
                all.put(name, b);
                publish(all);
            });
        } catch (IOException | RuntimeException e) {
            if (!bitmaps.containsKey(name)) dropQuietly(b);
            throw e;
        }
    }

    synchronized void clear(String name) throws IOException {
        BitmapFile b = existing(name);
        change(b::clear);
    }

    synchronized void remove(String name) throws IOException {
        BitmapFile b = existing(name);
        change(() -> {
            Files.delete(b.file);
            BitmapFile.syncDirectory(dir);
            Map<String, BitmapFile> all = new LinkedHashMap<>(bitmaps);
            all.remove(name);
            publish(all);
        });
        b.discard();
    }

    /**
     * The new bitmap is made recording before the current one is frozen: a crash between the two leaves both recording
     * (the old one over-reports), never neither. No write happens between them: the gate's write side is held.
     */
    synchronized void rotate(String current, String next) throws IOException {
        BitmapFile cur = existing(current);
        if (cur.state() != BitmapFile.RECORDING) throw new IOException("dirty bitmap '" + current + "' is frozen already; rotate a recording one");
        checkNew(next);
        BitmapFile b = BitmapFile.create(next, file(next), shape, nextCreated(), BitmapFile.PENDING, false);
        try {
            change(() -> {
                b.writeHeader(BitmapFile.RECORDING, false);
                cur.writeHeader(BitmapFile.FROZEN, true);
                Map<String, BitmapFile> all = new LinkedHashMap<>(bitmaps);
                all.put(next, b);
                publish(all);
            });
        } catch (IOException | RuntimeException e) {
            if (!bitmaps.containsKey(next)) dropQuietly(b);
            throw e;
        }
    }

    private void dropQuietly(BitmapFile b) {
        try {
            b.discard();
            Files.deleteIfExists(b.file);
        } catch (IOException e) {
            log.warn("dirty bitmap '{}': cannot delete {} after a failed change ({}); it is dropped at the next start", b.name, b.file, e.getMessage());
        }
    }

    /** Gives back one hold; the last closes every bitmap (recording ones note their bits' CRC) and frees the directory. */
    @Override
    public void close() throws IOException {
        synchronized (OPEN) {
            if (--holds > 0) return;
            OPEN.remove(dir);
        }
        synchronized (this) {
            closed = true;
        }
        closeFiles();
    }

    private void closeFiles() throws IOException {
        IOException failed = null;
        long stamp = gate.writeLock();
        try {
            long modified = imageStamp.getAsLong();
            for (BitmapFile b : bitmaps.values()) {
                try {
                    b.close(modified);
                } catch (IOException e) {
                    if (failed == null) failed = e;
                    else failed.addSuppressed(e);
                }
            }
        } finally {
            gate.unlockWrite(stamp);
            lock.close();
        }
        if (failed != null) throw failed;
    }
}
