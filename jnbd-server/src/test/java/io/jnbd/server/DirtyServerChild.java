package io.jnbd.server;

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.util.List;

/** The server {@link DirtyServerCrashTest} kills: serves one export from a spec on a loopback port and says which. */
public final class DirtyServerChild {
    public static void main(String[] args) throws Exception {
        ExportSet set = ExportSet.open(List.of(ExportSpec.parse("d", args[0])), null);
        NbdServer server = new NbdServer(set.exports(), ServerConfig.defaults());
        SocketAddress address = server.listen(new InetSocketAddress("127.0.0.1", 0));
        System.out.println("PORT " + ((InetSocketAddress) address).getPort());
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE); // until killed
    }
}
