package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;

/**
 * A stack of filters that change nothing (delays of zero, errors at rate 0, a rate no disk reaches) is the backend
 * behind it: for random sequences of writes, zeroes, trims and reads it gives the bytes of a byte array kept beside it,
 * and the same answers as a memory backend without filters.
 */
class PassThroughPropertyTest {
    private static final int SIZE = 256 * 1024;

    record Op(int kind, int offset, int length, long seed) {}

    @Provide
    Arbitrary<List<Op>> ops() {
        Arbitrary<Op> op = Combinators.combine(Arbitraries.integers().between(0, 4), Arbitraries.integers().between(0, SIZE - 1),
            Arbitraries.integers().between(1, 64 * 1024), Arbitraries.longs())
            .as((kind, offset, length, seed) -> new Op(kind, offset, Math.min(length, SIZE - offset), seed));
        return op.list().ofMinSize(1).ofMaxSize(40);
    }

    @Property(tries = 60)
    void aStackThatChangesNothingBehavesAsTheBackendAlone(@ForAll("ops") List<Op> ops) throws IOException {
        Backend stack = ExportSpec.parse("m", "memory:256K,filter=delay,rdelay=0,wdelay=0s,delay-zero=0ms,delay-flush=0,"
            + "filter=error,error=ENOSPC,error-rate=0%,error-seed=1,filter=rate,rate=7E,connection-rate=7E").open();
        Backend alone = new MemoryBackend(SIZE);
        byte[] model = new byte[SIZE];
        try (stack; alone) {
            assertThat(stack.size()).isEqualTo(alone.size());
            assertThat(stack.capabilities()).isEqualTo(alone.capabilities());
            for (Op op : ops) {
                switch (op.kind()) {
                    case 0 -> {
                        byte[] data = new byte[op.length()];
                        new java.util.Random(op.seed()).nextBytes(data);
                        stack.write(op.offset(), ByteBuffer.wrap(data), false);
                        alone.write(op.offset(), ByteBuffer.wrap(data), false);
                        System.arraycopy(data, 0, model, op.offset(), data.length);
                    }
                    case 1 -> {
                        stack.zero(op.offset(), op.length(), op.seed() % 2 == 0, false, false);
                        alone.zero(op.offset(), op.length(), op.seed() % 2 == 0, false, false);
                        Arrays.fill(model, op.offset(), op.offset() + op.length(), (byte) 0);
                    }
                    case 2 -> {
                        // Trimmed bytes may read as anything: the model takes what the backend alone reads.
                        stack.trim(op.offset(), op.length(), false);
                        alone.trim(op.offset(), op.length(), false);
                        byte[] now = read(alone, op.offset(), op.length());
                        System.arraycopy(now, 0, model, op.offset(), now.length);
                    }
                    case 3 -> {
                        List<Extent> a = stack.extents(op.offset(), op.length()), b = alone.extents(op.offset(), op.length());
                        assertThat(a).isEqualTo(b);
                    }
                    default -> stack.flush();
                }
                byte[] got = read(stack, op.offset(), op.length());
                assertThat(got).isEqualTo(Arrays.copyOfRange(model, op.offset(), op.offset() + op.length()));
                assertThat(got).isEqualTo(read(alone, op.offset(), op.length()));
            }
            assertThat(read(stack, 0, SIZE)).isEqualTo(model);
        }
    }

    private static byte[] read(Backend b, int offset, int length) throws IOException {
        ByteBuffer dst = ByteBuffer.allocate(length);
        b.read(offset, dst);
        return dst.array();
    }
}
