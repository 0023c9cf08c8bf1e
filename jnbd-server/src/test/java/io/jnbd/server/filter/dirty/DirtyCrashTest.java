package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * kill -9 of a process writing to an export with a dirty bitmap, after it said a FLUSH had returned: reopened, the
 * bitmaps cover every round that was flushed, and, since a mark is a store into the bitmap file's page cache, every
 * round whose writes returned at all. The rotate it made before the kill holds: b0 frozen with exactly the rounds
 * before it, b1 recording the rest.
 */
@Timeout(180)
class DirtyCrashTest {
    static final long SIZE = (long) DirtyCrashChild.SLOT * DirtyCrashChild.ROUNDS + 12345;

    @TempDir
    Path dir;

    @Test
    void everyFlushedWriteIsCoveredAfterKillMinusNine() throws Exception {
        Path image = dir.resolve("vm.img");
        try (var f = java.nio.channels.FileChannel.open(image, java.nio.file.StandardOpenOption.CREATE_NEW,
                java.nio.file.StandardOpenOption.WRITE)) {
            f.truncate(0).write(java.nio.ByteBuffer.allocate(1), SIZE - 1);
        }
        int killAfter = 25, flushed = -1, written = -1;
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Process p = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"),
            DirtyCrashChild.class.getName(), image.toString()).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream()))) {
            for (String line; (line = out.readLine()) != null; ) {
                if (line.startsWith("WRITTEN ")) written = Integer.parseInt(line.substring(8));
                if (line.startsWith("FLUSHED ")) flushed = Integer.parseInt(line.substring(8));
                if (flushed >= killAfter) break;
            }
            assertThat(flushed).as("rounds the child flushed before the kill").isGreaterThanOrEqualTo(killAfter);
            Process kill = new ProcessBuilder("kill", "-9", Long.toString(p.pid())).redirectErrorStream(true).start();
            assertThat(kill.waitFor()).as("kill -9 %d", p.pid()).isZero();
            assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("the child is gone").isTrue();
            assertThat(p.exitValue()).as("killed by SIGKILL").isEqualTo(128 + 9);
            // what it said between the last line read and the kill counts too
            for (String line; (line = out.readLine()) != null; ) {
                if (line.startsWith("WRITTEN ")) written = Integer.parseInt(line.substring(8));
            }
        } finally {
            p.destroyForcibly();
            p.waitFor(30, TimeUnit.SECONDS);
        }
        assertThat(Files.exists(dir.resolve("vm.img.bitmaps").resolve("lock"))).isTrue();

        int g = DirtyCrashChild.G;
        try (Backend b = ExportSpec.parse("d", DirtyCrashChild.spec(image)).open()) {
            DirtyBitmaps d = FilterBackend.find(b, DirtyBitmaps.class);
            assertThat(d.list()).extracting(DirtyBitmaps.Info::name, DirtyBitmaps.Info::recording)
                .containsExactly(org.assertj.core.groups.Tuple.tuple("b0", false), org.assertj.core.groups.Tuple.tuple("b1", true));
            boolean[] b0 = DirtyRotateTest.dirty(b, "b0", g), b1 = DirtyRotateTest.dirty(b, "b1", g);
            boolean[] before = new boolean[b0.length];
            for (int r = 0; r <= written; r++) {
                for (long[] c : DirtyCrashChild.round(r, null)) {
                    for (long blk = c[0] / g; blk <= (c[0] + c[1] - 1) / g; blk++) {
                        boolean[] in = r < DirtyCrashChild.ROTATE_AT ? b0 : b1;
                        assertThat(in[(int) blk]).as("round %d (flushed up to %d, written up to %d): block %d", r, flushed, written, blk).isTrue();
                        if (r < DirtyCrashChild.ROTATE_AT) before[(int) blk] = true;
                    }
                }
            }
            assertThat(b0).as("the frozen bitmap holds exactly the rounds before the rotate").isEqualTo(before);
            for (int i = 0; i < before.length; i++) {
                if (before[i]) assertThat(b1[i]).as("block %d of a round before the rotate is not in b1", i).isFalse();
            }
        }
    }
}
