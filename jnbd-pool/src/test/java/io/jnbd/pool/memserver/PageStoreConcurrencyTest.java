package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Threads writing, reading and discarding, each in a space of its own and all in one shared space, while
 * scratch spaces are written and dropped beside them; RAM holds an eighth of what they touch, so pages move
 * between the tiers all the time. At the end every private space equals its thread's model, the shared
 * space holds only whole chunks at the right offsets, and dropping everything gives back every frame,
 * slot and count.
 */
class PageStoreConcurrencyTest {
    private static final int THREADS = 6;
    private static final int OPS = 2500;
    private static final int EXTENT = 8 * PAGE;
    private static final int CHUNK = 4096;
    private static final int RAM_PAGES = 12, SPILL_PAGES = 84;
    private static final int SHARED = PageStore.space(2, 0);

    @TempDir
    Path dir;

    private static int own(int thread) {
        return PageStore.space(1, thread);
    }

    private static int scratchClient(int thread) {
        return 10 + thread;
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void threadsOnPrivateSharedAndDroppedSpacesKeepEveryByteAndLeakNothing() throws Exception {
        try (PageStore store = new PageStore((long) RAM_PAGES * PAGE, dir, (long) SPILL_PAGES * PAGE, 0)) {
            byte[][] models = new byte[THREADS][EXTENT];
            ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
            CountDownLatch start = new CountDownLatch(1);
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                int thread = t;
                threads.add(Thread.ofPlatform().name("worker-" + t).start(() -> {
                    try {
                        start.await();
                        work(store, thread, models[thread], new Random(1000 + thread));
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                }));
            }
            start.countDown();
            for (Thread thread : threads) thread.join();
            assertThat(failures).as("exceptions in workers").isEmpty();

            for (int t = 0; t < THREADS; t++) {
                assertThat(TestData.read(store, own(t), 0, EXTENT)).as("space of worker %d", t).isEqualTo(models[t]);
            }
            checkChunks(TestData.read(store, SHARED, 0, EXTENT), 0);

            long used = 0;
            for (int client = 0; client < 1 << 16; client++) used += store.usedBytes(client);
            assertThat(store.ramUsedBytes() + store.spillUsedBytes()).isEqualTo(used);
            assertThat(store.spaces().values().stream().mapToLong(Long::longValue).sum()).isEqualTo(used);

            for (int client : List.of(1, 2)) store.dropClient(client);
            for (int t = 0; t < THREADS; t++) store.dropClient(scratchClient(t));
            assertThat(store.spaces()).isEmpty();
            assertThat(store.ramUsedBytes()).isZero();
            assertThat(store.spillUsedBytes()).isZero();
            assertThat(store.freeBytes()).isEqualTo((long) (RAM_PAGES + SPILL_PAGES) * PAGE);
            // Every frame and slot is back on a free list: the store can fill up again.
            for (int i = 0; i < RAM_PAGES + SPILL_PAGES; i++) TestData.write(store, SHARED, (long) i * PAGE, new byte[PAGE]);
            assertThat(store.freeBytes()).isZero();
        }
    }

    private static void work(PageStore store, int thread, byte[] model, Random random) throws IOException {
        int space = own(thread);
        for (int op = 0; op < OPS; op++) {
            int dice = random.nextInt(100);
            if (dice < 22) {
                int offset = random.nextInt(EXTENT), length = random.nextInt(Math.min(2 * PAGE, EXTENT - offset) + 1);
                byte[] data = TestData.bytes(random.nextLong(), length);
                TestData.write(store, space, offset, data);
                System.arraycopy(data, 0, model, offset, length);
            } else if (dice < 44) {
                int offset = random.nextInt(EXTENT), length = random.nextInt(Math.min(2 * PAGE, EXTENT - offset) + 1);
                byte[] got = TestData.read(store, space, offset, length);
                if (!Arrays.equals(got, 0, length, model, offset, offset + length)) {
                    throw new AssertionError("worker " + thread + " read " + offset + "+" + length + " wrong at op " + op);
                }
            } else if (dice < 50) {
                int offset = random.nextInt(EXTENT), length = random.nextInt(EXTENT - offset + 1);
                store.discard(space, offset, length);
                Arrays.fill(model, offset, offset + length, (byte) 0);
            } else if (dice < 65) {
                int chunks = 1 + random.nextInt(24), first = random.nextInt(EXTENT / CHUNK - chunks + 1);
                ByteBuffer src = ByteBuffer.allocateDirect(chunks * CHUNK);
                for (int c = 0; c < chunks; c++) src.put(chunk((long) (first + c) * CHUNK, thread, op));
                store.write(SHARED, (long) first * CHUNK, src.flip());
            } else if (dice < 85) {
                int chunks = 1 + random.nextInt(32), first = random.nextInt(EXTENT / CHUNK - chunks + 1);
                checkChunks(TestData.read(store, SHARED, (long) first * CHUNK, chunks * CHUNK), (long) first * CHUNK);
            } else if (dice < 88) {
                int chunks = 1 + random.nextInt(40), first = random.nextInt(EXTENT / CHUNK - chunks + 1);
                store.discard(SHARED, (long) first * CHUNK, (long) chunks * CHUNK);
            } else if (dice < 89) {
                store.dropSpace(SHARED);
            } else {
                int scratch = PageStore.space(scratchClient(thread), random.nextInt(2));
                TestData.write(store, scratch, random.nextInt(PAGE), TestData.bytes(op, PAGE));
                if (random.nextInt(4) == 0) store.dropClient(scratchClient(thread));
                else if (random.nextBoolean()) store.dropSpace(scratch);
            }
        }
    }

    /**
     * A chunk of the shared space: its own offset, its writer and the writer's step, then bytes that follow
     * from those. A chunk whose bytes do not follow from its header, or whose offset is not where it was
     * read, is torn or belongs elsewhere; one that is all zeroes was never written or was discarded.
     */
    private static byte[] chunk(long offset, int writer, int step) {
        ByteBuffer b = ByteBuffer.allocate(CHUNK).putLong(offset).putInt(writer).putInt(step);
        long seed = offset * 31 + writer * 1_000_003L + step;
        for (int i = 16; i < CHUNK; i++) b.put((byte) (seed * (i + 7) >>> 13));
        return b.array();
    }

    private static void checkChunks(byte[] bytes, long offset) {
        for (int at = 0; at < bytes.length; at += CHUNK) {
            byte[] got = Arrays.copyOfRange(bytes, at, at + CHUNK);
            if (Arrays.equals(got, new byte[CHUNK])) continue;
            ByteBuffer header = ByteBuffer.wrap(got);
            long claimed = header.getLong();
            int writer = header.getInt(), step = header.getInt();
            if (claimed != offset + at || !Arrays.equals(got, chunk(claimed, writer, step))) {
                throw new AssertionError("chunk at " + (offset + at) + " is torn or from " + claimed);
            }
        }
    }

}
