package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.ExportListing;
import io.jnbd.client.NbdClient;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/**
 * A reload (what SIGHUP runs: {@link Serving#reload}) while a client writes and reads back on another export:
 * exports are added, changed and removed, a broken file is refused whole, and the client never notices.
 */
@Timeout(120)
class ReloadTest {
    @TempDir
    Path dir;

    private static final int BLOCK = 64 << 10, SLOTS = 64;

    /** Writes a block, reads it back and compares, round after round; remembers the first failure. */
    static final class Writer extends Thread {
        final NbdClient client;
        final AtomicLong rounds = new AtomicLong();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final long[] written = new long[SLOTS]; // the round whose bytes each slot holds, 0 for none
        volatile boolean stop;

        Writer(NbdClient client) {
            super("io-on-a");
            this.client = client;
        }

        static byte[] content(long round) {
            byte[] b = new byte[BLOCK];
            new java.util.Random(round).nextBytes(b);
            return b;
        }

        @Override
        public void run() {
            try {
                ByteBuffer back = ByteBuffer.allocateDirect(BLOCK);
                for (long round = 1; !stop; round++) {
                    int slot = (int) (round % SLOTS);
                    byte[] data = content(round);
                    client.blocking().write((long) slot * BLOCK, ByteBuffer.wrap(data), false);
                    written[slot] = round;
                    client.blocking().read((long) slot * BLOCK, back.clear());
                    byte[] got = new byte[BLOCK];
                    back.flip().get(got);
                    if (!Arrays.equals(got, data)) throw new AssertionError("slot " + slot + " read back other bytes in round " + round);
                    rounds.incrementAndGet();
                }
            } catch (Throwable t) {
                failure.set(t);
            }
        }

        /** Waits until a few more rounds have completed, so that I/O runs between one reload and the next. */
        void awaitProgress() throws InterruptedException {
            long target = rounds.get() + 3;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (rounds.get() < target && failure.get() == null && System.nanoTime() < deadline) Thread.sleep(2);
            assertThat(failure.get()).as("the client on export a").isNull();
            assertThat(rounds.get()).as("rounds of I/O on a").isGreaterThanOrEqualTo(target);
        }
    }

    @Test
    void exportsComeChangeAndGoUnderAClientThatNeverNotices() throws Exception {
        Path file = dir.resolve("jnbd.toml");
        config(file, "b = \"memory:4M,description=first\"");
        CommandLine command = new CommandLine(new ServeCommand());
        command.parseArgs("--config", file.toString());
        Serving serving = Serving.open(command.getCommandSpec(), ServeSettings.resolve(command.getCommandSpec(), file));
        try {
            assertThat(serving.listen()).isTrue();
            String base = "nbd://127.0.0.1:" + ((InetSocketAddress) serving.bound().getFirst()).getPort() + "/";
            Writer onA = new Writer(NbdClient.connect(base + "a"));
            onA.start();
            try (NbdClient onB = NbdClient.connect(base + "b")) {
                byte[] mark = Writer.content(-1);
                onB.blocking().write(0, ByteBuffer.wrap(mark), false);
                onA.awaitProgress();

                config(file, "b = \"memory:4M,streams=8,description=second\"");
                Serving.Reload changed = serving.reload();
                assertThat(changed.applied()).as(changed.message()).isTrue();
                assertThat(changed.message()).contains("changed b (for new connections)");
                try (NbdClient newB = NbdClient.connect(base + "b")) {
                    assertThat(newB.info().description()).isEqualTo("second");
                    assertThat(read(newB, 0)).as("b kept its backend, and its data").isEqualTo(mark);
                }
                onA.awaitProgress();

                config(file, 128, "b = \"memory:4M,streams=8,description=second\"", "c = \"memory:2M\"");
                Serving.Reload added = serving.reload();
                assertThat(added.message()).contains("added c").doesNotContain("changed");
                assertThat(added.needRestart()).containsExactly("backlog");
                assertThat(changed.needRestart()).isEmpty();
                try (NbdClient onC = NbdClient.connect(base + "c")) {
                    assertThat(onC.size()).isEqualTo(2 << 20);
                }
                onA.awaitProgress();

                config(file, "c = \"memory:2M\"");
                Serving.Reload removed = serving.reload();
                assertThat(removed.message()).contains("removed b");
                assertThatThrownBy(() -> NbdClient.connect(base + "b")).as("a new client of b")
                    .hasMessageContaining("unknown export 'b'");
                assertThat(NbdClient.list(URI.create(base))).extracting(ExportListing::name).containsExactly("a", "c");
                byte[] more = Writer.content(-2);
                onB.blocking().write(BLOCK, ByteBuffer.wrap(more), false);
                assertThat(read(onB, 0)).as("b's client goes on").isEqualTo(mark);
                assertThat(read(onB, BLOCK)).isEqualTo(more);
                onA.awaitProgress();

                config(file, "d = \"memory:2M\"", "[export.e]", "memory = \"1M\"", "colour = \"red\"");
                Serving.Reload broken = serving.reload();
                assertThat(broken.applied()).isFalse();
                assertThat(broken.message()).contains("refused, the exports stay as they were", file + ":6: export 'e': unknown option 'colour'");
                assertThat(NbdClient.list(URI.create(base))).extracting(ExportListing::name).containsExactly("a", "c");
                assertThatThrownBy(() -> NbdClient.connect(base + "d")).hasMessageContaining("unknown export 'd'");
                NbdClient.connect(base + "c").close();
                assertThat(read(onB, BLOCK)).isEqualTo(more);
                onA.awaitProgress();

                Files.writeString(file, "backlog = \"x\"\n[export]\na = \"memory:16M\"\n");
                Serving.Reload badValue = serving.reload();
                assertThat(badValue.applied()).isFalse();
                assertThat(badValue.message()).endsWith(file + ":1: backlog: expected a positive integer, got \"x\"");
                assertThat(NbdClient.list(URI.create(base))).extracting(ExportListing::name).containsExactly("a", "c");
                onA.awaitProgress();
            }
            onA.stop = true;
            onA.join();
            assertThat(onA.failure.get()).isNull();
            for (int slot = 0; slot < SLOTS; slot++) {
                if (onA.written[slot] != 0) assertThat(read(onA.client, (long) slot * BLOCK)).isEqualTo(Writer.content(onA.written[slot]));
            }
            onA.client.close();
        } finally {
            serving.server().stop(Duration.ofSeconds(5));
        }
    }

    @Test
    void withoutAConfigFileThereIsNothingToReload() throws Exception {
        CommandLine command = new CommandLine(new ServeCommand());
        command.parseArgs("--listen", "127.0.0.1:0", "--export", "m=memory:1M");
        Serving serving = Serving.open(command.getCommandSpec(), ServeSettings.resolve(command.getCommandSpec(), null));
        try {
            Serving.Reload r = serving.reload();
            assertThat(r.applied()).isFalse();
            assertThat(r.message()).contains("no --config file");
        } finally {
            serving.server().stop(Duration.ofSeconds(5));
        }
    }

    /** Export a, always the same, then {@code lines} of the [export] table. */
    private static void config(Path file, String... lines) throws IOException {
        config(file, 64, lines);
    }

    private static void config(Path file, int backlog, String... lines) throws IOException {
        Files.writeString(file, "listen = [\"127.0.0.1:0\"]\nbacklog = " + backlog + "\n[export]\na = \"memory:16M\"\n"
            + String.join("\n", lines) + "\n");
    }

    private static byte[] read(NbdClient client, long offset) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(BLOCK);
        client.blocking().read(offset, b);
        return b.array();
    }
}
