package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.pool.memserver.MemServer;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * An extent that leaves its place (trimmed whole) and is placed again at once lands on the same memory servers at
 * the same offsets: the old copies' discards travel on other connections than the new writes, and a discard
 * that arrived after the new write would erase an acknowledged write.
 */
@Timeout(120)
class PoolReplaceTest {
    static final int EXTENT = 64 << 10;

    @Test
    void aWriteRightAfterAWholeExtentTrimIsNeverErasedByTheOldCopiesDiscard() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume v = PoolVolume.open(PoolFaultTest.config(c, 4L * EXTENT, 2).withExtentSize(EXTENT))) {
            for (int round = 0; round < 400; round++) {
                byte[] before = PoolFaultTest.pattern(round, EXTENT);
                v.write(0, ByteBuffer.wrap(before)).get(10, TimeUnit.SECONDS);
                v.trim(0, EXTENT).get(10, TimeUnit.SECONDS);
                byte[] after = PoolFaultTest.pattern(round + 1000, EXTENT);
                v.write(0, ByteBuffer.wrap(after)).get(10, TimeUnit.SECONDS);
                ByteBuffer got = ByteBuffer.allocate(EXTENT);
                v.read(0, got).get(10, TimeUnit.SECONDS);
                int differs = Arrays.mismatch(got.array(), after);
                assertThat(differs).as("round %d: first byte that differs from the write acknowledged after the trim"
                    + " (it reads %s)", round, differs < 0 ? "" : got.array()[differs]).isEqualTo(-1);
            }
        }
    }
}
