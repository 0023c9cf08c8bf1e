package io.jnbd.tls;

import org.bouncycastle.jsse.provider.BouncyCastleJsseProvider;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.SecureRandom;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManagerFactory;

/**
 * Not a test: prints MB/s and CPU seconds per GiB for 1 MiB writes one way over loopback, through plain TCP, the
 * JDK's TLS (X.509), BouncyCastle's JSSE provider (X.509, BouncyCastle's TLS over the JDK's ciphers) and
 * BouncyCastle's TLS API (PSK). Sender and receiver run in this one JVM, so on a small machine they share the CPUs.
 *
 * <pre>java -cp ... io.jnbd.tls.TlsThroughput [MiB per run, default 1024]</pre>
 */
public final class TlsThroughput {
    private static final int WRITE = 1 << 20;

    interface Session {
        SecureChannel[] open(Loopback net) throws Exception;
    }

    public static void main(String[] args) throws Exception {
        long mib = args.length > 0 ? Long.parseLong(args[0]) : 1024;
        Path dir = Files.createTempDirectory("tls-throughput");
        Setup.prepare(dir);
        TlsServer jdkServer = TlsServer.load(new TlsServerSettings(dir, null, false));
        TlsClient jdkClient = TlsClient.load(new TlsClientSettings(dir, null, null, true, "localhost"));
        TlsServer pskServer = TlsServer.load(new TlsServerSettings(null, dir.resolve(Setup.PSK_FILE), false));
        TlsClient pskClient = TlsClient.load(new TlsClientSettings(null, dir.resolve(Setup.PSK_FILE), null, true, "localhost"));
        SSLContext[] bcjsse = bcJsse(dir);

        System.out.printf("%-34s %10s %16s %16s%n", "engine (1 MiB writes, one way)", "MB/s", "send CPU s/GiB", "recv CPU s/GiB");
        for (int round = 0; round < 2; round++) {
            long size = (round == 0 ? Math.min(mib, 256) : mib) << 20; // round 0 warms the JIT up
            boolean print = round == 1;
            run("plain TCP", size, print, net -> null);
            run("JDK X.509", size, print, net -> pair(net, jdkServer, jdkClient));
            run("BouncyCastle JSSE X.509", size, print, net -> pair(net, serverOf(bcjsse[0]), clientOf(bcjsse[1])));
            run("BouncyCastle PSK", size, print, net -> pair(net, pskServer, pskClient));
        }
        System.out.printf("(%d available processors, %s)%n", Runtime.getRuntime().availableProcessors(), System.getProperty("java.vm.version"));
    }

    private static SecureChannel[] pair(Loopback net, TlsServer s, TlsClient c) throws Exception {
        var sessions = net.handshake(s, c);
        return new SecureChannel[] {sessions.server(), sessions.client()};
    }

    private static void run(String name, long size, boolean print, Session session) throws Exception {
        try (Loopback net = Loopback.open()) {
            SecureChannel[] s = session.open(net);
            String description = s == null ? "" : " (" + s[1].description() + ")";
            ThreadMXBean mx = ManagementFactory.getThreadMXBean();
            AtomicLong sendCpu = new AtomicLong();
            AtomicLong recvCpu = new AtomicLong();
            Thread receiver = Thread.ofPlatform().start(() -> {
                try {
                    ByteBuffer b = ByteBuffer.allocateDirect(WRITE);
                    long got = 0;
                    while (got < size) {
                        b.clear();
                        int n = s == null ? net.server.read(b) : s[0].read(b);
                        if (n < 0) throw new IllegalStateException("ended early");
                        got += n;
                    }
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                recvCpu.set(mx.getCurrentThreadCpuTime());
            });
            long start = System.nanoTime();
            long cpu0 = mx.getCurrentThreadCpuTime();
            ByteBuffer b = ByteBuffer.allocateDirect(WRITE);
            for (long sent = 0; sent < size; sent += WRITE) {
                b.clear();
                if (s == null) {
                    while (b.hasRemaining()) net.client.write(b);
                } else {
                    s[1].write(b);
                }
            }
            sendCpu.set(mx.getCurrentThreadCpuTime() - cpu0);
            receiver.join();
            double seconds = (System.nanoTime() - start) / 1e9;
            double gib = size / (double) (1L << 30);
            if (print) {
                System.out.printf("%-34s %10.0f %16.2f %16.2f%s%n", name, size / seconds / 1e6, sendCpu.get() / 1e9 / gib,
                    recvCpu.get() / 1e9 / gib, description);
            }
            if (s != null) {
                s[1].close();
                s[0].close();
            }
        }
    }

    private static SSLContext[] bcJsse(Path dir) throws Exception {
        BouncyCastleJsseProvider provider = new BouncyCastleJsseProvider();
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        ks.setKeyEntry("k", Pem.privateKey(dir.resolve(TestPki.SERVER_KEY)), new char[0],
            Pem.certificates(dir.resolve(TestPki.SERVER_CERT)).toArray(java.security.cert.X509Certificate[]::new));
        KeyManagerFactory kmf = KeyManagerFactory.getInstance("PKIX", provider);
        kmf.init(ks, new char[0]);
        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        trust.setCertificateEntry("ca", Pem.certificates(dir.resolve(TestPki.CA_CERT)).getFirst());
        TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX", provider);
        tmf.init(trust);
        SSLContext server = SSLContext.getInstance("TLS", provider);
        server.init(kmf.getKeyManagers(), null, new SecureRandom());
        SSLContext client = SSLContext.getInstance("TLS", provider);
        client.init(null, tmf.getTrustManagers(), new SecureRandom());
        return new SSLContext[] {server, client};
    }

    private static TlsServer serverOf(SSLContext c) {
        return new TlsServer() {
            @Override
            public SecureChannel accept(RawChannel raw, String peer) throws TlsException {
                SSLEngine e = c.createSSLEngine();
                e.setUseClientMode(false);
                return JdkSecureChannel.handshake(e, raw, null);
            }

            @Override
            public String describe() {
                return "BCJSSE";
            }
        };
    }

    private static TlsClient clientOf(SSLContext c) {
        return raw -> {
            SSLEngine e = c.createSSLEngine("localhost", -1);
            e.setUseClientMode(true);
            return JdkSecureChannel.handshake(e, raw, null);
        };
    }
}
