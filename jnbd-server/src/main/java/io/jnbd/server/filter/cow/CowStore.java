package io.jnbd.server.filter.cow;

import io.jnbd.server.backend.Backend;
import java.io.Closeable;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The overlays of one cow export and the directory they live in ({@code cow-dir}), shared by the export's filter and
 * every connection's view of it:
 * <pre>
 * DIR/lock               held (fcntl lock) while a server uses DIR
 * DIR/shared/{map,data}  cow-overlay=shared
 * DIR/clients/NAME/...   cow-overlay=client or identity, one overlay a client name
 * </pre>
 * Overlays of connections ({@code cow-overlay=connection}) are files unlinked as soon as they are open, under DIR or
 * the system's temporary directory.
 */
final class CowStore implements Closeable {
    enum Mode { SHARED, CONNECTION, CLIENT, IDENTITY }

    static final int MAX_NAME_BYTES = 255;
    /** {@code EXPORT/NAME@ro}: overlay NAME as its client sees it, read-only (see {@link NamedCowFilter}). */
    static final String READ_ONLY_VIEW = "@ro";

    final Mode mode;
    private final Path dir;
    private final OverlayMap.Header header;
    private final FileChannel lockFile;
    private final Overlay shared;
    private final Map<String, Overlay> named = new ConcurrentHashMap<>();
    private final Set<Overlay> temporaries = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    private CowStore(Mode mode, Path dir, OverlayMap.Header header, FileChannel lockFile, Overlay shared) {
        this.mode = mode;
        this.dir = dir;
        this.header = header;
        this.lockFile = lockFile;
        this.shared = shared;
    }

    /** Takes {@code dir} (null: connection overlays under the temporary directory) for an export over {@code base}. */
    static CowStore open(Mode mode, Path dir, int blockSize, Backend base) throws IOException {
        OverlayMap.Header header = new OverlayMap.Header(blockSize, base.size(), BaseFingerprint.of(base));
        Overlay.blocks(base.size(), blockSize); // refuses an export with too many blocks before anything is made
        FileChannel lock = dir == null ? null : lock(dir);
        try {
            Overlay shared = mode == Mode.SHARED ? Overlay.open("shared", dir.resolve("shared"), header) : null;
            return new CowStore(mode, dir, header, lock, shared);
        } catch (IOException | RuntimeException e) {
            if (lock != null) lock.close();
            throw e;
        }
    }

    /** Takes DIR/lock, or fails with a message saying the directory is in use; closing the channel releases it. */
    static FileChannel lock(Path dir) throws IOException {
        return io.jnbd.server.filter.DirectoryLock.take(dir, "cow-dir", "server or export");
    }

    /** The one overlay of {@code cow-overlay=shared}. */
    Overlay shared() {
        return shared;
    }

    /** The overlay called {@code name} (a name {@link #nameRefusal} let through), opened or made on first use and kept open. */
    Overlay named(String name) throws IOException {
        Overlay o = named.get(name);
        if (o != null) return o;
        synchronized (named) {
            if (closed) throw new IOException("the export is closing");
            o = named.get(name);
            if (o == null) {
                o = Overlay.open(name, dir.resolve("clients").resolve(name), header);
                named.put(name, o);
            }
            return o;
        }
    }

    /** The overlay called {@code name} if it exists (open, or on disk), never made: for a view of it. */
    Overlay existing(String name) throws IOException {
        if (named.containsKey(name) || Files.exists(dir.resolve("clients").resolve(name).resolve("map"))) return named(name);
        throw new IOException("there is no overlay '" + name + "' (a client makes it by opening EXPORT/" + name + ")");
    }

    /** A new overlay for one connection, gone when {@link #release}d. */
    Overlay temporary(String peer) throws IOException {
        Path parent = dir != null ? dir : Path.of(System.getProperty("java.io.tmpdir"));
        Overlay o = Overlay.temporary("connection " + peer, parent, header);
        temporaries.add(o);
        if (closed) {
            release(o);
            throw new IOException("the export is closing");
        }
        return o;
    }

    void release(Overlay temporary) {
        if (!temporaries.remove(temporary)) return;
        try {
            temporary.close();
        } catch (IOException ignored) {
            // its file is unlinked already: closing only gives back the descriptors
        }
    }

    /** Makes every persistent overlay's completed changes durable. */
    void flush() throws IOException {
        if (shared != null) shared.flush();
        for (Overlay o : named.values()) o.flush();
    }

    /**
     * Why {@code name} cannot name an overlay (it becomes a directory under DIR/clients), or null: not empty, at most
     * {@value #MAX_NAME_BYTES} bytes, no {@code /}, {@code ..} or control characters, not {@code .}.
     */
    static String nameRefusal(String name) {
        String why = null;
        if (name.isEmpty()) why = "it is empty";
        else if (name.getBytes(StandardCharsets.UTF_8).length > MAX_NAME_BYTES) why = "it is longer than " + MAX_NAME_BYTES + " bytes";
        else if (name.indexOf('/') >= 0) why = "it holds '/'";
        else if (name.equals(".") || name.contains("..")) why = "it is '.' or holds '..'";
        else if (name.chars().anyMatch(Character::isISOControl)) why = "it holds a control character";
        else if (name.endsWith(READ_ONLY_VIEW)) why = "'" + READ_ONLY_VIEW + "' at its end names the read-only view of an overlay";
        return why == null ? null : "overlay name not allowed: " + why;
    }

    @Override
    public void close() throws IOException {
        List<Overlay> all = new ArrayList<>();
        synchronized (named) {
            closed = true;
            all.addAll(named.values());
        }
        if (shared != null) all.add(shared);
        IOException failed = null;
        for (Overlay o : all) {
            try {
                o.flush();
                o.close();
            } catch (IOException e) {
                if (failed == null) failed = e;
                else failed.addSuppressed(e);
            }
        }
        for (Overlay o : List.copyOf(temporaries)) release(o);
        if (lockFile != null) lockFile.close(); // releases the lock
        if (failed != null) throw failed;
    }
}
