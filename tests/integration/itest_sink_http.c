/* Integration test: the http sink against a real HTTP server (libmicrohttpd)
 * started inside the test on 127.0.0.1, port chosen by the kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <libconfig.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "common/envelope.h"
#include "common/log.h"
#include "common/util.h"
#include "src/sink.h"
#include "tests/support/free_port.h"

/* ---- the test HTTP server ---------------------------------------------- */

#define MAX_REQS 64

struct seen_req {
    char *body;
    size_t len;
    char epoch[32], id[128], endpoint[128], ctype[64], count[16], stat[64], auth[128];
    int64_t at_ms; /* clock_boot_ms() when the request arrived */
};

static struct {
    pthread_mutex_t mu;
    int fail_first;      /* the first fail_first requests get fail_status */
    unsigned fail_status;
    unsigned status;     /* afterwards */
    int delay_ms;        /* answer this much later (a slow receiver) */
    char retry_after[64]; /* a Retry-After header on failed answers; "" = none */
    int nreq;
    int connections;
    struct seen_req req[MAX_REQS];
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER};

struct upload {
    char *buf;
    size_t len, cap;
};

static void copy_hdr(struct MHD_Connection *c, const char *name, char *out, size_t len)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(out, len, "%s", v ? v : "");
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *data_size, void **con_cls)
{
    struct upload *u = *con_cls;
    if (!u) {
        *con_cls = calloc(1, sizeof *u);
        return *con_cls ? MHD_YES : MHD_NO;
    }
    if (*data_size) {
        if (u->len + *data_size + 1 > u->cap) {
            u->cap = (u->len + *data_size + 1) * 2;
            u->buf = realloc(u->buf, u->cap);
        }
        memcpy(u->buf + u->len, data, *data_size);
        u->len += *data_size;
        u->buf[u->len] = '\0';
        *data_size = 0;
        return MHD_YES;
    }
    unsigned status;
    pthread_mutex_lock(&srv.mu);
    int i = srv.nreq++;
    if (i < MAX_REQS) {
        struct seen_req *r = &srv.req[i];
        r->body = u->buf ? u->buf : calloc(1, 1);
        r->len = u->len;
        r->at_ms = clock_boot_ms();
        u->buf = NULL;
        copy_hdr(c, "X-Baton-Epoch", r->epoch, sizeof r->epoch);
        copy_hdr(c, "X-Baton-Id", r->id, sizeof r->id);
        copy_hdr(c, "X-Baton-Endpoint", r->endpoint, sizeof r->endpoint);
        copy_hdr(c, "X-Baton-Count", r->count, sizeof r->count);
        copy_hdr(c, "Content-Type", r->ctype, sizeof r->ctype);
        copy_hdr(c, "X-Static", r->stat, sizeof r->stat);
        copy_hdr(c, "Authorization", r->auth, sizeof r->auth);
    }
    status = i < srv.fail_first ? srv.fail_status : srv.status;
    int delay = srv.delay_ms;
    char retry_after[sizeof srv.retry_after];
    memcpy(retry_after, srv.retry_after, sizeof retry_after);
    pthread_mutex_unlock(&srv.mu);
    if (delay > 0) usleep((useconds_t)delay * 1000);
    static const char ok[] = "{\"ok\":true}";
    static const char bad[] = "{\"error\":\"nope\"}";
    struct MHD_Response *resp =
        status < 300 ? MHD_create_response_from_buffer(sizeof ok - 1, (void *)ok, MHD_RESPMEM_PERSISTENT)
                     : MHD_create_response_from_buffer(sizeof bad - 1, (void *)bad, MHD_RESPMEM_PERSISTENT);
    if (status >= 300 && retry_after[0]) MHD_add_response_header(resp, "Retry-After", retry_after);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct upload *u = *con_cls;
    if (u) {
        free(u->buf);
        free(u);
    }
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        pthread_mutex_lock(&srv.mu);
        srv.connections++;
        pthread_mutex_unlock(&srv.mu);
    }
}

static struct MHD_Daemon *daemon_h;
static unsigned port;

static void server_reset(int fail_first, unsigned fail_status, unsigned status)
{
    pthread_mutex_lock(&srv.mu);
    for (int i = 0; i < srv.nreq && i < MAX_REQS; i++) free(srv.req[i].body);
    memset(srv.req, 0, sizeof srv.req);
    srv.nreq = 0;
    srv.connections = 0;
    srv.fail_first = fail_first;
    srv.fail_status = fail_status;
    srv.status = status;
    srv.delay_ms = 0;
    srv.retry_after[0] = '\0';
    pthread_mutex_unlock(&srv.mu);
}

