package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.io.BufferPool;
import io.jnbd.server.net.TlsTransport;
import io.jnbd.server.net.Transports;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The TLS transport on its own, over {@link NullTls} on a loopback socket: what it reports of decrypted bytes,
 * a file sent through a pool buffer, the end of the stream after this side shut its input, close_notify, and
 * a record the client began and did not finish.
 */
@Timeout(30)
class TlsTransportTest {
    @TempDir
    Path dir;
    private SocketChannel client;
    private SocketChannel accepted;
    private TlsTransport tls;
    private InputStream in;
    private OutputStream out;
    private final BufferPool buffers = new BufferPool(64L << 20, 0);

    @BeforeEach
    void connect() throws Exception {
        try (ServerSocketChannel listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0))) {
            client = SocketChannel.open(listener.getLocalAddress());
            accepted = listener.accept();
        }
        CompletableFuture<NullTls.Streams> hello = CompletableFuture.supplyAsync(() -> {
            try {
                return NullTls.connect(Channels.newInputStream(client), Channels.newOutputStream(client), "alice");
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        tls = TlsTransport.accept(new NullTls(), Transports.plain(accepted), "test", buffers);
        NullTls.Streams s = hello.get();
        in = s.in();
        out = s.out();
    }

    @AfterEach
    void close() throws Exception {
        client.close();
        accepted.close();
    }

    @Test
    void reportsDecryptedBytesAndWaitsOnlyForWholeRecords() throws Exception {
        assertThat(tls.peerIdentities()).containsExactly("alice");
        assertThat(tls.canWaitForArrival()).isFalse();
        assertThat(tls.canSendNow()).isFalse();
        assertThat(tls.zeroCopyFiles()).isFalse();
        ByteBuffer dst = ByteBuffer.allocate(64);
        assertThat(tls.receiveNow(dst)).as("nothing decrypted yet").isZero();
        out.write(new byte[] {1, 2, 3, 4, 5});
        out.write(new byte[] {6, 7});
        assertThat(tls.awaitReadable(0)).isTrue();
        int n = tls.receiveNow(dst);
        // awaitReadable decrypted the first record to see a byte; the second record is still ciphertext.
        assertThat(n).isEqualTo(5);
        assertThat(tls.receive(dst)).isEqualTo(2);
        assertThat(dst.flip().remaining()).isEqualTo(7);
        assertThat(dst.get(6)).isEqualTo((byte) 7);
        assertThat(tls.pending()).isZero();
    }

    @Test
    void sendsAFileThroughAPoolBufferAfterItsHeader() throws Exception {
        Path file = dir.resolve("data");
        byte[] data = ServerFixture.pattern(5, (600 << 10) + 123);
        Files.write(file, data);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            CompletableFuture<byte[]> received = CompletableFuture.supplyAsync(() -> {
                try {
                    return in.readNBytes(4 + data.length - 1000);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            tls.sendFile(ByteBuffer.wrap(new byte[] {9, 8, 7, 6}), new io.jnbd.server.io.PageCacheSource(ch, -1), 1000, data.length - 1000);
            byte[] got = received.get();
            assertThat(java.util.Arrays.copyOf(got, 4)).containsExactly(9, 8, 7, 6);
            assertThat(java.util.Arrays.copyOfRange(got, 4, got.length)).isEqualTo(java.util.Arrays.copyOfRange(data, 1000, data.length));
        }
        assertThat(buffers.outstandingBytes()).as("the piece went back to the pool").isZero();
    }

    @Test
    void afterThisSideShutsItsInputAReceiveSeesTheEndOfTheStream() throws Exception {
        CompletableFuture<Integer> blocked = CompletableFuture.supplyAsync(() -> {
            try {
                return tls.receive(ByteBuffer.allocate(16));
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        tls.shutdownInput();
        assertThat(blocked.get()).isEqualTo(-1);
    }

    @Test
    void closeSendsCloseNotify() throws Exception {
        tls.close();
        assertThat(in.read()).as("the client's session ends on close_notify").isEqualTo(-1);
    }

    @Test
    void aRecordBegunAndNotFinishedShowsAsOwed() throws Exception {
        assertThat(tls.owedSince()).isZero();
        CompletableFuture<Integer> reader = CompletableFuture.supplyAsync(() -> {
            try {
                return tls.receive(ByteBuffer.allocate(64));
            } catch (Exception e) {
                return -2;
            }
        });
        client.write(NullTls.record(NullTls.APPLICATION_DATA, new byte[40], 0, 40).limit(5 + 12));
        // The reader may take the record's first bytes in one receive and go back for the rest in another: between
        // the two nothing is owed for an instant. Once it waits in the second, the record stays owed.
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (tls.owedSince() == 0 && System.nanoTime() < deadline) Thread.sleep(5);
        Thread.sleep(100);
        while (tls.owedSince() == 0 && System.nanoTime() < deadline) Thread.sleep(5);
        assertThat(tls.owedSince()).as("waiting inside a record").isNotZero();
        client.write(NullTls.record(NullTls.APPLICATION_DATA, new byte[40], 0, 40).position(5 + 12));
        assertThat(reader.get()).isEqualTo(40);
        assertThat(tls.owedSince()).as("at a record boundary again").isZero();
    }
}
