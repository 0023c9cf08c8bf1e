package io.jnbd.server;

import io.jnbd.protocol.ExportRequest;
import io.jnbd.protocol.Info;
import io.jnbd.protocol.MetaContextRequest;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.OptionHeader;
import io.jnbd.protocol.OptionReplyHeader;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Strings;
import io.jnbd.server.backend.BlockSizes;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.NamedViews;
import io.jnbd.server.net.TlsTransport;
import io.jnbd.server.net.Transport;
import io.jnbd.server.net.Transports;
import io.jnbd.tls.TlsException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The server side of fixed newstyle negotiation, from the greeting to the first transmission request.
 * Returns the agreed {@link Session}, or null when the client ended the handshake (ABORT, EOF).
 * A client that breaks the protocol gets a {@link ProtocolException}; the caller closes only that connection.
 *
 * <p>STARTTLS swaps the transport for a {@link TlsTransport} over the same socket; {@link #transport()} is the one
 * the connection goes on with. Exports are looked up as the {@link Client} may have them: by its address, and
 * once TLS is up by the identities its session proved.
 */
final class Handshake {
    private static final Logger log = LoggerFactory.getLogger(Handshake.class);
    /** The largest option we read; real options are a few hundred bytes, and strings are capped at 4096. */
    static final int MAX_OPTION_LENGTH = 64 * 1024;

    /**
     * Why the server turns options down: every option ({@code everyOption}, e.g. it is shutting down), or only
     * those that would open an export (GO, INFO, EXPORT_NAME: it has no room for this client, which may still
     * list exports and agree structured replies, so that libnbd reports the refusal of GO itself).
     */
    record Refusal(int reply, String message, boolean everyOption) {}

    /** The TLS handshake after STARTTLS failed; the message is the TLS layer's, saying why. */
    static final class TlsHandshakeFailed extends TlsException {
        TlsHandshakeFailed(TlsException cause) {
            super(cause.getMessage(), cause);
        }
    }

    /** Runs the server side of the TLS handshake on the plain transport, once STARTTLS has been acknowledged. */
    interface StartTls {
        TlsTransport start(Transport plain) throws TlsException;
    }

    private Transport transport;
    private final ExportRegistry exports;
    private final Supplier<Refusal> refusal;
    private final ServerTls.Mode tls;
    private final StartTls startTls;
    private final String peer;
    private Client client;
    private boolean tlsActive;

    private boolean noZeroes;
    private boolean structured;
    private final MetaContexts metaContexts = new MetaContexts();

    /**
     * {@code refusal}: asked before each option; non-null turns the option down with that error. {@code startTls}
     * is used only when {@code tls} is not {@link ServerTls.Mode#OFF}.
     */
    Handshake(Transport transport, ExportRegistry exports, Supplier<Refusal> refusal, ServerTls.Mode tls,
              StartTls startTls, String peer, Client client) {
        this.transport = transport;
        this.exports = exports;
        this.refusal = refusal;
        this.tls = tls;
        this.startTls = startTls;
        this.peer = peer;
        this.client = client;
    }

    /** What the connection speaks over: the socket's own transport, or TLS over it after STARTTLS. */
    Transport transport() {
        return transport;
    }

    Session run() throws IOException, ProtocolException {
        ByteBuffer greeting = ByteBuffer.allocate(18);
        greeting.putLong(Nbd.NBDMAGIC).putLong(Nbd.IHAVEOPT).putShort((short) (Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES)).flip();
        transport.send(greeting);

        ByteBuffer clientFlags = ByteBuffer.allocate(4);
        if (!Transports.receiveFully(transport, clientFlags)) return null;
        int flags = clientFlags.flip().getInt();
        if ((flags & ~(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES)) != 0) {
            throw new ProtocolException("unknown client flags 0x" + Integer.toHexString(flags));
        }
        noZeroes = (flags & Nbd.FLAG_C_NO_ZEROES) != 0;

        ByteBuffer header = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
        while (true) {
            header.clear();
            if (!Transports.receiveFully(transport, header)) return null;
            OptionHeader opt = OptionHeader.decode(header.flip());
            if (opt.length() > MAX_OPTION_LENGTH) {
                throw new ProtocolException("option " + Nbd.optionName(opt.option()) + " claims " + opt.length() + " bytes");
            }
            ByteBuffer data = ByteBuffer.allocate((int) opt.length());
            Transports.receiveExactly(transport, data);
            data.flip();
            Session s = option(opt.option(), data);
            if (s != null) return s;
            if (opt.option() == Nbd.OPT_ABORT) return null;
        }
    }

    /** Handles one option; returns a session when it ends the handshake. */
    private Session option(int option, ByteBuffer data) throws IOException, ProtocolException {
        Refusal no = option == Nbd.OPT_ABORT ? null : refusal.get();
        boolean opensExport = option == Nbd.OPT_GO || option == Nbd.OPT_INFO || option == Nbd.OPT_EXPORT_NAME;
        // A client that will not be served is not worth a TLS handshake either: it hears why instead.
        if (no != null && (no.everyOption() || opensExport || option == Nbd.OPT_STARTTLS)) {
            if (option == Nbd.OPT_EXPORT_NAME) throw new ProtocolException(no.message()); // cannot carry an error
            reply(option, no.reply(), no.message());
            return null;
        }
        if (tls == ServerTls.Mode.REQUIRE && !tlsActive && option != Nbd.OPT_STARTTLS && option != Nbd.OPT_ABORT) {
            // FORCEDTLS: nothing, not even whether an export exists, before TLS.
            if (option == Nbd.OPT_EXPORT_NAME) throw new ProtocolException("NBD_OPT_EXPORT_NAME before STARTTLS, and TLS is required");
            reply(option, Nbd.REP_ERR_TLS_REQD, "this server requires TLS: send NBD_OPT_STARTTLS first");
            return null;
        }
        switch (option) {
            case Nbd.OPT_EXPORT_NAME -> {
                String name = Strings.read(data, data.remaining());
                Export export;
                try {
                    export = find(option, name);
                } catch (ExportRegistry.Refused e) {
                    throw new ProtocolException("export '" + exports.shown(name) + "' refused: " + e.getMessage());
                }
                // EXPORT_NAME cannot carry an error: the spec says to drop the connection.
                if (export == null) throw new ProtocolException("unknown export '" + exports.shown(name) + "'");
                Session session = session(export, name, false);
                ByteBuffer out = ByteBuffer.allocate(noZeroes ? 10 : 134);
                out.putLong(export.backend().size()).putShort((short) session.transmissionFlags());
                if (!noZeroes) out.put(new byte[124]);
                transport.send(out.flip());
                return session;
            }
            case Nbd.OPT_ABORT -> {
                try {
                    reply(option, Nbd.REP_ACK);
                } catch (IOException ignored) {
                    // the client may already have gone, as the spec allows
                }
                return null;
            }
            case Nbd.OPT_LIST -> {
                if (data.hasRemaining()) {
                    reply(option, Nbd.REP_ERR_INVALID, "LIST takes no data");
                    return null;
                }
                for (Export e : exports.listed(client)) {
                    byte[] name = Strings.utf8(e.name());
                    // The bytes after the name are free-form; clients such as nbdinfo show them as the description.
                    byte[] details = Strings.utf8(e.description());
                    ByteBuffer b = ByteBuffer.allocate(4 + name.length + details.length)
                        .putInt(name.length).put(name).put(details).flip();
                    reply(option, Nbd.REP_SERVER, b);
                }
                reply(option, Nbd.REP_ACK);
            }
            case Nbd.OPT_STARTTLS -> {
                if (data.hasRemaining()) reply(option, Nbd.REP_ERR_INVALID, "STARTTLS takes no data");
                else if (tls == ServerTls.Mode.OFF) reply(option, Nbd.REP_ERR_POLICY, "TLS is not configured on this server");
                else if (tlsActive) reply(option, Nbd.REP_ERR_INVALID, "TLS is already active");
                else startTls();
            }
            case Nbd.OPT_INFO, Nbd.OPT_GO -> {
                return infoOrGo(option, data);
            }
            case Nbd.OPT_STRUCTURED_REPLY -> {
                if (data.hasRemaining()) reply(option, Nbd.REP_ERR_INVALID, "STRUCTURED_REPLY takes no data");
                else if (structured) reply(option, Nbd.REP_ERR_INVALID, "structured replies already negotiated");
                else {
                    structured = true;
                    reply(option, Nbd.REP_ACK);
                }
            }
            case Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT -> metaContext(option, data);
            default -> reply(option, Nbd.REP_ERR_UNSUP, "option " + Nbd.optionName(option) + " is not supported");
        }
        return null;
    }

    private Session infoOrGo(int option, ByteBuffer data) throws IOException {
        ExportRequest req;
        try {
            req = ExportRequest.decode(data);
        } catch (ProtocolException e) {
            reply(option, Nbd.REP_ERR_INVALID, e.getMessage());
            return null;
        }
        Export export;
        try {
            export = find(option, req.name());
        } catch (ExportRegistry.Refused e) {
            // SELECTIVETLS: an export only TLS could open is a TLS-only export, and GO and INFO must say TLS_REQD.
            boolean tlsReqd = e.tlsMayAdmit() && tls != ServerTls.Mode.OFF && !tlsActive;
            reply(option, tlsReqd ? Nbd.REP_ERR_TLS_REQD : Nbd.REP_ERR_POLICY, e.getMessage());
            return null;
        }
        if (export == null) {
            reply(option, Nbd.REP_ERR_UNKNOWN, "no export named '" + req.name() + "'");
            return null;
        }
        Session session = session(export, req.name(), option == Nbd.OPT_GO && req.infoRequests().contains(Nbd.INFO_BLOCK_SIZE));
        List<Info> infos = new ArrayList<>();
        infos.add(new Info.Export(export.backend().size(), session.transmissionFlags()));
        if (req.infoRequests().contains(Nbd.INFO_NAME)) infos.add(new Info.Name(export.name()));
        if (req.infoRequests().contains(Nbd.INFO_DESCRIPTION) && !export.description().isEmpty()) {
            infos.add(new Info.Description(export.description()));
        }
        BlockSizes bs = export.backend().blockSizes();
        // Sent even when not asked for: the spec lets a server volunteer it, and a client that did not ask ignores it.
        infos.add(new Info.BlockSize(bs.minimum(), bs.preferred(), bs.maximum()));
        for (Info info : infos) {
            ByteBuffer b = ByteBuffer.allocate(info.encodedLength());
            info.encode(b);
            reply(option, Nbd.REP_INFO, b.flip());
        }
        reply(option, Nbd.REP_ACK);
        return option == Nbd.OPT_GO ? session : null;
    }

    private void metaContext(int option, ByteBuffer data) throws IOException {
        boolean set = option == Nbd.OPT_SET_META_CONTEXT;
        if (set) metaContexts.forget(); // SET replaces the previous selection even when it fails
        if (!structured) {
            reply(option, Nbd.REP_ERR_INVALID, "negotiate structured replies first");
            return;
        }
        MetaContextRequest req;
        try {
            req = MetaContextRequest.decode(data);
        } catch (ProtocolException e) {
            reply(option, Nbd.REP_ERR_INVALID, e.getMessage());
            return;
        }
        Export export;
        try {
            export = find(option, req.exportName());
        } catch (ExportRegistry.Refused e) {
            reply(option, Nbd.REP_ERR_POLICY, e.getMessage());
            return;
        }
        if (export == null) {
            reply(option, Nbd.REP_ERR_UNKNOWN, "no export named '" + req.exportName() + "'");
            return;
        }
        try {
            if (set) {
                for (MetaContext c : metaContexts.set(export, req.exportName(), req.queries())) metaContextReply(option, c.id(), c.name());
            } else {
                // The spec reserves the id of a listed context: it is 0.
                for (String name : metaContexts.list(export, req.queries())) metaContextReply(option, 0, name);
            }
        } catch (MetaContexts.InvalidQuery e) {
            reply(option, Nbd.REP_ERR_INVALID, e.getMessage());
            return;
        }
        reply(option, Nbd.REP_ACK);
    }

    private void metaContextReply(int option, int id, String context) throws IOException {
        byte[] name = Strings.utf8(context);
        reply(option, Nbd.REP_META_CONTEXT, ByteBuffer.allocate(4 + name.length).putInt(id).put(name).flip());
    }

    /**
     * Acknowledges STARTTLS and runs the TLS handshake: from here on every byte is encrypted. A failed handshake
     * ends the connection (the acknowledgement is sent, so it cannot go on in plain text). As the spec asks,
     * nothing negotiated before survives it.
     */
    private void startTls() throws IOException {
        reply(Nbd.OPT_STARTTLS, Nbd.REP_ACK);
        TlsTransport secure;
        try {
            secure = startTls.start(transport);
        } catch (TlsException e) {
            throw new TlsHandshakeFailed(e);
        }
        transport = secure;
        tlsActive = true;
        client = client.withIdentities(secure.peerIdentities());
        structured = false;
        metaContexts.forget();
        log.debug("{}: TLS established ({}){}", peer, secure.description(),
            client.identities().isEmpty() ? "" : ", identities " + client.identities());
    }

    /** The export the client names, as it may have it; a refusal is logged, since it is the operator's policy at work. */
    private Export find(int option, String name) throws ExportRegistry.Refused {
        try {
            return exports.find(name, client);
        } catch (ExportRegistry.Refused e) {
            log.info("{}: NBD_OPT_{} '{}' refused: {} ({})", peer, Nbd.optionName(option), exports.shown(name), e.getMessage(), client.describe());
            throw e;
        }
    }

    /** {@code asked}: the name the client gave, which may go on past the export's ({@code boot/pc42}: see NamedViews). */
    private Session session(Export export, String asked, boolean blockSizeAgreed) {
        List<MetaContext> contexts = structured ? metaContexts.selectedFor(asked) : List.of();
        int flags = export.transmissionFlags(structured);
        String viewName = asked.length() > export.name().length() && asked.startsWith(export.name() + "/")
            ? asked.substring(export.name().length() + 1) : null;
        NamedViews views = FilterBackend.find(export.backend(), NamedViews.class);
        if (export.access().readOnlyFor(client) || views != null && views.readOnly(viewName)) {
            // Only the commands that change data go; FLUSH and FUA are harmless on a disk the client cannot write.
            flags = (flags | Nbd.FLAG_READ_ONLY) & ~(Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES | Nbd.FLAG_SEND_FAST_ZERO);
        }
        return new Session(export, structured, contexts, flags, blockSizeAgreed,
            new ConnectionContext(viewName, client.identities(), peer));
    }

    private void reply(int option, int type) throws IOException {
        reply(option, type, ByteBuffer.allocate(0));
    }

    private void reply(int option, int type, String message) throws IOException {
        reply(option, type, ByteBuffer.wrap(Strings.utf8(message)));
    }

    private void reply(int option, int type, ByteBuffer payload) throws IOException {
        ByteBuffer h = ByteBuffer.allocate(Nbd.OPTION_REPLY_HEADER_SIZE);
        OptionReplyHeader.encode(h, option, type, payload.remaining());
        transport.send(h.flip(), payload);
    }
}
