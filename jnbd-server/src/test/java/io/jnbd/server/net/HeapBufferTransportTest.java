package io.jnbd.server.net;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * TLS hands the plain transport heap buffers of whole records, tens of KiB at a time, which the native calls
 * pin for the call instead of copying (NativeSocket's SEND_HEAP and RECV_HEAP). Sliced buffers, offsets inside
 * the array and partial sends are where a pinned call could go wrong: each byte must arrive where it was meant.
 */
class HeapBufferTransportTest {

    @Test
    void largeHeapBuffersGoBothWaysIntact() throws Exception {
        try (ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            try (SocketChannel a = SocketChannel.open(listener.getLocalAddress()); SocketChannel b = listener.accept()) {
                Transport sender = Transports.plain(a);
                Transport receiver = Transports.plain(b);
                byte[] data = new byte[3 << 20];
                new Random(7).nextBytes(data);
                // A slice that starts 5 bytes into its array, as a record does inside a larger buffer.
                byte[] backing = new byte[data.length + 10];
                System.arraycopy(data, 0, backing, 5, data.length);
                ByteBuffer out = ByteBuffer.wrap(backing, 5, data.length).slice();

                byte[] got = new byte[data.length + 10];
                Thread reader = Thread.ofVirtual().start(() -> {
                    try {
                        // 70 KiB at a time into a buffer whose position is never 0 in its array
                        ByteBuffer in = ByteBuffer.wrap(got, 3, data.length);
                        while (in.hasRemaining()) {
                            int limit = Math.min(in.limit(), in.position() + 70_000);
                            ByteBuffer piece = in.duplicate().limit(limit);
                            int n = receiver.receive(piece);
                            if (n < 0) throw new IllegalStateException("end of stream after " + (in.position() - 3));
                            in.position(in.position() + n);
                        }
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                // Larger than the socket buffers: sends stop part-way and resume from the buffer's position.
                sender.send(out);
                assertThat(out.hasRemaining()).isFalse();
                reader.join(30_000);
                assertThat(reader.isAlive()).isFalse();
                assertThat(java.util.Arrays.copyOfRange(got, 3, 3 + data.length)).isEqualTo(data);
                assertThat(got[0]).isZero();
                assertThat(got[3 + data.length]).isZero();
            }
        }
    }
}
