package io.jnbd.server;

import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.Random;

/** An in-process server on a loopback port, stopped by {@link #close()}. */
final class ServerFixture implements AutoCloseable {
    final NbdServer server;
    final SocketAddress address;

    ServerFixture(List<Export> exports, ServerConfig config) throws IOException {
        this.server = new NbdServer(new Exports(exports, null), config);
        this.address = server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    ServerFixture(List<Export> exports) throws IOException {
        this(exports, ServerConfig.defaults());
    }

    static ServerFixture memory(long size) throws IOException {
        return new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(size))));
    }

    RawClient open(String export) throws IOException {
        return RawClient.open(address, export);
    }

    RawClient open(String export, boolean structured, boolean baseAllocation) throws IOException {
        return RawClient.open(address, export, structured, baseAllocation);
    }

    @Override
    public void close() {
        server.stop(Duration.ofSeconds(10));
    }

    static byte[] pattern(long seed, int length) {
        byte[] b = new byte[length];
        new Random(seed).nextBytes(b);
        return b;
    }

    /** Blocks the file system has allocated to {@code path}, in 512-byte units, as {@code stat %b} reports. */
    static long allocatedBlocks(java.nio.file.Path path) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("stat", "--format=%b", path.toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes()).strip();
        if (p.waitFor() != 0) throw new IOException("stat failed: " + out);
        return Long.parseLong(out);
    }
}
