package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.OptionalInt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The pool client itself dies: {@code jnbd serve} gets SIGKILL after writing through its pool export, so no
 * connection to a memory server is closed politely. Every memory server must notice the lost connections and
 * free everything the client stored once the grace has passed (NMS: flush on client loss).
 */
@Timeout(120)
class PoolClientLossInteropTest {

    private static final long WRITTEN = 32L << 20;
    /** The grace, plus room for a busy machine: a bound that catches a server that never frees, nothing tighter. */
    private static final Duration FREED_WITHIN = Duration.ofSeconds(PoolCluster.GRACE_SECONDS + 12);

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
    void memoryServersFreeTheSpaceOfAPoolClientKilledWithSigkill() throws Exception {
        cluster = new PoolCluster(dir).start("1G");
        cluster.write(1, 0, WRITTEN);
        cluster.verify(1, 0, WRITTEN, "read back before the kill");

        // Every memory server has the client connected; together they hold both copies of what was written.
        long stored = 0;
        for (int i = 0; i < PoolCluster.SERVERS; i++) {
            PoolCluster.MemView m = cluster.memStatus(i);
            assertThat(m.clients()).as("memory server %d's clients: %s", i, m.json()).hasSize(1);
            assertThat(m.clients().getFirst().connections()).as("connections of the pool client: %s", m.json()).isPositive();
            stored += m.bytes();
        }
        assertThat(stored).as("bytes stored on the three memory servers together: 2 copies of %d", WRITTEN)
            .isEqualTo(2 * WRITTEN);

        JnbdServer serve = cluster.serve();
        serve.kill9();
        OptionalInt status = serve.awaitExit(Duration.ofSeconds(10));
        assertThat(status).as("exit status of jnbd serve (pid %d) after SIGKILL", serve.pid()).hasValue(PoolCluster.SIGKILL_EXIT);

        for (int i = 0; i < PoolCluster.SERVERS; i++) {
            PoolCluster.MemView m = cluster.awaitMem(i, FREED_WITHIN, "the dead pool client's space freed: no clients, no RAM in use",
                v -> v.clients().isEmpty() && v.ramUsed() == 0);
            assertThat(m.free()).as("free memory once the client is gone: %s", m.json()).isEqualTo(512L << 20);
        }
    }
}
