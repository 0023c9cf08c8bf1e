package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * fio's nbd engine over {@code nbds://}, many requests in flight, with crc32c verification: the TLS transport's
 * batching, split reads and writes through its writer.
 *
 * <p>fio's libnbd refuses local files named in the URI ({@code ?tls-certificates=}: "local file access is not
 * allowed", fio does not call nbd_set_uri_allow_local_file), so fio finds the CA where libnbd looks by default:
 * {@code $HOME/.pki/libnbd}, for any user but root, who is sent to {@code /etc/pki/libnbd}. Rather than write
 * there, a root test runs fio as {@code nobody} with HOME pointing at a directory of its own.
 */
@Timeout(600)
class TlsFioInteropTest {
    private static final Duration T = Duration.ofSeconds(240);

    @TempDir
    static Path dir;
    static JnbdServer server;
    /** fio's HOME, readable by nobody: it holds .pki/libnbd/ca-cert.pem and nothing secret. */
    static Path home;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("fio");
        if (Interop.isRoot()) assumeTrue(Interop.which("setpriv") != null, "setpriv is missing: cannot run fio as nobody");
        TlsFiles tls = new TlsFiles(dir.resolve("pki"));
        home = Files.createTempDirectory("jnbd-fio-home", PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwxr-xr-x")));
        Path libnbd = Files.createDirectories(home.resolve(".pki/libnbd"));
        Files.copy(tls.caOnly.resolve("ca-cert.pem"), libnbd.resolve("ca-cert.pem"));
        for (Path p : List.of(home.resolve(".pki"), libnbd)) Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwxr-xr-x"));
        Files.setPosixFilePermissions(libnbd.resolve("ca-cert.pem"), PosixFilePermissions.fromString("rw-r--r--"));
        server = JnbdServer.start(dir, "--tls", "require", "--tls-certificates", tls.server.toString(),
            "--export", "cached=file:" + dir.resolve("cached.img") + ",size=64M,mode=cached",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=64M,mode=direct",
            "--export", "chunked=memory:64M,split=128K,chunk=32K,streams=4");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
        if (home != null) {
            try (Stream<Path> paths = Files.walk(home)) {
                for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
            } catch (IOException e) {
                System.err.println("cleanup of " + home + ": " + e);
            }
        }
    }

    static Stream<Arguments> workloads() {
        return Stream.of(
            Arguments.of("cached", "randrw", "--bsrange=4k-256k", 16),
            Arguments.of("cached", "write", "--bs=1M", 4),
            Arguments.of("direct", "randrw", "--bssplit=4k/40:64k/30:512k/20:2m/10", 32),
            Arguments.of("direct", "randwrite", "--bs=4k", 1),
            Arguments.of("chunked", "randrw", "--bsrange=4k-1m", 16));
    }

    @ParameterizedTest(name = "{0}: rw={1} {2} iodepth={3}")
    @MethodSource("workloads")
    void verifiedWorkloadOverTls(String export, String rw, String blockSizes, int iodepth) {
        List<String> argv = new ArrayList<>();
        if (Interop.isRoot()) argv.addAll(List.of("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"));
        argv.addAll(List.of("env", "HOME=" + home, "fio", "--name=tls-" + export, "--ioengine=nbd",
            "--uri=nbds://127.0.0.1:" + server.port() + "/" + export, "--rw=" + rw, blockSizes, "--iodepth=" + iodepth,
            "--size=64M", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0",
            "--randrepeat=0", "--output-format=normal"));
        Interop.Result result = Interop.run(T, home, argv);
        result.assertSuccess();
        assertThat(result.output()).as(result.toString())
            .contains("Run status group 0")
            .doesNotContain("verify: bad")
            .doesNotContainIgnoringCase("crc32c: verify failed")
            .doesNotContainPattern("err=\\s*-?[1-9]");
        assertThat(server.log()).contains("TLS TLSv1.3");
    }
}
