package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.BitmapsForTests;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.MetaExtent;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Real clients read metadata contexts beyond {@code base:allocation} from jnbd: libnbd's nbdinfo lists them and maps
 * one, and qemu's own NBD client reads one through {@code x-dirty-bitmap}. The contexts come from a test backend with
 * known extents (the dirty filter's end-to-end test is separate), served in this JVM.
 */
@Timeout(120)
class MetaContextInteropTest {
    private static final Duration T = Duration.ofSeconds(30);
    private static final int K = 1024;
    private static final String A = "qemu:dirty-bitmap:a";
    private static final String B = "qemu:dirty-bitmap:b";

    @TempDir
    Path dir;
    NbdServer server;
    String uri;
    int port;

    @BeforeEach
    void start() throws IOException {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo");
        // a: 64K clean, 128K dirty, the rest clean. b: 256K dirty, the rest clean.
        BitmapsForTests bitmaps = new BitmapsForTests(new MemoryBackend(1 << 20));
        bitmaps.put(A, List.of(new MetaExtent(64 * K, 0), new MetaExtent(128 * K, 1), new MetaExtent(832 * K, 0)));
        bitmaps.put(B, List.of(new MetaExtent(256 * K, 1), new MetaExtent(768 * K, 0)));
        server = new NbdServer(new Exports(List.of(new Export("bm", "", bitmaps)), null), ServerConfig.defaults());
        port = ((InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0))).getPort();
        uri = "nbd://127.0.0.1:" + port + "/bm";
    }

    @AfterEach
    void stop() {
        if (server != null) server.stop(Duration.ofSeconds(10));
    }

    @Test
    void nbdinfoListsEveryContext() {
        NbdinfoJson info = new NbdinfoJson(Interop.run(T, dir, "nbdinfo", "--json", uri).assertSuccess().output());
        assertThat(info.contexts()).containsExactly("base:allocation", A, B);
    }

    @Test
    void nbdinfoMapsEachBitmap() {
        assertThat(map(A)).containsExactly(List.of(0L, 64L * K, 0L), List.of(64L * K, 128L * K, 1L), List.of(192L * K, 832L * K, 0L));
        assertThat(map(B)).containsExactly(List.of(0L, 256L * K, 1L), List.of(256L * K, 768L * K, 0L));
        // base:allocation as before: an untouched memory export is all hole and zero.
        assertThat(map("base:allocation")).containsExactly(List.of(0L, 1024L * K, 3L));
    }

    /** qemu reads a bitmap as if it were base:allocation: a dirty extent (bit 0) comes out as a hole, "data": false. */
    @Test
    void qemuImgReadsABitmapThroughXDirtyBitmap() {
        Interop.requireCommands("qemu-img");
        String out = Interop.run(T, dir, "qemu-img", "map", "--output=json", "--image-opts",
            "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=" + port + ",export=bm,x-dirty-bitmap=" + A)
            .assertSuccess().output();
        List<String> seen = new ArrayList<>();
        for (Object o : (List<?>) JsonDoc.parse(out)) {
            Map<?, ?> e = (Map<?, ?>) o;
            seen.add(e.get("start") + "+" + e.get("length") + ":" + e.get("data"));
        }
        assertThat(seen).as(out).containsExactly("0+65536:true", "65536+131072:false", "196608+851968:true");
    }

    /** The extents {@code nbdinfo --map=CONTEXT} prints, each as offset, length and type. */
    private List<List<Long>> map(String context) {
        String out = Interop.run(T, dir, "nbdinfo", "--map=" + context, uri).assertSuccess().output();
        List<List<Long>> rows = new ArrayList<>();
        for (String line : out.strip().split("\n")) {
            String[] f = line.strip().split("\\s+");
            rows.add(List.of(Long.parseLong(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2])));
        }
        return rows;
    }
}
