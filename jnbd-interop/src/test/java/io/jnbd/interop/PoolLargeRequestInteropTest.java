package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A pool export (memory servers and {@code jnbd serve} as separate processes) serves requests past 32 MiB to a
 * client that agreed no block sizes, as every other export kind does: the pool's asynchronous backend streams them
 * in pieces like the rest.
 */
@Timeout(300)
class PoolLargeRequestInteropTest {
    @TempDir
    Path dir;
    PoolCluster cluster;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        if (cluster != null) cluster.close();
    }

    @Test
    void writesAndReadsOf50MillionBytesAnd64MibAtUnalignedOffsets() throws Exception {
        cluster = new PoolCluster(dir).start("256M");
        try (RawNbdClient c = RawNbdClient.open(cluster.serve().port(), PoolCluster.EXPORT)) {
            int[] lengths = {50_000_000, 64 << 20};
            long[] offsets = {1024, (96L << 20) + 4097};
            for (int i = 0; i < lengths.length; i++) {
                byte[] data = new byte[lengths[i]];
                new Random(i).nextBytes(data);
                assertThat(c.write(offsets[i], data)).as("write of %d bytes at %d", lengths[i], offsets[i]).isZero();
                byte[] back = c.read(offsets[i], lengths[i]);
                assertThat(Arrays.mismatch(back, data)).as("first differing byte of %d at %d", lengths[i], offsets[i])
                    .isEqualTo(-1);
            }
            c.disconnect();
        }
    }
}
