package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The client against nbdkit: every library call on the memory plugin, pattern contents, sparse-random extents, faults. */
class NbdkitInteropTest {

    private static final long SIZE = 64L << 20;
    private static final List<Peer> peers = new ArrayList<>();
    private static Peer memory;
    private static Peer pattern;

    @BeforeAll
    static void startPeers() throws Exception {
        Peer.assumeInterop("nbdkit");
        memory = start("memory", "size=" + SIZE);
        pattern = start("pattern", "size=" + SIZE);
    }

    private static Peer start(String... args) throws Exception {
        int port = Peer.freePort();
        Peer p = Peer.start(port, Peer.nbdkit(port, args));
        peers.add(p);
        return p;
    }

    @AfterAll
    static void stopPeers() throws Exception {
        for (Peer p : peers) p.close();
    }

    @Test
    void handshakeReportsSizeFlagsAndBlockSizes() throws Exception {
        try (NbdClient c = NbdClient.connect(memory.uri(""))) {
            ExportInfo info = c.info();
            assertThat(info.size()).isEqualTo(SIZE);
            assertThat(info.structuredReplies()).isTrue();
            assertThat(info.baseAllocation()).isTrue();
            assertThat(info.readOnly()).isFalse();
            assertThat(info.canFlush()).isTrue();
            assertThat(info.canTrim()).isTrue();
            assertThat(info.canWriteZeroes()).isTrue();
            assertThat(info.minimumBlockSize()).isGreaterThanOrEqualTo(1);
            assertThat(info.maximumPayload()).isGreaterThanOrEqualTo(1 << 20);
        }
    }

    @Test
    void everyCallOnTheMemoryPlugin() throws Exception {
        try (NbdClient c = NbdClient.connect(URI.create(memory.uri("")), ClientOptions.defaults().withConnections(4))) {
            assertThat(c.connectionCount()).as("memory plugin offers CAN_MULTI_CONN").isEqualTo(4);
            var b = c.blocking();
            // Many writes in flight across connections, each with its own content.
            List<CompletableFuture<Void>> writes = new ArrayList<>();
            for (int i = 0; i < 32; i++) {
                ByteBuffer buf = ByteBuffer.allocateDirect(128 * 1024);
                for (int j = 0; j < buf.capacity(); j++) buf.put(j, (byte) (i * 7 + j));
                writes.add(c.write(i * 128 * 1024L, buf, i % 2 == 0));
            }
            CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
            b.flush();
            ByteBuffer all = ByteBuffer.allocateDirect(32 * 128 * 1024);
            b.read(0, all);
            for (int i = 0; i < 32; i++) {
                for (int j = 0; j < 128 * 1024; j += 997) {
                    assertThat(all.get(i * 128 * 1024 + j)).isEqualTo((byte) (i * 7 + j));
                }
            }
            // A read larger than the maximum payload is split and reassembled.
            ByteBuffer big = ByteBuffer.allocateDirect((int) Math.min(SIZE, c.info().maximumPayload() * 2 + 4096));
            b.read(0, big);
            assertThat(big.get(5 * 128 * 1024 + 3)).isEqualTo((byte) (5 * 7 + 3));

            b.trim(0, 128 * 1024, false);
            b.writeZeroes(128 * 1024, 128 * 1024, false, false, true);
            ByteBuffer z = ByteBuffer.allocate(256 * 1024);
            b.read(0, z);
            assertThat(z.array()).containsOnly(0);
            b.cache(0, 1 << 20);

            List<Extent> extents = b.extents(0, SIZE);
            assertThat(extents.getFirst().offset()).isZero();
            assertThat(extents.getLast().end()).isEqualTo(SIZE);
            assertThat(extents).anyMatch(e -> !e.zero()).anyMatch(Extent::zero);
            assertThat(extents.stream().filter(e -> e.offset() >= 4L << 20)).allMatch(Extent::zero);
        }
    }

    @Test
    void patternPluginWordsHoldTheirOwnOffsetBigEndian() throws Exception {
        for (ClientOptions opts : List.of(ClientOptions.defaults(), ClientOptions.defaults().withStructuredReplies(false),
            ClientOptions.defaults().withCache(4 << 20, 1 << 20))) {
            try (NbdClient c = NbdClient.connect(URI.create(pattern.uri("")), opts)) {
                for (long offset : List.of(0L, 4096L, 1L << 20, SIZE - 65536)) {
                    ByteBuffer buf = ByteBuffer.allocateDirect(65536);
                    c.blocking().read(offset, buf);
                    buf.flip();
                    for (int i = 0; i < 65536; i += 8) assertThat(buf.getLong(i)).isEqualTo(offset + i);
                }
                // A sequential reader through the cache sees the same words.
                for (long offset = 0; offset < 8 << 20; offset += 65536) {
                    ByteBuffer buf = ByteBuffer.allocate(65536);
                    c.blocking().read(offset, buf);
                    assertThat(buf.getLong(0)).isEqualTo(offset);
                    assertThat(buf.getLong(65528)).isEqualTo(offset + 65528);
                }
            }
        }
    }

    @Test
    void sparseRandomReportsMostlyHoles() throws Exception {
        Peer sparse = start("sparse-random", "size=256M", "seed=42");
        try (NbdClient c = NbdClient.connect(sparse.uri(""))) {
            List<Extent> extents = c.blocking().extents(0, c.size());
            long data = extents.stream().filter(e -> !e.zero()).mapToLong(Extent::length).sum();
            assertThat(extents.getLast().end()).isEqualTo(c.size());
            assertThat((double) data / c.size()).isBetween(0.01, 0.30);
            // Zero extents really read as zeroes.
            Extent zero = extents.stream().filter(Extent::zero).filter(e -> e.length() >= 4096).findFirst().orElseThrow();
            ByteBuffer buf = ByteBuffer.allocate(4096);
            c.blocking().read(zero.offset(), buf);
            assertThat(buf.array()).containsOnly(0);
        }
    }

