package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.tls.RawChannel;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TlsClient;
import io.jnbd.tls.TlsClientSettings;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;

/** The client side of real TLS for {@link RawClient}: jnbd-tls's TlsClient over the test client's socket. */
final class RealTls {
    private RealTls() {}

    static TlsClientSettings x509(Path dir) {
        return new TlsClientSettings(dir, null, null, true, "localhost");
    }

    static TlsClientSettings psk(Path file, String identity) {
        return new TlsClientSettings(null, file, identity, false, "localhost");
    }

    /** STARTTLS, acknowledged, then the TLS handshake: from here on the client's bytes go through the session. */
    static SecureChannel startTls(RawClient c, TlsClientSettings settings) throws IOException {
        assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).as("STARTTLS").isEqualTo(Nbd.REP_ACK);
        return handshake(c, settings);
    }

    /** The TLS handshake alone, right after the server acknowledged STARTTLS. */
    static SecureChannel handshake(RawClient c, TlsClientSettings settings) throws IOException {
        InputStream socketIn = c.input();
        RawChannel raw = new RawChannel() {
            @Override
            public int read(ByteBuffer dst) throws IOException {
                // Through the socket's stream, which has the test client's read timeout.
                byte[] b = new byte[Math.min(dst.remaining(), 64 << 10)];
                int n = socketIn.read(b);
                if (n > 0) dst.put(b, 0, n);
                return n;
            }

            @Override
            public void write(ByteBuffer src) throws IOException {
                while (src.hasRemaining()) c.channel.write(src);
            }
        };
        SecureChannel s;
        try {
            s = TlsClient.load(settings).connect(raw);
        } catch (io.jnbd.tls.TlsConfigException e) {
            throw new IllegalStateException(e);
        }
        c.upgrade(new InputStream() {
            @Override
            public int read() throws IOException {
                byte[] one = new byte[1];
                return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                return len == 0 ? 0 : s.read(ByteBuffer.wrap(b, off, len));
            }
        }, new OutputStream() {
            @Override
            public void write(int b) throws IOException {
                write(new byte[] {(byte) b}, 0, 1);
            }

            @Override
            public void write(byte[] b, int off, int len) throws IOException {
                s.write(ByteBuffer.wrap(b, off, len));
            }
        });
        return s;
    }
}