static int server_start(void **state)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    daemon_h = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                handler, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                                MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!daemon_h) return -1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon_h, MHD_DAEMON_INFO_BIND_PORT);
    if (!info || info->port == 0) return -1;
    port = info->port;
    printf("test HTTP server on 127.0.0.1:%u\n", port);
    setenv("BATON_TEST_TOKEN", "Bearer s3cret", 1);
    return 0;
}

static int server_stop(void **state)
{
    if (daemon_h) MHD_stop_daemon(daemon_h);
    server_reset(0, 0, 200);
    return 0;
}

/* ---- helpers ------------------------------------------------------------ */

/* Parses a sink group from libconfig text exactly as the config loader does:
 * table defaults, validation, then create. Returns the sink or NULL (err). */
struct made {
    const char *endpoint; /* the endpoint the sink is created for (NULL: none) */
    const struct sink_ops *ops;
    void *settings;
    void *sink;
};

/* When set, this variable is unset between validate and create (a secret
 * that disappears before start). */
static const char *unset_before_create;

static int make_sink(struct made *m, const char *cfg_text, char *err, size_t errlen)
{
    m->ops = sink_lookup("http");
    assert_non_null(m->ops);
    config_t cfg;
    config_init(&cfg);
    if (config_read_string(&cfg, cfg_text) != CONFIG_TRUE)
        fail_msg("bad test config: %s line %d", config_error_text(&cfg), config_error_line(&cfg));
    m->settings = calloc(1, m->ops->settings_size);
    struct config_error cerr = {0};
    int rc = settings_parse(m->ops->settings, config_root_setting(&cfg), NULL, "sink 'h'",
                            m->settings, &cerr);
    config_destroy(&cfg);
    if (rc != 0) {
        config_error_format(&cerr, err, errlen);
        return -1;
    }
    if (m->ops->validate && m->ops->validate(m->settings, err, errlen) != 0) return -1;
    if (unset_before_create) unsetenv(unset_before_create);
    m->sink = m->ops->create("h", m->endpoint, m->settings, err, errlen);
    return m->sink ? 0 : -1;
}

static void unmake_sink(struct made *m)
{
    if (m->sink) m->ops->destroy(m->sink);
    settings_free(m->ops->settings, m->settings);
    free(m->settings);
}

static struct message *mk_msg(const char *endpoint, uint64_t epoch, const char *id, const char *payload)
{
    struct envelope e;
    envelope_init(&e);
    envelope_begin(&e, endpoint, "test", epoch, id, clock_wall_ms());
    envelope_payload(&e, payload, strlen(payload));
    struct message *m = envelope_finish(&e);
    envelope_free(&e);
    return m;
}

static void url_cfg(char *buf, size_t len, const char *extra)
{
    snprintf(buf, len, "url = \"http://127.0.0.1:%u/ingest\";\n%s", port, extra);
}

/* ---- tests -------------------------------------------------------------- */

