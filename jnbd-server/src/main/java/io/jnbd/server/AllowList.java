package io.jnbd.server;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Who may use an export: the export option {@code allow=ENTRY;ENTRY;...}. An entry is an address range in CIDR
 * notation ({@code 10.0.0.0/8}, {@code fd00::/8}), a single address ({@code 192.0.2.7}, {@code ::1}), or a TLS
 * identity ({@code alice}: a PSK identity, or a name in the client's certificate, its subject CN or a DNS or IP
 * alternative name), compared exactly. A client matching any entry may see and open the export; one that
 * matches none does not see it in {@code NBD_OPT_LIST} and is refused it. Entries are separated by
 * {@code ;} because the export spec already uses commas; {@code allow=} given more than once adds up.
 * A client over a Unix socket has no address: only an identity entry can admit it.
 */
public final class AllowList {
    /** No {@code allow=}: everyone. */
    public static final AllowList ANYONE = new AllowList(List.of(), Set.of(), "anyone");

    private record Range(byte[] network, int prefix) {
        boolean contains(InetAddress a) {
            byte[] b = a.getAddress();
            if (b.length != network.length) return false;
            int whole = prefix / 8, rest = prefix % 8;
            for (int i = 0; i < whole; i++) if (b[i] != network[i]) return false;
            if (rest == 0) return true;
            int mask = 0xff << (8 - rest) & 0xff;
            return (b[whole] & mask) == (network[whole] & mask);
        }
    }

    private final List<Range> ranges;
    private final Set<String> identities;
    private final String text;

    private AllowList(List<Range> ranges, Set<String> identities, String text) {
        this.ranges = ranges;
        this.identities = identities;
        this.text = text;
    }

    /** Parses the entries of one or more {@code allow=} values; the message of the exception is meant for the user. */
    public static AllowList parse(List<String> values) {
        List<Range> ranges = new ArrayList<>();
        List<String> names = new ArrayList<>();
        List<String> all = new ArrayList<>();
        for (String value : values) {
            if (value == null || value.isBlank()) throw new IllegalArgumentException("allow= needs at least one address range or identity");
            for (String raw : value.split(";", -1)) {
                String entry = raw.strip();
                if (entry.isEmpty()) throw new IllegalArgumentException("allow=" + value + " has an empty entry");
                all.add(entry);
                Range r = range(entry);
                if (r != null) ranges.add(r);
                else names.add(identity(entry));
            }
        }
        if (all.isEmpty()) return ANYONE;
        return new AllowList(List.copyOf(ranges), Set.copyOf(names), String.join(";", all));
    }

    /** Whether {@code client} matches an entry. */
    public boolean allows(Client client) {
        if (this == ANYONE) return true;
        if (client.address() != null) {
            for (Range r : ranges) if (r.contains(client.address())) return true;
        }
        for (String id : client.identities()) if (identities.contains(id)) return true;
        return false;
    }

    /** Whether some entry is a TLS identity, so that a client may be admitted by its TLS session. */
    public boolean namesIdentities() {
        return !identities.isEmpty();
    }

    /** An address or CIDR range, or null if {@code entry} is neither (then it is an identity). */
    private static Range range(String entry) {
        int slash = entry.indexOf('/');
        String address = slash < 0 ? entry : entry.substring(0, slash);
        InetAddress a = null;
        // Only the full dotted quad counts as IPv4: InetAddress also reads "42" as 0.0.0.42, and 42 may be a PSK identity.
        if (IPV4.matcher(address).matches() || address.contains(":")) {
            try {
                a = InetAddress.ofLiteral(address);
            } catch (IllegalArgumentException e) {
                // reported below
            }
        }
        if (a == null) {
            if (slash >= 0 || address.contains(":")) {
                throw new IllegalArgumentException("allow entry '" + entry + "' is not an address or a range such as 10.0.0.0/8 or fd00::/8");
            }
            return null;
        }
        int bits = a.getAddress().length * 8;
        int prefix = bits;
        if (slash >= 0) {
            try {
                prefix = Integer.parseInt(entry.substring(slash + 1));
            } catch (NumberFormatException e) {
                prefix = -1;
            }
            if (prefix < 0 || prefix > bits) {
                throw new IllegalArgumentException("allow entry '" + entry + "': the prefix length must be 0 to " + bits);
            }
        }
        return new Range(a.getAddress(), prefix);
    }

    private static final Pattern IPV4 = Pattern.compile("\\d{1,3}(\\.\\d{1,3}){3}");

    private static String identity(String entry) {
        int eq = entry.indexOf('=');
        if (eq >= 0) {
            // "CN=bob" would never match: identities are the names alone, whatever part of the certificate holds them.
            throw new IllegalArgumentException("allow entry '" + entry + "': write the certificate name or PSK identity alone ("
                + entry.substring(eq + 1) + ")");
        }
        return entry;
    }

    @Override
    public String toString() {
        return text;
    }

    /** Lists of the same entries in the same order are equal (the order does not change who is admitted, but is kept for the log). */
    @Override
    public boolean equals(Object o) {
        return o instanceof AllowList other && text.equals(other.text);
    }

    @Override
    public int hashCode() {
        return text.hashCode();
    }
}
