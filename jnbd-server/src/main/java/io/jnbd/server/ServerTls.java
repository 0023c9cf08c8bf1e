package io.jnbd.server;

import io.jnbd.tls.TlsServer;
import java.util.Locale;

/**
 * Whether and how the server offers TLS, in nbdkit's terms ({@code --tls=off|on|require}).
 *
 * @param mode    {@link Mode#OFF}: STARTTLS is refused with {@code NBD_REP_ERR_POLICY}. {@link Mode#ON}: a client
 *                may upgrade with STARTTLS, and one that does not is served in plain text (the spec's SELECTIVETLS
 *                with no TLS-only export). {@link Mode#REQUIRE}: every option before STARTTLS but ABORT is
 *                answered with {@code NBD_REP_ERR_TLS_REQD} (the spec's FORCEDTLS)
 * @param context the certificates and keys that run each handshake; null when off
 */
public record ServerTls(Mode mode, TlsServer context) {
    public enum Mode { OFF, ON, REQUIRE }

    public static final ServerTls OFF = new ServerTls(Mode.OFF, null);

    public ServerTls {
        if ((mode == Mode.OFF) != (context == null)) throw new IllegalArgumentException("TLS " + mode + " with" + (context == null ? "out" : "") + " a context");
    }

    /** {@code off}, {@code on} or {@code require}, as {@code --tls} takes them; the message is meant for the user. */
    public static Mode parseMode(String text) {
        return switch (text.strip().toLowerCase(Locale.ROOT)) {
            case "off" -> Mode.OFF;
            case "on" -> Mode.ON;
            case "require" -> Mode.REQUIRE;
            default -> throw new IllegalArgumentException("must be off, on or require, not '" + text + "'");
        };
    }
}
