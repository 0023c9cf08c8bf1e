package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * libnbd's tools and QEMU against {@code jnbd serve --tls require}, X.509 with client certificates required and
 * PSK on the same server: data both ways, every credential a client can get wrong (each ends that connection
 * only, with a log line saying why), and exports with allow lists.
 */
@Timeout(300)
class TlsInteropTest {
    private static final Duration T = Duration.ofSeconds(120);
    private static final long SIZE = 32L << 20;

    @TempDir
    static Path dir;
    static TlsFiles tls;
    static JnbdServer server;
    static Path source;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo", "nbdcopy", "qemu-img", "qemu-io");
        tls = new TlsFiles(dir.resolve("pki"));
        source = dir.resolve("src.img");
        Interop.writeRandomImage(source, SIZE, 11);
        server = JnbdServer.start(dir,
            "--tls", "require", "--tls-certificates", tls.server.toString(), "--tls-verify-peer",
            "--tls-psk", tls.psk.toString(), "--receive-timeout", "5",
            "--export", "disk=file:" + dir.resolve("disk.img") + ",size=64M",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=64M,mode=direct",
            "--export", "mem=memory:64M",
            "--export", "secret=memory:16M,allow=alice",
            "--export", "local=memory:16M,allow=127.0.0.0/8;::1",
            "--export", "lan=memory:16M,allow=10.0.0.0/8");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    private static String x509(String export, Path client) {
        return TlsFiles.x509Uri(server.port(), export, client);
    }

    private static String psk(String export, String identity, Path file) {
        return TlsFiles.pskUri(server.port(), export, identity, file);
    }

