package io.jnbd.client;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;

/** When the caller may count on its buffer again: not one byte lands in it after the future has completed. */
class BufferOwnershipTest {

    private static final int SIZE = 4 << 20;
    private static final Duration TIMEOUT = Duration.ofMillis(500);

    @Test
    void aTimeoutWhileDataIsLandingCompletesTheReadOnlyAfterTheChunk() throws Exception {
        assertNothingLandsAfterCompletion(64 << 10);
    }

    @Test
    void aSplitReadWhosePartsTimeOutWaitsForThePartStillLanding() throws Exception {
        // Three requests of the server's maximum payload (1 MiB): the later two time out while nothing holds
        // them back, the first while its data is arriving.
        assertNothingLandsAfterCompletion(3 << 20);
    }

    private static void assertNothingLandsAfterCompletion(int length) throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk, FakeNbdServer.Mode.SPLIT_CHUNK);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(TIMEOUT))) {
            ByteBuffer buf = ByteBuffer.allocateDirect(length);
            for (int i = 0; i < length; i++) buf.put(i, (byte) 0x5a);
            AtomicReference<byte[]> atCompletion = new AtomicReference<>();
            CompletableFuture<Void> read = client.read(0, buf).whenComplete((v, e) -> atCompletion.set(contents(buf)));
            assertThat(server.halfSent.await(10, TimeUnit.SECONDS)).isTrue();
            // The reader is in the middle of the chunk, waiting for its second half. The timeout fires meanwhile:
            // had it completed the read, it would have done so well within this wait.
            try {
                read.get(TIMEOUT.toMillis() * 3 / 2, TimeUnit.MILLISECONDS);
            } catch (TimeoutException | ExecutionException e) {
                // Either way, the rest of the chunk comes now.
            }
            server.openGate();
            try {
                read.get(10, TimeUnit.SECONDS);
                assertThat(Arrays.mismatch(contents(buf), Arrays.copyOf(disk, length))).as("first wrong byte").isEqualTo(-1);
            } catch (ExecutionException e) {
                assertThat(e).cause().isInstanceOf(NbdTimeoutException.class);
            }
            // A later request on the connection is answered only after the rest of the first reply has been
            // consumed (or fails at once if the connection was closed): nothing of it is still to come.
            client.read(0, ByteBuffer.allocate(4096)).handle((v, e) -> null).get(10, TimeUnit.SECONDS);
            assertThat(Arrays.mismatch(contents(buf), atCompletion.get()))
                .as("first byte that changed after the future completed").isEqualTo(-1);
        }
    }

    private static byte[] contents(ByteBuffer buf) {
        byte[] b = new byte[buf.capacity()];
        buf.get(0, b);
        return b;
    }
}
