package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cow filter through a real server: clients of {@code boot/NAME} each have their own overlay over one base, kept
 * across disconnects and restarts; connections of one client share theirs; per-connection overlays go with their
 * connection; bad overlay names are refused at GO with a message; the base file is never written.
 */
@Timeout(60)
class CowServerTest {
    static final int MIB = 1 << 20;

    @TempDir
    Path dir;
    Path base;
    String baseSum;

    @BeforeEach
    void makeBase() throws Exception {
        base = dir.resolve("base.img");
        Files.write(base, pattern(42, 4 * MIB));
        baseSum = sha256(base);
    }

    static String sha256(Path p) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(p)));
    }

    private ServerFixture serve(String overlay) throws IOException {
        return new ServerFixture(List.of(ExportSpec.parse("boot", "file:" + base + ",filter=cow,cow-overlay=" + overlay
            + ",cow-dir=" + dir.resolve("cow")).openExport()));
    }

    @Test
    void eachClientHasItsOwnOverlayKeptAcrossRestartsAndTheBaseIsNeverWritten() throws Exception {
        byte[] a = pattern(1, 6000), b = pattern(2, 6000);
        try (ServerFixture f = serve("client")) {
            try (RawClient pc1 = f.open("boot/pc1"); RawClient pc2 = f.open("boot/pc2")) {
                assertThat(pc1.transmissionFlags & Nbd.FLAG_CAN_MULTI_CONN).as("CAN_MULTI_CONN").isNotZero();
                assertThat(pc1.transmissionFlags & Nbd.FLAG_READ_ONLY).as("writable").isZero();
                assertThat(pc1.write(1000, a, 0)).isZero();
                assertThat(pc2.write(1000, b, 0)).isZero();
                assertThat(pc1.read(1000, 6000)).isEqualTo(a);
                assertThat(pc2.read(1000, 6000)).as("isolated from pc1").isEqualTo(b);
                try (RawClient pc1again = f.open("boot/pc1")) {
                    assertThat(pc1again.read(1000, 6000)).as("a second connection of pc1 sees its writes").isEqualTo(a);
                    assertThat(pc1again.write(70000, b, 0)).isZero();
                    assertThat(pc1again.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
                }
                assertThat(pc1.read(70000, 6000)).as("and pc1's first connection sees the second's").isEqualTo(b);
                try (RawClient fresh = f.open("boot/pc3")) {
                    assertThat(fresh.read(0, 8192)).as("a new overlay reads the base")
                        .isEqualTo(java.util.Arrays.copyOf(pattern(42, 4 * MIB), 8192));
                }
            }
        }
        assertThat(sha256(base)).as("the base's checksum").isEqualTo(baseSum);
        try (ServerFixture f = serve("client"); RawClient pc1 = f.open("boot/pc1"); RawClient pc2 = f.open("boot/pc2")) {
            assertThat(pc1.read(1000, 6000)).as("pc1's overlay after a restart").isEqualTo(a);
            assertThat(pc1.read(70000, 6000)).isEqualTo(b);
            assertThat(pc2.read(1000, 6000)).as("pc2's overlay after a restart").isEqualTo(b);
        }
        assertThat(sha256(base)).isEqualTo(baseSum);
    }

    @Test
    void badOverlayNamesAreRefusedAtGoWithAMessage() throws IOException {
        try (ServerFixture f = serve("client")) {
            for (String bad : List.of("boot/a/b", "boot/..", "boot/x..y", "boot/.", "boot/tab\there", "boot/" + "n".repeat(256), "boot/")) {
                try (RawClient c = RawClient.connect(f.address)) {
                    c.greeting();
                    c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
                    List<RawClient.OptionReply> go = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest(bad, List.of()));
                    RawClient.OptionReply last = go.getLast();
                    assertThat(last.type()).as("GO of '%s'", bad).isIn(Nbd.REP_ERR_POLICY, Nbd.REP_ERR_UNKNOWN);
                    assertThat(last.string()).as("message for '%s'", bad).isNotBlank();
                }
            }
            try (RawClient ok = f.open("boot/" + "n".repeat(255))) {
                assertThat(ok.write(0, new byte[512], 0)).as("a name of 255 bytes is fine").isZero();
            }
        }
        assertThat(Files.exists(dir.resolve("cow/clients/x..y"))).isFalse();
    }

    @Test
    void theExportAloneIsTheBaseReadOnlyWhateverTheOverlaysHold() throws Exception {
        byte[] baseBytes = java.util.Arrays.copyOf(pattern(42, 4 * MIB), 8192);
        try (ServerFixture f = serve("client")) {
            try (RawClient pc1 = f.open("boot/pc1")) {
                assertThat(pc1.write(0, pattern(7, 8192), 0)).isZero();
                assertThat(pc1.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
            }
            try (RawClient bare = f.open("boot")) {
                assertThat(bare.transmissionFlags & Nbd.FLAG_READ_ONLY).as("READ_ONLY").isNotZero();
                assertThat(bare.read(0, 8192)).as("the base, not pc1's overlay").isEqualTo(baseBytes);
                assertThat(bare.write(0, new byte[512], 0)).as("a write").isEqualTo(Nbd.EPERM);
                assertThat(bare.command(Nbd.CMD_FLUSH, 0, 0, 0)).as("a flush").isZero();
                assertThat(bare.read(0, 8192)).isEqualTo(baseBytes);
            }
            try (RawClient pc1 = f.open("boot/pc1")) {
                assertThat(pc1.read(0, 8192)).as("pc1's overlay untouched").isEqualTo(pattern(7, 8192));
            }
        }
        assertThat(sha256(base)).isEqualTo(baseSum);
    }

    @Test
    void connectionOverlaysGoWithTheirConnectionAndNoMultiConnIsClaimed() throws Exception {
        byte[] a = pattern(3, 10000);
        try (ServerFixture f = serve("connection")) {
            try (RawClient c1 = f.open("boot"); RawClient c2 = f.open("boot")) {
                assertThat(c1.transmissionFlags & Nbd.FLAG_CAN_MULTI_CONN).as("no CAN_MULTI_CONN").isZero();
                assertThat(c1.write(5, a, 0)).isZero();
                assertThat(c1.read(5, 10000)).isEqualTo(a);
                assertThat(c2.read(5, 10000)).as("another connection sees the base")
                    .isEqualTo(java.util.Arrays.copyOfRange(pattern(42, 4 * MIB), 5, 10005));
            }
            try (RawClient c3 = f.open("boot")) {
                assertThat(c3.read(5, 10000)).as("after its connection ended, the overlay is gone")
                    .isEqualTo(java.util.Arrays.copyOfRange(pattern(42, 4 * MIB), 5, 10005));
            }
        }
        try (var left = Files.list(dir.resolve("cow"))) {
            assertThat(left.map(p -> p.getFileName().toString())).as("what connections left in cow-dir").containsExactly("lock");
        }
        assertThat(sha256(base)).isEqualTo(baseSum);
    }

    @Test
    void sharedOverlayIsOneForAllAndPersistent() throws Exception {
        byte[] a = pattern(4, 3 * 65536 + 17);
        try (ServerFixture f = serve("shared"); RawClient c1 = f.open("boot"); RawClient c2 = f.open("boot", true, true)) {
            assertThat(c1.write(65530, a, Nbd.CMD_FLAG_FUA)).isZero();
            assertThat(c2.read(65530, a.length)).isEqualTo(a);
            assertThat(c2.command(Nbd.CMD_WRITE_ZEROES, 0, 0, 2 * 65536)).isZero();
            assertThat(c1.read(0, 2 * 65536)).as("zeroed, not the base").isEqualTo(new byte[2 * 65536]);
        }
        try (ServerFixture f = serve("shared"); RawClient c = f.open("boot")) {
            byte[] expected = java.util.Arrays.copyOfRange(a, 2 * 65536 - 65530, a.length);
            assertThat(c.read(2 * 65536, expected.length)).as("after a restart").isEqualTo(expected);
            assertThat(c.read(0, 2 * 65536)).isEqualTo(new byte[2 * 65536]);
        }
        assertThat(sha256(base)).isEqualTo(baseSum);
    }

    @Test
    void aSecondServerOnTheSameCowDirFailsToStartWithOneLine() throws IOException {
        try (ServerFixture f = serve("shared")) {
            assertThatThrownBy(() -> ExportSpec.parse("again", "file:" + base + ",filter=cow,cow-dir=" + dir.resolve("cow")).openExport())
                .hasMessageContaining("cow-dir " + dir.resolve("cow") + " is in use")
                .satisfies(e -> assertThat(e.getMessage()).doesNotContain("\n"));
        }
    }
}