static void test_retries_then_delivery(void **state)
{
    const int K = 3;
    server_reset(K, 503, 200);
    char cfg[1024], err[512] = "";
    url_cfg(cfg, sizeof cfg,
            "retries = 5; backoff_ms = 20; backoff_max_ms = 200;\n"
            "headers = [ \"X-Static: yes\" ];\n"
            "headers_env = [ \"Authorization=BATON_TEST_TOKEN\" ];\n");
    struct made m = {.endpoint = "orders"};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("orders", 42, "m-1", "hello \"world\"");
    enum msg_outcome out = MSG_DROPPED_SINK_FAILED;
    unsigned long long errors = 0;
    atomic_bool cancel = false;
    int64_t t0 = clock_mono_ms();
    {
        struct sink_call call_ = {.cancel = &cancel};
        m.ops->send(m.sink, &msg, 1, &out, &call_);
        errors = call_.attempt_errors;
    }
    int64_t el = clock_mono_ms() - t0;
    printf("%d x 503 then 200: delivered after %lld ms, attempt_errors=%llu, requests=%d, "
           "connections=%d\n", K, (long long)el, errors, srv.nreq, srv.connections);
    assert_int_equal(out, MSG_DELIVERED);
    assert_int_equal(errors, (unsigned long long)K);
    pthread_mutex_lock(&srv.mu);
    assert_int_equal(srv.nreq, K + 1);
    for (int i = 0; i <= K; i++) {
        struct seen_req *r = &srv.req[i];
        assert_int_equal(r->len, msg->len);
        assert_memory_equal(r->body, msg->json, msg->len);
        assert_string_equal(r->epoch, "42");
        assert_string_equal(r->id, "m-1");
        assert_string_equal(r->endpoint, "orders");
        assert_string_equal(r->ctype, "application/json");
        assert_string_equal(r->stat, "yes");
        assert_string_equal(r->auth, "Bearer s3cret");
    }
    pthread_mutex_unlock(&srv.mu);
    /* backoff: at least the minimum jittered waits (10 + 20 + 40 ms) */
    assert_true(el >= 70);
    assert_true(el < 10000);
    message_finish(msg, out);

    /* keep-alive: more messages over the same connection; a message whose
     * source gives no id carries the envelope's generated one */
    server_reset(0, 0, 200);
    struct message *msgs[4];
    enum msg_outcome outs[4];
    for (int i = 0; i < 4; i++) msgs[i] = mk_msg("orders", 7, NULL, "x");
    {
        struct sink_call call_ = {.cancel = &cancel};
        m.ops->send(m.sink, msgs, 4, outs, &call_);
        errors = call_.attempt_errors;
    }
    printf("4 messages, batch_max=1: requests=%d over %d new connection(s)\n", srv.nreq,
           srv.connections);
    assert_int_equal(errors, 0);
    assert_int_equal(srv.nreq, 4);
    assert_int_equal(srv.connections, 0); /* the kept-alive connection was reused */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(outs[i], MSG_DELIVERED);
        assert_string_equal(srv.req[i].id, msgs[i]->id);
        assert_int_equal(srv.req[i].id[0], 'g');
        assert_string_equal(srv.req[i].epoch, "7");
        message_finish(msgs[i], outs[i]);
    }
    assert_int_equal(m.ops->check(m.sink, err, sizeof err), 0);
    unmake_sink(&m);
}

static void test_429_retried(void **state)
{
    server_reset(2, 429, 201);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "retries = 2; backoff_ms = 10; backoff_max_ms = 50;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 1, "a", "p");
    enum msg_outcome out;
    unsigned long long errors = 0;
    {
        struct sink_call call_ = {.cancel = NULL};
        m.ops->send(m.sink, &msg, 1, &out, &call_);
        errors = call_.attempt_errors;
    }
    assert_int_equal(out, MSG_DELIVERED);
    assert_int_equal(errors, 2);
    assert_int_equal(srv.nreq, 3);
    message_finish(msg, out);
    /* 3 failures with retries = 2: exhausted */
    server_reset(3, 500, 200);
    msg = mk_msg("e", 1, "b", "p");
    {
        struct sink_call call_ = {.cancel = NULL};
        m.ops->send(m.sink, &msg, 1, &out, &call_);
        errors = call_.attempt_errors;
    }
    assert_int_equal(out, MSG_DROPPED_SINK_FAILED);
    assert_int_equal(errors, 3);
    assert_int_equal(srv.nreq, 3);
    message_finish(msg, out);
    unmake_sink(&m);
}

static void test_4xx_not_retried(void **state)
{
    server_reset(0, 0, 400);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "retries = 5; backoff_ms = 200;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msgs[2] = {mk_msg("e", 3, "bad-1", "a"), mk_msg("e", 3, "bad-2", "b")};
    enum msg_outcome outs[2] = {MSG_DELIVERED, MSG_DELIVERED};
    unsigned long long errors = 0;
    int64_t t0 = clock_mono_ms();
    {
        struct sink_call call_ = {.cancel = NULL};
        m.ops->send(m.sink, msgs, 2, outs, &call_);
        errors = call_.attempt_errors;
    }
    int64_t el = clock_mono_ms() - t0;
    printf("400: both failed at once in %lld ms, requests=%d\n", (long long)el, srv.nreq);
    assert_int_equal(outs[0], MSG_DROPPED_SINK_FAILED);
    assert_int_equal(outs[1], MSG_DROPPED_SINK_FAILED);
    assert_int_equal(errors, 2);
    assert_int_equal(srv.nreq, 2); /* one attempt each */
    assert_true(el < 200);         /* no backoff wait happened */
    for (int i = 0; i < 2; i++) message_finish(msgs[i], outs[i]);
    unmake_sink(&m);
}

