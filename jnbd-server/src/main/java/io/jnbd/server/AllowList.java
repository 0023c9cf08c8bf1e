package io.jnbd.server;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * Who may use an export, and who may only read it: the export options {@code allow=ENTRY;ENTRY;...} and
 * {@code readonly-for=ENTRY;ENTRY;...}. An entry is an address range in CIDR notation ({@code 10.0.0.0/8},
 * {@code fd00::/8}), a single address ({@code 192.0.2.7}, {@code ::1}), or a TLS identity ({@code alice}: a PSK
 * identity, or a name in the client's certificate, its subject CN or a DNS or IP alternative name), compared
 * exactly. A client matching any {@code allow} entry may see and open the export (no {@code allow=}: everyone);
 * one that matches none does not see it in {@code NBD_OPT_LIST} and is refused it. A client matching a
 * {@code readonly-for} entry gets the export read-only: the flags it is sent say so, and its writes fail with
 * EPERM. Entries are separated by {@code ;} because the export spec already uses commas; either option given more
 * than once adds up. A client over a Unix socket has no address: only an identity entry can match it.
 */
public final class AllowList {
    /** No {@code allow=} and no {@code readonly-for=}: everyone, with the export as it is. */
    public static final AllowList ANYONE = new AllowList(null, null);

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

    /** The entries of one option. */
    private record Entries(List<Range> ranges, Set<String> identities, String text) {
        boolean match(Client client) {
            if (client.address() != null) {
                for (Range r : ranges) if (r.contains(client.address())) return true;
            }
            for (String id : client.identities()) if (identities.contains(id)) return true;
            return false;
        }

        static Entries parse(String option, List<String> values) {
            List<Range> ranges = new ArrayList<>();
            List<String> names = new ArrayList<>();
            List<String> all = new ArrayList<>();
            for (String value : values) {
                if (value == null || value.isBlank()) throw new IllegalArgumentException(option + "= needs at least one address range or identity");
                for (String raw : value.split(";", -1)) {
                    String entry = raw.strip();
                    if (entry.isEmpty()) throw new IllegalArgumentException(option + "=" + value + " has an empty entry");
                    all.add(entry);
                    Range r = range(option, entry);
                    if (r != null) ranges.add(r);
                    else names.add(identity(option, entry));
                }
            }
            return all.isEmpty() ? null : new Entries(List.copyOf(ranges), Set.copyOf(names), String.join(";", all));
        }
    }

    /** Null: anyone. */
    private final Entries admitted;
    /** Null: nobody. */
    private final Entries readOnly;

    private AllowList(Entries admitted, Entries readOnly) {
        this.admitted = admitted;
        this.readOnly = readOnly;
    }

    /** Parses the entries of one or more {@code allow=} values; the message of the exception is meant for the user. */
    public static AllowList parse(List<String> allow) {
        return parse(allow, List.of());
    }

    /** Parses {@code allow=} and {@code readonly-for=} values; the message of the exception is meant for the user. */
    public static AllowList parse(List<String> allow, List<String> readOnlyFor) {
        Entries admitted = Entries.parse("allow", allow);
        Entries readOnly = Entries.parse("readonly-for", readOnlyFor);
        return admitted == null && readOnly == null ? ANYONE : new AllowList(admitted, readOnly);
    }

    /** Whether {@code client} may see and open the export. */
    public boolean allows(Client client) {
        return admitted == null || admitted.match(client);
    }

    /** Whether {@code client} gets the export read-only, whatever the export itself allows. */
    public boolean readOnlyFor(Client client) {
        return readOnly != null && readOnly.match(client);
    }

    /** Whether some entry is a TLS identity, so that a client may be admitted (or limited) by its TLS session. */
    public boolean namesIdentities() {
        return (admitted != null && !admitted.identities().isEmpty()) || (readOnly != null && !readOnly.identities().isEmpty());
    }

    /** Whether some allow entry is a TLS identity, so that a client refused now may be admitted after STARTTLS. */
    public boolean admitsIdentities() {
        return admitted != null && !admitted.identities().isEmpty();
    }

    /** An address or CIDR range, or null if {@code entry} is neither (then it is an identity). */
    private static Range range(String option, String entry) {
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
                throw new IllegalArgumentException(option + " entry '" + entry + "' is not an address or a range such as 10.0.0.0/8 or fd00::/8");
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
                throw new IllegalArgumentException(option + " entry '" + entry + "': the prefix length must be 0 to " + bits);
            }
        }
        return new Range(a.getAddress(), prefix);
    }

    private static final Pattern IPV4 = Pattern.compile("\\d{1,3}(\\.\\d{1,3}){3}");

    private static String identity(String option, String entry) {
        int eq = entry.indexOf('=');
        if (eq >= 0) {
            // "CN=bob" would never match: identities are the names alone, whatever part of the certificate holds them.
            throw new IllegalArgumentException(option + " entry '" + entry + "': write the certificate name or PSK identity alone ("
                + entry.substring(eq + 1) + ")");
        }
        return entry;
    }

    /** The allow= entries as written, joined by ';'; null for anyone. */
    public String allowText() {
        return admitted == null ? null : admitted.text();
    }

    /** The readonly-for= entries as written, joined by ';'; null for nobody. */
    public String readOnlyText() {
        return readOnly == null ? null : readOnly.text();
    }

    /** "alice;10.0.0.0/8", "anyone", with " (read-only for bob)" when some clients only read. */
    @Override
    public String toString() {
        return (admitted == null ? "anyone" : admitted.text()) + (readOnly == null ? "" : " (read-only for " + readOnly.text() + ")");
    }

    /** Lists of the same entries in the same order are equal (the order does not change who is admitted, but is kept for the log). */
    @Override
    public boolean equals(Object o) {
        return o instanceof AllowList other && java.util.Objects.equals(allowText(), other.allowText())
            && java.util.Objects.equals(readOnlyText(), other.readOnlyText());
    }

    @Override
    public int hashCode() {
        return java.util.Objects.hash(allowText(), readOnlyText());
    }
}
