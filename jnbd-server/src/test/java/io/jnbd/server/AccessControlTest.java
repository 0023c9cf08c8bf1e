package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Per-export allow lists: a client that matches no entry does not see the export in LIST and is refused it in
 * GO, INFO and the meta context options with {@code NBD_REP_ERR_POLICY} (EXPORT_NAME: closed); one that
 * matches sees and opens it. Identities come from the TLS session ({@link NullTls} here), addresses from the
 * socket.
 */
@Timeout(60)
class AccessControlTest {
    @TempDir
    Path dir;
    private NbdServer server;

    private SocketAddress start(ServerTls tls, SocketAddress listen, String... specs) throws IOException {
        List<Export> exports = new ArrayList<>();
        for (String spec : specs) exports.add(ExportSpec.parse(spec).openExport());
        server = new NbdServer(new Exports(exports, null), ServerConfig.defaults(), tls);
        return server.listen(listen);
    }

    @AfterEach
    void stop() {
        if (server != null) server.stop(Duration.ofSeconds(5));
    }

    private static RawClient greeted(SocketAddress address) throws IOException {
        RawClient c = RawClient.connect(address);
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        return c;
    }

    private static List<String> listed(RawClient c) throws IOException {
        List<String> names = new ArrayList<>();
        for (RawClient.OptionReply r : c.optionUntilFinal(Nbd.OPT_LIST, new byte[0])) {
            if (r.type() != Nbd.REP_SERVER) continue;
            byte[] name = new byte[r.data().getInt(0)];
            r.data().get(4, name);
            names.add(new String(name, StandardCharsets.UTF_8));
        }
        return names;
    }

    private static int go(RawClient c, int option, String export) throws IOException {
        return c.optionUntilFinal(option, RawClient.exportRequest(export, List.of())).getLast().type();
    }

    @Test
    void anAllowedIdentitySeesAndOpensTheExportAnotherDoesNot() throws Exception {
        SocketAddress address = start(new ServerTls(ServerTls.Mode.REQUIRE, new NullTls()), new InetSocketAddress("127.0.0.1", 0),
            "secret=memory:1M,allow=alice;carol", "open=memory:1M");
        try (RawClient alice = greeted(address)) {
            StartTlsTest.startTls(alice, "alice");
            assertThat(listed(alice)).containsExactly("secret", "open");
            assertThat(go(alice, Nbd.OPT_INFO, "secret")).isEqualTo(Nbd.REP_ACK);
            alice.negotiateAfterGreeting("secret", false);
            assertThat(alice.write(0, new byte[4096], 0)).isZero();
            alice.disconnect();
        }
        try (RawClient bob = greeted(address)) {
            StartTlsTest.startTls(bob, "bob");
            assertThat(listed(bob)).as("the export is not shown to bob").containsExactly("open");
            assertThat(go(bob, Nbd.OPT_INFO, "secret")).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(go(bob, Nbd.OPT_GO, "secret")).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(go(bob, Nbd.OPT_GO, "")).as("the default export is 'secret'").isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(bob.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            for (int option : new int[] {Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT}) {
                var r = bob.optionUntilFinal(option, RawClient.metaContext("secret", List.of(Nbd.CONTEXT_BASE_ALLOCATION)));
                assertThat(r).extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ERR_POLICY);
            }
            assertThat(go(bob, Nbd.OPT_GO, "open")).as("bob still gets the open export").isEqualTo(Nbd.REP_ACK);
        }
        try (RawClient bob = greeted(address)) {
            StartTlsTest.startTls(bob, "bob");
            bob.sendOption(Nbd.OPT_EXPORT_NAME, "secret".getBytes(StandardCharsets.UTF_8));
            assertThat(bob.closedByPeer()).as("EXPORT_NAME cannot carry POLICY: closed").isTrue();
        }
    }

    @Test
    void aPlainClientHasNoIdentityAndMatchesOnlyAddresses() throws Exception {
        SocketAddress address = start(new ServerTls(ServerTls.Mode.ON, new NullTls()), new InetSocketAddress("127.0.0.1", 0),
            "byname=memory:1M,allow=alice", "local=memory:1M,allow=127.0.0.0/8", "remote=memory:1M,allow=10.0.0.0/8;192.0.2.1");
        try (RawClient plain = greeted(address)) {
            assertThat(listed(plain)).containsExactly("local");
            // Only TLS could open 'byname' (the spec's TLS-only export): GO and INFO say TLS_REQD, not POLICY.
            assertThat(go(plain, Nbd.OPT_INFO, "byname")).isEqualTo(Nbd.REP_ERR_TLS_REQD);
            assertThat(go(plain, Nbd.OPT_GO, "byname")).isEqualTo(Nbd.REP_ERR_TLS_REQD);
            assertThat(go(plain, Nbd.OPT_INFO, "remote")).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(go(plain, Nbd.OPT_INFO, "local")).isEqualTo(Nbd.REP_ACK);
            StartTlsTest.startTls(plain, "alice");
            assertThat(listed(plain)).as("after TLS as alice").containsExactly("byname", "local");
        }
    }

