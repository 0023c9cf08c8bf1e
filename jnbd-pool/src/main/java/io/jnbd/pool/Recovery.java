package io.jnbd.pool;

import io.jnbd.client.Extent;
import io.jnbd.protocol.Nbd;
import java.nio.ByteBuffer;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Restores the replication degree of extents (NMS: page in from a surviving copy, page out to a new server),
 * in the background and rate-limited while I/O goes on. An extent below N copies gets a new replica: its range on
 * the new server is cleared, the replica joins the group (from then on it receives every write), and the extent
 * is copied chunk by chunk from a readable replica, each chunk under the extent's {@link RangeGate}, so that no
 * write to that chunk lands between the read from the source and the write to the new copy. The rate limit is
 * waited out with no chunk held, so that a write to the chunk next in line never waits for it. A stale replica
 * whose server is still up is resynced the same way in place. A copy goes in sync only if no write demoted it
 * meanwhile (see {@link ReplicaStates}).
 */
final class Recovery implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Recovery.class);
    private static final int CHUNK = 1 << 20;
    /** Extents copied at once: enough to keep the network busy while one waits for a round trip. */
    private static final int PARALLEL = 4;
    /** What {@link #copyChunk} returns besides a wait. */
    private static final long FAILED = -1, COPIED = 0;

    private final PoolVolume volume;
    private final RateLimiter limiter;
    private final LinkedBlockingQueue<Integer> queue = new LinkedBlockingQueue<>();
    private final Set<Integer> queued = ConcurrentHashMap.newKeySet();
    /** Extents being repaired now, and those asked for again meanwhile. */
    private final Set<Integer> active = ConcurrentHashMap.newKeySet(), again = ConcurrentHashMap.newKeySet();
    /** Extents that found no server to take a new copy; retried when one comes up, or every few seconds. */
    private final Set<Integer> waiting = ConcurrentHashMap.newKeySet();
    private final Semaphore slots = new Semaphore(PARALLEL);
    private final AtomicLong bytesCopied = new AtomicLong(), extentsRestored = new AtomicLong();
    private volatile long rate;
    private volatile boolean closed;
    /** Tests only, null otherwise: runs on the repair's thread after a copy's last chunk, before it goes in sync. */
    volatile Runnable beforeInSync;
    /** How a copier waits out the rate limit; tests replace it to hold the copier there. */
    volatile Sleeper sleeper = TimeUnit.NANOSECONDS::sleep;
    private Thread worker;

    interface Sleeper {
        void sleep(long nanos) throws InterruptedException;
    }

    Recovery(PoolVolume volume, long bytesPerSecond) {
        this.volume = volume;
        this.limiter = new RateLimiter(bytesPerSecond);
    }

    void start() {
        worker = Thread.ofVirtual().name("jnbd-pool-recovery").start(this::run);
    }

    void enqueue(int idx) {
        if (queued.add(idx)) queue.add(idx);
    }

    /** A server came up: the extents that waited for one try again. */
    void wake() {
        for (Integer idx : List.copyOf(waiting)) {
            if (waiting.remove(idx)) enqueue(idx);
        }
    }

    private void run() {
        long lastTick = System.nanoTime(), lastBytes = 0, lastRetry = System.nanoTime();
        while (!closed) {
            Integer idx;
            try {
                idx = queue.poll(500, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                return;
            }
            long now = System.nanoTime();
            if (now - lastTick >= TimeUnit.SECONDS.toNanos(1)) {
                long b = bytesCopied.get();
                rate = (long) ((b - lastBytes) / ((now - lastTick) / 1e9));
                lastBytes = b;
                lastTick = now;
            }
            if (idx == null) {
                if (!waiting.isEmpty() && now - lastRetry > TimeUnit.SECONDS.toNanos(3)) {
                    lastRetry = now;
                    wake();
                }
                continue;
            }
            queued.remove(idx);
            if (!active.add(idx)) {
                again.add(idx); // its repair is running; look again when it ends
                continue;
            }
            try {
                slots.acquire();
            } catch (InterruptedException e) {
                return;
            }
            Thread.ofVirtual().name("jnbd-pool-repair-" + idx).start(() -> {
                try {
                    repair(idx);
                } catch (RuntimeException e) {
                    log.error("pool: repairing extent {} failed", idx, e);
                } finally {
                    active.remove(idx);
                    slots.release();
                    if (again.remove(idx)) enqueue(idx);
                }
            });
        }
    }

    private void repair(int idx) {
        ReplicaStates states = volume.states();
        int wanted = volume.config().replicas();
        for (int round = 0; round < 2 * wanted + 2 && !closed; round++) {
            io.jnbd.pool.Extent e = volume.extent(idx);
            if (e == null || e.lost()) return;
            int readable = e.readableCount();
            if (readable == 0) {
                states.lose(e, "no readable replica is left to copy from");
                return;
            }
            states.dropDead(e);
            Replica stale = null;
            for (Replica r : e.replicas()) if (r.state() == Replica.State.STALE && r.live()) stale = r;
            if (readable >= wanted) {
                // Enough copies: a stale one left over is freed rather than kept.
                for (Replica r : e.replicas()) {
                    if (r.state() == Replica.State.STALE) states.discard(e, r);
                }
                return;
            }
            Replica target = stale;
            boolean fresh = target == null;
            if (fresh) {
                Set<MemServerLink> exclude = new HashSet<>();
                for (Replica r : e.replicas()) if (r.live()) exclude.add(r.link);
                MemServerLink link = volume.placement().pick(exclude);
                MemServerLink.Session s = link == null ? null : link.session();
                if (s == null) {
                    waiting.add(idx);
                    return;
                }
                target = states.newCopy(link, s);
            }
            if (copy(e, target, fresh)) {
                extentsRestored.incrementAndGet();
            } else {
                states.discard(e, target);
            }
        }
        if (!closed) waiting.add(idx); // kept failing: try again later rather than spin
    }

    /** Makes {@code target} a full copy of {@code e}; true when it is in sync. */
    private boolean copy(io.jnbd.pool.Extent e, Replica target, boolean fresh) {
        ReplicaStates states = volume.states();
        long len = states.extentLength(e);
        long timeout = volume.config().serverTimeout().toMillis() * 2;
        MemServerLink.Session ts = target.link.session();
        if (ts == null || ts.generation() != target.generation) return false;
        try {
            // An older copy's discard still on its way could land on the new copy: it goes first.
            await(target.link.discarded(e.index), timeout);
        } catch (Exception ex) {
            return false; // unanswered for longer than its own request may take: try again later
        }
        try {
            // Cleared before it receives writes: a stale copy, or whatever an older replica there left.
            await(target.link.call(() -> ts.data().trim(e.start, len, false)), timeout);
        } catch (Exception ex) {
            states.failedAsTarget(target, ts, ex);
            return false;
        }
        if (fresh) states.join(e, target);
        if (!states.startSync(target)) return false;
        boolean[] data = dataChunks(e, len, timeout);
        ByteBuffer buf = ByteBuffer.allocateDirect(CHUNK);
        boolean paid = false;
        for (long off = 0; off < len; ) {
            int n = (int) Math.min(CHUNK, len - off);
            long step = copyChunk(e, target, ts, off, n, buf, timeout, paid, data[(int) (off / CHUNK)]);
            if (step == FAILED) return false;
            if (step == COPIED) {
                off += CHUNK;
                paid = false;
                continue;
            }
            // Waited out with the chunk's range let go, so that writes to it go on meanwhile; then it is
            // looked at afresh, since it may have changed.
            paid = true;
            try {
                sleeper.sleep(step);
            } catch (InterruptedException ex) {
                Thread.currentThread().interrupt();
            }
        }
        if (!target.live()) return false;
        Runnable hook = beforeInSync;
        if (hook != null) hook.run();
        // A write it refused after the last chunk's check demoted it: the move fails, the copy is dropped unread.
        if (!states.finishSync(target)) return false;
        log.debug("pool: {} has a new copy on {}", e, target.link.name());
        return true;
    }

    /**
     * Copies one chunk under its range of the extent's gate, so that no write to it lands between the read from
     * the source and the write to the target. Returns {@link #COPIED}, {@link #FAILED}, or how many nanoseconds
     * the rate limit wants the copier to wait before it sends the chunk (now paid for): it waits with the range
     * released, and comes back with {@code paid}.
     */
    private long copyChunk(io.jnbd.pool.Extent e, Replica target, MemServerLink.Session ts, long off, int n,
                           ByteBuffer buf, long timeout, boolean paid, boolean knownData) {
        RangeGate.Ticket ticket = e.gate.acquire(off, off + n).join();
        try {
            if (target.state() != Replica.State.SYNCING || !target.live()) return FAILED; // a write to it failed
            Replica src = source(e);
            if (src == null) return FAILED;
            MemServerLink.Session ss = src.link.session();
            if (ss == null || ss.generation() != src.generation) return FAILED;
            long at = e.start + off;
            try {
                if (!knownData && !hasData(await(src.link.call(() -> ss.data().blockStatus(at, n)), timeout))) return COPIED;
                if (!paid) {
                    long wait = limiter.reserve(n);
                    if (wait > 0) return wait;
                }
                buf.clear().limit(n);
                await(src.link.call(() -> ss.data().read(at, buf.duplicate())), timeout);
            } catch (Exception ex) {
                volume.states().failedAsSource(e, src, ss, ex);
                return FAILED;
            }
            try {
                await(target.link.call(() -> ts.data().write(at, buf.duplicate(), false)), timeout);
            } catch (Exception ex) {
                volume.states().failedAsTarget(target, ts, ex);
                return FAILED;
            }
            bytesCopied.addAndGet(n);
            return COPIED;
        } finally {
            e.gate.release(ticket);
        }
    }

    /**
     * Which chunks of the extent held data when the copy started, from one block status of the whole extent
     * instead of one per chunk (a round trip less per chunk). A chunk seen with data is copied without asking
     * again: were it trimmed since, the copy reads and writes its zeroes, the same bytes. A chunk seen as a
     * hole is asked about again under its range, as a write sent before the new copy joined may be filling it.
     * When this block status fails, every chunk is asked about under its range.
     */
    private boolean[] dataChunks(io.jnbd.pool.Extent e, long len, long timeout) {
        boolean[] data = new boolean[(int) ((len + CHUNK - 1) / CHUNK)];
        Replica src = source(e);
        MemServerLink.Session ss = src == null ? null : src.link.session();
        if (ss == null || ss.generation() != src.generation) return data;
        List<Extent> map;
        try {
            map = await(src.link.call(() -> ss.data().blockStatus(e.start, len)), timeout);
        } catch (Exception ex) {
            return data; // the chunks' own block status will find out what is wrong with the source
        }
        for (Extent x : map) {
            if ((x.flags() & Nbd.STATE_HOLE) != 0) continue;
            long at = x.offset() - e.start;
            for (long c = Math.max(0, at / CHUNK); c < data.length && c * CHUNK < at + x.length(); c++) data[(int) c] = true;
        }
        return data;
    }

    private static Replica source(io.jnbd.pool.Extent e) {
        Replica best = null;
        for (Replica r : e.replicas()) {
            if (r.readable() && (best == null || r.link.inFlight() < best.link.inFlight())) best = r;
        }
        return best;
    }

    private static boolean hasData(List<Extent> map) {
        for (Extent x : map) if ((x.flags() & Nbd.STATE_HOLE) == 0) return true;
        return map.isEmpty();
    }

    private static <T> T await(CompletableFuture<T> f, long timeoutMillis) throws Exception {
        return f.get(timeoutMillis, TimeUnit.MILLISECONDS);
    }

    int queued() {
        return queued.size() + active.size();
    }

    int waiting() {
        return waiting.size();
    }

    long bytesCopied() {
        return bytesCopied.get();
    }

    long extentsRestored() {
        return extentsRestored.get();
    }

    long rate() {
        return rate;
    }

    @Override
    public void close() {
        closed = true;
        if (worker != null) worker.interrupt();
    }

    /** A token bucket over bytes per second; 0 is no limit. The caller waits, holding no chunk's range. */
    static final class RateLimiter {
        private final long rate;
        private final java.util.function.LongSupplier clock;
        private double tokens;
        private long last;

        RateLimiter(long bytesPerSecond) {
            this(bytesPerSecond, System::nanoTime);
        }

        RateLimiter(long bytesPerSecond, java.util.function.LongSupplier nanoClock) {
            this.rate = bytesPerSecond;
            this.clock = nanoClock;
            this.last = nanoClock.getAsLong();
        }

        /** Takes {@code bytes} from the bucket; returns how long the caller must wait before it sends them. */
        synchronized long reserve(long bytes) {
            if (rate <= 0) return 0;
            long now = clock.getAsLong();
            // In floating point: idle nanoseconds times bytes per second overflows a long after 17 s at 512 MiB/s.
            tokens = Math.min(rate / 10.0, tokens + (now - last) / 1e9 * rate); // at most 100 ms of burst
            last = now;
            tokens -= bytes;
            return tokens < 0 ? (long) (-tokens * 1e9 / rate) : 0;
        }
    }
}
