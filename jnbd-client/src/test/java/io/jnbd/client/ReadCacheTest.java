package io.jnbd.client;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/** The read cache's lock against the connection's threads, and what a failed fetch may fail. */
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

    /** A source whose bytes at {@code bad} and beyond fail to read (a lost extent, a bad sector). */
    private static ReadCache.Source failingFrom(byte[] disk, long bad, AtomicInteger reads) {
        return (offset, dst) -> {
            reads.incrementAndGet();
            if (offset + dst.remaining() > bad) return CompletableFuture.failedFuture(new IOException("unreadable at " + bad));
            dst.duplicate().put(disk, (int) offset, dst.remaining());
            return CompletableFuture.completedFuture(null);
        };
    }

    @Test
    void aReadaheadThatFailsDoesNotFailTheSequentialReadBeforeIt() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        var reads = new AtomicInteger();
        ReadCache cache = new ReadCache(failingFrom(disk, 4 * 4096, reads), SIZE, SIZE, 8 * 4096, 4096);
        for (int at = 0; at < 4 * 4096; at += 4096) {
            ByteBuffer b = ByteBuffer.allocate(4096);
            cache.read(at, b).get(10, TimeUnit.SECONDS);
            assertThat(b.array()).as("page at %d", at).isEqualTo(Arrays.copyOfRange(disk, at, at + 4096));
        }
        ByteBuffer past = ByteBuffer.allocate(4096);
        assertThat(cache.read(4 * 4096, past)).failsWithin(Duration.ofSeconds(10));
    }

    @Test
    void aPageRereadComesFromTheCacheAndAnInvalidatedOneFromTheSource() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        var reads = new AtomicInteger();
        ReadCache cache = new ReadCache(failingFrom(disk, SIZE, reads), SIZE, 1 << 16, 0, 4096);
        cache.read(8192, ByteBuffer.allocate(100)).get(10, TimeUnit.SECONDS);
        cache.read(8192 + 100, ByteBuffer.allocate(100)).get(10, TimeUnit.SECONDS);
        assertThat(reads.get()).isEqualTo(1);
        cache.invalidate(8192 + 4000, 1);
        cache.read(8192, ByteBuffer.allocate(100)).get(10, TimeUnit.SECONDS);
        assertThat(reads.get()).isEqualTo(2);
    }
}
