package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.server.ServerConfig;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(120)
class PoolSmokeTest {
    @Test
    void writeReadLoseAServerReadAgain() throws Exception {
        List<MemServer> servers = new ArrayList<>();
        List<String> addresses = new ArrayList<>();
        try {
            for (int i = 0; i < 3; i++) {
                MemServer m = MemServer.start(MemServer.Config.ofMemory(256L << 20), ServerConfig.defaults());
                InetSocketAddress a = (InetSocketAddress) m.listen(new InetSocketAddress("127.0.0.1", 0));
                servers.add(m);
                addresses.add("127.0.0.1:" + a.getPort());
            }
            PoolConfig config = PoolConfig.of(addresses, 64L << 20, 2).withServerTimeout(Duration.ofSeconds(2));
            try (PoolVolume v = PoolVolume.open(config)) {
                byte[] data = new byte[16 << 20];
                new Random(1).nextBytes(data);
                v.write(0, ByteBuffer.wrap(data)).join();
                ByteBuffer back = ByteBuffer.allocate(data.length);
                v.read(0, back).join();
                assertThat(back.array()).isEqualTo(data);
                System.out.println(new String(v.status().toJson()));
                servers.get(0).close();
                ByteBuffer again = ByteBuffer.allocate(data.length);
                v.read(0, again).join();
                assertThat(again.array()).isEqualTo(data);
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (v.status().belowReplicas() > 0 && System.nanoTime() < deadline) Thread.sleep(100);
                System.out.println(new String(v.status().toJson()));
                assertThat(v.status().belowReplicas()).isZero();
            }
        } finally {
            for (MemServer m : servers) m.close();
        }
    }
}
