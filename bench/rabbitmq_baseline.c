/* Baseline for bench/bench_rabbitmq.sh: a bare rabbitmq-c consume loop, and
 * the fast publisher that drives it and baton (one after the other).
 *
 *   bench_rabbitmq_baseline consume PORT EXCHANGE COUNT [hold]
 *       binds an exclusive auto-delete server-named queue to the fanout
 *       EXCHANGE (what baton's private mode does), prints "ready" on stderr,
 *       then consumes COUNT messages with auto ack (no prefetch limit, like
 *       baton's private mode), writing each payload plus '\n' to stdout
 *       (stdio buffered, flushed when no message is pending), and exits.
 *       At the end prints "baseline: ..." and "cpu_us N" (its own
 *       user + system CPU, getrusage) on stderr. Gives up after 60 s
 *       without a message. With "hold" it then waits until its stdin is
 *       closed before it exits, so that its /proc/PID/stat can be read after
 *       the last message, as baton's is.
 *   bench_rabbitmq_baseline publish PORT EXCHANGE COUNT SIZE [FIRST]
 *       publishes COUNT messages of SIZE bytes (body {"seq":N} padded with
 *       spaces, message_id "b-<N>", N = FIRST .. FIRST+COUNT-1) to the
 *       existing EXCHANGE as fast as the socket takes them: no confirms,
 *       no mandatory flag, transient, frame_max 128 KiB; after login the
 *       basic.publish/header/body frames are encoded here and written in
 *       256 KiB write(2) calls (rabbitmq-c would send each message with
 *       several small sends). Ends with a synchronous passive
 *       exchange.declare (the broker has taken every frame before it
 *       answers), then prints "publisher: ..." on stderr.
 * guest/guest on 127.0.0.1, vhost "/". */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX 131072

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die_reply(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        fprintf(stderr, "%s: %s\n", what, amqp_error_string2(r.library_error));
    else
        fprintf(stderr, "%s: broker error (method 0x%08x)\n", what, (unsigned)r.reply.id);
    exit(1);
}

static amqp_connection_state_t connect_to(int port)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (!s || amqp_socket_open(s, "127.0.0.1", port) != AMQP_STATUS_OK) {
        fprintf(stderr, "connect 127.0.0.1:%d failed\n", port);
        exit(1);
    }
    die_reply(amqp_login(c, "/", 0, FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest"),
              "login");
    amqp_channel_open(c, 1);
    die_reply(amqp_get_rpc_reply(c), "channel.open");
    return c;
}

static long cpu_us_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L + ru.ru_utime.tv_usec +
           ru.ru_stime.tv_usec;
}

static int consume(int port, const char *exchange, long count, int hold)
{
    amqp_connection_state_t c = connect_to(port);
    amqp_queue_declare_ok_t *q =
        amqp_queue_declare(c, 1, amqp_empty_bytes, 0, 0, 1, 1, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(c), "queue.declare");
    amqp_bytes_t qname = amqp_bytes_malloc_dup(q->queue);
    amqp_queue_bind(c, 1, qname, amqp_cstring_bytes(exchange), amqp_empty_bytes, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(c), "queue.bind");
    amqp_basic_consume(c, 1, qname, amqp_empty_bytes, 0, 1, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(c), "basic.consume");
    fprintf(stderr, "ready %.*s\n", (int)qname.len, (const char *)qname.bytes);

    static char obuf[1 << 16];
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    long n = 0;
    double first = 0, last = 0;
    struct timeval tv = { 60, 0 };
    while (n < count) {
        amqp_envelope_t e;
        amqp_maybe_release_buffers(c);
        if (!amqp_data_in_buffer(c) && !amqp_frames_enqueued(c)) fflush(stdout);
        amqp_rpc_reply_t r = amqp_consume_message(c, &e, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            fprintf(stderr, "consume stopped after %ld messages: %s\n", n,
                    r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                        ? amqp_error_string2(r.library_error) : "broker error");
            break;
        }
        fwrite(e.message.body.bytes, 1, e.message.body.len, stdout);
        fputc('\n', stdout);
        amqp_destroy_envelope(&e);
        last = now_s();
        if (n++ == 0) first = last;
    }
    fflush(stdout);
    long cpu = cpu_us_self();
    if (n > 1)
        fprintf(stderr, "baseline: %ld messages, first->last %.3f s = %.0f msg/s\n", n,
                last - first, (double)(n - 1) / (last - first));
    fprintf(stderr, "cpu_us %ld\n", cpu);
    if (hold) {
        char tmp[256];
        while (read(0, tmp, sizeof tmp) > 0) {
        }
    }
    amqp_bytes_free(qname);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return n == count ? 0 : 1;
}

