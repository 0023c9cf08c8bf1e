package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A real SIGHUP to {@code bin/jnbd serve --config FILE}: the exports follow the file, a broken file changes nothing. */
@Timeout(180)
class ReloadInteropTest {

    private static final Duration T = Duration.ofSeconds(60);

    @TempDir
    Path dir;
    JnbdServer server;

    @AfterEach
    void stop() throws Exception {
        if (server != null) server.stop();
    }

    @Test
    void sighupAppliesTheExportsOfTheFileAndRefusesABrokenOne() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo");
        Path config = dir.resolve("jnbd.toml");
        Files.writeString(config, "[export]\na = \"file:" + dir.resolve("a.img") + ",size=4M\"\nb = \"memory:4M\"\n");
        server = JnbdServer.start(dir, "--config", config.toString());

        try (RawNbdClient onB = RawNbdClient.open(server.port(), "b")) {
            byte[] data = new byte[4096];
            Arrays.fill(data, (byte) 0x3c);
            assertThat(onB.write(0, data)).isZero();

            Files.writeString(config, "[export]\na = \"file:" + dir.resolve("a.img") + ",size=4M\"\nc = \"memory:2M\"\n");
            hangUpAndAwait("reloaded ", 1);
            assertThat(exports()).contains("export=\"a\"", "export=\"c\"").doesNotContain("export=\"b\"");
            assertThatThrownBy(() -> RawNbdClient.open(server.port(), "b").close())
                .isInstanceOfSatisfying(RawNbdClient.Refused.class, r -> assertThat(r.type).isEqualTo(RawNbdClient.REP_ERR_UNKNOWN));
            assertThat(onB.write(4096, data)).as("b's client goes on").isZero();
            assertThat(onB.read(0, 8192)).containsOnly((byte) 0x3c);

            Files.writeString(config, "backlog = \"x\"\n[export]\nd = \"memory:2M\"\n");
            hangUpAndAwait("refused, the exports stay as they were: " + config + ":1: backlog", 1);
            assertThat(exports()).contains("export=\"a\"", "export=\"c\"").doesNotContain("export=\"d\"");
        }
        assertThat(server.process().isAlive()).as("SIGHUP did not end the server").isTrue();
        assertThat(server.stop()).isZero();
    }

    /** Sends SIGHUP and waits (bounded) until the log holds one more line with {@code text}. */
    private void hangUpAndAwait(String text, int more) throws InterruptedException {
        int before = count(server.log(), text);
        server.hangUp();
        long deadline = System.nanoTime() + T.toNanos();
        while (count(server.log(), text) < before + more && System.nanoTime() < deadline) Thread.sleep(50);
        assertThat(count(server.log(), text)).as("'%s' in the log after SIGHUP:%n%s", text, server.log()).isEqualTo(before + more);
    }

    private static int count(String log, String text) {
        int n = 0;
        for (int i = log.indexOf(text); i >= 0; i = log.indexOf(text, i + 1)) n++;
        return n;
    }

    private String exports() {
        return Interop.run(T, dir, "nbdinfo", "--list", "nbd://127.0.0.1:" + server.port()).assertSuccess().output();
    }
}
