package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.protocol.StructuredReplyHeader;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.Tuple;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

/**
 * A direct export serves clients that never asked for block sizes. The spec lets such a client send requests
 * of any alignment (its minimum block size is 1; only a client that requests NBD_INFO_BLOCK_SIZE in GO agrees
 * to honour the server's minimum), so the server must take byte-granular reads and writes on an O_DIRECT file,
 * by read-modify-write of the covering blocks. Two connections write at once, so a read-modify-write that is
 * not alone on its blocks shows up as a lost neighbour's write.
 *
 * <p>In one round, requests in flight together have no order (the spec gives none): a byte written by two
 * writes of the round may hold either value, but a byte written by exactly one must hold its value, and a byte
 * no write touched must not change. Reads during a round may see, byte by byte, the old value or any value
 * written over it in that round. After each round the whole file is read back, whole and in odd pieces.
 *
 * <p>jqwik has no timeout of its own: RawClient's read timeout bounds a server that stops answering.
 */
class DirectUnalignedPropertyTest {
    static final int SIZE = 256 << 10;
    static final int MAX_LENGTH = 20 << 10;
    private static Path dir;

    @BeforeContainer
    static void makeDir() throws IOException, InterruptedException {
        // O_DIRECT needs a real file system (older tmpfs refuse it), and one with 4 KiB blocks makes every
        // request here a read-modify-write.
        Path tmp = Path.of(System.getProperty("java.io.tmpdir"));
        String type = fileSystemType(tmp);
        Path base = type.equals("tmpfs") || type.equals("ramfs") ? Path.of("/var/tmp") : tmp;
        dir = Files.createTempDirectory(base, "jnbd-direct-unaligned");
    }

