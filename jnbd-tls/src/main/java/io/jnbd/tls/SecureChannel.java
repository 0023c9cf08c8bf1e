package io.jnbd.tls;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;

/**
 * An established TLS session over a {@link RawChannel}: what NBD sends after STARTTLS goes through here.
 *
 * <p>One thread may read while another writes (a connection's reader and its reply writer); neither call may be
 * made by two threads at once. Record-level work the peer asks for while one side reads (a TLS 1.3 KeyUpdate,
 * a session ticket) is handled inside.
 */
public interface SecureChannel extends AutoCloseable {
    /** Reads at least one byte of application data into {@code dst}, waiting for it; -1 once the peer closed. */
    int read(ByteBuffer dst) throws IOException;

    /** Decrypted bytes already held and not yet read: a read of that many would not wait. */
    int buffered();

    /** Encrypts and sends every remaining byte of {@code srcs}, in order. */
    void write(ByteBuffer... srcs) throws IOException;

    /** The peer's identity: the PSK identity, or the names of its certificate (subject CN, then DNS/IP SANs); empty if none. */
    List<String> peerIdentities();

    /** Negotiated protocol and cipher suite, for the log: e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384". */
    String description();

    /** Sends close_notify, best effort; does not close the raw channel. */
    @Override
    void close();
}
