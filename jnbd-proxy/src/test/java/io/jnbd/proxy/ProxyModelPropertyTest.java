package io.jnbd.proxy;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.NbdClient;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

/**
 * Any sequence of writes and zeroes through an {@code nbd:} export, at any offset and length (the upstream is a
 * memory export, minimum block 1), reads back as a byte array given the same sequence does, through the proxy and
 * straight from the upstream. Reads go out together, many in flight over the proxy's upstream connections.
 */
class ProxyModelPropertyTest {
    private static final int SIZE = 8 << 20;
    private static ProxyExportTest servers;
    private static NbdClient proxy, direct;

    @BeforeContainer
    static void start() throws Exception {
        servers = new ProxyExportTest();
        InetSocketAddress up = servers.serve("m=memory:8M");
        InetSocketAddress p = servers.serve("p=nbd:" + ProxyExportTest.uri(up, "m") + ",connections=3");
        proxy = ProxyExportTest.client(p, "p");
        direct = ProxyExportTest.client(up, "m");
    }

    @AfterContainer
    static void stop() {
        proxy.close();
        direct.close();
        servers.stop();
    }

    record Op(boolean zero, boolean mayTrim, int offset, int length, long seed) {}

    @Provide
    Arbitrary<List<Op>> ops() {
        Arbitrary<Integer> offsets = Arbitraries.integers().between(0, SIZE - 1);
        Arbitrary<Integer> lengths = Arbitraries.oneOf(Arbitraries.integers().between(1, 70_000),
            Arbitraries.integers().between(1, 5 << 20));
        Arbitrary<Op> op = Combinators.combine(Arbitraries.integers().between(0, 3), Arbitraries.of(true, false),
                offsets, lengths, Arbitraries.longs())
            .as((kind, mayTrim, offset, length, seed) -> new Op(kind == 0, mayTrim, offset, Math.min(length, SIZE - offset), seed));
        return op.list().ofMinSize(1).ofMaxSize(12);
    }

    @Property(tries = 40)
    void readsBackWhatTheModelHolds(@ForAll("ops") List<Op> ops) throws Exception {
        byte[] model = new byte[SIZE];
        proxy.blocking().writeZeroes(0, SIZE, false, false, false);
        for (Op op : ops) {
            if (op.zero()) {
                proxy.blocking().writeZeroes(op.offset(), op.length(), !op.mayTrim(), false, false);
                Arrays.fill(model, op.offset(), op.offset() + op.length(), (byte) 0);
            } else {
                byte[] data = ProxyExportTest.pattern(op.seed(), op.length());
                proxy.blocking().write(op.offset(), ByteBuffer.wrap(data), op.seed() % 3 == 0);
                System.arraycopy(data, 0, model, op.offset(), op.length());
            }
        }
        proxy.blocking().flush();

        // The whole export in 1 MiB reads at an odd offset, all in flight together.
        int piece = 1 << 20, start = 4097;
        List<CompletableFuture<Void>> reads = new ArrayList<>();
        List<ByteBuffer> bufs = new ArrayList<>();
        for (int at = start; at < SIZE; at += piece) {
            ByteBuffer b = ByteBuffer.allocateDirect(Math.min(piece, SIZE - at));
            bufs.add(b);
            reads.add(proxy.read(at, b));
        }
        CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).join();
        for (int i = 0, at = start; at < SIZE; i++, at += piece) {
            byte[] got = new byte[bufs.get(i).flip().remaining()];
            bufs.get(i).get(got);
            assertThat(Arrays.mismatch(got, Arrays.copyOfRange(model, at, at + got.length)))
                .as("first byte that differs from the model, through the proxy from %d", at).isEqualTo(-1);
        }
        assertThat(Arrays.mismatch(ProxyExportTest.read(proxy, 0, start), Arrays.copyOfRange(model, 0, start)))
            .as("first byte that differs from the model, through the proxy from 0").isEqualTo(-1);
        assertThat(Arrays.mismatch(ProxyExportTest.read(direct, 0, SIZE), model))
            .as("first byte that differs from the model, on the upstream").isEqualTo(-1);
    }
}
