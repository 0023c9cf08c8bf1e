package io.jnbd.server.backend;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.Test;

/**
 * The forwarding base of every filter: it forwards each method {@link Backend} has, so a method added to the
 * interface without a forward here fails this test instead of failing requests through some filter; and the
 * read-only filter built on it refuses writes on every path while its reads, synchronous or not, reach the inner.
 */
class FilterBackendTest {

    /** What the inner backend of a filter was asked, and what it answered. */
    record Call(Method method, List<Object> args, Object answer) {}

    /** A backend that records every call and answers with a neutral value; it offers every capability and trait. */
    static Backend recording(List<Call> calls) {
        return (Backend) Proxy.newProxyInstance(Backend.class.getClassLoader(), new Class<?>[] {Backend.class},
            (proxy, m, args) -> {
                Object answer = m.getReturnType() == Backend.class ? proxy : answer(m); // forConnection: itself
                calls.add(new Call(m, args == null ? List.of() : Arrays.asList(args), answer));
                return answer;
            });
    }

    private static Object answer(Method m) {
        Class<?> r = m.getReturnType();
        if (r == Set.class) {
            return m.getName().equals("traits") ? EnumSet.allOf(Backend.Trait.class) : EnumSet.allOf(Backend.Capability.class);
        }
        if (r == CompletableFuture.class) return CompletableFuture.completedFuture(null);
        if (r == List.class) return List.of(new Extent(4096, false, false));
        if (r == BlockSizes.class) return new BlockSizes(512, 4096, 1 << 20);
        if (r == String.class) return "inner";
        if (r == long.class) return 1L << 20;
        if (r == int.class) return 7;
        if (r == boolean.class) return true;
        return null;
    }

    /** The non-static methods a filter must answer: Backend's own, its defaults and what it inherits (close). */
    static List<Method> backendMethods() {
        return Arrays.stream(Backend.class.getMethods()).filter(m -> !Modifier.isStatic(m.getModifiers())).toList();
    }

    static Object[] argumentsFor(Method m) {
        return Arrays.stream(m.getParameterTypes()).map(t -> {
            if (t == long.class) return (Object) 8192L;
            if (t == int.class) return 3;
            if (t == boolean.class) return true;
            if (t == ByteBuffer.class) return ByteBuffer.allocate(16);
            if (t == ByteBuffer[].class) return new ByteBuffer[] {ByteBuffer.allocate(16), ByteBuffer.allocate(32)};
            if (t == Backend.Capability.class) return Backend.Capability.TRIM;
            if (t == Backend.Trait.class) return Backend.Trait.ASYNC;
            if (t == ConnectionContext.class) return new ConnectionContext("pc42", List.of("alice"), "peer");
            if (t == String.class) return "qemu:dirty-bitmap:b0";
            throw new AssertionError("no test argument for a " + t + " of " + m);
        }).toArray();
    }

    @Test
    void theBaseDeclaresEveryMethodOfBackend() {
        for (Method m : backendMethods()) {
            Method own;
            try {
                own = FilterBackend.class.getDeclaredMethod(m.getName(), m.getParameterTypes());
            } catch (NoSuchMethodException e) {
                throw new AssertionError("FilterBackend does not forward " + m + "; every filter would get the default", e);
            }
            assertThat(Modifier.isAbstract(own.getModifiers())).as("%s is implemented", own).isFalse();
        }
    }

