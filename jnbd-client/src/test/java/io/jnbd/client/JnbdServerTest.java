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

import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The client against jnbd's own server in the same JVM, over TCP and a Unix socket. The file export splits
 * large reads into small chunks read by several streams, so replies arrive as OFFSET_DATA chunks in
 * whatever order the disk finishes them: the real-world case of out-of-order placement.
 */
class JnbdServerTest {

    @TempDir
    static Path dir;
    private static NbdServer server;
    private static int port;
    private static Path socket;
    private static byte[] fileContent;

    @BeforeAll
    static void start() throws Exception {
        Path file = dir.resolve("disk.img");
        fileContent = new byte[32 << 20];
        new Random(7).nextBytes(fileContent);
        java.util.Arrays.fill(fileContent, 8 << 20, 16 << 20, (byte) 0);
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.write(fileContent);
        }
        List<Export> exports = List.of(
            ExportSpec.parse("mem=memory:64M").openExport(),
            ExportSpec.parse("file=file:" + file + ",split=64K,chunk=16K,streams=4").openExport(),
            ExportSpec.parse("ro=memory:1M,readonly").openExport(),
            ExportSpec.parse("direct=file:" + file + ",mode=direct").openExport());
        server = new NbdServer(new Exports(exports, "mem"), ServerConfig.defaults());
        port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
        socket = dir.resolve("jnbd.sock");
        server.listen(UnixDomainSocketAddress.of(socket));
    }

    @AfterAll
    static void stop() throws Exception {
        if (server != null) server.close();
    }

    private static URI uri(String export) {
        return URI.create("nbd://127.0.0.1:" + port + "/" + export);
    }

    @Test
    void listsItsExports() throws Exception {
        assertThat(NbdClient.list(uri(""))).extracting(ExportListing::name).contains("mem", "file", "ro");
    }

    @Test
    void splitReadsArriveOutOfOrderAndLandInPlace() throws Exception {
        try (NbdClient c = NbdClient.connect(uri("file"))) {
            assertThat(c.info().structuredReplies()).isTrue();
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            List<ByteBuffer> bufs = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                ByteBuffer b = ByteBuffer.allocateDirect(1 << 20);
                bufs.add(b);
                reads.add(c.read(i * (2L << 20), b));
            }
            CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
            for (int i = 0; i < 16; i++) {
                byte[] got = new byte[1 << 20];
                bufs.get(i).get(0, got);
                int from = i * (2 << 20);
                assertThat(got).as("read %d", i).isEqualTo(java.util.Arrays.copyOfRange(fileContent, from, from + (1 << 20)));
            }
            List<Extent> extents = c.blocking().extents(0, c.size());
            assertThat(extents.getLast().end()).isEqualTo(c.size());
        }
    }

    @Test
    void everyCallOverAUnixSocket() throws Exception {
        try (NbdClient c = NbdClient.connect(URI.create("nbd+unix:///mem?socket=" + socket),
                ClientOptions.defaults().withConnections(2).withCache(8 << 20, 1 << 20))) {
            var b = c.blocking();
            ByteBuffer data = ByteBuffer.allocateDirect(3 << 20);
            for (int i = 0; i < data.capacity(); i++) data.put(i, (byte) (i * 13));
            b.write(1 << 20, data, true);
            b.flush();
            ByteBuffer back = ByteBuffer.allocateDirect(3 << 20);
            b.read(1 << 20, back);
            assertThat(back.flip()).isEqualTo(data.flip());
            b.writeZeroes(1 << 20, 1 << 20, false, false, false);
            b.trim(2 << 20, 4096, false);
            b.cache(0, 1 << 20);
            ByteBuffer z = ByteBuffer.allocate(1 << 20);
            b.read(1 << 20, z);
            assertThat(z.array()).containsOnly(0);
            assertThat(b.extents(0, c.size()).getLast().end()).isEqualTo(c.size());
        }
    }

    @Test
    void writesFromAFileLandInPlaceAndAShortFileIsRefused() throws Exception {
        Path src = dir.resolve("payload.img");
        byte[] content = new byte[40 << 20];
        new Random(11).nextBytes(content);
        java.nio.file.Files.write(src, content);
        int length = content.length - 8192;
        try (NbdClient c = NbdClient.connect(uri("mem"), ClientOptions.defaults().withConnections(2));
             var ch = java.nio.channels.FileChannel.open(src)) {
            // More than one request's worth (32 MiB): split over requests and connections, each sent by sendfile.
            c.write(4096, ch, 8192, length, false).get(30, TimeUnit.SECONDS);
            ByteBuffer back = ByteBuffer.allocateDirect(length);
            c.blocking().read(4096, back);
            assertThat(back.flip()).isEqualTo(ByteBuffer.wrap(content, 8192, length));

            org.assertj.core.api.Assertions.assertThatThrownBy(() -> c.write(0, ch, content.length - 4096, 8192, false))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("past the end of the file");
            // Both connections still work.
            for (int i = 0; i < 4; i++) c.blocking().read(0, ByteBuffer.allocateDirect(4096));
        }
    }

    @Test
    void minimumBlockSizeIsHonoured() throws Exception {
        try (NbdClient c = NbdClient.connect(uri("direct"))) {
            int min = c.info().minimumBlockSize();
            assertThat(min).isGreaterThan(1);
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> c.read(min / 2, ByteBuffer.allocateDirect(min)))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("minimum block size " + min);
            ByteBuffer buf = ByteBuffer.allocateDirect(64 * min);
            c.blocking().read(3L * min, buf);
            byte[] got = new byte[buf.capacity()];
            buf.get(0, got);
            assertThat(got).isEqualTo(java.util.Arrays.copyOfRange(fileContent, 3 * min, 3 * min + got.length));
        }
    }

    @Test
    void readOnlyExportRefusesWrites() throws Exception {
        try (NbdClient c = NbdClient.connect(uri("ro"))) {
            assertThat(c.info().readOnly()).isTrue();
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> c.blocking().write(0, ByteBuffer.allocate(512), false))
                .hasMessageContaining("read-only");
        }
    }

    @Test
    void unknownExportSaysSo() {
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> NbdClient.connect(uri("nosuch")))
            .isInstanceOf(NbdException.class).hasMessageContaining("unknown export 'nosuch'");
    }
}
