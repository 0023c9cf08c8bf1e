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
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * When the caller may count on its buffer again: not one byte lands in it after the future has completed,
 * and its position says how much was transferred, as NIO channels do.
 */
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

    @Test
    void asyncReadsAndWritesAdvanceThePositionBeforeTheyCompleteAndOnlyOnSuccess() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri())) {
            // One request and a read split into two (the fake's maximum payload is 1 MiB).
            for (int length : new int[]{40_000, (1 << 20) + 8192}) {
                ByteBuffer dst = ByteBuffer.allocateDirect(length + 200).position(100).limit(100 + length);
                CompletableFuture<Integer> seen = client.read(8192, dst).thenApply(v -> dst.position());
                assertThat(seen.get(10, TimeUnit.SECONDS)).as("position when the read completes").isEqualTo(100 + length);
                assertThat(dst.limit()).isEqualTo(100 + length);
                byte[] got = new byte[length];
                dst.get(100, got);
                assertThat(Arrays.mismatch(got, Arrays.copyOfRange(disk, 8192, 8192 + length))).isEqualTo(-1);

                ByteBuffer src = ByteBuffer.allocate(length + 10).position(10);
                CompletableFuture<Integer> wrote = client.write(2 << 20, src, false).thenApply(v -> src.position());
                assertThat(wrote.get(10, TimeUnit.SECONDS)).as("position when the write completes").isEqualTo(length + 10);
            }
            ByteBuffer blocking = ByteBuffer.allocate(4096);
            client.blocking().read(0, blocking);
            assertThat(blocking.position()).isEqualTo(4096);

            server.mode(FakeNbdServer.Mode.ERROR);
            ByteBuffer failed = ByteBuffer.allocate(8192).position(4096);
            CompletableFuture<Integer> failure = client.read(0, failed).handle((v, e) -> failed.position());
            assertThat(failure.get(10, TimeUnit.SECONDS)).as("position after a failed read").isEqualTo(4096);
            assertThatThrownBy(() -> client.blocking().read(0, failed)).isInstanceOf(NbdErrorException.class);
            assertThat(failed.position()).isEqualTo(4096);
        }
    }

    @Test
    void readsThroughTheCacheAdvanceThePositionToo() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withCache(1 << 20, 0))) {
            for (int round = 0; round < 2; round++) { // a miss, then a hit
                ByteBuffer dst = ByteBuffer.allocate(10_000);
                assertThat(client.read(70_000, dst).thenApply(v -> dst.position()).get(10, TimeUnit.SECONDS)).isEqualTo(10_000);
                assertThat(dst.array()).isEqualTo(Arrays.copyOfRange(disk, 70_000, 80_000));
            }
        }
    }

    private static byte[] contents(ByteBuffer buf) {
        byte[] b = new byte[buf.capacity()];
        buf.get(0, b);
        return b;
    }
}
