package io.jnbd.client;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** The client against qemu-nbd and the reference nbd-server, each exporting a temporary file. */
class QemuNbdAndNbdServerInteropTest {

    private static final long SIZE = 16L << 20;
    private Peer peer;

    @AfterEach
    void stop() throws Exception {
        if (peer != null) peer.close();
    }

    @Test
    void qemuNbd(@TempDir Path dir) throws Exception {
        Peer.assumeInterop("qemu-nbd");
        Path file = image(dir);
        int port = Peer.freePort();
        peer = Peer.start(port, List.of("qemu-nbd", "-f", "raw", "-x", "disk", "-b", "127.0.0.1", "-p",
            String.valueOf(port), "-t", "--shared=8", "--cache=none", "--discard=unmap", file.toString()));
        exercise(peer.uri("disk"), file);
    }

    @Test
    void nbdServer(@TempDir Path dir) throws Exception {
        Peer.assumeInterop("nbd-server");
        Path file = image(dir);
        int port = Peer.freePort();
        Path config = dir.resolve("config");
        Files.writeString(config, """
            [generic]
                listenaddr = 127.0.0.1
                port = %d
                allowlist = true
            [disk]
                exportname = %s
                filesize = %d
                flush = true
                fua = true
                trim = true
            """.formatted(port, file, SIZE));
        peer = Peer.startDaemon(port, dir.resolve("pid"), List.of("nbd-server", "-C", config.toString(),
            "-p", dir.resolve("pid").toString()));
        exercise(peer.uri("disk"), file);
        assertThat(NbdClient.list(URI.create(peer.uri("")))).extracting(ExportListing::name).contains("disk");
    }

    static Path image(Path dir) throws Exception {
        Path file = dir.resolve("disk.img");
        try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
            f.setLength(SIZE);
            f.seek(1 << 20);
            f.write("hello from the file".getBytes());
        }
        return file;
    }

    /** Each call the server supports, with results checked against the server's view and the file itself. */
    static void exercise(String uri, Path file) throws Exception {
        try (NbdClient c = NbdClient.connect(URI.create(uri))) {
            var b = c.blocking();
            assertThat(c.size()).isEqualTo(SIZE);
            ByteBuffer hello = ByteBuffer.allocate(19);
            b.read(1 << 20, hello);
            assertThat(new String(hello.array())).isEqualTo("hello from the file");

            ByteBuffer data = ByteBuffer.allocateDirect(3 << 20);
            for (int i = 0; i < data.capacity(); i++) data.put(i, (byte) (i % 251));
            b.write(4 << 20, data, true);
            b.flush();
            ByteBuffer back = ByteBuffer.allocateDirect(3 << 20);
            b.read(4 << 20, back);
            assertThat(back.flip()).isEqualTo(data.flip());

            b.writeZeroes(4 << 20, 1 << 20, false, false, false);
            b.trim(5 << 20, 1 << 20, false);
            b.cache(0, 1 << 20);
            b.flush();
            ByteBuffer zeroed = ByteBuffer.allocate(1 << 20);
            b.read(4 << 20, zeroed);
            assertThat(zeroed.array()).containsOnly(0);

            List<Extent> extents = b.extents(0, SIZE);
            assertThat(extents.getLast().end()).isEqualTo(SIZE);
            if (c.info().baseAllocation()) {
                assertThat(extents.stream().filter(e -> e.offset() <= 6L << 20 && e.end() > 6L << 20)).noneMatch(Extent::zero);
            }
        }
        byte[] onDisk = Files.readAllBytes(file);
        assertThat(onDisk[(6 << 20) + 250]).isEqualTo((byte) (((2 << 20) + 250) % 251));
    }
}
