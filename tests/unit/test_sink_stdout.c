/* Unit tests: the stdout sink writing into a pipe (lines whole under
 * concurrency, partial writes on a non-blocking pipe, EPIPE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <libconfig.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "common/envelope.h"
#include "common/util.h"
#include "src/sink.h"

struct made {
    const struct sink_ops *ops;
    void *settings;
    void *sink;
};

/* The endpoint the sink instance serves: on purpose not the one the
 * envelopes name ("ep"), so a log line shows which of the two the sink used. */
#define SINK_ENDPOINT "orders"

static void make_sink(struct made *m, int fd)
{
    m->ops = sink_lookup("stdout");
    assert_non_null(m->ops);
    char text[64];
    snprintf(text, sizeof text, "fd = %d;", fd);
    config_t cfg;
    config_init(&cfg);
    assert_int_equal(config_read_string(&cfg, text), CONFIG_TRUE);
    m->settings = calloc(1, m->ops->settings_size);
    struct config_error err = {0};
    assert_int_equal(settings_parse(m->ops->settings, config_root_setting(&cfg), NULL, "sink 'out'",
                                     m->settings, &err), 0);
    config_destroy(&cfg);
    char e[256] = "";
    m->sink = m->ops->create("out", SINK_ENDPOINT, m->settings, e, sizeof e);
    assert_non_null(m->sink);
}

static void unmake_sink(struct made *m)
{
    m->ops->destroy(m->sink);
    settings_free(m->ops->settings, m->settings);
    free(m->settings);
}

#define THREADS 4
#define BATCHES 150
#define PER_BATCH 8

/* The payload of message (t, i): a marker plus filler whose size varies up
 * to 100 KB, so single lines exceed the 64 KiB pipe buffer. */
static size_t payload_size(int t, int i)
{
    return (i % 37 == 0) ? 100000 + (size_t)t : (size_t)(i * 7 + t) % 300;
}

static struct message *mk(int t, int i)
{
    size_t n = payload_size(t, i);
    char *p = malloc(n + 1);
    memset(p, 'a' + t, n);
    p[n] = '\0';
    char id[32];
    snprintf(id, sizeof id, "%d:%d", t, i);
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "ep", "test", (uint64_t)t, id, 0);
    envelope_payload(&e, p, n);
    struct message *m = envelope_finish(&e);
    envelope_free(&e);
    free(p);
    return m;
}

struct writer {
    int fd;
    int t;
    int failures;
};

static void *write_thread(void *arg)
{
    struct writer *w = arg;
    struct made m;
    make_sink(&m, w->fd);
    for (int b = 0; b < BATCHES; b++) {
        struct message *msgs[PER_BATCH];
        enum msg_outcome out[PER_BATCH];
        for (int k = 0; k < PER_BATCH; k++) msgs[k] = mk(w->t, b * PER_BATCH + k);
        unsigned long long errors = 0;
        {
            struct sink_call call_ = {.cancel = NULL};
            m.ops->send(m.sink, msgs, PER_BATCH, out, &call_);
            errors = call_.attempt_errors;
        }
        for (int k = 0; k < PER_BATCH; k++) {
            if (out[k] != MSG_DELIVERED) w->failures++;
            message_finish(msgs[k], out[k]);
        }
        if (errors) w->failures++;
    }
    unmake_sink(&m);
    return NULL;
}

struct reader {
    int fd;
    char *buf;
    size_t len, cap;
    unsigned reads;
};

static void *read_thread(void *arg)
{
    struct reader *r = arg;
    for (;;) {
        if (r->cap - r->len < 65536) {
            r->cap = r->cap * 2 + 65536;
            r->buf = realloc(r->buf, r->cap);
        }
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n == 0) break;
        if (n < 0) continue;
        r->len += (size_t)n;
        if (++r->reads % 64 == 0) usleep(1000); /* a slow reader: the pipe fills */
    }
    return NULL;
}