static void test_batch_ndjson(void **state)
{
    server_reset(1, 502, 200);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "batch_max = 3; backoff_ms = 10;\n");
    struct made m = {.endpoint = "batched"};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msgs[5];
    enum msg_outcome outs[5];
    char id[16], pl[32];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "b-%d", i);
        snprintf(pl, sizeof pl, "line %d\n", i); /* an embedded newline stays escaped */
        msgs[i] = mk_msg("batched", (uint64_t)10 + (uint64_t)i, id, pl);
    }
    unsigned long long errors = 0;
    {
        struct sink_call call_ = {.cancel = NULL};
        m.ops->send(m.sink, msgs, 5, outs, &call_);
        errors = call_.attempt_errors;
    }
    assert_int_equal(errors, 1);    /* the first batch's first attempt */
    assert_int_equal(srv.nreq, 3);  /* failed batch 1, batch 1 again, batch 2 */
    const int lines_per_req[3][2] = {{0, 3}, {0, 3}, {3, 5}};
    for (int r = 0; r < 3; r++) {
        struct seen_req *q = &srv.req[r];
        assert_string_equal(q->ctype, "application/x-ndjson");
        assert_string_equal(q->endpoint, "batched");
        int from = lines_per_req[r][0], to = lines_per_req[r][1];
        char count[16];
        snprintf(count, sizeof count, "%d", to - from);
        assert_string_equal(q->count, count);
        snprintf(id, sizeof id, "b-%d", from);
        assert_string_equal(q->id, id);
        char epoch[24];
        snprintf(epoch, sizeof epoch, "%d", 10 + to - 1); /* highest in the batch */
        assert_string_equal(q->epoch, epoch);
        /* body: exactly the envelopes, one per line */
        const char *p = q->body;
        for (int i = from; i < to; i++) {
            const char *nl = strchr(p, '\n');
            assert_non_null(nl);
            assert_int_equal((size_t)(nl - p), msgs[i]->len);
            assert_memory_equal(p, msgs[i]->json, msgs[i]->len);
            p = nl + 1;
        }
        assert_int_equal(*p, '\0');
    }
    for (int i = 0; i < 5; i++) {
        assert_int_equal(outs[i], MSG_DELIVERED);
        message_finish(msgs[i], outs[i]);
    }
    unmake_sink(&m);
}

static unsigned closed_port(void)
{
    int p = test_free_port(); /* nothing listens there */
    assert_true(p > 0);
    return (unsigned)p;
}

static void test_unreachable(void **state)
{
    char cfg[512], err[512] = "";
    snprintf(cfg, sizeof cfg,
             "url = \"http://127.0.0.1:%u/\"; retries = 3; backoff_ms = 20; backoff_max_ms = 100;"
             " connect_timeout_ms = 500; timeout_ms = 1000;\n",
             closed_port());
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 0, "lost-1", "p");
    enum msg_outcome out = MSG_DELIVERED;
    unsigned long long errors = 0;
    int64_t t0 = clock_mono_ms();
    {
        struct sink_call call_ = {.cancel = NULL};
        m.ops->send(m.sink, &msg, 1, &out, &call_);
        errors = call_.attempt_errors;
    }
    int64_t el = clock_mono_ms() - t0;
    printf("unreachable: failed after %llu attempts in %lld ms\n", errors, (long long)el);
    assert_int_equal(out, MSG_DROPPED_SINK_FAILED);
    assert_int_equal(errors, 4);
    assert_true(el >= 10 + 20 + 40);
    assert_true(el < 5000);
    message_finish(msg, out);
    err[0] = '\0';
    assert_int_equal(m.ops->check(m.sink, err, sizeof err), -1);
    printf("check: %s\n", err);
    assert_non_null(strstr(err, "unreachable"));
    unmake_sink(&m);
}

static atomic_bool cancel_flag;
static void *cancel_later(void *arg)
{
    sleep_ms_cancellable(300, NULL);
    atomic_store(&cancel_flag, true);
    return NULL;
}

static void test_cancel_stops_retries(void **state)
{
    server_reset(0, 0, 503);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "retries = 1000; backoff_ms = 200; backoff_max_ms = 2000;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 0, "c-1", "p");
    enum msg_outcome out = MSG_DELIVERED;
    unsigned long long errors = 0;
    atomic_store(&cancel_flag, false);
    pthread_t t;
    pthread_create(&t, NULL, cancel_later, NULL);
    int64_t t0 = clock_mono_ms();
    {
        struct sink_call call_ = {.cancel = &cancel_flag};
        m.ops->send(m.sink, &msg, 1, &out, &call_);
        errors = call_.attempt_errors;
    }
    int64_t el = clock_mono_ms() - t0;
    pthread_join(t, NULL);
    printf("cancel after 300 ms: send returned after %lld ms, %llu failed attempts\n",
           (long long)el, errors);
    assert_int_equal(out, MSG_DROPPED_SHUTDOWN);
    assert_true(errors >= 1);
    assert_true(el < 1500);
    message_finish(msg, out);
    unmake_sink(&m);
}

