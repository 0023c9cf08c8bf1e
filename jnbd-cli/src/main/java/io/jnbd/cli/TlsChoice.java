package io.jnbd.cli;

import io.jnbd.server.ServerTls;
import io.jnbd.tls.TlsConfigException;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.slf4j.LoggerFactory;

/**
 * What {@code jnbd serve} was told about TLS, from its options and its config file (nbdkit's spelling:
 * {@code --tls}, {@code --tls-certificates}, {@code --tls-verify-peer}, {@code --tls-psk}).
 */
record TlsChoice(ServerTls.Mode mode, Path certificates, Path psk, boolean verifyPeer) {

    /** Settings that cannot work together; the message is one line for the user. */
    void check() {
        if (mode == ServerTls.Mode.OFF) {
            if (certificates != null || psk != null || verifyPeer) {
                LoggerFactory.getLogger(TlsChoice.class).warn(
                    "TLS is off (--tls off): --tls-certificates, --tls-psk and --tls-verify-peer have no effect; add --tls on or --tls require");
            }
            return;
        }
        if (certificates == null && psk == null) {
            throw new IllegalArgumentException("--tls " + name() + " needs --tls-certificates DIR or --tls-psk FILE");
        }
        if (verifyPeer && certificates == null) {
            LoggerFactory.getLogger(TlsChoice.class).warn(
                "--tls-verify-peer checks client certificates, and there are none without --tls-certificates: PSK clients prove themselves by their key");
        }
    }

    /** Reads and checks the certificates and keys; {@link ServerTls#OFF} when TLS is off. */
    ServerTls load() throws TlsConfigException {
        if (mode == ServerTls.Mode.OFF) return ServerTls.OFF;
        return new ServerTls(mode, TlsServer.load(new TlsServerSettings(certificates, psk, verifyPeer)));
    }

    /** The lines of the start-up banner that show how to connect to {@code export} at {@code address}. */
    List<String> connectLines(SocketAddress address, String export) {
        List<String> out = new ArrayList<>();
        String plain = address instanceof InetSocketAddress inet
            ? "nbd://" + ServeCommand.hostForUri(inet) + ":" + inet.getPort() + "/" + export
            : "nbd+unix:///" + export + "?socket=" + ((UnixDomainSocketAddress) address).getPath();
        if (mode != ServerTls.Mode.REQUIRE) {
            out.add("nbdinfo " + plain);
            out.add("qemu-img info " + plain);
        }
        if (mode == ServerTls.Mode.OFF) return out;
        String secure = plain.replaceFirst("^nbd", "nbds");
        String query = secure.contains("?") ? "&" : "?";
        if (certificates != null) out.add("nbdinfo '" + secure + query + "tls-certificates=CLIENT-DIR'");
        if (psk != null) out.add("nbdinfo '" + secure.replaceFirst("://", "://IDENTITY@") + query + "tls-psk-file=" + psk.toAbsolutePath() + "'");
        return out;
    }

    private String name() {
        return mode.name().toLowerCase(java.util.Locale.ROOT);
    }
}
