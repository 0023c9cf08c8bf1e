package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

import java.nio.file.Path;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue 37's measurement, as a new user would try it with stock tools, against a pool over plain-text memory
 * servers: (1) {@code nbdcopy nbd://MEMSERVER/status -} no longer gives the pool client's instance, only a
 * fingerprint; (2) {@code qemu-io} on a five-part space name with a guessed instance is refused; (3) names with
 * guessed instances under a later session, tried in a loop, are refused one by one, and the pool neither loses a
 * memory server nor reads anything but what it wrote. No log line holds a space's name with its instance.
 */
@Timeout(180)
class PoolSecurityInteropTest {
    private static final long WRITTEN = 8L << 20;
    private static final int GUESSES = 1000;
    /** A space name with its instance in it, as nothing may show it. */
    private static final Pattern SPACE_WITH_INSTANCE = Pattern.compile("pool/[0-9]+/[0-9]+/[0-9a-f]{16}");

    @TempDir
    Path dir;
    PoolCluster cluster;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        if (cluster != null) cluster.close();
    }

    @Test
    void theStatusHoldsNoInstanceAndGuessedNamesAreRefused() throws Exception {
        cluster = new PoolCluster(dir).start("64M");
        cluster.write(0x77, 0, WRITTEN);
        int port = cluster.memserver(0).port();
        String address = cluster.address(0);

        // 1. The status export, as nbdcopy reads it where it is installed.
        String status = Interop.which("nbdcopy") != null
            ? Interop.run(Duration.ofSeconds(30), dir, "nbdcopy", "nbd://" + address + "/status", "-").assertSuccess().output()
            : PoolCluster.document(port, "status");
        PoolCluster.MemView mem = cluster.memStatus(0);
        assertThat(mem.clients()).as(mem.json()).singleElement()
            .satisfies(c -> assertThat(c.instanceFingerprint()).matches("[0-9a-f]{6}"));
        long client = mem.clients().getFirst().client();
        assertThat(status).as("the status export").contains("\"client\" : " + client).doesNotContain("\"instance\"");
        assertThat(status.replace(mem.incarnation(), "")).as("the status export, its incarnation aside")
            .doesNotContainPattern("[0-9a-f]{16}");

        // 2. qemu-io on the five-part name with a guessed instance and the first session.
        Random r = new Random(37);
        if (Interop.which("qemu-io") != null) {
            String guess = "pool%2F" + client + "%2F0%2F" + HexFormat.of().toHexDigits(r.nextLong()) + "%2F1";
            Interop.Result read = Interop.run(Duration.ofSeconds(30), dir, "qemu-io", "-r", "-f", "raw",
                "nbd://" + address + "/" + guess, "-c", "read -P 0x77 0 1M");
            assertThat(read.exitCode()).as("qemu-io on a guessed name: %s", read.output()).isNotZero();
        }

        // 3. Guessed names in a loop, under the first and a later session: each refused by policy, the option only.
        int refused = 0;
        RawNbdClient c = null;
        for (int i = 0; i < GUESSES; i++) {
            if (i % 50 == 0) {
                if (c != null) c.close();
                c = RawNbdClient.connectOnly(port);
                c.greet();
            }
            String name = "pool/" + client + "/0/" + HexFormat.of().toHexDigits(r.nextLong()) + "/" + (i % 2 == 0 ? 1 : 9);
            RawNbdClient guesser = c;
            RawNbdClient.Refused no = catchThrowableOfType(RawNbdClient.Refused.class, () -> guesser.go(name));
            if (no != null && no.type == RawNbdClient.REP_ERR_POLICY) refused++;
        }
        c.close();
        assertThat(refused).as("guessed names refused with NBD_REP_ERR_POLICY").isEqualTo(GUESSES);
        mem = cluster.memStatus(0);
        assertThat(mem.clients()).as("clients after %d guesses: %s", GUESSES, mem.json()).hasSize(1);

        // The pool never lost the server, reads what it wrote and goes on writing.
        cluster.verify(0x77, 0, WRITTEN, "after the guesses");
        cluster.write(0x66, WRITTEN, WRITTEN);
        cluster.verify(0x66, WRITTEN, WRITTEN, "written after the guesses");
        assertThat(cluster.serve().log()).as("the pool's log").doesNotContain("memory server " + address + ": lost");
        assertThat(cluster.memserver(0).process().isAlive()).isTrue();
        for (String log : List.of(cluster.serve().log(), cluster.memserver(0).log(), cluster.memserver(1).log())) {
            assertThat(log).as("a log").doesNotContainPattern(SPACE_WITH_INSTANCE);
        }
        assertThat(cluster.memserver(0).log()).as("the memory server's log of the guesses").contains("in use by another pool client");
    }
}
