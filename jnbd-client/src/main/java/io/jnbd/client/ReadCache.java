package io.jnbd.client;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * A bounded LRU cache of pages in front of a {@link Source} (an NBD export, a pool volume), with sequential readahead:
 * when a read starts where the previous one ended, the next {@code readahead} bytes are fetched in the
 * background so that the sequential reader finds them ready (the gain gmblock measured on its direct path).
 * Writes, trims and zeroing through the same client invalidate the pages they touch, before they are sent
 * and again when they complete; a page fetch that overlapped any such change is not kept.
 */
public final class ReadCache {
    /** Where pages come from: fills {@code dst} from its position to its limit, leaving the position alone. */
    @FunctionalInterface
    public interface Source {
        CompletableFuture<Void> read(long offset, ByteBuffer dst);
    }

    private final Source source;
    private final long size;
    private final int pageSize;
    private final long readahead;
    private final int maxPages;
    private final LinkedHashMap<Long, ByteBuffer> pages;
    private final Map<Long, CompletableFuture<ByteBuffer>> loading = new HashMap<>();
    /** Bumped by every invalidation; a fetch started under an older epoch may hold stale data. */
    private long epoch;
    private long sequentialEnd = -1;
    /** Where the readahead issued so far ends. */
    private long prefetchedEnd;

