package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A memory server killed and restarted at the same address is a new incarnation, hence empty: the pool must take
 * it again, never read anything from its previous life, and fill it only by recovery and new placement.
 *
 * <p>A, B and C hold a known pattern in 2 copies. B is killed: the pool restores B's copies on A and C. B is
 * restarted at the same port, and the pool takes the new B back, empty. C is killed: every extent must now get its second copy on the new B.
 * A is killed last: the new B holds the only copy of everything, and every byte must read back as written.
 */
@Timeout(180)
class PoolRestartInteropTest {

    private static final Duration RECOVERY = Duration.ofSeconds(60);
    private static final long WRITTEN = 64L << 20;
    private static final long EXTENTS = WRITTEN / PoolCluster.EXTENT;
    private static final int A = 0, B = 1, C = 2;

    @TempDir
    Path dir;
    PoolCluster cluster;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        if (cluster != null) cluster.close();
    }

    @Test
    void aMemoryServerRestartedAtTheSameAddressIsUsedAgainAndNothingOfItsPastIsRead() throws Exception {
        cluster = new PoolCluster(dir).start("1G");
        cluster.write(7, 0, WRITTEN);
        PoolCluster.PoolView s = cluster.awaitPool(RECOVERY, "the pattern placed in 2 copies",
            v -> v.placed() == EXTENTS && v.belowReplicas() == 0 && v.copiesUp() == 2 * EXTENTS);
        String a = cluster.address(A), b = cluster.address(B), c = cluster.address(C);
        String oldIncarnation = s.server(b).incarnation();
        assertThat(s.server(b).extents()).as("extents on B before its restart: %s", s.json()).isPositive();

        // B dies; once its copies are restored on A and C, it comes back at the same address, empty.
        cluster.kill9(B);
        PoolCluster.PoolView recovered = cluster.awaitPool(RECOVERY, "B down and every extent back at 2 copies, on A and C",
            v -> v.server(b).state().equals("down") && v.belowReplicas() == 0 && v.lost() == 0 && v.copiesUp() == 2 * EXTENTS);
        cluster.restart(B);
        PoolCluster.MemView fresh = cluster.memStatus(B);
        assertThat(fresh.incarnation()).as("the restarted B's incarnation").isNotEqualTo(oldIncarnation);
        assertThat(fresh.ramUsed()).as("RAM in use on the restarted B: %s", fresh.json()).isZero();
        assertThat(fresh.bytes()).as("bytes stored on the restarted B: %s", fresh.json()).isZero();
        s = cluster.awaitPool(RECOVERY, "the new B up",
            v -> v.server(b).state().equals("up") && !oldIncarnation.equals(v.server(b).incarnation()));
        assertThat(s.server(b).incarnation()).as(s.json()).isEqualTo(fresh.incarnation());
        // Nothing needed a copy when it came back, so it holds none; only a copy recovery made since (after a
        // server wrongly taken as lost on a loaded machine, say) may be there. An old replica of B's must not.
        assertThat(s.server(b).extents()).as("extents on the new B, at most those recovery restored since it came: %s",
            s.json()).isLessThanOrEqualTo(s.restored() - recovered.restored());
        s = cluster.awaitPool(RECOVERY, "every extent at 2 copies with the new B up",
            v -> v.belowReplicas() == 0 && v.lost() == 0 && v.copiesUp() == 2 * EXTENTS);
        cluster.verify(7, 0, WRITTEN, "read back after B's restart");

        // C dies: the copies it held can only go to the new B.
        cluster.kill9(C);
        s = cluster.awaitPool(RECOVERY, "C down and every extent at 2 copies, on A and the new B",
            v -> v.server(c).state().equals("down") && v.belowReplicas() == 0 && v.lost() == 0
                && v.server(a).extents() == EXTENTS && v.server(b).extents() == EXTENTS);
        PoolCluster.MemView onB = cluster.memStatus(B);
        assertThat(onB.bytes()).as("bytes the new B holds: a full copy of the pattern, and nothing else: %s", onB.json())
            .isEqualTo(WRITTEN);
        cluster.verify(7, 0, WRITTEN, "read back after C's death");

        // A dies: the new B holds the only copy of every extent, made by recovery alone.
        cluster.kill9(A);
        s = cluster.awaitPool(RECOVERY, "A down, every extent left with its copy on the new B",
            v -> v.server(a).state().equals("down") && v.lost() == 0 && v.belowReplicas() == EXTENTS
                && v.server(b).extents() == EXTENTS);
        cluster.verify(7, 0, WRITTEN, "read back from the new B alone");
        s = cluster.poolStatus();
        assertThat(s.lost()).as("extents lost after reading everything back: %s", s.json()).isZero();
        assertThat(s.server(b).state()).as(s.json()).isEqualTo("up");
    }
}
