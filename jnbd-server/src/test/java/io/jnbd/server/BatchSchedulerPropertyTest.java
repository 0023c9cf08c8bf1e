package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import org.junit.jupiter.api.Test;

/**
 * The sorted scheduler must never change what a batch does: executing its plan gives the same final disk
 * contents and the same read results as executing the batch one request at a time in arrival order.
 */
class BatchSchedulerPropertyTest {
    private static final int DISK = 256 * 1024;

    @Provide
    Arbitrary<List<Request>> batches() {
        Arbitrary<Integer> types = Arbitraries.of(Nbd.CMD_READ, Nbd.CMD_READ, Nbd.CMD_WRITE, Nbd.CMD_WRITE,
            Nbd.CMD_TRIM, Nbd.CMD_WRITE_ZEROES, Nbd.CMD_FLUSH, Nbd.CMD_CACHE);
        // Offsets on a coarse grid make adjacent and overlapping requests common.
        Arbitrary<Integer> blocks = Arbitraries.integers().between(0, 31);
        Arbitrary<Integer> lengths = Arbitraries.integers().between(1, 4);
        Arbitrary<Boolean> fua = Arbitraries.of(true, false);
        Arbitrary<Request> req = Combinators.combine(types, blocks, lengths, fua).as((t, b, l, f) -> {
            long offset = b * 4096L + (t == Nbd.CMD_READ && b % 7 == 0 ? 512 : 0);
            long length = Math.min((long) l * 4096, DISK - offset);
            if (t == Nbd.CMD_FLUSH) { offset = 0; length = 0; }
            return new Request(f && t != Nbd.CMD_READ ? Nbd.CMD_FLAG_FUA : 0, t, 0, offset, length);
        });
        return req.list().ofMinSize(1).ofMaxSize(24).map(list -> {
            List<Request> out = new ArrayList<>();
            for (int i = 0; i < list.size(); i++) {
                Request r = list.get(i);
                out.add(new Request(r.flags(), r.type(), i, r.offset(), r.length())); // cookie = arrival index
            }
            return out;
        });
    }

    @Property(tries = 400, seed = "20261122")
    void sortedPlanMatchesArrivalOrder(@ForAll("batches") List<Request> batch) throws IOException {
        Map<Long, byte[]> expectedReads = new HashMap<>();
        MemoryBackend expected = seeded();
        for (Request r : batch) execute(expected, List.of(r), expectedReads);

        Map<Long, byte[]> actualReads = new HashMap<>();
        MemoryBackend actual = seeded();
        BatchScheduler.Plan plan = new BatchScheduler(BatchScheduler.Policy.SORTED, 8 << 20).plan(batch);
        List<Request> covered = new ArrayList<>();
        for (BatchScheduler.Op op : plan.ops()) {
            assertThat(op.members()).isNotEmpty();
            long pos = op.offset();
            for (Request m : op.members()) {
                assertThat(m.type()).isEqualTo(op.type());
                assertThat(m.offset()).as("members of a merged op are contiguous").isEqualTo(pos);
                pos += m.length();
                covered.add(m);
            }
            assertThat(pos - op.offset()).isEqualTo(op.length());
            execute(actual, op.members(), actualReads);
        }
        assertThat(covered).as("every request is served exactly once").containsExactlyInAnyOrderElementsOf(batch);
        assertThat(contents(actual)).isEqualTo(contents(expected));
        assertThat(actualReads.keySet()).isEqualTo(expectedReads.keySet());
        for (long cookie : expectedReads.keySet()) {
            assertThat(actualReads.get(cookie)).as("read %d", cookie).isEqualTo(expectedReads.get(cookie));
        }
    }