    /**
     * @param size      bytes the source holds; reads and readahead stay below it
     * @param capacity  bytes of pages kept
     * @param readahead bytes fetched ahead of a sequential reader; 0 for none
     * @param pageSize  the unit of caching, a power of two
     */
    public ReadCache(Source source, long size, long capacity, long readahead, int pageSize) {
        if (pageSize <= 0 || Integer.bitCount(pageSize) != 1) throw new IllegalArgumentException("page size must be a power of two");
        if (capacity < 0 || readahead < 0) throw new IllegalArgumentException("cache sizes must not be negative");
        this.source = source;
        this.size = size;
        this.pageSize = pageSize;
        this.readahead = readahead;
        this.maxPages = (int) Math.max(1, Math.min(Integer.MAX_VALUE, capacity / pageSize));
        this.pages = new LinkedHashMap<>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<Long, ByteBuffer> eldest) {
                return size() > maxPages;
            }
        };
    }

    /** Fills {@code dst} from its position to its limit, leaving the position alone, as {@link Source#read} does. */
    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        int length = dst.remaining();
        int base = dst.position();
        long first = offset / pageSize;
        long last = (offset + length - 1) / pageSize;
        long end = offset + length;
        long readaheadEnd = 0;
        synchronized (this) {
            boolean sequential = offset == sequentialEnd;
            sequentialEnd = end;
            if (!sequential) {
                prefetchedEnd = (last + 1) * pageSize;
            } else if (readahead > 0 && end + readahead / 2 >= prefetchedEnd) {
                // Like the kernel's async readahead: once the reader is in the second half of what was
                // prefetched, fetch the next whole window in one go rather than a page per read.
                readaheadEnd = Math.min(size, Math.max(prefetchedEnd, end) + readahead);
                prefetchedEnd = (readaheadEnd + pageSize - 1) / pageSize * pageSize;
            }
        }
        // One request covers each run of missing pages rather than one per page. The readahead is a request of
        // its own: its failure (a lost extent of a pool, say) must not fail the read asked for.
        List<CompletableFuture<ByteBuffer>> pagesFor = pages(first, last);
        if (readaheadEnd > 0 && (readaheadEnd - 1) / pageSize > last) {
            for (CompletableFuture<ByteBuffer> ahead : pages(last + 1, (readaheadEnd - 1) / pageSize)) {
                ahead.exceptionally(e -> null); // a failed prefetch only costs a later miss
            }
        }
        List<CompletableFuture<Void>> parts = new ArrayList<>();
        for (long page = first; page <= last; page++) {
            long pageStart = page * pageSize;
            long from = Math.max(offset, pageStart);
            long to = Math.min(offset + length, pageStart + pageSize);
            parts.add(pagesFor.get((int) (page - first)).thenAccept(buf ->
                dst.put(base + (int) (from - offset), buf, (int) (from - pageStart), (int) (to - from))));
        }
        // A page may have come with a failed run that reached beyond this read (a prefetch joined while in
        // flight): the range asked for is tried once more on its own, so that only its own failure fails it.
        return CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new))
            .exceptionallyCompose(e -> source.read(offset, dst));
    }

    /**
     * Futures for pages {@code first..last}: cached, already loading, or fetched now in runs of missing pages.
     * The fetches are submitted after the lock is let go: their completions take the lock on the connection's
     * reader thread, and a submission may have to wait for that very thread to free a request slot.
     */
    private List<CompletableFuture<ByteBuffer>> pages(long first, long last) {
        List<CompletableFuture<ByteBuffer>> out = new ArrayList<>((int) (last - first + 1));
        List<Run> runs = new ArrayList<>(1);
        synchronized (this) {
            long page = first;
            while (page <= last) {
                ByteBuffer cached = pages.get(page);
                if (cached != null) {
                    out.add(CompletableFuture.completedFuture(cached));
                    page++;
                    continue;
                }
                CompletableFuture<ByteBuffer> pending = loading.get(page);
                if (pending != null) {
                    out.add(pending);
                    page++;
                    continue;
                }
                long runEnd = page + 1;
                while (runEnd <= last && runEnd - page < maxPages && !pages.containsKey(runEnd) && !loading.containsKey(runEnd)) {
                    runEnd++;
                }
                Run run = new Run(page, runEnd, epoch);
                for (int i = 0; i < run.pageFutures.size(); i++) loading.put(page + i, run.pageFutures.get(i));
                out.addAll(run.pageFutures);
                runs.add(run);
                page = runEnd;
            }
        }
        for (Run run : runs) run.fetch();
        return out;
    }

    /** One read request covering consecutive missing pages, and the futures its pages are handed out as. */
    private final class Run {
        final long firstPage;
        final long start;
        final int length;
        /** The invalidation epoch when the run was planned: a change since then makes its data stale. */
        final long startEpoch;
        final List<CompletableFuture<ByteBuffer>> pageFutures = new ArrayList<>();

        Run(long firstPage, long endPage, long startEpoch) {
            this.firstPage = firstPage;
            this.start = firstPage * pageSize;
            this.length = (int) Math.min((endPage - firstPage) * pageSize, size - start);
            this.startEpoch = startEpoch;
            for (long p = firstPage; p < endPage; p++) pageFutures.add(new CompletableFuture<>());
        }

        void fetch() {
            ByteBuffer buf = ByteBuffer.allocateDirect(length);
            CompletableFuture<Void> read;
            try {
                read = source.read(start, buf.duplicate());
            } catch (RuntimeException e) {
                read = CompletableFuture.failedFuture(e);
            }
            read.whenComplete((v, e) -> done(e == null ? buf.asReadOnlyBuffer() : null, e));
        }

        private void done(ByteBuffer data, Throwable error) {
            List<ByteBuffer> slices = new ArrayList<>(pageFutures.size());
            synchronized (ReadCache.this) {
                for (int i = 0; i < pageFutures.size(); i++) {
                    long key = firstPage + i;
                    ByteBuffer slice = null;
                    if (data != null) {
                        int at = i * pageSize;
                        slice = data.slice(at, Math.min(pageSize, length - at));
                        if (epoch == startEpoch) pages.put(key, slice);
                    }
                    loading.remove(key, pageFutures.get(i));
                    slices.add(slice);
                }
            }
            // Readers' own callbacks run here: outside the lock, so that they may use the cache again.
            for (int i = 0; i < pageFutures.size(); i++) {
                if (error != null) pageFutures.get(i).completeExceptionally(error);
                else pageFutures.get(i).complete(slices.get(i));
            }
        }
    }

    /**
     * Forgets the pages of a range about to change. Call it before the change is sent and again when it
     * completes: a fetch that overlapped either call is not kept.
     */
    public synchronized void invalidate(long offset, long length) {
        epoch++;
        if (length <= 0) return;
        long first = offset / pageSize;
        long last = (offset + length - 1) / pageSize;
        if (last - first < pages.size()) {
            for (long p = first; p <= last; p++) pages.remove(p);
        } else {
            pages.keySet().removeIf(p -> p >= first && p <= last);
        }
        // Joiners of an in-flight fetch may still see the old data: they raced with the write anyway.
        for (long p = first; p <= last && loading.size() > 0; p++) loading.remove(p);
    }
}
