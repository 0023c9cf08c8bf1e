package io.jnbd.client;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** The read cache's lock against the connection's threads. */
class ReadCacheTest {

    private static final int SIZE = 1 << 20;
    private static final int PAGE = 64 << 10;

    @Test
    void aCacheMissWithAFullWindowDoesNotStallTheReaderThread() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        // No request timeout: a stall would last for ever, and the bounded waits below catch it.
        var opts = ClientOptions.defaults().withRequestsInFlight(1).withRequestTimeout(Duration.ZERO)
            .withCache(SIZE, 0).withCachePageSize(PAGE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), opts)) {
            // Page 1 takes the only request slot and is not answered until the gate opens.
            ByteBuffer one = ByteBuffer.allocate(PAGE);
            CompletableFuture<Void> first = client.read(PAGE, one);
            // Pages 0 to 2 with page 1 loading: two separate fetches, for pages 0 and 2, with no slot free.
            ByteBuffer three = ByteBuffer.allocate(3 * PAGE);
            CompletableFuture<CompletableFuture<Void>> second = new CompletableFuture<>();
            Thread caller = Thread.ofPlatform().name("second-reader").start(() -> second.complete(client.read(0, three)));
            Tests.awaitParkedOrDone(caller);
            server.openGate();
            second.get(10, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS);
            first.get(10, TimeUnit.SECONDS);
            assertThat(one.array()).isEqualTo(Arrays.copyOfRange(disk, PAGE, 2 * PAGE));
            assertThat(three.array()).isEqualTo(Arrays.copyOfRange(disk, 0, 3 * PAGE));
        }
    }
}
