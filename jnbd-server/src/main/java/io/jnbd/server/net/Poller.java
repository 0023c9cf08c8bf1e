package io.jnbd.server.net;

import io.jnbd.server.io.EventFd;
import io.jnbd.server.io.NativeSocket;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where a virtual thread waits for a socket: one epoll instance and one platform thread per direction, the
 * way the JDK waits for its own channels. A waiter arms its descriptor for one report and parks; the poll
 * thread unparks it when the kernel reports the socket ready. A parked virtual thread holds no carrier, so a
 * connection that waits for its client costs a few hundred bytes of stack, not a thread.
 *
 * <p>Every wake-up is a hint: the caller retries its non-blocking call and waits again if that still finds
 * nothing. Stale reports (a wait that timed out, a descriptor closed meanwhile) therefore cost one retry.
 *
 * <p>When the process exits, a shutdown hook ends each poll thread through an eventfd: the JVM's exit waits up to
 * 300 ms for threads that are in native code, and a poll thread is in {@code epoll_wait} whenever it is idle, so
 * every exit of a server paid that wait (every restart included). Waits after that look again every few ms.
 */
final class Poller {
    private static final Logger log = LoggerFactory.getLogger(Poller.class);
    private static final int BATCH = 256;
    /** How often a waiter looks again once the poll thread is gone (the process is exiting). */
    private static final long STOPPED_RETRY_NANOS = 5_000_000L;

    static final Poller READ = new Poller("read", NativeSocket.EPOLLIN);
    static final Poller WRITE = new Poller("write", NativeSocket.EPOLLOUT);

    /**
     * Virtual threads woken by either poller that have not run yet: they wait for a carrier. A carrier spent
     * spinning for a connection's next request (BusyPoll) is then taken from a connection that has one.
     */
    private static final AtomicInteger WOKEN = new AtomicInteger();

    private final String name;
    private final int events;
    private final ConcurrentHashMap<Integer, Thread> waiters = new ConcurrentHashMap<>();
    private volatile int epfd = -1;
    /** Set by the shutdown hook: no poll thread wakes anyone any more. */
    private volatile boolean stopped;

    private Poller(String name, int events) {
        this.name = name;
        this.events = events;
    }

    /**
     * Parks the calling virtual thread until {@code fd} may be ready, {@code timeoutNanos} pass (0: no limit),
     * or {@link #wake} is called for it. Returns without saying which: the caller looks.
     */
    void await(int fd, long timeoutNanos) throws IOException {
        Thread me = Thread.currentThread();
        Thread stale = waiters.put(fd, me);
        if (stale != null) { // a closed connection's thread still waiting on the descriptor's old number
            WOKEN.incrementAndGet();
            LockSupport.unpark(stale);
        }
        try {
            if (stopped) {
                LockSupport.parkNanos(this, timeoutNanos > 0 ? Math.min(timeoutNanos, STOPPED_RETRY_NANOS) : STOPPED_RETRY_NANOS);
            } else {
                NativeSocket.epollArmOnce(epfd(), fd, events);
                if (timeoutNanos > 0) LockSupport.parkNanos(this, timeoutNanos);
                else LockSupport.park(this);
            }
        } finally {
            // Still registered: nobody woke us (a timeout, a stray unpark). Gone: a waker counted us in WOKEN.
            if (!waiters.remove(fd, me)) WOKEN.decrementAndGet();
        }
        if (me.isInterrupted()) throw new InterruptedIOException("interrupted while waiting for a socket");
    }

    /** Wakes whoever waits on {@code fd} in this direction, e.g. because its connection is being closed. */
    void wake(int fd) {
        Thread t = waiters.remove(fd);
        if (t != null) {
            WOKEN.incrementAndGet();
            LockSupport.unpark(t);
        }
    }

    /** Whether some connection woken for its socket still waits for a carrier to run on. */
    static boolean wokenWaiting() {
        return WOKEN.get() > 0;
    }

    private int epfd() throws IOException {
        int fd = epfd;
        if (fd >= 0) return fd;
        synchronized (this) {
            if (epfd < 0) {
                int created = NativeSocket.epollCreate();
                int wakeFd = stopper(created);
                Thread.ofPlatform().name("jnbd-poller-" + name).daemon().start(() -> loop(created, wakeFd));
                epfd = created;
            }
            return epfd;
        }
    }

    /**
     * An eventfd in {@code epfd} and the shutdown hook that signals it (see the class comment); -1 where none can be
     * made, and then the exit waits as before.
     */
    private int stopper(int epfd) {
        try {
            int wakeFd = EventFd.create();
            NativeSocket.epollArmOnce(epfd, wakeFd, NativeSocket.EPOLLIN);
            Runtime.getRuntime().addShutdownHook(Thread.ofPlatform().name("jnbd-poller-" + name + "-stop").unstarted(() -> {
                stopped = true;
                try {
                    EventFd.signal(wakeFd);
                } catch (IOException e) {
                    log.debug("{} poller: {}", name, e.toString());
                }
            }));
            return wakeFd;
        } catch (IOException | RuntimeException | LinkageError e) {
            log.debug("{} poller: no eventfd to end it at exit: {}", name, e.toString());
            return -1;
        }
    }

    private void loop(int fd, int wakeFd) {
        MemorySegment ready = Arena.global().allocate((long) BATCH * NativeSocket.EPOLL_EVENT_SIZE, 8);
        while (true) {
            try {
                int n = NativeSocket.epollWait(fd, ready, BATCH);
                for (int i = 0; i < n; i++) {
                    int readyFd = NativeSocket.epollEventFd(ready, i);
                    if (readyFd != wakeFd) {
                        wake(readyFd);
                    } else {
                        // The process is exiting: whoever waits looks again, and from now on by itself.
                        for (Integer waiting : waiters.keySet()) wake(waiting);
                        return;
                    }
                }
            } catch (IOException | RuntimeException e) {
                // Cannot happen short of a bug (EBADF, EFAULT); waiters still wake by their own timeouts or wake().
                log.error("{} poller: {}", name, e.toString());
                LockSupport.parkNanos(100_000_000L);
            }
        }
    }
}
