package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.MetaExtent;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.client.Peer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Dirty bitmaps from qemu, jnbd as the client: a qcow2 image fully copied by {@code jnbd copy}, then a bitmap added
 * with {@code qemu-img bitmap --add}, then scattered writes through {@code qemu-io} (unaligned ones, a zero write and
 * a discard among them); {@code qemu-nbd -B} exports the bitmap. The client library reads it as the writes rounded
 * to the bitmap's 64 KiB granularity, and {@code jnbd copy --bitmap} copies only those ranges and leaves the
 * destination equal to the image.
 */
@Timeout(300)
class DirtyBitmapInteropTest {
    private static final Duration T = Duration.ofSeconds(120);
    private static final long SIZE = 64L << 20;
    private static final long K = 1024;
    private static final long M = K * K;
    private static final String B0 = "qemu:dirty-bitmap:b0";

    /** What is written after the bitmap was added: qemu-io commands and the bytes each writes, discards or zeroes. */
    private static final List<String> WRITES = List.of(
        "write -P 0x44 1M 4k",            // aligned, inside one block
        "write -P 0x55 3000000 100",      // unaligned, inside one block
        "write -P 0x88 65535 2",          // unaligned, across the boundary of blocks 0 and 1
        "write -P 0x66 22M 1M",           // over old data
        "write -z 5M 128k",               // zeroes over old data
        "discard 21M 64k",                // a discard of old data
        "write -P 0x77 40M 64k");         // where there was nothing
    private static final long WRITTEN = 4 * K + 100 + 2 + M + 128 * K + 64 * K + 64 * K;
    /** The same, rounded out to 64 KiB and merged: what the bitmap must say. */
    private static final List<long[]> DIRTY = List.of(new long[]{0, 128 * K}, new long[]{M, 64 * K},
        new long[]{2_949_120, 64 * K}, new long[]{5 * M, 128 * K}, new long[]{21 * M, 64 * K},
        new long[]{22 * M, M}, new long[]{40 * M, 64 * K});
    private static final long DIRTY_BYTES = DIRTY.stream().mapToLong(r -> r[1]).sum();

    @TempDir
    Path dir;
    private Path image;
    private Path socket;

    @BeforeEach
    void enabled() {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-img", "qemu-io", "qemu-nbd");
        image = dir.resolve("disk.qcow2");
        socket = dir.resolve("qemu-nbd.sock");
    }

    private String uri() {
        return "nbd+unix:///?socket=" + socket;
    }

    /** qemu-nbd read-only over the image, one client at a time (its default), with these bitmaps. */
    private Peer qemuNbd(String... bitmaps) throws Exception {
        Files.deleteIfExists(socket);
        List<String> argv = new ArrayList<>(List.of("qemu-nbd", "-r", "-t", "-f", "qcow2", "-k", socket.toString()));
        for (String b : bitmaps) argv.addAll(List.of("-B", b));
        argv.add(image.toString());
        return Peer.startUnix(socket, argv);
    }

    private Interop.Result jnbd(String... args) {
        List<String> argv = new ArrayList<>(List.of(Interop.jnbd().toString()));
        argv.addAll(List.of(args));
        return Interop.run(T, dir, argv);
    }

    private void qemuIo(List<String> commands) {
        List<String> argv = new ArrayList<>(List.of("qemu-io", "-f", "qcow2", image.toString()));
        for (String c : commands) argv.addAll(List.of("-c", c));
        Interop.Result r = Interop.run(T, dir, argv).assertSuccess();
        assertThat(r.output()).as(r.toString()).doesNotContainIgnoringCase("failed").doesNotContainIgnoringCase("error");
    }

    /** The image with data, its full copy in {@code full}, then bitmaps b0 (64 KiB) and b1 added and the writes made. */
    private void fullCopyThenBitmapThenWrites(Path full) throws Exception {
        Interop.run(T, dir, "qemu-img", "create", "-q", "-f", "qcow2", image.toString(), String.valueOf(SIZE)).assertSuccess();
        qemuIo(List.of("write -P 0x11 0 8M", "write -P 0x22 20M 4M", "write -P 0x33 63M 1M"));
        try (Peer ignored = qemuNbd()) {
            jnbd("copy", uri(), full.toString()).assertSuccess();
        }
        Interop.run(T, dir, "qemu-img", "bitmap", "--add", "-g", "64K", image.toString(), "b0").assertSuccess();
        Interop.run(T, dir, "qemu-img", "bitmap", "--add", image.toString(), "b1").assertSuccess();
        qemuIo(WRITES);
    }

