package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * nbdinfo against a server at its --max-connections: refused in the handshake with a reason libnbd reports,
 * not a connection closed under it; and let in by an operator slot when the server keeps one.
 */
@Timeout(120)
class ConnectionLimitInteropTest {
    private static final Duration T = Duration.ofSeconds(60);

    @TempDir
    static Path dir;

    @BeforeAll
    static void require() {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo");
    }

    /**
     * Takes the server's one slot. The start-up check's own connection may still hold it for a moment after
     * it closed, so a refusal is retried for a while.
     */
    private static RawNbdClient holdTheOnlySlot(JnbdServer server) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (true) {
            try {
                return RawNbdClient.open(server.port(), "m");
            } catch (java.io.IOException | RuntimeException e) {
                if (System.nanoTime() > deadline) throw e;
                Thread.sleep(100);
            }
        }
    }

    @Test
    void nbdinfoAtTheLimitIsToldThePolicyAndTheServerSaysWhy() throws Exception {
        try (JnbdServer server = JnbdServer.start(dir, "--export", "m=memory:16M",
                "--max-connections", "1", "--operator-slots", "0");
             RawNbdClient holder = holdTheOnlySlot(server)) {
            // libnbd prints the server's message only in its debug output; its error names the refused GO.
            Interop.Result refused = Interop.run(T, dir, "env", "LIBNBD_DEBUG=1", "nbdinfo", server.uri("m"));
            assertThat(refused.exitCode()).as(refused.toString()).isNotZero();
            assertThat(refused.output()).contains("opt_go")
                .contains("server error message: server has reached its limit of 1 connections; try again later");
            assertThat(server.log()).contains("refused: already 1 connections (--max-connections 1)");
        }
    }

    @Test
    void anOperatorOnThisHostGetsThroughAFullServer() throws Exception {
        try (JnbdServer server = JnbdServer.start(dir, "--export", "m=memory:16M",
                "--max-connections", "1", "--operator-slots", "1");
             RawNbdClient holder = holdTheOnlySlot(server)) {
            Interop.Result info = Interop.run(T, dir, "nbdinfo", "--size", server.uri("m"));
            info.assertSuccess();
            assertThat(info.output().strip()).isEqualTo(Long.toString(16L << 20));
            assertThat(server.log()).contains("admitted to a slot kept for local operators");
        }
    }
}
