/*
 * bench/floor/floor.c: the least an NBD server can do per request on this machine, as a yardstick.
 *
 * Not a peer and not a product: one connection at a time, one export (any name), simple replies only,
 * no structured replies, no checks beyond bounds. Reads of more than 64 KiB go out by sendfile (the
 * page cache straight to the socket, as jnbd's cached mode does), smaller ones by pread + writev;
 * writes are received whole and written with pwrite. What it costs per GB is what the kernel charges
 * for moving the bytes at all, so a target that this server misses cannot be met by any server that
 * moves the same bytes the same way over the same loopback.
 *
 *   floor [-p PORT] [-b SNDBUF] [-r RCVBUF] [-l] [-t] [-s] [-f] FILE
 *     -p PORT    listen on 127.0.0.1:PORT (default 10899)
 *     -b SNDBUF  SO_SNDBUF in bytes; 0 leaves the kernel's autotuning (default 262144, jnbd's for loopback)
 *     -r RCVBUF  SO_RCVBUF in bytes (default 0: the kernel's autotuning)
 *     -l         receive large payloads with SO_RCVLOWAT raised to the rest (jnbd's way), not MSG_WAITALL
 *     -t         two threads: one receives requests and payloads, the other executes and replies, so the
 *                pwrite of one write overlaps the receive of the next (nbdkit's overlap, in its simplest form)
 *     -s         agree to structured replies when the client asks (fio's libnbd does, and nbdkit and jnbd
 *                agree): each read is then answered by one OFFSET_DATA chunk, which costs the client more
 *                to parse than a simple reply; without -s the comparison flatters small reads
 *     -f         a child process per connection (nbd-server's model), so that many clients are served at once
 *                (bench/boot's storm); children are reaped as they end, so their CPU counts in the parent's
 *
 * Built by bench/peers with `cc -O2 -pthread` when SERVERS names it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define NBDMAGIC 0x4e42444d41474943ULL
#define IHAVEOPT 0x49484156454f5054ULL
#define REPLY_MAGIC 0x3e889045565a9ULL
#define REQUEST_MAGIC 0x25609513U
#define SIMPLE_REPLY_MAGIC 0x67446698U
#define OPT_EXPORT_NAME 1
#define OPT_ABORT 2
#define OPT_INFO 6
#define OPT_GO 7
#define OPT_STRUCTURED_REPLY 8
#define STRUCTURED_REPLY_MAGIC 0x668e33efU
#define REPLY_FLAG_DONE 1
#define REPLY_TYPE_OFFSET_DATA 1
#define REPLY_TYPE_ERROR 32769
#define REP_ACK 1
#define REP_INFO 3
#define REP_ERR_UNSUP 0x80000001U
#define CMD_READ 0
#define CMD_WRITE 1
#define CMD_DISC 2
#define CMD_FLUSH 3
#define TFLAGS (1 | 4) /* HAS_FLAGS | SEND_FLUSH */
#define MAX_LEN (32u << 20)
#define SLOTS 4

static int file_fd;
static uint64_t file_size;
static int use_lowat, two_threads, offer_structured, structured;

static void die(const char *what) { perror(what); exit(1); }

static int full_send(int s, const void *p, size_t n, int flags) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(s, c, n, flags | MSG_NOSIGNAL);
        if (k < 0) { if (errno == EINTR) continue; return -1; }
        c += k; n -= (size_t) k;
    }
    return 0;
}

static int full_recv(int s, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t k = recv(s, c, n, MSG_WAITALL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k; n -= (size_t) k;
    }
    return 0;
}

/* Wakes once per payload instead of once per segment: the mark is the rest of the payload (at most 1 MiB),
 * and a non-blocking receive after poll counts everything queued. */
static int payload_recv(int s, char *p, size_t n) {
    if (!use_lowat || n < (128u << 10)) return full_recv(s, p, n);
    while (n > 0) {
        int mark = n > (1u << 20) ? 1 << 20 : (int) n;
        setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof mark);
        struct pollfd pf = { .fd = s, .events = POLLIN };
        if (poll(&pf, 1, -1) < 0 && errno != EINTR) return -1;
        ssize_t k = recv(s, p, n, MSG_DONTWAIT);
        if (k == 0) return -1;
        if (k < 0) { if (errno == EAGAIN || errno == EINTR) continue; return -1; }
        p += k; n -= (size_t) k;
    }
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    return 0;
}