    @Test
    void theBasePassesEveryCallDownUnchangedButTraits() throws Exception {
        List<Call> calls = new ArrayList<>();
        Backend inner = recording(calls);
        Backend filter = new FilterBackend(inner) {};
        for (Method m : backendMethods()) {
            Object[] args = argumentsFor(m);
            calls.clear();
            Object result = m.invoke(filter, args);
            switch (m.getName()) {
                // A trait would let requests skip the filter's own code: none is kept unless the filter says so.
                case "traits" -> assertThat(result).as("traits").isEqualTo(Set.of());
                case "has" -> assertThat(result).as("has(ASYNC)").isEqualTo(false);
                // The page cache is a way round the filter's read: not offered by a filter that keeps no ZERO_COPY.
                case "pageCache" -> {
                    assertThat(result).as("pageCache").isNull();
                    assertThat(calls).as("pageCache asks nothing of the inner").isEmpty();
                }
                // The inner has no view of its own for a connection, so neither has the filter: itself, not a copy.
                case "forConnection" -> {
                    assertThat(calls).extracting(c -> c.method().getName()).containsExactly("forConnection");
                    assertThat(calls.getFirst().args()).as("the context goes down as it came").containsExactly(args);
                    assertThat(result).isSameAs(filter);
                }
                // The filter keeps no ASYNC: an asynchronous call is its own synchronous one, never a way round it.
                case "readAsync", "writeAsync" -> {
                    String sync = m.getName().equals("readAsync") ? "read" : "write";
                    assertThat(calls).extracting(c -> c.method().getName()).as("%s", m).containsExactly(sync);
                    assertThat(((CompletableFuture<?>) result)).isCompleted();
                }
                // Answered from the filter's own capabilities(), which a filter may narrow.
                case "can" -> assertThat(calls).extracting(c -> c.method().getName()).containsExactly("capabilities");
                default -> {
                    assertThat(calls).as("%s goes down once", m).hasSize(1);
                    assertThat(calls.getFirst().method()).as("%s goes down as itself", m).isEqualTo(m);
                    assertThat(calls.getFirst().args()).as("%s goes down with its arguments", m).containsExactly(args);
                    Object answer = calls.getFirst().answer();
                    if (m.getReturnType().isPrimitive()) assertThat(result).as("%s returns the inner's answer", m).isEqualTo(answer);
                    else assertThat(result).as("%s returns the inner's answer", m).isSameAs(answer);
                }
            }
        }
    }

