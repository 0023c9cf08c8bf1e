package io.jnbd.server.net;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A file range sent without sendfile: the JDK-channel transport always, the native one when it has no file
 * descriptor. Header first, then the range read piece by piece, whatever its length against the piece.
 */
@Timeout(30)
class FileCopyTransportTest {
    @TempDir
    Path dir;

    @Test
    void theHeaderAndTheRangeArriveWholeWithoutSendfile() throws Exception {
        byte[] data = new byte[(600 << 10) + 123];
        new Random(3).nextBytes(data);
        Path file = Files.write(dir.resolve("f"), data);
        try (FileChannel fc = FileChannel.open(file); ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            for (boolean jdkChannel : new boolean[] {true, false}) {
                // ranges: empty, within one piece, several pieces and a tail, from an odd offset
                for (long[] range : new long[][] {{0, 0}, {5, 4096}, {7, data.length - 7}}) {
                    try (SocketChannel a = SocketChannel.open(listener.getLocalAddress()); SocketChannel b = listener.accept()) {
                        Transport t = jdkChannel ? new ChannelTransport(a) : Transports.plain(a);
                        byte[] header = {1, 2, 3, 4, 5, 6, 7, 8, 9};
                        int length = (int) range[1];
                        byte[][] got = new byte[1][];
                        Thread reader = Thread.ofVirtual().start(() -> {
                            try (InputStream in = Channels.newInputStream(b)) {
                                got[0] = in.readNBytes(header.length + length);
                            } catch (Exception e) {
                                throw new RuntimeException(e);
                            }
                        });
                        t.sendFile(ByteBuffer.wrap(header), new io.jnbd.server.io.PageCacheSource(fc, -1), range[0], length);
                        reader.join(20_000);
                        assertThat(got[0]).as("jdk channel %s, range %s", jdkChannel, Arrays.toString(range))
                            .startsWith(header)
                            .hasSize(header.length + length);
                        assertThat(Arrays.copyOfRange(got[0], header.length, got[0].length))
                            .isEqualTo(Arrays.copyOfRange(data, (int) range[0], (int) range[0] + length));
                    }
                }
            }
        }
    }
}
