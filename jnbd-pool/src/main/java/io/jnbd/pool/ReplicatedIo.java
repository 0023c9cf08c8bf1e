package io.jnbd.pool;

import io.jnbd.client.NbdErrorException;
import io.jnbd.client.ReadCache;
import io.jnbd.protocol.Nbd;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;

/**
 * A volume's reads, writes and trims, from the range a client asked for to the memory servers' replies. Per
 * request: the range is checked and cut at extent boundaries; each part then goes its own way.
 * <ul>
 * <li>Read: through the page cache if there is one; an extent never written reads as zeroes; otherwise the least
 *     busy in-sync replica is asked ({@link MemServerLink#call}, then its session's NbdClient), and on an error or a
 *     timeout the next one, up to {@code READ_ATTEMPTS} times.
 * <li>Write or trim: the extent is placed if this is its first write; the part waits for its range of the
 *     extent's {@link RangeGate}, goes to every replica that takes writes, and is judged when all have answered.
 * </ul>
 * What a reply says about a replica (refused, failed, the extent lost) is a move of {@link ReplicaStates}; the
 * data path itself keeps no state between requests.
 */
final class ReplicatedIo {
    private static final int READ_ATTEMPTS = 8;
    /** The memory servers' page size (the GPI's page index counts these). */
    private static final int CACHE_PAGE = 4096;

    private final PoolConfig config;
    private final ReplicaStates states;
    /** The client's page cache and prefetch (cache=, readahead=); null without one, the default. */
    private final ReadCache cache;

    ReplicatedIo(PoolConfig config, ReplicaStates states) {
        this.config = config;
        this.states = states;
        this.cache = config.cacheSize() > 0
            ? new ReadCache(this::readThrough, config.size(), config.cacheSize(), config.readahead(), CACHE_PAGE) : null;
        states.forgetLostExtentsIn(cache);
    }