static void test_create_errors(void **state)
{
    char cfg[512], err[512];
    struct made m = {0};
    unsetenv("BATON_NO_SUCH_VAR");
    url_cfg(cfg, sizeof cfg, "headers_env = [ \"X-Token=BATON_NO_SUCH_VAR\" ];\n");
    err[0] = '\0';
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), -1);
    printf("missing env: %s\n", err);
    assert_non_null(strstr(err, "BATON_NO_SUCH_VAR"));
    unmake_sink(&m);
    /* set at validation, gone at create: create fails naming it */
    setenv("BATON_GONE_VAR", "x", 1);
    unset_before_create = "BATON_GONE_VAR";
    memset(&m, 0, sizeof m);
    url_cfg(cfg, sizeof cfg, "headers_env = [ \"X-Token=BATON_GONE_VAR\" ];\n");
    err[0] = '\0';
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), -1);
    unset_before_create = NULL;
    printf("env gone at create: %s\n", err);
    assert_non_null(strstr(err, "BATON_GONE_VAR"));
    assert_null(m.sink);
    unmake_sink(&m);

    static const char *const bad[] = {
        "url = \"ftp://127.0.0.1/\";",
        "url = \"http:///x\";",
        "url = \"http://127.0.0.1/\"; headers = [ \"NoColon\" ];",
        "url = \"http://127.0.0.1/\"; headers = [ \"X-Baton-Id: forged\" ];",
        "url = \"http://127.0.0.1/\"; headers_env = [ \"X-A\" ];",
        "url = \"http://127.0.0.1/\"; backoff_ms = 500; backoff_max_ms = 100;",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&m, 0, sizeof m);
        err[0] = '\0';
        assert_int_equal(make_sink(&m, bad[i], err, sizeof err), -1);
        printf("rejected [%s]: %s\n", bad[i], err);
        assert_true(err[0] != '\0');
        unmake_sink(&m);
    }
    /* missing url: the table's required check */
    memset(&m, 0, sizeof m);
    err[0] = '\0';
    assert_int_equal(make_sink(&m, "retries = 1;", err, sizeof err), -1);
    assert_non_null(strstr(err, "url"));
    unmake_sink(&m);
}

static void test_large_message(void **state)
{
    server_reset(0, 0, 200);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    size_t n = (size_t)4 << 20;
    char *big = malloc(n + 1);
    memset(big, 'z', n);
    big[n] = '\0';
    struct message *msg = mk_msg("e", 0, "big", big);
    free(big);
    enum msg_outcome out;
    int64_t t0 = clock_mono_ms();
    struct sink_call call = {.cancel = NULL};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    printf("4 MiB message posted in %lld ms\n", (long long)(clock_mono_ms() - t0));
    assert_int_equal(call.attempt_errors, 0);
    assert_int_equal(out, MSG_DELIVERED);
    assert_int_equal(srv.nreq, 1);
    assert_int_equal(srv.req[0].len, msg->len);
    assert_memory_equal(srv.req[0].body, msg->json, msg->len);
    message_finish(msg, out);
    unmake_sink(&m);
}

/* ---- lease-bounded delivery: a fake lease for the sink's time_left ---- */

struct fake_lease {
    atomic_llong end_at;       /* boot ms at which the term ends (0 = never) */
    atomic_llong unsure_until; /* boot ms until which it is being verified */
    atomic_int end_after_reqs; /* the term ends once the server saw this many (0 = off) */
    atomic_int asked;
};

static int64_t fake_time_left(void *arg, uint64_t epoch)
{
    struct fake_lease *fl = arg;
    atomic_fetch_add(&fl->asked, 1);
    int64_t now = clock_boot_ms();
    int after = atomic_load(&fl->end_after_reqs);
    if (after > 0) {
        pthread_mutex_lock(&srv.mu);
        int n = srv.nreq;
        pthread_mutex_unlock(&srv.mu);
        if (n >= after) return -1;
    }
    if (now < atomic_load(&fl->unsure_until)) return 0;
    int64_t end = atomic_load(&fl->end_at);
    if (end == 0) return 60000;
    return end > now ? end - now : -1;
}

