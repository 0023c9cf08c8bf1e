package io.jnbd.protocol;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import net.jqwik.api.constraints.StringLength;

/** Every message encoded and decoded again is the message it was; every encoder and its decoder agree on lengths. */
class RoundTripPropertiesTest {

    @Provide
    Arbitrary<String> names() {
        // Any Unicode text whose UTF-8 form fits the spec's 4096-byte bound (at most 4 bytes a code point).
        // No lone surrogates: they have no UTF-8 form. Three bytes a char at most, so 1365 chars always fit.
        Arbitrary<String> bmp = Arbitraries.strings().withCharRange('\u0000', '\uD7FF').withCharRange('\uE000', '\uFFFD')
            .ofMaxLength(1365);
        Arbitrary<String> astral = Arbitraries.strings().withChars("a\u00e9\u20ac\uD83D\uDE00").ofMaxLength(500)
            .filter(s -> s.equals(new String(Strings.utf8(s), java.nio.charset.StandardCharsets.UTF_8)));
        Arbitrary<String> ascii = Arbitraries.strings().ascii().ofMaxLength(4096);
        return Arbitraries.oneOf(bmp, astral, ascii);
    }

    @Property(seed = "20261122")
    void request(@ForAll @IntRange(min = 0, max = 0xFFFF) int flags, @ForAll @IntRange(min = 0, max = 0xFFFF) int type,
                 @ForAll long cookie, @ForAll long offset, @ForAll int length) throws Exception {
        Request r = new Request(flags, type, cookie, offset, Integer.toUnsignedLong(length));
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
        r.encode(b);
        assertThat(b.hasRemaining()).isFalse();
        Request back = Request.decode(b.flip());
        assertThat(back).isEqualTo(r);
        assertThat(b.hasRemaining()).isFalse();
    }

