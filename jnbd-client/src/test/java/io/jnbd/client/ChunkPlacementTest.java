package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The client against {@link FakeNbdServer}: out-of-order placement, and each kind of server misbehaviour. */
class ChunkPlacementTest {

    private static final int SIZE = 1 << 20;

    @Test
    void chunksInReverseOrderAndHolesLandAtTheirOffsets() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri())) {
            assertThat(client.info().structuredReplies()).isTrue();
            assertThat(client.info().baseAllocation()).isTrue();
            // Unaligned to the fake's chunking so that partial first and last chunks occur; garbage first so
            // that holes must really be zero-filled.
            for (ByteBuffer buf : List.of(ByteBuffer.allocateDirect(40_000), ByteBuffer.allocate(40_000))) {
                for (int i = 0; i < buf.capacity(); i++) buf.put(i, (byte) 0x5a);
                client.read(1000, buf).get(5, TimeUnit.SECONDS);
                byte[] got = new byte[buf.flip().remaining()];
                buf.get(got);
                assertThat(got).isEqualTo(java.util.Arrays.copyOfRange(disk, 1000, 41_000));
            }
        }
    }

    @Test
    void manyReadsInFlightCompleteWithTheRightBytes() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestsInFlight(8))) {
            List<CompletableFuture<Void>> all = new ArrayList<>();
            List<ByteBuffer> bufs = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                ByteBuffer b = ByteBuffer.allocateDirect(12_288 + i);
                bufs.add(b);
                all.add(client.read(i * 13_000L, b));
            }
            CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(10, TimeUnit.SECONDS);
            for (int i = 0; i < 64; i++) {
                byte[] got = new byte[bufs.get(i).capacity()];
                bufs.get(i).get(0, got);
                assertThat(got).as("read %d", i).isEqualTo(java.util.Arrays.copyOfRange(disk, i * 13_000, i * 13_000 + got.length));
            }
        }
    }

    @Test
    void blockStatusReportsHolesAndData() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(SIZE), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri())) {
            List<Extent> extents = client.blocking().extents(0, 5 * FakeNbdServer.CHUNK);
            assertThat(extents).extracting(Extent::zero).containsExactly(true, false, false, true, false);
            assertThat(extents.getLast().end()).isEqualTo(5 * FakeNbdServer.CHUNK);
        }
    }

    @Test
    void writesAreSeenByLaterReads() throws Exception {
        try (var server = new FakeNbdServer(new byte[SIZE], FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withCache(1 << 20, 256 << 10))) {
            ByteBuffer before = ByteBuffer.allocate(8192);
            client.blocking().read(4096, before);
            ByteBuffer data = ByteBuffer.allocate(8192);
            for (int i = 0; i < 8192; i++) data.put(i, (byte) (i + 1));
            client.blocking().write(4096, data, false);
            ByteBuffer after = ByteBuffer.allocate(8192);
            client.blocking().read(4096, after);
            assertThat(after.flip()).isEqualTo(data.flip());

            // A sequential reader makes the cache prefetch ahead; a write into the prefetched range must win.
            client.blocking().read(0, ByteBuffer.allocate(64 << 10));
            client.blocking().read(64 << 10, ByteBuffer.allocate(64 << 10));
            client.blocking().write(200 << 10, data.clear(), false);
            ByteBuffer ahead = ByteBuffer.allocate(8192);
            client.blocking().read(200 << 10, ahead);
            assertThat(ahead.flip()).isEqualTo(data.flip());
        }
    }

    @Test
    void sequentialReadsThroughTheCacheAreServedByFewLargeReadaheadRequests() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        var opts = ClientOptions.defaults().withCache(4 << 20, 256 << 10).withCachePageSize(64 << 10);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), opts)) {
            ByteBuffer buf = ByteBuffer.allocate(16 << 10);
            for (int offset = 0; offset < SIZE; offset += buf.capacity()) {
                client.read(offset, buf.clear()).get(5, TimeUnit.SECONDS);
                byte[] got = new byte[buf.capacity()];
                buf.get(0, got);
                assertThat(got).isEqualTo(java.util.Arrays.copyOfRange(disk, offset, offset + got.length));
            }
            // 64 reads of 16 KiB: without readahead 16 page fetches at least; with it a handful of 256 KiB runs.
            assertThat(server.reads.get()).isLessThanOrEqualTo(8);
            int before = server.reads.get();
            client.read(0, ByteBuffer.allocate(64 << 10)).get(5, TimeUnit.SECONDS);
            assertThat(server.reads.get()).as("cached").isEqualTo(before);
        }
    }

    @Test
    void oldServerWithoutGoIsReachedThroughExportName() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.NO_GO);
             var client = NbdClient.connect(server.uri())) {
            assertThat(client.size()).isEqualTo(SIZE);
            assertThat(client.info().structuredReplies()).isFalse();
            assertThat(client.blocking().extents(0, SIZE)).containsExactly(new Extent(0, SIZE, 0));
            ByteBuffer buf = ByteBuffer.allocate(10_000);
            client.blocking().read(5000, buf);
            assertThat(buf.array()).isEqualTo(java.util.Arrays.copyOfRange(disk, 5000, 15_000));
        }
    }

    @Test
    void callbacksOnTheReaderThreadMaySubmitWithAFullWindow() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestsInFlight(2)
                 .withRequestTimeout(Duration.ofSeconds(5)))) {
            // The completion of one read, on the reader thread, issues three more into a window of two: the
            // third must not wait for a slot that only the reader thread itself could free.
            CompletableFuture<Void> all = client.read(0, ByteBuffer.allocate(4096)).thenCompose(v ->
                CompletableFuture.allOf(client.read(4096, ByteBuffer.allocate(4096)),
                    client.read(8192, ByteBuffer.allocate(4096)), client.read(12288, ByteBuffer.allocate(4096))));
            long start = System.nanoTime();
            all.get(5, TimeUnit.SECONDS);
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(2));
        }
    }

    @Test
    void unknownCookieIsAProtocolViolation() throws Exception {
        assertViolation(FakeNbdServer.Mode.UNKNOWN_COOKIE, "unknown cookie");
    }

    @Test
    void chunkOutsideTheRequestIsAProtocolViolation() throws Exception {
        assertViolation(FakeNbdServer.Mode.CHUNK_OUTSIDE, "outside");
    }

    @Test
    void overlappingChunksAreAProtocolViolation() throws Exception {
        assertViolation(FakeNbdServer.Mode.OVERLAP, "overlaps");
    }

    @Test
    void replyThatDoesNotCoverTheRangeIsAProtocolViolation() throws Exception {
        assertViolation(FakeNbdServer.Mode.SHORT, "covering");
    }

    @Test
    void badMagicIsAProtocolViolation() throws Exception {
        assertViolation(FakeNbdServer.Mode.BAD_MAGIC, "bad reply magic");
    }

    private static void assertViolation(FakeNbdServer.Mode mode, String why) throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(SIZE), mode);
             var client = NbdClient.connect(server.uri())) {
            assertThatThrownBy(() -> client.blocking().read(0, ByteBuffer.allocate(3 * FakeNbdServer.CHUNK)))
                .isInstanceOf(NbdProtocolException.class).hasMessageContaining(why);
            // The connection is closed afterwards: later requests fail at once rather than hang.
            assertThatThrownBy(() -> client.blocking().read(0, ByteBuffer.allocate(512)))
                .isInstanceOf(NbdProtocolException.class);
        }
    }

    @Test
    void errorChunkBecomesNbdErrorException() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(SIZE), FakeNbdServer.Mode.ERROR);
             var client = NbdClient.connect(server.uri())) {
            assertThatThrownBy(() -> client.blocking().read(8192, ByteBuffer.allocate(4096)))
                .isInstanceOfSatisfying(NbdErrorException.class, e -> {
                    assertThat(e.error()).isEqualTo(Nbd.EIO);
                    assertThat(e.getMessage()).contains("EIO", "READ", "offset=8192", "injected");
                });
        }
    }

    @Test
    @SuppressWarnings("try") // the server is closed on purpose while the client still uses it
    void droppedConnectionFailsEveryRequestInFlightPromptly() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(SIZE), FakeNbdServer.Mode.SILENT);
             var client = NbdClient.connect(server.uri())) {
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            for (int i = 0; i < 10; i++) reads.add(client.read(i * 4096L, ByteBuffer.allocate(4096)));
            Thread.sleep(100);
            long start = System.nanoTime();
            server.close();
            for (var f : reads) {
                assertThatThrownBy(() -> f.get(5, TimeUnit.SECONDS)).hasCauseInstanceOf(NbdConnectionException.class)
                    .hasMessageContaining("lost");
            }
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(2));
        }
    }

    @Test
    @SuppressWarnings("try") // the server is closed on purpose while the client still uses it
    void requestTimeoutFiresWhenTheServerNeverAnswers() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(SIZE), FakeNbdServer.Mode.SILENT);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ofMillis(300)))) {
            long start = System.nanoTime();
            assertThatThrownBy(() -> client.blocking().read(0, ByteBuffer.allocate(4096)))
                .isInstanceOf(NbdTimeoutException.class).hasMessageContaining("READ");
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(3));
            server.close();
        }
    }

    @Test
    void aServerThatStopsReadingDoesNotBlockWritersForever() throws Exception {
        try (var server = new FakeNbdServer(new byte[64 << 20], FakeNbdServer.Mode.STALL);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ofMillis(500)))) {
            long start = System.nanoTime();
            // Far more than the socket buffers hold: without a way out, the sending thread would block forever.
            List<CompletableFuture<Void>> writes = new ArrayList<>();
            ByteBuffer data = ByteBuffer.allocateDirect(8 << 20);
            for (int i = 0; i < 8; i++) writes.add(client.write(i * (8L << 20), data, false));
            for (var f : writes) assertThatThrownBy(() -> f.get(5, TimeUnit.SECONDS)).cause().isInstanceOf(NbdException.class);
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(4));
        }
    }

    @Test
    void unknownServerIsOneClearError() {
        assertThatThrownBy(() -> NbdClient.connect("nbd://127.0.0.1:1/x"))
            .isInstanceOf(NbdConnectionException.class).hasMessageContaining("cannot connect to 127.0.0.1:1");
    }
}
