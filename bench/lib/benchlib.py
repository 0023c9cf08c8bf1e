"""Shared machinery for the jnbd benchmarks (bench/peers, bench/overlap, bench/curve).

Python 3 standard library only. Starts NBD servers on 127.0.0.1, runs fio against them, measures the
server's CPU time and peak RSS from /proc, and writes results under bench/results/. Benchmarks are not
tests: nothing here raises out of a benchmark on a missing peer or a failed run; the run is reported as
missing/failed and the benchmark goes on.
"""

import atexit
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 1 << 30


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def env_float(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def quick():
    return os.environ.get("QUICK", "") not in ("", "0")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def stamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def parse_size(text):
    text = str(text).strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if text.endswith(suffix):
            mult, text = m, text[:-1]
            break
    return int(float(text) * mult)


# ---------------------------------------------------------------- cleanup

_servers = []
_tmpdirs = []


def _cleanup(*_):
    for s in list(_servers):
        s.stop()
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


def _on_signal(signum, _frame):
    log(f"bench: signal {signum}, stopping servers")
    _cleanup()
    os._exit(0)  # benchmarks never fail


atexit.register(_cleanup)
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _on_signal)


def on_cleanup(obj):
    """Stops obj (anything with a stop() method, e.g. a load generator) with the servers at exit or on a signal."""
    _servers.append(obj)


def tmpdir(prefix="jnbd-bench.", parent=None):
    """A directory removed at exit or on a signal; parent: where (default: the system's temporary directory)."""
    if parent:
        os.makedirs(parent, exist_ok=True)
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    _tmpdirs.append(d)
    return d


# ---------------------------------------------------------------- TLS


def make_pki():
    """A throw-away CA with a server certificate for 127.0.0.1/localhost and a client certificate, written with
    openssl in the layout nbdkit, qemu and jnbd read (ca-cert.pem, server-cert.pem, server-key.pem) and libnbd
    reads (ca-cert.pem, client-cert.pem, client-key.pem); also keys.psk (psktool's format) for user "bench".
    Returns the directory, or None when openssl is missing or fails."""
    if shutil.which("openssl") is None:
        log("bench: openssl is not installed: no TLS runs")
        return None
    d = tmpdir("jnbd-bench-pki.")

    def run(*args, ext=None):
        extfile = None
        if ext:
            extfile = os.path.join(d, "ext.cnf")
            with open(extfile, "w") as f:
                f.write(ext)
            args = [*args, "-extfile", extfile]
        r = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("openssl " + " ".join(args[:2]) + ": " + r.stderr.strip()[-300:])

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    try:
        run("req", "-x509", *ec, "-days", "30", "-subj", "/CN=jnbd bench CA", "-keyout", "ca-key.pem",
            "-out", "ca-cert.pem")
        for who, cn, ext in (("server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                                      "extendedKeyUsage=serverAuth\n"),
                             ("client", "bench", "extendedKeyUsage=clientAuth\n")):
            run("req", *ec, "-subj", f"/CN={cn}", "-keyout", f"{who}-key.pem", "-out", f"{who}.csr")
            run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem",
                "-CAcreateserial", "-days", "30", "-out", f"{who}-cert.pem", ext=ext)
        with open(os.path.join(d, "keys.psk"), "w") as f:
            f.write("bench:" + os.urandom(32).hex() + "\n")
    except RuntimeError as e:
        log(f"bench: could not make certificates: {e}")
        return None
    return d


