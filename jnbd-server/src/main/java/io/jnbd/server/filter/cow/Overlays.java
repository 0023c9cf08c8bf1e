package io.jnbd.server.filter.cow;

import io.jnbd.server.backend.Backend;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.function.LongConsumer;
import java.util.stream.Stream;

/** The overlays a {@code cow-dir} holds, as {@code jnbd overlay list}, {@code discard} and {@code commit} see them. */
public final class Overlays {
    private Overlays() {}

    /**
     * One overlay: {@code name} is the client's ({@code shared} for cow-overlay=shared, listed as such), how many bytes
     * of blocks it holds data for, how many of its blocks it holds (data or zeroed), and when its data file was last
     * changed; {@code problem} says why the rest is unknown (a damaged map), else null.
     */
    public record Info(String name, boolean shared, long dataBytes, long blocks, long zeroedBlocks, Instant lastWrite,
                       String problem) {}

    /** Every overlay under {@code dir}, the shared one first, then the clients' by name. */
    public static List<Info> list(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) throw new NoSuchFileException(dir + " (not a cow-dir)");
        List<Info> out = new ArrayList<>();
        if (Files.exists(dir.resolve("shared/map"))) out.add(info("shared", true, dir.resolve("shared")));
        Path clients = dir.resolve("clients");
        if (Files.isDirectory(clients)) {
            try (Stream<Path> s = Files.list(clients)) {
                for (Path p : s.sorted(Comparator.comparing(Path::toString)).toList()) {
                    if (Files.exists(p.resolve("map"))) out.add(info(p.getFileName().toString(), false, p));
                }
            }
        }
        return out;
    }

    private static Info info(String name, boolean shared, Path at) throws IOException {
        Instant last = Files.getLastModifiedTime(at.resolve("data")).toInstant();
        try {
            OverlayMap.Summary s = OverlayMap.summary(at.resolve("map"), name);
            int blockSize = s.header().blockSize();
            long size = s.header().size(), data = 0, blocks = 0, zeroed = 0;
            for (int b = 0; b < s.states().length; b++) {
                if (s.states()[b] == Overlay.ABSENT) continue;
                blocks++;
                if (s.states()[b] == Overlay.ZERO) zeroed++;
                else data += Math.min(blockSize, size - (long) b * blockSize);
            }
            return new Info(name, shared, data, blocks, zeroed, last, null);
        } catch (IOException e) {
            return new Info(name, shared, 0, 0, 0, last, e.getMessage());
        }
    }

    /**
     * Removes client overlay {@code name} from {@code dir}, its map first (an overlay without one is new, whatever its
     * data file holds). Refused while a server holds the directory, which may be using the overlay.
     */
    public static void discard(Path dir, String name) throws IOException {
        String bad = CowStore.nameRefusal(name);
        if (bad != null) throw new IOException(bad);
        Path at = dir.resolve("clients").resolve(name);
        if (!Files.exists(at.resolve("map"))) throw new NoSuchFileException("no overlay '" + name + "' in " + dir);
        try (FileChannel held = CowStore.lock(dir)) {
            Files.delete(at.resolve("map"));
            OverlayMap.syncDirectory(at);
            Files.deleteIfExists(at.resolve("data"));
            Files.deleteIfExists(at.resolve("map.new"));
            Files.delete(at);
            OverlayMap.syncDirectory(at.getParent());
        }
    }

    /** Runs of zeroes this long or longer are left as holes in a committed image. */
    private static final int SPARSE = 4096;

    /**
     * Writes base plus client overlay {@code name} of {@code dir} as the new image {@code out}, sparse: what reads as
     * zeroes is left a hole. {@code base} must be the base the overlay was made over (its size and fingerprint are
     * checked against the map's header). The image is written as {@code out.part} and renamed to {@code out} when
     * complete and durable, so a failed commit never leaves a half image under that name; an existing {@code out} is
     * refused unless {@code replace}. Refused while a server holds the directory, whose overlay may be changing.
     * {@code progress} is told the bytes done so far.
     */
    public static void commit(Path dir, String name, Backend base, Path out, boolean replace, LongConsumer progress)
            throws IOException {
        String bad = CowStore.nameRefusal(name);
        if (bad != null) throw new IOException(bad);
        Path at = dir.resolve("clients").resolve(name);
        if (!Files.exists(at.resolve("map"))) throw new NoSuchFileException("no overlay '" + name + "' in " + dir);
        if (!replace && Files.exists(out)) throw new IOException(out + " exists (--force replaces it)");
        try (FileChannel held = CowStore.lock(dir)) {
            OverlayMap.Summary s = OverlayMap.summary(at.resolve("map"), name);
            OverlayMap.Header h = s.header();
            String why = h.mismatch(new OverlayMap.Header(h.blockSize(), base.size(), BaseFingerprint.of(base)));
            if (why != null) throw new IOException("overlay '" + name + "' was not made over this base: " + why);
            Path part = out.resolveSibling(out.getFileName() + ".part");
            try (RandomAccessFile f = new RandomAccessFile(part.toFile(), "rw");
                 FileChannel data = FileChannel.open(at.resolve("data"), StandardOpenOption.READ)) {
                f.setLength(0);
                f.setLength(h.size()); // one hole: only what holds data is written
                writeMerged(s, base, data, f.getChannel(), progress);
                f.getChannel().force(true);
            } catch (IOException | RuntimeException e) {
                Files.deleteIfExists(part);
                throw e;
            }
            Files.move(part, out, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            OverlayMap.syncDirectory(out.toAbsolutePath().getParent());
        }
    }

    /** Each block from where it reads (the overlay's data, zeroes, or the base), its non-zero runs written to {@code to}. */
    private static void writeMerged(OverlayMap.Summary s, Backend base, FileChannel data, FileChannel to, LongConsumer progress)
            throws IOException {
        int blockSize = s.header().blockSize();
        long size = s.header().size();
        ByteBuffer buf = ByteBuffer.allocateDirect(blockSize);
        MemorySegment zeroes = MemorySegment.ofBuffer(ByteBuffer.allocateDirect(SPARSE));
        for (int b = 0; b < s.states().length; b++) {
            long start = (long) b * blockSize;
            int length = (int) Math.min(blockSize, size - start);
            byte state = s.states()[b];
            if (state != Overlay.ZERO) {
                buf.clear().limit(length);
                if (state == Overlay.DATA) {
                    while (buf.hasRemaining()) {
                        if (data.read(buf, start + buf.position()) < 0) throw new IOException("overlay data file ends before " + (start + buf.position()));
                    }
                } else {
                    base.read(start, buf);
                }
                MemorySegment block = MemorySegment.ofBuffer(buf.clear().limit(length));
                for (int p = 0; p < length; ) {
                    int n = Math.min(SPARSE, length - p);
                    int q = p;
                    while (q < length && MemorySegment.mismatch(block, q, q + Math.min(SPARSE, length - q), zeroes, 0, Math.min(SPARSE, length - q)) != -1) {
                        q += Math.min(SPARSE, length - q);
                    }
                    if (q > p) {
                        ByteBuffer run = buf.slice(p, q - p);
                        long pos = start + p;
                        while (run.hasRemaining()) pos += to.write(run, pos);
                        p = q;
                    } else {
                        p += n;
                    }
                }
            }
            progress.accept(start + length);
        }
    }
}
