package io.jnbd.client;

import io.jnbd.protocol.ExportRequest;
import io.jnbd.protocol.Info;
import io.jnbd.protocol.MetaContextRequest;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.OptionHeader;
import io.jnbd.protocol.OptionReplyHeader;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Strings;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TlsClient;
import io.jnbd.tls.TlsException;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The client side of fixed newstyle option haggling, run on a blocking channel before the
 * transmission phase starts. One instance per connection. With TLS, STARTTLS is the first option, so that
 * every later one (and the export's name) is already encrypted, and a refusal ends the connection: the user
 * asked for TLS, and a server, or someone in between, that declines must not get the session in plain text.
 */
final class Handshake {

    /** Replies to options are small (names, descriptions, infos); anything larger is a broken server. */
    private static final int MAX_OPTION_REPLY = 64 * 1024;
    private static final long OLDSTYLE_MAGIC = 0x00420281861253L;
    /** How jnbd-tls starts its reasons; the client's message names the peer instead. */
    private static final List<String> TLS_PREFIXES = List.of("TLS handshake failed: ", "TLS session failed: ");

    /**
     * What the handshake settled for the transmission phase, and the stream it goes on in (TLS or not).
     * {@code contexts}: the negotiated metadata contexts by this connection's ids for them, in the order the server
     * named them.
     */
    record Result(ExportInfo info, Map<Integer, String> contexts, Transport transport, String identity) {}

    /** The query that a jnbd server answers with {@code jnbd:identity:<hex>}, the identity of the export's data. */
    static final String IDENTITY_QUERY = "jnbd:identity";

    /** Plain at first; the TLS session once STARTTLS has succeeded. */
    private Transport transport;
    private final String peer;
    /** Null for a plain connection. */
    private final TlsClient tls;
    private boolean noZeroes;
    /** TLS is up and the server has not sent a byte over it yet. */
    private boolean awaitingFirstTlsReply;

    Handshake(Transport transport, String peer, TlsClient tls) {
        this.transport = transport;
        this.peer = peer;
        this.tls = tls;
    }

    /** Greeting and client flags: common to every use of a connection. */
    private void greet() throws IOException {
        ByteBuffer greeting = readFully(18, "server greeting");
        long magic = greeting.getLong();
        if (magic != Nbd.NBDMAGIC) throw violation("bad greeting magic 0x" + Long.toHexString(magic));
        long second = greeting.getLong();
        if (second == OLDSTYLE_MAGIC) throw new NbdException(peer + " speaks oldstyle NBD, which is not supported");
        if (second != Nbd.IHAVEOPT) throw violation("bad newstyle magic 0x" + Long.toHexString(second));
        int serverFlags = Short.toUnsignedInt(greeting.getShort());
        if ((serverFlags & Nbd.FLAG_FIXED_NEWSTYLE) == 0) {
            throw new NbdException(peer + " does not offer fixed newstyle negotiation");
        }
        noZeroes = (serverFlags & Nbd.FLAG_NO_ZEROES) != 0;
        int clientFlags = Nbd.FLAG_C_FIXED_NEWSTYLE | (noZeroes ? Nbd.FLAG_C_NO_ZEROES : 0);
        writeFully(ByteBuffer.allocate(4).putInt(clientFlags).flip());
        if (tls != null) startTls();
    }

    private void startTls() throws IOException {
        sendOption(Nbd.OPT_STARTTLS, ByteBuffer.allocate(0));
        Reply r = readReply(Nbd.OPT_STARTTLS);
        if (r.header.isError()) {
            String message = r.data.hasRemaining() ? decode(r.data, Math.min(r.data.remaining(), Strings.MAX_STRING)) : "";
            abort();
            throw new NbdException("server at " + peer + " does not offer TLS (it answered STARTTLS with "
                + r.name() + (message.isEmpty() ? "" : ": " + message) + ")");
        }
        if (r.header.type() != Nbd.REP_ACK || r.data.hasRemaining()) {
            throw violation("unexpected reply " + r.name() + " to STARTTLS");
        }
        SecureChannel session;
        try {
            session = tls.connect(transport.raw());
        } catch (TlsException e) {
            throw tlsFailed(e);
        }
        transport = new Transport.Tls(transport.socket, session);
        awaitingFirstTlsReply = true;
    }

    /**
     * A TLS failure at any point of the handshake, STARTTLS's or NBD's after it: with TLS 1.3 a server's refusal of
     * the client's certificate arrives only after the client has finished its side, with the first option reply.
     */
    private NbdConnectionException tlsFailed(TlsException e) {
        String why = e.getMessage() == null ? e.toString() : e.getMessage();
        for (String prefix : TLS_PREFIXES) {
            if (why.startsWith(prefix)) why = why.substring(prefix.length());
        }
        return new NbdConnectionException("TLS handshake with " + peer + " failed: " + why, e);
    }

    /**
     * Negotiates structured replies and, with them, base:allocation and {@code extraContexts}, then enters
     * transmission with {@code export}. With {@code askIdentity}, first lists {@link #IDENTITY_QUERY} (a round trip
     * only a reconnecting client pays for): the result's identity is what the server answered, or null.
     */
    Result go(String export, boolean wantStructured, List<String> extraContexts, boolean askIdentity) throws IOException {
        greet();
        boolean structured = wantStructured && structuredReplies();
        Map<Integer, String> contexts = Map.of();
        String identity = null;
        if (structured && askIdentity) {
            List<Map.Entry<Integer, String>> listed = metaContexts(Nbd.OPT_LIST_META_CONTEXT, export, List.of(IDENTITY_QUERY), true);
            for (var c : listed == null ? List.<Map.Entry<Integer, String>>of() : listed) {
                if (c.getValue().startsWith(IDENTITY_QUERY + ":")) identity = c.getValue();
            }
        }
        if (structured) {
            List<String> queries = new ArrayList<>(List.of(Nbd.CONTEXT_BASE_ALLOCATION));
            for (String c : extraContexts) if (!queries.contains(c)) queries.add(c);
            contexts = setMetaContexts(export, queries);
        }
        int baseAllocationId = -1;
        for (var c : contexts.entrySet()) {
            if (c.getValue().equals(Nbd.CONTEXT_BASE_ALLOCATION)) baseAllocationId = c.getKey();
        }

        var request = new ExportRequest(export, List.of(Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION, Nbd.INFO_BLOCK_SIZE));
        ByteBuffer data = ByteBuffer.allocate(request.encodedLength());
        request.encode(data);
        sendOption(Nbd.OPT_GO, data.flip());
        String name = export;
        String description = "";
        Info.Export exportInfo = null;
        Info.BlockSize blockSize = null;
        while (true) {
            Reply r = readReply(Nbd.OPT_GO);
            int type = r.header.type();
            if (type == Nbd.REP_ACK) break;
            if (type == Nbd.REP_ERR_UNSUP) {
                // An old server without GO: EXPORT_NAME cannot report errors or block sizes, but it works.
                return exportName(export, structured, contexts, baseAllocationId, identity);
            }
            if (r.header.isError()) {
                // Tell the server we are leaving rather than just hanging up on it.
                NbdException e = optionError("GO", export, r);
                abort();
                throw e;
            }
            if (type != Nbd.REP_INFO) throw violation("unexpected reply " + r.name() + " to GO");
            Info info;
            try {
                info = Info.decode(r.data);
            } catch (ProtocolException e) {
                throw violation(e.getMessage());
            }
            switch (info) {
                case Info.Export e -> exportInfo = e;
                case Info.Name n -> name = n.name();
                case Info.Description d -> description = d.description();
                case Info.BlockSize b -> blockSize = b;
                case Info.Unknown u -> { }
            }
        }
        if (exportInfo == null) throw violation("GO acknowledged without NBD_INFO_EXPORT");
        return new Result(exportInfo(name, description, exportInfo.size(), exportInfo.transmissionFlags(), blockSize,
            structured, baseAllocationId), contexts, transport, identity);
    }

    private boolean structuredReplies() throws IOException {
        sendOption(Nbd.OPT_STRUCTURED_REPLY, ByteBuffer.allocate(0));
        Reply r = readReply(Nbd.OPT_STRUCTURED_REPLY);
        boolean structured = r.header.type() == Nbd.REP_ACK;
        if (!structured && !r.header.isError()) throw violation("unexpected reply " + r.name() + " to STRUCTURED_REPLY");
        return structured;
    }

    /**
     * SET_META_CONTEXT: the contexts the server selected, by their ids, in its order. A refusal leaves none
     * negotiated; the export is still usable.
     */
    private Map<Integer, String> setMetaContexts(String export, List<String> queries) throws IOException {
        Map<Integer, String> contexts = new LinkedHashMap<>();
        List<Map.Entry<Integer, String>> replies = metaContexts(Nbd.OPT_SET_META_CONTEXT, export, queries, true);
        if (replies == null) return Map.of();
        for (var c : replies) {
            String earlier = contexts.putIfAbsent(c.getKey(), c.getValue());
            if (earlier != null) {
                throw violation("context id " + Integer.toUnsignedString(c.getKey()) + " given to both '" + earlier
                    + "' and '" + c.getValue() + "'");
            }
        }
        return contexts;
    }

    /**
     * The id and name of each REP_META_CONTEXT the option is answered with; null if it was refused and
     * {@code refusalIsNoAnswer}, else the refusal is thrown.
     */
    private List<Map.Entry<Integer, String>> metaContexts(int option, String export, List<String> queries,
                                                          boolean refusalIsNoAnswer) throws IOException {
        var request = new MetaContextRequest(export, queries);
        ByteBuffer data = ByteBuffer.allocate(request.encodedLength());
        request.encode(data);
        sendOption(option, data.flip());
        List<Map.Entry<Integer, String>> contexts = new ArrayList<>();
        while (true) {
            Reply r = readReply(option);
            if (r.header.type() == Nbd.REP_ACK) return contexts;
            if (r.header.isError()) {
                if (refusalIsNoAnswer) return null;
                throw optionError("LIST_META_CONTEXT", export, r);
            }
            if (r.header.type() != Nbd.REP_META_CONTEXT || r.data.remaining() < 4) {
                throw violation("unexpected reply " + r.name() + " to " + Nbd.optionName(option));
            }
            int id = r.data.getInt();
            contexts.add(Map.entry(id, decode(r.data, r.data.remaining())));
        }
    }

    /** The metadata contexts of {@code export} that match {@code queries} (all of them for none), then ABORT. */
    List<String> listMetaContexts(String export, List<String> queries) throws IOException {
        greet();
        // Servers may refuse context options until structured replies are on; a refusal here is no answer yet.
        structuredReplies();
        // LIST's ids mean nothing (servers send 0): only the names count.
        List<String> names = metaContexts(Nbd.OPT_LIST_META_CONTEXT, export, queries, false).stream().map(Map.Entry::getValue).toList();
        abort();
        return names;
    }

    private Result exportName(String export, boolean structured, Map<Integer, String> contexts, int baseAllocationId,
                              String identity) throws IOException {
        sendOption(Nbd.OPT_EXPORT_NAME, ByteBuffer.wrap(Strings.utf8(export)));
        ByteBuffer reply;
        try {
            reply = readFully(noZeroes ? 10 : 134, "EXPORT_NAME reply");
        } catch (NbdConnectionException e) {
            // The only way EXPORT_NAME can say "no such export" is to hang up.
            throw new NbdException(peer + " closed the connection on EXPORT_NAME '" + export
                + "': unknown export or refused", e);
        }
        long size = reply.getLong();
        int flags = Short.toUnsignedInt(reply.getShort());
        return new Result(exportInfo(export, "", size, flags, null, structured, baseAllocationId), contexts, transport, identity);
    }

    private static ExportInfo exportInfo(String name, String description, long size, int flags, Info.BlockSize bs,
                                         boolean structured, int baseAllocationId) {
        int minimum = 1;
        int preferred = 4096;
        long maximum = Nbd.DEFAULT_MAX_PAYLOAD;
        if (bs != null) {
            minimum = Math.max(1, bs.minimum());
            preferred = Math.max(minimum, bs.preferred());
            long max = Integer.toUnsignedLong(bs.maximum());
            // 0xffffffff means "no fixed limit"; stay at the size every server must accept.
            maximum = max == 0xffffffffL ? Nbd.DEFAULT_MAX_PAYLOAD : Math.max(minimum, max);
        }
        return new ExportInfo(name, description, size, flags, minimum, preferred, maximum, structured,
            structured && baseAllocationId >= 0);
    }

    /** Lists the exports, then ends the session with ABORT. */
    List<ExportListing> list() throws IOException {
        greet();
        sendOption(Nbd.OPT_LIST, ByteBuffer.allocate(0));
        List<ExportListing> exports = new ArrayList<>();
        while (true) {
            Reply r = readReply(Nbd.OPT_LIST);
            if (r.header.type() == Nbd.REP_ACK) break;
            if (r.header.isError()) throw optionError("LIST", null, r);
            if (r.header.type() != Nbd.REP_SERVER || r.data.remaining() < 4) {
                throw violation("unexpected reply " + r.name() + " to LIST");
            }
            long nameLength = Integer.toUnsignedLong(r.data.getInt());
            if (nameLength > r.data.remaining()) throw violation("export name overruns its REP_SERVER");
            String name = decode(r.data, nameLength);
            exports.add(new ExportListing(name, decode(r.data, r.data.remaining())));
        }
        abort();
        return exports;
    }

    /** Polite end of the handshake; the server may or may not answer, so nothing is read. */
    private void abort() {
        try {
            sendOption(Nbd.OPT_ABORT, ByteBuffer.allocate(0));
        } catch (IOException ignored) {
            // The session is over either way.
        }
        transport.endWrites();
    }

    private record Reply(OptionReplyHeader header, ByteBuffer data) {
        String name() {
            return Nbd.replyTypeName(header.type());
        }
    }

    private NbdException optionError(String option, String export, Reply r) throws NbdException {
        String message = r.data.hasRemaining() ? decode(r.data, Math.min(r.data.remaining(), Strings.MAX_STRING)) : "";
        String what = switch (r.header.type()) {
            case Nbd.REP_ERR_UNKNOWN -> "unknown export '" + export + "'";
            case Nbd.REP_ERR_POLICY -> "refused by server policy";
            case Nbd.REP_ERR_TLS_REQD -> "server requires TLS (use an nbds:// URI)";
            case Nbd.REP_ERR_SHUTDOWN -> "server is shutting down";
            default -> r.name();
        };
        return new NbdException(peer + ": " + option + (export != null && r.header.type() != Nbd.REP_ERR_UNKNOWN
            ? " '" + export + "'" : "") + " failed: " + what + (message.isEmpty() ? "" : " (" + message + ")"));
    }

    private void sendOption(int option, ByteBuffer data) throws IOException {
        ByteBuffer header = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
        OptionHeader.encode(header, option, data.remaining());
        writeFully(header.flip());
        if (data.hasRemaining()) writeFully(data);
    }

    private Reply readReply(int option) throws IOException {
        ByteBuffer buf = readFully(Nbd.OPTION_REPLY_HEADER_SIZE, "option reply");
        OptionReplyHeader header;
        try {
            header = OptionReplyHeader.decode(buf);
        } catch (ProtocolException e) {
            throw violation(e.getMessage());
        }
        if (header.option() != option) {
            throw violation("reply for option " + Nbd.optionName(header.option()) + " while waiting for " + Nbd.optionName(option));
        }
        if (header.length() > MAX_OPTION_REPLY) throw violation("option reply of " + header.length() + " bytes");
        ByteBuffer data = header.length() == 0 ? ByteBuffer.allocate(0) : readFully((int) header.length(), "option reply data");
        return new Reply(header, data);
    }

    private String decode(ByteBuffer in, long length) throws NbdProtocolException {
        try {
            return Strings.read(in, length);
        } catch (ProtocolException e) {
            throw violation(e.getMessage());
        }
    }

    private NbdProtocolException violation(String what) {
        return new NbdProtocolException("protocol violation by " + peer + " during handshake: " + what);
    }

    private ByteBuffer readFully(int n, String what) throws IOException {
        ByteBuffer buf = ByteBuffer.allocate(n);
        while (buf.hasRemaining()) {
            int r;
            try {
                r = transport.read(buf);
            } catch (TlsException e) {
                throw tlsFailed(e);
            } catch (IOException e) {
                if (awaitingFirstTlsReply) throw closedAfterTls(e);
                throw new NbdConnectionException("connection to " + peer + " failed while reading " + what + ": " + e.getMessage(), e);
            }
            if (r < 0) {
                if (awaitingFirstTlsReply) throw closedAfterTls(new EOFException());
                throw new NbdConnectionException(peer + " closed the connection while the client was reading " + what,
                    new EOFException());
            }
        }
        awaitingFirstTlsReply = false;
        return buf.flip();
    }

    /**
     * GnuTLS servers (nbdkit, qemu-nbd) refuse a TLS 1.3 client's certificate, or its absence, by hanging up once
     * the client has finished its side of the handshake: the hang-up is the only reason the client gets.
     */
    private NbdConnectionException closedAfterTls(IOException e) {
        return new NbdConnectionException("TLS handshake with " + peer + " failed: the server closed the connection"
            + " as it ended (a client certificate missing or refused?)", e);
    }

    private void writeFully(ByteBuffer buf) throws IOException {
        try {
            transport.write(buf);
        } catch (TlsException e) {
            throw tlsFailed(e);
        }
    }
}
