package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * fio's nbd engine with crc32c verification on a pool export while one of its three memory servers dies
 * (SIGKILL) or hangs (SIGSTOP) in the middle of the writes: every write must be acknowledged without error,
 * every block must verify, and the pool must restore 2 copies of every extent on the two servers left.
 */
@Timeout(180)
class PoolFioInteropTest {

    private static final Duration T = Duration.ofSeconds(120);
    /** Bound on recovery after the loss is noticed: a hang detector, not a performance target. */
    private static final Duration RECOVERY = Duration.ofSeconds(60);
    private static final long FIO_SIZE = 256L << 20;
    /** The kill comes once this much of fio's data is stored (both copies counted): a quarter of the writes. */
    private static final long STORED_BEFORE_KILL = FIO_SIZE / 2;

    @TempDir
    Path dir;
    PoolCluster cluster;
    Process fio;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
        Interop.requireCommands("fio");
    }

    @AfterEach
    void tearDown() throws Exception {
        if (fio != null && fio.isAlive()) fio.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        if (cluster != null) cluster.close();
    }

    @Test
    void fioVerifiesWhileAMemoryServerIsKilled() throws Exception {
        cluster = new PoolCluster(dir).start("1G");
        startFio();
        int victim = awaitWritesUnderWay();
        String address = cluster.address(victim);
        cluster.kill9(victim);

        assertFioSucceeded();
        PoolCluster.PoolView s = cluster.awaitPool(RECOVERY,
            address + " down and every extent back at 2 copies on the two servers left",
            v -> v.server(address).state().equals("down") && v.belowReplicas() == 0 && v.lost() == 0
                && v.copiesUp() == 2 * v.placed());
        assertThat(s.placed()).as("extents fio wrote (256 MiB of 4 MiB extents): %s", s.json()).isEqualTo(FIO_SIZE / PoolCluster.EXTENT);
        assertThat(s.server(address).extents()).as("extents held by the dead server: %s", s.json()).isZero();

        // What an operator sees says the same.
        Interop.Result cli = Interop.run(T, dir, Interop.jnbd().toString(), "pool", "status", "--json", cluster.uri())
            .assertSuccess();
        Map<String, Object> json = JsonDoc.object(cli.output());
        assertThat(json).as(cli.toString()).containsEntry("below_replicas", 0L).containsEntry("lost", 0L)
            .containsEntry("placed", FIO_SIZE / PoolCluster.EXTENT);
    }

    @Test
    void fioVerifiesWhileAMemoryServerHangs() throws Exception {
        cluster = new PoolCluster(dir).start("1G");
        startFio();
        int victim = awaitWritesUnderWay();
        String address = cluster.address(victim);
        JnbdServer hung = cluster.memserver(victim);
        hung.suspend();
        try {
            assertFioSucceeded();
            PoolCluster.PoolView s = cluster.awaitPool(RECOVERY,
                address + " (stopped) down and every extent back at 2 copies on the two servers left",
                v -> v.server(address).state().equals("down") && v.belowReplicas() == 0 && v.lost() == 0
                    && v.copiesUp() == 2 * v.placed());
            assertThat(s.placed()).as("extents fio wrote: %s", s.json()).isEqualTo(FIO_SIZE / PoolCluster.EXTENT);
        } finally {
            hung.resume();
        }
        // Back from the hang, in the same incarnation: the pool takes it again and gives back what its copies
        // there held, since none of them is a replica any more.
        cluster.awaitPool(RECOVERY, address + " up again after SIGCONT, every extent at 2 copies",
            v -> v.server(address).state().equals("up") && v.belowReplicas() == 0 && v.lost() == 0
                && v.copiesUp() == 2 * v.placed());
        long deadline = System.nanoTime() + RECOVERY.toNanos();
        while (true) {
            long held = cluster.poolStatus().server(address).extents();
            PoolCluster.MemView m = cluster.memStatus(victim);
            if (m.bytes() == held * PoolCluster.EXTENT) break;
            if (System.nanoTime() > deadline) {
                fail("%s stores %d bytes of the pool client's, but holds %d of its extents (%d bytes) for the pool:%n%s%n%s",
                    address, m.bytes(), held, held * PoolCluster.EXTENT, m.json(), cluster.logs());
            }
            Thread.sleep(100);
        }
    }

    private void startFio() throws Exception {
        Path log = dir.resolve("fio.log");
        fio = new ProcessBuilder("fio", "--name=pool-verify", "--ioengine=nbd", "--uri=" + cluster.uri(),
            "--rw=randwrite", "--bs=64k", "--size=" + (FIO_SIZE >> 20) + "M", "--iodepth=8",
            "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--randrepeat=0", "--output-format=normal")
            .directory(dir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(log.toFile())
            .start();
    }

    /**
     * Waits until fio has a quarter of its writes stored on the memory servers, so that the failure lands
     * in the middle of the run whatever the machine's speed; returns the server holding the most extents.
     */
    private int awaitWritesUnderWay() throws Exception {
        long deadline = System.nanoTime() + T.toNanos();
        while (true) {
            long stored = 0;
            for (int i = 0; i < PoolCluster.SERVERS; i++) stored += cluster.memStatus(i).bytes();
            if (stored >= STORED_BEFORE_KILL) break;
            if (!fio.isAlive()) fail("fio ended with %d before %d bytes were stored:%n%s", fio.exitValue(), stored, fioLog());
            if (System.nanoTime() > deadline) fail("fio stored only %d bytes within %s:%n%s%n%s", stored, T, fioLog(), cluster.logs());
            Thread.sleep(50);
        }
        PoolCluster.PoolView s = cluster.poolStatus();
        int busiest = 0;
        for (int i = 1; i < PoolCluster.SERVERS; i++) {
            if (s.server(cluster.address(i)).extents() > s.server(cluster.address(busiest)).extents()) busiest = i;
        }
        assertThat(s.server(cluster.address(busiest)).extents()).as("extents on the server to fail: %s", s.json()).isPositive();
        // Without this the test would pass without testing anything.
        assertThat(fio.isAlive()).as("fio still running when the memory server fails:%n%s", fioLog()).isTrue();
        return busiest;
    }

    private void assertFioSucceeded() throws Exception {
        if (!fio.waitFor(T.toSeconds(), TimeUnit.SECONDS)) {
            fio.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            fail("fio did not finish within %s:%n%s%n%s", T, fioLog(), cluster.logs());
        }
        String output = fioLog();
        assertThat(fio.exitValue()).as("fio's exit status:%n%s%n%s", output, cluster.logs()).isZero();
        assertThat(output).as(output)
            .contains("Run status group 0")
            .doesNotContain("verify: bad")
            .doesNotContainIgnoringCase("crc32c: verify failed")
            .doesNotContainPattern("err=\\s*-?[1-9]");
    }

    private String fioLog() throws Exception {
        Path log = dir.resolve("fio.log");
        return Files.exists(log) ? Files.readString(log) : "";
    }
}