/* AMQP 0-9-1 frame encoding (big endian) */
static unsigned char *put8(unsigned char *p, unsigned v) { *p++ = (unsigned char)v; return p; }
static unsigned char *put16(unsigned char *p, unsigned v)
{
    *p++ = (unsigned char)(v >> 8);
    *p++ = (unsigned char)v;
    return p;
}
static unsigned char *put32(unsigned char *p, uint32_t v)
{
    p = put16(p, v >> 16);
    return put16(p, v & 0xffff);
}
static unsigned char *put64(unsigned char *p, uint64_t v)
{
    p = put32(p, (uint32_t)(v >> 32));
    return put32(p, (uint32_t)v);
}
static unsigned char *putstr8(unsigned char *p, const char *s, size_t n)
{
    p = put8(p, (unsigned)n);
    memcpy(p, s, n);
    return p + n;
}

/* A frame on channel 1: frame_start writes the type and channel and returns
 * where the payload goes; frame_end fills the size in and adds the end
 * octet, returning the end of the frame. */
static unsigned char *frame_start(unsigned char *f, unsigned type)
{
    return put16(put8(f, type), 1) + 4;
}
static unsigned char *frame_end(unsigned char *f, unsigned char *payload_end)
{
    put32(f + 3, (uint32_t)(payload_end - (f + 7)));
    return put8(payload_end, 0xCE);
}

static int write_all(int fd, const unsigned char *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) { /* rabbitmq-c's socket is non-blocking */
                struct pollfd pfd = { .fd = fd, .events = POLLOUT };
                if (poll(&pfd, 1, 30000) <= 0) return -1;
                continue;
            }
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int publish(int port, const char *exchange, long count, size_t size, long first)
{
    size_t exlen = strlen(exchange);
    if (exlen > 255 || size > FRAME_MAX - 8) {
        fprintf(stderr, "exchange name or SIZE too long (SIZE <= %d)\n", FRAME_MAX - 8);
        return 64;
    }
    amqp_connection_state_t c = connect_to(port);
    int fd = amqp_get_sockfd(c);
    const size_t cap = 256 * 1024, per_msg = 3 * 8 + 32 + exlen + 64 + size + 32;
    unsigned char *buf = malloc(cap + per_msg);
    char *body = malloc(size + 32);
    if (!buf || !body) return 1;
    memset(body, ' ', size + 32);
    size_t used = 0;
    double t0 = now_s();
    for (long i = first; i < first + count; i++) {
        char id[32];
        int k = snprintf(id, sizeof id, "b-%ld", i);
        int m = snprintf(body, size + 32, "{\"seq\":%ld}", i);
        body[m] = ' '; /* padding after the JSON object */
        size_t blen = size > (size_t)m ? size : (size_t)m;
        unsigned char *f = buf + used, *p;
        /* basic.publish: reserved, exchange, routing key "", no flags */
        p = frame_start(f, AMQP_FRAME_METHOD);
        p = put16(put16(p, 60), 40);
        p = put16(p, 0);
        p = putstr8(p, exchange, exlen);
        p = putstr8(p, "", 0);
        p = put8(p, 0);
        f = frame_end(f, p);
        /* content header: class 60, weight 0, body size, message_id */
        p = frame_start(f, AMQP_FRAME_HEADER);
        p = put16(put16(p, 60), 0);
        p = put64(p, blen);
        p = put16(p, AMQP_BASIC_MESSAGE_ID_FLAG);
        p = putstr8(p, id, (size_t)k);
        f = frame_end(f, p);
        /* body */
        p = frame_start(f, AMQP_FRAME_BODY);
        memcpy(p, body, blen);
        f = frame_end(f, p + blen);
        used = (size_t)(f - buf);
        if (used >= cap || i == first + count - 1) {
            if (write_all(fd, buf, used) < 0) {
                fprintf(stderr, "publish: write: %s\n", strerror(errno));
                return 1;
            }
            used = 0;
        }
    }
    double t_written = now_s() - t0;
    /* a synchronous request: answered after every frame before it */
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("fanout"), 1, 0,
                          0, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(c), "exchange.declare (passive)");
    double dt = now_s() - t0;
    fprintf(stderr,
            "publisher: %ld messages of %zu bytes in %.3f s = %.0f msg/s (written in %.3f s)\n",
            count, size, dt, (double)count / dt, t_written);
    free(body);
    free(buf);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "consume") == 0)
        return consume(atoi(argv[2]), argv[3], atol(argv[4]),
                       argc >= 6 && strcmp(argv[5], "hold") == 0);
    if (argc >= 6 && strcmp(argv[1], "publish") == 0)
        return publish(atoi(argv[2]), argv[3], atol(argv[4]), (size_t)atol(argv[5]),
                       argc >= 7 ? atol(argv[6]) : 0);
    fprintf(stderr, "usage: %s consume PORT EXCHANGE COUNT [hold]\n"
                    "       %s publish PORT EXCHANGE COUNT SIZE [FIRST]\n", argv[0], argv[0]);
    return 64;
}