static int option_reply(int s, uint32_t opt, uint32_t type, const void *data, uint32_t len) {
    char h[20];
    uint64_t m = htobe64(REPLY_MAGIC);
    uint32_t o = htobe32(opt), t = htobe32(type), l = htobe32(len);
    memcpy(h, &m, 8); memcpy(h + 8, &o, 4); memcpy(h + 12, &t, 4); memcpy(h + 16, &l, 4);
    if (full_send(s, h, 20, len ? MSG_MORE : 0)) return -1;
    return len ? full_send(s, data, len, 0) : 0;
}

/* Returns 0 when transmission starts, -1 when the client leaves. */
static int handshake(int s) {
    char hello[18];
    uint64_t a = htobe64(NBDMAGIC), b = htobe64(IHAVEOPT);
    uint16_t hf = htobe16(1 | 2); /* FIXED_NEWSTYLE | NO_ZEROES */
    memcpy(hello, &a, 8); memcpy(hello + 8, &b, 8); memcpy(hello + 16, &hf, 2);
    if (full_send(s, hello, 18, 0)) return -1;
    uint32_t cflags;
    if (full_recv(s, &cflags, 4)) return -1;
    int no_zeroes = be32toh(cflags) & 2;
    structured = 0;
    for (;;) {
        char h[16];
        if (full_recv(s, h, 16)) return -1;
        uint32_t opt, len;
        memcpy(&opt, h + 8, 4); memcpy(&len, h + 12, 4);
        opt = be32toh(opt); len = be32toh(len);
        if (len > 65536) return -1;
        char data[65536];
        if (len && full_recv(s, data, len)) return -1;
        uint64_t size = htobe64(file_size);
        uint16_t tf = htobe16(TFLAGS);
        if (opt == OPT_EXPORT_NAME) {
            char r[10 + 124] = {0};
            memcpy(r, &size, 8); memcpy(r + 8, &tf, 2);
            return full_send(s, r, no_zeroes ? 10 : sizeof r, 0);
        } else if (opt == OPT_GO || opt == OPT_INFO) {
            char info[12];
            uint16_t type = 0;
            memcpy(info, &type, 2); memcpy(info + 2, &size, 8); memcpy(info + 10, &tf, 2);
            if (option_reply(s, opt, REP_INFO, info, 12) || option_reply(s, opt, REP_ACK, NULL, 0)) return -1;
            if (opt == OPT_GO) return 0;
        } else if (opt == OPT_STRUCTURED_REPLY && offer_structured && len == 0) {
            structured = 1;
            if (option_reply(s, opt, REP_ACK, NULL, 0)) return -1;
        } else if (opt == OPT_ABORT) {
            option_reply(s, opt, REP_ACK, NULL, 0);
            return -1;
        } else if (option_reply(s, opt, REP_ERR_UNSUP, NULL, 0)) {
            return -1;
        }
    }
}

struct request {
    uint16_t type;
    uint64_t cookie, offset;
    uint32_t len;
    char *payload;
};

static int reply(int s, uint64_t cookie, uint32_t error, int more) {
    char r[16];
    uint32_t m = htobe32(SIMPLE_REPLY_MAGIC), e = htobe32(error);
    memcpy(r, &m, 4); memcpy(r + 4, &e, 4); memcpy(r + 8, &cookie, 8); /* the cookie goes back as it came */
    return full_send(s, r, 16, more ? MSG_MORE : 0);
}

/* A structured reply chunk's header: 20 bytes into h. */
static void chunk_header(char *h, uint16_t flags, uint16_t type, uint64_t cookie, uint32_t len) {
    uint32_t m = htobe32(STRUCTURED_REPLY_MAGIC), l = htobe32(len);
    uint16_t f = htobe16(flags), t = htobe16(type);
    memcpy(h, &m, 4); memcpy(h + 4, &f, 2); memcpy(h + 6, &t, 2); memcpy(h + 8, &cookie, 8); memcpy(h + 16, &l, 4);
}

