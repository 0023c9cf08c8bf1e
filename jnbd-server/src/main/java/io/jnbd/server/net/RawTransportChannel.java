package io.jnbd.server.net;

import io.jnbd.tls.RawChannel;
import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * A connection's plain transport as the byte stream TLS runs over. It follows the TLS record framing of what
 * it receives (a 5-byte header whose last two bytes give the length of the body), which costs a few
 * operations per record, so that it knows when the client has begun a record and owes the rest: a client
 * that stops there holds the connection just as one that stops in the middle of a request does, and is
 * dropped by the same receive timeout.
 */
final class RawTransportChannel implements RawChannel {
    private static final int RECORD_HEADER = 5;

    private final Transport plain;
    /** Bytes of the current record's header received so far (0 at a record boundary). */
    private int headerSeen;
    /** The last two header bytes: the body's length, filled in as they arrive. */
    private int bodyLength;
    /** Bytes of the current record's body still to come. */
    private int bodyLeft;
    private volatile long owedSince;
    /** Once set, writes never wait: close_notify is sent only if the socket takes it at once. */
    private volatile boolean closing;

    RawTransportChannel(Transport plain) {
        this.plain = plain;
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        int start = dst.position();
        boolean midRecord = headerSeen > 0 || bodyLeft > 0;
        if (midRecord) owedSince = System.nanoTime();
        int n;
        try {
            n = plain.receive(dst);
        } finally {
            owedSince = 0;
        }
        if (n > 0) follow(dst, start, n);
        return n;
    }

    /** Walks the record framing over the {@code n} bytes just received at {@code from}: headers byte by byte, bodies in one step. */
    private void follow(ByteBuffer dst, int from, int n) {
        int i = from, end = from + n;
        while (i < end) {
            if (bodyLeft > 0) {
                int skip = Math.min(bodyLeft, end - i);
                bodyLeft -= skip;
                i += skip;
                continue;
            }
            int b = dst.get(i++) & 0xff;
            headerSeen++;
            if (headerSeen == 4) bodyLength = b << 8;
            else if (headerSeen == RECORD_HEADER) {
                bodyLeft = bodyLength | b;
                headerSeen = 0;
            }
        }
    }

    @Override
    public void write(ByteBuffer src) throws IOException {
        if (!closing) {
            plain.send(src);
            return;
        }
        plain.sendNow(src);
        if (src.hasRemaining()) throw new IOException("no room for close_notify; closing without it");
    }

    /** See {@link Transport#owedSince()}. */
    long owedSince() {
        return owedSince;
    }

    /** From now on writes do not wait (see {@link #closing}). */
    void closing() {
        closing = true;
    }
}
