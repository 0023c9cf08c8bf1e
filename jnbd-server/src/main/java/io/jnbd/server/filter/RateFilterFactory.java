package io.jnbd.server.filter;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.FilterFactory;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.function.LongSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code filter=rate}: nbdkit's rate filter, with its keys: {@code rate=} and {@code connection-rate=} in bits per
 * second, {@code rate-file=} and {@code connection-rate-file=} to change them while serving, and {@code burstiness=}.
 */
public final class RateFilterFactory implements FilterFactory {
    /** nbdkit's default: a connection idle for a while may send two seconds' worth at once. */
    static final double DEFAULT_BURSTINESS = 2.0;
    /** More than enough to let anything through after an idle hour; beyond it a typo is likelier than a wish. */
    static final double MAX_BURSTINESS = 3600;

    @Override public String name() { return "rate"; }

    @Override
    public String usage() {
        return "filter=rate[,rate=BITSPERSEC][,connection-rate=BITSPERSEC][,rate-file=PATH][,connection-rate-file=PATH]"
            + "[,burstiness=SECS]";
    }

    @Override
    public Set<String> options() {
        return new LinkedHashSet<>(List.of("rate", "connection-rate", "rate-file", "connection-rate-file", "burstiness"));
    }

    @Override
    public void check(BackendOptions options) {
        source(options, "rate");
        source(options, "connection-rate");
        burstiness(options);
    }

    @Override
    public String describe(BackendOptions options) {
        List<String> parts = new ArrayList<>();
        RateSource export = source(options, "rate"), connection = source(options, "connection-rate");
        if (export != null) parts.add(export + " for the export");
        if (connection != null) parts.add(connection + " per connection");
        double burstiness = burstiness(options);
        if (burstiness != DEFAULT_BURSTINESS) parts.add("burstiness " + DelayFilter.text(Math.round(burstiness * 1e9)));
        return "rate(" + (parts.isEmpty() ? "none" : String.join(", ", parts)) + ")";
    }

    /** Those it keeps work as its own calls do: the asynchronous calls wait too; sendfile and never-blocking do not. */
    @Override
    public Set<Backend.Trait> traits(Set<Backend.Trait> below) {
        return Traits.throughEveryCall(below);
    }

    @Override
    public FilterBackend wrap(Backend inner, BackendOptions options) {
        return wrap(inner, options, System::nanoTime);
    }

    /** The filter on {@code clock}'s time (nanoseconds): tests step one of their own. */
    RateFilter wrap(Backend inner, BackendOptions options, LongSupplier clock) {
        RateSource export = source(options, "rate");
        return new RateFilter(inner, RateFilter.Limits.of(export == null ? new RateSource("rate", 0, null) : export,
            source(options, "connection-rate"), burstiness(options), clock, describe(options)));
    }

    /**
     * The limit that {@code key} and {@code key-file} give, or null with neither. Refused: a rate of 0 (nbdkit
     * refuses it too; leave the key out for no limit), and a file that does not hold a rate, or is missing with no
     * {@code key=} to start from (the limit would be none until it appears: a typo, most likely).
     */
    static RateSource source(BackendOptions options, String key) {
        String fileKey = key + "-file";
        long rate = 0;
        if (options.has(key)) {
            String given = options.string(key, null);
            rate = parseBits(key, given);
            if (rate == 0) throw new IllegalArgumentException(key + "=" + given + ": the rate must be above 0 (leave " + key + "= out for no limit)");
        }
        Path file = null;
        if (options.has(fileKey)) {
            file = Path.of(options.string(fileKey, null)).toAbsolutePath();
            if (Files.isDirectory(file)) throw new IllegalArgumentException(fileKey + "=" + file + " is a directory, not a file holding a rate");
            if (Files.exists(file)) {
                String line;
                try {
                    line = RateSource.firstLine(file);
                } catch (IOException | RuntimeException e) {
                    throw new IllegalArgumentException(fileKey + "=" + file + " cannot be read: " + e.getMessage());
                }
                try {
                    parseBits(fileKey, line);
                } catch (IllegalArgumentException e) {
                    String shown = line.strip();
                    boolean printable = shown.length() <= 40 && shown.chars().allMatch(c -> c >= 0x20 && c < 0x7f);
                    throw new IllegalArgumentException(fileKey + "=" + file + (printable ? " holds '" + shown + "', not"
                        : " does not hold") + " a rate in bits per second");
                }
            } else if (rate == 0) {
                throw new IllegalArgumentException(fileKey + "=" + file + ": no such file, and no " + key + "= to start from");
            }
        }
        if (rate == 0 && file == null) return null;
        return new RateSource(key, rate, file);
    }

    static double burstiness(BackendOptions options) {
        String v = options.string("burstiness", null);
        if (v == null) return DEFAULT_BURSTINESS;
        double s;
        try {
            s = Double.parseDouble(v.strip());
        } catch (NumberFormatException e) {
            s = Double.NaN;
        }
        if (!(s > 0 && s <= MAX_BURSTINESS)) {
            throw new IllegalArgumentException("burstiness=" + v + " is not a number of seconds above 0 and up to 3600 (default 2.0)");
        }
        return s;
    }

    private static final Pattern BITS = Pattern.compile("\\s*([+-]?)([0-9]+)([bBkKmMgGtTpPeEsS]?)\\s*");

    /**
     * Bits per second as nbdkit reads a size ({@code nbdkit_parse_size}): a whole number, with one letter for a power
     * of 1024 ({@code K}, {@code M}, {@code G}, {@code T}, {@code P}, {@code E}, either case; {@code b}: 1) or
     * {@code s} for 512. So {@code 800M} is 800 × 2^20 = 838,860,800 bits per second. nbdkit's own refusals stand:
     * no fractions, no {@code Mb} or {@code Mbps}, nothing negative.
     */
    static long parseBits(String key, String value) {
        Matcher m = BITS.matcher(value);
        if (!m.matches()) {
            throw new IllegalArgumentException(key + "=" + value + " is not a rate in bits per second (a whole number, "
                + "with K, M, G, T, P or E for powers of 1024: 800M)");
        }
        long scale = switch (Character.toUpperCase(m.group(3).isEmpty() ? 'B' : m.group(3).charAt(0))) {
            case 'K' -> 1L << 10;
            case 'M' -> 1L << 20;
            case 'G' -> 1L << 30;
            case 'T' -> 1L << 40;
            case 'P' -> 1L << 50;
            case 'E' -> 1L << 60;
            case 'S' -> 512;
            default -> 1;
        };
        long n;
        try {
            n = Long.parseLong(m.group(2));
        } catch (NumberFormatException e) {
            n = -1; // more digits than a long holds
        }
        if (m.group(1).equals("-") && n != 0) throw new IllegalArgumentException(key + "=" + value + ": a rate cannot be negative");
        if (n < 0 || n > Long.MAX_VALUE / scale) throw new IllegalArgumentException(key + "=" + value + " is past the largest rate");
        return n * scale;
    }

    /** {@code 800M}: bits per second as short as it stays exact, in nbdkit's powers of 1024. */
    static String text(long bits) {
        String units = "KMGTPE";
        int u = -1;
        while (bits != 0 && bits % 1024 == 0 && u < units.length() - 1) {
            bits /= 1024;
            u++;
        }
        return bits + (u < 0 ? "" : String.valueOf(units.charAt(u)));
    }
}
