package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.jnbd.protocol.Nbd;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * cow-dir on a file system too small for what a client writes: that client gets ENOSPC, and the connection goes on;
 * what it wrote before reads back, and another client's overlay still reads.
 */
@Timeout(60)
class CowDiskFullTest {
    static final int MIB = 1 << 20;

    @TempDir
    Path dir;
    private Path small;
    private boolean mounted;

    @BeforeEach
    void mountSmallFileSystem() throws Exception {
        assumeTrue(new com.sun.security.auth.module.UnixSystem().getUid() == 0, "mounting the small tmpfs this test fills needs root");
        small = Files.createDirectory(dir.resolve("small"));
        Process p = new ProcessBuilder("mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", small.toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assumeTrue(p.waitFor() == 0, "could not mount a small tmpfs: " + out);
        mounted = true;
    }

    @AfterEach
    void unmount() throws Exception {
        if (!mounted) return;
        Process p = new ProcessBuilder("umount", small.toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        if (p.waitFor() != 0) {
            new ProcessBuilder("umount", "-l", small.toString()).start().waitFor();
            throw new AssertionError("umount failed: " + out);
        }
    }

    @Test
    void theClientThatFillsCowDirGetsEnospcAndTheOthersGoOn() throws IOException {
        Path base = dir.resolve("base.img");
        Files.write(base, pattern(9, 32 * MIB));
        try (ServerFixture f = new ServerFixture(List.of(ExportSpec.parse("boot", "file:" + base
                + ",filter=cow,cow-overlay=client,cow-dir=" + small.resolve("cow")).openExport()));
             RawClient other = f.open("boot/other"); RawClient filler = f.open("boot/filler")) {
            assertThat(other.write(0, pattern(1, 65536), Nbd.CMD_FLAG_FUA)).isZero();
            int written = 0, error = 0;
            for (; written < 32; written++) {
                error = filler.write((long) written * MIB, pattern(100 + written, MIB), 0);
                if (error != 0) break;
            }
            assertThat(Nbd.errorName(error)).as("the write that no longer fits, after %d MiB", written).startsWith("ENOSPC");
            assertThat(written).as("MiB that fitted").isBetween(2, 8);
            for (int i = 0; i < written; i++) assertThat(filler.read((long) i * MIB, MIB)).as("MiB %d", i).isEqualTo(pattern(100 + i, MIB));
            assertThat(other.read(0, 65536)).as("another client's overlay").isEqualTo(pattern(1, 65536));
            assertThat(other.read(20L * MIB, 4096)).as("and the base through it")
                .isEqualTo(java.util.Arrays.copyOfRange(pattern(9, 32 * MIB), 20 * MIB, 20 * MIB + 4096));
            // A trim gives blocks back: the filler can write again.
            assertThat(filler.command(Nbd.CMD_TRIM, 0, 0, 2L * MIB)).isZero();
            assertThat(filler.write(0, pattern(7, 65536), Nbd.CMD_FLAG_FUA)).as("a write after the trim").isZero();
            assertThat(filler.read(0, 65536)).isEqualTo(pattern(7, 65536));
        }
    }
}
