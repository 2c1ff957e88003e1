/* libFuzzer target: reading etcd's answers (guard/etcd_conn.h) as the etcd
 * locker does. Arbitrary bytes are parsed as one JSON answer and read by
 * every whole-answer reader the locker uses (a txn's succeeded and
 * revision, a range's first kv and its fields, a lease ttl, a status's
 * leader, a gRPC error's code, a watch message), then fed as a watch
 * stream (split where the first byte says, capped at 256 bytes) whose
 * messages are read too. Invariants: a reader that says OK gives a value
 * in its contract's range (a revision > 0, a ttl of -1 or 0..MaxLeaseTTL
 * in ms, an int64 string that reads back the same), and a stream never
 * holds more than its cap pending. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guard/etcd_conn.h"

#define STREAM_MAX 256

static void check_int_field(json_object *o, const char *field, bool neg)
{
    int64_t v = 0;
    char err[256];
    if (etcd_field_int64(o, field, neg, &v, err, sizeof err) != ETCD_FIELD_OK) return;
    if (!neg && v < 0) abort();
    json_object *f = NULL;
    json_object_object_get_ex(o, field, &f);
    if (f && json_object_is_type(f, json_type_string)) {
        const char *s = json_object_get_string(f);
        for (const char *p = s + (*s == '-'); *p; p++)
            if (*p < '0' || *p > '9') abort();
        errno = 0;
        char *end;
        long long back = strtoll(s, &end, 10);
        if (errno != 0 || *end != '\0' || back != v) abort();
    }
}

static void read_kv(json_object *kv)
{
    int64_t v;
    char err[256];
    if (etcd_answer_positive(kv, "mod_revision", "mod_revision", &v, err, sizeof err) == 0 && v <= 0)
        abort();
    check_int_field(kv, "create_revision", true);
    check_int_field(kv, "lease", false);
}

static void read_watch(json_object *o, void *arg)
{
    (void)arg;
    struct etcd_watch_msg m;
    char err[256];
    if (etcd_answer_watch(o, &m, err, sizeof err) == 0 && !m.result &&
        (m.created || m.canceled || m.deletes))
        abort();
}

static void read_answer(json_object *resp)
{
    char err[256];
    bool ok;
    int64_t rev, ms;
    uint64_t leader;
    etcd_answer_succeeded(resp, &ok, err, sizeof err);
    if (etcd_answer_revision(resp, &rev, err, sizeof err) == 0 && rev <= 0) abort();
    json_object *kv = NULL;
    if (etcd_answer_first_kv(resp, &kv, err, sizeof err) == 0 && kv) read_kv(kv);
    json_object *rs = NULL;
    if (json_object_object_get_ex(resp, "responses", &rs) && json_object_is_type(rs, json_type_array))
        for (size_t i = 0; i < json_object_array_length(rs) && i < 8; i++) {
            json_object *r = NULL;
            json_object_object_get_ex(json_object_array_get_idx(rs, i), "response_range", &r);
            if (etcd_answer_first_kv(r, &kv, err, sizeof err) == 0 && kv) read_kv(kv);
        }
    if (etcd_answer_ttl_ms(resp, "TTL", &ms, err, sizeof err) == 0 &&
        (ms < -1 || ms > ETCD_MAX_LEASE_TTL_S * 1000))
        abort();
    json_object *res = NULL;
    if (json_object_object_get_ex(resp, "result", &res))
        etcd_answer_ttl_ms(res, "TTL", &ms, err, sizeof err);
    etcd_field_uint64(resp, "leader", &leader, err, sizeof err);
    check_int_field(resp, "ID", false);
    check_int_field(resp, "code", false);
    read_watch(resp, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *o = etcd_answer_parse((const char *)data, size);
    if (o) {
        read_answer(o);
        json_object_put(o);
    }
    /* the same bytes as a watch stream, in two pieces */
    struct etcd_stream *s = etcd_stream_create(STREAM_MAX);
    if (s == NULL) return 0;
    size_t cut = size ? data[0] % (size + 1) : 0;
    char err[256];
    if (etcd_stream_feed(s, (const char *)data, cut, read_watch, NULL, err, sizeof err) ==
        ETCD_STREAM_OK)
        etcd_stream_feed(s, (const char *)data + cut, size - cut, read_watch, NULL, err, sizeof err);
    etcd_stream_destroy(s);
    return 0;
}
