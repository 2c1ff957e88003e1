/* Baseline for bench/bench_rabbitmq.sh: a bare rabbitmq-c loop, and the
 * publisher that drives both it and baton in the same run.
 *
 *   bench_rabbitmq_baseline consume PORT EXCHANGE COUNT
 *       binds an exclusive auto-delete queue to the fanout EXCHANGE (what
 *       baton's private mode does), prints "ready" on stderr, then consumes
 *       COUNT messages with auto ack, writing each payload plus '\n' to
 *       stdout (stdio buffered, flushed when no message is pending), and
 *       exits. Gives up after 60 s without a message.
 *   bench_rabbitmq_baseline publish PORT EXCHANGE COUNT SIZE
 *       declares the fanout EXCHANGE and publishes COUNT messages of SIZE
 *       bytes (message_id "b-<n>"), then waits for a round trip.
 * guest/guest on 127.0.0.1. */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    die_reply(amqp_login(c, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN, "guest",
                         "guest"),
              "login");
    amqp_channel_open(c, 1);
    die_reply(amqp_get_rpc_reply(c), "channel.open");
    return c;
}

static int consume(int port, const char *exchange, long count)
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
    fprintf(stderr, "ready\n");

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
    if (n > 1)
        fprintf(stderr, "baseline: %ld messages, first->last %.3f s = %.0f msg/s\n", n,
                last - first, (double)(n - 1) / (last - first));
    amqp_bytes_free(qname);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return n == count ? 0 : 1;
}

static int publish(int port, const char *exchange, long count, size_t size)
{
    amqp_connection_state_t c = connect_to(port);
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("fanout"), 0, 0,
                          0, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(c), "exchange.declare");
    char *body = malloc(size + 32);
    memset(body, 'x', size + 32);
    double t0 = now_s();
    for (long i = 0; i < count; i++) {
        char id[32];
        int k = snprintf(id, sizeof id, "b-%ld", i);
        int m = snprintf(body, size + 32, "{\"seq\":%ld}", i);
        body[m] = ' '; /* padding after the JSON object */
        amqp_basic_properties_t p;
        p._flags = AMQP_BASIC_MESSAGE_ID_FLAG;
        p.message_id.bytes = id;
        p.message_id.len = (size_t)k;
        amqp_bytes_t b = { size > (size_t)m ? size : (size_t)m, body };
        int rc = amqp_basic_publish(c, 1, amqp_cstring_bytes(exchange), amqp_empty_bytes, 0, 0, &p, b);
        if (rc != AMQP_STATUS_OK) {
            fprintf(stderr, "publish %ld: %s\n", i, amqp_error_string2(rc));
            return 1;
        }
    }
    /* a synchronous request flushes and confirms the connection is alive */
    amqp_exchange_declare(c, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("fanout"), 1, 0,
                          0, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(c), "exchange.declare (passive)");
    double dt = now_s() - t0;
    fprintf(stderr, "publisher: %ld messages of %zu bytes in %.3f s = %.0f msg/s\n", count, size,
            dt, (double)count / dt);
    free(body);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "consume") == 0)
        return consume(atoi(argv[2]), argv[3], atol(argv[4]));
    if (argc >= 6 && strcmp(argv[1], "publish") == 0)
        return publish(atoi(argv[2]), argv[3], atol(argv[4]), (size_t)atol(argv[5]));
    fprintf(stderr, "usage: %s consume PORT EXCHANGE COUNT\n"
                    "       %s publish PORT EXCHANGE COUNT SIZE\n", argv[0], argv[0]);
    return 64;
}
