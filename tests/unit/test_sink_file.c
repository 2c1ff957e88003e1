/* Unit tests: the file sink (lines appended whole, two instances sharing a
 * file from two threads, rotation, reopen after SIGHUP, an ended term,
 * validation, and a write that fails half way: no torn line, retried). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <libconfig.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/message.h"
#include "common/util.h"
#include "src/sink.h"

struct made {
    const struct sink_ops *ops;
    void *settings;
    void *sink;
};

static char tmpdir[256];
static char path[512];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/baton-sink-file-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(path, sizeof path, "%s/out.jsonl", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Parses text (a sink group's body) into settings; 0, or -1 with the
 * validate message in msg. */
static int parse(struct made *m, const char *text, char *msg, size_t msglen)
{
    m->ops = sink_lookup("file");
    assert_non_null(m->ops);
    m->sink = NULL;
    config_t cfg;
    config_init(&cfg);
    assert_int_equal(config_read_string(&cfg, text), CONFIG_TRUE);
    m->settings = calloc(1, m->ops->settings_size);
    struct config_error err = {0};
    int rc = settings_parse(m->ops->settings, config_root_setting(&cfg), NULL, "sink 'out'",
                            m->settings, &err);
    config_destroy(&cfg);
    assert_int_equal(rc, 0);
    return m->ops->validate(m->settings, msg, msglen);
}

static void make_sink(struct made *m, const char *extra)
{
    char text[1024], msg[400] = "";
    snprintf(text, sizeof text, "path = \"%s\"; %s", path, extra ? extra : "");
    assert_int_equal(parse(m, text, msg, sizeof msg), 0);
    char e[256] = "";
    m->sink = m->ops->create("out", "orders", m->settings, e, sizeof e);
    assert_non_null(m->sink);
}

static void unmake_sink(struct made *m)
{
    if (m->sink) m->ops->destroy(m->sink);
    settings_free(m->ops->settings, m->settings);
    free(m->settings);
}

static struct message *mk(int t, int i, size_t pad)
{
    char *buf = malloc(pad + 64);
    int n = snprintf(buf, pad + 64, "{\"t\":%d,\"i\":%d,\"p\":\"", t, i);
    memset(buf + n, 'a' + (i % 26), pad);
    n += (int)pad;
    n += snprintf(buf + n, 8, "\"}");
    struct message *m = message_new(buf, (size_t)n);
    free(buf);
    return m;
}

/* Sends lines (t, from..to) in one call; returns the attempt errors. */
static unsigned long long send_range(struct made *m, int t, int from, int to, size_t pad,
                                     struct sink_call *call, enum msg_outcome expect)
{
    size_t n = (size_t)(to - from);
    struct message **msgs = calloc(n, sizeof *msgs);
    enum msg_outcome *out = calloc(n, sizeof *out);
    for (size_t i = 0; i < n; i++) msgs[i] = mk(t, from + (int)i, pad);
    struct sink_call plain = {.cancel = NULL};
    if (!call) call = &plain;
    m->ops->send(m->sink, msgs, n, out, call);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i], expect);
        message_finish(msgs[i], out[i]);
    }
    free(msgs);
    free(out);
    return call->attempt_errors;
}

