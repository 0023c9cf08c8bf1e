package io.jnbd.cli;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A copy stopped by SIGINT (Ctrl-C) or SIGTERM exits non-zero with one line saying how far it got, and the
 * prefix that line calls complete is the source's bytes.
 */
class CopyStopTest {
    private static final int SIZE = 64 << 20;

    @Test
    void sigintMidCopySaysHowFarItGot(@TempDir Path dir) throws Exception {
        stopMidCopy(dir, "INT", 130);
    }

    @Test
    void sigtermMidCopySaysHowFarItGot(@TempDir Path dir) throws Exception {
        stopMidCopy(dir, "TERM", 143);
    }

    private static void stopMidCopy(Path dir, String signal, int status) throws Exception {
        Path file = dir.resolve("src.img");
        byte[] data = new byte[SIZE];
        new Random(7).nextBytes(data);
        Files.write(file, data);
        SlowMemory slow = new SlowMemory(SIZE);
        try (NbdServer server = new NbdServer(new Exports(List.of(new Export("slow", "", slow)), "slow"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            Process p = new ProcessBuilder(ProcessHandle.current().info().command().orElseThrow(),
                "--enable-native-access=ALL-UNNAMED", "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED",
                "-cp", System.getProperty("java.class.path"), Main.class.getName(),
                "copy", "--no-progress", "--connections", "1", "--requests", "2", file.toString(),
                "nbd://127.0.0.1:" + port + "/slow").redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            try {
                // Some writes done, most still to come (each takes 50 ms, two at a time, 64 in all).
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (slow.writes.get() < 6 && System.nanoTime() < deadline && p.isAlive()) Thread.sleep(10);
                assertThat(slow.writes.get()).as("writes before the signal").isGreaterThanOrEqualTo(6);
                Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(p.pid())).start();
                assertThat(kill.waitFor(10, TimeUnit.SECONDS) && kill.exitValue() == 0).as("kill -" + signal).isTrue();
                assertThat(p.waitFor(30, TimeUnit.SECONDS)).as("the copy ended after SIG" + signal).isTrue();
                String err = new String(p.getErrorStream().readAllBytes());

                assertThat(p.exitValue()).as(err).isEqualTo(status);
                assertThat(err.strip()).as(err).hasLineCount(1).startsWith("jnbd copy: stopped before the end; copied ");
                Matcher m = Pattern.compile("copied (\\d+) of " + SIZE + " bytes .*; the first (\\d+) bytes are complete").matcher(err);
                assertThat(m.find()).as(err).isTrue();
                long copied = Long.parseLong(m.group(1)), prefix = Long.parseLong(m.group(2));
                assertThat(copied).isLessThan(SIZE);
                assertThat(prefix).isPositive().isLessThanOrEqualTo(copied);
                ByteBuffer got = ByteBuffer.allocate((int) prefix);
                slow.read(0, got);
                assertThat(Arrays.equals(got.array(), 0, (int) prefix, data, 0, (int) prefix))
                    .as("the first %d bytes of the destination are the source's", prefix).isTrue();
            } finally {
                p.destroyForcibly();
            }
        }
    }

    /** Memory whose writes each take 50 ms: a destination slow enough to stop a copy in the middle of. */
    private static final class SlowMemory extends FilterBackend {
        final AtomicInteger writes = new AtomicInteger();

        SlowMemory(long size) {
            super(new MemoryBackend(size));
        }

        @Override public String describe() { return "slow " + inner.describe(); }

        @Override
        public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            }
            inner.write(offset, src, fua);
            writes.incrementAndGet();
        }

        /** Merged writes are slow too: each buffer as its own write. */
        @Override
        public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
            long at = offset;
            for (ByteBuffer b : srcs) {
                int n = b.remaining();
                write(at, b, fua);
                at += n;
            }
        }
    }
}
