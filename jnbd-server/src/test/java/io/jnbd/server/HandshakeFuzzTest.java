package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.util.List;
import java.util.Set;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

/**
 * Random option sequences (known and unknown options with random data) against a live server: every option
 * that does not end the handshake gets replies naming it and ending in ACK or an error the spec defines,
 * and the server keeps serving.
 */
class HandshakeFuzzTest {
    private static ServerFixture fx;

    @BeforeContainer
    static void start() throws IOException {
        fx = new ServerFixture(List.of(new Export("a", "", new MemoryBackend(1 << 20)), new Export("b", "", new MemoryBackend(4096))));
    }

    @AfterContainer
    static void stop() {
        if (fx != null) fx.close();
    }

    record Opt(int option, byte[] data) {}

    private static final Set<Integer> FINAL_TYPES = Set.of(Nbd.REP_ACK, Nbd.REP_ERR_UNSUP, Nbd.REP_ERR_POLICY,
        Nbd.REP_ERR_INVALID, Nbd.REP_ERR_UNKNOWN, Nbd.REP_ERR_PLATFORM, Nbd.REP_ERR_TOO_BIG, Nbd.REP_ERR_SHUTDOWN);

    @Provide
    Arbitrary<List<Opt>> sessions() {
        Arbitrary<Integer> option = Arbitraries.oneOf(
            Arbitraries.of(Nbd.OPT_LIST, Nbd.OPT_PEEK_EXPORT, Nbd.OPT_STARTTLS, Nbd.OPT_INFO, Nbd.OPT_GO,
                Nbd.OPT_STRUCTURED_REPLY, Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT, Nbd.OPT_EXTENDED_HEADERS),
            Arbitraries.integers().filter(i -> i != Nbd.OPT_EXPORT_NAME && i != Nbd.OPT_ABORT));
        Arbitrary<byte[]> data = Arbitraries.oneOf(
            Arbitraries.bytes().array(byte[].class).ofMaxSize(64),
            Arbitraries.of(new byte[0]),
            // Well-formed requests for real and unknown names, so that the valid paths are fuzzed too.
            Arbitraries.of("a", "b", "", "zz").map(n -> RawClient.exportRequest(n, List.of(Nbd.INFO_NAME))),
            Arbitraries.of("a", "zz").map(n -> RawClient.metaContext(n, List.of(Nbd.CONTEXT_BASE_ALLOCATION, "x:y"))));
        return Combinators.combine(option, data).as(Opt::new).list().ofMaxSize(12);
    }

    @Property(tries = 150, seed = "20261122")
    void everyOptionIsAnsweredOrTheHandshakeEndsCleanly(@ForAll("sessions") List<Opt> session) throws IOException {
        try (RawClient c = RawClient.connect(fx.address)) {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            for (Opt o : session) {
                List<RawClient.OptionReply> replies = c.optionUntilFinal(o.option(), o.data());
                RawClient.OptionReply last = replies.getLast();
                assertThat(FINAL_TYPES).as("final reply to %s", Nbd.optionName(o.option())).contains(last.type());
                for (RawClient.OptionReply r : replies.subList(0, replies.size() - 1)) {
                    assertThat(r.type()).isIn(Nbd.REP_SERVER, Nbd.REP_INFO, Nbd.REP_META_CONTEXT);
                }
                if (o.option() == Nbd.OPT_STRUCTURED_REPLY && last.type() == Nbd.REP_ACK) c.structured = true;
                if (o.option() == Nbd.OPT_GO && last.type() == Nbd.REP_ACK) {
                    // In transmission now: prove it, and stop sending options.
                    c.takeInfos(replies);
                    assertThat(c.read(0, 512)).hasSize(512);
                    return;
                }
            }
            assertThat(c.option(Nbd.OPT_ABORT, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
        }
    }

    @Property(tries = 100, seed = "20261122")
    void randomBytesAfterTheGreetingNeverHangOrHurtTheServer(@ForAll byte[] junk) throws IOException {
        try (RawClient c = RawClient.connect(fx.address)) {
            c.greeting();
            c.write(junk);
            c.channel.shutdownOutput();
            // Whatever the server makes of it, it ends the session once our input ends.
            assertThat(c.drainUntilClosed()).isTrue();
        }
        try (RawClient ok = fx.open("a")) {
            assertThat(ok.read(0, 512)).hasSize(512);
        }
    }
}
