package io.jnbd.server.filter.cow;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NamedViews;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cow filter against a byte array: random reads, writes, trims and zeroes at any byte offset and length, from one
 * connection and from several connections of one client at once (each owning interleaved runs of bytes, so that they
 * share blocks and race on copying them up), then a close and a reopen. Whatever happened, every byte reads as the
 * model says, block status never calls data that is not zero a zero, and the base file is unchanged.
 */
@Timeout(120)
class CowModelPropertyTest {
    /** Not a whole number of blocks: the last block is short. */
    static final int SIZE = (1 << 20) + 12345, BLOCK = 4096;

    @TempDir
    Path dir;
    Path base;
    byte[] model;
    byte[] baseSum;

    @BeforeEach
    void makeBase() throws Exception {
        base = dir.resolve("base.img");
        byte[] b = new byte[SIZE];
        new Random(7).nextBytes(b);
        Files.write(base, b);
        model = b.clone();
        baseSum = MessageDigest.getInstance("SHA-256").digest(b);
    }

    private Backend open() throws Exception {
        return ExportSpec.parse("m", "file:" + base + ",filter=cow,cow-overlay=client,cow-block-size=4K,cow-dir=" + dir.resolve("cow")).open();
    }

    private static Backend connection(Backend chain, String client, int n) {
        assertThat(((NamedViews) chain).refusal(client, List.of())).isNull();
        return chain.forConnection(new ConnectionContext(client, List.of(), "test " + n));
    }

    @Test
    void oneConnectionMatchesTheModelThroughACloseAndReopen() throws Exception {
        Backend chain = open();
        Backend c = connection(chain, "pc", 0);
        Random r = new Random(11);
        for (int i = 0; i < 3000; i++) step(c, r, 0, SIZE, i);
        assertThat(c.has(Backend.Trait.CACHED_READS)).as("a cow over a cached file keeps the quick read").isTrue();
        // Everything was just written, so the page cache holds it, wherever the file system answers RWF_NOWAIT at all.
        ByteBuffer probe = ByteBuffer.allocateDirect(4096);
        try (var raw = ExportSpec.parse("raw", "file:" + base).open()) {
            if (raw.readIfCached(0, probe)) assertThat(quickHits).as("reads answered the quick way").isGreaterThan(100);
        }
        c.connectionClosed();
        chain.close(); // flushes
        assertWhole(reopenView());
        assertThat(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(base))).as("base checksum").isEqualTo(baseSum);
    }

    private Backend reopened;
    private volatile int quickHits;

    private Backend reopenView() throws Exception {
        reopened = open();
        return connection(reopened, "pc", 99);
    }

    @Test
    void concurrentConnectionsOfOneClientMatchTheModel() throws Exception {
        Backend chain = open();
        int threads = 4, unit = 1000;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int id = t;
                Backend c = connection(chain, "pc", t);
                done.add(pool.submit(() -> {
                    Random r = new Random(100 + id);
                    for (int i = 0; i < 1500; i++) {
                        // A run of bytes only this thread changes: unit k belongs to thread k % threads.
                        int k = r.nextInt(SIZE / unit / threads) * threads + id;
                        int from = k * unit + r.nextInt(unit), to = from + 1 + r.nextInt(k * unit + unit - from);
                        step(c, r, from, Math.min(to, SIZE), i);
                    }
                    c.connectionClosed();
                    return null;
                }));
            }
            for (Future<?> f : done) f.get();
        } finally {
            pool.shutdownNow();
        }
        Backend other = connection(chain, "pc", 9);
        assertWhole(other);
        chain.flush();
        chain.close();
        assertWhole(reopenView());
        assertThat(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(base))).isEqualTo(baseSum);
    }

    /** One random operation within [from, to). */
    private void step(Backend c, Random r, int from, int to, int i) throws Exception {
        int offset = from + r.nextInt(to - from);
        int max = Math.min(to - offset, 3 * BLOCK + 100);
        int length = 1 + r.nextInt(max);
        switch (r.nextInt(10)) {
            case 0, 1, 2, 3 -> {
                byte[] data = new byte[length];
                r.nextBytes(data);
                ByteBuffer src = ByteBuffer.allocateDirect(length).put(data).flip();
                c.write(offset, src, r.nextInt(20) == 0);
                System.arraycopy(data, 0, model, offset, length);
            }
            case 4 -> {
                c.zero(offset, length, r.nextBoolean(), false, false);
                Arrays.fill(model, offset, offset + length, (byte) 0);
            }
            case 5 -> {
                c.trim(offset, length, false);
                Arrays.fill(model, offset, offset + length, (byte) 0);
            }
            case 6 -> {
                if (from == 0 && to == SIZE) { // block status spans other threads' bytes: only single-threaded
                    long at = offset;
                    for (Extent e : c.extents(offset, length)) {
                        if (e.zero()) {
                            for (long b = at; b < at + e.length(); b++) {
                                assertThat(model[(int) b]).as("byte %d in an extent said to read as zero, step %d", b, i).isZero();
                            }
                        }
                        at += e.length();
                    }
                    assertThat(at).as("extents cover something").isGreaterThan(offset);
                }
            }
            case 7 -> c.flush();
            default -> {
                ByteBuffer dst = ByteBuffer.allocateDirect(length);
                c.read(offset, dst);
                byte[] got = new byte[length];
                dst.flip().get(got);
                assertThat(got).as("read of %d bytes at %d, step %d", length, offset, i)
                    .isEqualTo(Arrays.copyOfRange(model, offset, offset + length));
                // The quick way a connection's thread takes must read the same bytes, or decline with nothing moved.
                ByteBuffer quick = ByteBuffer.allocateDirect(length);
                if (c.readIfCached(offset, quick)) {
                    quickHits++;
                    assertThat(quick.position()).isEqualTo(length);
                    quick.flip().get(got);
                    assertThat(got).as("cached read of %d bytes at %d, step %d", length, offset, i)
                        .isEqualTo(Arrays.copyOfRange(model, offset, offset + length));
                } else {
                    assertThat(quick.position()).isZero();
                }
            }
        }
    }

    private void assertWhole(Backend c) throws Exception {
        try {
            ByteBuffer all = ByteBuffer.allocateDirect(SIZE);
            c.read(0, all);
            byte[] got = new byte[SIZE];
            all.flip().get(got);
            for (int b = 0; b < SIZE; b += BLOCK) {
                int end = Math.min(SIZE, b + BLOCK);
                assertThat(Arrays.copyOfRange(got, b, end)).as("block at %d", b).isEqualTo(Arrays.copyOfRange(model, b, end));
            }
        } finally {
            if (reopened != null && c != null) {
                c.connectionClosed();
                reopened.close();
                reopened = null;
            }
        }
    }
}