static char *slurp(const char *p, size_t *len)
{
    FILE *f = fopen(p, "rb");
    if (!f) {
        *len = 0;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* Checks that every line of file p is whole (parses as (t, i) with the
 * right filler and ends in '\n'); counts them in seen[t][i]. Returns the
 * number of lines; *last_i the i of the last line (-1: none). */
#define MAX_I 4000
static int seen[2][MAX_I];

static int scan(const char *p, size_t pad, int *first_i, int *last_i)
{
    size_t len;
    char *buf = slurp(p, &len);
    *first_i = *last_i = -1;
    if (!buf) return 0;
    int lines = 0;
    size_t off = 0;
    while (off < len) {
        char *nl = memchr(buf + off, '\n', len - off);
        assert_non_null(nl); /* the last line ends in a newline */
        *nl = '\0';
        int t = -1, i = -1, used = 0;
        assert_int_equal(sscanf(buf + off, "{\"t\":%d,\"i\":%d,\"p\":\"%n", &t, &i, &used), 2);
        assert_true(t >= 0 && t < 2 && i >= 0 && i < MAX_I);
        const char *fill = buf + off + used;
        for (size_t k = 0; k < pad; k++) assert_int_equal(fill[k], 'a' + (i % 26));
        assert_string_equal(fill + pad, "\"}");
        seen[t][i]++;
        if (*first_i < 0) *first_i = i;
        *last_i = i;
        lines++;
        off = (size_t)(nl - buf) + 1;
    }
    free(buf);
    return lines;
}

static void test_lines_appended_exactly(void **state)
{
    (void)state;
    struct made m;
    make_sink(&m, NULL);
    assert_int_equal(send_range(&m, 0, 0, 3, 5, NULL, MSG_DELIVERED), 0);
    assert_int_equal(send_range(&m, 0, 3, 4, 0, NULL, MSG_DELIVERED), 0);
    size_t len;
    char *got = slurp(path, &len);
    const char *want = "{\"t\":0,\"i\":0,\"p\":\"aaaaa\"}\n"
                       "{\"t\":0,\"i\":1,\"p\":\"bbbbb\"}\n"
                       "{\"t\":0,\"i\":2,\"p\":\"ccccc\"}\n"
                       "{\"t\":0,\"i\":3,\"p\":\"\"}\n";
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
    char msg[300] = "";
    assert_int_equal(m.ops->check(m.sink, msg, sizeof msg), 0);
    unmake_sink(&m);
    /* a new instance appends (never truncates) */
    make_sink(&m, "fsync = \"always\";");
    send_range(&m, 0, 4, 6, 1, NULL, MSG_DELIVERED);
    unmake_sink(&m);
    got = slurp(path, &len);
    assert_int_equal(len, strlen(want) + 2 * strlen("{\"t\":0,\"i\":4,\"p\":\"e\"}\n"));
    assert_memory_equal(got, want, strlen(want));
    assert_string_equal(got + strlen(want), "{\"t\":0,\"i\":4,\"p\":\"e\"}\n{\"t\":0,\"i\":5,\"p\":\"f\"}\n");
    free(got);
}

#define PER_THREAD 1000
struct writer {
    struct made *m;
    int t;
};

static void *write_thread(void *arg)
{
    struct writer *w = arg;
    /* batches of 1 to 17 lines, lines of up to ~5 KB */
    for (int i = 0; i < PER_THREAD;) {
        int n = 1 + (i * 7 + w->t) % 17;
        if (i + n > PER_THREAD) n = PER_THREAD - i;
        send_range(w->m, w->t, i, i + n, (size_t)((i * 131) % 5000), NULL, MSG_DELIVERED);
        i += n;
    }
    return NULL;
}

/* Lines of variable length from two threads, checked by content: a line
 * cut or glued to another fails the filler or the end check. */
static int scan_varpad(const char *p)
{
    size_t len;
    char *buf = slurp(p, &len);
    int lines = 0;
    size_t off = 0;
    while (buf && off < len) {
        char *nl = memchr(buf + off, '\n', len - off);
        assert_non_null(nl);
        *nl = '\0';
        int t = -1, i = -1, used = 0;
        assert_int_equal(sscanf(buf + off, "{\"t\":%d,\"i\":%d,\"p\":\"%n", &t, &i, &used), 2);
        assert_true(t >= 0 && t < 2 && i >= 0 && i < MAX_I);
        /* the filler (its batch's length), then the end: nothing else */
        const char *fill = buf + off + used;
        size_t pad = strlen(fill);
        assert_true(pad >= 2 && pad - 2 < 5000);
        assert_string_equal(fill + pad - 2, "\"}");
        for (size_t k = 0; k + 2 < pad; k++) assert_int_equal(fill[k], 'a' + (i % 26));
        seen[t][i]++;
        lines++;
        off = (size_t)(nl - buf) + 1;
    }
    free(buf);
    return lines;
}

static void test_two_instances_one_file(void **state)
{
    (void)state;
    struct made a, b;
    make_sink(&a, "fsync = \"never\";");
    /* the same file by another spelling of its path */
    char other[600];
    snprintf(other, sizeof other, "%s/./out.jsonl", tmpdir);
    char text[800], msg[400] = "";
    snprintf(text, sizeof text, "path = \"%s\"; fsync = \"never\";", other);
    assert_int_equal(parse(&b, text, msg, sizeof msg), 0);
    char e[256] = "";
    b.sink = b.ops->create("out", "billing", b.settings, e, sizeof e);
    assert_non_null(b.sink);

    struct writer wa = {&a, 0}, wb = {&b, 1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, write_thread, &wa);
    pthread_create(&tb, NULL, write_thread, &wb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    unmake_sink(&a);
    unmake_sink(&b);

    memset(seen, 0, sizeof seen);
    assert_int_equal(scan_varpad(path), 2 * PER_THREAD);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < PER_THREAD; i++) assert_int_equal(seen[t][i], 1);
}

static off_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? st.st_size : -1;
}

static void rotated(char *out, size_t len, unsigned i)
{
    if (i == 0) snprintf(out, len, "%s", path);
    else snprintf(out, len, "%s.%u", path, i);
}

/* 100-byte lines, max_bytes 1000 (10 lines a file): 250 lines in batches
 * of 7 rotate 24 times. */
static void rotation_case(unsigned keep)
{
    struct made m;
    char extra[100];
    snprintf(extra, sizeof extra, "max_bytes = 1000; keep = %u; fsync = \"never\";", keep);
    make_sink(&m, extra);
    const size_t pad = 100 - 1 - strlen("{\"t\":0,\"i\":100,\"p\":\"\"}");
    for (int i = 100; i < 350; i += 7) send_range(&m, 0, i, i + 7 > 350 ? 350 : i + 7, pad, NULL, MSG_DELIVERED);
    unmake_sink(&m);

    memset(seen, 0, sizeof seen);
    char p[600];
    int total = 0, prev_last = -1;
    /* oldest first: path.<keep> ... path.1, path; each continues the last */
    bool found = false;
    for (int r = (int)keep; r >= 0; r--) {
        rotated(p, sizeof p, (unsigned)r);
        off_t sz = file_size(p);
        if (sz < 0) {
            assert_false(found); /* only the oldest numbers may be missing */
            continue;
        }
        found = true;
        assert_true(sz <= 1000);
        int first, last;
        total += scan(p, pad, &first, &last);
        if (prev_last >= 0) assert_int_equal(first, prev_last + 1);
        prev_last = last;
    }
    assert_int_equal(prev_last, 349); /* the newest line is in path */
    rotated(p, sizeof p, keep + 1);
    assert_int_equal(file_size(p), -1); /* nothing beyond keep */
    for (int i = 0; i < MAX_I; i++) assert_true(seen[0][i] <= 1);
    if (keep >= 24) {
        assert_int_equal(total, 250); /* none deleted: every line in exactly one file */
    } else {
        assert_int_equal(total, 10 * ((int)keep + 1));
    }
    for (unsigned r = 0; r <= keep; r++) {
        rotated(p, sizeof p, r);
        unlink(p);
    }
}

static void test_rotation_keeps_keep_files(void **state)
{
    (void)state;
    rotation_case(3);
}

static void test_rotation_every_line_once(void **state)
{
    (void)state;
    rotation_case(30);
}

static void test_reopen_after_sighup(void **state)
{
    (void)state;
    struct made m;
    make_sink(&m, NULL);
    send_range(&m, 0, 0, 2, 3, NULL, MSG_DELIVERED);
    char moved[600];
    snprintf(moved, sizeof moved, "%s.moved", path);
    assert_int_equal(rename(path, moved), 0);
    /* no reopen asked: the open file (now moved) goes on */
    send_range(&m, 0, 2, 3, 3, NULL, MSG_DELIVERED);
    assert_int_equal(file_size(path), -1);
    sinks_reopen_request();
    send_range(&m, 0, 3, 5, 3, NULL, MSG_DELIVERED);
    unmake_sink(&m);
    memset(seen, 0, sizeof seen);
    int first, last;
    assert_int_equal(scan(moved, 3, &first, &last), 3);
    assert_int_equal(first, 0);
    assert_int_equal(last, 2);
    assert_int_equal(scan(path, 3, &first, &last), 2);
    assert_int_equal(first, 3);
    assert_int_equal(last, 4);
    unlink(moved);
}

static int64_t ended(void *arg, uint64_t epoch)
{
    (void)arg;
    (void)epoch;
    return -1;
}

static void test_term_ended_writes_nothing(void **state)
{
    (void)state;
    struct made m;
    make_sink(&m, NULL);
    struct sink_call call = {.time_left = ended};
    send_range(&m, 0, 0, 5, 3, &call, MSG_DROPPED_TERM_ENDED);
    assert_int_equal(call.attempt_errors, 0);
    atomic_bool cancel = true;
    struct sink_call call2 = {.cancel = &cancel};
    send_range(&m, 0, 0, 5, 3, &call2, MSG_DROPPED_SHUTDOWN);
    unmake_sink(&m);
    assert_int_equal(file_size(path), 0);
}

static void test_validate_errors(void **state)
{
    (void)state;
    struct made m;
    char text[800], msg[400] = "";
    snprintf(text, sizeof text, "path = \"%s\"; fsync = \"sometimes\";", path);
    assert_int_not_equal(parse(&m, text, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "'fsync'"));
    assert_non_null(strstr(msg, "sometimes"));
    unmake_sink(&m);

    msg[0] = '\0';
    snprintf(text, sizeof text, "path = \"%s/no/such/dir/out.jsonl\";", tmpdir);
    assert_int_not_equal(parse(&m, text, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "'path'"));
    assert_non_null(strstr(msg, "/no/such/dir"));
    assert_non_null(strstr(msg, "does not exist"));
    /* create refuses it too, with the same words */
    char e[400] = "";
    assert_null(m.ops->create("out", "orders", m.settings, e, sizeof e));
    assert_non_null(strstr(e, "does not exist"));
    unmake_sink(&m);

    msg[0] = '\0';
    snprintf(text, sizeof text, "path = \"%s/\";", tmpdir);
    assert_int_not_equal(parse(&m, text, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "'path'"));
    unmake_sink(&m);

    /* an unknown key and a keep out of range are the table's errors */
    m.ops = sink_lookup("file");
    config_t cfg;
    config_init(&cfg);
    snprintf(text, sizeof text, "path = \"%s\"; keep = 1001;", path);
    assert_int_equal(config_read_string(&cfg, text), CONFIG_TRUE);
    m.settings = calloc(1, m.ops->settings_size);
    struct config_error err = {0};
    assert_int_not_equal(settings_parse(m.ops->settings, config_root_setting(&cfg), NULL, "sink 'out'",
                                        m.settings, &err), 0);
    config_destroy(&cfg);
    m.sink = NULL;
    unmake_sink(&m);
}

/* A write that fails half way (RLIMIT_FSIZE: EFBIG, as ENOSPC would): the
 * file is cut back (no torn line), the attempt counted and retried until
 * the term ends; when room returns, everything arrives once. */
struct window {
    int64_t until_ms; /* live until then; then the term ends */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t window_left(void *arg, uint64_t epoch)
{
    (void)epoch;
    struct window *w = arg;
    int64_t left = w->until_ms - mono_ms();
    return left > 0 ? left : -1;
}

static struct rlimit saved_fsize;

static void *raise_limit(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    setrlimit(RLIMIT_FSIZE, &saved_fsize);
    return NULL;
}

static void test_failed_write_cut_back_and_retried(void **state)
{
    (void)state;
    struct made m;
    make_sink(&m, NULL);
    send_range(&m, 0, 0, 2, 50, NULL, MSG_DELIVERED);
    off_t base = file_size(path);
    assert_true(base > 0);

    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved_fsize);
    struct rlimit lim = saved_fsize;
    lim.rlim_cur = (rlim_t)base + 150; /* room for one and a half lines */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);

    /* the term ends 300 ms in: nothing of the batch stays */
    struct window w = {mono_ms() + 300};
    struct sink_call call = {.time_left = window_left, .arg = &w};
    int64_t t0 = mono_ms();
    unsigned long long errs = send_range(&m, 0, 2, 6, 50, &call, MSG_DROPPED_TERM_ENDED);
    int64_t took = mono_ms() - t0;
    assert_true(errs >= 3); /* 0, 50, 100, 200 ms */
    assert_true(took >= 290 && took < 1000);
    assert_int_equal(file_size(path), base);

    /* room returns 300 ms in: all arrive, once, after counted errors */
    pthread_t th;
    pthread_create(&th, NULL, raise_limit, NULL);
    struct sink_call call2 = {.cancel = NULL};
    errs = send_range(&m, 0, 2, 6, 50, &call2, MSG_DELIVERED);
    pthread_join(th, NULL);
    assert_true(errs >= 2);
    unmake_sink(&m);
    signal(SIGXFSZ, SIG_DFL);

    memset(seen, 0, sizeof seen);
    int first, last;
    assert_int_equal(scan(path, 50, &first, &last), 6);
    assert_int_equal(first, 0);
    assert_int_equal(last, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lines_appended_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_instances_one_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rotation_keeps_keep_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rotation_every_line_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_sighup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_term_ended_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validate_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_cut_back_and_retried, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
