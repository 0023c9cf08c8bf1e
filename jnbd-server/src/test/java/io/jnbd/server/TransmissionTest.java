package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every transmission command and flag over the raw protocol, on a memory export, a cached file and a direct
 * file, with simple and with structured replies.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(60)
class TransmissionTest {
    static final long SIZE = 16 << 20;

    @TempDir
    static Path dir;
    ServerFixture fx;
    final Map<String, Path> files = new HashMap<>();

    @BeforeAll
    void start() throws IOException {
        files.put("cached", dir.resolve("cached.img"));
        files.put("direct", dir.resolve("direct.img"));
        files.put("split", dir.resolve("split.img"));
        fx = new ServerFixture(List.of(
            new Export("mem", "memory export", new MemoryBackend(SIZE)),
            ExportSpec.parse("cached", "file:" + files.get("cached") + ",size=16M").openExport(),
            ExportSpec.parse("direct", "file:" + files.get("direct") + ",size=16M,mode=direct").openExport(),
            ExportSpec.parse("split", "file:" + files.get("split") + ",size=16M,mode=direct,split=1M,chunk=256K,streams=4").openExport(),
            ExportSpec.parse("ro", "memory:1M,readonly").openExport()));
    }

    @AfterAll
    void stop() {
        if (fx != null) fx.close();
    }

    static Stream<Arguments> exportsAndReplies() {
        List<Arguments> out = new ArrayList<>();
        for (String e : List.of("mem", "cached", "direct")) {
            out.add(Arguments.of(e, false));
            out.add(Arguments.of(e, true));
        }
        return out.stream();
    }

    static Stream<String> exports() {
        return Stream.of("mem", "cached", "direct");
    }

    /** Each test uses its own slice of the export, so that the tests sharing a server do not see each other's data. */
    private static long region(int n) {
        return (long) n << 20;
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void writeThenReadBack(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            long at = region(1) + (structured ? 128 << 10 : 0);
            byte[] data = pattern(at, 64 << 10);
            assertThat(c.write(at, data, 0)).isZero();
            byte[] fua = pattern(at + 1, 64 << 10);
            assertThat(c.write(at + data.length, fua, Nbd.CMD_FLAG_FUA)).isZero();
            assertThat(c.read(at, data.length)).isEqualTo(data);
            assertThat(c.read(at + data.length, fua.length)).isEqualTo(fua);
            // A read spanning both writes.
            byte[] both = c.read(at + 4096, 96 << 10);
            for (int i = 0; i < both.length; i++) {
                long pos = 4096 + i;
                byte want = pos < data.length ? data[(int) pos] : fua[(int) (pos - data.length)];
                if (both[i] != want) throw new AssertionError("byte " + i + " of the spanning read");
            }
            c.disconnect();
        }
    }

