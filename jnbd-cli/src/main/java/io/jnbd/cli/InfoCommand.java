package io.jnbd.cli;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.ExportInfo;
import io.jnbd.client.ExportListing;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;

import java.io.PrintWriter;
import java.util.List;
import java.util.concurrent.Callable;

import picocli.CommandLine.Model.CommandSpec;

/** {@code jnbd info URI}: what a server says about an export, or which exports it has. Its model is built in code. */
public final class InfoCommand implements Callable<Integer> {

    String uri;
    boolean list;
    boolean json;

    private static final String[] DESCRIPTION = {
        "Show an NBD export's size, flags and block sizes, or list a server's exports.",
        "",
        "URI is nbd://host[:port]/export or nbd+unix:///export?socket=PATH; an",
        "empty export selects the server's default export.",
        "",
        "nbds:// and nbds+unix:// require TLS (STARTTLS), with query parameters",
        "tls-certificates=DIR (ca-cert.pem, client-cert.pem, client-key.pem),",
        "tls-psk-file=FILE (psktool's identity:hexkey; user@ picks the identity),",
        "tls-verify-peer=false (accept any server certificate) and",
        "tls-hostname=NAME (the name the certificate must carry).",
        "",
        "With --json the output is one JSON object with at least the keys export,",
        "size (bytes), flags (names of the set transmission flags) and block_size",
        "(minimum, preferred, maximum), and tls (protocol and cipher, or null).",
        ""};

    private static final String[] FOOTER = {"", "Examples:",
        "  jnbd info nbd://localhost/disk",
        "  jnbd info --json nbd://localhost:10809/disk | jq .size",
        "  jnbd info --list nbd://localhost",
        "  jnbd info 'nbds://server/disk?tls-certificates=/etc/pki/jnbd'",
        "  jnbd info 'nbd+unix:///?socket=/tmp/nbd.sock'"};

    /** This command's picocli model, bound to this object's fields (built in code: see {@link Models}). */
    CommandSpec model() {
        CommandSpec s = Models.command(this, "info", DESCRIPTION, FOOTER);
        s.addPositional(Models.positional("0", () -> uri, v -> uri = v)
            .paramLabel("URI").description("the export (or with --list the server) to ask").build());
        s.addOption(Models.option("--list", boolean.class, () -> list, v -> list = v)
            .description("list the server's exports (NBD_OPT_LIST) instead").build());
        s.addOption(Models.option("--json", boolean.class, () -> json, v -> json = v)
            .description("print JSON instead of text").build());
        spec = s;
        return s;
    }

    private CommandSpec spec;

    // What --json prints; the keys are the components' names in snake_case, and scripts depend on them.
    record Listing(List<Listed> exports) {}
    record Listed(String name, String description) {}
    record Described(String uri, String export, String description, long size, List<String> flags,
                     int transmissionFlags, BlockSize blockSize, boolean structuredReplies, boolean baseAllocation,
                     String tls) {}
    record BlockSize(long minimum, long preferred, long maximum) {}

    @Override
    public Integer call() throws Exception {
        NbdUri target = NbdUri.parse(uri);
        PrintWriter out = spec.commandLine().getOut();
        if (list) {
            List<ExportListing> exports = NbdClient.list(target, ClientOptions.defaults());
            if (json) {
                out.println(Json.line(new Listing(exports.stream().map(e -> new Listed(e.name(), e.description())).toList())));
            } else {
                for (var e : exports) {
                    String name = e.name().isEmpty() ? "(default)" : e.name();
                    out.println(e.description().isEmpty() ? name : name + "\t" + e.description());
                }
            }
            out.flush();
            return 0;
        }
        try (NbdClient client = NbdClient.connect(target, ClientOptions.defaults())) {
            ExportInfo i = client.info();
            if (json) {
                out.println(Json.line(new Described(uri, i.name(), i.description(), i.size(), i.flagNames(),
                    i.transmissionFlags(), new BlockSize(i.minimumBlockSize(), i.preferredBlockSize(), i.maximumPayload()),
                    i.structuredReplies(), i.baseAllocation(), client.tls())));
            } else {
                out.println("export:       " + (i.name().isEmpty() ? "(default)" : i.name()));
                if (!i.description().isEmpty()) out.println("description:  " + i.description());
                out.println("size:         " + i.size() + " (" + Sizes.human(i.size()) + ")");
                out.println("flags:        " + String.join(" ", i.flagNames()));
                out.println("block size:   minimum " + i.minimumBlockSize() + ", preferred " + i.preferredBlockSize()
                    + ", maximum payload " + i.maximumPayload());
                out.println("structured replies: " + (i.structuredReplies() ? "yes" : "no")
                    + ", base:allocation: " + (i.baseAllocation() ? "yes" : "no"));
                out.println("tls:          " + (client.tls() == null ? "no" : client.tls()));
            }
            out.flush();
            return 0;
        }
    }
}
