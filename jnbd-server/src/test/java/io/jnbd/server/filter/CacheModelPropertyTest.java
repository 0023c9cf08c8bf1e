package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.backend.Extent;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;

/**
 * The cache filter against a byte array: random writes (FUA or not), zeroes, trims, reads, flushes, cache requests
 * and block status at random offsets and lengths, most of them covering blocks in part, over an export whose size is
 * not a whole number of blocks, with a cache of eight 4 KiB blocks so that nearly every request evicts. In each mode,
 * with and without cache-on-read: after each call the filter reads what the array holds, the cache stays within its
 * maximum, block status never calls bytes that are not zero a zero; after a flush (but in unsafe mode) and after close
 * the backend holds the array.
 */
class CacheModelPropertyTest {
    private static final int BLOCK = 4096;
    private static final int SIZE = 32 * BLOCK + 1000;
    private static final int MAX_BLOCKS = 8;

    record Op(int kind, int offset, int length, long seed) {}

    @Provide
    Arbitrary<List<Op>> ops() {
        Arbitrary<Op> op = Combinators.combine(Arbitraries.integers().between(0, 9), Arbitraries.integers().between(0, SIZE - 1),
            Arbitraries.integers().between(1, 5 * BLOCK), Arbitraries.longs())
            .as((kind, offset, length, seed) -> new Op(kind, offset, Math.min(length, SIZE - offset), seed));
        return op.list().ofMinSize(1).ofMaxSize(60);
    }

    @Property(tries = 150)
    void theCacheReadsAsTheModelAndWritesItBack(@ForAll("ops") List<Op> ops, @ForAll CacheConfig.Mode mode, @ForAll boolean onRead)
            throws IOException {
        CountingBackend inner = new CountingBackend(SIZE);
        byte[] model = new byte[SIZE];
        CacheConfig config = new CacheConfig(mode, BLOCK, (long) MAX_BLOCKS * BLOCK, 75, 50,
            onRead ? CacheConfig.OnRead.ON : CacheConfig.OnRead.OFF, null);
        try (CacheFilter c = new CacheFilter(inner, config, CacheFilterFactory.tmpdir())) {
            for (Op op : ops) {
                int from = op.offset(), to = op.offset() + op.length();
                boolean flag = (op.seed() & 1) != 0;
                switch (op.kind()) {
                    case 0, 1, 2 -> {
                        byte[] data = new byte[op.length()];
                        new Random(op.seed()).nextBytes(data);
                        c.write(from, ByteBuffer.allocateDirect(data.length).put(data).flip(), op.kind() == 2 && flag);
                        System.arraycopy(data, 0, model, from, data.length);
                    }
                    case 3 -> {
                        c.zero(from, op.length(), flag, false, (op.seed() & 2) != 0);
                        Arrays.fill(model, from, to, (byte) 0);
                    }
                    case 4 -> {
                        // Trimmed bytes may read as anything; what the filter reads now it must go on reading.
                        c.trim(from, op.length(), flag);
                        System.arraycopy(read(c, from, op.length()), 0, model, from, op.length());
                    }
                    case 5 -> {
                        c.flush();
                        if (mode != CacheConfig.Mode.UNSAFE) assertThat(inner.bytes(0, SIZE)).as("the backend after a flush").isEqualTo(model);
                    }
                    case 6 -> c.cache(from, op.length());
                    case 7 -> {
                        long at = from;
                        for (Extent e : c.extents(from, op.length())) {
                            int n = (int) Math.min(e.length(), to - at);
                            if (e.zero()) assertThat(Arrays.copyOfRange(model, (int) at, (int) at + n)).as("a zero extent at %d", at).containsOnly(0);
                            at += n;
                        }
                        assertThat(at).as("block status covers the range").isEqualTo(to);
                    }
                    default -> { }
                }
                assertThat(read(c, from, op.length())).as("%s", op).isEqualTo(Arrays.copyOfRange(model, from, to));
                assertThat(c.residentBlocks()).as("blocks cached after %s", op).isLessThanOrEqualTo(MAX_BLOCKS);
            }
            assertThat(read(c, 0, SIZE)).isEqualTo(model);
        }
        assertThat(inner.bytes(0, SIZE)).as("the backend after close").isEqualTo(model);
        inner.release();
    }

    private static byte[] read(CacheFilter c, int offset, int length) throws IOException {
        ByteBuffer dst = ByteBuffer.allocateDirect(length);
        c.read(offset, dst);
        byte[] out = new byte[length];
        dst.flip().get(out);
        return out;
    }
}