    @Test
    void mergesAdjacentReadsAndWritesOfABatch() {
        List<Request> batch = List.of(
            new Request(0, Nbd.CMD_READ, 1, 8192, 4096),
            new Request(0, Nbd.CMD_READ, 2, 0, 4096),
            new Request(0, Nbd.CMD_READ, 3, 4096, 4096),
            new Request(0, Nbd.CMD_WRITE, 4, 65536, 4096),
            new Request(0, Nbd.CMD_WRITE, 5, 69632, 4096));
        BatchScheduler.Plan plan = new BatchScheduler(BatchScheduler.Policy.SORTED, 8 << 20).plan(batch);
        assertThat(plan.sequential()).isFalse();
        assertThat(plan.ops()).hasSize(2);
        assertThat(plan.ops().get(0).members()).extracting(Request::cookie).containsExactly(2L, 3L, 1L);
        assertThat(plan.ops().get(0).length()).isEqualTo(12288);
        assertThat(plan.ops().get(1).members()).extracting(Request::cookie).containsExactly(4L, 5L);
    }

    @Test
    void overlappingWriteKeepsArrivalOrder() {
        List<Request> batch = List.of(
            new Request(0, Nbd.CMD_WRITE, 1, 4096, 4096),
            new Request(0, Nbd.CMD_READ, 2, 0, 8192));
        BatchScheduler.Plan plan = new BatchScheduler(BatchScheduler.Policy.SORTED, 8 << 20).plan(batch);
        assertThat(plan.sequential()).isTrue();
        assertThat(plan.ops()).extracting(op -> op.members().getFirst().cookie()).containsExactly(1L, 2L);
    }

    @Test
    void noneKeepsArrivalOrderWithoutMerging() {
        List<Request> batch = List.of(new Request(0, Nbd.CMD_READ, 1, 4096, 4096), new Request(0, Nbd.CMD_READ, 2, 0, 4096));
        BatchScheduler.Plan plan = new BatchScheduler(BatchScheduler.Policy.NONE, 8 << 20).plan(batch);
        assertThat(plan.ops()).extracting(op -> op.members().getFirst().cookie()).containsExactly(1L, 2L);
    }

    private static MemoryBackend seeded() throws IOException {
        MemoryBackend b = new MemoryBackend(DISK);
        ByteBuffer init = ByteBuffer.allocateDirect(DISK);
        for (int i = 0; i < DISK; i++) init.put((byte) (i * 31 + 7));
        b.write(0, init.flip(), false);
        return b;
    }

    /** Executes one operation serving {@code members} the way Connection does: one backend call for a merged run. */
    private static void execute(MemoryBackend b, List<Request> members, Map<Long, byte[]> reads) throws IOException {
        Request first = members.getFirst();
        long length = members.stream().mapToLong(Request::length).sum();
        switch (first.type()) {
            case Nbd.CMD_READ -> {
                ByteBuffer buf = ByteBuffer.allocateDirect((int) length);
                b.read(first.offset(), buf);
                for (Request m : members) {
                    byte[] out = new byte[(int) m.length()];
                    buf.get((int) (m.offset() - first.offset()), out);
                    reads.put(m.cookie(), out);
                }
            }
            case Nbd.CMD_WRITE -> {
                ByteBuffer[] bufs = new ByteBuffer[members.size()];
                for (int i = 0; i < bufs.length; i++) bufs[i] = payload(members.get(i));
                b.write(first.offset(), bufs, first.has(Nbd.CMD_FLAG_FUA));
            }
            case Nbd.CMD_TRIM -> b.trim(first.offset(), first.length(), false);
            case Nbd.CMD_WRITE_ZEROES -> b.zero(first.offset(), first.length(), true, false, false);
            case Nbd.CMD_FLUSH -> b.flush();
            case Nbd.CMD_CACHE -> b.cache(first.offset(), first.length());
            default -> throw new IllegalStateException();
        }
    }

    /** A payload unique to the request (by cookie), so misplaced writes show. */
    private static ByteBuffer payload(Request r) {
        ByteBuffer p = ByteBuffer.allocateDirect((int) r.length());
        for (int i = 0; i < r.length(); i++) p.put((byte) (r.cookie() * 13 + i));
        return p.flip();
    }

    private static byte[] contents(MemoryBackend b) {
        ByteBuffer all = ByteBuffer.allocateDirect(DISK);
        b.read(0, all);
        byte[] out = new byte[DISK];
        all.flip().get(out);
        return out;
    }
}
