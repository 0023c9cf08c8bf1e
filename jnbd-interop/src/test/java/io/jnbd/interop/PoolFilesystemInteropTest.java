package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * ext4 on a pool export (nbdfuse, a loop device, the kernel's filesystem) while one of the three memory servers
 * is SIGKILLed half way through writing a tree of files: the filesystem must be clean for fsck, every file must
 * read back bit for bit after the whole stack is torn down and rebuilt, and the pool must be back at 2 copies
 * of every extent.
 */
@Timeout(300)
class PoolFilesystemInteropTest {

    private static final Duration T = Duration.ofSeconds(120);
    private static final Duration RECOVERY = Duration.ofSeconds(60);
    private static final long SIZE = 256L << 20;

    @TempDir
    Path dir;
    PoolCluster cluster;
    /** Undo steps, run last-in first-out even when the test fails half way. */
    final Deque<FilesystemInteropTest.Cleanup> cleanups = new ArrayDeque<>();
    Thread copier;

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
        if (copier != null) copier.join(T.toMillis());
        while (!cleanups.isEmpty()) {
            try {
                cleanups.pop().run();
            } catch (Exception | AssertionError e) {
                System.err.println("cleanup: " + e);
            }
        }
        if (cluster != null) cluster.close();
    }

    @Test
    void ext4SurvivesAMemoryServerKilledWhileFilesAreWritten() throws Exception {
        cluster = new PoolCluster(dir).start((SIZE >> 20) + "M");
        Path tree = dir.resolve("tree");
        FilesystemInteropTest.generateTree(tree, 13);
        Map<String, String> expected = FilesystemInteropTest.checksums(tree);
        assertThat(expected).hasSizeGreaterThan(100);

        Path fuseDir = Files.createDirectories(dir.resolve("fuse"));
        Path mnt = Files.createDirectories(dir.resolve("mnt"));
        String loop = attach(fuseDir);
        run("mkfs.ext4", "-q", "-F", loop);
        mount(loop, mnt);

        // The tree goes in entry by entry, each followed by a sync, so that writes reach the pool all along;
        // the kill comes when half the entries are in, while the copy goes on.
        List<Path> entries;
        try (Stream<Path> list = Files.list(tree)) {
            entries = list.sorted().toList();
        }
        CountDownLatch halfWay = new CountDownLatch(1);
        Throwable[] copyFailure = new Throwable[1];
        copier = Thread.ofPlatform().name("pool-fs-copier").start(() -> {
            try {
                Files.createDirectories(mnt.resolve("tree"));
                for (int i = 0; i < entries.size(); i++) {
                    Path entry = entries.get(i);
                    FilesystemInteropTest.copyTree(entry, mnt.resolve("tree").resolve(entry.getFileName().toString()));
                    run("sync");
                    if (i == entries.size() / 2) halfWay.countDown();
                }
            } catch (Throwable e) {
                copyFailure[0] = e;
            } finally {
                halfWay.countDown();
            }
        });
        assertThat(halfWay.await(T.toSeconds(), TimeUnit.SECONDS)).as("half the tree copied within %s", T).isTrue();
        assertThat(copier.isAlive()).as("the copy still running when the memory server is killed").isTrue();
        PoolCluster.PoolView before = cluster.poolStatus();
        int victim = busiest(before);
        String address = cluster.address(victim);
        cluster.kill9(victim);

        copier.join(T.toMillis());
        assertThat(copier.isAlive()).as("the copy finished within %s of the kill%n%s", T, cluster.logs()).isFalse();
        if (copyFailure[0] != null) {
            throw new AssertionError("copying the tree onto ext4 failed after the kill\n" + cluster.logs(), copyFailure[0]);
        }
        run("sync");
        unmount(mnt);
        Interop.Result fsck = Interop.run(T, dir, "fsck.ext4", "-fn", loop);
        assertThat(fsck.exitCode()).as("fsck.ext4 -fn after the kill: %s%n%s", fsck, cluster.logs()).isZero();
        detach();

        PoolCluster.PoolView s = cluster.awaitPool(RECOVERY,
            address + " down and every extent back at 2 copies on the two servers left",
            v -> v.server(address).state().equals("down") && v.belowReplicas() == 0 && v.lost() == 0
                && v.copiesUp() == 2 * v.placed());
        assertThat(s.placed()).as(s.json()).isPositive();

        // Everything torn down: attach again from scratch, mount, compare every file.
        loop = attach(fuseDir);
        mount(loop, mnt);
        assertThat(FilesystemInteropTest.checksums(mnt.resolve("tree"))).isEqualTo(expected);
        unmount(mnt);
        detach();
    }

    private int busiest(PoolCluster.PoolView s) {
        int busiest = 0;
        for (int i = 1; i < PoolCluster.SERVERS; i++) {
            if (s.server(cluster.address(i)).extents() > s.server(cluster.address(busiest)).extents()) busiest = i;
        }
        assertThat(s.server(cluster.address(busiest)).extents()).as("extents on the server to kill: %s", s.json()).isPositive();
        return busiest;
    }

    /** nbdfuse the pool export into fuseDir/nbd, losetup it; returns the loop device. */
    private String attach(Path fuseDir) throws Exception {
        Path file = fuseDir.resolve("nbd");
        Path log = dir.resolve("nbdfuse.log");
        Process nbdfuse = new ProcessBuilder("nbdfuse", fuseDir.toString(), cluster.uri())
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
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
            if (!nbdfuse.isAlive()) fail("nbdfuse exited with %d:%n%s", nbdfuse.exitValue(), Files.readString(log));
            if (System.nanoTime() > deadline) fail("nbdfuse did not create %s within 30s", file);
            Thread.sleep(100);
        }
        assertThat(Files.size(file)).isEqualTo(SIZE);
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

    private void mount(String loop, Path mnt) {
        run("mount", "-t", "ext4", loop, mnt.toString());
        cleanups.push(() -> {
            if (Interop.run(T, dir, "umount", mnt.toString()).exitCode() != 0) {
                Interop.run(T, dir, "umount", "-l", mnt.toString());
            }
        });
    }

    private void unmount(Path mnt) {
        run("umount", mnt.toString());
        cleanups.pop();
    }

    private Interop.Result run(String... command) {
        return Interop.run(T, dir, command).assertSuccess();
    }
}
