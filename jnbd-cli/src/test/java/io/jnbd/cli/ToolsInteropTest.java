package io.jnbd.cli;

import io.jnbd.client.Peer;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/** info, copy and cmp against nbdkit and qemu-nbd started by the test. */
class ToolsInteropTest {

    private final List<Peer> peers = new ArrayList<>();

    private Peer nbdkit(String... args) throws Exception {
        Peer.assumeInterop("nbdkit");
        int port = Peer.freePort();
        Peer p = Peer.start(port, Peer.nbdkit(port, args));
        peers.add(p);
        return p;
    }

    /** Kills {@code peer} (SIGKILL, by PID) after {@code millis}, on a thread of its own, while a copy runs. */
    private static Thread killAfter(Peer peer, long millis) {
        return Thread.ofPlatform().start(() -> {
            try {
                Thread.sleep(millis);
                peer.kill();
            } catch (InterruptedException ignored) {
                // Test is over.
            }
        });
    }

    @AfterEach
    void stop() throws Exception {
        for (Peer p : peers) p.close();
    }

    @Test
    void infoJsonAndList() throws Exception {
        Peer p = nbdkit("--filter=exportname", "memory", "size=8M", "exportname=alpha", "exportname=beta",
            "exportname-list=explicit");
        Run json = Run.jnbd("info", "--json", p.uri("alpha"));
        assertThat(json.exit()).as(json.toString()).isZero();
        assertThat(json.out()).contains("\"size\": 8388608", "\"export\": \"alpha\"", "\"flags\": [", "\"block_size\": {")
            .startsWith("{");
        Run text = Run.jnbd("info", p.uri("alpha"));
        assertThat(text.out()).contains("size:", "8388608", "SEND_FLUSH");
        Run list = Run.jnbd("info", "--list", p.uri(""));
        assertThat(list.out().lines()).containsExactly("alpha", "beta");
        Run listJson = Run.jnbd("info", "--list", "--json", p.uri(""));
        assertThat(listJson.out()).contains("{\"name\": \"alpha\"", "{\"name\": \"beta\"");
    }

    @Test
    void unknownExportIsOneLine(@TempDir Path dir) throws Exception {
        Peer.assumeInterop("qemu-nbd");
        Path file = dir.resolve("disk.img");
        Files.write(file, new byte[1 << 20]);
        int port = Peer.freePort();
        Peer q = Peer.start(port, List.of("qemu-nbd", "-f", "raw", "-x", "disk", "-b", "127.0.0.1", "-p",
            String.valueOf(port), "-t", file.toString()));
        peers.add(q);
        Run r = Run.jnbd("info", q.uri("nosuch"));
        assertThat(r.exit()).isNotZero();
        assertThat(r.err().strip().lines().count()).as(r.toString()).isEqualTo(1);
        assertThat(r.err()).contains("unknown export 'nosuch'");
        assertThat(Run.jnbd("info", q.uri("disk")).exit()).isZero();
    }

    @Test
    void copyRoundTripsThroughFilesAndExports(@TempDir Path dir) throws Exception {
        Peer pattern = nbdkit("pattern", "size=48M");
        Peer memory = nbdkit("memory", "size=48M");
        Path file = dir.resolve("copy.img");
        Run down = Run.jnbd("copy", pattern.uri(""), file.toString());
        assertThat(down.exit()).as(down.toString()).isZero();
        assertThat(down.err()).as("silent when not on a terminal").isEmpty();
        byte[] bytes = Files.readAllBytes(file);
        java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(bytes);
        for (int i = 0; i < bytes.length; i += 8) assertThat(b.getLong(i)).isEqualTo(i);

        Run up = Run.jnbd("copy", "--connections", "2", "--requests", "4", file.toString(), memory.uri(""));
        assertThat(up.exit()).as(up.toString()).isZero();
        assertThat(Run.jnbd("cmp", pattern.uri(""), memory.uri("")).exit()).isZero();
        assertThat(Run.jnbd("cmp", file.toString(), memory.uri("")).exit()).isZero();

        Peer empty = nbdkit("memory", "size=48M");
        Run differ = Run.jnbd("cmp", pattern.uri(""), empty.uri(""));
        assertThat(differ.exit()).isEqualTo(1);
        // Word 0 holds offset 0 (all zero bytes); word 1 holds 8, whose last big-endian byte is the first nonzero one.
        assertThat(differ.out()).contains("first difference at offset 15");
    }

    @Test
    void copyOfFailingReadsExitsNonZeroNamingTheError(@TempDir Path dir) throws Exception {
        Peer failing = nbdkit("--filter=error", "pattern", "size=64M", "error=EIO", "error-pread-rate=100%");
        Run r = Run.jnbd("copy", failing.uri(""), dir.resolve("out.img").toString());
        assertThat(r.exit()).isNotZero();
        assertThat(r.err()).contains("EIO", "READ", "copied 0 of 67108864 bytes");
        Run cmp = Run.jnbd("cmp", failing.uri(""), failing.uri(""));
        assertThat(cmp.exit()).isEqualTo(2);
        assertThat(cmp.err()).contains("EIO");
    }

    @Test
    void serverKilledMidCopyEndsTheCopyPromptly(@TempDir Path dir) throws Exception {
        Peer slow = nbdkit("--filter=delay", "pattern", "size=1G", "rdelay=200ms");
        Thread killer = killAfter(slow, 1500);
        long start = System.nanoTime();
        Run r = Run.jnbd("copy", slow.uri(""), dir.resolve("out.img").toString());
        Duration took = Duration.ofNanos(System.nanoTime() - start);
        killer.join();
        assertThat(r.exit()).isNotZero();
        assertThat(r.err()).contains("failed at offset", "connection to", "copied").hasLineCount(1);
        assertThat(took).isLessThan(Duration.ofSeconds(10));
    }

