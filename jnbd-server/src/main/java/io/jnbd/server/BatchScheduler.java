package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * Turns a batch of requests that arrived together into disk operations (FORTH's request batching: the
 * target schedules I/O on whole batches). {@link Policy#NONE} keeps arrival order, one operation per
 * request. {@link Policy#SORTED} sorts the batch by offset and merges adjacent reads, and adjacent writes
 * with the same FUA flag, into single operations.
 *
 * <p>Sorting must never change what a read returns: when any two requests of a batch overlap and one of
 * them modifies data, or the batch holds a FLUSH, the plan keeps arrival order and is marked
 * {@link Plan#sequential()} so the executor runs it one operation at a time. Pure: no I/O.
 */
public final class BatchScheduler {
    public enum Policy { NONE, SORTED }

    /** One disk operation serving {@code members}, which are consecutive and in offset order when merged. */
    public record Op(int type, long offset, long length, List<Request> members) {
        boolean fua() {
            return members.getFirst().has(Nbd.CMD_FLAG_FUA);
        }
    }

    /** The operations for one batch, and whether they must run one at a time in this order. */
    public record Plan(List<Op> ops, boolean sequential) {}

    private final Policy policy;
    private final long maxMerge;

    public BatchScheduler(Policy policy, long maxMergeBytes) {
        this.policy = policy;
        this.maxMerge = maxMergeBytes;
    }

    public Policy policy() {
        return policy;
    }

    public Plan plan(List<Request> batch) {
        if (policy == Policy.NONE || batch.size() < 2) return arrivalOrder(batch, false);
        if (hasConflict(batch)) return arrivalOrder(batch, true);
        List<Request> sorted = new ArrayList<>(batch);
        sorted.sort(Comparator.comparingLong(Request::offset)); // stable: equal offsets keep arrival order
        List<Op> ops = new ArrayList<>();
        List<Request> run = new ArrayList<>();
        long runEnd = 0, runStart = 0;
        for (Request r : sorted) {
            boolean mergeable = r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE;
            if (!run.isEmpty()) {
                Request head = run.getFirst();
                boolean joins = mergeable && head.type() == r.type() && r.offset() == runEnd
                    && head.has(Nbd.CMD_FLAG_FUA) == r.has(Nbd.CMD_FLAG_FUA)
                    && runEnd - runStart + r.length() <= maxMerge;
                if (joins) {
                    run.add(r);
                    runEnd += r.length();
                    continue;
                }
                ops.add(new Op(head.type(), runStart, runEnd - runStart, List.copyOf(run)));
                run.clear();
            }
            if (mergeable && r.length() > 0) {
                run.add(r);
                runStart = r.offset();
                runEnd = r.offset() + r.length();
            } else {
                ops.add(single(r));
            }
        }
        if (!run.isEmpty()) ops.add(new Op(run.getFirst().type(), runStart, runEnd - runStart, List.copyOf(run)));
        return new Plan(ops, false);
    }

    private static Plan arrivalOrder(List<Request> batch, boolean sequential) {
        List<Op> ops = new ArrayList<>(batch.size());
        for (Request r : batch) ops.add(single(r));
        return new Plan(ops, sequential);
    }

    private static Op single(Request r) {
        return new Op(r.type(), r.offset(), r.length(), List.of(r));
    }

    private static boolean modifies(Request r) {
        return r.type() == Nbd.CMD_WRITE || r.type() == Nbd.CMD_TRIM || r.type() == Nbd.CMD_WRITE_ZEROES;
    }

    /** True if reordering could change a result: two overlapping requests of which one modifies, or a FLUSH. */
    static boolean hasConflict(List<Request> batch) {
        List<Request> byOffset = new ArrayList<>();
        for (Request r : batch) {
            if (r.type() == Nbd.CMD_FLUSH) return true;
            if (r.length() > 0) byOffset.add(r);
        }
        byOffset.sort(Comparator.comparingLong(Request::offset));
        // Sweep: every request still open at r's start overlaps r.
        List<Request> open = new ArrayList<>();
        for (Request r : byOffset) {
            open.removeIf(o -> o.offset() + o.length() <= r.offset());
            for (Request o : open) {
                if (modifies(o) || modifies(r)) return true;
            }
            open.add(r);
        }
        return false;
    }
}
