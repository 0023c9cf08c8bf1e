package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Readers that serve a memory export on their own thread collect replies (and the buffers they hold)
 * until the end of a batch. When the global buffer budget runs out, a reader must send what it holds
 * before it waits, or several such readers wait for each other forever.
 */
@Timeout(120)
class BufferBudgetTest {

    @Test
    void readersHoldingCollectedRepliesDoNotDeadlockOnTheGlobalBudget() throws Exception {
        int clients = 4, reads = 16, size = 4 << 20; // each client: 64 MiB in flight, all of them: 4x the budget
        try (ServerFixture fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(1L << 30))),
                ServerConfig.defaults().withBufferBudget(64L << 20))) {
            ExecutorService pool = Executors.newFixedThreadPool(clients);
            try {
                List<Future<Integer>> results = new ArrayList<>();
                for (int c = 0; c < clients; c++) {
                    int id = c;
                    results.add(pool.submit(() -> {
                        try (RawClient client = fx.open("mem", false, false)) {
                            for (int i = 0; i < reads; i++) {
                                client.send(new Request(0, Nbd.CMD_READ, i, ((long) id * reads + i) * size, size));
                            }
                            int ok = 0;
                            for (int i = 0; i < reads; i++) {
                                RawClient.Simple reply = client.readSimple(size);
                                if (reply.error() == 0 && reply.data().length == size) ok++;
                            }
                            return ok;
                        }
                    }));
                }
                for (Future<Integer> f : results) assertThat(f.get(60, TimeUnit.SECONDS)).isEqualTo(reads);
            } finally {
                pool.shutdownNow();
            }
        }
    }
}
