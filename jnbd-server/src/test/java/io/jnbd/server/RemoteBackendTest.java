package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.MemoryBackend;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A backend whose calls wait on other machines ({@link Backend.Trait#REMOTE}) runs them on virtual threads:
 * however many of its requests wait, the I/O pool stays free for every other export.
 */
@Timeout(60)
class RemoteBackendTest {
    @TempDir
    Path dir;

    /** Memory whose reads wait until released, like a peer that has stopped answering. */
    static final class StalledRemote extends io.jnbd.server.backend.FilterForTests {
        final CountDownLatch release = new CountDownLatch(1);
        final AtomicInteger waiting = new AtomicInteger();

        StalledRemote() {
            super(new MemoryBackend(64 << 20));
        }

        @Override public Set<Trait> traits() { return Set.of(Trait.REMOTE); }

        @Override
        public void read(long offset, ByteBuffer dst) throws java.io.IOException {
            waiting.incrementAndGet();
            try {
                release.await();
            } catch (InterruptedException e) {
                throw new java.io.InterruptedIOException();
            }
            super.read(offset, dst);
        }
    }

    @Test
    void manyWaitingRemoteRequestsLeaveTheIoPoolToOtherExports() throws Exception {
        StalledRemote remote = new StalledRemote();
        int ioThreads = 2, waiting = 40;
        try (ServerFixture fx = new ServerFixture(List.of(new Export("remote", "", remote),
                ExportSpec.parse("disk", "file:" + dir.resolve("d.img") + ",size=16M,mode=direct").openExport()),
                ServerConfig.defaults().withIoThreads(ioThreads));
             RawClient r = fx.open("remote"); RawClient d = fx.open("disk")) {
            ByteBuffer burst = ByteBuffer.allocate(waiting * Nbd.REQUEST_SIZE);
            for (int i = 0; i < waiting; i++) new Request(0, Nbd.CMD_READ, i, i * 65536L, 4096).encode(burst);
            r.write(burst.flip());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (remote.waiting.get() < waiting && System.nanoTime() < deadline) Thread.sleep(5);
            assertThat(remote.waiting.get()).as("every remote read is waiting at once, on more threads than the pool has")
                .isEqualTo(waiting);
            // The direct export's disk work needs the I/O pool, which the waiting remote reads do not hold.
            byte[] data = pattern(1, 1 << 20);
            assertThat(d.write(0, data, 0)).isZero();
            assertThat(d.read(0, data.length)).isEqualTo(data);
            remote.release.countDown();
            for (int i = 0; i < waiting; i++) assertThat(r.readSimple(4096).error()).isZero();
        }
    }
}
