package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A sparse file export larger than the file system under it, so that writes run out of space. The spec has an
 * error for this, ENOSPC, which lets the client (and the guest above it) tell a full disk from a failing one
 * (EIO, after which a file system remounts read-only). Space freed by a trim is usable again.
 */
@Timeout(60)
class DiskFullTest {
    static final int MIB = 1 << 20;
    /** The file system holds 8 MiB; the export claims twice that. */
    static final int FS_MIB = 8, EXPORT_MIB = 16;

    @TempDir
    Path dir;
    private Path mountPoint;
    private boolean mounted;
    private ServerFixture fx;

    @BeforeEach
    void mountSmallFileSystem() throws Exception {
        assumeTrue(new com.sun.security.auth.module.UnixSystem().getUid() == 0,
            "mounting the small tmpfs this test fills needs root");
        mountPoint = Files.createDirectory(dir.resolve("small"));
        String out = run("mount", "-t", "tmpfs", "-o", "size=" + FS_MIB + "M", "tmpfs", mountPoint.toString());
        assumeTrue(out == null, "could not mount a " + FS_MIB + " MiB tmpfs: " + out);
        mounted = true;
        fx = new ServerFixture(List.of(ExportSpec.parse("small",
            "file:" + mountPoint.resolve("disk.img") + ",size=" + EXPORT_MIB + "M,mode=cached").openExport()));
    }

    @AfterEach
    void unmount() throws Exception {
        try {
            if (fx != null) fx.close(); // the export holds the file open, which would keep the mount busy
        } finally {
            if (mounted) {
                String out = run("umount", mountPoint.toString());
                if (out != null) {
                    // Detach it at least, so no mount outlives the test; then report.
                    run("umount", "-l", mountPoint.toString());
                    throw new AssertionError("umount " + mountPoint + " failed: " + out);
                }
            }
        }
    }

    /** Runs a command; null if it succeeded, else its exit code and output. */
    private static String run(String... command) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes()).strip();
        int code = p.waitFor();
        return code == 0 ? null : "exit " + code + ": " + out;
    }

    /** How far a client got writing the export from the start in 1 MiB pieces. */
    record Fill(int pieces, int error) {}

    /** Writes piece after piece until one fails; {@code pieces} were written whole before it. */
    private static Fill fill(RawClient c) throws IOException {
        for (int i = 0; i < EXPORT_MIB; i++) {
            int error = c.write((long) i * MIB, pattern(i, MIB), 0);
            if (error != 0) return new Fill(i, error);
        }
        throw new AssertionError("all " + EXPORT_MIB + " MiB were written to a " + FS_MIB + " MiB file system");
    }

    /** Piece {@code i} reads back whole, and in part (RawClient checks structured data byte by byte, slowly). */
    private static void assertPiece(RawClient simple, RawClient structured, int i) throws IOException {
        byte[] expected = pattern(i, MIB);
        assertThat(simple.read((long) i * MIB, MIB)).as("piece %d", i).isEqualTo(expected);
        int at = 4093 * (i + 1);
        assertThat(structured.read((long) i * MIB + at, 65536)).as("piece %d from byte %d, structured", i, at)
            .isEqualTo(java.util.Arrays.copyOfRange(expected, at, at + 65536));
    }

    @Test
    void writesThatNoLongerFitGetEnospc() throws IOException {
        try (RawClient simple = fx.open("small"); RawClient structured = fx.open("small", true, false)) {
            Fill f = fill(simple);
            assertThat(f.pieces()).as("whole pieces that fitted").isBetween(FS_MIB / 2, FS_MIB);
            Map<String, String> errors = new LinkedHashMap<>();
            errors.put("first write that did not fit (simple reply)", Nbd.errorName(f.error()));
            long next = (long) (f.pieces() + 1) * MIB;
            errors.put("next write (simple reply)", Nbd.errorName(simple.write(next, pattern(100, MIB), 0)));
            long cookie = structured.cookie();
            structured.send(new Request(0, Nbd.CMD_WRITE, cookie, next, MIB), pattern(101, MIB));
            RawClient.Reply r = structured.readReply();
            assertThat(r.cookie()).isEqualTo(cookie);
            errors.put("write on a structured-replies connection", Nbd.errorName(r.error()));
            for (RawClient.Chunk c : r.chunks()) {
                if (c.type() < 0x8000) continue;
                assertThat(c.type()).as("error chunk type").isIn(Nbd.REPLY_TYPE_ERROR, Nbd.REPLY_TYPE_ERROR_OFFSET);
                errors.put("its error chunk", Nbd.errorName(c.error().error()) + " (" + c.error().message() + ")");
            }
            // Every failure at once, so one run shows whether the simple and the structured paths agree.
            assertThat(errors).as("NBD errors of writes to a full file system").allSatisfy((what, error) ->
                assertThat(error).as(what).startsWith("ENOSPC"));
        }
    }

    @Test
    void dataWrittenBeforeTheDiskFilledReadsBackAndTrimMakesRoom() throws IOException {
        try (RawClient simple = fx.open("small"); RawClient structured = fx.open("small", true, false)) {
            Fill f = fill(simple);
            assertThat(f.pieces()).as("whole pieces that fitted").isBetween(FS_MIB / 2, FS_MIB);
            for (int i = 0; i < f.pieces(); i++) assertPiece(simple, structured, i);
            // The session survived the failure, and a failed write leaves the disk as full as it was.
            assertThat(structured.write((long) f.pieces() * MIB, pattern(200, MIB), 0)).as("write while full").isNotZero();

            // A trim of the first two pieces punches holes, which gives their pages back to the tmpfs.
            assertThat(simple.command(Nbd.CMD_TRIM, 0, 0, 2L * MIB)).as("trim").isZero();
            int k = f.pieces();
            assertThat(simple.write((long) k * MIB, pattern(k, MIB), 0)).as("write after the trim").isZero();
            assertThat(structured.write((long) (k + 1) * MIB, pattern(k + 1, MIB), Nbd.CMD_FLAG_FUA))
                .as("second write after the trim, structured, FUA").isZero();
            // What a trimmed range reads as is unspecified; everything else is as written.
            for (int i = 2; i < k + 2; i++) assertPiece(simple, structured, i);
            assertThat(simple.write((long) (k + 2) * MIB, pattern(k + 2, MIB), 0)).as("write once full again").isNotZero();
        }
    }
}
