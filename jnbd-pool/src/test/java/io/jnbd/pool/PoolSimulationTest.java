package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.protocol.Nbd;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The pool under random faults, in one JVM: four memory servers behind proxies that a seeded fault thread kills,
 * restarts, hangs, slows and cuts, while seeded workers write, read and trim their own regions of a pool with two
 * copies of every extent and check each read against a model. Holds: every read returns the last acknowledged
 * write, unless every replica of its extent was lost, in which case it fails with EIO and never returns other
 * data; a write that fails has lost its extent; and once the faults stop the pool is back to two copies of every
 * extent that was not lost. Even seeds run with the client's page cache and readahead on, so that the same
 * holds through the cache.
 */
@Timeout(300)
class PoolSimulationTest {
    static final int SERVERS = 4, WORKERS = 3;
    static final int EXTENT = 256 << 10;
    static final long REGION = 8L << 20;
    static final Duration LOAD = Duration.ofSeconds(Long.getLong("jnbd.simulation.seconds", 8));

    /** Two fixed seeds; {@code -Djnbd.simulation.seeds=1,2,3} runs others (and {@code jnbd.simulation.seconds} longer). */
    static long[] seeds() {
        String s = System.getProperty("jnbd.simulation.seeds");
        return s == null ? new long[] {17, 4242} : Arrays.stream(s.split(",")).mapToLong(Long::parseLong).toArray();
    }

    /** Bytes of page cache: small, so that evictions and refetches happen often. */
    static long cacheFor(long seed) {
        return seed % 2 == 0 ? 2L << 20 : 0;
    }

    @ParameterizedTest(name = "seed {0}")
    @MethodSource("seeds")
    void readsReturnTheLastAcknowledgedWriteUnderFaultsAndEveryExtentGetsItsCopiesBack(long seed) throws Exception {
        try (TestCluster cluster = new TestCluster(SERVERS, MemServer.Config.ofMemory(96L << 20));
             PoolVolume volume = PoolVolume.open(new PoolConfig(cluster.addresses(), WORKERS * REGION, 2, EXTENT, 0, 0,
                 Duration.ofSeconds(1), 0, 2, cacheFor(seed), cacheFor(seed) / 4))) {
            AtomicBoolean stop = new AtomicBoolean();
            AtomicLong ops = new AtomicLong(), failures = new AtomicLong();
            List<Model> models = new ArrayList<>();
            List<Thread> workers = new ArrayList<>();
            List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
            for (int w = 0; w < WORKERS; w++) {
                Model m = new Model(w * REGION);
                models.add(m);
                Random random = new Random(seed * 31 + w);
                workers.add(Thread.ofPlatform().name("worker-" + w).start(() -> {
                    try {
                        while (!stop.get()) {
                            m.randomOp(volume, random, failures);
                            ops.incrementAndGet();
                        }
                    } catch (Throwable t) {
                        errors.add(t);
                    }
                }));
            }
            Faults faults = new Faults(cluster, new Random(seed));
            Thread injector = Thread.ofPlatform().name("faults").start(() -> faults.run(stop));
            Thread.sleep(LOAD.toMillis());
            stop.set(true);
            for (Thread t : workers) t.join(TimeUnit.MINUTES.toMillis(1));
            injector.join(TimeUnit.MINUTES.toMillis(1));
            assertThat(errors).as("worker errors").isEmpty();
            faults.heal();

            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (volume.status().belowReplicas() > 0 && System.nanoTime() < deadline) Thread.sleep(100);
            PoolStatus st = volume.status();
            System.out.printf("seed %d: %d ops (%d failed on lost extents), faults %s; %d extents written, %d lost, %d restored%n",
                seed, ops.get(), failures.get(), faults.done, st.placed(), st.lost(), st.recovery().extentsRestored());
            assertThat(st.belowReplicas()).as("extents still below two copies").isZero();
            for (Model m : models) m.verifyAll(volume);
        }
    }

    /** One worker's region and what it should hold; {@code unknown}: bytes a failed write may or may not have changed. */
    static final class Model {
        final long start;
        final byte[] bytes = new byte[(int) REGION];
        final BitSet unknown = new BitSet((int) REGION);

        Model(long start) {
            this.start = start;
        }