    private Path current() {
        Path raw = dir.resolve("current.raw");
        Interop.run(T, dir, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", image.toString(), raw.toString()).assertSuccess();
        return raw;
    }

    @Test
    void theClientReadsTheBitmapAsTheWritesRoundedToItsGranularity() throws Exception {
        fullCopyThenBitmapThenWrites(dir.resolve("full.raw"));
        try (Peer ignored = qemuNbd("b0", "b1")) {
            NbdUri uri = NbdUri.parse(uri());
            assertThat(NbdClient.listMetaContexts(uri, ClientOptions.defaults(), "qemu:dirty-bitmap:"))
                .containsExactlyInAnyOrder(B0, "qemu:dirty-bitmap:b1");
            try (NbdClient client = NbdClient.connect(uri, ClientOptions.defaults().withMetaContexts(B0))) {
                assertThat(client.metaContexts()).containsExactlyInAnyOrder("base:allocation", B0);
                List<MetaExtent> map = client.blocking().metaExtents(B0, 0, SIZE);
                assertThat(map.getFirst().offset()).isZero();
                assertThat(map.getLast().end()).isEqualTo(SIZE);
                assertThat(dirtyRuns(map)).containsExactlyElementsOf(DIRTY);
                // One request for a middle stretch: clipped to it, raw flags 1 and 0.
                assertThat(client.blocking().blockStatus(B0, 5 * M + 64 * K, 128 * K))
                    .containsExactly(new MetaExtent(5 * M + 64 * K, 64 * K, 1), new MetaExtent(5 * M + 128 * K, 64 * K, 0));
                // The old API still reads base:allocation from the same replies: the discard and the zero write read as zeroes.
                assertThat(client.blocking().extents(21 * M, 64 * K)).allMatch(e -> e.zero());
            }
        }
    }

    @Test
    void copyBitmapCopiesOnlyTheDirtyRangesAndTheDestinationEqualsTheImage() throws Exception {
        Path full = dir.resolve("full.raw");
        fullCopyThenBitmapThenWrites(full);
        Path cur = current();
        assertThat(Files.mismatch(full, cur)).as("the writes changed the image").isNotEqualTo(-1);
        Path onFile = Files.copy(full, dir.resolve("incremental.raw"));
        Path onNbd = Files.copy(full, dir.resolve("incremental-nbd.raw"));
        Path wrongSize = dir.resolve("wrong-size.raw");
        Files.write(wrongSize, new byte[4096]);

        try (Peer ignored = qemuNbd("b0", "b1")) {
            Interop.Result copy = jnbd("copy", "--bitmap", "b0", uri(), onFile.toString());
            assertThat(copy.exitCode()).as(copy.toString()).isZero();
            // Only the dirty bytes: at least what was written, far below the disk.
            assertThat(copy.output().strip()).isEqualTo("jnbd copy: copied " + DIRTY_BYTES + " dirty bytes (" + DIRTY.size()
                + " ranges, bitmap b0) of " + SIZE + " (2.3% of the disk) from " + uri() + " to " + onFile);
            assertThat(DIRTY_BYTES).isGreaterThanOrEqualTo(WRITTEN).isLessThan(SIZE / 20);

            // To an NBD destination (jnbd serving the other copy): writes and WRITE_ZEROES, spliced between sockets.
            try (JnbdServer dst = JnbdServer.start(dir, "--export", "d=file:" + onNbd)) {
                Interop.Result toNbd = jnbd("copy", "--bitmap", "b0", uri(), dst.uri("d"));
                assertThat(toNbd.exitCode()).as(toNbd.toString()).isZero();
                assertThat(toNbd.output()).contains("copied " + DIRTY_BYTES + " dirty bytes");
            }

            Interop.Result unknown = jnbd("copy", "--bitmap", "nope", uri(), onFile.toString());
            assertThat(unknown.exitCode()).as(unknown.toString()).isEqualTo(1);
            assertThat(unknown.output().strip()).matches(
                "jnbd: no bitmap 'nope' on \\Q" + uri() + "\\E; it has: (b0, b1|b1, b0)");

            Interop.Result mismatch = jnbd("copy", "--bitmap", "b0", uri(), wrongSize.toString());
            assertThat(mismatch.exitCode()).isEqualTo(1);
            assertThat(mismatch.output().strip()).startsWith("jnbd: destination " + wrongSize + " has 4096 bytes, the source " + SIZE);
            assertThat(Files.size(wrongSize)).isEqualTo(4096);

            Path none = dir.resolve("none.raw");
            Interop.Result missing = jnbd("copy", "--bitmap", "b0", uri(), none.toString());
            assertThat(missing.exitCode()).isEqualTo(1);
            assertThat(missing.output().strip()).startsWith("jnbd: " + none + ": no such file").doesNotContain("\n");
            assertThat(none).doesNotExist();
        }
        assertThat(Files.mismatch(onFile, cur)).as("file destination equals the image").isEqualTo(-1);
        assertThat(Files.mismatch(onNbd, cur)).as("NBD destination equals the image").isEqualTo(-1);
    }

    /** The dirty extents' ranges, adjacent ones merged. */
    private static List<long[]> dirtyRuns(List<MetaExtent> map) {
        List<long[]> runs = new ArrayList<>();
        for (MetaExtent e : map) {
            if (!e.has(MetaExtent.DIRTY)) continue;
            long[] last = runs.isEmpty() ? null : runs.getLast();
            if (last != null && last[0] + last[1] == e.offset()) {
                last[1] += e.length();
            } else {
                runs.add(new long[]{e.offset(), e.length()});
            }
        }
        return runs;
    }
}
