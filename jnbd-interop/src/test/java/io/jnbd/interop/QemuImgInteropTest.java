package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** qemu-img convert into and out of an export, then qemu-img compare: the bytes survive the round trip. */
@Timeout(300)
class QemuImgInteropTest {

    private static final Duration T = Duration.ofSeconds(240);
    private static final long SIZE = 32L << 20;

    @TempDir
    static Path dir;
    static JnbdServer server;
    static Path source;
    static Path noise;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-img");
        source = dir.resolve("src.img");
        noise = dir.resolve("noise.img");
        Interop.writeRandomImage(source, SIZE, 1);
        Interop.writeRandomImage(noise, SIZE, 2);
        server = JnbdServer.start(dir,
            "--export", "cached=file:" + dir.resolve("cached.img") + ",size=32M",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=32M,mode=direct",
            "--export", "mem=memory:32M",
            // large reads cut into chunks that leave out of order, with the sorting scheduler
            "--export", "chunked=file:" + dir.resolve("chunked.img")
                + ",size=32M,mode=direct,scheduler=sorted,split=128K,chunk=32K,streams=4");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    @ParameterizedTest
    @ValueSource(strings = {"cached", "direct", "mem", "chunked"})
    void convertInAndOutThenCompare(String export) throws Exception {
        String uri = server.uri(export);
        // Fill the export with other data first, so the zero stretches of the source must really be written.
        Interop.run(T, dir, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", noise.toString(), uri).assertSuccess();
        Interop.run(T, dir, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", source.toString(), uri).assertSuccess();

        Interop.run(T, dir, "qemu-img", "compare", "-f", "raw", "-F", "raw", source.toString(), uri).assertSuccess();

        Path out = dir.resolve("out-" + export + ".img");
        Interop.run(T, dir, "qemu-img", "convert", "-f", "raw", "-O", "raw", uri, out.toString()).assertSuccess();
        Interop.run(T, dir, "qemu-img", "compare", "-f", "raw", "-F", "raw", source.toString(), out.toString())
            .assertSuccess();
        assertThat(Files.mismatch(source, out)).as("first differing byte of %s", out).isEqualTo(-1L);

        if (!export.equals("mem")) {
            Path backing = dir.resolve(export + ".img");
            assertThat(Files.mismatch(source, backing)).as("first differing byte of the backing file").isEqualTo(-1L);
        }
        Files.delete(out);
    }

    @ParameterizedTest
    @ValueSource(strings = {"cached", "mem"})
    void infoShowsTheVirtualSize(String export) {
        String out = Interop.run(T, dir, "qemu-img", "info", "-f", "raw", server.uri(export)).assertSuccess().output();
        assertThat(out).contains("virtual size: 32 MiB (33554432 bytes)");
    }
}