    @Property(seed = "20261122")
    void simpleReply(@ForAll int error, @ForAll long cookie) {
        ByteBuffer b = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
        SimpleReply.encode(b, error, cookie);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.SIMPLE_REPLY_MAGIC);
        assertThat(SimpleReply.decodeAfterMagic(b)).isEqualTo(new SimpleReply(error, cookie));
    }

    @Property(seed = "20261122")
    void structuredReplyHeader(@ForAll @IntRange(min = 0, max = 0xFFFF) int flags,
                               @ForAll @IntRange(min = 0, max = 0xFFFF) int type, @ForAll long cookie, @ForAll int length) {
        ByteBuffer b = ByteBuffer.allocate(Nbd.STRUCTURED_REPLY_SIZE);
        StructuredReplyHeader.encode(b, flags, type, cookie, length);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        var h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h).isEqualTo(new StructuredReplyHeader(flags, type, cookie, Integer.toUnsignedLong(length)));
        assertThat(h.done()).isEqualTo((flags & Nbd.REPLY_FLAG_DONE) != 0);
        assertThat(h.isError()).isEqualTo((type & 0x8000) != 0);
    }

    @Property(seed = "20261122")
    void optionHeader(@ForAll int option, @ForAll int length) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
        OptionHeader.encode(b, option, length);
        assertThat(b.hasRemaining()).isFalse();
        assertThat(OptionHeader.decode(b.flip())).isEqualTo(new OptionHeader(option, Integer.toUnsignedLong(length)));
    }

    @Property(seed = "20261122")
    void optionReplyHeader(@ForAll int option, @ForAll int type, @ForAll int length) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_REPLY_HEADER_SIZE);
        OptionReplyHeader.encode(b, option, type, length);
        assertThat(b.hasRemaining()).isFalse();
        var h = OptionReplyHeader.decode(b.flip());
        assertThat(h).isEqualTo(new OptionReplyHeader(option, type, Integer.toUnsignedLong(length)));
        assertThat(h.isError()).isEqualTo(type < 0);
    }

    @Property(seed = "20261122")
    void exportRequest(@ForAll("names") String name,
                       @ForAll @Size(max = 40) List<@IntRange(min = 0, max = 0xFFFF) Integer> infos) throws Exception {
        ExportRequest r = new ExportRequest(name, infos);
        ByteBuffer b = ByteBuffer.allocate(r.encodedLength());
        r.encode(b);
        assertThat(b.hasRemaining()).isFalse();
        ExportRequest back = ExportRequest.decode(b.flip());
        assertThat(back).isEqualTo(r);
        assertThat(b.hasRemaining()).isFalse();
    }

    @Property(seed = "20261122")
    void metaContextRequest(@ForAll("names") String name,
                            @ForAll @Size(max = MetaContextRequest.MAX_QUERIES) List<@StringLength(max = 64) String> raw)
        throws Exception {
        List<String> queries = new ArrayList<>();
        for (String q : raw) {
            if (q.equals(new String(Strings.utf8(q), java.nio.charset.StandardCharsets.UTF_8))) queries.add(q);
        }
        MetaContextRequest r = new MetaContextRequest(name, queries);
        ByteBuffer b = ByteBuffer.allocate(r.encodedLength());
        r.encode(b);
        assertThat(b.hasRemaining()).isFalse();
        assertThat(MetaContextRequest.decode(b.flip())).isEqualTo(r);
    }

    @Property(seed = "20261122")
    void infoExport(@ForAll long size, @ForAll @IntRange(min = 0, max = 0xFFFF) int flags) throws Exception {
        roundTripInfo(new Info.Export(size, flags));
    }

    @Property(seed = "20261122")
    void infoName(@ForAll("names") String name) throws Exception {
        roundTripInfo(new Info.Name(name));
    }

    @Property(seed = "20261122")
    void infoDescription(@ForAll("names") String description) throws Exception {
        roundTripInfo(new Info.Description(description));
    }

    @Property(seed = "20261122")
    void infoBlockSize(@ForAll int min, @ForAll int preferred, @ForAll int max) throws Exception {
        roundTripInfo(new Info.BlockSize(min, preferred, max));
    }

    @Property(seed = "20261122")
    void unknownInfoTypesAreSkippedWhole(@ForAll @IntRange(min = 4, max = 0xFFFF) int type,
                                         @ForAll @Size(max = 100) byte[] payload) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(2 + payload.length).putShort((short) type).put(payload).flip();
        Info info = Info.decode(b);
        assertThat(info).isEqualTo(new Info.Unknown(type, 2 + payload.length));
        assertThat(b.hasRemaining()).isFalse();
    }

    private static void roundTripInfo(Info info) throws ProtocolException {
        ByteBuffer b = ByteBuffer.allocate(info.encodedLength());
        info.encode(b);
        assertThat(b.hasRemaining()).as("encodedLength matches encode").isFalse();
        b.flip();
        Info back = Info.decode(b);
        assertThat(back).isEqualTo(info);
        assertThat(back.type()).isEqualTo(info.type());
        assertThat(b.hasRemaining()).isFalse();
    }

    // ---- structured reply chunks: each encoder against its decoder (or the spec's layout where the client decodes inline)

    @Property(seed = "20261122")
    void offsetDataPrefix(@ForAll @IntRange(min = 0, max = 1) int done, @ForAll long cookie, @ForAll long offset,
                          @ForAll @IntRange(min = 0, max = 1 << 25) int dataLength) {
        ByteBuffer b = ByteBuffer.allocate(Chunks.OFFSET_DATA_PREFIX);
        Chunks.offsetDataPrefix(b, done, cookie, offset, dataLength);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        var h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h).isEqualTo(new StructuredReplyHeader(done, Nbd.REPLY_TYPE_OFFSET_DATA, cookie, 8L + dataLength));
        assertThat(b.getLong()).isEqualTo(offset);
    }

    @Property(seed = "20261122")
    void offsetHole(@ForAll @IntRange(min = 0, max = 1) int done, @ForAll long cookie, @ForAll long offset,
                    @ForAll @IntRange(min = 1) int holeLength) {
        ByteBuffer b = ByteBuffer.allocate(Chunks.OFFSET_HOLE_SIZE);
        Chunks.offsetHole(b, done, cookie, offset, holeLength);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        var h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h).isEqualTo(new StructuredReplyHeader(done, Nbd.REPLY_TYPE_OFFSET_HOLE, cookie, 12));
        assertThat(b.getLong()).isEqualTo(offset);
        assertThat(b.getInt()).isEqualTo(holeLength);
    }

    @Property(seed = "20261122")
    void none(@ForAll long cookie) {
        ByteBuffer b = ByteBuffer.allocate(Nbd.STRUCTURED_REPLY_SIZE);
        Chunks.none(b, cookie);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        assertThat(StructuredReplyHeader.decodeAfterMagic(b))
            .isEqualTo(new StructuredReplyHeader(Nbd.REPLY_FLAG_DONE, Nbd.REPLY_TYPE_NONE, cookie, 0));
    }

    @Property(seed = "20261122")
    void error(@ForAll @IntRange(min = 0, max = 1) int done, @ForAll long cookie, @ForAll int error,
               @ForAll("names") String message) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(Chunks.errorSize(message));
        Chunks.error(b, done, cookie, error, message);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        var h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h.type()).isEqualTo(Nbd.REPLY_TYPE_ERROR);
        assertThat(h.isError()).isTrue();
        assertThat(h.length()).isEqualTo(b.remaining());
        assertThat(Chunks.decodeError(h.type(), b)).isEqualTo(new Chunks.ErrorPayload(error, message, -1));
        assertThat(b.hasRemaining()).isFalse();
    }

    @Property(seed = "20261122")
    void errorOffset(@ForAll @IntRange(min = 0, max = 1) int done, @ForAll long cookie, @ForAll int error,
                     @ForAll("names") String message, @ForAll long offset) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(Chunks.errorOffsetSize(message));
        Chunks.errorOffset(b, done, cookie, error, message, offset);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        var h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h.type()).isEqualTo(Nbd.REPLY_TYPE_ERROR_OFFSET);
        assertThat(h.flags()).isEqualTo(done);
        assertThat(h.length()).isEqualTo(b.remaining());
        assertThat(Chunks.decodeError(h.type(), b)).isEqualTo(new Chunks.ErrorPayload(error, message, offset));
    }

    @Property(seed = "20261122")
    void blockStatus(@ForAll long cookie, @ForAll int contextId,
                     @ForAll @Size(min = 1, max = 200) List<@IntRange(min = 1) Integer> lengths, @ForAll int flagSeed) throws Exception {
        List<BlockStatusDescriptor> descriptors = new ArrayList<>();
        for (int i = 0; i < lengths.size(); i++) descriptors.add(new BlockStatusDescriptor(lengths.get(i), (flagSeed >>> (i % 32)) & 3));
        ByteBuffer b = ByteBuffer.allocate(Chunks.blockStatusSize(descriptors.size()));
        Chunks.blockStatus(b, Nbd.REPLY_FLAG_DONE, cookie, contextId, descriptors);
        assertThat(b.hasRemaining()).isFalse();
        b.flip();
        assertThat(b.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        var h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h.type()).isEqualTo(Nbd.REPLY_TYPE_BLOCK_STATUS);
        assertThat(h.length()).isEqualTo(b.remaining());
        assertThat(Chunks.decodeBlockStatus(b)).isEqualTo(new Chunks.BlockStatusPayload(contextId, descriptors));
    }

    @Property(seed = "20261122")
    void blockStatusLengthsAreUnsigned32Bit(@ForAll @IntRange(min = 1, max = 1000) int below) throws Exception {
        long length = 0xFFFF_FFFFL - below;
        var d = List.of(new BlockStatusDescriptor(length, Nbd.STATE_HOLE | Nbd.STATE_ZERO));
        ByteBuffer b = ByteBuffer.allocate(Chunks.blockStatusSize(1));
        Chunks.blockStatus(b, 0, 1, 7, d);
        b.flip().position(Nbd.STRUCTURED_REPLY_SIZE);
        assertThat(Chunks.decodeBlockStatus(b).descriptors()).containsExactlyElementsOf(d);
    }

    @Property(seed = "20261122")
    void stringsRoundTrip(@ForAll("names") String s) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(4 + Strings.utf8(s).length);
        Strings.writePrefixed(b, s);
        assertThat(Strings.readPrefixed(b.flip())).isEqualTo(s);
    }
}
