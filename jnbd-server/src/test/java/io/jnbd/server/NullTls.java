package io.jnbd.server;

import io.jnbd.tls.RawChannel;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TlsException;
import io.jnbd.tls.TlsServer;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * TLS's record layer without the cryptography, so that the server's STARTTLS handling, its TLS transport and
 * its access lists can be tested without certificates and byte for byte. Records are framed as TLS frames
 * them (type, version, 16-bit length, at most 16 KiB of body); the "handshake" is one record from the client,
 * {@code hello:IDENTITY}, answered by {@code ok}; a close_notify is a record of type 21.
 */
final class NullTls implements TlsServer {
    static final int HANDSHAKE = 22, APPLICATION_DATA = 23, ALERT = 21;
    static final int MAX_BODY = 16 * 1024;

    @Override
    public SecureChannel accept(RawChannel raw, String peer) throws TlsException {
        try {
            byte[] hello = readRecord(raw, HANDSHAKE);
            String text = new String(hello, StandardCharsets.UTF_8);
            if (!text.startsWith("hello:")) throw new TlsException("no ClientHello from " + peer);
            String identity = text.substring("hello:".length());
            raw.write(record(HANDSHAKE, "ok".getBytes(StandardCharsets.UTF_8), 0, 2));
            return new Channel(raw, identity.isEmpty() ? List.of() : List.of(identity));
        } catch (TlsException e) {
            throw e;
        } catch (IOException e) {
            throw new TlsException("handshake broken: " + e.getMessage(), e);
        }
    }

    @Override
    public String describe() {
        return "null TLS (tests only)";
    }

    static ByteBuffer record(int type, byte[] body, int off, int len) {
        return ByteBuffer.allocate(5 + len).put((byte) type).put((byte) 3).put((byte) 3).putShort((short) len)
            .put(body, off, len).flip();
    }

    /** One record's body; TlsException if the record is not of {@code type}, EOFException at the end of the stream. */
    private static byte[] readRecord(RawChannel raw, int type) throws IOException {
        ByteBuffer header = ByteBuffer.allocate(5);
        readFully(raw, header);
        int got = header.get(0) & 0xff;
        int length = header.getShort(3) & 0xffff;
        if (got != type || length > MAX_BODY) throw new TlsException("unexpected record type " + got + " or length " + length);
        ByteBuffer body = ByteBuffer.allocate(length);
        readFully(raw, body);
        return body.array();
    }

    private static void readFully(RawChannel raw, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (raw.read(b) < 0) throw new EOFException("end of stream inside a record");
        }
    }

    /** The server's side of a session. */
    private static final class Channel implements SecureChannel {
        private final RawChannel raw;
        private final List<String> identities;
        private ByteBuffer plain = ByteBuffer.allocate(0);
        private boolean closed;

        Channel(RawChannel raw, List<String> identities) {
            this.raw = raw;
            this.identities = identities;
        }

        @Override
        public int read(ByteBuffer dst) throws IOException {
            while (!plain.hasRemaining()) {
                if (closed) return -1;
                ByteBuffer header = ByteBuffer.allocate(5);
                int first = raw.read(header);
                if (first < 0) return -1; // the peer closed at a record boundary
                readFully(raw, header);
                int type = header.get(0) & 0xff;
                byte[] body = new byte[header.getShort(3) & 0xffff];
                readFully(raw, ByteBuffer.wrap(body));
                if (type == ALERT) closed = true;
                else if (type != APPLICATION_DATA) throw new TlsException("unexpected record type " + type);
                else plain = ByteBuffer.wrap(body);
            }
            int n = Math.min(dst.remaining(), plain.remaining());
            dst.put(plain.slice(plain.position(), n));
            plain.position(plain.position() + n);
            return n;
        }

        @Override
        public int buffered() {
            return plain.remaining();
        }

        @Override
        public void write(ByteBuffer... srcs) throws IOException {
            for (ByteBuffer src : srcs) {
                while (src.hasRemaining()) {
                    int n = Math.min(src.remaining(), MAX_BODY);
                    byte[] body = new byte[n];
                    src.get(body);
                    raw.write(record(APPLICATION_DATA, body, 0, n));
                }
            }
        }

        @Override
        public List<String> peerIdentities() {
            return identities;
        }

        @Override
        public String description() {
            return "NullTLS";
        }

        @Override
        public void close() {
            try {
                raw.write(record(ALERT, new byte[2], 0, 2));
            } catch (IOException ignored) {
                // best effort, as the contract says
            }
        }
    }

    /** The client's side: runs the "handshake" on the socket's streams and returns the session's streams. */
    static Streams connect(InputStream socketIn, OutputStream socketOut, String identity) throws IOException {
        ByteBuffer hello = record(HANDSHAKE, ("hello:" + identity).getBytes(StandardCharsets.UTF_8), 0,
            ("hello:" + identity).getBytes(StandardCharsets.UTF_8).length);
        socketOut.write(hello.array());
        socketOut.flush();
        byte[] header = socketIn.readNBytes(5);
        if (header.length < 5 || header[0] != HANDSHAKE) throw new IOException("server did not answer the hello");
        socketIn.readNBytes(((header[3] & 0xff) << 8) | (header[4] & 0xff));
        return new Streams(new RecordInput(socketIn), new RecordOutput(socketOut));
    }

    record Streams(InputStream in, OutputStream out) {}

    private static final class RecordInput extends InputStream {
        private final InputStream socket;
        private byte[] body = new byte[0];
        private int at;

        RecordInput(InputStream socket) {
            this.socket = socket;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (len == 0) return 0;
            while (at == body.length) {
                byte[] header = socket.readNBytes(5);
                if (header.length == 0) return -1;
                if (header.length < 5) throw new EOFException("end of stream inside a record header");
                int length = ((header[3] & 0xff) << 8) | (header[4] & 0xff);
                byte[] next = socket.readNBytes(length);
                if (next.length < length) throw new EOFException("end of stream inside a record");
                if (header[0] == ALERT) return -1;
                body = next;
                at = 0;
            }
            int n = Math.min(len, body.length - at);
            System.arraycopy(body, at, b, off, n);
            at += n;
            return n;
        }
    }

    private static final class RecordOutput extends OutputStream {
        private final OutputStream socket;

        RecordOutput(OutputStream socket) {
            this.socket = socket;
        }

        @Override
        public void write(int b) throws IOException {
            write(new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            for (int done = 0; done < len; ) {
                int n = Math.min(MAX_BODY, len - done);
                socket.write(record(APPLICATION_DATA, b, off + done, n).array());
                done += n;
            }
        }

        @Override
        public void flush() throws IOException {
            socket.flush();
        }
    }
}
