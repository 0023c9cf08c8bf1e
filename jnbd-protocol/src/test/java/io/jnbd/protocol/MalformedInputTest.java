package io.jnbd.protocol;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.ByteBuffer;
import java.util.List;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

/** Every malformed magic, length and string a peer can send is a {@link ProtocolException}, never a runtime error. */
class MalformedInputTest {

    // ---- magics

    @Property(seed = "20261122")
    void badRequestMagic(@ForAll int magic) {
        if (magic == Nbd.REQUEST_MAGIC) return;
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
        new Request(0, Nbd.CMD_READ, 1, 0, 512).encode(b);
        b.putInt(0, magic).flip();
        assertThatThrownBy(() -> Request.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("magic");
    }

    @Property(seed = "20261122")
    void badOptionMagic(@ForAll long magic) {
        if (magic == Nbd.IHAVEOPT) return;
        ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
        OptionHeader.encode(b, Nbd.OPT_GO, 0);
        b.putLong(0, magic).flip();
        assertThatThrownBy(() -> OptionHeader.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("magic");
    }

    @Property(seed = "20261122")
    void badOptionReplyMagic(@ForAll long magic) {
        if (magic == Nbd.OPTION_REPLY_MAGIC) return;
        ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_REPLY_HEADER_SIZE);
        OptionReplyHeader.encode(b, Nbd.OPT_GO, Nbd.REP_ACK, 0);
        b.putLong(0, magic).flip();
        assertThatThrownBy(() -> OptionReplyHeader.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("magic");
    }

    @Test
    void nearMissMagicsAreRejected() {
        for (int bit = 0; bit < 64; bit++) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE).putLong(Nbd.IHAVEOPT ^ (1L << bit)).putInt(1).putInt(0).flip();
            assertThatThrownBy(() -> OptionHeader.decode(b)).isInstanceOf(ProtocolException.class);
        }
        for (int bit = 0; bit < 32; bit++) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE).putInt(Nbd.REQUEST_MAGIC ^ (1 << bit)).put(new byte[24]).flip();
            assertThatThrownBy(() -> Request.decode(b)).isInstanceOf(ProtocolException.class);
        }
    }

    // ---- strings

    @Test
    void stringLongerThan4096IsRejected() {
        ByteBuffer b = ByteBuffer.allocate(4 + 4097).putInt(4097).put(new byte[4097]).flip();
        assertThatThrownBy(() -> Strings.readPrefixed(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("4096");
        ByteBuffer exactly = ByteBuffer.allocate(4 + 4096).putInt(4096);
        for (int i = 0; i < 4096; i++) exactly.put((byte) 'x');
        assertThat(Assertions2.call(() -> Strings.readPrefixed(exactly.flip()))).hasSize(4096);
    }

    @Property(seed = "20261122")
    void hugeStringLengthsAreRejectedWithoutAllocating(@ForAll @IntRange(min = 4097) int length) {
        // Only 4 bytes of buffer: a decoder that trusted the length would allocate or overrun.
        ByteBuffer b = ByteBuffer.allocate(8).putInt(length).putInt(0).flip();
        assertThatThrownBy(() -> Strings.readPrefixed(b)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void negativeAsUnsignedStringLengthIsRejected() {
        ByteBuffer b = ByteBuffer.allocate(8).putInt(-1).putInt(0).flip();
        assertThatThrownBy(() -> Strings.readPrefixed(b)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void stringOverrunningItsMessageIsRejected() {
        ByteBuffer b = ByteBuffer.allocate(4 + 3).putInt(10).put("abc".getBytes()).flip();
        assertThatThrownBy(() -> Strings.readPrefixed(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("overruns");
        ByteBuffer noLength = ByteBuffer.allocate(3).put(new byte[3]).flip();
        assertThatThrownBy(() -> Strings.readPrefixed(noLength)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void invalidUtf8IsRejected() {
        byte[][] bad = {
            {(byte) 0xff},                                  // never valid
            {(byte) 0xc3},                                  // truncated 2-byte sequence
            {(byte) 0xc0, (byte) 0x80},                     // overlong NUL
            {(byte) 0xed, (byte) 0xa0, (byte) 0x80},        // encoded surrogate
            {(byte) 0xf4, (byte) 0x90, (byte) 0x80, (byte) 0x80}, // beyond U+10FFFF
            {'a', (byte) 0x80, 'b'},                        // stray continuation byte
        };
        for (byte[] s : bad) {
            ByteBuffer b = ByteBuffer.allocate(4 + s.length).putInt(s.length).put(s).flip();
            assertThatThrownBy(() -> Strings.readPrefixed(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("UTF-8");
        }
    }

    // ---- ExportRequest (INFO/GO data)

    @Test
    void exportRequestShorterThanSixBytes() {
        for (int n = 0; n < 6; n++) {
            ByteBuffer b = ByteBuffer.allocate(n);
            assertThatThrownBy(() -> ExportRequest.decode(b)).isInstanceOf(ProtocolException.class);
        }
    }

    @Test
    void exportRequestNameOverrunsData() {
        ByteBuffer b = ByteBuffer.allocate(4 + 3 + 2).putInt(5).put("abc".getBytes()).putShort((short) 0).flip();
        assertThatThrownBy(() -> ExportRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("overruns");
        ByteBuffer huge = ByteBuffer.allocate(6).putInt(-1).putShort((short) 0).flip();
        assertThatThrownBy(() -> ExportRequest.decode(huge)).isInstanceOf(ProtocolException.class);
    }

    @Property(seed = "20261122")
    void exportRequestTruncatedAnywhereIsRejected(@ForAll @IntRange(min = 0, max = 3) int infos,
                                                  @ForAll @IntRange(min = 1, max = 20) int cut) {
        ExportRequest r = new ExportRequest("disk", java.util.Collections.nCopies(infos, Nbd.INFO_BLOCK_SIZE));
        ByteBuffer full = ByteBuffer.allocate(r.encodedLength());
        r.encode(full);
        int keep = Math.max(0, r.encodedLength() - cut);
        ByteBuffer b = full.flip().slice(0, keep);
        assertThatThrownBy(() -> ExportRequest.decode(b)).isInstanceOf(ProtocolException.class);
    }

    @Property(seed = "20261122")
    void exportRequestCountDisagreeingWithLength(@ForAll @IntRange(min = 0, max = 50) int count,
                                                 @ForAll @IntRange(min = 0, max = 50) int carried) {
        if (count == carried) return;
        ByteBuffer b = ByteBuffer.allocate(4 + 1 + 2 + 2 * carried).putInt(1).put((byte) 'a').putShort((short) count);
        for (int i = 0; i < carried; i++) b.putShort((short) Nbd.INFO_NAME);
        assertThatThrownBy(() -> ExportRequest.decode(b.flip())).isInstanceOf(ProtocolException.class)
            .hasMessageContaining("info requests");
    }

    @Test
    void exportRequestWithOddTrailingByte() {
        ByteBuffer b = ByteBuffer.allocate(4 + 0 + 2 + 3).putInt(0).putShort((short) 1).putShort((short) 3).put((byte) 0).flip();
        assertThatThrownBy(() -> ExportRequest.decode(b)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void exportRequestWithInvalidUtf8Name() {
        ByteBuffer b = ByteBuffer.allocate(4 + 1 + 2).putInt(1).put((byte) 0xfe).putShort((short) 0).flip();
        assertThatThrownBy(() -> ExportRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("UTF-8");
    }

    @Test
    void exportRequestNameLongerThan4096() {
        int n = 5000;
        ByteBuffer b = ByteBuffer.allocate(4 + n + 2).putInt(n).put(new byte[n]).putShort((short) 0).flip();
        assertThatThrownBy(() -> ExportRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("4096");
    }

    // ---- MetaContextRequest

    @Test
    void metaContextMissingCount() {
        ByteBuffer b = ByteBuffer.allocate(4 + 1 + 2).putInt(1).put((byte) 'a').putShort((short) 0).flip();
        assertThatThrownBy(() -> MetaContextRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("count");
    }

    @Test
    void metaContextCountLargerThanQueriesCarried() {
        ByteBuffer b = ByteBuffer.allocate(4 + 4 + 4 + 3).putInt(0).putInt(2).putInt(3).put("a:b".getBytes()).flip();
        assertThatThrownBy(() -> MetaContextRequest.decode(b)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void metaContextTrailingBytes() {
        ByteBuffer b = ByteBuffer.allocate(4 + 4 + 1).putInt(0).putInt(0).put((byte) 0).flip();
        assertThatThrownBy(() -> MetaContextRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("trailing");
    }

    @Property(seed = "20261122")
    void metaContextHugeCountIsRejectedBeforeAllocating(@ForAll @IntRange(min = MetaContextRequest.MAX_QUERIES + 1) int count) {
        ByteBuffer b = ByteBuffer.allocate(8).putInt(0).putInt(count).flip();
        assertThatThrownBy(() -> MetaContextRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("too many");
        ByteBuffer unsigned = ByteBuffer.allocate(8).putInt(0).putInt(-count).flip();
        assertThatThrownBy(() -> MetaContextRequest.decode(unsigned)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void metaContextQueryOverruns() {
        ByteBuffer b = ByteBuffer.allocate(4 + 4 + 4 + 2).putInt(0).putInt(1).putInt(15).put("ba".getBytes()).flip();
        assertThatThrownBy(() -> MetaContextRequest.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("overruns");
    }

    // ---- Info payloads

    @Test
    void infoShorterThanItsType() {
        assertThatThrownBy(() -> Info.decode(ByteBuffer.allocate(1))).isInstanceOf(ProtocolException.class);
        assertThatThrownBy(() -> Info.decode(ByteBuffer.allocate(0))).isInstanceOf(ProtocolException.class);
    }

    @Property(seed = "20261122")
    void infoExportOfWrongLength(@ForAll @IntRange(min = 0, max = 40) int rest) {
        if (rest == 10) return;
        ByteBuffer b = ByteBuffer.allocate(2 + rest).putShort((short) Nbd.INFO_EXPORT).put(new byte[rest]).flip();
        assertThatThrownBy(() -> Info.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("NBD_INFO_EXPORT");
    }

    @Property(seed = "20261122")
    void infoBlockSizeOfWrongLength(@ForAll @IntRange(min = 0, max = 40) int rest) {
        if (rest == 12) return;
        ByteBuffer b = ByteBuffer.allocate(2 + rest).putShort((short) Nbd.INFO_BLOCK_SIZE).put(new byte[rest]).flip();
        assertThatThrownBy(() -> Info.decode(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("NBD_INFO_BLOCK_SIZE");
    }

    @Test
    void infoNameAndDescriptionMustBeValidUtf8AndBounded() {
        for (int type : new int[] {Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION}) {
            ByteBuffer bad = ByteBuffer.allocate(3).putShort((short) type).put((byte) 0xff).flip();
            assertThatThrownBy(() -> Info.decode(bad)).isInstanceOf(ProtocolException.class);
            ByteBuffer tooLong = ByteBuffer.allocate(2 + 4097).putShort((short) type).put(new byte[4097]).flip();
            assertThatThrownBy(() -> Info.decode(tooLong)).isInstanceOf(ProtocolException.class);
        }
    }

    // ---- structured reply payloads

    @Property(seed = "20261122")
    void blockStatusOfBadSize(@ForAll @IntRange(min = 0, max = 100) int size) {
        if (size >= 12 && (size - 4) % 8 == 0) return;
        ByteBuffer b = ByteBuffer.allocate(size);
        for (int i = 0; i + 4 <= size; i += 4) b.putInt(i, 1);
        assertThatThrownBy(() -> Chunks.decodeBlockStatus(b)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void blockStatusWithZeroLengthDescriptor() {
        ByteBuffer b = ByteBuffer.allocate(4 + 16).putInt(1).putInt(4096).putInt(0).putInt(0).putInt(Nbd.STATE_HOLE).flip();
        assertThatThrownBy(() -> Chunks.decodeBlockStatus(b)).isInstanceOf(ProtocolException.class).hasMessageContaining("length 0");
    }

    @Property(seed = "20261122")
    void errorChunkMessageLengthDisagreeing(@ForAll @IntRange(min = 0, max = 200) int claimed,
                                            @ForAll @IntRange(min = 0, max = 200) int actual, @ForAll boolean withOffset) {
        if (claimed == actual) return;
        int type = withOffset ? Nbd.REPLY_TYPE_ERROR_OFFSET : Nbd.REPLY_TYPE_ERROR;
        ByteBuffer b = ByteBuffer.allocate(6 + actual + (withOffset ? 8 : 0)).putInt(Nbd.EIO).putShort((short) claimed);
        for (int i = 0; i < actual; i++) b.put((byte) 'e');
        if (withOffset) b.putLong(0);
        assertThatThrownBy(() -> Chunks.decodeError(type, b.flip())).isInstanceOf(ProtocolException.class)
            .hasMessageContaining("disagrees");
    }

    @Test
    void errorOffsetWithoutItsOffset() {
        ByteBuffer b = ByteBuffer.allocate(6 + 2).putInt(Nbd.EIO).putShort((short) 2).put("no".getBytes()).flip();
        assertThatThrownBy(() -> Chunks.decodeError(Nbd.REPLY_TYPE_ERROR_OFFSET, b)).isInstanceOf(ProtocolException.class);
        // The same bytes are a fine plain ERROR chunk.
        b.rewind();
        assertThat(Assertions2.call(() -> Chunks.decodeError(Nbd.REPLY_TYPE_ERROR, b))).isEqualTo(new Chunks.ErrorPayload(Nbd.EIO, "no", -1));
    }

    @Property(seed = "20261122")
    void errorChunkShorterThanSix(@ForAll @IntRange(min = 0, max = 5) int size) {
        assertThatThrownBy(() -> Chunks.decodeError(Nbd.REPLY_TYPE_ERROR, ByteBuffer.allocate(size)))
            .isInstanceOf(ProtocolException.class);
    }

    @Test
    void errorChunkMessageInvalidUtf8() {
        ByteBuffer b = ByteBuffer.allocate(6 + 1).putInt(Nbd.EIO).putShort((short) 1).put((byte) 0xff).flip();
        assertThatThrownBy(() -> Chunks.decodeError(Nbd.REPLY_TYPE_ERROR, b)).isInstanceOf(ProtocolException.class);
    }

    @Test
    void blockStatusDecodedExactly() throws Exception {
        ByteBuffer b = ByteBuffer.allocate(4 + 8).putInt(3).putInt(-4096).putInt(Nbd.STATE_ZERO).flip();
        var p = Chunks.decodeBlockStatus(b);
        assertThat(p.contextId()).isEqualTo(3);
        assertThat(p.descriptors()).containsExactly(new BlockStatusDescriptor(0xFFFF_F000L, Nbd.STATE_ZERO));
        assertThat(List.of(p)).hasSize(1);
    }

    /** Calls that throw checked exceptions, for use inside assertions. */
    static final class Assertions2 {
        interface Call<T> { T call() throws Exception; }

        static <T> T call(Call<T> c) {
            try {
                return c.call();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        }
    }
}