    /**
     * A large direct write goes to the disk chunk by chunk while its payload is still arriving: with the
     * first chunks sent and the rest held back, their bytes are in the file before the payload is complete.
     * The write then replies once, and reads back whole.
     */
    @Test
    void aLargeDirectWriteReachesTheDiskWhileItsPayloadArrives() throws Exception {
        Path file = dir.resolve("split-write.img");
        try (ServerFixture own = splitWriteServer(file); RawClient c = own.open("w", true, false)) {
            long at = 5 << 20;
            byte[] data = pattern(at + 11, 3 << 20);
            long cookie = c.cookie();
            java.nio.ByteBuffer header = java.nio.ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_WRITE, cookie, at, data.length).encode(header);
            c.write(header.flip());
            c.write(java.nio.ByteBuffer.wrap(data, 0, 600 << 10)); // two 256K chunks and a bit
            byte[] firstChunk = java.util.Arrays.copyOf(data, 256 << 10);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (!java.util.Arrays.equals(onDisk(file, at, 256 << 10), firstChunk)) {
                if (System.nanoTime() > deadline) throw new AssertionError("the first chunk never reached the file");
                Thread.sleep(5);
            }
            c.write(java.nio.ByteBuffer.wrap(data, 600 << 10, data.length - (600 << 10)));
            RawClient.Reply reply = c.readReply();
            assertThat(reply.cookie()).isEqualTo(cookie);
            assertThat(reply.error()).isZero();
            assertThat(c.read(at, data.length)).isEqualTo(data);
            assertThat(onDisk(file, at, data.length)).isEqualTo(data);
            c.disconnect();
        }
    }

    /** Large direct writes of every shape: split (aligned, with and without FUA) and whole (not block-aligned). */
    @Test
    void largeDirectWritesReadBackWhateverTheirAlignment() throws IOException {
        try (ServerFixture own = splitWriteServer(dir.resolve("split-shapes.img")); RawClient c = own.open("w", false, false)) {
            long at = 1 << 20;
            byte[] a = pattern(at, (2 << 20) + 4096);
            byte[] b = pattern(at + 1, (1 << 20) + 1536);
            byte[] f = pattern(at + 2, 3 << 20);
            assertThat(c.write(at, a, 0)).isZero();
            assertThat(c.write(at + a.length + 512, b, 0)).isZero(); // 512-aligned only: written whole
            assertThat(c.write(8 << 20, f, Nbd.CMD_FLAG_FUA)).isZero();
            assertThat(c.read(at, a.length)).isEqualTo(a);
            assertThat(c.read(at + a.length + 512, b.length)).isEqualTo(b);
            assertThat(c.read(8 << 20, f.length)).isEqualTo(f);
            c.disconnect();
        }
    }

    private static ServerFixture splitWriteServer(Path file) throws IOException {
        return new ServerFixture(List.of(ExportSpec.parse("w", "file:" + file + ",size=16M,mode=direct,split=1M,chunk=256K").openExport()));
    }

    private static byte[] onDisk(Path file, long at, int length) throws IOException {
        return java.util.Arrays.copyOfRange(Files.readAllBytes(file), (int) at, (int) at + length);
    }

    /**
     * A large payload that arrives in pieces, with pauses between them, is read in full. The server raises the
     * socket's receive low-water mark for large payloads; a read that had copied the first piece and then
     * waited for the mark would never wake for the rest (this hung in bench/ab before it was fixed).
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("exports")
    void aLargePayloadArrivingInPiecesIsReadInFull(String export) throws Exception {
        try (RawClient c = fx.open(export, true, false)) {
            long at = region(13);
            byte[] data = pattern(at + 7, 1 << 20);
            long cookie = c.cookie();
            java.nio.ByteBuffer header = java.nio.ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_WRITE, cookie, at, data.length).encode(header);
            c.write(header.flip());
            int[] cuts = {0, 300 << 10, 700 << 10, data.length};
            for (int i = 0; i + 1 < cuts.length; i++) {
                c.write(java.nio.ByteBuffer.wrap(data, cuts[i], cuts[i + 1] - cuts[i]));
                Thread.sleep(100);
            }
            RawClient.Reply reply = c.readReply();
            assertThat(reply.cookie()).isEqualTo(cookie);
            assertThat(reply.error()).isZero();
            assertThat(c.read(at, data.length)).isEqualTo(data);
            c.disconnect();
        }
    }

    /**
     * Large and small writes sent back to back, as one burst and again in pieces that cut headers and payloads
     * anywhere: after a large payload the server takes in only the next header before reading the next payload
     * straight into its buffer, and every write must still land whole, each answered once by its cookie.
     */
    @ParameterizedTest(name = "{0} piece={1}")
    @MethodSource("exportsAndPieces")
    void largeAndSmallWritesBackToBackAllLand(String export, int piece) throws Exception {
        try (RawClient c = fx.open(export, true, false)) {
            long at = region(0);
            int[] sizes = {256 << 10, 128 << 10, 4 << 10, 192 << 10, 8 << 10, 128 << 10};
            java.io.ByteArrayOutputStream burst = new java.io.ByteArrayOutputStream();
            List<byte[]> datas = new ArrayList<>();
            long offset = at;
            for (int i = 0; i < sizes.length; i++) {
                byte[] d = pattern(offset + piece, sizes[i]);
                datas.add(d);
                java.nio.ByteBuffer h = java.nio.ByteBuffer.allocate(Nbd.REQUEST_SIZE);
                new Request(i == 2 ? Nbd.CMD_FLAG_FUA : 0, Nbd.CMD_WRITE, 500 + i, offset, d.length).encode(h);
                burst.write(h.array());
                burst.write(d);
                offset += d.length;
            }
            byte[] all = burst.toByteArray();
            for (int from = 0; from < all.length; from += piece) {
                c.write(java.nio.ByteBuffer.wrap(all, from, Math.min(piece, all.length - from)));
            }
            java.util.Set<Long> answered = new java.util.HashSet<>();
            for (int i = 0; i < sizes.length; i++) {
                RawClient.Reply r = c.readReply();
                assertThat(r.error()).as("write %d", r.cookie()).isZero();
                assertThat(answered.add(r.cookie())).as("cookie %d answered once", r.cookie()).isTrue();
            }
            assertThat(answered).containsExactlyInAnyOrder(500L, 501L, 502L, 503L, 504L, 505L);
            offset = at;
            for (byte[] d : datas) {
                assertThat(c.read(offset, d.length)).as("the write at %d", offset).isEqualTo(d);
                offset += d.length;
            }
            c.disconnect();
        }
    }

    static Stream<Arguments> exportsAndPieces() {
        return exports().flatMap(e -> Stream.of(Arguments.of(e, Integer.MAX_VALUE), Arguments.of(e, 7001)));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("exports")
    void aClientThatClosesInTheMiddleOfALargePayloadLeavesTheDataAndTheServerAlone(String export) throws Exception {
        long at = region(15);
        byte[] before = pattern(at + 3, 1 << 20);
        try (RawClient c = fx.open(export, true, false)) {
            assertThat(c.write(at, before, 0)).isZero();
            java.nio.ByteBuffer header = java.nio.ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_WRITE, c.cookie(), at, 1 << 20).encode(header);
            c.write(header.flip());
            c.write(new byte[400 << 10]);
            Thread.sleep(100);
        }
        try (RawClient c = fx.open(export, true, false)) {
            assertThat(c.read(at, before.length)).as("the unfinished write changed nothing").isEqualTo(before);
            c.disconnect();
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void flushAndCacheSucceed(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_SEND_FLUSH).isNotZero();
            assertThat(c.transmissionFlags & Nbd.FLAG_SEND_CACHE).isNotZero();
            assertThat(c.write(region(2), pattern(2, 4096), 0)).isZero();
            assertThat(c.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
            assertThat(c.command(Nbd.CMD_CACHE, 0, region(2), 1 << 20)).isZero();
            assertThat(c.read(region(2), 4096)).isEqualTo(pattern(2, 4096));
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void trimmedRangeReadsBackAsZeroes(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_SEND_TRIM).isNotZero();
            long at = region(3);
            assertThat(c.write(at, pattern(3, 256 << 10), 0)).isZero();
            assertThat(c.command(Nbd.CMD_TRIM, 0, at, 128 << 10)).isZero();
            assertThat(c.command(Nbd.CMD_TRIM, Nbd.CMD_FLAG_FUA, at + (128 << 10), 128 << 10)).isZero();
            // Trim is only a hint in the spec, but every backend here punches holes, which read as zeroes.
            assertThat(c.read(at, 256 << 10)).isEqualTo(new byte[256 << 10]);
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void writeZeroesReadsBackAsZeroesWithEveryFlag(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_SEND_WRITE_ZEROES).isNotZero();
            assertThat(c.transmissionFlags & Nbd.FLAG_SEND_FAST_ZERO).isNotZero();
            int[] flagSets = {0, Nbd.CMD_FLAG_FUA, Nbd.CMD_FLAG_NO_HOLE, Nbd.CMD_FLAG_NO_HOLE | Nbd.CMD_FLAG_FUA,
                Nbd.CMD_FLAG_FAST_ZERO, Nbd.CMD_FLAG_FAST_ZERO | Nbd.CMD_FLAG_NO_HOLE};
            for (int i = 0; i < flagSets.length; i++) {
                long at = region(4) + (long) i * (128 << 10);
                byte[] data = pattern(at, 128 << 10);
                assertThat(c.write(at, data, 0)).isZero();
                // Unaligned inside the written range, so partial blocks are exercised too (except on direct).
                long zAt = export.equals("direct") ? at + 4096 : at + 1000;
                int zLen = export.equals("direct") ? 64 << 10 : (64 << 10) + 123;
                int error = c.command(Nbd.CMD_WRITE_ZEROES, flagSets[i], zAt, zLen);
                byte[] expect = data.clone();
                if ((flagSets[i] & Nbd.CMD_FLAG_FAST_ZERO) != 0 && error == Nbd.ENOTSUP) {
                    // Allowed: a fast zero the server cannot do fast fails, and must leave the data alone.
                } else {
                    assertThat(error).as("WRITE_ZEROES flags 0x%x", flagSets[i]).isZero();
                    java.util.Arrays.fill(expect, (int) (zAt - at), (int) (zAt - at) + zLen, (byte) 0);
                }
                assertThat(c.read(at, data.length)).as("after WRITE_ZEROES flags 0x%x", flagSets[i]).isEqualTo(expect);
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("exports")
    void blockStatusReportsHolesAndData(String export) throws IOException {
        try (RawClient c = fx.open(export, true, true)) {
            long at = region(5);
            assertThat(c.command(Nbd.CMD_TRIM, 0, at, 1 << 20)).isZero();
            assertThat(c.write(at + (256 << 10), pattern(5, 64 << 10), 0)).isZero();
            assertThat(c.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();

            long cookie = c.cookie();
            c.send(new Request(0, Nbd.CMD_BLOCK_STATUS, cookie, at, 1 << 20));
            RawClient.Reply reply = c.readReply();
            assertThat(reply.error()).isZero();
            assertThat(reply.cookie()).isEqualTo(cookie);
            assertThat(reply.chunks()).hasSize(1);
            RawClient.Chunk chunk = reply.chunks().getFirst();
            assertThat(chunk.type()).isEqualTo(Nbd.REPLY_TYPE_BLOCK_STATUS);
            assertThat(chunk.done()).isTrue();
            var status = chunk.blockStatus();
            assertThat(status.contextId()).isNotZero();
            long[] flagsAt = flagsPerByteRange(status.descriptors(), 1 << 20);
            assertThat(flagsAt[0]).as("hole before the data").isEqualTo(Nbd.STATE_HOLE | Nbd.STATE_ZERO);
            assertThat(flagsAt[(256 << 10) / 4096]).as("the written data").isZero();
            assertThat(flagsAt[(320 << 10) / 4096 - 1]).as("end of the written data").isZero();
            long covered = status.descriptors().stream().mapToLong(BlockStatusDescriptor::length).sum();
            if (covered > 320 << 10) {
                assertThat(flagsAt[(320 << 10) / 4096]).as("hole after the data").isEqualTo(Nbd.STATE_HOLE | Nbd.STATE_ZERO);
            }
            assertThat(covered).isBetween(1L, 1L << 20);

            // REQ_ONE: exactly one descriptor, no longer than asked.
            cookie = c.cookie();
            c.send(new Request(Nbd.CMD_FLAG_REQ_ONE, Nbd.CMD_BLOCK_STATUS, cookie, at, 1 << 20));
            reply = c.readReply();
            assertThat(reply.error()).isZero();
            var one = reply.chunks().getFirst().blockStatus().descriptors();
            assertThat(one).hasSize(1);
            assertThat(one.getFirst().length()).isBetween(1L, 256L << 10);
            assertThat(one.getFirst().flags()).isEqualTo(Nbd.STATE_HOLE | Nbd.STATE_ZERO);

            // Zero length is invalid; out of range is invalid.
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, at, 0)).isEqualTo(Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, SIZE - 4096, 8192)).isEqualTo(Nbd.EINVAL);
        }
    }

    /** The status flags of each 4 KiB block of a range, from its descriptors (-1 where not covered). */
    private static long[] flagsPerByteRange(List<BlockStatusDescriptor> ds, int length) {
        long[] out = new long[length / 4096];
        java.util.Arrays.fill(out, -1);
        long pos = 0;
        for (BlockStatusDescriptor d : ds) {
            for (long p = pos; p < pos + d.length() && p < length; p += 4096) out[(int) (p / 4096)] = d.flags();
            pos += d.length();
        }
        return out;
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("exports")
    void blockStatusAfterTrimAndZeroReportsHoleAndZero(String export) throws IOException {
        try (RawClient c = fx.open(export, true, true)) {
            long at = region(6);
            assertThat(c.write(at, pattern(6, 256 << 10), 0)).isZero();
            assertThat(c.command(Nbd.CMD_TRIM, 0, at, 128 << 10)).isZero();
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, at + (128 << 10), 128 << 10)).isZero();
            c.send(new Request(0, Nbd.CMD_BLOCK_STATUS, 99, at, 256 << 10));
            var ds = c.readReply().chunks().getFirst().blockStatus().descriptors();
            long[] flags = flagsPerByteRange(ds, 256 << 10);
            for (int i = 0; i < flags.length; i++) {
                if (flags[i] != -1) assertThat(flags[i]).as("block %d", i).isEqualTo(Nbd.STATE_HOLE | Nbd.STATE_ZERO);
            }
            assertThat(flags[0]).isEqualTo(Nbd.STATE_HOLE | Nbd.STATE_ZERO);
        }
    }

    @Test
    void writeZeroesWithNoHoleKeepsMemoryProvisioned() throws IOException {
        try (RawClient c = fx.open("mem", true, true)) {
            long at = region(7);
            assertThat(c.write(at, pattern(7, 128 << 10), 0)).isZero();
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, Nbd.CMD_FLAG_NO_HOLE, at, 128 << 10)).isZero();
            assertThat(c.read(at, 128 << 10)).isEqualTo(new byte[128 << 10]);
            c.send(new Request(0, Nbd.CMD_BLOCK_STATUS, 5, at, 128 << 10));
            var ds = c.readReply().chunks().getFirst().blockStatus().descriptors();
            // NO_HOLE: "the area MUST be fully provisioned" — so it must not be reported as a hole.
            assertThat(ds).allSatisfy(d -> assertThat(d.flags() & Nbd.STATE_HOLE).isZero());
        }
    }

    @Test
    void trimPunchesHolesInTheFile() throws Exception {
        Path file = files.get("cached");
        try (RawClient c = fx.open("cached")) {
            long at = region(8);
            assertThat(c.write(at, pattern(8, 2 << 20), Nbd.CMD_FLAG_FUA)).isZero();
            long before = ServerFixture.allocatedBlocks(file);
            assertThat(c.command(Nbd.CMD_TRIM, Nbd.CMD_FLAG_FUA, at, 2 << 20)).isZero();
            long after = ServerFixture.allocatedBlocks(file);
            assertThat(before - after).as("512-byte blocks freed by trimming 2 MiB").isGreaterThanOrEqualTo((2 << 20) / 512);
            // WRITE_ZEROES with NO_HOLE must not free blocks; it may allocate them.
            assertThat(c.write(at, pattern(9, 1 << 20), Nbd.CMD_FLAG_FUA)).isZero();
            long written = ServerFixture.allocatedBlocks(file);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, Nbd.CMD_FLAG_NO_HOLE | Nbd.CMD_FLAG_FUA, at, 1 << 20)).isZero();
            assertThat(ServerFixture.allocatedBlocks(file)).isGreaterThanOrEqualTo(written);
            assertThat(c.read(at, 1 << 20)).isEqualTo(new byte[1 << 20]);
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void discAnswersEarlierRequestsThenCloses(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            byte[] data = pattern(10, 4096);
            c.send(new Request(0, Nbd.CMD_WRITE, 41, region(10), data.length), data);
            c.send(new Request(0, Nbd.CMD_FLUSH, 42, 0, 0));
            c.send(new Request(0, Nbd.CMD_DISC, 43, 0, 0));
            List<Long> cookies = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                RawClient.Reply r = c.readReply();
                assertThat(r.error()).isZero();
                cookies.add(r.cookie());
            }
            assertThat(cookies).containsExactlyInAnyOrder(41L, 42L);
            assertThat(c.closedByPeer()).as("DISC closes the connection without a reply").isTrue();
        }
        try (RawClient c = fx.open(export)) {
            assertThat(c.read(region(10), 4096)).isEqualTo(pattern(10, 4096));
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void manyRequestsInFlightAreAnsweredByCookie(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            int n = 32;
            for (int i = 0; i < n; i++) {
                byte[] d = pattern(1000 + i, 4096);
                c.send(new Request(i % 2 == 0 ? Nbd.CMD_FLAG_FUA : 0, Nbd.CMD_WRITE, 1000 + i, region(11) + i * 4096L, 4096), d);
            }
            java.util.Set<Long> seen = new java.util.HashSet<>();
            for (int i = 0; i < n; i++) {
                RawClient.Reply r = c.readReply();
                assertThat(r.error()).isZero();
                assertThat(seen.add(r.cookie())).as("cookie %d answered once", r.cookie()).isTrue();
            }
            assertThat(seen).hasSize(n).allSatisfy(k -> assertThat(k).isBetween(1000L, 1000L + n - 1));
            for (int i = 0; i < n; i++) assertThat(c.read(region(11) + i * 4096L, 4096)).isEqualTo(pattern(1000 + i, 4096));
        }
    }

    // ---------------------------------------------------------------- flags and errors

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void unknownCommandsAndFlagsAreEinvalAndTheSessionContinues(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            assertThat(c.command(99, 0, 0, 4096)).as("unknown command").isEqualTo(Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_FLUSH, 1 << 9, 0, 0)).as("unknown flag").isEqualTo(Nbd.EINVAL);
            assertThat(c.readError(Nbd.CMD_FLAG_NO_HOLE, 0, 4096)).as("NO_HOLE on READ").isEqualTo(Nbd.EINVAL);
            assertThat(c.readError(Nbd.CMD_FLAG_REQ_ONE, 0, 4096)).as("REQ_ONE on READ").isEqualTo(Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_TRIM, Nbd.CMD_FLAG_NO_HOLE, 0, 4096)).as("NO_HOLE on TRIM").isEqualTo(Nbd.EINVAL);
            assertThat(c.call(new Request(Nbd.CMD_FLAG_DF, Nbd.CMD_WRITE, c.cookie(), 0, 4096), new byte[4096]))
                .as("DF on WRITE (payload drained)").isEqualTo(Nbd.EINVAL);
            // Block status was not negotiated.
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, 0, 4096)).isEqualTo(Nbd.EINVAL);
            if (!structured) assertThat(c.readError(Nbd.CMD_FLAG_DF, 0, 4096)).as("DF without structured replies").isEqualTo(Nbd.EINVAL);
            // Still in step: a normal request works.
            assertThat(c.write(region(12), pattern(12, 4096), 0)).isZero();
            assertThat(c.read(region(12), 4096)).isEqualTo(pattern(12, 4096));
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void outOfRangeIsEinvalAndWritesPastTheEndAreEnospc(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            assertThat(c.size).isEqualTo(SIZE);
            assertThat(c.readError(0, SIZE - 4096, 8192)).isEqualTo(Nbd.EINVAL);
            assertThat(c.readError(0, SIZE, 4096)).isEqualTo(Nbd.EINVAL);
            assertThat(c.write(SIZE - 4096, new byte[8192], 0)).isEqualTo(Nbd.ENOSPC);
            assertThat(c.write(SIZE, new byte[4096], Nbd.CMD_FLAG_FUA)).isEqualTo(Nbd.ENOSPC);
            assertThat(c.command(Nbd.CMD_TRIM, 0, SIZE - 4096, 8192)).isIn(Nbd.ENOSPC, Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, SIZE - 4096, 8192)).isIn(Nbd.ENOSPC, Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_CACHE, 0, SIZE - 4096, 8192)).isEqualTo(Nbd.EINVAL);
            // Offsets near 2^64: offset + length wraps around to a small number.
            long near = 0xFFFF_FFFF_FFFF_F000L;
            assertThat(c.readError(0, near, 8192)).isEqualTo(Nbd.EINVAL);
            assertThat(c.readError(0, Long.MAX_VALUE, 4096)).isEqualTo(Nbd.EINVAL);
            assertThat(c.write(near, new byte[8192], 0)).isIn(Nbd.ENOSPC, Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_TRIM, 0, near, 0x2000)).isIn(Nbd.ENOSPC, Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, near, 0xFFFF_F000L)).isIn(Nbd.ENOSPC, Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_CACHE, 0, -4096, 8192)).isEqualTo(Nbd.EINVAL);
            // The end itself is fine.
            assertThat(c.write(SIZE - 4096, pattern(13, 4096), 0)).isZero();
            assertThat(c.read(SIZE - 4096, 4096)).isEqualTo(pattern(13, 4096));
        }
    }

    @ParameterizedTest(name = "{0} structured={1}")
    @MethodSource("exportsAndReplies")
    void readsOverTheMaximumPayloadAreEoverflow(String export, boolean structured) throws IOException {
        try (RawClient c = fx.open(export, structured, false)) {
            assertThat(c.blockSize().maximum()).isEqualTo(32 << 20);
            assertThat(c.readError(0, 0, (32 << 20) + 4096)).isEqualTo(Nbd.EOVERFLOW);
            assertThat(c.readError(0, 0, 0xFFFF_F000L)).isEqualTo(Nbd.EOVERFLOW);
            assertThat(c.read(0, 4096)).hasSize(4096);
        }
    }

    @ParameterizedTest(name = "structured={0}")
    @org.junit.jupiter.params.provider.ValueSource(booleans = {false, true})
    void misalignedRequestsOnADirectExportAreEinval(boolean structured) throws IOException {
        try (RawClient c = fx.open("direct", structured, false)) {
            assertThat(c.blockSize().minimum()).isEqualTo(512);
            assertThat(c.readError(0, 100, 512)).isEqualTo(Nbd.EINVAL);
            assertThat(c.readError(0, 512, 100)).isEqualTo(Nbd.EINVAL);
            assertThat(c.write(512, new byte[100], 0)).isEqualTo(Nbd.EINVAL);
            assertThat(c.write(100, new byte[512], 0)).isEqualTo(Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_TRIM, 0, 512, 100)).isEqualTo(Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, 1, 512)).isEqualTo(Nbd.EINVAL);
            // 512-aligned (not 4096) is within the advertised minimum, so it works.
            assertThat(c.write(region(14) + 512, pattern(14, 1536), 0)).isZero();
            assertThat(c.read(region(14) + 512, 1536)).isEqualTo(pattern(14, 1536));
        }
    }

    @ParameterizedTest(name = "structured={0}")
    @org.junit.jupiter.params.provider.ValueSource(booleans = {false, true})
    void readOnlyExportRefusesWritesWithEperm(boolean structured) throws IOException {
        try (RawClient c = fx.open("ro", structured, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_READ_ONLY).isNotZero();
            assertThat(c.transmissionFlags & (Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES | Nbd.FLAG_SEND_FUA)).isZero();
            assertThat(c.write(0, pattern(15, 4096), 0)).isEqualTo(Nbd.EPERM);
            assertThat(c.command(Nbd.CMD_TRIM, 0, 0, 4096)).isEqualTo(Nbd.EPERM);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, 0, 4096)).isEqualTo(Nbd.EPERM);
            assertThat(c.read(0, 4096)).isEqualTo(new byte[4096]);
            assertThat(c.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("exports")
    void dfReadArrivesAsOneChunk(String export) throws IOException {
        try (RawClient c = fx.open(export, true, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_SEND_DF).isNotZero();
            byte[] data = pattern(16, 2 << 20);
            assertThat(c.write(region(9), data, 0)).isZero();
            c.send(new Request(Nbd.CMD_FLAG_DF, Nbd.CMD_READ, 77, region(9), data.length));
            List<RawClient.Chunk> chunks = c.readStructured();
            assertThat(chunks).hasSize(1);
            assertThat(chunks.getFirst().type()).isEqualTo(Nbd.REPLY_TYPE_OFFSET_DATA);
            assertThat(RawClient.assemble(chunks, 77, region(9), data.length)).isEqualTo(data);
        }
    }

    @Test
    void largeStructuredReadOnASplitExportArrivesInChunks() throws IOException {
        try (RawClient c = fx.open("split", true, false)) {
            int length = 8 << 20;
            byte[] data = pattern(17, length);
            for (int i = 0; i < length; i += 2 << 20) {
                assertThat(c.write(region(4) + i, java.util.Arrays.copyOfRange(data, i, i + (2 << 20)), 0)).isZero();
            }
            for (int round = 0; round < 3; round++) {
                c.send(new Request(0, Nbd.CMD_READ, 500 + round, region(4), length));
                List<RawClient.Chunk> chunks = c.readStructured();
                assertThat(chunks).as("8 MiB in 256 KiB chunks").hasSize(32);
                assertThat(chunks).allSatisfy(ch -> assertThat(ch.type()).isEqualTo(Nbd.REPLY_TYPE_OFFSET_DATA));
                assertThat(chunks.stream().filter(RawClient.Chunk::done).count()).isEqualTo(1);
                assertThat(chunks.getLast().done()).isTrue();
                assertThat(RawClient.assemble(chunks, 500 + round, region(4), length)).isEqualTo(data);
            }
            // Without structured replies the same read is one simple reply.
            try (RawClient s = fx.open("split")) {
                assertThat(s.read(region(4), length)).isEqualTo(data);
            }
        }
    }

    @Test
    void zeroLengthRequestsDoNotHurt() throws IOException {
        try (RawClient c = fx.open("mem", true, false)) {
            c.send(new Request(0, Nbd.CMD_READ, 3, 0, 0));
            RawClient.Reply r = c.readReply();
            assertThat(r.cookie()).isEqualTo(3);
            assertThat(r.chunks()).allSatisfy(ch -> assertThat(ch.type()).isIn(Nbd.REPLY_TYPE_NONE, Nbd.REPLY_TYPE_ERROR));
            assertThat(c.write(0, new byte[0], 0)).isIn(0, Nbd.EINVAL);
            assertThat(c.command(Nbd.CMD_TRIM, 0, 0, 0)).isIn(0, Nbd.EINVAL);
            assertThat(c.read(0, 512)).hasSize(512);
        }
    }
}