/* The term ends during the retry back-off of a failing receiver: the sink
 * stops at the deadline (term_ended), and no request reaches the receiver
 * after it. */
static void test_term_ends_during_backoff(void **state)
{
    server_reset(1000, 503, 503);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "retries = 1000; backoff_ms = 150; backoff_max_ms = 400;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 7, "t-1", "p");
    enum msg_outcome out = MSG_DELIVERED;
    struct fake_lease fl = {0};
    int64_t t0 = clock_boot_ms();
    atomic_store(&fl.end_at, t0 + 600);
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    int64_t el = clock_boot_ms() - t0;
    pthread_mutex_lock(&srv.mu);
    int n = srv.nreq;
    int64_t last = n ? srv.req[n - 1].at_ms : 0;
    pthread_mutex_unlock(&srv.mu);
    printf("term ends at 600 ms during back-off: returned after %lld ms, %d requests, last at %lld ms\n",
           (long long)el, n, (long long)(last - t0));
    assert_int_equal(out, MSG_DROPPED_TERM_ENDED);
    assert_true(n >= 2);
    assert_true(last - t0 < 600);   /* nothing after the deadline */
    assert_true(el >= 590 && el < 600 + 200);
    message_finish(msg, out);
    unmake_sink(&m);
}

/* A slow receiver (2 s per request) and a term that ends 300 ms in: the
 * request in flight is aborted when the term ends, not after the
 * configured 5 s timeout. */
static void test_slow_request_aborted_when_the_term_ends(void **state)
{
    server_reset(0, 0, 200);
    pthread_mutex_lock(&srv.mu);
    srv.delay_ms = 2000;
    pthread_mutex_unlock(&srv.mu);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "timeout_ms = 5000; retries = 5;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 7, "t-2", "p");
    enum msg_outcome out = MSG_DELIVERED;
    struct fake_lease fl = {0};
    int64_t t0 = clock_boot_ms();
    atomic_store(&fl.end_at, t0 + 300);
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    int64_t el = clock_boot_ms() - t0;
    printf("slow receiver, term ends at 300 ms: returned after %lld ms (outcome %s)\n", (long long)el,
           msg_outcome_name(out));
    assert_int_equal(out, MSG_DROPPED_TERM_ENDED);
    assert_true(el < 300 + 300);
    message_finish(msg, out);
    unmake_sink(&m);
    server_reset(0, 0, 200); /* delay off */
}

/* Renews the fake lease: the deadline stays 300 ms ahead, until stopped. */
static atomic_bool renewer_stop;
static void *renewer(void *arg)
{
    struct fake_lease *fl = arg;
    while (!atomic_load(&renewer_stop)) {
        atomic_store(&fl->end_at, clock_boot_ms() + 300);
        usleep(100 * 1000);
    }
    return NULL;
}

/* The same slow receiver (1 s per request) under a lease that keeps being
 * renewed (never more than 300 ms ahead): the request completes -- the
 * lease bounds a request by the term's end, not by the time left when it
 * was sent. */
static void test_slow_request_completes_while_renewed(void **state)
{
    server_reset(0, 0, 200);
    pthread_mutex_lock(&srv.mu);
    srv.delay_ms = 1000;
    pthread_mutex_unlock(&srv.mu);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "timeout_ms = 5000; retries = 0;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 7, "t-4", "p");
    enum msg_outcome out = MSG_DROPPED_SINK_FAILED;
    struct fake_lease fl = {0};
    atomic_store(&fl.end_at, clock_boot_ms() + 300);
    atomic_store(&renewer_stop, false);
    pthread_t t;
    pthread_create(&t, NULL, renewer, &fl);
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    int64_t t0 = clock_boot_ms();
    m.ops->send(m.sink, &msg, 1, &out, &call);
    int64_t el = clock_boot_ms() - t0;
    atomic_store(&renewer_stop, true);
    pthread_join(t, NULL);
    printf("slow receiver (1 s) under a renewed 300 ms lease: %s after %lld ms\n", msg_outcome_name(out),
           (long long)el);
    assert_int_equal(out, MSG_DELIVERED);
    assert_true(el >= 1000);
    message_finish(msg, out);
    unmake_sink(&m);
    server_reset(0, 0, 200);
}