class LibnbdCertificates:
    """Puts a CA where libnbd looks when a URI names none (/etc/pki/libnbd for root, ~/.pki/libnbd otherwise),
    for the length of a run, and puts back what was there: fio's nbd engine cannot name the directory in its URI
    (libnbd refuses local-file parameters unless the program allows them, and fio does not)."""

    def __init__(self, pki):
        self.pki = pki
        self.dir = "/etc/pki/libnbd" if os.geteuid() == 0 else os.path.expanduser("~/.pki/libnbd")
        self.backup = None
        self.created = []

    def start(self):
        if os.path.exists(self.dir):
            self.backup = self.dir + ".jnbd-bench-saved"
            os.rename(self.dir, self.backup)
        parent = os.path.dirname(self.dir)
        if not os.path.exists(parent):
            os.makedirs(parent)
            self.created.append(parent)
        os.makedirs(self.dir)
        for f in ("ca-cert.pem", "client-cert.pem", "client-key.pem"):
            shutil.copy(os.path.join(self.pki, f), self.dir)
        on_cleanup(self)
        log(f"bench: libnbd's default certificates are the bench's CA in {self.dir} for this run")
        return self

    def stop(self):
        if self.dir is None:
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.backup:
            os.rename(self.backup, self.dir)
        for p in reversed(self.created):
            try:
                os.rmdir(p)
            except OSError:
                pass
        self.dir = None


def nbdkit_tls(path, pki, port=None):
    s = nbdkit(path, port)
    s.name = "nbdkit-tls"
    s.argv[1:1] = ["--tls=require", f"--tls-certificates={pki}"]
    s.tls = True
    return s


def qemu_nbd_tls(path, pki, port=None):
    s = qemu_nbd(path, port, name="qemu-nbd-tls",
                 extra=["--object", f"tls-creds-x509,id=tls0,endpoint=server,dir={pki}", "--tls-creds", "tls0"])
    s.tls = True
    return s


def jnbd_tls(exports, pki, port=None, extra=()):
    s = jnbd(exports, port, name="jnbd-tls", extra=["--tls", "require", "--tls-certificates", pki, *extra])
    s.tls = True
    return s


# ---------------------------------------------------------------- /proc


def _stat(path):
    """(comm, the fields after it) of a /proc .../stat file."""
    with open(path) as f:
        data = f.read()
    # comm may contain spaces and parentheses: split after the last ')'
    return data[data.index("(") + 1:data.rindex(")")], data[data.rindex(")") + 2:].split()


def _stat_fields(pid):
    return _stat(f"/proc/{pid}/stat")[1]


def jit_cpu_seconds(pid):
    """utime+stime of pid's JIT compiler threads (C1, C2): the JVM's one-off cost of compiling the code it runs,
    which a long-lived server amortises to nothing; benchmarks after a per-request cost report it apart."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for t in tasks:
        try:
            comm, f = _stat(f"/proc/{pid}/task/{t}/stat")
        except (OSError, ValueError):
            continue
        if "CompilerThre" in comm:
            total += int(f[11]) + int(f[12])
    return total / os.sysconf("SC_CLK_TCK")


def _children_map():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(name)[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def process_tree(pid):
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def idle_ticks():
    """(idle+iowait, all) jiffies of the whole machine from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return v[3] + v[4], sum(v)


def cpu_seconds(pid):
    """utime+stime of pid (all its threads), of its live descendants, and of its reaped children."""
    if pid is None:
        return None
    total = 0
    for i, p in enumerate(process_tree(pid)):
        try:
            f = _stat_fields(p)
        except (OSError, IndexError):
            continue
        # fields after comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        total += int(f[11]) + int(f[12])
        if i == 0:
            total += int(f[13]) + int(f[14])
    return total / CLK_TCK


def _status_bytes(pid, field):
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(field):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def peak_rss_bytes(pid):
    """VmHWM (peak resident set) of pid plus that of its live descendants."""
    return None if pid is None else _status_bytes(pid, "VmHWM:")


def resident_bytes(pid):
    """VmRSS (resident set now) of pid plus that of its live descendants; 0 for no process."""
    return 0 if pid is None else _status_bytes(pid, "VmRSS:")


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        log(f"bench: cannot drop the page cache ({e}); relying on O_DIRECT")
        return False


# ---------------------------------------------------------------- the test file