    /** Waits for the server to log {@code text} (it logs a connection's end a moment after the client sees it). */
    private static void awaitLog(String text) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (!server.log().contains(text) && System.nanoTime() < deadline) Thread.sleep(100);
        assertThat(server.log()).as("server log").contains(text);
    }

    private static void awaitLogAny(String... texts) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (java.util.Arrays.stream(texts).noneMatch(server.log()::contains) && System.nanoTime() < deadline) {
            Thread.sleep(100);
        }
        assertThat(server.log()).as("server log").containsAnyOf(texts);
    }

    private static void aliceStillServed() {
        Interop.run(T, dir, "nbdinfo", "--size", x509("mem", tls.alice)).assertSuccess();
    }

    // ------------------------------------------------------------------ what works

    @Test
    void startupLogSaysWhatTlsIsConfigured() {
        assertThat(server.log()).contains("TLS required: X.509 (", "client certificates required", "PSK (2 identities)");
    }

    @Test
    void nbdinfoListsOverX509WhatAliceMayOpen() {
        String out = Interop.run(T, dir, "nbdinfo", "--list", x509("", tls.alice)).assertSuccess().output();
        assertThat(out).contains("export=\"disk\"", "export=\"direct\"", "export=\"mem\"", "export=\"secret\"",
            "export=\"local\"", "with TLS").doesNotContain("export=\"lan\"");
    }

    @Test
    void nbdinfoOverPsk() {
        NbdinfoJson info = new NbdinfoJson(Interop.run(T, dir, "nbdinfo", "--json", psk("disk", "alice", tls.psk))
            .assertSuccess().output());
        assertThat(info.number("export-size")).isEqualTo(64L << 20);
        assertThat(info.bool("can_flush")).isTrue();
    }

    @ParameterizedTest
    @ValueSource(strings = {"disk", "direct", "mem"})
    void nbdcopyInOverX509AndOutOverPsk(String export) throws Exception {
        Interop.run(T, dir, "nbdcopy", "--flush", source.toString(), x509(export, tls.alice)).assertSuccess();
        Path out = dir.resolve("out-" + export + ".img");
        Files.deleteIfExists(out);
        Files.createFile(out);
        Interop.run(T, dir, "nbdcopy", "--connections=2", "--requests=16", psk(export, "bob", tls.psk), out.toString())
            .assertSuccess();
        assertThat(Files.size(out)).isEqualTo(64L << 20);
        try (var file = java.nio.channels.FileChannel.open(out, java.nio.file.StandardOpenOption.WRITE)) {
            file.truncate(SIZE); // the export is larger than what was copied in
        }
        assertThat(Files.mismatch(source, out)).as("first differing byte").isEqualTo(-1L);
        Files.delete(out);
    }

    @Test
    void qemuImgInfoOverX509AndPsk() {
        for (String object : List.of(TlsFiles.qemuX509(tls.alice), TlsFiles.qemuPsk(tls.psk, "alice"))) {
            String out = Interop.run(T, dir, "qemu-img", "info", "--object", object, "--image-opts",
                TlsFiles.qemuImage(server.port(), "disk")).assertSuccess().output();
            assertThat(out).contains("virtual size: 64 MiB");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"disk", "direct", "mem"})
    void qemuIoPatternsOverX509(String export) {
        qemuIo(TlsFiles.qemuX509(tls.alice), export, "write -P 0xab 0 1M", "read -P 0xab 0 1M",
            "write -P 0x42 16M 8M", "read -P 0x42 16M 8M", "write -z 20M 1M", "read -P 0 20M 1M",
            "write -P 0x3c 30M 512", "read -P 0x3c 30M 512", "flush");
        List<String> aio = new ArrayList<>();
        for (int i = 0; i < 16; i++) aio.add(String.format("aio_write -P 0x%02x %dk 64k", i + 1, 40 * 1024 + i * 64));
        aio.add("aio_flush");
        for (int i = 15; i >= 0; i--) aio.add(String.format("aio_read -P 0x%02x %dk 64k", i + 1, 40 * 1024 + i * 64));
        aio.add("aio_flush");
        qemuIo(TlsFiles.qemuX509(tls.alice), export, aio.toArray(String[]::new));
    }

    @Test
    void qemuIoOverPsk() {
        qemuIo(TlsFiles.qemuPsk(tls.psk, "bob"), "mem", "write -P 0x5a 2M 1M", "read -P 0x5a 2M 1M");
    }

    private static void qemuIo(String object, String export, String... commands) {
        List<String> argv = new ArrayList<>(List.of("qemu-io", "--object", object, "--image-opts",
            TlsFiles.qemuImage(server.port(), export)));
        for (String c : commands) {
            argv.add("-c");
            argv.add(c);
        }
        Interop.Result r = Interop.run(T, dir, argv).assertSuccess();
        assertThat(r.output()).as(r.toString()).doesNotContain("Pattern verification failed")
            .doesNotContainIgnoringCase("error").doesNotContainIgnoringCase("failed");
    }

    // ------------------------------------------------------------------ access lists

    @Test
    void anExportAllowedToAliceIsNeitherListedNorOpenedForBob() throws Exception {
        for (String uri : List.of(x509("", tls.bob), psk("", "bob", tls.psk))) {
            String out = Interop.run(T, dir, "nbdinfo", "--list", uri).assertSuccess().output();
            assertThat(out).contains("export=\"disk\"").doesNotContain("export=\"secret\"");
        }
        Interop.Result refused = Interop.run(T, dir, "nbdinfo", x509("secret", tls.bob));
        assertThat(refused.exitCode()).as(refused.toString()).isNotZero();
        awaitLog("NBD_OPT_GO 'secret' refused: export 'secret' is not open to this client");
        assertThat(server.log()).contains("identities [bob]");
        Interop.Result pskRefused = Interop.run(T, dir, "nbdinfo", psk("secret", "bob", tls.psk));
        assertThat(pskRefused.exitCode()).isNotZero();
        Interop.run(T, dir, "nbdinfo", "--size", psk("secret", "alice", tls.psk)).assertSuccess();
        Interop.run(T, dir, "nbdinfo", "--size", x509("secret", tls.alice)).assertSuccess();
    }

    @Test
    void addressRangesAdmitLoopbackAndRefuseOthers() {
        Interop.run(T, dir, "nbdinfo", "--size", x509("local", tls.bob)).assertSuccess();
        Interop.Result lan = Interop.run(T, dir, "nbdinfo", x509("lan", tls.alice));
        assertThat(lan.exitCode()).as(lan.toString()).isNotZero();
    }

    // ------------------------------------------------------------------ bad input

    @Test
    void aPlainClientGetsTlsReqdAndNoExportNames() throws Exception {
        Interop.Result plain = Interop.run(T, dir, "nbdinfo", "--list", server.uri(""));
        assertThat(plain.exitCode()).as(plain.toString()).isNotZero();
        try (OptionClient c = new OptionClient(server.port())) {
            List<OptionClient.Reply> list = c.option(OptionClient.OPT_LIST, new byte[0]);
            assertThat(list).extracting(OptionClient.Reply::type).containsExactly(OptionClient.REP_ERR_TLS_REQD);
            assertThat(list.getFirst().text()).doesNotContain("disk", "secret");
            for (int option : new int[] {OptionClient.OPT_INFO, OptionClient.OPT_GO}) {
                assertThat(c.option(option, OptionClient.exportRequest("disk"))).extracting(OptionClient.Reply::type)
                    .containsExactly(OptionClient.REP_ERR_TLS_REQD);
            }
            assertThat(c.option(OptionClient.OPT_STRUCTURED_REPLY, new byte[0])).extracting(OptionClient.Reply::type)
                .containsExactly(OptionClient.REP_ERR_TLS_REQD);
        }
    }

    @Test
    void aClientThatTrustsAnotherCaFailsAndTheServerSaysWhy() throws Exception {
        Interop.Result r = Interop.run(T, dir, "nbdinfo", x509("mem", tls.stranger));
        assertThat(r.exitCode()).as(r.toString()).isNotZero();
        awaitLog("TLS handshake failed");
        aliceStillServed();
    }

    @Test
    void aClientWithoutACertificateIsRefusedUnderVerifyPeer() throws Exception {
        Interop.Result r = Interop.run(T, dir, "nbdinfo", x509("mem", tls.caOnly));
        assertThat(r.exitCode()).as(r.toString()).isNotZero();
        // Known race (see the session note): when GnuTLS hangs up right after its empty Certificate, the server
        // may log the end of stream before the engine's verdict. Either way the client was refused.
        awaitLogAny("TLS handshake failed: the client sent no certificate and one is required",
            "client disconnected during handshake");
        aliceStillServed();
    }

    @Test
    void aWrongPskKeyIsRefused() throws Exception {
        Interop.Result r = Interop.run(T, dir, "nbdinfo", psk("mem", "alice", tls.wrongPsk));
        assertThat(r.exitCode()).as(r.toString()).isNotZero();
        awaitLog("bad key for 'alice'");
        aliceStillServed();
    }

    @Test
    void anUnknownPskIdentityIsRefused() throws Exception {
        Interop.Result r = Interop.run(T, dir, "nbdinfo", psk("mem", "mallory", tls.malloryPsk));
        assertThat(r.exitCode()).as(r.toString()).isNotZero();
        awaitLog("unknown PSK identity 'mallory'");
        aliceStillServed();
    }

    @Test
    void garbageInsteadOfAClientHelloEndsThatConnection() throws Exception {
        try (OptionClient c = new OptionClient(server.port())) {
            assertThat(c.option(OptionClient.OPT_STARTTLS, new byte[0])).extracting(OptionClient.Reply::type)
                .containsExactly(OptionClient.REP_ACK);
            c.writeRaw("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".getBytes());
            assertThat(c.closedByServer()).isTrue();
        }
        awaitLog("the peer is not speaking TLS");
        aliceStillServed();
    }

    @Test
    void aSecondStartTlsIsInvalidOverTls() throws Exception {
        try (OptionClient c = new OptionClient(server.port())) {
            c.option(OptionClient.OPT_STARTTLS, new byte[0]);
            c.handshake(new io.jnbd.tls.TlsClientSettings(tls.alice, null, null, true, "localhost"));
            assertThat(c.option(OptionClient.OPT_STARTTLS, new byte[0])).extracting(OptionClient.Reply::type)
                .containsExactly(OptionClient.REP_ERR_INVALID);
            assertThat(c.option(OptionClient.OPT_GO, OptionClient.exportRequest("mem")).getLast().type())
                .as("the session goes on").isEqualTo(OptionClient.REP_ACK);
        }
    }

    @Test
    void aTlsClientThatStopsInsideARecordIsDroppedByTheReceiveTimeout() throws Exception {
        try (OptionClient c = new OptionClient(server.port())) {
            c.option(OptionClient.OPT_STARTTLS, new byte[0]);
            c.handshake(new io.jnbd.tls.TlsClientSettings(null, tls.psk, "alice", false, "localhost"));
            assertThat(c.option(OptionClient.OPT_GO, OptionClient.exportRequest("mem")).getLast().type())
                .isEqualTo(OptionClient.REP_ACK);
            // An application data record that claims 256 bytes, of which 10 come.
            c.writeRaw(new byte[] {23, 3, 3, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
            assertThat(c.closedByServer()).as("dropped by --receive-timeout 5").isTrue();
        }
        awaitLog("sent part of a request, then nothing for 5s");
        aliceStillServed();
    }
}
