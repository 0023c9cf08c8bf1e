package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * A plain NBD client that ignores the STARTTLS reply sends its next option where the ClientHello should be:
 * the server says so at once, with the socket still open (no waiting for a 16 KiB "record").
 */
@Timeout(30)
class GarbageTest {
    @TempDir
    static Path dir;

    @BeforeAll
    static void pki() {
        Setup.prepare(dir);
    }

    @ParameterizedTest
    @ValueSource(strings = {"x509", "psk", "both"})
    void nbdOptionInsteadOfClientHello(String kind) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(kind.equals("psk") ? null : dir,
            kind.equals("x509") ? null : dir.resolve(Setup.PSK_FILE), false));
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server);
            // IHAVEOPT, NBD_OPT_GO, length 0: what a client that ignored the STARTTLS reply would send next.
            ByteBuffer option = ByteBuffer.allocate(16).put("IHAVEOPT".getBytes(StandardCharsets.US_ASCII)).putInt(7).putInt(0).flip();
            net.client.write(option);
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("expected a TLS ClientHello but received 'IHAVEOPT' (49 48 41 56 45 4f 50 54 ...): the peer is not speaking TLS");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"x509", "psk"})
    void aServerThatDoesNotStartTls(String kind) throws Exception {
        TlsClient client = TlsClient.load(kind.equals("x509") ? new TlsClientSettings(dir, null, null, true, "localhost")
            : new TlsClientSettings(null, dir.resolve(Setup.PSK_FILE), null, true, "localhost"));
        try (Loopback net = Loopback.open()) {
            // An NBD option reply header in place of a ServerHello.
            net.server.write(ByteBuffer.wrap(new byte[] {0x00, 0x03, (byte) 0xe8, (byte) 0x89, 0x04, 0x55, 0x65, (byte) 0xa9, 0, 0, 0, 5}));
            assertThat(catchThrowable(() -> client.connect(net.clientRaw()))).isInstanceOf(TlsException.class)
                .hasMessageStartingWith("expected the server's TLS handshake but received '").hasMessageEndingWith("the peer is not speaking TLS");
        }
    }
}
