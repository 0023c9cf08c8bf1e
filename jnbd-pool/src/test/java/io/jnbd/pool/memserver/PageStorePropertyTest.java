package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Arrays;
import java.util.Random;
import java.util.TreeMap;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.RandomDistribution;
import net.jqwik.api.Tuple;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

/**
 * Random sequences of writes, reads, discards and drops over a few spaces of two clients, against a model
 * that is a map of byte arrays. The store holds 9 pages where the sequences touch up to 18, so it runs full
 * and meets the quota often; with 3 pages of RAM in front of 6 of spill, nearly every operation evicts or
 * brings a page back. The same sequences on 9 pages of RAM and no spill must give the same answers.
 */
class PageStorePropertyTest {
    private static final int CAPACITY = 9;
    private static final int QUOTA = 6;
    private static final int[] SPACES = {PageStore.space(1, 0), PageStore.space(1, 1), PageStore.space(2, 7)};
    private static final int[] CLIENTS = {1, 2};
    /** Offsets stay within the first pages of a space, so that operations overlap. */
    private static final int EXTENT = 6 * PAGE;
    private static final long SPACE_END = 1L << 44;
    private static Path dir;

    @BeforeContainer
    static void makeDir() throws IOException {
        dir = Files.createTempDirectory("pagestore-property");
    }

    /**
     * Cleanup only: each try checks that its store deleted its spill file. A file can be left here when a
     * property fails and jqwik's shrinking times out, abandoning the try it was running.
     */
    @AfterContainer
    static void removeDir() throws IOException {
        try (var left = Files.list(dir)) {
            for (Path file : left.toList()) Files.delete(file);
        }
        Files.delete(dir);
    }

    sealed interface Op permits Write, Read, Discard, DropSpace, DropClient, HasData {}
    record Write(int space, long offset, int length, long seed, boolean direct) implements Op {}
    record Read(int space, long offset, int length, boolean direct) implements Op {}
    /** Length -1 is to the end of the space. */
    record Discard(int space, long offset, long length) implements Op {
        Discard {
            if (length < 0) length = SPACE_END - offset;
        }
    }
    record DropSpace(int space) implements Op {}
    record DropClient(int client) implements Op {}
    record HasData(int space, long offset, long length) implements Op {
        HasData {
            if (length < 0) length = SPACE_END - offset;
        }
    }

    @Provide
    Arbitrary<List<Op>> sequences() {
        Arbitrary<Integer> space = Arbitraries.of(SPACES[0], SPACES[1], SPACES[2]);
        Arbitrary<Boolean> direct = Arbitraries.of(true, false);
        Arbitrary<Op> write = Combinators.combine(space, offsets(), lengths(), Arbitraries.longs(), direct)
            .as(Write::new);
        Arbitrary<Op> read = Combinators.combine(space, offsets(), lengths(), direct).as(Read::new);
        Arbitrary<Op> discard = Combinators.combine(space, offsets(), spans()).as(Discard::new);
        Arbitrary<Op> hasData = Combinators.combine(space, offsets(), spans()).as(HasData::new);
        Arbitrary<Op> dropSpace = space.map(DropSpace::new);
        Arbitrary<Op> dropClient = Arbitraries.of(CLIENTS[0], CLIENTS[1]).map(DropClient::new);
        return Arbitraries.frequencyOf(
            Tuple.of(10, write), Tuple.of(7, read), Tuple.of(4, discard),
            Tuple.of(2, hasData), Tuple.of(1, dropSpace), Tuple.of(1, dropClient)
        ).list().ofMinSize(1).ofMaxSize(60).withSizeDistribution(RandomDistribution.uniform());
    }

    /** Byte-granular, with page boundaries and the bytes either side of them well represented. */
    private static Arbitrary<Long> offsets() {
        Arbitrary<Long> anywhere = Arbitraries.longs().between(0, EXTENT - 1);
        Arbitrary<Long> nearBoundary = Combinators.combine(Arbitraries.integers().between(0, 5),
            Arbitraries.integers().between(-2, 2)).as((page, delta) -> Math.max(0, (long) page * PAGE + delta));
        return Arbitraries.oneOf(anywhere, nearBoundary);
    }