static void test_concurrent_lines_whole(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    /* non-blocking write end: exercises EAGAIN and partial writes */
    fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
    struct reader r = {.fd = p[0]};
    pthread_t rt, wt[THREADS];
    struct writer w[THREADS];
    pthread_create(&rt, NULL, read_thread, &r);
    int64_t t0 = clock_mono_ms();
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct writer){.fd = p[1], .t = t};
        pthread_create(&wt[t], NULL, write_thread, &w[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(wt[t], NULL);
    close(p[1]);
    pthread_join(rt, NULL);
    close(p[0]);
    int next[THREADS] = {0};
    size_t lines = 0;
    char *s = r.buf, *end = r.buf + r.len;
    while (s < end) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        assert_non_null(nl);
        /* each line must be exactly the expected envelope of (t, i) */
        int t = -1, i = -1;
        *nl = '\0'; /* look at this line only */
        char *idp = strstr(s, "\"id\":\"");
        assert_non_null(idp);
        char idbuf[32];
        snprintf(idbuf, sizeof idbuf, "%.31s", idp + 6);
        assert_int_equal(sscanf(idbuf, "%d:%d", &t, &i), 2);
        assert_true(t >= 0 && t < THREADS);
        assert_int_equal(i, next[t]); /* per-writer order kept */
        next[t]++;
        struct message *m = mk(t, i);
        /* received_at is fixed (0) so the whole line is reproducible */
        assert_int_equal((size_t)(nl - s), m->len);
        assert_memory_equal(s, m->json, m->len);
        message_finish(m, MSG_DELIVERED);
        lines++;
        s = nl + 1;
    }
    printf("%d writers x %d lines: %zu lines, %zu bytes, whole and in order, %lld ms\n", THREADS,
           BATCHES * PER_BATCH, lines, r.len, (long long)(clock_mono_ms() - t0));
    assert_int_equal(lines, THREADS * BATCHES * PER_BATCH);
    for (int t = 0; t < THREADS; t++) assert_int_equal(w[t].failures, 0);
    free(r.buf);
}

static void test_epipe_fails_messages(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]); /* nobody reads: EPIPE */
    struct made m;
    make_sink(&m, p[1]);
    struct message *msgs[3] = {mk(0, 1), mk(0, 2), mk(0, 3)};
    enum msg_outcome out[3] = {MSG_DELIVERED, MSG_DELIVERED, MSG_DELIVERED};
    unsigned long long errors = 0;
    /* the failure's log line (stderr), captured */
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    FILE *logf = tmpfile();
    assert_non_null(logf);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(logf), STDERR_FILENO) >= 0);
    {
        struct sink_call call_ = {.cancel = NULL};
        m.ops->send(m.sink, msgs, 3, out, &call_);
        errors = call_.attempt_errors;
    }
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char logs[2048] = "";
    rewind(logf);
    size_t got = fread(logs, 1, sizeof logs - 1, logf);
    logs[got] = '\0';
    fclose(logf);
    printf("log: %s", logs);
    /* named by the endpoint the sink was created for, not parsed out of
     * the envelope */
    assert_non_null(strstr(logs, "sink_stdout[" SINK_ENDPOINT "]: sink 'out': write to fd"));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i], MSG_DROPPED_SINK_FAILED);
        message_finish(msgs[i], out[i]);
    }
    assert_int_equal(errors, 1);
    char msg[256] = "";
    assert_int_equal(m.ops->check(m.sink, msg, sizeof msg), -1);
    printf("check: %s\n", msg);
    unmake_sink(&m);
    close(p[1]);
}

static void test_registry(void **state)
{
    (void)state;
    assert_non_null(sink_lookup("stdout"));
    assert_non_null(sink_lookup("http"));
    assert_null(sink_lookup("kafka"));
    assert_null(sink_lookup(NULL));
    size_t n = 0;
    for (; sink_registry[n]; n++) {
        assert_non_null(sink_registry[n]->create);
        assert_non_null(sink_registry[n]->send);
        assert_non_null(sink_registry[n]->destroy);
        assert_non_null(sink_registry[n]->settings);
    }
    assert_int_equal(n, 5); /* stdout, http, file, redis_stream, postgresql */
    assert_non_null(sink_lookup("redis_stream"));
    assert_non_null(sink_lookup("postgresql"));
}

struct fake_lease {
    int64_t end_at; /* boot ms */
};

