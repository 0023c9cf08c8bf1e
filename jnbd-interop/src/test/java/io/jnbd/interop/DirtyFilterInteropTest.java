package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * jnbd's own dirty bitmaps end to end, each piece from another tool: qemu-io writes through the {@code dirty} filter,
 * libnbd's nbdinfo maps {@code qemu:dirty-bitmap:b0} as exactly those writes rounded out to the granularity, an
 * operator checkpoints with {@code jnbd bitmap rotate} on the control socket, and {@code jnbd copy --bitmap} of each
 * frozen bitmap brings a full backup up to the export, byte for byte.
 */
@Timeout(300)
class DirtyFilterInteropTest {
    private static final Duration T = Duration.ofSeconds(120);
    private static final long K = 1024, M = K * K, SIZE = 64 * M;

    @TempDir
    Path dir;
    private Path image, control;

    @BeforeEach
    void image() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-io", "nbdinfo");
        image = dir.resolve("vm0.img");
        Interop.writeRandomImage(image, SIZE, 34);
        control = dir.resolve("jnbd.ctl");
    }

    private JnbdServer serve() throws Exception {
        return JnbdServer.start(dir, "--control=" + control, "--export",
            "vm0=file:" + image + ",filter=dirty,dirty-bitmap=b0,dirty-granularity=64K");
    }

    private Interop.Result jnbd(String... args) {
        List<String> argv = new ArrayList<>(List.of(Interop.jnbd().toString()));
        argv.addAll(List.of(args));
        return Interop.run(T, dir, argv);
    }

    private void qemuIo(JnbdServer server, String... commands) {
        List<String> argv = new ArrayList<>(List.of("qemu-io", "-f", "raw", server.uri("vm0")));
        for (String c : commands) argv.addAll(List.of("-c", c));
        Interop.Result r = Interop.run(T, dir, argv).assertSuccess();
        assertThat(r.output()).as(r.toString()).doesNotContainIgnoringCase("failed").doesNotContainIgnoringCase("error");
    }

    /** The dirty runs {@code nbdinfo --map=qemu:dirty-bitmap:NAME} prints, as offset and length, after checking it covers the disk. */
    private List<List<Long>> dirtyRuns(JnbdServer server, String bitmap) {
        String out = Interop.run(T, dir, "nbdinfo", "--map=qemu:dirty-bitmap:" + bitmap, server.uri("vm0")).assertSuccess().output();
        List<List<Long>> dirty = new ArrayList<>();
        long at = 0;
        for (String line : out.strip().split("\n")) {
            String[] f = line.strip().split("\\s+");
            long offset = Long.parseLong(f[0]), length = Long.parseLong(f[1]), type = Long.parseLong(f[2]);
            assertThat(offset).as("extents in order, without gaps: %s", out).isEqualTo(at);
            assertThat(type).as("flags of %s", line).isIn(0L, 1L);
            if (type == 1) dirty.add(List.of(offset, length));
            at = offset + length;
        }
        assertThat(at).as("the map covers the disk: %s", out).isEqualTo(SIZE);
        return dirty;
    }

    @Test
    void nbdinfoMapsExactlyTheWrittenRangesRoundedToTheGranularity() throws Exception {
        try (JnbdServer server = serve()) {
            assertThat(dirtyRuns(server, "b0")).as("a new bitmap is clean").isEmpty();
            qemuIo(server,
                "write -P 0x44 1M 4k",         // inside block 16
                "write -P 0x55 3000000 100",   // unaligned, inside block 45
                "write -P 0x88 65535 2",       // across blocks 0 and 1
                "write -z 5M 128k",            // two blocks of zeroes
                "discard 21M 64k",             // one block trimmed
                "write -P 0x77 40M 64k");      // one whole block
            assertThat(dirtyRuns(server, "b0")).containsExactly(
                List.of(0L, 128 * K), List.of(M, 64 * K), List.of(2_949_120L, 64 * K), List.of(5 * M, 128 * K),
                List.of(21 * M, 64 * K), List.of(40 * M, 64 * K));
            NbdinfoJson info = new NbdinfoJson(Interop.run(T, dir, "nbdinfo", "--json", server.uri("vm0")).assertSuccess().output());
            assertThat(info.contexts()).containsExactly("base:allocation", "qemu:dirty-bitmap:b0");

            Interop.Result unknown = Interop.run(T, dir, "nbdinfo", "--map=qemu:dirty-bitmap:nope", server.uri("vm0"));
            assertThat(unknown.exitCode()).as("a bitmap the export has not: %s", unknown).isNotZero();
        }
    }

    @Test
    void backupsFromRotatedBitmapsBringAFullCopyUpToTheExport() throws Exception {
        Path backup = dir.resolve("backup.raw");
        try (JnbdServer server = serve()) {
            jnbd("copy", server.uri("vm0"), backup.toString()).assertSuccess();
            qemuIo(server, "write -P 0x61 3M 200k", "write -z 9M 64k", "write -P 0x62 60M 1000");
            // The checkpoint: b0 stops at this instant and b1 goes on from it.
            jnbd("bitmap", "rotate", "--control=" + control, "vm0", "b0", "b1").assertSuccess();
            String list = jnbd("bitmap", "list", "--control=" + control, "vm0").assertSuccess().output();
            assertThat(list).containsPattern("b0\\s+frozen").containsPattern("b1\\s+recording");

            Interop.Result first = jnbd("copy", "--bitmap", "b0", server.uri("vm0"), backup.toString());
            assertThat(first.exitCode()).as(first.toString()).isZero();
            // 3M+200k covers blocks 48-51 (256 KiB), 9M one block, 60M+1000 one block.
            assertThat(first.output()).contains("copied " + (384 * K) + " dirty bytes");
            assertThat(Files.mismatch(backup, image)).as("backup after b0").isEqualTo(-1L);

            qemuIo(server, "write -P 0x63 3M 4k", "discard 33M 64k", "write -P 0x64 " + (SIZE - 512) + " 512");
            jnbd("bitmap", "rotate", "--control=" + control, "vm0", "b1", "b2").assertSuccess();
            Interop.Result second = jnbd("copy", "--bitmap", "b1", server.uri("vm0"), backup.toString());
            assertThat(second.exitCode()).as(second.toString()).isZero();
            assertThat(second.output()).contains("copied " + (192 * K) + " dirty bytes");
            assertThat(Files.mismatch(backup, image)).as("backup after b1").isEqualTo(-1L);

            Interop.Result wrong = jnbd("copy", "--bitmap", "b9", server.uri("vm0"), backup.toString());
            assertThat(wrong.exitCode()).isEqualTo(1);
            assertThat(wrong.output().strip()).startsWith("jnbd: no bitmap 'b9' on ").endsWith("it has: b0, b1, b2");
        }
    }
}
