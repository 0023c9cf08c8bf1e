package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Locale;
import java.util.Random;
import org.junit.jupiter.api.Test;

class SizesTest {

    @Test
    void oneDecimalPrintsWhatPercentPointOneFDoes() {
        Random r = new Random(7);
        for (int i = 0; i < 100_000; i++) {
            long whole = 1 + (r.nextLong() >>> (1 + r.nextInt(62)));
            long part = (long) (r.nextDouble() * whole);
            double v = 100.0 * part / whole;
            assertThat(Sizes.oneDecimal(v)).as("%d/%d", part, whole).isEqualTo(String.format(Locale.ROOT, "%.1f", v));
        }
        for (double v : new double[]{0, 0.05, 0.95, 9.95, 99.95, 100, 1023.96, 0.04999}) {
            assertThat(Sizes.oneDecimal(v)).as("%s", v).isEqualTo(String.format(Locale.ROOT, "%.1f", v));
        }
    }

    @Test
    void sizesAndPercentages() {
        assertThat(Sizes.human(512)).isEqualTo("512 B");
        assertThat(Sizes.human(1536)).isEqualTo("1.5 KiB");
        assertThat(Sizes.human(4L << 30)).isEqualTo("4.0 GiB");
        assertThat(Sizes.percent(42926080, 4L << 30)).isEqualTo("1.0%");
        assertThat(Sizes.percent(0, 0)).isEqualTo("100%");
        assertThat(Sizes.percent(1, 3)).isEqualTo("33.3%");
    }
}