    /** The sparse-aware copy reads only the data nbdkit's sparse-random plugin reports (10% by default). */
    @Test
    void sparseRandomCopyReadsWellUnderThirtyPercent(@TempDir Path dir) throws Exception {
        Path stats = dir.resolve("stats.txt");
        Peer sparse = nbdkit("--filter=stats", "sparse-random", "size=1G", "seed=1", "statsfile=" + stats);
        Path out = dir.resolve("sparse.img");
        Run r = Run.jnbd("copy", sparse.uri(""), out.toString());
        assertThat(r.exit()).as(r.toString()).isZero();
        sparse.close(); // the stats filter writes its file on exit
        String text = Files.readString(stats);
        long size = 1L << 30;
        long read = bytesRead(text);
        System.out.printf("sparse-random 1G: copy read %d bytes = %.2f%% of the export%n", read, 100.0 * read / size);
        assertThat(read).isPositive().isLessThan((long) (size * 0.30));
        assertThat(Files.size(out)).isEqualTo(size);
    }

    /** Zero ranges reach an NBD destination as WRITE_ZEROES, not as written zeroes. */
    @Test
    void sparseCopyToAnExportWritesZeroesAsWriteZeroes(@TempDir Path dir) throws Exception {
        Path stats = dir.resolve("stats.txt");
        // (sparse-random lays data out in long runs: at 256M some seeds give no data at all.)
        Peer sparse = nbdkit("sparse-random", "size=1G", "seed=1");
        Peer target = nbdkit("--filter=stats", "memory", "size=1G", "statsfile=" + stats);
        Run r = Run.jnbd("copy", sparse.uri(""), target.uri(""));
        assertThat(r.exit()).as(r.toString()).isZero();
        assertThat(Run.jnbd("cmp", sparse.uri(""), target.uri("")).exit()).isZero();
        target.close();
        String text = Files.readString(stats);
        long written = bytesOf(text, "write");
        long zeroed = bytesOf(text, "zero");
        assertThat(written).isPositive().isLessThan((long) ((1L << 30) * 0.30));
        assertThat(zeroed).isGreaterThan((long) ((1L << 30) * 0.5));
    }

    /**
     * Between two servers the data is spliced socket to socket (and, with --no-splice, passed through buffers):
     * both copies exact, and data that reads as zeroes still reaches the destination as WRITE_ZEROES, since
     * a chunk whose first 4 KiB are zeroes is read and looked at.
     */
    @Test
    void copyBetweenTwoServersIsExactWithAndWithoutSplice(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("src.img");
        byte[] data = new byte[48 << 20];
        new java.util.Random(5).nextBytes(data);
        java.util.Arrays.fill(data, 8 << 20, 16 << 20, (byte) 0); // written zeroes: allocated, so reported as data
        Files.write(file, data);
        Peer src = nbdkit("file", "file=" + file);
        for (String splice : new String[]{"--splice", "--no-splice"}) {
            Path stats = dir.resolve("stats" + splice + ".txt");
            Peer dst = nbdkit("--filter=stats", "memory", "size=48M", "statsfile=" + stats);
            Run r = Run.jnbd("copy", splice, src.uri(""), dst.uri(""));
            assertThat(r.exit()).as(r.toString()).isZero();
            Run cmp = Run.jnbd("cmp", file.toString(), dst.uri(""));
            assertThat(cmp.exit()).as(splice + ": " + cmp).isZero();
            dst.close();
            String text = Files.readString(stats);
            assertThat(bytesOf(text, "zero")).as(splice + " WRITE_ZEROES bytes").isGreaterThanOrEqualTo(8L << 20);
            assertThat(bytesOf(text, "write")).as(splice + " WRITE bytes").isEqualTo((40L << 20));
        }
    }

    /** A destination killed while data is being spliced into it: the copy fails at once, in one line. */
    @Test
    void destinationKilledMidSpliceEndsTheCopyPromptly(@TempDir Path dir) throws Exception {
        Peer src = nbdkit("pattern", "size=1G");
        Peer slow = nbdkit("--filter=delay", "memory", "size=1G", "wdelay=200ms");
        Thread killer = killAfter(slow, 1500);
        long start = System.nanoTime();
        Run r = Run.jnbd("copy", src.uri(""), slow.uri(""));
        Duration took = Duration.ofNanos(System.nanoTime() - start);
        killer.join();
        assertThat(r.exit()).as(r.toString()).isEqualTo(1);
        assertThat(r.err()).contains("failed at offset", "copied").hasLineCount(1);
        assertThat(took).isLessThan(Duration.ofSeconds(10));
    }

    /** The byte count of the "read:" line, e.g. {@code read: 41 ops, 0.002 s, 77.93 MiB, ...}. */
    static long bytesRead(String stats) {
        return bytesOf(stats, "read");
    }

    /** The byte count of the line for {@code op} (read, write, zero, trim...) in nbdkit's stats file; 0 if absent. */
    static long bytesOf(String stats, String op) {
        Matcher m = Pattern.compile("(?m)^" + op + ": \\d+ ops, [\\d.]+ s, ([\\d.]+) (B|KiB|MiB|GiB|TiB)\\b").matcher(stats);
        if (!m.find()) {
            if (!stats.contains(op + ":")) return 0;
            throw new AssertionError("no " + op + " line in stats:\n" + stats);
        }
        double v = Double.parseDouble(m.group(1));
        int shift = switch (m.group(2)) {
            case "B" -> 0;
            case "KiB" -> 10;
            case "MiB" -> 20;
            case "GiB" -> 30;
            default -> 40;
        };
        return (long) (v * (1L << shift));
    }
}
