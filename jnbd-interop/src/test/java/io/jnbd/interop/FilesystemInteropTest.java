package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HexFormat;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real filesystem on a jnbd export: nbdfuse exposes the export as a file, a loop device turns the
 * file into a block device, and ext4 lives on it. The tree copied in must come back bit for bit after
 * the whole stack is torn down and rebuilt, and fsck must find the filesystem clean.
 */
@Timeout(600)
class FilesystemInteropTest {

    private static final Duration T = Duration.ofSeconds(180);

    @TempDir
    Path dir;
    JnbdServer server;
    /** Undo steps, run last-in first-out even when the test fails half way. */
    final Deque<Cleanup> cleanups = new ArrayDeque<>();

    interface Cleanup {
        void run() throws Exception;
    }

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
        Interop.requireCommands("nbdfuse", "fusermount3", "losetup", "mkfs.ext4", "fsck.ext4", "mount", "umount");
        assumeTrue(Files.exists(Path.of("/dev/fuse")), "/dev/fuse is missing: skipping the ext4 round trip");
        assumeTrue(Files.exists(Path.of("/dev/loop-control")),
            "/dev/loop-control is missing (no loop devices): skipping the ext4 round trip");
        assumeTrue(Interop.isRoot(), "not root (losetup and mount need it): skipping the ext4 round trip");
    }

    @AfterEach
    void tearDown() throws Exception {
        while (!cleanups.isEmpty()) {
            try {
                cleanups.pop().run();
            } catch (Exception | AssertionError e) {
                System.err.println("cleanup: " + e);
            }
        }
        if (server != null) server.stop();
    }

    /** Both data paths, and the sorted scheduler with split reads, must keep a filesystem intact. */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"mode=cached", "mode=direct", "mode=direct,scheduler=sorted,split=128K,chunk=32K,streams=4",
        "mode=cached,scheduler=sorted"})
    void ext4RoundTripThroughNbdfuseAndLoop(String options) throws Exception {
        Path image = dir.resolve("fs.img");
        server = JnbdServer.start(dir, "--export", "fs=file:" + image + ",size=128M," + options);
        roundTrip(image, server.uri("fs"));
    }

    /**
     * The same over TLS ({@code --tls require}). nbdfuse's libnbd refuses {@code ?tls-certificates=} in the URI (a
     * local file), and as root it looks for the CA in /etc/pki/libnbd: the test puts it there for its own duration,
     * and only where that directory does not exist already, so that an administrator's is never touched.
     */
    @Test
    void ext4RoundTripOverTls() throws Exception {
        Path system = Path.of("/etc/pki/libnbd");
        assumeTrue(!Files.exists(system), "/etc/pki/libnbd exists: not replacing it for the test");
        TlsFiles tls = new TlsFiles(dir.resolve("pki"));
        Path pki = system.getParent();
        boolean madePki = !Files.exists(pki);
        Files.createDirectories(system);
        cleanups.push(() -> {
            Files.deleteIfExists(system.resolve("ca-cert.pem"));
            Files.deleteIfExists(system);
            if (madePki) Files.deleteIfExists(pki);
        });
        Files.copy(tls.caOnly.resolve("ca-cert.pem"), system.resolve("ca-cert.pem"));
        Path image = dir.resolve("fs.img");
        server = JnbdServer.start(dir, "--tls", "require", "--tls-certificates", tls.server.toString(),
            "--export", "fs=file:" + image + ",size=128M");
        roundTrip(image, "nbds://127.0.0.1:" + server.port() + "/fs");
        assertThat(server.log()).contains("connected to export 'fs'", "TLS TLSv1.3");
    }

    /**
     * ext4 on a client's cow overlay (cow-overlay=client): the filesystem lives in overlay pc1 alone; the base file
     * stays as it was (all zeroes) and another client's overlay still reads it.
     */
    @Test
    void ext4RoundTripOnAPerClientCowOverlay() throws Exception {
        Path base = dir.resolve("base.img");
        try (var f = java.nio.channels.FileChannel.open(base, java.nio.file.StandardOpenOption.CREATE_NEW,
                java.nio.file.StandardOpenOption.WRITE)) {
            f.truncate(0).write(java.nio.ByteBuffer.allocate(1), (128L << 20) - 1);
        }
        server = JnbdServer.start(dir, "--export", "fs=file:" + base + ",filter=cow,cow-overlay=client,cow-dir=" + dir.resolve("cow"));
        roundTrip(null, server.uri("fs/pc1"));
        try (var in = Files.newInputStream(base)) {
            byte[] buffer = new byte[1 << 20];
            for (int n; (n = in.read(buffer)) > 0; ) {
                for (int i = 0; i < n; i++) assertThat(buffer[i]).as("a byte of the base").isZero();
            }
        }
        Path other = dir.resolve("pc2.img");
        Interop.run(T, dir, "nbdcopy", server.uri("fs/pc2"), other.toString()).assertSuccess();
        assertThat(Files.mismatch(base, other)).as("another client's overlay reads the base").isEqualTo(-1L);
    }

    /**
     * Make ext4 on {@code uri} through nbdfuse and a loop device, fill it, check it, mount it again and compare;
     * {@code image}, the file the export writes to, is checked too where there is one (a cow overlay's base is not it).
     */
    private void roundTrip(Path image, String uri) throws Exception {
        Path tree = dir.resolve("tree");
        generateTree(tree, 7);
        Map<String, String> expected = checksums(tree);
        assertThat(expected).hasSizeGreaterThan(100);

        Path fuseDir = Files.createDirectories(dir.resolve("fuse"));
        Path mnt = Files.createDirectories(dir.resolve("mnt"));

        // 1. attach, make the filesystem, copy the tree in, unmount
        String loop = attach(fuseDir, uri);
        run("mkfs.ext4", "-q", "-F", loop);
        mount(loop, mnt);
        copyTree(tree, mnt.resolve("tree"));
        run("sync");
        unmount(mnt);
        Interop.Result fsck = Interop.run(T, dir, "fsck.ext4", "-fn", loop);
        assertThat(fsck.exitCode()).as("fsck.ext4 -fn through the loop device: " + fsck).isZero();
        detach();

        // 2. every layer is gone: what the server wrote to its file must be a clean filesystem
        if (image != null) {
            Interop.Result fsckImage = Interop.run(T, dir, "fsck.ext4", "-fn", image.toString());
            assertThat(fsckImage.exitCode()).as("fsck.ext4 -fn of the export's backing file: " + fsckImage).isZero();
        }

        // 3. attach again from scratch, mount, compare every file
        loop = attach(fuseDir, uri);
        mount(loop, mnt);
        assertThat(checksums(mnt.resolve("tree"))).isEqualTo(expected);
        unmount(mnt);
        detach();
    }

    /** nbdfuse the export at {@code uri} into fuseDir/nbd, losetup it; returns the loop device. */
    private String attach(Path fuseDir, String uri) throws Exception {
        Path file = fuseDir.resolve("nbd");
        Process nbdfuse = new ProcessBuilder("nbdfuse", fuseDir.toString(), uri)
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("nbdfuse.log").toFile()))
            .start();
        cleanups.push(() -> {
            if (nbdfuse.isAlive()) {
                // the loop device may let go of the file a moment after losetup -d returns
                for (int attempt = 0; attempt < 20; attempt++) {
                    if (Interop.run(T, dir, "fusermount3", "-u", fuseDir.toString()).exitCode() == 0) break;
                    Thread.sleep(500);
                }
                if (!nbdfuse.waitFor(20, TimeUnit.SECONDS)) {
                    nbdfuse.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                    Interop.run(T, dir, "fusermount3", "-uz", fuseDir.toString());
                }
            }
        });
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!Files.exists(file)) {
            if (!nbdfuse.isAlive()) fail("nbdfuse exited with %d:%n%s", nbdfuse.exitValue(),
                Files.readString(dir.resolve("nbdfuse.log")));
            if (System.nanoTime() > deadline) fail("nbdfuse did not create %s within 30s", file);
            Thread.sleep(100);
        }
        assertThat(Files.size(file)).isEqualTo(128L << 20);
        String loop = run("losetup", "-f", "--show", file.toString()).output().strip();
        assertThat(loop).startsWith("/dev/loop");
        cleanups.push(() -> Interop.run(T, dir, "losetup", "-d", loop));
        return loop;
    }

    /** Runs the cleanups pushed by attach: loop device, then nbdfuse. */
    private void detach() throws Exception {
        cleanups.pop().run();
        cleanups.pop().run();
    }

    private void mount(String loop, Path mnt) throws Exception {
        run("mount", "-t", "ext4", loop, mnt.toString());
        cleanups.push(() -> {
            if (Interop.run(T, dir, "umount", mnt.toString()).exitCode() != 0) {
                Interop.run(T, dir, "umount", "-l", mnt.toString());
            }
        });
    }

    private void unmount(Path mnt) throws Exception {
        run("umount", mnt.toString());
        cleanups.pop();
    }

    private Interop.Result run(String... command) {
        return Interop.run(T, dir, command).assertSuccess();
    }

    /** About 10 MB in nested directories: many small files, some empty, a few large. */
    static void generateTree(Path root, long seed) throws IOException {
        Random random = new Random(seed);
        for (int d = 0; d < 8; d++) {
            Path sub = Files.createDirectories(root.resolve("dir" + d).resolve("sub" + (d % 3)));
            for (int f = 0; f < 20; f++) {
                int size = switch (f % 5) {
                    case 0 -> 0;
                    case 1 -> random.nextInt(100);
                    case 2 -> random.nextInt(4096);
                    case 3 -> 4096 * (1 + random.nextInt(16));
                    default -> random.nextInt(128 * 1024);
                };
                byte[] data = new byte[size];
                random.nextBytes(data);
                Files.write(sub.resolve("file" + f + ".bin"), data);
            }
        }
        for (int big = 0; big < 3; big++) {
            byte[] data = new byte[(2 << 20) + random.nextInt(1 << 20)];
            random.nextBytes(data);
            Files.write(root.resolve("big" + big + ".bin"), data);
        }
    }

    static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> paths = Files.walk(from)) {
            for (Path path : (Iterable<Path>) paths::iterator) {
                Path target = to.resolve(from.relativize(path).toString());
                if (Files.isDirectory(path)) {
                    Files.createDirectories(target);
                } else {
                    Files.copy(path, target);
                }
            }
        }
    }

    /** relative path -> sha256 of every regular file under root */
    static Map<String, String> checksums(Path root) throws Exception {
        Map<String, String> sums = new TreeMap<>();
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path path : (Iterable<Path>) paths.filter(Files::isRegularFile)::iterator) {
                MessageDigest sha = MessageDigest.getInstance("SHA-256");
                try (InputStream in = Files.newInputStream(path)) {
                    byte[] buffer = new byte[64 * 1024];
                    for (int n; (n = in.read(buffer)) > 0; ) sha.update(buffer, 0, n);
                }
                sums.put(root.relativize(path).toString(), HexFormat.of().formatHex(sha.digest()));
            }
        }
        return sums;
    }
}