    /** Lengths, and now and then the rest of the space, which takes the store's scan over all stripes. */
    private static Arbitrary<Long> spans() {
        return Arbitraries.frequencyOf(Tuple.of(9, lengths().map(Integer::longValue)), Tuple.of(1, Arbitraries.just(-1L)));
    }

    private static Arbitrary<Integer> lengths() {
        Arbitrary<Integer> any = Arbitraries.integers().between(0, 3 * PAGE);
        Arbitrary<Integer> nearPages = Combinators.combine(Arbitraries.integers().between(0, 3),
            Arbitraries.integers().between(-1, 1)).as((pages, delta) -> Math.max(0, pages * PAGE + delta));
        Arbitrary<Integer> small = Arbitraries.integers().between(1, 100);
        return Arbitraries.oneOf(any, nearPages, small);
    }

    @Property(tries = 250, seed = "20261123")
    void ramAndSpillBehaveLikeTheModel(@ForAll("sequences") List<Op> ops) throws IOException {
        PageStore store = new PageStore(3L * PAGE, dir, 6L * PAGE, (long) QUOTA * PAGE);
        try (store) {
            run(store, ops);
        }
        assertThat(store.spillPath()).doesNotExist();
    }

    @Property(tries = 100, seed = "20261123")
    void ramOnlyBehavesLikeTheModel(@ForAll("sequences") List<Op> ops) throws IOException {
        try (PageStore store = new PageStore((long) CAPACITY * PAGE, null, 0, (long) QUOTA * PAGE)) {
            run(store, ops);
        }
    }

    private static void run(PageStore store, List<Op> ops) throws IOException {
        Model model = new Model();
        for (int step = 0; step < ops.size(); step++) {
            Op op = ops.get(step);
            String at = "step " + step + ": " + op;
            switch (op) {
                case Write w -> {
                    ByteBuffer src = buffer(w.length(), w.direct());
                    byte[] data = new byte[w.length()];
                    new Random(w.seed()).nextBytes(data);
                    src.put(data).flip();
                    StoreFullException.Limit refusal = model.refusal(w.space(), w.offset(), w.length());
                    if (refusal == null) {
                        store.write(w.space(), w.offset(), src);
                        assertThat(src.hasRemaining()).as(at).isFalse();
                        model.write(w.space(), w.offset(), data);
                    } else {
                        assertThatThrownBy(() -> store.write(w.space(), w.offset(), src)).as(at)
                            .isInstanceOfSatisfying(StoreFullException.class, e -> {
                                assertThat(e.limit()).isEqualTo(refusal);
                                assertThat(e.client()).isEqualTo(PageStore.clientOf(w.space()));
                            });
                    }
                }
                case Read r -> {
                    // Slack either side of the window catches reads that stray out of position..limit.
                    ByteBuffer dst = buffer(r.length() + 6, r.direct());
                    for (int i = 0; i < dst.capacity(); i++) dst.put(i, (byte) 0x5A);
                    dst.position(3).limit(3 + r.length());
                    store.read(r.space(), r.offset(), dst);
                    assertThat(dst.position()).as(at).isEqualTo(3 + r.length());
                    byte[] got = new byte[r.length() + 6];
                    dst.clear().get(got);
                    byte[] want = new byte[r.length() + 6];
                    Arrays.fill(want, (byte) 0x5A);
                    System.arraycopy(model.read(r.space(), r.offset(), r.length()), 0, want, 3, r.length());
                    assertThat(got).as(at).isEqualTo(want);
                }
                case Discard d -> {
                    store.discard(d.space(), d.offset(), d.length());
                    model.discard(d.space(), d.offset(), d.length());
                }
                case HasData h -> assertThat(store.hasData(h.space(), h.offset(), h.length())).as(at)
                    .isEqualTo(model.hasData(h.space(), h.offset(), h.length()));
                case DropSpace d -> {
                    store.dropSpace(d.space());
                    model.pages.remove(d.space());
                }
                case DropClient d -> {
                    store.dropClient(d.client());
                    model.pages.keySet().removeIf(space -> PageStore.clientOf(space) == d.client());
                }
            }
            checkAccounting(store, model, at);
        }
        for (int space : SPACES) {
            ByteBuffer all = ByteBuffer.allocateDirect(EXTENT + PAGE);
            store.read(space, 0, all);
            byte[] got = new byte[all.capacity()];
            all.flip().get(got);
            assertThat(got).as("final contents of space %x", space).isEqualTo(model.read(space, 0, got.length));
        }
    }