static int64_t fake_time_left(void *arg, uint64_t epoch)
{
    const struct fake_lease *fl = arg;
    (void)epoch;
    int64_t now = clock_boot_ms();
    return fl->end_at > now ? fl->end_at - now : -1;
}

static struct message *mk_sized(int i, size_t n)
{
    char *p = malloc(n + 1);
    memset(p, 'x', n);
    p[n] = '\0';
    char id[32];
    snprintf(id, sizeof id, "s:%d", i);
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, "ep", "test", 5, id, 0);
    envelope_payload(&e, p, n);
    struct message *m = envelope_finish(&e);
    envelope_free(&e);
    free(p);
    return m;
}

/* A reader that stalls (a pipe nobody reads from): the write never blocks
 * past the lease deadline. What went out whole is delivered, the rest is
 * settled as term_ended; the descriptor the sink shares with others stays
 * blocking (its own O_NONBLOCK description). */
static void test_stalled_reader_bounded_by_the_lease(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct made m;
    make_sink(&m, p[1]);
    assert_int_equal(fcntl(p[1], F_GETFL) & O_NONBLOCK, 0);
    enum { N = 200 };
    struct message *msgs[N];
    enum msg_outcome out[N];
    for (int i = 0; i < N; i++) msgs[i] = mk_sized(i, 1000); /* 200 KB > the 64 KiB pipe */
    struct fake_lease fl = {.end_at = clock_boot_ms() + 300};
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    int64_t t0 = clock_boot_ms();
    m.ops->send(m.sink, msgs, N, out, &call);
    int64_t el = clock_boot_ms() - t0;
    int delivered = 0, ended = 0;
    for (int i = 0; i < N; i++) {
        if (out[i] == MSG_DELIVERED) delivered++;
        if (out[i] == MSG_DROPPED_TERM_ENDED) ended++;
        if (i > 0 && out[i] == MSG_DELIVERED) assert_int_equal(out[i - 1], MSG_DELIVERED);
        message_finish(msgs[i], out[i]);
    }
    printf("stalled reader, 300 ms of lease: returned after %lld ms, %d delivered, %d term_ended\n",
           (long long)el, delivered, ended);
    assert_true(el >= 290 && el < 300 + 200);
    assert_true(delivered > 0 && delivered < N);
    assert_int_equal(delivered + ended, N);
    assert_int_equal(call.attempt_errors, 0); /* not a sink failure */
    assert_int_equal(fcntl(p[1], F_GETFL) & O_NONBLOCK, 0);
    unmake_sink(&m);
    close(p[0]);
    close(p[1]);
}

/* The same stalled reader at shutdown: the cancel flag ends the wait. */
static atomic_bool cancel_flag;
static void *cancel_later(void *arg)
{
    (void)arg;
    sleep_ms_cancellable(200, NULL);
    atomic_store(&cancel_flag, true);
    return NULL;
}

static void test_stalled_reader_cancelled(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct made m;
    make_sink(&m, p[1]);
    enum { N = 200 };
    struct message *msgs[N];
    enum msg_outcome out[N];
    for (int i = 0; i < N; i++) msgs[i] = mk_sized(i, 1000);
    atomic_store(&cancel_flag, false);
    pthread_t t;
    pthread_create(&t, NULL, cancel_later, NULL);
    struct sink_call call = {.cancel = &cancel_flag}; /* unguarded: no lease */
    int64_t t0 = clock_boot_ms();
    m.ops->send(m.sink, msgs, N, out, &call);
    int64_t el = clock_boot_ms() - t0;
    pthread_join(t, NULL);
    int shut = 0;
    for (int i = 0; i < N; i++) {
        if (out[i] == MSG_DROPPED_SHUTDOWN) shut++;
        message_finish(msgs[i], out[i]);
    }
    printf("stalled reader, cancelled at 200 ms: returned after %lld ms, %d settled as shutdown\n",
           (long long)el, shut);
    assert_true(el < 200 + 200);
    assert_true(shut > 0);
    unmake_sink(&m);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as main() does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_concurrent_lines_whole),
        cmocka_unit_test(test_epipe_fails_messages),
        cmocka_unit_test(test_stalled_reader_bounded_by_the_lease),
        cmocka_unit_test(test_stalled_reader_cancelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