    @Test
    void ipv6RangesMatchIpv6Clients() throws Exception {
        SocketAddress address;
        try {
            address = start(ServerTls.OFF, new InetSocketAddress("::1", 0),
                "v6=memory:1M,allow=::1/128", "docs=memory:1M,allow=2001:db8::/32", "v4=memory:1M,allow=127.0.0.1");
        } catch (IOException e) {
            assumeTrue(false, "no IPv6 loopback here: " + e);
            return;
        }
        try (RawClient c = greeted(address)) {
            assertThat(listed(c)).containsExactly("v6");
            assertThat(go(c, Nbd.OPT_GO, "docs")).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(go(c, Nbd.OPT_GO, "v6")).isEqualTo(Nbd.REP_ACK);
        }
    }

    @Test
    void aUnixSocketClientHasNoAddress() throws Exception {
        SocketAddress address = start(new ServerTls(ServerTls.Mode.ON, new NullTls()),
            UnixDomainSocketAddress.of(dir.resolve("jnbd.sock")), "lo=memory:1M,allow=127.0.0.0/8;::1", "alice=memory:1M,allow=alice");
        try (RawClient c = greeted(address)) {
            assertThat(listed(c)).isEmpty();
            assertThat(go(c, Nbd.OPT_INFO, "lo")).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(go(c, Nbd.OPT_INFO, "alice")).isEqualTo(Nbd.REP_ERR_TLS_REQD);
            StartTlsTest.startTls(c, "alice");
            assertThat(listed(c)).containsExactly("alice");
        }
    }

    @Test
    void readonlyForAnIdentityOrAddressSendsReadOnlyAndRefusesItsWrites() throws Exception {
        SocketAddress address = start(new ServerTls(ServerTls.Mode.ON, new NullTls()), new InetSocketAddress("127.0.0.1", 0),
            "disk=memory:1M,readonly-for=bob;10.0.0.0/8", "lab=memory:1M,readonly-for=127.0.0.1");
        try (RawClient alice = greeted(address)) {
            StartTlsTest.startTls(alice, "alice");
            alice.negotiateAfterGreeting("disk", false);
            assertThat(alice.transmissionFlags & Nbd.FLAG_READ_ONLY).as("alice may write").isZero();
            assertThat(alice.write(0, new byte[] {1, 2, 3, 4}, 0)).isZero();
            alice.disconnect();
        }
        try (RawClient bob = greeted(address)) {
            StartTlsTest.startTls(bob, "bob");
            assertThat(listed(bob)).as("read-only is not hidden").containsExactly("disk", "lab");
            bob.negotiateAfterGreeting("disk", false);
            assertThat(bob.transmissionFlags & Nbd.FLAG_READ_ONLY).isNotZero();
            assertThat(bob.transmissionFlags & (Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES)).isZero();
            assertThat(bob.write(0, new byte[4096], 0)).isEqualTo(Nbd.EPERM);
            assertThat(bob.write(0, new byte[4096], Nbd.CMD_FLAG_FUA)).isEqualTo(Nbd.EPERM);
            assertThat(bob.command(Nbd.CMD_TRIM, 0, 0, 4096)).isEqualTo(Nbd.EPERM);
            assertThat(bob.command(Nbd.CMD_WRITE_ZEROES, 0, 0, 4096)).isEqualTo(Nbd.EPERM);
            bob.disconnect();
        }
        try (RawClient alice = greeted(address)) {
            StartTlsTest.startTls(alice, "alice");
            alice.negotiateAfterGreeting("disk", false);
            assertThat(alice.read(0, 4)).as("bob's writes changed nothing").containsExactly(1, 2, 3, 4);
            alice.disconnect();
        }
        try (RawClient local = greeted(address)) {
            local.negotiateAfterGreeting("lab", false);
            assertThat(local.transmissionFlags & Nbd.FLAG_READ_ONLY).as("matched by address, no TLS").isNotZero();
            assertThat(local.write(0, new byte[512], 0)).isEqualTo(Nbd.EPERM);
            local.disconnect();
        }
    }
}
