/* The etcd locker's watch thread (guard/locker_etcd.c describes the
 * mapping of the locker contract): one watch stream per watched key over
 * the "watch" connection's endpoint, on curl handles of its own; a DELETE
 * event and every (re)created stream advance the key's count
 * (release_seq), which wakes the standbys waiting on it (wait_release). The
 * locker's state is in guard/locker_etcd_private.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/etcd_conn.h"
#include "guard/locker.h"
#include "base/curl_dl.h"
#include "base/glog.h"
#include "guard/locker_etcd_private.h"
#include "base/util.h"

#define WATCH_RECYCLE_MS 30000
#define WATCH_POLL_MS 200

/* ---- watch ------------------------------------------------------------------------ */

static struct watch_key *wk_find(struct etcd_locker *el, const char *key)
{
    for (struct watch_key *w = el->keys; w; w = w->next)
        if (strcmp(w->key, key) == 0) return w;
    return NULL;
}

/* Warns (at most every 10 s per locker) that the stream of w was aborted. */
static void watch_warn(struct etcd_locker *el, struct watch_key *w, const char *why)
{
    long long suppressed = 0;
    if (!ratelimit_ok(&el->w_rl, 10000, &suppressed)) return;
    char ep[256];
    etcd_conn_endpoint(el->watch, ep, sizeof ep);
    glog_warn("locker", NULL, "etcd %s: watch %.120s: %s: stream aborted, re-created after a "
              "back-off (%lld such warnings suppressed)", ep, w->key, why, suppressed);
}

/* One JSON message of a watch stream. */
static void watch_message(json_object *o, void *arg)
{
    struct watch_key *w = arg;
    struct etcd_locker *el = w->el;
    struct etcd_watch_msg m;
    char why[200];
    if (w->bad) return;
    if (etcd_answer_watch(o, &m, why, sizeof why) != 0) {
        watch_warn(el, w, why);
        w->bad = true;
        return;
    }
    if (!m.result) return; /* {"error": ...}: the stream ends and is re-created */
    pthread_mutex_lock(&el->w_mu);
    if (m.created) {
        w->confirmed = true;
        w->seq++; /* releases before it were not seen */
        w->failures = 0;
    }
    w->seq += m.deletes;
    if (m.canceled) w->seq++;
    pthread_cond_broadcast(&el->w_cv);
    pthread_mutex_unlock(&el->w_mu);
}

/* Streamed body of a watch: one JSON object per message, each at most
 * ETCD_RESPONSE_MAX bytes. Returns 0 (abort the transfer, re-created after
 * a back-off) on a malformed stream or a message over the cap. */
static size_t on_watch_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct watch_key *w = arg;
    size_t n = size * nmemb;
    w->got_data = true;
    if (w->stream == NULL) return 0; /* out of memory at its start: re-created later */
    char why[200];
    enum etcd_stream_rc rc = etcd_stream_feed(w->stream, ptr, n, watch_message, w, why, sizeof why);
    if (rc == ETCD_STREAM_TOO_LARGE) {
        watch_warn(w->el, w, why);
        w->bad = true;
        return 0;
    }
    if (rc != ETCD_STREAM_OK) {
        glog_debug("locker", NULL, "etcd watch %s: %s", w->key, why);
        w->bad = true;
        return 0;
    }
    return w->bad ? 0 : n;
}

static void stream_end(struct etcd_locker *el, CURLM *m, struct watch_key *w, bool failed)
{
    sym_curl_multi_remove_handle(m, w->easy);
    sym_curl_easy_cleanup(w->easy);
    sym_curl_slist_free_all(w->headers);
    etcd_stream_destroy(w->stream);
    w->easy = NULL;
    w->headers = NULL;
    w->stream = NULL;
    pthread_mutex_lock(&el->w_mu);
    w->confirmed = false;
    w->seq++; /* releases while no stream was open are not seen */
    pthread_cond_broadcast(&el->w_cv);
    pthread_mutex_unlock(&el->w_mu);
    /* a server that answers "created" then garbage resets failures every
     * time: its streams back off by the aborts in a row instead */
    w->aborts = w->bad ? w->aborts + 1 : 0;
    if (failed) {
        if (!w->got_data) etcd_conn_rotate(el->watch);
        w->failures++;
        unsigned n = w->failures + w->aborts;
        w->retry_at_ms = clock_boot_ms() + backoff_ms(n < 8 ? n : 8, 100, 2000);
    } else {
        w->retry_at_ms = 0;
    }
}

