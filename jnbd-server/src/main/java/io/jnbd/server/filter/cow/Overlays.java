package io.jnbd.server.filter.cow;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

/** The overlays a {@code cow-dir} holds, as {@code jnbd overlay list} and {@code discard} see them. */
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
}