    /** Fills {@code dst} from its position to its limit; the position stays where it was. */
    CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        check(offset, dst.remaining());
        if (cache == null || !dst.hasRemaining()) return readThrough(offset, dst);
        return cache.read(offset, dst);
    }

    private CompletableFuture<Void> readThrough(long offset, ByteBuffer dst) {
        List<CompletableFuture<Void>> parts = new ArrayList<>();
        forEachExtent(offset, dst, (idx, pos, part) -> parts.add(readExtent(idx, pos, part)));
        return all(parts);
    }

    /** Completes when every live replica of every extent the range touches has the data. */
    CompletableFuture<Void> write(long offset, ByteBuffer src) {
        List<CompletableFuture<Void>> parts = new ArrayList<>();
        int length = src.remaining();
        if (cache != null) cache.invalidate(offset, length);
        forEachExtent(offset, src, (idx, pos, part) -> parts.add(writeExtent(idx, pos, part)));
        return afterChange(all(parts), offset, length);
    }

    /** The cache forgets a changed range again once the change is done: a fetch that overlapped it is not kept. */
    private CompletableFuture<Void> afterChange(CompletableFuture<Void> change, long offset, long length) {
        return cache == null ? change : change.whenComplete((v, e) -> cache.invalidate(offset, length));
    }

    /** Discards a range; the memory servers free the pages. An extent trimmed whole is retired, and reads as zeroes. */
    CompletableFuture<Void> trim(long offset, long length) {
        check(offset, length);
        if (cache != null) cache.invalidate(offset, length);
        List<CompletableFuture<Void>> parts = new ArrayList<>();
        long end = offset + length;
        for (long pos = offset; pos < end; ) {
            int idx = (int) (pos / config.extentSize());
            long extentEnd = Math.min(end, (long) (idx + 1) * config.extentSize());
            parts.add(trimExtent(idx, pos, extentEnd - pos));
            pos = extentEnd;
        }
        return afterChange(all(parts), offset, length);
    }

    /** Every acknowledged write already is on every live replica: there is nothing more to make durable. */
    CompletableFuture<Void> flush() {
        return CompletableFuture.completedFuture(null);
    }

    private interface PartVisitor {
        void visit(int index, long position, ByteBuffer part);
    }

    private void forEachExtent(long offset, ByteBuffer buf, PartVisitor visitor) {
        int length = buf.remaining();
        check(offset, length);
        for (int done = 0; done < length; ) {
            long pos = offset + done;
            int idx = (int) (pos / config.extentSize());
            int n = (int) Math.min(length - done, (long) (idx + 1) * config.extentSize() - pos);
            visitor.visit(idx, pos, buf.slice(buf.position() + done, n));
            done += n;
        }
    }

    private void check(long offset, long length) {
        if (offset < 0 || length < 0 || offset > config.size() || length > config.size() - offset) {
            throw new IllegalArgumentException(length + " bytes at " + offset + " lie outside the volume (" + config.size() + " bytes)");
        }
    }

    private CompletableFuture<Void> readExtent(int idx, long pos, ByteBuffer dst) {
        Extent e = states.extent(idx);
        if (e == null) {
            java.lang.foreign.MemorySegment.ofBuffer(dst).fill((byte) 0); // never written
            return CompletableFuture.completedFuture(null);
        }
        return readFrom(e, pos, dst, 0);
    }

    private CompletableFuture<Void> readFrom(Extent e, long pos, ByteBuffer dst, int attempt) {
        if (e.lost()) return CompletableFuture.failedFuture(states.lostError(e));
        Replica best = null;
        MemServerLink.Session session = null;
        for (Replica r : e.replicas()) {
            MemServerLink.Session s = r.link.session();
            if (r.state() != Replica.State.IN_SYNC || s == null || s.generation() != r.generation) continue;
            if (best == null || r.link.inFlight() < best.link.inFlight()) {
                best = r;
                session = s;
            }
        }
        if (best == null) {
            if (e.readableCount() == 0) states.lose(e, "no replica is left to read");
            return CompletableFuture.failedFuture(states.lostError(e));
        }
        if (attempt >= READ_ATTEMPTS) {
            return CompletableFuture.failedFuture(new PoolException(Nbd.EIO, "read of " + e + " failed " + attempt + " times"));
        }
        Replica r = best;
        MemServerLink.Session s = session;
        return r.link.call(() -> s.data().read(pos, dst.duplicate())).handle((v, err) -> {
            if (err == null) return CompletableFuture.<Void>completedFuture(null);
            states.failed(e, r, s, PoolVolume.unwrap(err));
            return readFrom(e, pos, dst, attempt + 1);
        }).thenCompose(f -> f);
    }

    private CompletableFuture<Void> writeExtent(int idx, long pos, ByteBuffer src) {
        Extent e;
        try {
            e = states.placeForWrite(idx);
        } catch (PoolException ex) {
            return CompletableFuture.failedFuture(ex);
        }
        long from = pos - e.start;
        return e.gate.acquire(from, from + src.remaining()).thenCompose(t -> {
            if (states.extent(idx) != e) {
                // Trimmed whole or abandoned while this waited: the write goes to the extent placed anew.
                e.gate.release(t);
                return writeExtent(idx, pos, src);
            }
            return fanOut(e, pos, src, src.remaining()).whenComplete((v, x) -> e.gate.release(t));
        }).exceptionallyCompose(x -> {
            Throwable cause = PoolVolume.unwrap(x);
            if (!(cause instanceof PoolException pe && pe.error() == Nbd.ENOSPC)) return CompletableFuture.failedFuture(cause);
            return states.abandonIfUnwritten(e).thenCompose(v -> CompletableFuture.failedFuture(cause));
        });
    }

    private CompletableFuture<Void> trimExtent(int idx, long pos, long length) {
        Extent e = states.extent(idx);
        if (e == null) return CompletableFuture.completedFuture(null);
        long from = pos - e.start;
        boolean whole = from == 0 && length == states.extentLength(e);
        return e.gate.acquire(from, from + length).thenCompose(t -> {
            if (states.extent(idx) != e) {
                e.gate.release(t);
                return trimExtent(idx, pos, length);
            }
            return fanOut(e, pos, null, length).thenRun(() -> {
                if (whole) states.retire(e);
            }).whenComplete((v, x) -> e.gate.release(t));
        });
    }

    /**
     * Sends a write ({@code data} non-null) or a trim to every replica that takes writes, and judges the replies:
     * done when every in-sync replica either acknowledged or was dropped (its server lost) or demoted (stale).
     */
    private CompletableFuture<Void> fanOut(Extent e, long pos, ByteBuffer data, long length) {
        if (e.lost()) return CompletableFuture.failedFuture(states.lostError(e));
        List<Replica> targets = new ArrayList<>();
        List<MemServerLink.Session> sessions = new ArrayList<>();
        for (Replica r : e.replicas()) {
            MemServerLink.Session s = r.link.session();
            if (r.state() == Replica.State.STALE || s == null || s.generation() != r.generation) continue;
            targets.add(r);
            sessions.add(s);
        }
        if (targets.stream().noneMatch(r -> r.state() == Replica.State.IN_SYNC)) {
            states.lose(e, "no replica is left to write");
            return CompletableFuture.failedFuture(states.lostError(e));
        }
        List<CompletableFuture<Void>> sent = new ArrayList<>();
        for (int i = 0; i < targets.size(); i++) {
            MemServerLink.Session s = sessions.get(i);
            MemServerLink link = targets.get(i).link;
            Supplier<CompletableFuture<Void>> send =
                () -> data != null ? s.data().write(pos, data.duplicate(), false) : s.data().trim(pos, length, false);
            // An earlier copy of this extent there may still be being discarded: after that, never before.
            CompletableFuture<Void> discarded = link.discarded(e.index);
            sent.add(discarded.isDone() ? link.call(send) : discarded.thenCompose(v -> link.call(send)));
        }
        return CompletableFuture.allOf(sent.stream().map(f -> f.exceptionally(x -> null)).toArray(CompletableFuture[]::new))
            .thenCompose(v -> judge(e, targets, sessions, sent, data != null));
    }

    private CompletableFuture<Void> judge(Extent e, List<Replica> targets, List<MemServerLink.Session> sessions,
                                          List<CompletableFuture<Void>> sent, boolean write) {
        int acked = 0, full = 0, failed = 0;
        List<Replica> refused = new ArrayList<>();
        for (int i = 0; i < targets.size(); i++) {
            Replica r = targets.get(i);
            Throwable err = sent.get(i).isCompletedExceptionally() ? PoolVolume.unwrap(sent.get(i).exceptionNow()) : null;
            boolean inSync = r.state() == Replica.State.IN_SYNC;
            if (err == null) {
                if (inSync) acked++;
                continue;
            }
            if (err instanceof NbdErrorException ne) {
                refused.add(r);
                if (ne.error() == Nbd.ENOSPC) {
                    r.link.markFull();
                    if (inSync) full++;
                }
            } else {
                r.link.fail(sessions.get(i), MemServerLink.rootMessage(err)); // drops its replicas, this one too
            }
            if (inSync) failed++;
        }
        if (acked > 0) {
            // Those that refused now differ from the ones that took it: never read them until they are copied anew.
            for (Replica r : refused) states.demote(e, r);
            states.written(e);
            return CompletableFuture.completedFuture(null);
        }
        if (write && full > 0 && full == failed) {
            // The store allocates all or nothing, so each refusing replica is as it was: they still agree.
            return CompletableFuture.failedFuture(new PoolException(Nbd.ENOSPC, "no room for " + e + " on its memory servers"));
        }
        if (e.readableCount() == 0) states.lose(e, "its last replica failed a write");
        return CompletableFuture.failedFuture(states.lostError(e));
    }

    private static CompletableFuture<Void> all(List<CompletableFuture<Void>> parts) {
        if (parts.size() == 1) return parts.getFirst();
        return CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new));
    }
}
