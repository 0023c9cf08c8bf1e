package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.ByteBuffer;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** How sessions end: close_notify, a plain end of stream, a stream cut inside a record; and what buffered() promises. */
@Timeout(60)
class CloseAndEofTest {
    @TempDir
    static Path dir;

    @BeforeAll
    static void pki() {
        Setup.prepare(dir);
    }

    @ParameterizedTest
    @EnumSource(Setup.class)
    void closeNotifyEndsTheStreamAfterTheDataBeforeIt(Setup setup) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(setup.server(dir), setup.client(dir))) {
            s.client().write(RoundTripTest.ascii("last words"));
            s.client().close();
            assertThat(RoundTripTest.readAscii(s.server(), 10)).isEqualTo("last words");
            ByteBuffer b = ByteBuffer.allocate(100);
            assertThat(s.server().read(b)).isEqualTo(-1);
            assertThat(s.server().read(b)).as("and stays ended").isEqualTo(-1);
            assertThat(s.server().buffered()).isZero();
        }
    }

    @ParameterizedTest
    @EnumSource(Setup.class)
    void endOfStreamAtARecordBoundaryIsAnEnd(Setup setup) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(setup.server(dir), setup.client(dir))) {
            s.client().write(RoundTripTest.ascii("bye"));
            net.client.shutdownOutput();
            assertThat(RoundTripTest.readAscii(s.server(), 3)).isEqualTo("bye");
            assertThat(s.server().read(ByteBuffer.allocate(10))).isEqualTo(-1);
        }
    }

    @ParameterizedTest
    @EnumSource(Setup.class)
    void endOfStreamInsideARecordIsAnError(Setup setup) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(setup.server(dir), setup.client(dir))) {
            // An application_data record header announcing 200 bytes, then 20 of them, then the end.
            ByteBuffer cut = ByteBuffer.allocate(25);
            cut.put((byte) 23).put((byte) 3).put((byte) 3).putShort((short) 200).position(25).flip();
            net.client.write(cut);
            net.client.shutdownOutput();
            assertThatThrownBy(() -> s.server().read(ByteBuffer.allocate(100)))
                .isInstanceOf(TlsException.class).hasMessage("connection closed in the middle of a TLS record");
        }
    }

    /**
     * Once every byte the client sent has been taken off the socket, buffered() == 0 must mean the whole message
     * has been read: a record left undecrypted would make a server wait for a socket that never becomes readable.
     * And buffered() bytes must be readable without touching the socket.
     */
    @ParameterizedTest
    @EnumSource(Setup.class)
    void bufferedCountsEveryByteReceivedAndOnlyThose(Setup setup) throws Exception {
        try (Loopback net = Loopback.open()) {
            CountingRaw serverRaw = new CountingRaw(net.serverRaw());
            CountingRaw clientRaw = new CountingRaw(net.clientRaw());
            var accepted = Loopback.acceptAsync(setup.server(dir), serverRaw);
            SecureChannel client = setup.client(dir).connect(clientRaw);
            SecureChannel server = Loopback.await(accepted);
            int size = 100_000; // several records
            byte[] sent = new byte[size];
            for (int i = 0; i < size; i++) sent[i] = (byte) (i * 7);
            client.write(ByteBuffer.wrap(sent));
            long ciphertext = clientRaw.written;

            ByteBuffer got = ByteBuffer.allocate(size);
            while (got.position() < size) {
                int before = server.buffered();
                long readsBefore = serverRaw.reads;
                ByteBuffer dst = got.slice(got.position(), Math.min(777, size - got.position()));
                int n = server.read(dst);
                assertThat(n).isPositive();
                got.position(got.position() + n);
                if (before >= n) assertThat(serverRaw.reads).as("a read of buffered bytes does not touch the socket").isEqualTo(readsBefore);
                if (serverRaw.delivered == ciphertext && server.buffered() == 0) {
                    assertThat(got.position()).as("nothing received is hidden from buffered()").isEqualTo(size);
                }
            }
            assertThat(got.array()).isEqualTo(sent);
            client.close();
            server.close();
        }
    }

    /** Counts what passes through a raw channel. */
    static final class CountingRaw implements RawChannel {
        private final RawChannel raw;
        volatile long reads;
        volatile long delivered;
        volatile long written;

        CountingRaw(RawChannel raw) {
            this.raw = raw;
        }

        @Override
        public int read(ByteBuffer dst) throws java.io.IOException {
            reads++;
            int n = raw.read(dst);
            if (n > 0) delivered += n;
            return n;
        }

        @Override
        public void write(ByteBuffer src) throws java.io.IOException {
            written += src.remaining();
            raw.write(src);
        }
    }
}