/* The reply to a read, without its data: a simple reply, or the head of one OFFSET_DATA chunk (or an ERROR
 * chunk, which a read must get once structured replies are agreed). Returns its length in h. */
static size_t read_head(char *h, const struct request *q, uint32_t error) {
    if (!structured) {
        uint32_t m = htobe32(SIMPLE_REPLY_MAGIC), e = htobe32(error);
        memcpy(h, &m, 4); memcpy(h + 4, &e, 4); memcpy(h + 8, &q->cookie, 8);
        return 16;
    }
    if (error) {
        uint32_t e = htobe32(error);
        chunk_header(h, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, q->cookie, 6);
        memcpy(h + 20, &e, 4); memset(h + 24, 0, 2);
        return 26;
    }
    uint64_t o = htobe64(q->offset);
    chunk_header(h, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, q->cookie, 8 + q->len);
    memcpy(h + 20, &o, 8);
    return 28;
}

static int read_error(int s, const struct request *q, uint32_t error) {
    char h[28];
    return full_send(s, h, read_head(h, q, error), 0);
}

/* Returns -1 when the connection is to end. */
static int execute(int s, struct request *q, char *small) {
    if (q->type == CMD_DISC) return -1;
    if (q->type == CMD_FLUSH) return reply(s, q->cookie, fdatasync(file_fd) ? 5 : 0, 0);
    if (q->offset > file_size || q->len > file_size - q->offset) {
        return q->type == CMD_READ ? read_error(s, q, 22) : reply(s, q->cookie, 22, 0);
    }
    if (q->type == CMD_WRITE) {
        size_t done = 0;
        while (done < q->len) {
            ssize_t k = pwrite(file_fd, q->payload + done, q->len - done, (off_t) (q->offset + done));
            if (k <= 0) return reply(s, q->cookie, 5, 0);
            done += (size_t) k;
        }
        return reply(s, q->cookie, 0, 0);
    }
    if (q->type != CMD_READ) return reply(s, q->cookie, 22, 0);
    if (q->len <= 65536) {
        ssize_t k = pread(file_fd, small, q->len, (off_t) q->offset);
        if (k != (ssize_t) q->len) return read_error(s, q, 5);
        char r[28];
        size_t hl = read_head(r, q, 0);
        struct iovec v[2] = { { r, hl }, { small, q->len } };
        size_t want = hl + q->len;
        ssize_t w = writev(s, v, 2);
        if (w < 0) return -1;
        if ((size_t) w < want) { /* rare: the send buffer took part of it */
            size_t off = (size_t) w;
            if (off < hl) { if (full_send(s, r + off, hl - off, 0)) return -1; off = hl; }
            return full_send(s, small + (off - hl), want - off, 0);
        }
        return 0;
    }
    char r[28];
    if (full_send(s, r, read_head(r, q, 0), MSG_MORE)) return -1;
    off_t off = (off_t) q->offset;
    size_t left = q->len;
    while (left > 0) {
        ssize_t k = sendfile(s, file_fd, &off, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1; /* the header has gone: all that is left is to close */
        left -= (size_t) k;
    }
    return 0;
}

/* Reads one request (and its payload into buf); -1 at the end of the connection. */
static int receive(int s, struct request *q, char *buf) {
    char h[28];
    if (full_recv(s, h, 28)) return -1;
    uint32_t magic, len;
    uint16_t type;
    memcpy(&magic, h, 4); memcpy(&type, h + 6, 2); memcpy(&q->cookie, h + 8, 8);
    memcpy(&q->offset, h + 16, 8); memcpy(&len, h + 24, 4);
    if (be32toh(magic) != REQUEST_MAGIC) return -1;
    q->type = be16toh(type);
    q->offset = be64toh(q->offset);
    q->len = be32toh(len);
    q->payload = buf;
    if (q->type == CMD_WRITE) {
        if (q->len > MAX_LEN) return -1;
        if (payload_recv(s, buf, q->len)) return -1;
    }
    return 0;
}

/* Two-thread mode: a ring of SLOTS requests with their payload buffers between receiver and executor. */
static struct request ring[SLOTS];
static char *ring_buf[SLOTS];
static unsigned head, tail; /* head: next to fill; tail: next to execute */
static int stopping;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int conn;

static void *executor(void *arg) {
    char *small = arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (tail == head && !stopping) pthread_cond_wait(&cv, &mu);
        if (tail == head) { pthread_mutex_unlock(&mu); return NULL; }
        struct request *q = &ring[tail % SLOTS];
        pthread_mutex_unlock(&mu);
        int r = execute(conn, q, small);
        pthread_mutex_lock(&mu);
        tail++;
        if (r < 0) { stopping = 1; shutdown(conn, SHUT_RDWR); }
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static void serve(int s, char *buf, char *small) {
    if (handshake(s)) return;
    if (!two_threads) {
        struct request q;
        while (receive(s, &q, buf) == 0 && execute(s, &q, small) == 0) {}
        return;
    }
    conn = s; head = tail = 0; stopping = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, executor, small)) die("pthread_create");
    for (;;) {
        pthread_mutex_lock(&mu);
        while (head - tail == SLOTS && !stopping) pthread_cond_wait(&cv, &mu);
        int stop = stopping;
        pthread_mutex_unlock(&mu);
        if (stop) break;
        unsigned slot = head % SLOTS;
        if (receive(s, &ring[slot], ring_buf[slot])) break;
        pthread_mutex_lock(&mu);
        head++;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
}

static int fork_each;

static void reap(int sig) {
    (void) sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    errno = saved;
}

int main(int argc, char **argv) {
    int port = 10899, sndbuf = 262144, rcvbuf = 0, c;
    while ((c = getopt(argc, argv, "p:b:r:ltsf")) != -1) {
        if (c == 'p') port = atoi(optarg);
        else if (c == 'b') sndbuf = atoi(optarg);
        else if (c == 'r') rcvbuf = atoi(optarg);
        else if (c == 'l') use_lowat = 1;
        else if (c == 't') two_threads = 1;
        else if (c == 's') offer_structured = 1;
        else if (c == 'f') fork_each = 1;
        else { fprintf(stderr, "usage: floor [-p PORT] [-b SNDBUF] [-r RCVBUF] [-l] [-t] [-s] [-f] FILE\n"); return 2; }
    }
    if (optind != argc - 1) { fprintf(stderr, "usage: floor [-p PORT] [-b SNDBUF] [-r RCVBUF] [-l] [-t] [-s] [-f] FILE\n"); return 2; }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = reap, .sa_flags = SA_RESTART };
    sigaction(SIGCHLD, &sa, NULL);
    file_fd = open(argv[optind], O_RDWR);
    if (file_fd < 0) die(argv[optind]);
    struct stat st;
    if (fstat(file_fd, &st)) die("fstat");
    file_size = (uint64_t) st.st_size;

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *) &a, sizeof a) || listen(ls, 128)) die("listen");
    char *buf = aligned_alloc(4096, MAX_LEN), *small = aligned_alloc(4096, 65536);
    for (int i = 0; i < SLOTS; i++) ring_buf[i] = two_threads ? aligned_alloc(4096, MAX_LEN) : NULL;
    if (!buf || !small) die("alloc");
    fprintf(stderr, "floor: serving %s (%llu bytes) on 127.0.0.1:%d, sndbuf %d%s%s%s\n", argv[optind],
            (unsigned long long) file_size, port, sndbuf, use_lowat ? ", rcvlowat" : "",
            two_threads ? ", two threads" : "", offer_structured ? ", structured replies" : "");
    for (;;) {
        int s = accept(ls, NULL, NULL);
        if (s < 0) { if (errno == EINTR) continue; die("accept"); }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (sndbuf > 0) setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        if (rcvbuf > 0) setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        if (fork_each) {
            pid_t child = fork();
            if (child == 0) { close(ls); serve(s, buf, small); _exit(0); }
            if (child < 0) die("fork");
            close(s);
            continue;
        }
        serve(s, buf, small);
        close(s);
    }
}
