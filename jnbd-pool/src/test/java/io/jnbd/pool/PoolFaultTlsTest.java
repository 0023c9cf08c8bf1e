package io.jnbd.pool;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.pool.memserver.MemServerAccess;

/** {@link PoolFaultTest}'s faults with the pool's links under TLS (PSK), as a pool across hosts should run. */
class PoolFaultTlsTest extends PoolFaultTest {
    @Override
    TestCluster cluster(int n, MemServer.Config config) throws Exception {
        return TestCluster.overPsk(n, config, MemServerAccess.DEFAULT);
    }
}