/* While the lease is being verified nothing is sent; once verified, it is. */
static void test_unsure_lease_holds_then_delivers(void **state)
{
    server_reset(0, 0, 200);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "retries = 2;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 7, "t-3", "p");
    enum msg_outcome out = MSG_DROPPED_SINK_FAILED;
    struct fake_lease fl = {0};
    int64_t t0 = clock_boot_ms();
    atomic_store(&fl.unsure_until, t0 + 200);
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    pthread_mutex_lock(&srv.mu);
    int n = srv.nreq;
    int64_t at = n ? srv.req[0].at_ms : 0;
    pthread_mutex_unlock(&srv.mu);
    assert_int_equal(out, MSG_DELIVERED);
    assert_int_equal(n, 1);
    assert_true(at - t0 >= 200);
    message_finish(msg, out);
    unmake_sink(&m);
}

/* The term ends after the second request of a run of five: the rest are
 * settled as term_ended and never sent (the check runs before every request,
 * not once per batch). */
static void test_term_checked_before_every_request(void **state)
{
    server_reset(0, 0, 200);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "retries = 2;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msgs[5];
    enum msg_outcome outs[5];
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "r-%d", i);
        msgs[i] = mk_msg("e", 9, id, "p");
    }
    struct fake_lease fl = {0};
    atomic_store(&fl.end_after_reqs, 2);
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    m.ops->send(m.sink, msgs, 5, outs, &call);
    pthread_mutex_lock(&srv.mu);
    int n = srv.nreq;
    pthread_mutex_unlock(&srv.mu);
    assert_int_equal(n, 2);
    /* the term ends when the server has seen the second request: its answer
     * may come before the sink next asks the term (delivered) or after
     * (aborted, term_ended); never a third request */
    for (int i = 0; i < 5; i++) {
        if (i == 1)
            assert_true(outs[i] == MSG_DELIVERED || outs[i] == MSG_DROPPED_TERM_ENDED);
        else
            assert_int_equal(outs[i], i < 1 ? MSG_DELIVERED : MSG_DROPPED_TERM_ENDED);
        message_finish(msgs[i], outs[i]);
    }
    unmake_sink(&m);
}

/* ---- issue 37: what each answer means (docs/receiver.md) ---- */

struct fenced_seen {
    int calls;
    uint64_t epoch;
};

static void on_fenced_cb(void *arg, uint64_t epoch, const char *what)
{
    struct fenced_seen *f = arg;
    (void)what;
    f->calls++;
    f->epoch = epoch;
}

/* A 409 is "fenced": never retried, the term is reported ended at once. */
static void test_409_fenced_not_retried(void **state)
{
    server_reset(0, 0, 409);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "backoff_ms = 10; backoff_max_ms = 20;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 11, "f-1", "p");
    enum msg_outcome out = MSG_DELIVERED;
    struct fenced_seen seen = {0};
    struct sink_call call = {.fenced = on_fenced_cb, .arg = &seen};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    assert_int_equal(out, MSG_DROPPED_TERM_ENDED);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.epoch, 11);
    assert_int_equal(srv.nreq, 1);
    assert_null(msg->failure); /* not a dead letter: the term ended */
    message_finish(msg, out);
    unmake_sink(&m);
}

/* A 400 is rejected at once; the message carries the status and the
 * answer's body for the dead-letter envelope. */
static void test_rejected_records_the_answer(void **state)
{
    server_reset(0, 0, 400);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 3, "r-1", "p");
    enum msg_outcome out = MSG_DELIVERED;
    struct sink_call call = {0};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    assert_int_equal(out, MSG_DROPPED_SINK_FAILED);
    assert_int_equal(srv.nreq, 1);
    assert_non_null(msg->failure);
    assert_true(msg->failure->rejected);
    assert_int_equal(msg->failure->status, 400);
    assert_int_equal(msg->failure->body_len, strlen("{\"error\":\"nope\"}"));
    assert_memory_equal(msg->failure->body, "{\"error\":\"nope\"}", msg->failure->body_len);
    message_finish(msg, out);
    unmake_sink(&m);
}

/* 408 and 425 are retried like 5xx. */
static void test_408_425_retried(void **state)
{
    static const unsigned codes[] = {408, 425};
    for (size_t c = 0; c < 2; c++) {
        server_reset(2, codes[c], 200);
        char cfg[512], err[512] = "";
        url_cfg(cfg, sizeof cfg, "backoff_ms = 10; backoff_max_ms = 20;\n");
        struct made m = {0};
        assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
        struct message *msg = mk_msg("e", 3, "t-1", "p");
        enum msg_outcome out = MSG_DROPPED_SINK_FAILED;
        struct sink_call call = {0};
        m.ops->send(m.sink, &msg, 1, &out, &call);
        assert_int_equal(out, MSG_DELIVERED);
        assert_int_equal(srv.nreq, 3);
        message_finish(msg, out);
        unmake_sink(&m);
    }
}

