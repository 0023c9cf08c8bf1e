package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowableOfType;
import static org.assertj.core.api.Assertions.fail;

import java.io.IOException;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Bad input on a memory server's port, beside a pool that uses the same server: garbage in the handshake and in
 * transmission, a WRITE claiming a 4 GiB payload, export names that are not a well-formed
 * {@code pool/CLIENT/UNIT/INSTANCE}, and a second instance of a client id that is connected or within its grace. Each must close or
 * refuse only the connection (or the option) it came on: the memory server keeps running, the connection holding
 * the client id keeps its data, and the pool's own connections to the server are never dropped.
 */
@Timeout(120)
class PoolBadInputInteropTest {

    /** The pool's client id is fixed, so that no drawn id can meet the raw clients' id 7. */
    private static final int POOL_CLIENT = 100;
    private static final String HOLDER = "pool/7/0/0000000000000001";
    private static final String NEWCOMER = "pool/7/0/0000000000000002";
    private static final Duration CLOSE_WITHIN = Duration.ofSeconds(15);
    private static final int KiB = 1024;
    private static final long POOL_BYTES = 8L << 20;

    @TempDir
    Path dir;
    PoolCluster cluster;
    JnbdServer memserver;
    final List<RawNbdClient> clients = new ArrayList<>();

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        for (RawNbdClient c : clients) c.close();
        if (cluster != null) cluster.close();
        if (memserver != null) memserver.kill();
    }

    @Test
    void badInputEndsOnlyItsOwnConnectionAndThePoolKeepsWorking() throws Exception {
        // A WRITE's payload that never comes is dropped at the receive timeout: shorter than CLOSE_WITHIN here.
        cluster = new PoolCluster(dir).withMemserverArgs("--receive-timeout", "5").start("1G", "client=" + POOL_CLIENT);
        cluster.write(3, 0, POOL_BYTES);
        cluster.verify(3, 0, POOL_BYTES, "read back before the bad input");
        // The bad input goes to the memory server that holds the most of the pool's extents.
        PoolCluster.PoolView before = cluster.poolStatus();
        int victim = 0;
        for (int i = 1; i < PoolCluster.SERVERS; i++) {
            if (before.server(cluster.address(i)).extents() > before.server(cluster.address(victim)).extents()) victim = i;
        }
        int port = cluster.memserver(victim).port();
        String address = cluster.address(victim);
        assertThat(before.server(address).extents()).as(before.json()).isPositive();
        String incarnation = before.server(address).incarnation();
        int logBefore = cluster.serve().log().length();

        // 1. An HTTP request where the client's flags and first option belong.
        RawNbdClient http = connect(port);
        readGreeting(http);
        http.out.write("GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
        http.out.flush();
        assertClosed(http, "an HTTP request in place of the handshake");

        // 2. Valid client flags, then seeded random bytes in place of an option.
        RawNbdClient noise = connect(port);
        noise.greet();
        noise.out.write(random(4 * KiB, 42));
        noise.out.flush();
        assertClosed(noise, "random bytes in place of an option");

        // 3. The holder of client id 7 (instance 1) stores a block and keeps its connection.
        RawNbdClient holder = open(port, HOLDER);
        byte[] block = random(64 * KiB, 7);
        assertThat(holder.write(0, block)).as("NBD error of the holder's WRITE").isZero();

        // 4. Another connection of the same instance sends a WRITE claiming 4 GiB - 1 bytes and no payload: a client
        // that agreed no block sizes may send one that long, so the server waits for it, up to the receive timeout.
        RawNbdClient huge = open(port, HOLDER);
        huge.send(RawNbdClient.CMD_WRITE, 1, 0, 0xFFFFFFFF, null);
        assertClosed(huge, "a WRITE claiming 4 GiB - 1 bytes");

        // 5. Garbage in place of a request on a third connection of the same instance.
        RawNbdClient garbage = open(port, HOLDER);
        garbage.out.write(random(28, 5));
        garbage.out.flush();
        assertClosed(garbage, "28 random bytes in place of a request header");

        // 6. Names that are not a space: each refused as an export that does not exist, and only that option:
        //    the same connection then opens the status export.
        RawNbdClient names = connect(port);
        names.greet();
        Map<String, String> wrong = new LinkedHashMap<>();
        for (String name : List.of("pool/7/0/xyz", "pool/0/0/0000000000000001", "pool/65536/0/0000000000000001",
                "pool/7/65536/0000000000000001", "pool/7/0/000000000000001", "pool/7/0/00000000000000001",
                "pool/7/0/0000000000000001/", "pool/7/0", "pool/7/x/0000000000000001", "pool/-7/0/0000000000000001",
                "pool/7/0/-000000000000001", "pool//0/0000000000000001", "pool/", "pool", "POOL/7/0/0000000000000001",
                "swap")) {
            RawNbdClient.Refused refused = catchThrowableOfType(RawNbdClient.Refused.class, () -> names.go(name));
            if (refused == null) {
                wrong.put(name, "accepted");
                break; // the connection is in transmission now
            }
            if (refused.type != RawNbdClient.REP_ERR_UNKNOWN) {
                wrong.put(name, "refused with 0x" + Integer.toHexString(refused.type) + " " + refused.text);
            }
        }
        assertThat(wrong).as("names that a memory server did not refuse with NBD_REP_ERR_UNKNOWN").isEmpty();
        names.go("status");
        assertThat(new String(names.read(0, 64), StandardCharsets.UTF_8)).as("the status export after the refusals")
            .contains("jnbd memory server");

        // 7. Another instance of client 7 while the holder is connected: refused with NBD_REP_ERR_POLICY...
        RawNbdClient newcomer = connect(port);
        newcomer.greet();
        RawNbdClient.Refused policy = catchThrowableOfType(RawNbdClient.Refused.class, () -> newcomer.go(NEWCOMER));
        assertThat(policy).as("opening %s while %s is connected", NEWCOMER, HOLDER).isNotNull();
        assertThat(policy.type).as("the refusal of a second instance of client 7: %s", policy.text)
            .isEqualTo(RawNbdClient.REP_ERR_POLICY);
        assertThat(policy.text).contains("in use");
        // ...and the holder keeps its connection and its data through all of the above.
        assertThat(holder.read(0, block.length)).as("the holder's block after the bad input").isEqualTo(block);
        PoolCluster.MemView m = cluster.memStatus(victim);
        assertThat(m.clients()).as(m.json()).anySatisfy(c -> {
            assertThat(c.client()).isEqualTo(7);
            assertThat(c.instanceFingerprint()).isEqualTo(io.jnbd.pool.memserver.SpaceName.fingerprint(1));
            assertThat(c.bytes()).isEqualTo(block.length);
        });

        // 8. Once the holder has gone and its grace has passed (the data kept for it freed), a new instance may
        //    take client 7: nothing of the old instance's data is left for it.
        holder.disconnect();
        RawNbdClient successor = openWhenFree(port, NEWCOMER);
        assertThat(successor.read(0, block.length)).as("what the new instance of client 7 reads where the old one wrote")
            .isEqualTo(new byte[block.length]);
        successor.disconnect();

        // The memory server runs, the pool never lost it, and the pool still writes and reads.
        assertThat(cluster.memserver(victim).process().isAlive()).as("memory server %s after the bad input", address).isTrue();
        cluster.write(4, 16L << 20, POOL_BYTES);
        cluster.verify(4, 16L << 20, POOL_BYTES, "new data through the pool after the bad input");
        cluster.verify(3, 0, POOL_BYTES, "old data through the pool after the bad input");
        assertThat(cluster.serve().log().substring(logBefore)).as("what the pool logged during the bad input")
            .doesNotContain("memory server " + address + ": lost");
        PoolCluster.PoolView s = cluster.awaitPool(Duration.ofSeconds(60), "every server up, every extent at 2 copies",
            v -> v.servers().stream().allMatch(x -> x.state().equals("up")) && v.belowReplicas() == 0 && v.lost() == 0);
        assertThat(s.server(address).incarnation()).as(s.json()).isEqualTo(incarnation);
    }

    /**
     * A space name is {@code pool/CLIENT/UNIT/INSTANCE} with CLIENT and UNIT in ASCII decimal: a sign or another
     * script's digits make another name for the same space, which must not exist.
     */
    @Test
    void spaceNamesWithSignsOrNonAsciiDigitsAreRefused() throws Exception {
        memserver = JnbdServer.memserver(dir.resolve("memserver"), "--memory", "64M", "--grace", "3");
        Map<String, String> wrong = new LinkedHashMap<>();
        for (String name : List.of("pool/+7/0/0000000000000001", "pool/7/+0/0000000000000001",
                "pool/\u0667/0/0000000000000001", "pool/7/\u0660/0000000000000001")) {
            RawNbdClient c = connect(memserver.port());
            c.greet();
            RawNbdClient.Refused refused = catchThrowableOfType(RawNbdClient.Refused.class, () -> c.go(name));
            if (refused == null) wrong.put(name, "accepted");
            else if (refused.type != RawNbdClient.REP_ERR_UNKNOWN) {
                wrong.put(name, "refused with 0x" + Integer.toHexString(refused.type) + " " + refused.text);
            }
            c.close();
        }
        assertThat(wrong).as("names that a memory server did not refuse with NBD_REP_ERR_UNKNOWN; its log:%n%s",
            memserver.log()).isEmpty();
    }

    private RawNbdClient connect(int port) throws IOException {
        RawNbdClient c = RawNbdClient.connectOnly(port);
        clients.add(c);
        return c;
    }

    private RawNbdClient open(int port, String export) throws IOException {
        RawNbdClient c = connect(port);
        c.greet();
        c.go(export);
        return c;
    }

    /** Opens {@code export}, trying again while the server keeps the client id for the instance that just left. */
    private RawNbdClient openWhenFree(int port, String export) throws Exception {
        long deadline = System.nanoTime() + CLOSE_WITHIN.toNanos();
        while (true) {
            RawNbdClient c = connect(port);
            c.greet();
            try {
                c.go(export);
                return c;
            } catch (RawNbdClient.Refused e) {
                c.close();
                if (e.type != RawNbdClient.REP_ERR_POLICY || System.nanoTime() > deadline) {
                    fail("the memory server on port %d still refused %s after the holder left: 0x%s %s", port, export,
                        Integer.toHexString(e.type), e.text);
                }
                Thread.sleep(100);
            }
        }
    }

    private static void readGreeting(RawNbdClient c) throws IOException {
        assertThat(c.in.readLong()).as("NBDMAGIC").isEqualTo(RawNbdClient.NBDMAGIC);
        assertThat(c.in.readLong()).as("IHAVEOPT").isEqualTo(RawNbdClient.IHAVEOPT);
        c.in.readUnsignedShort();
    }

    /** The server must end the connection (EOF or reset) within CLOSE_WITHIN; whatever it sends first is skipped. */
    private static void assertClosed(RawNbdClient c, String what) throws IOException {
        c.readTimeout(CLOSE_WITHIN);
        long deadline = System.nanoTime() + CLOSE_WITHIN.toNanos();
        try {
            while (System.nanoTime() < deadline) {
                if (c.in.read() < 0) return;
            }
        } catch (SocketTimeoutException e) {
            // fall through: still open
        } catch (SocketException e) {
            return; // reset
        }
        fail("the memory server kept the connection open for %s after %s", CLOSE_WITHIN, what);
    }

    private static byte[] random(int length, long seed) {
        byte[] b = new byte[length];
        new Random(seed).nextBytes(b);
        return b;
    }
}
