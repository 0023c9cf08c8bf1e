package io.jnbd.server.filter;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Fails calls instead of passing them down, at a rate and with an error of each command's own, as nbdkit's error
 * filter does: for testing how clients take errors. A failed call never reaches the inner backend, so a failed
 * write leaves the data as it was.
 */
final class ErrorFilter extends FilterBackend {

    /** How one command fails: with {@code error}, at {@code rate}, and only while {@code file} exists if there is one. */
    record Rule(int error, double rate, Path file) {}

    /**
     * The rules of every command; with {@code ranged}, only calls touching bytes [{@code from}, {@code to}) fail
     * (a flush touches none). {@code random} is seeded for tests, or null for a fresh one per thread.
     */
    record Config(EnumMap<Command, Rule> rules, boolean ranged, long from, long to, Random random) {
        String describe() {
            Map<String, List<String>> byRule = new java.util.LinkedHashMap<>();
            for (var e : rules.entrySet()) {
                Rule r = e.getValue();
                if (r.rate() == 0) continue;
                String text = Nbd.errorName(r.error()) + " " + percent(r.rate()) + (r.file() == null ? "" : " while " + r.file() + " exists");
                byRule.computeIfAbsent(text, k -> new ArrayList<>()).add(e.getKey().errorWord);
            }
            if (byRule.isEmpty()) return "none";
            List<String> parts = new ArrayList<>();
            byRule.forEach((text, commands) -> parts.add(commands.size() == rules.size() ? text : String.join("/", commands) + " " + text));
            String range = !ranged ? "" : ", bytes " + from + "-" + (to == Long.MAX_VALUE ? "" : Long.toString(to - 1));
            return String.join(", ", parts) + range;
        }

        private static String percent(double rate) {
            return java.math.BigDecimal.valueOf(rate).movePointRight(2).stripTrailingZeros().toPlainString() + "%";
        }
    }

    private final Config config;
    private final Set<Trait> traits;

    ErrorFilter(Backend inner, Config config, Set<Trait> traits) {
        super(inner);
        this.config = config;
        this.traits = traits;
    }

    @Override public Set<Trait> traits() { return traits; }

    @Override public String describe() { return "error(" + config.describe() + ") -> " + inner.describe(); }

    /** The error to fail this call with, or null to let it through; decided as nbdkit decides, the dice last. */
    private NbdErrorException failure(Command c, long offset, long length) {
        Rule r = config.rules().get(c);
        if (r.rate() <= 0) return null;
        if (config.ranged() && (c == Command.FLUSH || offset >= config.to() || offset + length <= config.from())) return null;
        if (r.file() != null && !Files.exists(r.file())) return null;
        double dice = config.random() != null ? config.random().nextDouble() : ThreadLocalRandom.current().nextDouble();
        if (dice >= r.rate()) return null;
        return new NbdErrorException(r.error(), "injected by the error filter (" + c.errorWord + ")");
    }

    private void check(Command c, long offset, long length) throws NbdErrorException {
        NbdErrorException e = failure(c, offset, length);
        if (e != null) throw e;
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        check(Command.READ, offset, dst.remaining());
        inner.read(offset, dst);
    }

    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        NbdErrorException e = failure(Command.READ, offset, dst.remaining());
        return e != null ? CompletableFuture.failedFuture(e) : inner.readAsync(offset, dst);
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        check(Command.WRITE, offset, src.remaining());
        inner.write(offset, src, fua);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        check(Command.WRITE, offset, Waits.length(srcs));
        inner.write(offset, srcs, fua);
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        NbdErrorException e = failure(Command.WRITE, offset, Waits.length(srcs));
        return e != null ? CompletableFuture.failedFuture(e) : inner.writeAsync(offset, srcs, fua);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        check(Command.ZERO, offset, length);
        inner.zero(offset, length, mayTrim, fast, fua);
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        check(Command.TRIM, offset, length);
        inner.trim(offset, length, fua);
    }

    @Override
    public void flush() throws IOException {
        check(Command.FLUSH, 0, 0);
        inner.flush();
    }

    @Override
    public void cache(long offset, long length) throws IOException {
        check(Command.CACHE, offset, length);
        inner.cache(offset, length);
    }

    @Override
    public List<Extent> extents(long offset, long length) throws IOException {
        check(Command.EXTENTS, offset, length);
        return inner.extents(offset, length);
    }
}