/* A 429 with Retry-After: 1 waits a second (not the 10 ms back-off, and
 * not capped at backoff_max_ms = 50). */
static void test_retry_after_waits(void **state)
{
    server_reset(1, 429, 200);
    pthread_mutex_lock(&srv.mu);
    snprintf(srv.retry_after, sizeof srv.retry_after, "1");
    pthread_mutex_unlock(&srv.mu);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "backoff_ms = 10; backoff_max_ms = 50;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 3, "ra-1", "p");
    enum msg_outcome out = MSG_DROPPED_SINK_FAILED;
    struct sink_call call = {0};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    assert_int_equal(out, MSG_DELIVERED);
    assert_int_equal(srv.nreq, 2);
    int64_t gap = srv.req[1].at_ms - srv.req[0].at_ms;
    printf("429 with Retry-After: 1, next request %lld ms later\n", (long long)gap);
    assert_true(gap >= 950);
    message_finish(msg, out);
    unmake_sink(&m);
}

/* Retry-After as an HTTP date (2 s ahead; whole seconds, so the wait is
 * 1 to 2 s). */
static void test_retry_after_http_date(void **state)
{
    server_reset(1, 503, 200);
    time_t at = time(NULL) + 2;
    struct tm tm;
    gmtime_r(&at, &tm);
    pthread_mutex_lock(&srv.mu);
    strftime(srv.retry_after, sizeof srv.retry_after, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    pthread_mutex_unlock(&srv.mu);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "backoff_ms = 10; backoff_max_ms = 50;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 3, "rd-1", "p");
    enum msg_outcome out = MSG_DROPPED_SINK_FAILED;
    struct sink_call call = {0};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    assert_int_equal(out, MSG_DELIVERED);
    assert_int_equal(srv.nreq, 2);
    int64_t gap = srv.req[1].at_ms - srv.req[0].at_ms;
    printf("503 with Retry-After: %s, next request %lld ms later\n", srv.retry_after, (long long)gap);
    assert_true(gap >= 900);
    message_finish(msg, out);
    unmake_sink(&m);
}

/* The default (retries = "while_leading"): a receiver answering 503 is
 * retried until the term ends, far past the old 5 retries. */
static void test_retries_while_leading(void **state)
{
    server_reset(0, 0, 503);
    char cfg[512], err[512] = "";
    url_cfg(cfg, sizeof cfg, "backoff_ms = 5; backoff_max_ms = 20;\n");
    struct made m = {0};
    assert_int_equal(make_sink(&m, cfg, err, sizeof err), 0);
    struct message *msg = mk_msg("e", 3, "wl-1", "p");
    enum msg_outcome out = MSG_DELIVERED;
    struct fake_lease fl = {0};
    atomic_store(&fl.end_at, clock_boot_ms() + 800);
    struct sink_call call = {.time_left = fake_time_left, .arg = &fl};
    m.ops->send(m.sink, &msg, 1, &out, &call);
    printf("503 while leading for 800 ms: %d requests, outcome %s\n", srv.nreq, msg_outcome_name(out));
    assert_int_equal(out, MSG_DROPPED_TERM_ENDED);
    assert_true(srv.nreq > 10);
    message_finish(msg, out);
    unmake_sink(&m);
}

int main(void)
{
    log_set_level(LOG_INFO);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retries_then_delivery),
        cmocka_unit_test(test_429_retried),
        cmocka_unit_test(test_4xx_not_retried),
        cmocka_unit_test(test_batch_ndjson),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_cancel_stops_retries),
        cmocka_unit_test(test_term_ends_during_backoff),
        cmocka_unit_test(test_slow_request_aborted_when_the_term_ends),
        cmocka_unit_test(test_slow_request_completes_while_renewed),
        cmocka_unit_test(test_unsure_lease_holds_then_delivers),
        cmocka_unit_test(test_term_checked_before_every_request),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_large_message),
        cmocka_unit_test(test_409_fenced_not_retried),
        cmocka_unit_test(test_rejected_records_the_answer),
        cmocka_unit_test(test_408_425_retried),
        cmocka_unit_test(test_retry_after_waits),
        cmocka_unit_test(test_retry_after_http_date),
        cmocka_unit_test(test_retries_while_leading),
    };
    return cmocka_run_group_tests(tests, server_start, server_stop);
}