    private static void checkAccounting(PageStore store, Model model, String at) {
        for (int client : CLIENTS) {
            assertThat(store.usedBytes(client)).as("%s: client %d", at, client).isEqualTo(model.clientPages(client) * PAGE);
        }
        long total = model.totalPages();
        assertThat(store.ramUsedBytes() + store.spillUsedBytes()).as(at).isEqualTo(total * PAGE);
        assertThat(store.ramUsedBytes()).as(at).isLessThanOrEqualTo(store.ramBytes());
        assertThat(store.freeBytes()).as(at).isEqualTo((CAPACITY - total) * PAGE);
        Map<Integer, Long> spaces = new HashMap<>();
        model.pages.forEach((space, pages) -> {
            if (!pages.isEmpty()) spaces.put(space, (long) pages.size() * PAGE);
        });
        assertThat(store.spaces()).as(at).isEqualTo(spaces);
    }

    private static ByteBuffer buffer(int size, boolean direct) {
        return direct ? ByteBuffer.allocateDirect(size) : ByteBuffer.allocate(size);
    }

    /** Pages as byte arrays per space; a page that is absent holds no data and reads as zeroes. */
    private static final class Model {
        final Map<Integer, TreeMap<Long, byte[]>> pages = new HashMap<>();

        TreeMap<Long, byte[]> of(int space) {
            return pages.computeIfAbsent(space, s -> new TreeMap<>());
        }

        /** What refuses a write of this range, if anything: the quota is checked before capacity. */
        StoreFullException.Limit refusal(int space, long offset, int length) {
            if (length == 0) return null;
            long missing = 0;
            for (long index = offset / PAGE; index <= (offset + length - 1) / PAGE; index++) {
                if (!of(space).containsKey(index)) missing++;
            }
            if (missing == 0) return null;
            if (clientPages(PageStore.clientOf(space)) + missing > QUOTA) return StoreFullException.Limit.CLIENT_QUOTA;
            if (totalPages() + missing > CAPACITY) return StoreFullException.Limit.CAPACITY;
            return null;
        }

        void write(int space, long offset, byte[] data) {
            for (int done = 0; done < data.length; ) {
                long pos = offset + done;
                int inPage = (int) (pos % PAGE);
                int n = Math.min(PAGE - inPage, data.length - done);
                byte[] page = of(space).computeIfAbsent(pos / PAGE, i -> new byte[PAGE]);
                System.arraycopy(data, done, page, inPage, n);
                done += n;
            }
        }

        byte[] read(int space, long offset, int length) {
            byte[] out = new byte[length];
            for (int done = 0; done < length; ) {
                long pos = offset + done;
                int inPage = (int) (pos % PAGE);
                int n = Math.min(PAGE - inPage, length - done);
                byte[] page = of(space).get(pos / PAGE);
                if (page != null) System.arraycopy(page, inPage, out, done, n);
                done += n;
            }
            return out;
        }

        void discard(int space, long offset, long length) {
            if (length == 0) return;
            long end = offset + length;
            var touched = of(space).subMap(offset / PAGE, true, (end - 1) / PAGE, true);
            for (var it = touched.entrySet().iterator(); it.hasNext(); ) {
                var page = it.next();
                long start = page.getKey() * PAGE;
                int from = (int) Math.max(0, offset - start), to = (int) Math.min(PAGE, end - start);
                if (from == 0 && to == PAGE) it.remove();
                else Arrays.fill(page.getValue(), from, to, (byte) 0);
            }
        }

        boolean hasData(int space, long offset, long length) {
            if (length == 0) return false;
            return !of(space).subMap(offset / PAGE, true, (offset + length - 1) / PAGE, true).isEmpty();
        }

        long clientPages(int client) {
            long n = 0;
            for (var e : pages.entrySet()) if (PageStore.clientOf(e.getKey()) == client) n += e.getValue().size();
            return n;
        }

        long totalPages() {
            long n = 0;
            for (var p : pages.values()) n += p.size();
            return n;
        }
    }
}
