package io.jnbd.cli;

/** Human-readable sizes for messages and progress. */
final class Sizes {
    private Sizes() {}

    static String human(long bytes) {
        String[] units = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        double v = bytes;
        int u = 0;
        while (v >= 1024 && u < units.length - 1) {
            v /= 1024;
            u++;
        }
        return u == 0 ? bytes + " B" : String.format(java.util.Locale.ROOT, "%.1f %s", v, units[u]);
    }

    static String percent(long part, long whole) {
        return whole == 0 ? "100%" : String.format(java.util.Locale.ROOT, "%.1f%%", 100.0 * part / whole);
    }

}