        void randomOp(PoolVolume v, Random r, AtomicLong failures) throws Exception {
            int len = 1 + r.nextInt(2 * EXTENT);
            int at = r.nextInt((int) REGION - len);
            int op = r.nextInt(10);
            if (op < 5) {
                byte[] data = new byte[len];
                r.nextBytes(data);
                if (await(v.write(start + at, ByteBuffer.wrap(data)), v, at, len)) {
                    System.arraycopy(data, 0, bytes, at, len);
                    unknown.clear(at, at + len);
                } else {
                    failures.incrementAndGet();
                    unknown.set(at, at + len);
                }
            } else if (op < 9) {
                ByteBuffer got = ByteBuffer.allocate(len);
                if (await(v.read(start + at, got), v, at, len)) check(got.array(), at, "read");
                else failures.incrementAndGet();
            } else if (r.nextBoolean()) {
                if (await(v.trim(start + at, len), v, at, len)) {
                    Arrays.fill(bytes, at, at + len, (byte) 0);
                    unknown.clear(at, at + len);
                } else {
                    failures.incrementAndGet();
                    unknown.set(at, at + len);
                }
            } else {
                v.flush().get(30, TimeUnit.SECONDS);
            }
        }

        /** True on success; a failure must be EIO on a lost extent. */
        private boolean await(java.util.concurrent.CompletableFuture<Void> f, PoolVolume v, int at, int len) throws Exception {
            try {
                f.get(30, TimeUnit.SECONDS);
                return true;
            } catch (ExecutionException e) {
                Throwable cause = PoolVolume.unwrap(e.getCause());
                assertThat(cause).as("failure of %d bytes at %d", len, start + at).isInstanceOf(PoolException.class);
                assertThat(((PoolException) cause).error()).isEqualTo(Nbd.EIO);
                assertThat(anyLost(v, at, len)).as("a request failed (%s) although no extent it touches is lost", cause.getMessage()).isTrue();
                return false;
            }
        }

        private boolean anyLost(PoolVolume v, int at, int len) {
            for (long p = start + at; p < start + at + len; p = (p / EXTENT + 1) * EXTENT) {
                io.jnbd.pool.Extent e = v.extent((int) (p / EXTENT));
                if (e != null && e.lost()) return true;
            }
            return false;
        }

        void check(byte[] got, int at, String what) {
            for (int i = 0; i < got.length; i++) {
                if (got[i] != bytes[at + i] && !unknown.get(at + i)) {
                    throw new AssertionError(what + " of " + got.length + " bytes at " + (start + at) + ": byte " + (start + at + i)
                        + " (extent " + (start + at + i) / EXTENT + ") is " + got[i] + ", the last acknowledged write left "
                        + bytes[at + i]);
                }
            }
        }

        void verifyAll(PoolVolume v) throws Exception {
            for (int at = 0; at < REGION; at += EXTENT) {
                ByteBuffer got = ByteBuffer.allocate(EXTENT);
                io.jnbd.pool.Extent e = v.extent((int) ((start + at) / EXTENT));
                try {
                    v.read(start + at, got).get(30, TimeUnit.SECONDS);
                    assertThat(e == null || !e.lost()).as("a lost extent answered a read").isTrue();
                    check(got.array(), at, "final read");
                } catch (ExecutionException x) {
                    assertThat(e != null && e.lost()).as("final read of extent %s failed: %s", (start + at) / EXTENT, x.getCause()).isTrue();
                }
            }
        }
    }

    /** Kills, restarts, hangs, slows and cuts servers at random, never more than two at once. */
    static final class Faults {
        final TestCluster cluster;
        final Random random;
        final boolean[] faulty = new boolean[SERVERS];
        final List<String> done = new ArrayList<>();

        Faults(TestCluster cluster, Random random) {
            this.cluster = cluster;
            this.random = random;
        }

        void run(AtomicBoolean stop) {
            try {
                while (!stop.get()) {
                    Thread.sleep(200 + random.nextInt(600));
                    int i = random.nextInt(SERVERS);
                    int healthyOthers = 0;
                    for (int j = 0; j < SERVERS; j++) if (!faulty[j]) healthyOthers++;
                    if (faulty[i]) {
                        if (cluster.killed(i)) cluster.restart(i);
                        cluster.hang(i, false);
                        cluster.slow(i, Duration.ZERO);
                        faulty[i] = false;
                        done.add("heal" + i);
                        continue;
                    }
                    if (healthyOthers <= SERVERS - 2) continue; // two are faulty already
                    switch (random.nextInt(4)) {
                        case 0 -> { cluster.kill(i); done.add("kill" + i); }
                        case 1 -> { cluster.hang(i, true); done.add("hang" + i); }
                        case 2 -> { cluster.slow(i, Duration.ofMillis(2 + random.nextInt(20))); done.add("slow" + i); }
                        default -> { cluster.cut(i); done.add("cut" + i); continue; }
                    }
                    faulty[i] = true;
                }
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }

        void heal() throws Exception {
            for (int i = 0; i < SERVERS; i++) {
                if (cluster.killed(i)) cluster.restart(i);
                cluster.hang(i, false);
                cluster.slow(i, Duration.ZERO);
            }
        }
    }
}
