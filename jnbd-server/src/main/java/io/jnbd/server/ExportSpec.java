package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FileBackend;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.ReadOnlyFilter;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Locale;

/**
 * One export as the user writes it: {@code NAME=file:PATH[,option...]} or {@code NAME=memory:SIZE[,option...]}.
 * Options: {@code size=SIZE}, {@code readonly}, {@code mode=cached|direct}, {@code description=TEXT},
 * {@code split=SIZE}, {@code chunk=SIZE}, {@code streams=N}, {@code scheduler=none|sorted}. A description runs to the end of the spec, so it may contain commas.
 */
public record ExportSpec(String name, String kind, String target, long size, boolean readOnly,
                         FileBackend.Mode mode, String description, ExportTuning tuning) {

    /** Parses {@code NAME=SPEC}; the message of the exception is meant for the user as it is. */
    public static ExportSpec parse(String text) {
        int eq = text.indexOf('=');
        int colon = text.indexOf(':');
        if (eq <= 0 || (colon >= 0 && colon < eq)) {
            throw new IllegalArgumentException("export '" + text + "' is not NAME=file:PATH or NAME=memory:SIZE");
        }
        return parse(text.substring(0, eq), text.substring(eq + 1));
    }

    public static ExportSpec parse(String name, String spec) {
        if (name.isEmpty() || name.getBytes(java.nio.charset.StandardCharsets.UTF_8).length > 4096) {
            throw new IllegalArgumentException("export name must be 1 to 4096 bytes");
        }
        String where = "export '" + name + "': ";
        int colon = spec.indexOf(':');
        if (colon <= 0) throw new IllegalArgumentException(where + "'" + spec + "' does not start with file: or memory:");
        String kind = spec.substring(0, colon).toLowerCase(Locale.ROOT);
        String rest = spec.substring(colon + 1);
        String description = "";
        int d = rest.indexOf(",description=");
        if (d >= 0) {
            description = rest.substring(d + ",description=".length());
            rest = rest.substring(0, d);
        }
        String[] parts = rest.split(",", -1);
        String target = parts[0];
        long size = -1;
        boolean readOnly = false;
        FileBackend.Mode mode = FileBackend.Mode.CACHED;
        int split = ExportTuning.DEFAULT.splitThreshold(), chunk = ExportTuning.DEFAULT.chunkSize();
        int streams = -1; // by backend, below
        BatchScheduler.Policy scheduler = ExportTuning.DEFAULT.scheduler();
        for (int i = 1; i < parts.length; i++) {
            String opt = parts[i];
            int e = opt.indexOf('=');
            String key = e < 0 ? opt : opt.substring(0, e);
            String value = e < 0 ? null : opt.substring(e + 1);
            switch (key) {
                case "size" -> size = size(where, require(where, key, value));
                case "readonly", "ro" -> readOnly = value == null || Boolean.parseBoolean(value);
                case "mode" -> mode = switch (require(where, key, value)) {
                    case "cached" -> FileBackend.Mode.CACHED;
                    case "direct" -> FileBackend.Mode.DIRECT;
                    default -> throw new IllegalArgumentException(where + "mode must be cached or direct, not '" + value + "'");
                };
                case "split" -> split = intSize(where, key, require(where, key, value));
                case "chunk" -> chunk = intSize(where, key, require(where, key, value));
                case "streams" -> streams = intSize(where, key, require(where, key, value));
                case "scheduler" -> scheduler = switch (require(where, key, value)) {
                    case "none" -> BatchScheduler.Policy.NONE;
                    case "sorted" -> BatchScheduler.Policy.SORTED;
                    default -> throw new IllegalArgumentException(where + "scheduler must be none or sorted, not '" + value + "'");
                };
                default -> throw new IllegalArgumentException(where + "unknown option '" + key + "'");
            }
        }
        switch (kind) {
            case "file" -> {
                if (target.isEmpty()) throw new IllegalArgumentException(where + "file: needs a path");
            }
            case "memory" -> {
                if (size >= 0) throw new IllegalArgumentException(where + "give a memory export's size as memory:SIZE");
                size = size(where, target.isEmpty() ? null : target);
                if (mode == FileBackend.Mode.DIRECT) throw new IllegalArgumentException(where + "mode=direct applies to files only");
            }
            default -> throw new IllegalArgumentException(where + "unknown backend '" + kind + "' (use file: or memory:)");
        }
        if (size == 0 && kind.equals("memory")) throw new IllegalArgumentException(where + "size must be positive");
        ExportTuning tuning;
        try {
            if (streams < 0) streams = ExportTuning.defaultsFor(kind.equals("memory")).streams();
            tuning = new ExportTuning(split, chunk, streams, scheduler);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(where + e.getMessage());
        }
        return new ExportSpec(name, kind, target, size, readOnly, mode, description, tuning);
    }

    private static int intSize(String where, String key, String value) {
        long v = size(where, value);
        if (v > Integer.MAX_VALUE) throw new IllegalArgumentException(where + key + "=" + value + " is too large");
        return (int) v;
    }

    private static String require(String where, String key, String value) {
        if (value == null || value.isEmpty()) throw new IllegalArgumentException(where + key + "= needs a value");
        return value;
    }

    /** {@link #parseSize}, with the export named in the message, so that a user with many exports knows which. */
    private static long size(String where, String value) {
        try {
            return parseSize(value);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(where + e.getMessage());
        }
    }

    /** Parses sizes like {@code 4096}, {@code 64K}, {@code 1G}, {@code 2T} (binary multiples). */
    public static long parseSize(String s) {
        if (s == null || s.isEmpty()) throw new IllegalArgumentException("missing size");
        String t = s.trim().toUpperCase(Locale.ROOT);
        if (t.endsWith("IB")) t = t.substring(0, t.length() - 2);
        else if (t.endsWith("B") && t.length() > 1 && !Character.isDigit(t.charAt(t.length() - 2))) t = t.substring(0, t.length() - 1);
        if (t.isEmpty()) throw new IllegalArgumentException("'" + s + "' is not a size (examples: 4096, 64M, 1G)");
        int shift = 0;
        char last = t.charAt(t.length() - 1);
        switch (last) {
            case 'K' -> shift = 10;
            case 'M' -> shift = 20;
            case 'G' -> shift = 30;
            case 'T' -> shift = 40;
            case 'P' -> shift = 50;
            default -> { }
        }
        if (shift != 0) t = t.substring(0, t.length() - 1);
        try {
            long v = Long.parseLong(t);
            if (v < 0 || (shift > 0 && v > (Long.MAX_VALUE >> shift))) throw new NumberFormatException();
            return v << shift;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("'" + s + "' is not a size (examples: 4096, 64M, 1G)");
        }
    }

    /** Opens the export this spec names. */
    public Export openExport() throws IOException {
        return new Export(name, description, open(), tuning);
    }

    /** Opens the backend this spec names, with its filters in front. */
    public Backend open() throws IOException {
        Backend b = switch (kind) {
            case "file" -> new FileBackend(Path.of(target), mode, readOnly, size);
            case "memory" -> new MemoryBackend(size);
            default -> throw new IllegalStateException(kind);
        };
        return readOnly ? new ReadOnlyFilter(b) : b;
    }
}
