package io.jnbd.client;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;
import net.jqwik.api.constraints.IntRange;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Whatever the cut points and order of a read's chunks (data and holes), the bytes that land in the
 * caller's buffer are the export's bytes.
 */
class ChunkOrderPropertiesTest {

    private static final int SIZE = 1 << 20;
    private static final byte[] DISK = FakeNbdServer.content(SIZE);
    private static FakeNbdServer server;
    private static NbdClient client;

    @BeforeContainer
    static void start() throws Exception {
        server = new FakeNbdServer(DISK.clone(), FakeNbdServer.Mode.SHUFFLED);
        client = NbdClient.connect(server.uri());
    }

    @AfterContainer
    static void stop() throws Exception {
        client.close();
        server.close();
    }

    @Property(tries = 200, seed = "20261122")
    void shuffledChunksAssembleTheRightBytes(@ForAll @IntRange(min = 0, max = SIZE - 1) int offset,
                                             @ForAll @IntRange(min = 1, max = 100_000) int length,
                                             @ForAll long seed, @ForAll boolean direct) throws Exception {
        int n = Math.min(length, SIZE - offset);
        server.seed = seed;
        ByteBuffer buf = direct ? ByteBuffer.allocateDirect(n + 10) : ByteBuffer.allocate(n + 10);
        for (int i = 0; i < buf.capacity(); i++) buf.put(i, (byte) 0x77);
        buf.position(5).limit(5 + n);
        client.read(offset, buf).get(5, TimeUnit.SECONDS);
        byte[] got = new byte[n];
        buf.get(5, got);
        assertThat(got).isEqualTo(Arrays.copyOfRange(DISK, offset, offset + n));
        // Bytes outside the buffer's window are untouched.
        buf.limit(buf.capacity());
        assertThat(buf.get(4)).isEqualTo((byte) 0x77);
        assertThat(buf.get(5 + n)).isEqualTo((byte) 0x77);
    }
}
