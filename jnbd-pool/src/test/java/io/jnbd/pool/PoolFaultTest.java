package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.protocol.Nbd;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The pool's faults, one at a time, as its users meet them: a memory server killed, hung or unreachable under
 * load (no error, a stall of about the server timeout, then every extent back at N copies); every replica of an
 * extent lost (EIO, never zeroes); a full pool (ENOSPC, nothing left behind); a server restarted at the same
 * address (never read as its earlier self).
 */
@Timeout(180)
class PoolFaultTest {
    static final int EXTENT = 256 << 10;

    static PoolConfig config(TestCluster c, long size, int replicas) throws Exception {
        return new PoolConfig(c.addresses(), size, replicas, EXTENT, 0, 0, c.serverTimeout(), 0, 2, 0, 0).withTls(c.clientTls());
    }

    /** The memory servers of each test: in plain text here, over TLS in {@link PoolFaultTlsTest}. */
    TestCluster cluster(int n, MemServer.Config config) throws Exception {
        return new TestCluster(n, config);
    }

    static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    /** Writes and reads back 64 KiB pieces of {@code v} until stopped; records the slowest request and any error. */
    static final class Load {
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicLong slowestNanos = new AtomicLong(), ops = new AtomicLong();
        final List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
        final Thread thread;

        Load(PoolVolume v, long size) {
            thread = Thread.ofPlatform().start(() -> {
                Random r = new Random(1);
                while (!stop.get()) {
                    long at = (long) r.nextInt((int) (size / 65536)) * 65536;
                    byte[] data = pattern(r.nextLong(), 65536);
                    try {
                        timed(v.write(at, ByteBuffer.wrap(data)));
                        ByteBuffer back = ByteBuffer.allocate(65536);
                        timed(v.read(at, back));
                        if (!java.util.Arrays.equals(back.array(), data)) throw new AssertionError("read back other data at " + at);
                        ops.incrementAndGet();
                    } catch (Throwable t) {
                        errors.add(t);
                        return;
                    }
                }
            });
        }

        private void timed(CompletableFuture<Void> f) throws Exception {
            long t = System.nanoTime();
            f.get(60, TimeUnit.SECONDS);
            slowestNanos.accumulateAndGet(System.nanoTime() - t, Math::max);
        }

        void finish() throws InterruptedException {
            stop.set(true);
            thread.join(TimeUnit.SECONDS.toMillis(90));
            assertThat(errors).as("errors the pool's client saw").isEmpty();
            assertThat(ops.get()).isPositive();
        }
    }

