package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

import java.io.IOException;
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

        // Every memory server has the client connected; together they hold both copies of what was written (at
        // once, unless a server taken as lost on a busy machine still has its copies being restored elsewhere).
        for (int i = 0; i < PoolCluster.SERVERS; i++) {
            PoolCluster.MemView m = cluster.memStatus(i);
            assertThat(m.clients()).as("memory server %d's clients: %s", i, m.json()).hasSize(1);
            assertThat(m.clients().getFirst().connections()).as("connections of the pool client: %s", m.json()).isPositive();
        }
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        for (long stored; (stored = storedOnServers()) != 2 * WRITTEN; Thread.sleep(100)) {
            if (System.nanoTime() > deadline) {
                fail("the memory servers hold %d bytes of the pool client, not 2 copies of %d%n%s", stored, WRITTEN, cluster.logs());
            }
        }

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

    /** The bytes stored on all memory servers together. */
    private long storedOnServers() throws IOException {
        long sum = 0;
        for (int i = 0; i < PoolCluster.SERVERS; i++) sum += cluster.memStatus(i).bytes();
        return sum;
    }
}
