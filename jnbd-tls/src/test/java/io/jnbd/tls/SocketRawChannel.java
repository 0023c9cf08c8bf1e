package io.jnbd.tls;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/** A blocking SocketChannel as the raw channel TLS runs over, as the client will adapt its socket. */
public final class SocketRawChannel implements RawChannel {
    private final SocketChannel channel;

    public SocketRawChannel(SocketChannel channel) {
        this.channel = channel;
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        return channel.read(dst);
    }

    @Override
    public void write(ByteBuffer src) throws IOException {
        while (src.hasRemaining()) channel.write(src);
    }
}
