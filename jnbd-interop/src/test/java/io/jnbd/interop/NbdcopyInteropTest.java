package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** nbdcopy (libnbd, multi-conn, many requests in flight) file -> export -> file: identical bytes. */
@Timeout(300)
class NbdcopyInteropTest {

    private static final Duration T = Duration.ofSeconds(240);
    private static final long SIZE = 48L << 20;

    @TempDir
    static Path dir;
    static JnbdServer server;
    static Path source;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdcopy");
        source = dir.resolve("src.img");
        Interop.writeRandomImage(source, SIZE, 3);
        server = JnbdServer.start(dir,
            "--export", "cached=file:" + dir.resolve("cached.img") + ",size=48M",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=48M,mode=direct",
            "--export", "mem=memory:48M",
            // large reads cut into chunks that leave out of order, with the sorting scheduler
            "--export", "chunked=file:" + dir.resolve("chunked.img")
                + ",size=48M,mode=direct,scheduler=sorted,split=128K,chunk=32K,streams=4");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    @ParameterizedTest
    @ValueSource(strings = {"cached", "direct", "mem", "chunked"})
    void fileToExportToFile(String export) throws Exception {
        String uri = server.uri(export);
        Interop.run(T, dir, "nbdcopy", "--flush", source.toString(), uri).assertSuccess();
        Path out = dir.resolve("out-" + export + ".img");
        Files.deleteIfExists(out);
        Files.createFile(out);
        Interop.run(T, dir, "nbdcopy", uri, out.toString()).assertSuccess();
        assertThat(Files.size(out)).isEqualTo(SIZE);
        assertThat(Files.mismatch(source, out)).as("first differing byte of %s", out).isEqualTo(-1L);
        Files.delete(out);
    }

    @Test
    void manyConnectionsAndRequests() throws Exception {
        String uri = server.uri("cached");
        Interop.run(T, dir, "nbdcopy", "--connections=4", "--requests=64", "--request-size=65536",
            source.toString(), uri).assertSuccess();
        Path out = dir.resolve("out-many.img");
        Files.deleteIfExists(out);
        Files.createFile(out);
        Interop.run(T, dir, "nbdcopy", "--connections=4", "--requests=64", uri, out.toString()).assertSuccess();
        assertThat(Files.mismatch(source, out)).isEqualTo(-1L);
        Files.delete(out);
    }

    @Test
    void exportToExport() throws Exception {
        Interop.run(T, dir, "nbdcopy", source.toString(), server.uri("cached")).assertSuccess();
        Interop.run(T, dir, "nbdcopy", server.uri("cached"), server.uri("mem")).assertSuccess();
        Path out = dir.resolve("out-e2e.img");
        Files.deleteIfExists(out);
        Files.createFile(out);
        Interop.run(T, dir, "nbdcopy", server.uri("mem"), out.toString()).assertSuccess();
        assertThat(Files.mismatch(source, out)).isEqualTo(-1L);
        Files.delete(out);
    }
}