    @Test
    void errorFilterMakesEveryReadFailWithEio() throws Exception {
        Peer failing = start("--filter=error", "pattern", "size=" + SIZE, "error=EIO", "error-pread-rate=100%");
        try (NbdClient c = NbdClient.connect(failing.uri(""))) {
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            for (int i = 0; i < 50; i++) reads.add(c.read(i * 65536L, ByteBuffer.allocateDirect(65536)));
            for (var f : reads) {
                assertThatThrownBy(() -> f.get(10, TimeUnit.SECONDS)).cause()
                    .isInstanceOfSatisfying(NbdErrorException.class, e -> {
                        assertThat(e.error()).isEqualTo(Nbd.EIO);
                        assertThat(e.getMessage()).contains("EIO", "READ");
                    });
            }
        }
    }

    @Test
    void delayFilterMakesTheRequestTimeoutFire() throws Exception {
        Peer slow = start("--filter=delay", "memory", "size=1M", "rdelay=3");
        var opts = ClientOptions.defaults().withRequestTimeout(Duration.ofMillis(500));
        try (NbdClient c = NbdClient.connect(URI.create(slow.uri("")), opts)) {
            long start = System.nanoTime();
            assertThatThrownBy(() -> c.blocking().read(0, ByteBuffer.allocate(4096)))
                .isInstanceOf(NbdTimeoutException.class).hasMessageContaining("500 ms");
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(2));
            // Writes are not delayed: the connection is still usable after the timed-out read drains.
            c.blocking().write(0, ByteBuffer.allocate(4096), false);
        }
    }

    @Test
    void listNamesTheExports() throws Exception {
        Peer named = start("--filter=exportname", "memory", "size=1M", "exportname=alpha", "exportname=beta",
            "exportname-list=explicit");
        List<ExportListing> list = NbdClient.list(URI.create(named.uri("")));
        assertThat(list).extracting(ExportListing::name).containsExactly("alpha", "beta");
    }

    @Test
    @SuppressWarnings("try") // the peer only has to live as long as the try block
    void unixSocket(@TempDir Path dir) throws Exception {
        Path socket = dir.resolve("nbd.sock");
        try (Peer unix = Peer.startUnix(socket, List.of("nbdkit", "-f", "--exit-with-parent", "-U", socket.toString(),
            "pattern", "size=1M"))) {
            try (NbdClient c = NbdClient.connect(URI.create("nbd+unix:///?socket=" + socket))) {
                ByteBuffer buf = ByteBuffer.allocate(4096);
                c.blocking().read(8192, buf);
                assertThat(buf.getLong(8)).isEqualTo(8200);
            }
        }
    }

    /**
     * nbdkit names no identity of its export (it does not know jnbd:identity): a reconnecting client checks size and
     * flags only, goes on with the same file after a crash, and refuses the same name served from a smaller one.
     */
    @Test
    void reconnectsToARestartedNbdkitByItsSizeAndFlags(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("disk.img");
        Path smaller = dir.resolve("smaller.img");
        try (var f = new java.io.RandomAccessFile(file.toFile(), "rw"); var g = new java.io.RandomAccessFile(smaller.toFile(), "rw")) {
            f.setLength(1 << 20);
            g.setLength(1 << 19);
        }
        int port = Peer.freePort();
        Peer first = Peer.start(port, Peer.nbdkit(port, "file", file.toString()));
        peers.add(first);
        ByteBuffer a = ByteBuffer.allocateDirect(4096);
        while (a.hasRemaining()) a.put((byte) 0x5a);
        try (NbdClient c = NbdClient.connect(URI.create(first.uri("")), ClientOptions.defaults().withReconnect(Duration.ofSeconds(30)))) {
            c.write(0, a.flip(), false).join();
            first.kill();
            Peer second = Peer.start(port, Peer.nbdkit(port, "file", file.toString()));
            peers.add(second);
            c.write(4096, a.flip(), false).join();
            ByteBuffer got = ByteBuffer.allocateDirect(8192);
            c.read(0, got).join();
            for (int i = 0; i < 8192; i++) assertThat(got.get(i)).as("byte %d", i).isEqualTo((byte) 0x5a);
            second.kill();
            peers.add(Peer.start(port, Peer.nbdkit(port, "file", smaller.toString())));
            assertThatThrownBy(() -> c.write(8192, a.flip(), false).join()).cause()
                .isInstanceOf(NbdConnectionException.class)
                .hasMessageContaining("came back with a different export: size 524288, was 1048576");
        }
        assertThat(java.nio.file.Files.readAllBytes(smaller)).containsOnly(0);
    }

    @Test
    void serverKilledFailsRequestsPromptly() throws Exception {
        Peer slow = start("--filter=delay", "memory", "size=1M", "rdelay=10");
        try (NbdClient c = NbdClient.connect(slow.uri(""))) {
            var f = c.read(0, ByteBuffer.allocate(4096));
            Thread.sleep(200);
            long start = System.nanoTime();
            slow.kill();
            assertThatThrownBy(() -> f.get(5, TimeUnit.SECONDS)).cause().isInstanceOf(NbdConnectionException.class);
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(3));
        }
    }
}
