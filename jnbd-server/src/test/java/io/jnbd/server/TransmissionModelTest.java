package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

/**
 * Model-based: random request sequences (valid and not) against a memory and a cached-file export, each
 * compared with a byte array that models the export. Valid requests succeed and reads return the model's
 * bytes; invalid ones get the spec's error and change nothing; the session never loses step. (The spec
 * leaves trimmed data unspecified; both backends here punch holes, so the model has trim read as zeroes.)
 */
class TransmissionModelTest {
    static final int SIZE = 1 << 20;
    private static ServerFixture fx;
    private static Path dir;

    @BeforeContainer
    static void start() throws IOException {
        dir = Files.createTempDirectory("jnbd-model");
        fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(SIZE)),
            ExportSpec.parse("file", "file:" + dir.resolve("f.img") + ",size=" + SIZE).openExport()));
    }

    @AfterContainer
    static void stop() throws IOException {
        if (fx != null) fx.close();
        try (var s = Files.walk(dir)) {
            for (Path p : s.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }

    record Op(int type, int flags, long offset, long length, long seed) {}

    private static final Set<Integer> ERRORS = Set.of(Nbd.EINVAL, Nbd.ENOSPC, Nbd.EOVERFLOW);

    @Provide
    Arbitrary<List<Op>> sequences() {
        Arbitrary<Integer> type = Arbitraries.frequency(
            net.jqwik.api.Tuple.of(5, Nbd.CMD_WRITE), net.jqwik.api.Tuple.of(5, Nbd.CMD_READ),
            net.jqwik.api.Tuple.of(2, Nbd.CMD_TRIM), net.jqwik.api.Tuple.of(2, Nbd.CMD_WRITE_ZEROES),
            net.jqwik.api.Tuple.of(1, Nbd.CMD_FLUSH), net.jqwik.api.Tuple.of(1, Nbd.CMD_CACHE),
            net.jqwik.api.Tuple.of(1, 8), net.jqwik.api.Tuple.of(1, 0xFFFF));
        Arbitrary<Integer> flags = Arbitraries.frequency(
            net.jqwik.api.Tuple.of(6, 0), net.jqwik.api.Tuple.of(2, Nbd.CMD_FLAG_FUA), net.jqwik.api.Tuple.of(1, Nbd.CMD_FLAG_NO_HOLE),
            net.jqwik.api.Tuple.of(1, Nbd.CMD_FLAG_DF), net.jqwik.api.Tuple.of(1, 1 << 12));
        Arbitrary<Long> offset = Arbitraries.oneOf(
            Arbitraries.longs().between(0, SIZE),
            Arbitraries.longs().between(SIZE - 70000, SIZE + 70000),
            Arbitraries.of(-1L, -4096L, Long.MIN_VALUE, Long.MAX_VALUE, 0xFFFF_FFFF_FFFF_F000L));
        Arbitrary<Long> length = Arbitraries.oneOf(
            Arbitraries.longs().between(0, 70000),
            Arbitraries.of(1L, 512L, 4096L, 65536L, (32L << 20) + 1, 0xFFFF_FFFFL));
        return Combinators.combine(type, flags, offset, length, Arbitraries.longs())
            .as((t, f, o, l, s) -> new Op(t, f, o, t == Nbd.CMD_WRITE ? Math.min(l, 70000) : l, s))
            .list().ofMinSize(1).ofMaxSize(40);
    }

    @Property(tries = 60, seed = "20261122")
    void memoryMatchesTheModel(@ForAll("sequences") List<Op> ops, @ForAll boolean structured) throws IOException {
        run("mem", ops, structured);
    }

    @Property(tries = 60, seed = "20261122")
    void cachedFileMatchesTheModel(@ForAll("sequences") List<Op> ops, @ForAll boolean structured) throws IOException {
        run("file", ops, structured);
    }

    private void run(String export, List<Op> ops, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            byte[] model = c.read(0, SIZE);
            for (Op op : ops) {
                long cookie = c.cookie();
                boolean inRange = Long.compareUnsigned(op.offset, SIZE) <= 0 && op.length <= SIZE - op.offset;
                boolean flagsOk = switch (op.type) {
                    case Nbd.CMD_READ -> op.flags == 0 || op.flags == Nbd.CMD_FLAG_FUA || (structured && op.flags == Nbd.CMD_FLAG_DF);
                    case Nbd.CMD_WRITE, Nbd.CMD_TRIM, Nbd.CMD_FLUSH, Nbd.CMD_CACHE -> op.flags == 0 || op.flags == Nbd.CMD_FLAG_FUA;
                    case Nbd.CMD_WRITE_ZEROES -> op.flags == 0 || op.flags == Nbd.CMD_FLAG_FUA || op.flags == Nbd.CMD_FLAG_NO_HOLE;
                    default -> false;
                };
                boolean tooBig = (op.type == Nbd.CMD_READ || op.type == Nbd.CMD_WRITE) && op.length > (32 << 20);
                boolean valid = flagsOk && !tooBig && (op.type == Nbd.CMD_FLUSH || inRange);
                if (op.type == Nbd.CMD_WRITE) {
                    byte[] data = ServerFixture.pattern(op.seed, (int) op.length);
                    c.send(new Request(op.flags, op.type, cookie, op.offset, op.length), data);
                    if (valid) System.arraycopy(data, 0, model, (int) op.offset, data.length);
                } else {
                    c.send(new Request(op.flags, op.type, cookie, op.offset, op.length));
                }
                if (op.type == Nbd.CMD_READ && valid && op.length > 0) {
                    byte[] got = structured ? c.readStructuredData(cookie, op.offset, (int) op.length) : c.readSimple((int) op.length).data();
                    assertThat(got).as("%s", op).isEqualTo(Arrays.copyOfRange(model, (int) op.offset, (int) (op.offset + op.length)));
                    continue;
                }
                RawClient.Reply r = c.readReply();
                assertThat(r.cookie()).isEqualTo(cookie);
                if (valid) {
                    assertThat(r.error()).as("%s", op).isZero();
                    if ((op.type == Nbd.CMD_TRIM || op.type == Nbd.CMD_WRITE_ZEROES) && op.length > 0) {
                        Arrays.fill(model, (int) op.offset, (int) (op.offset + op.length), (byte) 0);
                    }
                } else {
                    assertThat(ERRORS).as("error for %s", op).contains(r.error());
                }
            }
            assertThat(c.read(0, SIZE)).as("whole export after the sequence").isEqualTo(model);
        }
    }
}
