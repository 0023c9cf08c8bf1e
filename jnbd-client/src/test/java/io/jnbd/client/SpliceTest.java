package io.jnbd.client;

import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Reads handed to a {@link ReadSink}, and their data spliced from one server's socket into another's: the
 * bytes must land where they belong whatever the order of the chunks, and a sink or a destination that fails
 * must fail its requests (both connections, once a payload is half passed on) without hanging anything.
 */
class SpliceTest {

    private static final int SIZE = 16 << 20;

    @TempDir
    static Path dir;
    private static NbdServer server;
    private static int port;
    private static Path socket;
    private static byte[] content;

    @BeforeAll
    static void start() throws Exception {
        Path file = dir.resolve("src.img");
        content = new byte[SIZE];
        new Random(11).nextBytes(content);
        java.util.Arrays.fill(content, 4 << 20, 6 << 20, (byte) 0);
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.write(content);
        }
        List<Export> exports = List.of(
            ExportSpec.parse("src=file:" + file).openExport(),
            ExportSpec.parse("dst=memory:16M").openExport(),
            ExportSpec.parse("dst2=memory:16M").openExport(),
            ExportSpec.parse("dst3=memory:16M").openExport(),
            ExportSpec.parse("ro=memory:16M,readonly").openExport());
        server = new NbdServer(new Exports(exports, "src"), ServerConfig.defaults());
        port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
        socket = dir.resolve("splice.sock");
        server.listen(UnixDomainSocketAddress.of(socket));
    }

    @AfterAll
    static void stop() throws Exception {
        if (server != null) server.close();
    }

    private static URI tcp(String export) {
        return URI.create("nbd://127.0.0.1:" + port + "/" + export);
    }

    private static URI unix(String export) {
        return URI.create("nbd+unix:///" + export + "?socket=" + socket);
    }

    /** Passes every data chunk on by splice and every hole as WRITE_ZEROES; counts what it did. */
    private static final class Forward implements ReadSink {
        final NbdClient dst;
        final List<CompletableFuture<Void>> writes = Collections.synchronizedList(new ArrayList<>());
        final AtomicLong spliced = new AtomicLong();
        final AtomicInteger chunks = new AtomicInteger();

        Forward(NbdClient dst) {
            this.dst = dst;
        }

        @Override
        public void data(long offset, int length, Payload payload) throws IOException {
            chunks.incrementAndGet();
            writes.add(payload.spliceTo(dst, offset));
            spliced.addAndGet(length);
        }

        @Override
        public void zeroes(long offset, long length) {
            writes.add(dst.writeZeroes(offset, length, false, false, false));
        }

        void await() throws Exception {
            for (var w : new ArrayList<>(writes)) w.get(30, TimeUnit.SECONDS);
        }
    }

    private static byte[] readAll(NbdClient c) throws Exception {
        ByteBuffer all = ByteBuffer.allocate(SIZE);
        c.read(0, all).get(30, TimeUnit.SECONDS);
        return all.array();
    }

    private static void copy(URI from, URI to) throws Exception {
        ClientOptions options = ClientOptions.defaults().withConnections(2);
        try (NbdClient src = NbdClient.connect(from, options); NbdClient dst = NbdClient.connect(to, options)) {
            assertThat(src.canSpliceTo(dst)).isTrue();
            dst.writeZeroes(0, SIZE, false, false, false).get(30, TimeUnit.SECONDS);
            Forward forward = new Forward(dst);
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            for (long at = 0; at < SIZE; at += 1 << 20) reads.add(src.read(at, 1 << 20, forward));
            for (var r : reads) r.get(30, TimeUnit.SECONDS);
            forward.await();
            assertThat(forward.spliced.get()).isEqualTo(SIZE);
            assertThat(readAll(dst)).isEqualTo(content);
            // Both connections are still in step after all that splicing.
            assertThat(readAll(src)).isEqualTo(content);
        }
    }

    @Test
    void splicedChunksLandInPlaceOverTcp() throws Exception {
        copy(tcp("src"), tcp("dst"));
    }

    @Test
    void splicedChunksLandInPlaceOverUnixSockets() throws Exception {
        copy(unix("src"), unix("dst2"));
    }

    @Test
    void chunksCutAtRandomAndSentInRandomOrderAreSplicedInPlace() throws Exception {
        byte[] disk = FakeNbdServer.content(8 << 20);
        java.util.Arrays.fill(disk, 3 << 20, (3 << 20) + 300_000, (byte) 0);
        try (FakeNbdServer fake = new FakeNbdServer(disk, FakeNbdServer.Mode.SHUFFLED);
             NbdClient src = NbdClient.connect(fake.uri(), ClientOptions.defaults().withConnections(1));
             NbdClient dst = NbdClient.connect(tcp("dst"))) {
            byte[] sevens = new byte[8 << 20];
            java.util.Arrays.fill(sevens, (byte) 7);
            dst.write(0, ByteBuffer.wrap(sevens), false).get(30, TimeUnit.SECONDS);
            Forward forward = new Forward(dst);
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            for (long at = 0; at < disk.length; at += 1 << 20) reads.add(src.read(at, 1 << 20, forward));
            for (var r : reads) r.get(30, TimeUnit.SECONDS);
            forward.await();
            assertThat(forward.chunks.get()).isGreaterThan(reads.size());
            ByteBuffer back = ByteBuffer.allocate(disk.length);
            dst.read(0, back).get(30, TimeUnit.SECONDS);
            assertThat(back.array()).isEqualTo(disk);
        }
    }

    @Test
    void aSinkMayReadChunksIntoBuffersAndHoleChunksArriveAsZeroes() throws Exception {
        byte[] disk = FakeNbdServer.content(4 << 20);
        java.util.Arrays.fill(disk, 1 << 20, 2 << 20, (byte) 0);
        try (FakeNbdServer fake = new FakeNbdServer(disk, FakeNbdServer.Mode.REVERSE);
             NbdClient c = NbdClient.connect(fake.uri())) {
            byte[] got = new byte[disk.length];
            java.util.Arrays.fill(got, (byte) 1);
            AtomicLong holes = new AtomicLong();
            c.read(0, disk.length, new ReadSink() {
                @Override
                public void data(long offset, int length, Payload payload) throws IOException {
                    ByteBuffer head = ByteBuffer.allocate(16);
                    payload.peek(head);
                    assertThat(head.array()).isEqualTo(java.util.Arrays.copyOfRange(disk, (int) offset, (int) offset + 16));
                    payload.readFully(ByteBuffer.wrap(got, (int) offset, length));
                }

                @Override
                public void zeroes(long offset, long length) {
                    holes.addAndGet(length);
                    java.util.Arrays.fill(got, (int) offset, (int) (offset + length), (byte) 0);
                }
            }).get(30, TimeUnit.SECONDS);
            assertThat(holes.get()).isGreaterThanOrEqualTo(1 << 20);
            assertThat(got).isEqualTo(disk);
        }
    }

    @Test
    void aSinkThatFailsBeforeConsumingFailsOnlyItsRead() throws Exception {
        try (NbdClient src = NbdClient.connect(tcp("src"))) {
            var failed = src.read(0, 1 << 20, new ReadSink() {
                @Override
                public void data(long offset, int length, Payload payload) throws IOException {
                    throw new IOException("sink refuses " + offset);
                }

                @Override
                public void zeroes(long offset, long length) {
                }
            });
            assertThatThrownBy(() -> failed.get(30, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class)
                .cause().hasMessageStartingWith("sink refuses");
            // The unconsumed payloads were skipped: the connection is still in step.
            assertThat(readAll(src)).isEqualTo(content);
        }
    }

    @Test
    void aClosedDestinationFailsTheWriteAndLeavesTheSourceUsable() throws Exception {
        try (NbdClient src = NbdClient.connect(tcp("src"))) {
            NbdClient dst = NbdClient.connect(tcp("dst"));
            assertThat(src.canSpliceTo(dst)).isTrue();
            dst.close();
            Forward forward = new Forward(dst);
            src.read(0, 1 << 20, forward).get(30, TimeUnit.SECONDS); // the payload was read and dropped
            assertThat(forward.writes).isNotEmpty();
            for (var w : forward.writes) {
                assertThatThrownBy(() -> w.get(30, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class)
                    .cause().isInstanceOf(NbdConnectionException.class);
            }
            assertThat(readAll(src)).isEqualTo(content);
        }
    }

    @Test
    void aDestinationThatStopsReadingFailsItsWritesAndTheSourceGoesOn() throws Exception {
        // Slots for every write, and more data than loopback's socket buffers hold (4 MiB to send, at most 32
        // MiB to receive here): the destination's socket fills and a write blocks in it until the timeout
        // closes that connection, in the middle of a spliced payload.
        ClientOptions options = ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(1)).withRequestsInFlight(128);
        try (FakeNbdServer stalled = new FakeNbdServer(new byte[SIZE], FakeNbdServer.Mode.STALL);
             NbdClient src = NbdClient.connect(tcp("src"), ClientOptions.defaults().withRequestsInFlight(128));
             NbdClient dst = NbdClient.connect(stalled.uri(), options)) {
            Forward forward = new Forward(dst);
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            for (int round = 0; round < 8; round++) {
                for (long at = 0; at < SIZE; at += 1 << 20) reads.add(src.read(at, 1 << 20, forward));
            }
            // Every read delivered its payload (passed on or dropped), so none failed; no write was answered.
            for (var r : reads) r.get(60, TimeUnit.SECONDS);
            assertThat(forward.writes).hasSize(reads.size());
            for (var w : new ArrayList<>(forward.writes)) {
                assertThatThrownBy(() -> w.get(60, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class);
            }
            // The source dropped what the destination did not take, and is still in step.
            assertThat(readAll(src)).isEqualTo(content);
        }
    }

    @Test
    void aSourceLostInTheMiddleOfAPayloadFailsItsReadAndTheWriteAndTheDestinationGoesOn() throws Exception {
        byte[] disk = FakeNbdServer.content(2 << 20);
        int half = 1 << 19;
        FakeNbdServer halfway = new FakeNbdServer(disk, FakeNbdServer.Mode.SPLIT_CHUNK);
        try (halfway; NbdClient src = NbdClient.connect(halfway.uri()); NbdClient dst = NbdClient.connect(tcp("dst3"))) {
            assertThat(src.canSpliceTo(dst)).isTrue();
            dst.write(0, ByteBuffer.wrap(new byte[2 * half]).put(0, (byte) 1), false).get(30, TimeUnit.SECONDS);
            Forward forward = new Forward(dst);
            var read = src.read(0, 2 * half, forward);
            assertThat(halfway.halfSent.await(30, TimeUnit.SECONDS)).isTrue();
            halfway.close(); // the source goes with half of the chunk sent
            assertThatThrownBy(() -> read.get(30, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class)
                .cause().isInstanceOf(NbdConnectionException.class);
            assertThat(forward.writes).hasSize(1);
            assertThatThrownBy(() -> forward.writes.getFirst().get(30, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class)
                .cause().isInstanceOf(NbdConnectionException.class).hasMessageContaining("zeroes were written in its place");
            // The destination's connection is in step: it took the half that came and zeroes for the rest.
            ByteBuffer back = ByteBuffer.allocate(2 * half);
            dst.read(0, back).get(30, TimeUnit.SECONDS);
            assertThat(java.util.Arrays.copyOf(back.array(), half)).isEqualTo(java.util.Arrays.copyOf(disk, half));
            assertThat(java.util.Arrays.copyOfRange(back.array(), half, 2 * half)).containsOnly((byte) 0);
        }
    }

    @Test
    void spliceNeedsTwoDifferentWritablePlainClients() throws Exception {
        try (NbdClient src = NbdClient.connect(tcp("src")); NbdClient ro = NbdClient.connect(tcp("ro"));
             NbdClient dst = NbdClient.connect(tcp("dst"))) {
            assertThat(src.canSpliceTo(src)).isFalse();
            assertThat(src.canSpliceTo(ro)).isFalse();
            assertThat(src.canSpliceTo(dst)).isTrue();
            assertThat(dst.canWriteInOne(0, 1 << 20)).isTrue();
            assertThat(dst.canWriteInOne(SIZE - 4096, 8192)).isFalse();
        }
    }
}