    @AfterContainer
    static void removeDir() throws IOException {
        if (dir == null) return;
        try (var s = Files.walk(dir)) {
            for (Path p : s.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }

    private static String fileSystemType(Path p) throws IOException, InterruptedException {
        Process proc = new ProcessBuilder("stat", "-f", "-c", "%T", p.toString()).redirectErrorStream(true).start();
        String out = new String(proc.getInputStream().readAllBytes()).strip();
        return proc.waitFor() == 0 ? out : "unknown";
    }

    /** A read or a write; a write's data is {@code pattern(seed, length)}. */
    record Op(boolean write, int offset, int length, long seed) {
        byte[] data() {
            return pattern(seed, length);
        }

        @Override
        public String toString() {
            return (write ? "WRITE" : "READ") + " " + offset + "+" + length;
        }
    }

    /** What each of the two connections sends, pipelined, in one round. */
    record Round(List<Op> first, List<Op> second) {}

    @Provide
    Arbitrary<List<Round>> rounds() {
        // Uniform offsets overlap a lot over 256 KiB; offsets near block boundaries make requests that end or
        // start a few bytes into a neighbour's block, where a lost update is likeliest.
        Arbitrary<Integer> offsets = Arbitraries.frequencyOf(
            Tuple.of(3, Arbitraries.integers().between(0, SIZE - 1)),
            Tuple.of(1, Combinators.combine(Arbitraries.integers().between(1, SIZE / 4096 - 1),
                Arbitraries.integers().between(-3, 3)).as((block, delta) -> block * 4096 + delta)));
        Arbitrary<Integer> lengths = Arbitraries.frequencyOf(
            Tuple.of(2, Arbitraries.integers().between(1, 16)),
            Tuple.of(3, Arbitraries.integers().between(1, 5000)),
            Tuple.of(2, Arbitraries.integers().between(1, MAX_LENGTH)));
        Arbitrary<Op> op = Combinators.combine(Arbitraries.frequency(Tuple.of(3, true), Tuple.of(2, false)),
            offsets, lengths, Arbitraries.longs())
            .as((write, offset, length, seed) -> new Op(write, offset, Math.min(length, SIZE - offset), seed));
        Arbitrary<List<Op>> burst = op.list().ofMinSize(1).ofMaxSize(12);
        return Combinators.combine(burst, burst).as(Round::new).list().ofMinSize(1).ofMaxSize(4);
    }

    @Property(tries = 40, seed = "20261123")
    void byteGranularRequestsOnTwoConnectionsMatchTheModel(@ForAll("rounds") List<Round> rounds) throws Exception {
        Path file = Files.createTempFile(dir, "direct", ".img");
        byte[] model = pattern(-1, SIZE);
        Files.write(file, model);
        // Neither client asks for NBD_INFO_BLOCK_SIZE; one takes simple replies, the other structured ones.
        try (ServerFixture fx = new ServerFixture(List.of(ExportSpec.parse("d", "file:" + file + ",mode=direct").openExport()));
             RawClient a = RawClient.open(fx.address, "d", false, false, List.of());
             RawClient b = RawClient.open(fx.address, "d", true, false, List.of());
             ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor()) {
            for (int n = 0; n < rounds.size(); n++) {
                model = round(n, rounds.get(n), a, b, pool, model);
            }
        } finally {
            Files.deleteIfExists(file);
        }
    }

    /** One request's outcome: its NBD error and, for a successful read, the data. */
    record Outcome(int error, byte[] data) {}

    /** Runs one round and checks it against {@code model}; returns the file as it is after the round. */
    private static byte[] round(int n, Round round, RawClient a, RawClient b, ExecutorService pool, byte[] model)
            throws Exception {
        Future<Map<Long, Outcome>> fa = pool.submit(() -> exchange(a, round.first()));
        Future<Map<Long, Outcome>> fb = pool.submit(() -> exchange(b, round.second()));
        Map<Long, Outcome> ra = result(fa), rb = result(fb);

        List<Written> writes = new ArrayList<>();
        for (Op op : round.first()) if (op.write()) writes.add(new Written(op, op.data()));
        for (Op op : round.second()) if (op.write()) writes.add(new Written(op, op.data()));
        int[] writers = new int[SIZE];
        byte[] sole = new byte[SIZE];
        for (Written w : writes) {
            for (int i = 0; i < w.data().length; i++) {
                writers[w.op().offset() + i]++;
                sole[w.op().offset() + i] = w.data()[i];
            }
        }

        List<String> names = List.of("first (simple)", "second (structured)");
        List<List<Op>> sent = List.of(round.first(), round.second());
        List<Map<Long, Outcome>> received = List.of(ra, rb);
        for (int side = 0; side < 2; side++) {
            List<Op> ops = sent.get(side);
            for (int i = 0; i < ops.size(); i++) {
                int error = received.get(side).get((long) i).error();
                assertThat(error).as("round %d, %s connection: %s answered %s", n, names.get(side), ops.get(i),
                    Nbd.errorName(error)).isZero();
            }
        }
        for (int side = 0; side < 2; side++) {
            List<Op> ops = sent.get(side);
            for (int i = 0; i < ops.size(); i++) {
                Op op = ops.get(i);
                if (op.write()) continue;
                byte[] got = received.get(side).get((long) i).data();
                for (int k = 0; k < op.length(); k++) {
                    int at = op.offset() + k;
                    if (got[k] == model[at] || (writers[at] > 0 && writtenBySome(writes, at, got[k]))) continue;
                    throw new AssertionError(String.format("round %d, %s connection: %s returned 0x%02x at byte %d, "
                            + "which held 0x%02x before the round and was written by %d write(s) of it",
                        n, names.get(side), op, got[k], at, model[at], writers[at]));
                }
            }
        }

        byte[] after = a.read(0, SIZE);
        for (int at = 0; at < SIZE; at++) {
            boolean ok = switch (writers[at]) {
                case 0 -> after[at] == model[at];
                case 1 -> after[at] == sole[at];
                default -> writtenBySome(writes, at, after[at]);
            };
            if (!ok) {
                throw new AssertionError(String.format("after round %d: byte %d is 0x%02x; before the round it was 0x%02x, "
                        + "and %d write(s) of the round covered it%s (writes: %s)", n, at, after[at], model[at], writers[at],
                    writers[at] == 1 ? String.format(", that one with 0x%02x", sole[at]) : "",
                    writes.stream().map(Written::op).toList()));
            }
        }
        // The same bytes again, through reads that start and end at odd places.
        int at = 0;
        for (int piece = 0; at < SIZE; piece++) {
            int length = Math.min(SIZE - at, 1 + 2 * ((piece * 7919 + n * 104_729) % 6151));
            assertThat(b.read(at, length)).as("after round %d: read %d+%d", n, at, length)
                .isEqualTo(java.util.Arrays.copyOfRange(after, at, at + length));
            at += length;
        }
        return after;
    }

    /** A write of the round with its data, made once. */
    record Written(Op op, byte[] data) {}

    /** The future's value, or the failure of its task as it was thrown there (so that jqwik reports that). */
    private static <T> T result(Future<T> f) throws Exception {
        try {
            return f.get();
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof Exception x) throw x;
            if (e.getCause() instanceof Error x) throw x;
            throw e;
        }
    }

    private static boolean writtenBySome(List<Written> writes, int at, byte value) {
        for (Written w : writes) {
            int k = at - w.op().offset();
            if (k >= 0 && k < w.data().length && w.data()[k] == value) return true;
        }
        return false;
    }

    /**
     * Sends {@code ops} as one burst (cookie = index) from another thread, so that neither side waits for the
     * other to read, and collects every reply, simple or structured, in whatever order they come.
     */
    private static Map<Long, Outcome> exchange(RawClient c, List<Op> ops) throws Exception {
        int bytes = 0;
        for (Op op : ops) bytes += Nbd.REQUEST_SIZE + (op.write() ? op.length() : 0);
        ByteBuffer burst = ByteBuffer.allocate(bytes);
        for (int i = 0; i < ops.size(); i++) {
            Op op = ops.get(i);
            new Request(0, op.write() ? Nbd.CMD_WRITE : Nbd.CMD_READ, i, op.offset(), op.length()).encode(burst);
            if (op.write()) burst.put(op.data());
        }
        Future<?> sent;
        try (ExecutorService sender = Executors.newVirtualThreadPerTaskExecutor()) {
            sent = sender.submit(() -> {
                c.write(burst.flip());
                return null;
            });
            Map<Long, Outcome> out;
            try {
                out = replies(c, ops);
            } catch (IOException | RuntimeException | Error e) {
                c.close(); // or the sender may wait for a server that no longer reads, and close() for the sender
                throw e;
            }
            result(sent);
            return out;
        }
    }

    private static Map<Long, Outcome> replies(RawClient c, List<Op> ops) throws IOException {
        Map<Long, Outcome> done = new HashMap<>();
        Map<Long, List<RawClient.Chunk>> partial = new HashMap<>();
        while (done.size() < ops.size()) {
            int magic = c.readBytes(4).getInt();
            if (magic == Nbd.SIMPLE_REPLY_MAGIC) {
                SimpleReply r = SimpleReply.decodeAfterMagic(c.readBytes(12));
                Op op = sent(ops, r.cookie(), done);
                byte[] data = r.error() == 0 && !op.write() ? c.readBytes(op.length()).array() : null;
                done.put(r.cookie(), new Outcome(r.error(), data));
                continue;
            }
            assertThat(magic).as("reply magic").isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
            assertThat(c.structured).as("structured reply without negotiation").isTrue();
            StructuredReplyHeader h = StructuredReplyHeader.decodeAfterMagic(c.readBytes(Nbd.STRUCTURED_REPLY_SIZE - 4));
            Op op = sent(ops, h.cookie(), done);
            RawClient.Chunk chunk = new RawClient.Chunk(h.flags(), h.type(), h.cookie(), c.readBytes((int) h.length()));
            partial.computeIfAbsent(h.cookie(), k -> new ArrayList<>()).add(chunk);
            if (!chunk.done()) continue;
            List<RawClient.Chunk> chunks = partial.remove(h.cookie());
            int error = chunks.stream().filter(k -> k.type() >= 0x8000).mapToInt(k -> k.error().error()).findFirst().orElse(0);
            byte[] data = error == 0 && !op.write() ? RawClient.assemble(chunks, h.cookie(), op.offset(), op.length()) : null;
            done.put(h.cookie(), new Outcome(error, data));
        }
        assertThat(partial).as("replies left unfinished").isEmpty();
        return done;
    }

    private static Op sent(List<Op> ops, long cookie, Map<Long, Outcome> done) {
        assertThat(cookie).as("cookie of a reply").isBetween(0L, ops.size() - 1L);
        assertThat(done).as("replies to cookie %d", cookie).doesNotContainKey(cookie);
        return ops.get((int) cookie);
    }
}