    @Test
    void thePageCacheReachesTheOutsideOnlyThroughFiltersThatKeepZeroCopy(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws Exception {
        try (FileBackend file = new FileBackend(dir.resolve("f.img"), FileBackend.Mode.CACHED, false, 1 << 20)) {
            assertThat(file.pageCache()).isNotNull();
            assertThat(new ReadOnlyFilter(file).pageCache()).as("readonly keeps zero copy").isSameAs(file.pageCache());
            Backend changesReads = new FilterBackend(file) {};
            assertThat(changesReads.pageCache()).as("a filter that keeps no trait hides it").isNull();
            assertThat(new ReadOnlyFilter(changesReads).pageCache()).as("however far out").isNull();
        }
    }

    /** A backend with a view of its own for each connection, as a filter with connection state has. */
    private static final class WithViews extends FilterForTests {
        final List<FilterForTests> views = new ArrayList<>();
        final List<Backend> closed = new ArrayList<>();

        WithViews(Backend inner) {
            super(inner);
        }

        @Override
        public Backend forConnection(ConnectionContext context) {
            FilterForTests view = new FilterForTests(inner) {
                @Override public void connectionClosed() { closed.add(this); }
            };
            views.add(view);
            return view;
        }
    }

    /** A filter in front of something with connection views: the same filter over each view, sharing its state. */
    private static final class Counting extends FilterForTests {
        final java.util.concurrent.atomic.AtomicInteger reads = new java.util.concurrent.atomic.AtomicInteger();

        Counting(Backend inner) {
            super(inner);
        }

        @Override
        public void read(long offset, ByteBuffer dst) throws java.io.IOException {
            reads.incrementAndGet();
            inner.read(offset, dst);
        }
    }

    @Test
    void aFilterInFrontOfConnectionViewsIsCopiedOverEachSharingWhatItHolds() throws Exception {
        WithViews views = new WithViews(new MemoryBackend(1 << 20));
        Counting counting = new Counting(views);
        Backend chain = new ReadOnlyFilter(counting);

        Backend a = chain.forConnection(ConnectionContext.NONE), b = chain.forConnection(ConnectionContext.NONE);
        assertThat(views.views).hasSize(2);
        assertThat(a).isNotSameAs(chain).isNotSameAs(b).isInstanceOf(ReadOnlyFilter.class);
        Counting aCounting = (Counting) ((FilterBackend) a).inner(), bCounting = (Counting) ((FilterBackend) b).inner();
        assertThat(aCounting).isNotSameAs(counting).isNotSameAs(bCounting);
        assertThat(aCounting.inner()).isSameAs(views.views.get(0));
        assertThat(bCounting.inner()).isSameAs(views.views.get(1));
        assertThat(counting.inner()).as("the export's chain is left as it was").isSameAs(views);
        assertThat(a.traits()).isEqualTo(chain.traits());

        a.read(0, ByteBuffer.allocate(512));
        b.read(0, ByteBuffer.allocate(512));
        assertThat(counting.reads).as("state for the whole export is shared by the copies").hasValue(2);
        assertThatThrownBy(() -> a.write(0, ByteBuffer.allocate(512), false)).isInstanceOf(NbdErrorException.class);

        b.connectionClosed();
        a.connectionClosed();
        assertThat(views.closed).as("each view is told its connection ended, once").containsExactly(views.views.get(1), views.views.get(0));
    }

    @Test
    void aChainWithoutConnectionStateIsItsOwnViewAndCopiesNothing() {
        Backend chain = new ReadOnlyFilter(new Counting(new MemoryBackend(1 << 20)));
        assertThat(chain.forConnection(ConnectionContext.NONE)).isSameAs(chain);
        chain.connectionClosed(); // passed down to the memory backend's no-op
    }

    @Test
    void findLooksThroughFiltersForWhatTheyHide() {
        Backend memory = new MemoryBackend(1 << 20);
        Backend chain = new ReadOnlyFilter(new FilterForTests(memory));
        assertThat(FilterBackend.find(chain, MemoryBackend.class)).isSameAs(memory);
        assertThat(FilterBackend.find(chain, ReadOnlyFilter.class)).isSameAs(chain);
        assertThat(FilterBackend.find(chain, StatusReporting.class)).isNull();
    }

    @Test
    void readOnlyPassesReadsOnEveryPathAndRefusesWritesOnEveryPath() throws Exception {
        List<Call> calls = new ArrayList<>();
        Backend inner = recording(calls);
        ReadOnlyFilter ro = new ReadOnlyFilter(inner);
        assertThat(ro.traits()).as("it changes no byte read: the inner's fast paths stay").isEqualTo(inner.traits());
        assertThat(ro.capabilities()).containsExactlyInAnyOrder(Backend.Capability.FLUSH, Backend.Capability.CACHE,
            Backend.Capability.EXTENTS, Backend.Capability.MULTI_CONN);

        calls.clear();
        ByteBuffer dst = ByteBuffer.allocate(16);
        ro.readAsync(4096, dst).get();
        ro.read(4096, dst);
        assertThat(ro.extents(0, 4096)).containsExactly(new Extent(4096, false, false));
        assertThat(calls).extracting(c -> c.method().getName()).filteredOn(n -> !n.equals("traits"))
            .containsExactly("readAsync", "read", "extents");

        calls.clear();
        ByteBuffer[] srcs = {ByteBuffer.allocate(16)};
        assertEperm(() -> ro.write(0, srcs[0], false));
        assertEperm(() -> ro.write(0, srcs, true));
        assertEperm(() -> ro.trim(0, 4096, false));
        assertEperm(() -> ro.zero(0, 4096, true, false, false));
        assertThatThrownBy(() -> ro.writeAsync(0, srcs, false).get()).isInstanceOf(ExecutionException.class)
            .cause().isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.EPERM));
        assertThat(calls).as("no write reaches the inner backend").isEmpty();
    }

    private static void assertEperm(org.assertj.core.api.ThrowableAssert.ThrowingCallable call) {
        assertThatThrownBy(call).isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.EPERM));
    }
}
