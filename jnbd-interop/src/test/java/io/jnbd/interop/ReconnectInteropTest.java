package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Reconnecting clients across restarts of a real {@code jnbd serve} process on the same port and file: killed with
 * SIGKILL (a crash) or stopped with SIGTERM, under a load of writes at QD16, plain and over TLS; then qemu's own
 * client with {@code reconnect-delay} copying across a crash. Every acknowledged write must read back.
 *
 * <p>The export is a file in the default cached mode: a write is acknowledged once it is in the page cache, which
 * SIGKILL leaves alone (CrashInteropTest checks the server keeps nothing of it to itself), so acknowledged writes
 * survive the crash of the process; a crash of the machine keeps only what a FLUSH or FUA covered.
 */
@Timeout(300)
class ReconnectInteropTest {

    private static final int BLOCK = 4096;
    private static final int BLOCKS = 8192; // 32 MiB
    private static final int DEPTH = 16;
    private static final int RESTARTS = 2;
    private static final Duration T = Duration.ofSeconds(120);

    @TempDir
    Path dir;
    private volatile JnbdServer server;
    private List<String> serverArgs;
    private TlsFiles tls;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        if (server != null) server.kill();
    }

    private void start(boolean tlsOn, String exportSpec) throws Exception {
        serverArgs = new ArrayList<>(List.of("--export", "disk=" + exportSpec));
        if (tlsOn) {
            tls = new TlsFiles(dir.resolve("pki"));
            serverArgs.addAll(List.of("--tls", "require", "--tls-psk", tls.psk.toString()));
        }
        server = JnbdServer.start(dir, serverArgs.toArray(String[]::new));
    }

    /** The same command line again, on the same port: the restart a supervisor would do. */
    private void startAgain() throws Exception {
        List<String> command = new ArrayList<>(List.of(Interop.jnbd().toString(), "serve",
            "--listen", "127.0.0.1:" + server.port()));
        command.addAll(serverArgs);
        server = JnbdServer.start(dir, server.port(), command);
    }

    private void crashAndRestart() throws Exception {
        long pid = server.pid();
        server.kill9();
        assertThat(server.awaitExit(Duration.ofSeconds(30))).as("exit of pid %d after SIGKILL", pid).hasValue(137);
        startAgain();
    }

    private void stopAndRestart() throws Exception {
        long pid = server.pid();
        assertThat(server.stop()).as("exit status of pid %d after SIGTERM (-1: it had to be killed)", pid).isNotEqualTo(-1);
        startAgain();
    }

    private NbdUri uri() {
        String plain = "nbd://127.0.0.1:" + server.port() + "/disk";
        return NbdUri.parse(tls == null ? plain : TlsFiles.pskUri(server.port(), "disk", "alice", tls.psk));
    }

    private interface Restart {
        void run() throws Exception;
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"plain", "tls"})
    void everyAcknowledgedWriteReadsBackAcrossSigkillAndRestart(String transport) throws Exception {
        start(transport.equals("tls"), "file:" + dir.resolve("disk.img") + ",size=32M");
        writeUnderRestarts(this::crashAndRestart);
    }

    @Test
    void everyAcknowledgedWriteReadsBackAcrossSigtermAndRestart() throws Exception {
        start(false, "file:" + dir.resolve("disk.img") + ",size=32M");
        writeUnderRestarts(this::stopAndRestart);
    }

    /**
     * Writes every block once, a pattern of its own, at QD16 in random order, while {@code restart} runs
     * {@link #RESTARTS} times at even steps of the progress; then a client of its own reads every block back.
     */
    private void writeUnderRestarts(Restart restart) throws Exception {
        List<Integer> order = new ArrayList<>();
        for (int b = 0; b < BLOCKS; b++) order.add(b);
        Collections.shuffle(order, new Random(36));
        ClientOptions options = ClientOptions.defaults().withReconnect(Duration.ofSeconds(60)).withRequestsInFlight(DEPTH);
        AtomicInteger acked = new AtomicInteger();
        AtomicLong longestNanos = new AtomicLong();
        List<Throwable> failures = new CopyOnWriteArrayList<>();
        try (NbdClient c = NbdClient.connect(uri(), options)) {
            Thread restarts = Thread.ofPlatform().name("restarts").start(() -> {
                try {
                    for (int i = 1; i <= RESTARTS; i++) {
                        while (acked.get() < i * BLOCKS / (RESTARTS + 1) && failures.isEmpty()) Thread.sleep(1);
                        if (!failures.isEmpty()) return;
                        restart.run();
                    }
                } catch (Exception | AssertionError e) {
                    failures.add(e);
                }
            });
            Semaphore window = new Semaphore(DEPTH);
            for (int b : order) {
                if (!window.tryAcquire(T.toSeconds(), TimeUnit.SECONDS)) throw new AssertionError("no write completed within " + T);
                long start = System.nanoTime();
                c.write((long) b * BLOCK, pattern(b), false).whenComplete((v, e) -> {
                    longestNanos.accumulateAndGet(System.nanoTime() - start, Math::max);
                    if (e != null) failures.add(e);
                    else acked.incrementAndGet();
                    window.release();
                });
            }
            assertThat(window.tryAcquire(DEPTH, T.toSeconds(), TimeUnit.SECONDS)).as("the last writes completed").isTrue();
            restarts.join(T.toMillis());
            assertThat(failures).isEmpty();
            assertThat(restarts.isAlive()).isFalse();
            assertThat(acked.get()).isEqualTo(BLOCKS);
        }
        System.out.printf("reconnect: %d writes at QD%d across %d restarts, longest write %d ms%n",
            BLOCKS, DEPTH, RESTARTS, TimeUnit.NANOSECONDS.toMillis(longestNanos.get()));
        try (NbdClient check = NbdClient.connect(uri(), ClientOptions.defaults())) {
            ByteBuffer got = ByteBuffer.allocateDirect(BLOCK);
            for (int b = 0; b < BLOCKS; b++) {
                check.read((long) b * BLOCK, got.clear()).join();
                assertThat(got.flip()).as("block %d", b).isEqualTo(pattern(b));
            }
        }
    }

    /** {@code jnbd bench --reconnect-delay} writing at QD8 through a SIGKILL and restart: no request fails. */
    @Test
    void benchWithReconnectDelayWritesThroughACrash() throws Exception {
        start(false, "file:" + dir.resolve("disk.img") + ",size=32M");
        Path log = dir.resolve("bench.log");
        ProcessBuilder builder = new ProcessBuilder(Interop.jnbd().toString(), "bench", "--no-progress", "--rw", "randwrite",
            "--depth", "8", "--duration", "8", "--reconnect-delay", "60", "nbd://127.0.0.1:" + server.port() + "/disk")
            .redirectErrorStream(true).redirectOutput(log.toFile());
        builder.environment().put("JNBD_NO_BUILD", "1");
        Process bench = builder.start();
        try {
            long deadline = System.nanoTime() + T.toNanos();
            while (bench.isAlive() && !server.log().contains("connected to export 'disk'") && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertThat(bench.isAlive()).as("bench running when the server is killed: %s", Files.readString(log)).isTrue();
            crashAndRestart();
            assertThat(bench.waitFor(T.toSeconds(), TimeUnit.SECONDS)).as("bench ended").isTrue();
            String out = Files.readString(log);
            assertThat(bench.exitValue()).as(out).isZero();
            assertThat(out).contains("randwrite bs=4096 depth=8", "throughput", "latency us:").doesNotContain("failed");
            System.out.print(out);
        } finally {
            bench.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
    }

    private static ByteBuffer pattern(int block) {
        byte[] b = new byte[BLOCK];
        new Random(block * 7919L + 36).nextBytes(b);
        return ByteBuffer.allocateDirect(BLOCK).put(b).flip();
    }

    /**
     * qemu-img convert into the export with {@code reconnect-delay} in its --target-image-opts while the server is
     * killed and started again: the copy completes and the file holds the source. One coroutine and slow writes
     * (delay-write) keep the copy going for seconds, so that the kill lands in its middle.
     */
    @Test
    void qemuImgConvertWithReconnectDelayRidesOutASigkill() throws Exception {
        Interop.requireCommands("qemu-img");
        Path source = dir.resolve("src.img");
        Interop.writeRandomImage(source, 64L << 20, 36);
        Path image = dir.resolve("disk.img");
        start(false, "file:" + image + ",size=64M,filter=delay,delay-write=100ms");
        String target = "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=" + server.port()
            + ",export=disk,reconnect-delay=60";
        Path log = dir.resolve("qemu-img.log");
        Process qemu = new ProcessBuilder("qemu-img", "convert", "-n", "-m", "1", "-f", "raw", "--target-image-opts",
            source.toString(), target)
            .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        try {
            byte[] head = new byte[1 << 20];
            try (var in = Files.newInputStream(source)) {
                in.readNBytes(head, 0, head.length);
            }
            long deadline = System.nanoTime() + T.toNanos();
            while (qemu.isAlive() && !startsWith(image, head) && System.nanoTime() < deadline) Thread.sleep(5);
            assertThat(qemu.isAlive()).as("qemu-img still copying when the server is killed; its output: %s",
                Files.readString(log)).isTrue();
            crashAndRestart();
            assertThat(qemu.waitFor(T.toSeconds(), TimeUnit.SECONDS)).as("qemu-img ended").isTrue();
            assertThat(qemu.exitValue()).as("qemu-img's exit; its output: %s", Files.readString(log)).isZero();
        } finally {
            qemu.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        // The server writes through the page cache: the file as any reader sees it is what was acknowledged.
        assertThat(Files.mismatch(source, image)).as("first differing byte").isEqualTo(-1);
    }

    private static boolean startsWith(Path file, byte[] head) throws java.io.IOException {
        try (var in = Files.newInputStream(file)) {
            return java.util.Arrays.equals(in.readNBytes(head.length), head);
        }
    }
}
