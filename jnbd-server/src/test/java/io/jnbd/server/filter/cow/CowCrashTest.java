package io.jnbd.server.filter.cow;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.NamedViews;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * kill -9 of a process writing to a cow overlay, after it said a FLUSH had returned: reopened, the overlay holds every
 * round that was flushed, byte for byte, whatever the kill cut short after it; the base is unchanged.
 */
@Timeout(180)
class CowCrashTest {
    static final int SIZE = CowCrashChild.SLOT * CowCrashChild.ROUNDS + 12345;

    @TempDir
    Path dir;

    @Test
    void everyFlushedRoundSurvivesKillMinusNine() throws Exception {
        Path base = dir.resolve("base.img"), cow = dir.resolve("cow");
        byte[] baseBytes = new byte[SIZE];
        new Random(5).nextBytes(baseBytes);
        Files.write(base, baseBytes);
        byte[] baseSum = MessageDigest.getInstance("SHA-256").digest(baseBytes);

        int killAfter = 20;
        int acknowledged = -1;
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Process p = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"),
            CowCrashChild.class.getName(), base.toString(), cow.toString())
            .redirectError(ProcessBuilder.Redirect.DISCARD).start();
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream()))) {
            for (String line; (line = out.readLine()) != null; ) {
                if (line.startsWith("FLUSHED ")) acknowledged = Integer.parseInt(line.substring(8));
                if (acknowledged >= killAfter) break;
            }
            assertThat(acknowledged).as("rounds the child flushed before the kill").isGreaterThanOrEqualTo(killAfter);
            Process kill = new ProcessBuilder("kill", "-9", Long.toString(p.pid())).redirectErrorStream(true).start();
            assertThat(kill.waitFor()).as("kill -9 %d", p.pid()).isZero();
            assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("the child is gone").isTrue();
            assertThat(p.exitValue()).as("killed by SIGKILL").isEqualTo(128 + 9);
        } finally {
            p.destroyForcibly();
            p.waitFor(30, TimeUnit.SECONDS);
        }

        byte[] model = baseBytes.clone();
        for (int r = 0; r <= acknowledged; r++) CowCrashChild.round(r, model, null);
        try (Backend chain = ExportSpec.parse("boot", CowCrashChild.spec(base, cow)).open()) {
            assertThat(((NamedViews) chain).refusal("pc", List.of())).isNull();
            Backend c = chain.forConnection(new ConnectionContext("pc", List.of(), "after"));
            int acknowledgedBytes = (acknowledged + 1) * CowCrashChild.SLOT;
            ByteBuffer all = ByteBuffer.allocateDirect(acknowledgedBytes);
            c.read(0, all);
            byte[] got = new byte[acknowledgedBytes];
            all.flip().get(got);
            for (int r = 0; r <= acknowledged; r++) {
                int from = r * CowCrashChild.SLOT, to = from + CowCrashChild.SLOT;
                assertThat(Arrays.copyOfRange(got, from, to)).as("round %d of %d acknowledged", r, acknowledged)
                    .isEqualTo(Arrays.copyOfRange(model, from, to));
            }
            c.connectionClosed();
        }
        assertThat(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(base))).as("base checksum").isEqualTo(baseSum);
    }
}
