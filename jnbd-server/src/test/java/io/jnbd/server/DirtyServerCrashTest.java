package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.MetaExtent;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A server process with a dirty bitmap, written to over NBD (writes, zeroes, trims, some with FUA, FLUSH after each
 * round), killed with kill -9: reopened, the bitmap covers every request the server acknowledged, flushed or not, since
 * a mark reaches the bitmap file's page cache before the request reaches the image.
 */
@Timeout(180)
class DirtyServerCrashTest {
    static final int G = 4096, SLOT = 16 * G, ROUNDS = 30;
    static final long SIZE = (long) SLOT * ROUNDS + 777;

    @TempDir
    Path dir;

    @Test
    void everyAcknowledgedRequestIsCoveredAfterKillMinusNine() throws Exception {
        Path image = dir.resolve("vm.img");
        try (FileChannel f = FileChannel.open(image, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            f.write(java.nio.ByteBuffer.allocate(1), SIZE - 1);
        }
        String spec = "file:" + image + ",filter=dirty,dirty-bitmap=b0,dirty-granularity=4K";
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Process p = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"), DirtyServerChild.class.getName(), spec)
            .redirectError(ProcessBuilder.Redirect.DISCARD).start();
        List<long[]> acknowledged = new ArrayList<>();
        boolean[] touched = new boolean[(int) ((SIZE + G - 1) / G)];
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream()))) {
            String line = out.readLine();
            assertThat(line).as("the child's first line").startsWith("PORT ");
            int port = Integer.parseInt(line.substring(5));
            try (RawClient c = RawClient.open(new InetSocketAddress("127.0.0.1", port), "d")) {
                Random rnd = new Random(11);
                for (int r = 0; r < ROUNDS; r++) {
                    for (int i = 0; i < 5; i++) {
                        long offset = (long) r * SLOT + rnd.nextInt(SLOT - 1);
                        int length = 1 + rnd.nextInt((int) Math.min((long) (r + 1) * SLOT - offset, 3L * G));
                        int flags = rnd.nextInt(4) == 0 ? Nbd.CMD_FLAG_FUA : 0;
                        int error = switch (i % 3) {
                            case 0 -> c.write(offset, new byte[length], flags);
                            case 1 -> c.command(Nbd.CMD_WRITE_ZEROES, flags, offset, length);
                            default -> c.command(Nbd.CMD_TRIM, flags, offset, length);
                        };
                        assertThat(error).as("round %d request %d", r, i).isZero();
                        acknowledged.add(new long[] {offset, length});
                    }
                    // the last round is left unflushed: the kill finds it acknowledged but not flushed
                    if (r < ROUNDS - 1) assertThat(c.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
                }
                Throwable second = org.assertj.core.api.Assertions.catchThrowable(() -> ExportSpec.parse("d", spec).open());
                assertThat(second).as("a second server over the same bitmaps").isInstanceOf(java.io.IOException.class)
                    .hasMessageContaining("in use by another server");
                Process kill = new ProcessBuilder("kill", "-9", Long.toString(p.pid())).redirectErrorStream(true).start();
                assertThat(kill.waitFor()).as("kill -9 %d", p.pid()).isZero();
                assertThat(p.waitFor(60, TimeUnit.SECONDS)).as("the server is gone").isTrue();
                assertThat(p.exitValue()).as("killed by SIGKILL").isEqualTo(128 + 9);
            }
        } finally {
            p.destroyForcibly();
            p.waitFor(30, TimeUnit.SECONDS);
        }
        for (long[] a : acknowledged) for (long b = a[0] / G; b <= (a[0] + a[1] - 1) / G; b++) touched[(int) b] = true;

        try (Backend b = ExportSpec.parse("d", spec).open()) {
            long at = 0;
            boolean[] dirty = new boolean[touched.length];
            for (MetaExtent e : b.metaExtents("qemu:dirty-bitmap:b0", 0, SIZE)) {
                if (e.flags() == 1) for (long blk = at / G; blk <= (at + e.length() - 1) / G; blk++) dirty[(int) blk] = true;
                at += e.length();
            }
            assertThat(at).isEqualTo(SIZE);
            assertThat(dirty).as("dirty blocks are exactly those of %d acknowledged requests", acknowledged.size()).isEqualTo(touched);
        }
    }
}
