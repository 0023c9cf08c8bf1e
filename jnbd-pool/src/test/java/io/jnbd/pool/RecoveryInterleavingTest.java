package io.jnbd.pool;

import static io.jnbd.pool.PoolFaultTest.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.pool.memserver.MemServer;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The recovery copier against the foreground write path, at the points where they meet, each forced by a hook
 * in the copier rather than left to chance.
 */
@Timeout(120)
class RecoveryInterleavingTest {
    static final int EXTENT = 64 << 10;

    /**
     * One extent on two servers. Nothing here waits on the server timeout (a killed server's connections are
     * reset at once); it is long so that a slow, busy machine is not taken for a hung server.
     */
    static PoolConfig config(TestCluster c) throws Exception {
        return PoolFaultTest.config(c, EXTENT, 2).withExtentSize(EXTENT).withServerTimeout(Duration.ofSeconds(10));
    }

    /**
     * A write that the new copy's server refuses while the copy is being made demotes the copy; if the copier
     * then declared it in sync, a replica that missed an acknowledged write would be read from.
     */
    @Test
    void aCopyDemotedRightBeforeItWouldGoInSyncIsNeverRead() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume v = PoolVolume.open(config(c))) {
            byte[] before = pattern(1, EXTENT), acknowledged = pattern(2, EXTENT);
            v.write(0, ByteBuffer.wrap(before)).get(10, TimeUnit.SECONDS);
            MemServerLink b = v.links().get(1);
            AtomicReference<Replica> demoted = new AtomicReference<>();
            List<NbdClient> fences = new CopyOnWriteArrayList<>();
            List<Throwable> hookErrors = new CopyOnWriteArrayList<>();
            v.recovery().beforeInSync = () -> {
                if (demoted.get() != null) return; // the copy made after this one goes its way
                try {
                    Replica copy = null;
                    for (Replica r : v.extent(0).replicas()) if (r.link == b && r.state() == Replica.State.SYNCING) copy = r;
                    assertThat(copy).as("the copy being made on server 1").isNotNull();
                    demoted.set(copy);
                    // A connection in this client's next session number: server 1 now refuses the current
                    // session's writes, so the write below is acknowledged by server 0 alone.
                    String next = v.space().withSession(copy.generation + 1).exportName();
                    fences.add(NbdClient.connect(NbdUri.parse("nbd://" + c.addresses().get(1) + "/" + next),
                        ClientOptions.defaults()));
                    v.write(0, ByteBuffer.wrap(acknowledged)).get(30, TimeUnit.SECONDS);
                    assertThat(copy.state()).as("the copy after the write it refused").isEqualTo(Replica.State.STALE);
                } catch (Throwable t) {
                    hookErrors.add(t);
                }
            };
            try {
                c.kill(1);
                c.restart(1); // empty: extent 0 is copied onto it anew, and the hook runs as that copy ends
                await(() -> demoted.get() != null && v.status().belowReplicas() == 0 && v.status().recovery().queued() == 0);
                assertThat(hookErrors).isEmpty();
                assertThat(demoted.get().readable()).as("%s, which missed an acknowledged write", demoted.get()).isFalse();
                // Server 0 is the only one that surely has the write: without it, every read must still return it.
                c.kill(0);
                ByteBuffer got = ByteBuffer.allocate(EXTENT);
                v.read(0, got).get(30, TimeUnit.SECONDS);
                assertThat(Arrays.equals(got.array(), acknowledged))
                    .as("extent 0 read from server 1 alone is the acknowledged write (it is what was there before: %s)",
                        Arrays.equals(got.array(), before)).isTrue();
            } finally {
                for (NbdClient f : fences) f.close();
            }
        }
    }

    /**
     * The copier waits out its rate limit with the chunk's range of the extent's gate let go: a write to that
     * chunk goes on meanwhile rather than waiting for the rate limit too. The limit here is a byte a second, and
     * the copier's wait is held by the test until the write is done.
     */
    @Test
    void aWriteToTheChunkBeingCopiedDoesNotWaitOutTheRateLimit() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume v = PoolVolume.open(config(c).withRecoveryRate(1))) {
            v.write(0, ByteBuffer.wrap(pattern(3, EXTENT))).get(10, TimeUnit.SECONDS);
            CountDownLatch waiting = new CountDownLatch(1), resume = new CountDownLatch(1);
            v.recovery().sleeper = nanos -> {
                waiting.countDown();
                resume.await();
            };
            try {
                c.kill(1);
                c.restart(1); // empty: extent 0 is copied onto it anew, and the copier's first chunk waits
                assertThat(waiting.await(60, TimeUnit.SECONDS)).as("the copier reached its rate-limit wait").isTrue();
                assertThat(v.extent(0).gate.size()).as("ranges of extent 0 held while the copier waits").isZero();
                byte[] acknowledged = pattern(4, EXTENT);
                v.write(0, ByteBuffer.wrap(acknowledged)).get(30, TimeUnit.SECONDS);
                assertThat(resume.getCount()).as("the copier is still waiting").isOne();
                resume.countDown();
                await(() -> v.status().belowReplicas() == 0 && v.status().recovery().queued() == 0);
                // The copier looked at the chunk afresh after its wait: the new copy has the write too.
                c.kill(0);
                ByteBuffer got = ByteBuffer.allocate(EXTENT);
                v.read(0, got).get(30, TimeUnit.SECONDS);
                assertThat(Arrays.equals(got.array(), acknowledged)).as("extent 0 read from the new copy alone").isTrue();
            } finally {
                resume.countDown();
            }
        }
    }

    static void await(BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!condition.getAsBoolean() && System.nanoTime() < deadline) Thread.sleep(20);
        assertThat(condition.getAsBoolean()).as("reached within a minute").isTrue();
    }
}
