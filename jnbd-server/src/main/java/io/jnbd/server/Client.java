package io.jnbd.server;

import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.List;

/**
 * Who asks for an export, as far as an export's access list can tell: where the client connects from and the
 * identities its TLS session proved.
 *
 * @param address    the client's IP address; null over a Unix socket
 * @param identities its PSK identity or the names in its certificate (subject CN, DNS and IP alternative
 *                   names); empty without TLS or without a client certificate
 */
public record Client(InetAddress address, List<String> identities) {
    public Client {
        address = unmapped(address);
        identities = List.copyOf(identities);
    }

    /** A client with no TLS identity yet. */
    public static Client at(InetAddress address) {
        return new Client(address, List.of());
    }

    public Client withIdentities(List<String> names) {
        return new Client(address, names);
    }

    /** For log lines: "address 10.0.0.5, identities [alice]". */
    public String describe() {
        String where = address == null ? "a Unix socket" : "address " + address.getHostAddress();
        return identities.isEmpty() ? where + ", no TLS identity" : where + ", identities " + identities;
    }

    /**
     * An IPv4 client of a listener on an IPv6 socket shows as {@code ::ffff:a.b.c.d}; an access list written as
     * {@code a.b.c.0/24} must still match it.
     */
    private static InetAddress unmapped(InetAddress a) {
        if (!(a instanceof Inet6Address)) return a;
        byte[] b = a.getAddress();
        for (int i = 0; i < 10; i++) if (b[i] != 0) return a;
        if (b[10] != (byte) 0xff || b[11] != (byte) 0xff) return a;
        try {
            return InetAddress.getByAddress(new byte[] {b[12], b[13], b[14], b[15]});
        } catch (UnknownHostException e) {
            throw new AssertionError("four bytes are an IPv4 address", e);
        }
    }
}
