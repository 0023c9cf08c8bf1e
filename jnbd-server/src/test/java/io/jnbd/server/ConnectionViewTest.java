package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterForTests;
import io.jnbd.server.filter.AsyncMemory;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Backend.forConnection through a real server: each connection gets its own view of the export, every request of
 * that connection reaches the view whatever route it takes (the reader, the workers, split reads and writes, an
 * asynchronous backend's calls), none reaches the export's chain itself, and each view is told once that its
 * connection ended: by DISC, by the client vanishing, by the server stopping.
 */
@Timeout(60)
class ConnectionViewTest {

    /** A filter that hands each connection a counting view of its own, keeping the traits of what is behind it. */
    static final class Viewing extends FilterForTests {
        final List<View> views = new CopyOnWriteArrayList<>();
        final AtomicInteger callsOnTheChain = new AtomicInteger();

        Viewing(Backend inner) {
            super(inner);
        }

        @Override public Set<Trait> traits() { return inner.traits(); }

        @Override
        public Backend forConnection() {
            View v = new View(inner.forConnection());
            views.add(v);
            return v;
        }

        @Override
        public void read(long offset, ByteBuffer dst) throws IOException {
            callsOnTheChain.incrementAndGet();
            super.read(offset, dst);
        }

        @Override
        public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
            callsOnTheChain.incrementAndGet();
            super.write(offset, src, fua);
        }

        @Override
        public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
            callsOnTheChain.incrementAndGet();
            super.write(offset, srcs, fua);
        }

        @Override
        public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
            callsOnTheChain.incrementAndGet();
            return super.readAsync(offset, dst);
        }

        @Override
        public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
            callsOnTheChain.incrementAndGet();
            return super.writeAsync(offset, srcs, fua);
        }
    }

    static final class View extends FilterForTests {
        final AtomicInteger reads = new AtomicInteger(), writes = new AtomicInteger(), closed = new AtomicInteger();

        View(Backend inner) {
            super(inner);
        }

        @Override public Set<Trait> traits() { return inner.traits(); }

        @Override
        public void read(long offset, ByteBuffer dst) throws IOException {
            reads.incrementAndGet();
            super.read(offset, dst);
        }

        @Override
        public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
            reads.incrementAndGet();
            return super.readAsync(offset, dst);
        }

        @Override
        public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
            writes.incrementAndGet();
            super.write(offset, src, fua);
        }

        @Override
        public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
            writes.incrementAndGet();
            super.write(offset, srcs, fua);
        }

        @Override
        public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
            writes.incrementAndGet();
            return super.writeAsync(offset, srcs, fua);
        }

        @Override
        public void connectionClosed() {
            closed.incrementAndGet();
            super.connectionClosed();
        }
    }

    /**
     * memory: requests on the reader; direct: on the workers, 4 MiB reads and (at one request in flight) writes in
     * pieces; async: started on the reader and completed by the backend.
     */
    @ParameterizedTest
    @ValueSource(strings = {"memory", "direct", "async"})
    void eachConnectionHasItsOwnViewOnEveryRouteAndEachViewEndsOnce(String kind, @TempDir Path dir) throws Exception {
        Backend backend = switch (kind) {
            case "memory" -> ExportSpec.parse("m", "memory:16M").open();
            case "direct" -> ExportSpec.parse("d", "file:" + dir.resolve("d.img") + ",size=16M,mode=direct").open();
            default -> new AsyncMemory(16 << 20);
        };
        Viewing chain = new Viewing(backend);
        Set<Backend.Trait> traits = chain.traits();
        byte[] large = ServerFixture.pattern(1, 4 << 20), small = ServerFixture.pattern(2, 4096);
        try (ServerFixture f = new ServerFixture(List.of(new Export("v", "", chain)))) {
            RawClient a = f.open("v", true, false);
            assertThat(a.write(0, large, 0)).isZero();
            RawClient b = f.open("v", true, false);
            assertThat(b.write(8 << 20, small, 0)).isZero();
            assertThat(a.read(0, 4 << 20)).isEqualTo(large);
            assertThat(b.read(8 << 20, 4096)).isEqualTo(small);
            assertThat(b.read(0, 4 << 20)).as("one export behind both views").isEqualTo(large);

            assertThat(chain.views).hasSize(2);
            View va = chain.views.get(0), vb = chain.views.get(1);
            assertThat(va).isNotSameAs(vb);
            assertThat(va.traits()).isEqualTo(traits).isEqualTo(chain.traits());
            assertThat(va.reads.get()).as("a's reads reached a's view").isPositive();
            assertThat(va.writes.get()).as("a's writes reached a's view").isPositive();
            assertThat(vb.reads.get()).isPositive();
            assertThat(vb.writes.get()).isPositive();
            assertThat(chain.callsOnTheChain).as("no request went to the export's chain itself").hasValue(0);
            assertThat(va.closed.get() + vb.closed.get()).isZero();

            a.disconnect();
            await(() -> va.closed.get() == 1);
            assertThat(vb.closed).as("the other connection's view lives on").hasValue(0);

            b.close(); // gone without DISC
            await(() -> vb.closed.get() == 1);

            RawClient c = f.open("v", true, false);
            assertThat(c.read(8 << 20, 4096)).isEqualTo(small);
            assertThat(chain.views).hasSize(3);
            f.server.stop(java.time.Duration.ofSeconds(10));
            assertThat(chain.views.get(2).closed).as("ended by the server stopping").hasValue(1);
            c.close();
            assertThat(chain.views).extracting(v -> v.closed.get()).as("each view ended exactly once").containsOnly(1);
        }
    }

    /** A view on another route than the export's would be skipped by it (sendfile) or wait where nothing may. */
    @Test
    void aViewWhoseTraitsDifferFromTheExportsIsRefusedAndEnded() throws Exception {
        AtomicInteger ended = new AtomicInteger();
        Backend chain = new FilterForTests(ExportSpec.parse("m", "memory:1M").open()) {
            @Override public Set<Trait> traits() { return inner.traits(); }

            @Override
            public Backend forConnection() {
                return new FilterForTests(inner) {
                    @Override public void connectionClosed() { ended.incrementAndGet(); }
                };
            }
        };
        try (ServerFixture f = new ServerFixture(List.of(new Export("v", "", chain)));
             RawClient c = f.open("v", true, false)) {
            c.send(new io.jnbd.protocol.Request(0, Nbd.CMD_READ, 1, 0, 512));
            assertThat(c.closedByPeer()).as("the connection is closed, not served by the wrong route").isTrue();
            await(() -> ended.get() == 1);
        }
        assertThat(ended).hasValue(1);
    }

    private static void await(BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("not reached in 20 s");
            Thread.sleep(5);
        }
    }
}
