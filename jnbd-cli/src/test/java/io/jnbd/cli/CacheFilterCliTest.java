package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The cache filter as jnbd serve takes it: its stack in {@code --check}, and one line and exit 2 for each mistake. */
@Timeout(60)
class CacheFilterCliTest {

    @Test
    void checkShowsTheCacheInTheStack() {
        Run r = Run.jnbd("serve", "--export", "p=memory:1G,filter=cache,cache-on-read=true,cache-max-size=1G", "--check");
        assertThat(r.exit()).as(r.toString()).isZero();
        assertThat(r.out()).contains("#   p: cache(writeback, 64K blocks, at most 1G (reclaim 95% to 80%), on read) -> memory:1G\n");
    }

    @Test
    void aMistakeInTheCacheIsOneLineNamingExportAndKeyAndExitTwo() {
        assertRefused("d=memory:1G,filter=cache,cache=bogus", "jnbd serve: export 'd': cache must be writeback or writethrough or unsafe, not 'bogus'");
        assertRefused("d=memory:1G,filter=cache,cache-max-size=12x", "jnbd serve: export 'd': cache-max-size=12x is not a size (examples: 4096, 64K, 1G)");
        assertRefused("d=memory:1G,filter=cache,cache-min-block-size=48K",
            "jnbd serve: export 'd': cache-min-block-size=48K must be a power of 2 from 4K to 1G");
        assertRefused("d=memory:1G,filter=cache,cache-max-size=1G,cache-high-threshold=50,cache-low-threshold=60",
            "jnbd serve: export 'd': cache-low-threshold=60 must be less than cache-high-threshold=50");
        assertRefused("d=memory:1G,readonly,filter=cache", "jnbd serve: export 'd': filter=cache: what is behind it is read-only,"
            + " so the cache would hold nothing: give cache-on-read=true (or /PATH)");
    }

    private static void assertRefused(String export, String line) {
        Run r = Run.jnbd("serve", "--export", export, "--check");
        assertThat(r.exit()).as(r.toString()).isEqualTo(2);
        assertThat(r.out()).isEmpty();
        assertThat(r.err()).isEqualTo(line + "\n");
    }
}
