package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** Sessions of both engines at both versions: handshake, what each end learns of the other, messages both ways. */
@Timeout(120)
class RoundTripTest {
    @TempDir
    static Path dir;

    @BeforeAll
    static void pki() {
        Setup.prepare(dir);
    }

    @ParameterizedTest
    @EnumSource(Setup.class)
    void messagesBothWaysAndWhatEachEndKnows(Setup setup) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(setup.server(dir), setup.client(dir))) {
            assertThat(s.server().description()).startsWith(setup.protocol() + " TLS_").isEqualTo(s.client().description());
            if (setup.psk) {
                assertThat(s.server().peerIdentities()).containsExactly("alice");
                assertThat(s.client().peerIdentities()).containsExactly("alice");
                if (setup.versions == Versions.TLS13) assertThat(s.server().description()).endsWith("_SHA256");
            } else {
                assertThat(s.client().peerIdentities()).containsExactly("localhost", "127.0.0.1");
                assertThat(s.server().peerIdentities()).as("no client certificate asked for").isEmpty();
            }

            s.client().write(ascii("NBD "), ascii("request"));
            assertThat(readAscii(s.server(), 11)).isEqualTo("NBD request");
            s.server().write(ascii("reply"));
            assertThat(readAscii(s.client(), 5)).isEqualTo("reply");
            assertThat(s.client().buffered()).isZero();
        }
    }

    @ParameterizedTest
    @EnumSource(Setup.class)
    void emptyWritesSendNothingAndReadsOfNothingReturnZero(Setup setup) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(setup.server(dir), setup.client(dir))) {
            s.client().write();
            s.client().write(ByteBuffer.allocate(0), ascii("x"));
            assertThat(s.server().read(ByteBuffer.allocate(0))).isZero();
            assertThat(readAscii(s.server(), 1)).isEqualTo("x");
        }
    }

    static ByteBuffer ascii(String s) {
        return ByteBuffer.wrap(s.getBytes(StandardCharsets.US_ASCII));
    }

    static String readAscii(SecureChannel c, int n) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) {
            if (c.read(b) < 0) break;
        }
        return new String(b.array(), 0, b.position(), StandardCharsets.US_ASCII);
    }

    static List<Setup> all() {
        return List.of(Setup.values());
    }
}
