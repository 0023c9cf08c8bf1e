package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A reply carrying a large buffer leaves as soon as it is made, not with the rest of its batch (Dispatcher's
 * SEND_AT_ONCE): its data is still in the CPU's caches then. Shown with a RAM export whose second read of a batch
 * waits until the client holds the first reply: sent at the batch's end, that reply would never come first.
 */
@Timeout(60)
class LargeReplyOrderTest {
    private static final int MIB = 1 << 20;

    @Test
    void aLargeReplyIsOnTheWireBeforeTheNextReadOfItsBatchIsMade() throws Exception {
        CountDownLatch firstReceived = new CountDownLatch(1);
        AtomicInteger reads = new AtomicInteger();
        AtomicBoolean secondWaitedForFirst = new AtomicBoolean();
        MemoryBackend ram = new MemoryBackend(8L * MIB);
        byte[] a = ServerFixture.pattern(1, MIB), b = ServerFixture.pattern(2, MIB);
        ram.write(0, ByteBuffer.wrap(a), false);
        ram.write(4L * MIB, ByteBuffer.wrap(b), false);
        Backend gated = new FilterBackend(ram) {
            @Override public Set<Trait> traits() { return Set.of(Trait.NEVER_BLOCKS); } // served on the reader, like RAM

            @Override
            public void read(long offset, ByteBuffer dst) throws IOException {
                if (reads.incrementAndGet() == 2) {
                    try {
                        secondWaitedForFirst.set(firstReceived.await(10, TimeUnit.SECONDS));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                super.read(offset, dst);
            }
        };
        try (ServerFixture server = new ServerFixture(List.of(new Export("mem", "", gated)));
             RawClient c = server.open("mem", false, false)) {
            // Both requests in one write, far apart (not merged into one read): the reader parses them as one batch.
            ByteBuffer both = ByteBuffer.allocate(2 * Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_READ, 1, 0, MIB).encode(both);
            new Request(0, Nbd.CMD_READ, 2, 4L * MIB, MIB).encode(both);
            c.write(both.flip());
            RawClient.Simple first = c.readSimple(MIB);
            firstReceived.countDown();
            RawClient.Simple second = c.readSimple(MIB);
            assertThat(reads).hasValue(2);
            assertThat(secondWaitedForFirst).as("the first reply reached the client before the second read was made").isTrue();
            assertThat(first.error()).isZero();
            assertThat(second.error()).isZero();
            assertThat(first.cookie() == 1 ? first.data() : second.data()).isEqualTo(a);
            assertThat(first.cookie() == 1 ? second.data() : first.data()).isEqualTo(b);
        }
    }
}