    private static void awaitCopies(PoolVolume v) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while ((v.status().belowReplicas() > 0 || v.status().recovery().queued() > 0) && System.nanoTime() < deadline) Thread.sleep(50);
        assertThat(v.status().belowReplicas()).as("extents below their copies").isZero();
        assertThat(v.status().lost()).isZero();
    }

    @Test
    void aServerKilledUnderLoadCostsNoErrorAndEveryExtentGetsItsCopiesBack() throws Exception {
        try (TestCluster c = cluster(3, MemServer.Config.ofMemory(64L << 20)); PoolVolume v = PoolVolume.open(config(c, 16L << 20, 2))) {
            v.write(0, ByteBuffer.wrap(pattern(1, 16 << 20))).join();
            Load load = new Load(v, 16L << 20);
            Thread.sleep(300);
            c.kill(1);
            Thread.sleep(1000);
            load.finish();
            awaitCopies(v);
            assertThat(v.status().servers().get(1).state()).isEqualTo("down");
        }
    }

    @Test
    void aHungServerStallsRequestsForAboutTheServerTimeoutAndIsReplaced() throws Exception {
        try (TestCluster c = cluster(3, MemServer.Config.ofMemory(64L << 20)); PoolVolume v = PoolVolume.open(config(c, 16L << 20, 2))) {
            v.write(0, ByteBuffer.wrap(pattern(2, 16 << 20))).join();
            Load load = new Load(v, 16L << 20);
            Thread.sleep(300);
            c.hang(0, true);
            Duration timeout = c.serverTimeout();
            Thread.sleep(3 * timeout.toMillis());
            load.finish();
            System.out.printf("slowest request beside a hung server: %d ms (server timeout %d ms)%n",
                load.slowestNanos.get() / 1_000_000, timeout.toMillis());
            // A bound that tells a stall from a hang, not a performance figure.
            assertThat(Duration.ofNanos(load.slowestNanos.get())).isLessThan(timeout.multipliedBy(4));
            awaitCopies(v);
            c.hang(0, false);
        }
    }

    @Test
    void anUnreachableServerIsLikeADeadOne() throws Exception {
        try (TestCluster c = cluster(3, MemServer.Config.ofMemory(64L << 20)); PoolVolume v = PoolVolume.open(config(c, 16L << 20, 2))) {
            v.write(0, ByteBuffer.wrap(pattern(3, 16 << 20))).join();
            Load load = new Load(v, 16L << 20);
            c.proxies.get(2).refuse(true);
            c.cut(2);
            Thread.sleep(1500);
            load.finish();
            awaitCopies(v);
        }
    }

    @Test
    void anExtentWithEveryReplicaLostFailsWithEioAndTheRestWorks() throws Exception {
        try (TestCluster c = cluster(2, MemServer.Config.ofMemory(64L << 20)); PoolVolume v = PoolVolume.open(config(c, 8L << 20, 2))) {
            byte[] data = pattern(4, 8 << 20);
            v.write(0, ByteBuffer.wrap(data)).join();
            c.kill(0);
            c.kill(1);
            ExecutionException read = org.assertj.core.api.Assertions.catchThrowableOfType(ExecutionException.class,
                () -> v.read(0, ByteBuffer.allocate(4096)).get(30, TimeUnit.SECONDS));
            assertThat(read).as("a read of an extent with no replica left fails").isNotNull();
            assertThat(read.getCause()).isInstanceOfSatisfying(PoolException.class, e -> {
                assertThat(e.error()).isEqualTo(Nbd.EIO);
                assertThat(e.getMessage()).contains("extent 0 (bytes 0 to " + (EXTENT - 1) + ")");
            });
            assertThatThrownBy(() -> v.write(0, ByteBuffer.wrap(pattern(5, 4096))).get(30, TimeUnit.SECONDS))
                .hasCauseInstanceOf(PoolException.class);
            assertThat(v.status().lost()).isPositive();
            // Restarted servers take new extents; the lost ones stay lost, the never-written ones read as zeroes.
            c.restart(0);
            c.restart(1);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (v.status().servers().stream().anyMatch(s -> s.state().equals("down")) && System.nanoTime() < deadline) Thread.sleep(50);
            assertThatThrownBy(() -> v.read(EXTENT, ByteBuffer.allocate(4096)).get(30, TimeUnit.SECONDS)).hasCauseInstanceOf(PoolException.class);
        }
    }

    @Test
    void aFullPoolAnswersEnospcAndLeavesNothingBehind() throws Exception {
        // Two servers of 1 MiB each, two copies: four extents fit.
        try (TestCluster c = cluster(2, MemServer.Config.ofMemory(1L << 20)); PoolVolume v = PoolVolume.open(config(c, 8L << 20, 2))) {
            v.write(0, ByteBuffer.wrap(pattern(6, 4 * EXTENT))).join();
            assertThatThrownBy(() -> v.write(4L * EXTENT, ByteBuffer.wrap(pattern(7, 4096))).get(30, TimeUnit.SECONDS))
                .cause().isInstanceOfSatisfying(PoolException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ENOSPC));
            assertThat(v.extent(4)).as("the extent the full pool refused is not placed").isNull();
            for (MemServer m : c.servers) assertThat(m.store().ramUsedBytes()).isEqualTo(1L << 20);
            ByteBuffer back = ByteBuffer.allocate(4 * EXTENT);
            v.read(0, back).join();
            assertThat(back.array()).isEqualTo(pattern(6, 4 * EXTENT));
            // Freeing an extent makes room again.
            v.trim(0, EXTENT).join();
            v.write(4L * EXTENT, ByteBuffer.wrap(pattern(7, 4096))).get(30, TimeUnit.SECONDS);
        }
    }

    /**
     * A discard the server answers with an error leaves the copy there. Nothing refers to it any more, and a later
     * placement of the same extent on that server (the same offsets) would read its bytes wherever it has not
     * written yet. The link ends its session instead, as for a lost connection; the next session trims whatever
     * the last one held there before the server is used again.
     */
    @Test
    void aRefusedDiscardEndsTheSessionAndItsCopyIsTrimmedOnReconnect() throws Exception {
        try (TestCluster c = cluster(2, MemServer.Config.ofMemory(64L << 20)); PoolVolume v = PoolVolume.open(config(c, 4L << 20, 2))) {
            v.write(0, ByteBuffer.wrap(pattern(9, EXTENT))).join();
            assertThat(c.servers.get(0).store().ramUsedBytes()).isEqualTo(EXTENT);
            MemServerLink link = v.links().getFirst();
            MemServerLink.Session before = link.session();
            // A connection under this client's next session number: the server now refuses the current
            // session's trims, as it would refuse a discard it could not carry out.
            String next = v.space().withSession(before.generation() + 1).exportName();
            try (io.jnbd.client.NbdClient refuser = io.jnbd.client.NbdClient.connect(
                    io.jnbd.client.NbdUri.parse("nbd://" + c.addresses().getFirst() + "/" + next),
                    io.jnbd.client.ClientOptions.defaults().withTls(c.clientTls()))) {
                v.trim(0, EXTENT).join(); // the extent is retired: both copies are discarded, server 0 refuses
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while ((c.servers.get(0).store().ramUsedBytes() > 0 || link.session() == null) && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                assertThat(c.servers.get(0).store().ramUsedBytes()).as("server 0 after the refused discard").isZero();
                assertThat(link.session()).isNotNull().isNotSameAs(before);
                assertThat(c.servers.get(1).store().ramUsedBytes()).isZero();
            }
            ByteBuffer back = ByteBuffer.allocate(EXTENT);
            v.read(0, back).join();
            assertThat(back.array()).isEqualTo(new byte[EXTENT]);
        }
    }

    @Test
    void aServerRestartedAtTheSameAddressIsNeverReadAsItsEarlierSelf() throws Exception {
        // Recovery throttled to a byte a second: no copy onto the restarted server can finish in this test.
        try (TestCluster c = cluster(2, MemServer.Config.ofMemory(64L << 20));
             PoolVolume v = PoolVolume.open(config(c, 4L << 20, 2).withRecoveryRate(1))) {
            v.write(0, ByteBuffer.wrap(pattern(8, 4 << 20))).join();
            c.kill(0);
            c.restart(0);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!"up".equals(v.status().servers().get(0).state()) && System.nanoTime() < deadline) Thread.sleep(20);
            assertThat(v.status().servers().get(0).state()).isEqualTo("up");
            // The restarted server is empty; were it taken for its earlier self, reads would return its zeroes.
            // With the other server gone too, every read must fail instead.
            c.kill(1);
            for (int i = 0; i < 4 << 20; i += EXTENT) {
                int at = i;
                assertThatThrownBy(() -> v.read(at, ByteBuffer.allocate(4096)).get(30, TimeUnit.SECONDS))
                    .as("extent at %d", at).hasCauseInstanceOf(PoolException.class);
            }
        }
    }
}