def bench_file(size_bytes, name=None):
    """Create (or reuse) a file of size_bytes filled with random data under BENCH_DIR."""
    d = os.environ.get("BENCH_DIR", "/var/tmp/jnbd-bench")
    os.makedirs(d, exist_ok=True)
    path = os.environ.get("BENCH_FILE") or os.path.join(d, name or f"bench-{size_bytes >> 30}g.img")
    if os.path.exists(path) and os.path.getsize(path) == size_bytes:
        return path
    log(f"bench: creating {path} ({size_bytes >> 20} MiB of random data)")
    chunk = 16 << 20
    with open(path, "wb") as f:
        left = size_bytes
        while left > 0:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n
    return path


def warm(path):
    """Read the whole file once so that it sits in the page cache."""
    t = time.time()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(16 << 20)
        while f.readinto(buf):
            pass
    log(f"bench: warmed {path} into the page cache in {time.time() - t:.1f}s")


# ---------------------------------------------------------------- servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def jdk_home():
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return home
    for cand in ("/usr/lib/jvm/temurin-25-jdk-amd64",):
        if os.path.exists(cand):
            return cand
    return None


def build_jnbd(root=ROOT):
    """bin/jnbd builds the project when the build is missing or stale; do it once, up front."""
    jnbd = os.path.join(root, "bin", "jnbd")
    if not os.path.exists(jnbd):
        return False
    log("bench: building jnbd if stale (bin/jnbd --version)")
    r = subprocess.run([jnbd, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log("bench: jnbd build failed:\n" + r.stdout[-3000:])
        return False
    return True


def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def checkout_revision(rev, who="bench"):
    """A detached worktree of rev under a temporary directory, built; returns (path, short sha) or None."""
    sha = git("rev-parse", "--short", rev)
    if sha.returncode != 0:
        print(f"{who}: no such revision {rev!r}: {sha.stderr.strip()}")
        return None
    d = os.path.join(tmpdir("jnbd-bench-rev."), "base")
    r = git("worktree", "add", "--detach", d, rev)
    if r.returncode != 0:
        print(f"{who}: git worktree add failed: {r.stderr.strip()}")
        return None
    if not build_jnbd(root=d):
        remove_checkout(d)
        return None
    return d, sha.stdout.strip()


def remove_checkout(d):
    git("worktree", "remove", "--force", d)
    shutil.rmtree(d, ignore_errors=True)
    git("worktree", "prune")


class Server:
    """One NBD server process on 127.0.0.1:port serving export 'bench' (or the names in the URI)."""

    def __init__(self, name, argv, port, env=None, find_pid=None, cwd=None):
        self.name, self.argv, self.port = name, argv, port
        self.env, self.find_pid, self.cwd = env, find_pid, cwd
        self.proc, self.pid, self.missing, self.error = None, None, False, None
        self.peak_rss = 0
        self.logpath = None
        self.tls = False

    def uri(self, export="bench"):
        # A TLS server's clients find their CA in libnbd's default directory (see LibnbdCertificates): fio's
        # nbd engine may not name local files in the URI.
        return f"{'nbds' if self.tls else 'nbd'}://127.0.0.1:{self.port}/{export}"

    def start(self, timeout=120):
        exe = self.argv[0]
        if shutil.which(exe) is None and not os.path.exists(exe):
            self.missing, self.error = True, f"{exe} not installed"
            log(f"bench: {self.name}: missing ({self.error})")
            return False
        d = tmpdir(f"jnbd-bench-{self.name}.")
        self.logpath = os.path.join(d, "server.log")
        env = dict(os.environ)
        env.update(self.env or {})
        try:
            self.proc = subprocess.Popen(self.argv, stdout=open(self.logpath, "w"), stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=self.cwd,
                                         start_new_session=True)
        except OSError as e:
            self.missing, self.error = True, str(e)
            return False
        _servers.append(self)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if _port_open(self.port):
                break
            if self.proc.poll() is not None and self.find_pid is None:
                break
            time.sleep(0.1)
        else:
            pass
        if not _port_open(self.port):
            self.error = "did not start listening: " + self.tail_log()
            log(f"bench: {self.name}: {self.error}")
            self.stop()
            return False
        self.pid = self.find_pid() if self.find_pid else self.proc.pid
        log(f"bench: {self.name} listening on 127.0.0.1:{self.port} (pid {self.pid})")
        return True

    def ok(self):
        return self.pid is not None and self.error is None

    def tail_log(self, n=600):
        try:
            with open(self.logpath) as f:
                return f.read()[-n:].strip()
        except (OSError, TypeError):
            return ""

    def cpu(self):
        try:
            return cpu_seconds(self.pid)
        except OSError:
            return None

    def sample_rss(self):
        try:
            r = peak_rss_bytes(self.pid) or 0
        except OSError:
            r = 0
        self.peak_rss = max(self.peak_rss, r)
        return self.peak_rss

    def stop(self):
        if self in _servers:
            _servers.remove(self)
        pids = []
        if self.pid is not None:
            try:
                pids = process_tree(self.pid)
            except OSError:
                pids = [self.pid]
        if self.proc is not None and self.proc.poll() is None:
            pids.append(self.proc.pid)
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except OSError:
                pass
        deadline = time.time() + 5
        while time.time() < deadline and any(_alive(p) for p in pids):
            if self.proc is not None:
                self.proc.poll()
            time.sleep(0.05)
        for p in pids:
            if _alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self.pid = None


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _find_by_cmdline(needle):
    def find():
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                ppid = int(_stat_fields(name)[1])
            except (OSError, ValueError, IndexError):
                continue
            if needle in cmd:
                # the daemon, not one of its per-connection children
                try:
                    with open(f"/proc/{ppid}/cmdline", "rb") as f:
                        if needle in f.read().replace(b"\0", b" ").decode(errors="replace"):
                            continue
                except OSError:
                    pass
                return int(name)
        return None
    return find


def nbdkit(path, port=None):
    port = port or free_port()
    return Server("nbdkit", ["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), "file", f"file={path}"], port)


def nbd_server(path, port=None, export_conf=()):
    """nbd-server daemonizes (its -d mode serves one connection and exits), so its pid is found by its
    unique config path; each connection is a forked child whose CPU is counted with the daemon's.
    export_conf: extra lines of the [bench] section, e.g. ("timeout = 10",)."""
    port = port or free_port()
    d = tmpdir("jnbd-bench-nbd-server.")
    conf = os.path.join(d, "config")
    with open(conf, "w") as f:
        f.write(f"[generic]\n    listenaddr = 127.0.0.1\n    port = {port}\n"
                f"[bench]\n    exportname = {path}\n" + "".join(f"    {line}\n" for line in export_conf))
    return Server("nbd-server", ["nbd-server", "-C", conf], port, find_pid=_find_by_cmdline(conf))


def qemu_nbd(path, port=None, name="qemu-nbd", extra=()):
    port = port or free_port()
    return Server(name, ["qemu-nbd", "-f", "raw", "--persistent", "--shared=8", "-b", "127.0.0.1",
                         "-p", str(port), "-x", "bench", *extra, path], port)


def floor(path, port=None, name="floor", extra=()):
    """bench/floor/floor.c, compiled here: the least a server can do per request (see that file). Not a peer;
    a yardstick for what the kernel charges for moving the bytes. extra: its flags (-s structured replies, -t two threads, -l ...)."""
    port = port or free_port()
    src = os.path.join(ROOT, "bench", "floor", "floor.c")
    exe = os.path.join(tmpdir("jnbd-bench-floor."), "floor")
    cc = shutil.which("cc") or shutil.which("gcc")
    r = subprocess.run([cc, "-O2", "-pthread", "-o", exe, src], capture_output=True, text=True) if cc else None
    if r is None or r.returncode != 0:
        log(f"bench: {name}: could not compile {src}: " + ("no C compiler" if r is None else r.stderr[-500:]))
    return Server(name, [exe, "-p", str(port), *extra, path], port)


def jnbd(exports, port=None, name="jnbd", extra=(), java_opts=None, root=ROOT):
    """exports: list of NAME=SPEC strings; root: the checkout whose bin/jnbd (and build) to run."""
    port = port or free_port()
    argv = [os.path.join(root, "bin", "jnbd"), "serve", "--listen", f"127.0.0.1:{port}"]
    for e in exports:
        argv += ["--export", e]
    argv += list(extra)
    env = {"JNBD_NO_BUILD": "1"}
    opts = java_opts if java_opts is not None else os.environ.get("JNBD_JAVA_OPTS")
    if opts:
        env["JNBD_JAVA_OPTS"] = opts
    jh = jdk_home()
    if jh:
        env["JAVA_HOME"] = jh
    return Server(name, argv, port, env=env, cwd=tmpdir("jnbd-bench-jnbd-cwd."))


def jnbd_memserver(memory, port=None, name="memserver", extra=(), root=ROOT):
    """A `jnbd memserver` with `memory` (e.g. "2G") of RAM on 127.0.0.1:port."""
    port = port or free_port()
    argv = [os.path.join(root, "bin", "jnbd"), "memserver", "--listen", f"127.0.0.1:{port}", "--memory", str(memory),
            *extra]
    env = {"JNBD_NO_BUILD": "1"}
    jh = jdk_home()
    if jh:
        env["JAVA_HOME"] = jh
    return Server(name, argv, port, env=env, cwd=tmpdir("jnbd-bench-memserver-cwd."))


# ---------------------------------------------------------------- status exports

class StatusReader:
    """Reads a JSON status export (a memory server's `status`, a pool's `NAME/status`) over one NBD connection kept
    open, one read per call. A benchmark that polls a status every 100 ms with nbdcopy spawns a process and makes the
    server open a connection each time, 10-25% of a vCPU between them on this machine (measured 28 Nov), taken from
    what it measures. Plain NBD only (fixed newstyle, NBD_OPT_GO, simple replies); read() returns None on any
    failure and connects afresh on the next call."""

    _IHAVEOPT, _OPT_REPLY, _REQUEST, _SIMPLE_REPLY = 0x49484156454F5054, 0x3E889045565A9, 0x25609513, 0x67446698
    _OPT_GO, _REP_ACK, _REP_INFO, _INFO_EXPORT = 7, 1, 3, 0

    def __init__(self, port, export, host="127.0.0.1", timeout=10):
        self.address, self.export, self.timeout = (host, port), export.encode(), timeout
        self.sock, self.size, self.cookie = None, None, 0

    def _recv(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise OSError("the server closed the connection")
            buf += chunk
        return bytes(buf)

    def _connect(self):
        import struct
        self.sock = socket.create_connection(self.address, timeout=self.timeout)
        magic, opt, flags = struct.unpack(">8sQH", self._recv(18))
        if magic != b"NBDMAGIC" or opt != self._IHAVEOPT or not flags & 1:
            raise OSError("not a fixed newstyle NBD server")
        no_zeroes = flags & 2
        self.sock.sendall(struct.pack(">I", 1 | no_zeroes))
        data = struct.pack(">I", len(self.export)) + self.export + struct.pack(">H", 0)
        self.sock.sendall(struct.pack(">QII", self._IHAVEOPT, self._OPT_GO, len(data)) + data)
        while True:
            magic, _, kind, length = struct.unpack(">QIII", self._recv(20))
            body = self._recv(length)
            if magic != self._OPT_REPLY or kind & 0x80000000:
                raise OSError(f"NBD_OPT_GO refused ({kind:#x}): {body[4:].decode(errors='replace')}")
            if kind == self._REP_INFO and struct.unpack(">H", body[:2])[0] == self._INFO_EXPORT:
                self.size = struct.unpack(">Q", body[2:10])[0]
            if kind == self._REP_ACK:
                break
        if not self.size:
            raise OSError("the server did not say the export's size")

    def read(self):
        """The document, parsed, or None."""
        import struct
        try:
            if self.sock is None:
                self._connect()
            self.cookie += 1
            self.sock.sendall(struct.pack(">IHHQQI", self._REQUEST, 0, 0, self.cookie, 0, self.size))
            magic, error, cookie = struct.unpack(">IIQ", self._recv(16))
            if magic != self._SIMPLE_REPLY or cookie != self.cookie or error:
                raise OSError(f"read failed: magic {magic:#x}, error {error}")
            return json.loads(self._recv(self.size).decode(errors="replace").strip())
        except (OSError, ValueError, struct.error):
            self.close()
            return None

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None


# ---------------------------------------------------------------- fio

# The fio matrix of issue 4, shared by bench/peers, bench/ab and bench/profile:
# key, fio --rw, --bs, --iodepth, the headline metric, the label in tables.
MATRIX = [
    ("seqread", "read", "1M", 8, "MBps", "read 1M QD8"),
    ("randread32", "randread", "4k", 32, "iops", "randread 4k QD32"),
    ("randread1", "randread", "4k", 1, "iops", "randread 4k QD1"),
    ("seqwrite", "write", "1M", 8, "MBps", "write 1M QD8"),
    ("randwrite32", "randwrite", "4k", 32, "iops", "randwrite 4k QD32"),
]
LABEL = {m[0]: m[5] for m in MATRIX}


def fio_version():
    try:
        return subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None


def run_fio(args, server=None, ramp=1.0, timeout=120):
    """Runs fio with JSON output. Measures the server's CPU from the end of the ramp to fio's exit and its
    peak RSS. Returns a dict of figures or {'error': ...}."""
    d = tmpdir("jnbd-bench-fio.")
    out = os.path.join(d, "out.json")
    argv = ["fio", "--name=bench", "--output-format=json", f"--output={out}", *args]
    cpu = {}

    def sample_after_ramp():
        cpu["start"] = server.cpu()
        cpu["t0"] = time.time()
        cpu["idle0"] = idle_ticks()

    timer = None
    if server is not None:
        cpu["start"] = server.cpu()
        cpu["t0"] = time.time()
        cpu["idle0"] = idle_ticks()
        if ramp > 0:
            # fio connects within a few ms; the CPU window starts when fio stops ramping
            timer = threading.Timer(ramp + 0.05, sample_after_ramp)
            timer.start()
    t_start = time.time()
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "fio timed out"}
    except OSError as e:
        return {"error": f"fio: {e}"}
    finally:
        if timer is not None:
            timer.cancel()
    elapsed = time.time() - t_start
    res = {"wall": elapsed}
    if server is not None:
        end = server.cpu()
        if cpu.get("start") is not None and end is not None:
            res["server_cpu"] = end - cpu["start"]
        idle1 = idle_ticks()
        if cpu.get("idle0") and idle1 and idle1[1] > cpu["idle0"][1]:
            # how much of the machine nobody used: near 0 means client and server shared out every CPU
            res["idle_pct"] = 100.0 * (idle1[0] - cpu["idle0"][0]) / (idle1[1] - cpu["idle0"][1])
        server.sample_rss()
        res["server_rss"] = server.peak_rss
    try:
        with open(out) as f:
            text = f.read()
        data = json.loads(text[text.index("{"):])
        job = data["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return {"error": "fio failed: " + r.stdout.strip()[-400:]}
    if job.get("error"):
        return {"error": f"fio job error {job['error']}: " + r.stdout.strip()[-400:]}
    total_bytes, bw, iops, p50, p99, p999 = 0, 0.0, 0.0, None, None, None
    for direction in ("read", "write"):
        x = job.get(direction, {})
        if not x or not x.get("io_bytes"):
            continue
        total_bytes += x["io_bytes"]
        bw += x["bw_bytes"]
        iops += x["iops"]
        pct = x.get("clat_ns", {}).get("percentile", {})
        if pct:
            p50 = pct.get("50.000000", 0) / 1000.0
            p99 = pct.get("99.000000", 0) / 1000.0
            p999 = pct.get("99.900000", 0) / 1000.0
    res.update({"bytes": total_bytes, "MBps": bw / 1e6, "iops": iops, "p50_us": p50, "p99_us": p99,
                "p999_us": p999})
    if "usr_cpu" in job and "sys_cpu" in job:
        # fio's own CPU, % of one core: at ~100% the client, not the server, sets the pace
        res["client_cpu_pct"] = job["usr_cpu"] + job["sys_cpu"]
    if total_bytes == 0:
        res["error"] = "no I/O done: " + r.stdout.strip()[-400:]
    if res.get("server_cpu") is not None and total_bytes:
        res["cpu_s_per_GB"] = res["server_cpu"] / (total_bytes / 1e9)
    return res


def nbd_fio_args(uri, rw, bs, iodepth, size="3G", runtime=5, ramp=1, extra=()):
    args = ["--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}", f"--iodepth={iodepth}",
            f"--size={size}", f"--runtime={runtime}", "--time_based"]
    if ramp:
        args.append(f"--ramp_time={ramp}")
    return args + list(extra)


# ---------------------------------------------------------------- machine and output


def _first_line(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "missing"


def machine():
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    cpu_model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    jh = jdk_home()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "memory": mem,
        "kernel": os.uname().release,
        "loadavg": open("/proc/loadavg").read().split()[:3],
        "fio": _first_line(["fio", "--version"]),
        "nbdkit": _first_line(["nbdkit", "--version"]),
        "nbd-server": _first_line(["nbd-server", "-V"]).replace("This is ", "").replace(" version", ""),
        "qemu-nbd": _first_line(["qemu-nbd", "--version"]),
        "java": _first_line([os.path.join(jh, "bin", "java"), "-version"]) if jh else "missing",
        "jnbd": _git_rev(),
    }


def _git_rev():
    try:
        r = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"], capture_output=True, text=True)
        return r.stdout.strip()[:100]
    except OSError:
        return "?"


def print_machine(m, out=sys.stdout):
    print(f"machine: {m['nproc']} cpus ({m['cpu']}), {m['memory']} RAM, kernel {m['kernel']}, "
          f"load {' '.join(m['loadavg'])}", file=out)
    print(f"peers: {m['fio']}, {m['nbdkit']}, {m['nbd-server']}, {m['qemu-nbd']}", file=out)
    print(f"jnbd: {m['jnbd']} on {m['java']}", file=out)


def write_results(bench, rows, meta, columns):
    """Writes bench/results/<bench>-<stamp>.json and .csv (and -latest copies). Returns the csv path."""
    try:
        os.makedirs(RESULTS, exist_ok=True)
        s = stamp()
        base = os.path.join(RESULTS, f"{bench}-{s}")
        with open(base + ".json", "w") as f:
            json.dump({"bench": bench, "time": s, "meta": meta, "rows": rows}, f, indent=2, default=str)
        with open(base + ".csv", "w") as f:
            f.write(",".join(columns) + "\n")
            for r in rows:
                f.write(",".join(_csv(r.get(c)) for c in columns) + "\n")
        for ext in (".json", ".csv"):
            shutil.copyfile(base + ext, os.path.join(RESULTS, f"{bench}-latest{ext}"))
        return base + ".csv"
    except OSError as e:
        log(f"bench: cannot write results: {e}")
        return None


def _csv(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    s = str(v)
    return '"' + s.replace('"', '""') + '"' if ("," in s or '"' in s) else s


def table(headers, rows, out=sys.stdout):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths)) + " |"
    print(line, file=out)
    print("| " + " | ".join("-" * w for w in widths) + " |", file=out)
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |", file=out)
    out.flush()


def fmt(v, spec=".0f", missing="—"):
    """v in the format spec; a number read back from a CSV or JSON file as text is formatted as a number."""
    if v is None or v == "":
        return missing
    try:
        return format(float(v) if isinstance(v, str) else v, spec)
    except (TypeError, ValueError):
        return str(v)


def fmt_iops(v):
    if v is None:
        return "—"
    return f"{v / 1000:.1f}K" if v >= 10000 else f"{v:.0f}"