static void stream_start(struct etcd_locker *el, CURLM *m, struct watch_key *w)
{
    CURL *e = sym_curl_easy_init();
    if (e == NULL) return;
    json_object *req = json_object_new_object();
    json_object *cr = locker_etcd_obj_key(w->key);
    json_object_object_add(req, "create_request", cr);
    char err[BATON_LOCKER_ERR_MAX];
    struct curl_slist *h = NULL;
    if (etcd_conn_prepare_stream(el->watch, e,  "/v3/watch",
                                 json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), &h,
                                 err, sizeof err) != 0) {
        json_object_put(req);
        sym_curl_easy_cleanup(e);
        glog_debug("locker", NULL, "etcd watch %s: %s", w->key, err);
        w->failures++;
        w->retry_at_ms = clock_boot_ms() + backoff_ms(w->failures < 8 ? w->failures : 8, 100, 2000);
        return;
    }
    json_object_put(req);
    sym_curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_watch_body);
    sym_curl_easy_setopt(e, CURLOPT_WRITEDATA, w);
    sym_curl_easy_setopt(e, CURLOPT_PRIVATE, w);
    w->easy = e;
    w->headers = h;
    w->stream = etcd_stream_create(ETCD_RESPONSE_MAX);
    w->bad = false;
    w->got_data = false;
    w->started_ms = clock_boot_ms();
    sym_curl_multi_add_handle(m, e);
}

static void *watch_main(void *arg)
{
    struct etcd_locker *el = arg;
    CURLM *m = sym_curl_multi_init();
    while (!atomic_load(&el->w_stop)) {
        int64_t now = clock_boot_ms();
        /* the key list only grows while the thread runs */
        pthread_mutex_lock(&el->w_mu);
        struct watch_key *first = el->keys;
        pthread_mutex_unlock(&el->w_mu);
        for (struct watch_key *w = first; w; w = w->next) {
            if (w->easy && now - w->started_ms > WATCH_RECYCLE_MS) stream_end(el, m, w, false);
            if (w->easy == NULL && now >= w->retry_at_ms) stream_start(el, m, w);
        }
        int running = 0, nfds = 0;
        sym_curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = sym_curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE) continue;
            struct watch_key *w = NULL;
            sym_curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&w);
            if (w == NULL) continue;
            if (msg->data.result != CURLE_OK)
                glog_debug("locker", NULL, "etcd watch %s: %s", w->key,
                          etcd_transport_reason(msg->data.result, NULL));
            stream_end(el, m, w, true);
        }
        sym_curl_multi_poll(m, NULL, 0, WATCH_POLL_MS, &nfds);
    }
    for (struct watch_key *w = el->keys; w; w = w->next)
        if (w->easy) stream_end(el, m, w, false);
    sym_curl_multi_cleanup(m);
    return NULL;
}

/* Starts watching key (and the thread) on first use. */
static void watch_ensure(struct etcd_locker *el, const char *key)
{
    pthread_mutex_lock(&el->w_mu);
    if (wk_find(el, key) == NULL) {
        struct watch_key *w = calloc(1, sizeof *w);
        if (w) w->key = strdup(key);
        if (w && w->key) {
            w->el = el;
            w->next = el->keys;
            el->keys = w;
        } else { /* out of memory: not watched, standbys poll */
            free(w);
        }
    }
    if (!el->w_started && !atomic_load(&el->w_stop)) {
        if (pthread_create(&el->w_thread, NULL, watch_main, el) == 0) {
            el->w_started = true;
            thread_name(el->w_thread, "locker", "watch");
        } else
            glog_warn("locker", NULL, "etcd locker: cannot start the watch thread; standbys poll");
    }
    pthread_mutex_unlock(&el->w_mu);
}

uint64_t locker_etcd_release_seq(struct baton_locker *l, const char *key)
{
    struct etcd_locker *el = (struct etcd_locker *)l;
    watch_ensure(el, key);
    pthread_mutex_lock(&el->w_mu);
    struct watch_key *w = wk_find(el, key);
    /* wait (briefly) for the stream, so that releases after this call count */
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, el->command_timeout_ms);
    while (w && !w->confirmed && !atomic_load(&el->w_stop))
        if (pthread_cond_timedwait(&el->w_cv, &el->w_mu, &ts) != 0) break;
    uint64_t seq = w ? w->seq : 0;
    pthread_mutex_unlock(&el->w_mu);
    return seq;
}

bool locker_etcd_wait_release(struct baton_locker *l, const char *key, uint64_t seen, int64_t timeout_ms)
{
    struct etcd_locker *el = (struct etcd_locker *)l;
    watch_ensure(el, key);
    struct timespec ts = clock_deadline(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&el->w_mu);
    struct watch_key *w = wk_find(el, key);
    while (w && w->seq == seen && !atomic_load(&el->w_stop))
        if (pthread_cond_timedwait(&el->w_cv, &el->w_mu, &ts) != 0) break;
    bool changed = w && w->seq != seen;
    pthread_mutex_unlock(&el->w_mu);
    return changed;
}
