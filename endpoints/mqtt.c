/* mqtt: MQTT 5 / 3.1.1 subscriptions through paho.mqtt.c (MQTTAsync).
 *
 * Two deployments (DESIGN.md):
 *   shared_group set  each filter becomes $share/<group>/<filter>; the broker
 *                     delivers every message to one member of the group, so
 *                     the replicas need no guard (auto guard = none). A guard
 *                     there would leave all but one replica idle and turn the
 *                     broker's at-least-once into at-most-once across a
 *                     failover: validate() rejects it unless forced.
 *   plain filters     a broadcast: every subscriber gets every message, so
 *                     only the ActiveGuard leader subscribes (auto = active).
 *
 * Acknowledgement (ack = "after_sink", the default). What paho 1.3 does,
 * checked against the library on this machine: a QoS 1/2 PUBLISH is handed to
 * messageArrived on paho's receive thread, and its PUBACK (PUBCOMP for QoS 2)
 * goes out only after the callback returned. So the callback emits the
 * envelope and then waits for the message's done callback (the sink accepted
 * it) before returning 1. A baton killed while it waits never sends the ack:
 * the broker redelivers the message to the same session (stable client id,
 * clean_start = false) or, without a persistent session, the message is gone
 * with the session - the broker's own semantics.
 *
 * The price: paho runs every client of the process on one receive thread and
 * holds its global mutex during messageArrived, so waiting serialises
 * delivery to one message in flight per process (throughput = 1 / sink round
 * trip) and freezes every other MQTT client of the process while the sink is
 * slow. QoS 0 messages are never waited for. ack = "on_receive" returns at once
 * (paho acks on receipt): full pipeline throughput, but a crash loses what was
 * acked and still queued. Both measured in bench/bench_mqtt.sh.
 *
 * Stopping while a message waits for its sink: stop() waits up to
 * stop_timeout_ms for its outcome, or not at all when the outcome is already
 * final and undelivered (not leader, shutdown, term ended: such a message is
 * never emitted again, in particular never in a later lease term; it waits
 * for the stop() that always follows the end of a term). If it is still
 * pending or undelivered and the process is shutting down, the message is
 * left unacknowledged for good (the paho thread stays parked until exit, the
 * broker redelivers it to the session later); on a demotion it is
 * acknowledged (the gateway forwards it while the lease still holds, or
 * counts it as dropped): paho cannot withhold an acknowledgement without
 * parking its receive thread, shared by every client of the process.
 *
 * Connection: one supervisor thread per start(): create the client, connect,
 * subscribe (every granted code checked), then wait for connectionLost;
 * reconnect with backoff and subscribe again. Unreachable for longer than the
 * lease ttl while guarded -> host->source_lost(). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <MQTTAsync.h>

#include "base/util.h"
#include "endpoints/endpoint.h"
#include "endpoints/mqtt_util.h"
#include "endpoints/source_loop.h"
#include "common/envelope.h"
#include "common/log.h"
#include "common/replay_id.h"
#include "common/util.h"

#define COMPONENT "mqtt"
#define DEFAULT_SERVER "tcp://127.0.0.1:1883"

enum { PROTO_V5 = 0, PROTO_V311 = 1 };
enum { ACK_AFTER_SINK = 0, ACK_ON_RECEIVE = 1 };

struct mqtt_settings {
    char *server; /* NULL: not given (DEFAULT_SERVER unless servers is) */
    struct strlist servers;
    char *ca_file;
    char *cert_file;
    char *key_file;
    bool tls_verify;
    char *client_id;
    char *user;
    char *password_env;
    char *password_file;
    int protocol;
    int64_t keepalive;
    bool clean_start;
    int64_t session_expiry;
    struct strlist topics;
    int64_t qos;
    char *shared_group;
    int ack;
    char *id_property;
    int64_t receive_maximum;
    int64_t connect_timeout_ms;
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t stop_timeout_ms;
};

static const char *const protocol_choices[] = {"5", "3.1.1", NULL};
static const char *const ack_choices[] = {"after_sink", "on_receive", NULL};

#define OFF(f) offsetof(struct mqtt_settings, f)
static const struct setting_def mqtt_defs[] = {
    /* no default in the table: validate must see whether server was given
     * (server and servers together are an error) */
    {"server", SETTING_STRING, OFF(server),
     .help = "broker URI: tcp://host:port, ssl://host:port (also mqtt://, mqtts://, ws://, wss://); "
             "default tcp://127.0.0.1:1883"},
    {"servers", SETTING_STRLIST, OFF(servers),
     .help = "broker URIs tried in order on every (re)connect, all TLS or all plain; replaces server"},
    {"ca_file", SETTING_STRING, OFF(ca_file), .help = "PEM file of trusted CAs (ssl://)"},
    {"cert_file", SETTING_STRING, OFF(cert_file), .help = "PEM client certificate (ssl://)"},
    {"key_file", SETTING_STRING, OFF(key_file), .help = "PEM client private key (ssl://)"},
    {"tls_verify", SETTING_BOOL, OFF(tls_verify), .def = "true",
     .help = "verify the broker's certificate and host name"},
    {"client_id", SETTING_STRING, OFF(client_id), .def = "baton-%n-%h-%p",
     .help = "client id template: %n endpoint name, %h host name, %p pid, %% percent"},
    {"user", SETTING_STRING, OFF(user), .help = "user name of the broker login"},
    {"password_env", SETTING_STRING, OFF(password_env),
     .help = "name of the environment variable holding the password"},
    {"password_file", SETTING_STRING, OFF(password_file),
     .help = "path of a file whose first line is the password"},
    {"protocol", SETTING_ENUM, OFF(protocol), .def = "5", .choices = protocol_choices,
     .help = "MQTT protocol version: \"5\" or \"3.1.1\""},
    {"keepalive", SETTING_INT, OFF(keepalive), .def = "30", .min = 0, .max = 65535,
     .help = "keepalive interval in seconds (0 = none)"},
    {"clean_start", SETTING_BOOL, OFF(clean_start), .def = "true",
     .help = "start a new session on every connect (false: resume the session of the client id)"},
    {"session_expiry", SETTING_INT, OFF(session_expiry), .def = "3600", .min = 0,
     .max = 4294967295LL,
     .help = "MQTT 5 session expiry in seconds, sent only when clean_start = false"},
    {"topics", SETTING_STRLIST, OFF(topics), .required = true,
     .help = "list of topic filters (wildcards + and # allowed)"},
    {"qos", SETTING_INT, OFF(qos), .def = "1", .min = 0, .max = 2,
     .help = "subscription QoS for every topic (0, 1 or 2)"},
    {"shared_group", SETTING_STRING, OFF(shared_group),
     .help = "share group: each filter becomes $share/<group>/<filter>"},
    {"ack", SETTING_ENUM, OFF(ack), .def = "after_sink", .choices = ack_choices,
     .help = "when QoS 1/2 messages are acknowledged: after_sink or on_receive"},
    {"id_property", SETTING_STRING, OFF(id_property),
     .help = "MQTT 5 user property whose value is the message id"},
    {"receive_maximum", SETTING_INT, OFF(receive_maximum), .def = "0", .min = 0, .max = 65535,
     .help = "MQTT 5 receive maximum (unacknowledged QoS 1/2 messages in flight; 0 = broker default)"},
    {"connect_timeout_ms", SETTING_INT, OFF(connect_timeout_ms), .def = "10000", .min = 100,
     .max = 600000, .help = "connect and subscribe timeout in ms"},
    {"reconnect_min_ms", SETTING_INT, OFF(reconnect_min_ms), .def = "250", .min = 1,
     .max = 3600000, .help = "first reconnect delay in ms (doubles up to reconnect_max_ms)"},
    {"reconnect_max_ms", SETTING_INT, OFF(reconnect_max_ms), .def = "10000", .min = 1,
     .max = 3600000, .help = "longest reconnect delay in ms"},
    {"stop_timeout_ms", SETTING_INT, OFF(stop_timeout_ms), .def = "5000", .min = 0,
     .max = 600000, .help = "how long stop waits for the message in flight to reach the sink"},
    SETTINGS_END};
#undef OFF

/* The one message waiting for its sink (after_sink). Separately allocated
 * so that a message still queued when the endpoint is torn down at exit can
 * signal it safely (it is leaked when abandoned). */
struct ack_slot {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t seq;       /* seq of the message waited for; 0 = none */
    bool done;
    enum msg_outcome outcome;
};

enum op_state { OP_IDLE, OP_PENDING, OP_OK, OP_FAIL };

struct mqtt_ep {
    const struct mqtt_settings *s;
    struct endpoint_host *host;
    const char **uris;   /* servers, or the one server (strings owned by s) */
    size_t n_uris;
    char *servers_text;  /* "tcp://a:1883, tcp://b:1883", for messages */
    char *password;
    char *client_id;
    char **filters; /* as subscribed ($share applied) */
    int *qos;
    size_t n_filters;
    bool tls;
    bool v5;

    /* one run (start .. stop) */
    struct source_loop loop; /* the supervisor thread (endpoints/source_loop.h) */
    unsigned failed_attempts; /* since the last success, for the log; loop thread only */
    MQTTAsync client;
    struct envelope env; /* used on paho's receive thread only */
    struct replay_idctx idctx; /* failover = "replay": paho's receive thread only */
    uint64_t next_seq;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;
    enum op_state op;
    char op_err[256];
    char tls_err[200];   /* OpenSSL's first error of the current connect, if any */
    bool conn_lost;
    char connected[256]; /* the server paho reports connected to (connect success data) */
    bool in_callback;    /* a QoS 1/2 message waits for its sink */
    bool awaiting_stop;  /* ... or its outcome is final and undelivered (not
                            leader, shutdown, term ended): it waits for stop() */
    enum msg_outcome final_outcome; /* that outcome, when awaiting_stop */
    int64_t stop_deadline_ms;
    bool release;        /* stop: acknowledge the waiting message and return */
    bool abandoned;      /* stop at exit: leave it unacknowledged for good */
    /* after_sink round trips (emit -> the sink's verdict) of this run, for
     * the log at stop: the throughput bound is 1 / mean. */
    uint64_t rt_count;
    int64_t rt_sum_us;
    int64_t rt_max_us;

    struct ack_slot *slot;
};

/* ---- settings ------------------------------------------------------------ */

static enum guard_kind mqtt_auto_guard(const void *settings)
{
    const struct mqtt_settings *s = settings;
    if (s->shared_group && *s->shared_group) return GUARD_NONE;
    bool all_shared = s->topics.n > 0;
    for (size_t i = 0; i < s->topics.n; i++)
        if (!mqtt_filter_is_shared(s->topics.v[i])) all_shared = false;
    return all_shared ? GUARD_NONE : GUARD_ACTIVE;
}

/* failover = "replay" needs what every replica receives alike (a plain
 * subscription, not a share group) and a message that is settled once it is
 * in the ring (ack on receive, or QoS 0). */
static int mqtt_replay_check(const void *settings, char *msg, size_t msglen)
{
    const struct mqtt_settings *s = settings;
    bool shared = s->shared_group && *s->shared_group;
    for (size_t i = 0; i < s->topics.n; i++)
        if (mqtt_filter_is_shared(s->topics.v[i])) shared = true;
    if (shared) {
        snprintf(msg, msglen,
                 "shared_group: a $share group gives each message to one replica; replay needs a "
                 "plain subscription on every replica (drop shared_group / $share, or failover)");
        return -1;
    }
    if (s->qos > 0 && s->ack == ACK_AFTER_SINK) {
        snprintf(msg, msglen,
                 "ack: with replay the standbys' ring is the buffer, so a QoS %lld message is "
                 "acknowledged on receipt: set ack = \"on_receive\" (or qos = 0)",
                 (long long)s->qos);
        return -1;
    }
    return 0;
}

static int mqtt_validate(const void *settings, enum guard_kind guard, bool force, char *msg,
                         size_t msglen)
{
    const struct mqtt_settings *s = settings;
    bool tls = false;
    if (s->servers.n && s->server) {
        snprintf(msg, msglen, "set either 'server' or 'servers', not both ('servers' lists every "
                              "broker: servers = [\"tcp://h1:1883\", \"tcp://h2:1883\"])");
        return -1;
    }
    const char *one = s->server ? s->server : DEFAULT_SERVER;
    const char *const *uris = s->servers.n ? (const char *const *)s->servers.v : &one;
    size_t n = s->servers.n ? s->servers.n : 1;
    if (mqtt_servers_validate(uris, n, &tls, msg, msglen) != 0) return -1;
    if (!tls && (s->ca_file || s->cert_file || s->key_file)) {
        snprintf(msg, msglen, "ca_file/cert_file/key_file need an ssl:// (or mqtts://, wss://) server, not '%s'",
                 uris[0]);
        return -1;
    }
    if ((s->cert_file == NULL) != (s->key_file == NULL)) {
        snprintf(msg, msglen, "cert_file and key_file go together (client certificate authentication)");
        return -1;
    }
    if (s->topics.n == 0) {
        snprintf(msg, msglen, "topics: at least one topic filter is needed");
        return -1;
    }
    bool any_shared = false;
    for (size_t i = 0; i < s->topics.n; i++) {
        char m[256];
        if (mqtt_filter_validate(s->topics.v[i], m, sizeof m) != 0) {
            snprintf(msg, msglen, "topics[%zu]: %s", i, m);
            return -1;
        }
        if (mqtt_filter_is_shared(s->topics.v[i])) {
            any_shared = true;
            if (s->shared_group) {
                snprintf(msg, msglen, "topics[%zu] '%s' is already a $share filter: drop shared_group or write the plain filter",
                         i, s->topics.v[i]);
                return -1;
            }
        }
    }
    if (s->shared_group) {
        char m[256];
        if (mqtt_group_validate(s->shared_group, m, sizeof m) != 0) {
            snprintf(msg, msglen, "shared_group: %s", m);
            return -1;
        }
        any_shared = true;
    }
    char tmp[1024], m[256];
    if (mqtt_client_id_format(s->client_id, "n", "h", 1, tmp, sizeof tmp, m, sizeof m) < 0) {
        snprintf(msg, msglen, "client_id: %s", m);
        return -1;
    }
    if (s->reconnect_min_ms > s->reconnect_max_ms) {
        snprintf(msg, msglen, "reconnect_min_ms (%lld) must not exceed reconnect_max_ms (%lld)",
                 (long long)s->reconnect_min_ms, (long long)s->reconnect_max_ms);
        return -1;
    }
    if (s->protocol == PROTO_V311 && s->receive_maximum > 0) {
        snprintf(msg, msglen, "receive_maximum is an MQTT 5 property: remove it or use protocol = \"5\"");
        return -1;
    }
    if (any_shared && guard != GUARD_NONE && !force) {
        snprintf(msg, msglen,
                 "guard '%s' on a $share subscription: the broker already delivers each message to "
                 "one member of the share group, so a guard only leaves the other replicas idle and "
                 "turns at-least-once into at-most-once when the leader fails (messages the broker "
                 "handed to it are gone with it); use guard = \"none\" (the default), or set "
                 "force_guard = true if this is really wanted",
                 guard_kind_name(guard));
        return -1;
    }
    return 0;
}

/* ---- paho callbacks ------------------------------------------------------ */

static void op_finish(struct mqtt_ep *ep, bool ok, const char *err)
{
    pthread_mutex_lock(&ep->mu);
    if (ep->op == OP_PENDING) {
        ep->op = ok ? OP_OK : OP_FAIL;
        snprintf(ep->op_err, sizeof ep->op_err, "%.*s", (int)sizeof ep->op_err - 1, err ? err : "");
    }
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
}

static const char *connack_v3_text(int code)
{
    switch (code) {
    case 1: return "unacceptable protocol version";
    case 2: return "client identifier rejected";
    case 3: return "server unavailable";
    case 4: return "bad user name or password";
    case 5: return "not authorized";
    default: return NULL;
    }
}

static void fail_text(char *buf, size_t len, int code, const char *message, int reason, bool v5)
{
    /* paho 1.3 reports a refused MQTT 5 CONNACK with the reason code in
     * code (reasonCode left 0); a refused 3.1.1 CONNACK with its return
     * code (1..5) in code. */
    if (v5 && reason == 0 && code >= 0x80) reason = code;
    const char *what = NULL;
    if (v5 && reason != 0) what = MQTTReasonCode_toString((enum MQTTReasonCodes)reason);
    if (!what && !v5) what = connack_v3_text(code);
    if (!what && code != 0) what = MQTTAsync_strerror(code);
    if (v5 && reason != 0)
        snprintf(buf, len, "refused by the broker: %s (reason code 0x%02x)", what ? what : "?", reason);
    else if (!v5 && code >= 1 && code <= 5)
        snprintf(buf, len, "refused by the broker: %s (CONNACK return code %d)", what, code);
    else
        snprintf(buf, len, "%s%s%s (code %d)", what ? what : "failed", message ? ": " : "",
                 message ? message : "", code);
}

/* The server paho connected to (with servers, the first of the list that
 * accepted the connection). */
static void note_connected(struct mqtt_ep *ep, const char *uri)
{
    int i = mqtt_servers_match(ep->uris, ep->n_uris, uri);
    pthread_mutex_lock(&ep->mu);
    if (i >= 0) snprintf(ep->connected, sizeof ep->connected, "%s", ep->uris[i]);
    else if (uri && *uri) snprintf(ep->connected, sizeof ep->connected, "%s", uri);
    else if (ep->n_uris == 1) snprintf(ep->connected, sizeof ep->connected, "%s", ep->uris[0]);
    else ep->connected[0] = '\0';
    pthread_mutex_unlock(&ep->mu);
}

static void on_connect_ok(void *ctx, MQTTAsync_successData *r)
{
    note_connected(ctx, r ? r->alt.connect.serverURI : NULL);
    op_finish(ctx, true, NULL);
}

static void on_connect_fail(void *ctx, MQTTAsync_failureData *r)
{
    char buf[256];
    fail_text(buf, sizeof buf, r ? r->code : 0, r ? r->message : NULL, 0, false);
    op_finish(ctx, false, buf);
}

static void on_connect_ok5(void *ctx, MQTTAsync_successData5 *r)
{
    note_connected(ctx, r ? r->alt.connect.serverURI : NULL);
    op_finish(ctx, true, NULL);
}

static void on_connect_fail5(void *ctx, MQTTAsync_failureData5 *r)
{
    char buf[256];
    fail_text(buf, sizeof buf, r ? r->code : 0, r ? r->message : NULL, r ? (int)r->reasonCode : 0, true);
    op_finish(ctx, false, buf);
}

/* A granted QoS / reason code >= 0x80 is a refusal. */
static void check_granted(struct mqtt_ep *ep, const int *codes, int n)
{
    for (int i = 0; i < n && i < (int)ep->n_filters; i++) {
        if (codes[i] >= 0x80) {
            char buf[256];
            const char *t = ep->v5 ? MQTTReasonCode_toString((enum MQTTReasonCodes)codes[i]) : NULL;
            snprintf(buf, sizeof buf, "subscription to '%s' refused by the broker: %s (0x%02x)",
                     ep->filters[i], t ? t : "failure", codes[i]);
            op_finish(ep, false, buf);
            return;
        }
        if (codes[i] < ep->qos[i])
            log_warn(COMPONENT, ep->host->name, "'%s': broker granted QoS %d (asked %d)",
                     ep->filters[i], codes[i], ep->qos[i]);
    }
    op_finish(ep, true, NULL);
}

static void on_sub_ok(void *ctx, MQTTAsync_successData *r)
{
    struct mqtt_ep *ep = ctx;
    if (ep->n_filters == 1) {
        int q = r ? r->alt.qos : 0;
        check_granted(ep, &q, 1);
    } else if (r && r->alt.qosList) {
        check_granted(ep, r->alt.qosList, (int)ep->n_filters);
    } else {
        op_finish(ep, true, NULL);
    }
}

static void on_sub_fail(void *ctx, MQTTAsync_failureData *r)
{
    struct mqtt_ep *ep = ctx;
    char buf[256];
    if (r && r->code == 0x80)
        snprintf(buf, sizeof buf, "subscription refused by the broker (0x80)");
    else
        fail_text(buf, sizeof buf, r ? r->code : 0, r ? r->message : NULL, 0, false);
    op_finish(ep, false, buf);
}

static void on_sub_ok5(void *ctx, MQTTAsync_successData5 *r)
{
    struct mqtt_ep *ep = ctx;
    if (!r) {
        op_finish(ep, true, NULL);
        return;
    }
    /* paho fills the array only for several filters; with one, only
     * reasonCode is set (alt.sub is left uninitialised). */
    if (ep->n_filters > 1 && r->alt.sub.reasonCodeCount > 0 && r->alt.sub.reasonCodes) {
        int n = r->alt.sub.reasonCodeCount;
        int codes[64];
        if (n > 64) n = 64;
        for (int i = 0; i < n; i++) codes[i] = (int)r->alt.sub.reasonCodes[i];
        check_granted(ep, codes, n);
    } else {
        int q = (int)r->reasonCode;
        check_granted(ep, &q, 1);
    }
}

static void on_sub_fail5(void *ctx, MQTTAsync_failureData5 *r)
{
    struct mqtt_ep *ep = ctx;
    char buf[256];
    fail_text(buf, sizeof buf, r ? r->code : 0, r ? r->message : NULL, r ? (int)r->reasonCode : 0, true);
    char full[320];
    snprintf(full, sizeof full, "subscribe failed: %s", buf);
    op_finish(ep, false, full);
}

static void on_disc_ok(void *ctx, MQTTAsync_successData *r)
{
    (void)r;
    op_finish(ctx, true, NULL);
}
static void on_disc_fail(void *ctx, MQTTAsync_failureData *r)
{
    (void)r;
    op_finish(ctx, false, "disconnect failed");
}
static void on_disc_ok5(void *ctx, MQTTAsync_successData5 *r)
{
    (void)r;
    op_finish(ctx, true, NULL);
}
static void on_disc_fail5(void *ctx, MQTTAsync_failureData5 *r)
{
    (void)r;
    op_finish(ctx, false, "disconnect failed");
}

static void on_connection_lost(void *ctx, char *cause)
{
    struct mqtt_ep *ep = ctx;
    pthread_mutex_lock(&ep->mu);
    ep->conn_lost = true;
    snprintf(ep->op_err, sizeof ep->op_err, "%s", cause ? cause : "connection lost");
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
}

/* Forwarder thread (or whoever dropped it): the sink's verdict. */
static void on_message_done(void *arg, const struct message *m, enum msg_outcome o)
{
    struct ack_slot *slot = arg;
    pthread_mutex_lock(&slot->mu);
    if (slot->seq == m->seq) {
        slot->done = true;
        slot->outcome = o;
        pthread_cond_broadcast(&slot->cv);
    }
    pthread_mutex_unlock(&slot->mu);
}

static struct message *build_message(struct mqtt_ep *ep, const char *topic, size_t topic_len,
                                     const MQTTAsync_message *msg)
{
    struct envelope *e = &ep->env;
    struct endpoint_host *h = ep->host;
    char id[MESSAGE_ID_MAX];
    bool have_id = ep->v5 && ep->s->id_property &&
                   mqtt_properties_find_user(&msg->properties, ep->s->id_property, id, sizeof id);
    uint64_t fp = 0;
    if (h->replay) {
        /* failover = "replay": fingerprint, and an id every replica derives
         * alike when the publisher gave none */
        size_t n = msg->payloadlen > 0 ? (size_t)msg->payloadlen : 0;
        fp = replay_fingerprint(topic, topic_len, msg->payload, n);
        char rid[REPLAY_ID_LEN];
        replay_id(&ep->idctx, fp, rid);
        if (!have_id) {
            snprintf(id, sizeof id, "%s", rid);
            have_id = true;
        }
    }
    mqtt_envelope(e, h->name, h->type, h->epoch(h), have_id ? id : NULL, clock_wall_ms(), topic,
                  topic_len, msg, ep->v5);
    struct message *m = envelope_finish(e);
    m->fp = fp;
    return m;
}

/* How long to wait before re-emitting a message the sink gave up on. */
#define REEMIT_BASE_MS 200
#define REEMIT_CAP_MS 5000

/* stop() decided: release (acknowledge and return) or abandon (never
 * acknowledge: park paho's receive thread here until the process exits, the
 * broker redelivers to the session). Returns true on release. */
static bool stop_verdict(struct mqtt_ep *ep, bool wait)
{
    pthread_mutex_lock(&ep->mu);
    for (;;) {
        if (ep->abandoned) {
            pthread_mutex_unlock(&ep->mu);
            for (;;) sleep(3600);
        }
        if (ep->release) {
            pthread_mutex_unlock(&ep->mu);
            return true;
        }
        if (!wait) break;
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, 50);
        pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
    }
    pthread_mutex_unlock(&ep->mu);
    return false;
}

/* The message's outcome is final and it was not delivered: tell stop() so
 * it decides at once (no stop_timeout_ms wait for an outcome that cannot
 * change), then wait for its decision. */
static void await_stop(struct mqtt_ep *ep, enum msg_outcome outcome)
{
    pthread_mutex_lock(&ep->mu);
    ep->awaiting_stop = true;
    ep->final_outcome = outcome;
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
    stop_verdict(ep, true);
}

/* Emits one QoS 1/2 message and waits for the sink's verdict; re-emits it
 * when the queue evicted it or the sink gave up. Returns once it was
 * delivered, or when stop() released it; never returns when stop()
 * abandoned it. */
static void deliver_and_wait(struct mqtt_ep *ep, const char *topic, size_t topic_len,
                             const MQTTAsync_message *msg)
{
    struct ack_slot *slot = ep->slot;
    struct endpoint_host *h = ep->host;
    int64_t rt_us = -1;
    pthread_mutex_lock(&ep->mu);
    ep->in_callback = true;
    pthread_mutex_unlock(&ep->mu);

    for (unsigned attempt = 0;; attempt++) {
        struct message *m = build_message(ep, topic, topic_len, msg);
        m->seq = ++ep->next_seq;
        m->done = on_message_done;
        m->done_arg = slot;
        m->sender_waits = true;
        pthread_mutex_lock(&slot->mu);
        slot->seq = m->seq;
        slot->done = false;
        pthread_mutex_unlock(&slot->mu);
        int64_t t_emit = clock_mono_us();
        h->emit(h, m); /* done fires whatever happens (maybe right here) */

        enum msg_outcome outcome;
        for (;;) {
            pthread_mutex_lock(&slot->mu);
            if (!slot->done) {
                struct timespec ts = clock_deadline(CLOCK_MONOTONIC, 50);
                pthread_cond_timedwait(&slot->cv, &slot->mu, &ts);
            }
            bool done = slot->done;
            outcome = slot->outcome;
            pthread_mutex_unlock(&slot->mu);
            if (done) break;
            if (stop_verdict(ep, false)) goto out;
        }
        enum mqtt_verdict v = mqtt_after_sink_verdict(outcome);
        if (v == MQTT_VERDICT_ACK) {
            rt_us = clock_mono_us() - t_emit;
            break;
        }
        /* Not delivered. Final (not leader, shutting down, or its lease term
         * ended: a term_ended message is never delivered in a later term, so
         * it is never emitted again): the guard or the gateway stops us next
         * (a term's end always demotes), and returning now would acknowledge
         * it: wait for stop() to decide, which it does at once for a final
         * outcome. Evicted from the queue or the sink gave up within the
         * term: emit it again after a pause (unless stop() already came). */
        if (v == MQTT_VERDICT_AWAIT_STOP || atomic_load(&ep->loop.stop)) {
            await_stop(ep, outcome);
            goto out;
        }
        int64_t wait = backoff_ms(attempt, REEMIT_BASE_MS, REEMIT_CAP_MS);
        log_warn(COMPONENT, h->name, "message on '%.*s' not accepted by the sink (%s): emitting it again in %lld ms",
                 (int)(topic_len > 200 ? 200 : topic_len), topic, msg_outcome_name(outcome), (long long)wait);
        /* a stop() meanwhile cuts the pause short: the message is emitted
         * once more (the gateway may still deliver it while draining, or
         * settles it as not leader / term ended) and then waits for stop() */
        sleep_ms_cancellable(wait, &ep->loop.stop);
    }
out:
    pthread_mutex_lock(&ep->mu);
    if (rt_us >= 0) {
        ep->rt_count++;
        ep->rt_sum_us += rt_us;
        if (rt_us > ep->rt_max_us) ep->rt_max_us = rt_us;
    }
    ep->in_callback = false;
    ep->awaiting_stop = false;
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
}

static int on_message(void *ctx, char *topic, int topic_len, MQTTAsync_message *msg)
{
    struct mqtt_ep *ep = ctx;
    size_t tl = topic_len > 0 ? (size_t)topic_len : strlen(topic);
    if (msg->qos > 0 && ep->s->ack == ACK_AFTER_SINK) {
        deliver_and_wait(ep, topic, tl, msg);
    } else {
        struct message *m = build_message(ep, topic, tl, msg);
        ep->host->emit(ep->host, m);
    }
    MQTTAsync_freeMessage(&msg);
    MQTTAsync_free(topic);
    return 1;
}

/* ---- supervisor ---------------------------------------------------------- */

/* Waits for the pending operation, at most timeout_ms; returns 0 on success,
 * -1 with err filled. */
static int op_wait(struct mqtt_ep *ep, int64_t timeout_ms, bool cancellable, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    pthread_mutex_lock(&ep->mu);
    while (ep->op == OP_PENDING && !(cancellable && atomic_load(&ep->loop.stop))) {
        if (clock_mono_ms() >= deadline) break;
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, 50);
        pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
    }
    int rc = -1;
    if (ep->op == OP_OK) rc = 0;
    else if (ep->op == OP_FAIL) snprintf(err, errlen, "%s", ep->op_err);
    else if (atomic_load(&ep->loop.stop)) snprintf(err, errlen, "stopping");
    else snprintf(err, errlen, "no answer within %lld ms", (long long)timeout_ms);
    ep->op = OP_IDLE;
    pthread_mutex_unlock(&ep->mu);
    return rc;
}

static void op_begin(struct mqtt_ep *ep)
{
    pthread_mutex_lock(&ep->mu);
    ep->op = OP_PENDING;
    ep->op_err[0] = '\0';
    pthread_mutex_unlock(&ep->mu);
}

/* Disconnects (when connected) and destroys the client. */
static void client_teardown(struct mqtt_ep *ep, bool connected)
{
    if (!ep->client) return;
    pthread_mutex_lock(&ep->mu);
    bool abandoned = ep->abandoned;
    pthread_mutex_unlock(&ep->mu);
    if (abandoned) {
        ep->client = NULL; /* paho is parked in our callback: leave it */
        return;
    }
    if (connected) {
        MQTTAsync_disconnectOptions d3 = MQTTAsync_disconnectOptions_initializer;
        MQTTAsync_disconnectOptions d5 = MQTTAsync_disconnectOptions_initializer5;
        MQTTAsync_disconnectOptions d = ep->v5 ? d5 : d3;
        d.timeout = 0;
        d.context = ep;
        if (ep->v5) {
            d.onSuccess5 = on_disc_ok5;
            d.onFailure5 = on_disc_fail5;
        } else {
            d.onSuccess = on_disc_ok;
            d.onFailure = on_disc_fail;
        }
        op_begin(ep);
        if (MQTTAsync_disconnect(ep->client, &d) == MQTTASYNC_SUCCESS) {
            char err[64];
            op_wait(ep, 2000, false, err, sizeof err);
        } else {
            pthread_mutex_lock(&ep->mu);
            ep->op = OP_IDLE;
            pthread_mutex_unlock(&ep->mu);
        }
    }
    MQTTAsync_destroy(&ep->client);
    ep->client = NULL;
}

/* paho keeps an in-memory trace ring and, at its default level, formats a
 * protocol line into it for every packet (a vsnprintf under a global mutex on
 * the receive thread). Raising the level to errors skips that; the library
 * still logs its errors. MQTT_C_CLIENT_TRACE (paho's own switch for trace
 * output) keeps the default. paho is also told not to initialise OpenSSL
 * itself: by default its first client loads every algorithm, the error
 * strings and the OpenSSL configuration even for tcp:// (1.3 MiB more
 * resident memory per leader); OpenSSL 3 initialises itself when an ssl://
 * connection first needs it (test_mqtt test_tls_mutual). Process-wide, set
 * once, before the first client. */
static pthread_once_t paho_tuned = PTHREAD_ONCE_INIT;
static void paho_tune(void)
{
    MQTTAsync_init_options init = MQTTAsync_init_options_initializer;
    init.do_openssl_init = 0;
    MQTTAsync_global_init(&init);
    if (!getenv("MQTT_C_CLIENT_TRACE")) MQTTAsync_setTraceLevel(MQTTASYNC_TRACE_ERROR);
}

/* OpenSSL's error queue, line by line (paho calls this on its own thread when
 * a TLS handshake fails): the first line is kept for the connect error, so
 * "certificate verify failed" reaches the log instead of paho's generic
 * "TCP/TLS connect failure". */
static int on_tls_error(const char *str, size_t len, void *u)
{
    struct mqtt_ep *ep = u;
    while (len > 0 && (str[len - 1] == '\n' || str[len - 1] == '\r')) len--;
    /* "<thread id>:error:<code>:<library>:<function>:<reason>:<file>:<line>:" */
    const char *e = memchr(str, ':', len);
    if (e) {
        len -= (size_t)(e + 1 - str);
        str = e + 1;
    }
    pthread_mutex_lock(&ep->mu);
    if (!ep->tls_err[0])
        snprintf(ep->tls_err, sizeof ep->tls_err, "%.*s", (int)(len < 190 ? len : 190), str);
    pthread_mutex_unlock(&ep->mu);
    return 1;
}

/* Creates the client, connects and subscribes. 0, or -1 with err. */
static int connect_and_subscribe(struct mqtt_ep *ep, char *err, size_t errlen)
{
    const struct mqtt_settings *s = ep->s;
    pthread_once(&paho_tuned, paho_tune);
    MQTTAsync_createOptions c3 = MQTTAsync_createOptions_initializer;
    MQTTAsync_createOptions c5 = MQTTAsync_createOptions_initializer5;
    MQTTAsync_createOptions copts = ep->v5 ? c5 : c3;
    if (!ep->v5) copts.MQTTVersion = MQTTVERSION_3_1_1;
    int rc = MQTTAsync_createWithOptions(&ep->client, ep->uris[0], ep->client_id,
                                         MQTTCLIENT_PERSISTENCE_NONE, NULL, &copts);
    if (rc != MQTTASYNC_SUCCESS) {
        snprintf(err, errlen, "cannot create the client for %s: %s", ep->servers_text,
                 MQTTAsync_strerror(rc));
        ep->client = NULL;
        return -1;
    }
    pthread_mutex_lock(&ep->mu);
    ep->conn_lost = false;
    ep->connected[0] = '\0';
    pthread_mutex_unlock(&ep->mu);
    rc = MQTTAsync_setCallbacks(ep->client, ep, on_connection_lost, on_message, NULL);
    if (rc != MQTTASYNC_SUCCESS) {
        snprintf(err, errlen, "setCallbacks: %s", MQTTAsync_strerror(rc));
        client_teardown(ep, false);
        return -1;
    }

    MQTTAsync_connectOptions o3 = MQTTAsync_connectOptions_initializer;
    MQTTAsync_connectOptions o5 = MQTTAsync_connectOptions_initializer5;
    MQTTAsync_connectOptions co = ep->v5 ? o5 : o3;
    MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
    MQTTProperties props = MQTTProperties_initializer;
    co.keepAliveInterval = (int)s->keepalive;
    co.connectTimeout = (int)((s->connect_timeout_ms + 999) / 1000);
    co.automaticReconnect = 0;
    if (ep->n_uris > 1) {
        /* paho tries them in order, from the first, on this connect; the
         * success data names the one that accepted (note_connected) */
        co.serverURIcount = (int)ep->n_uris;
        co.serverURIs = (char *const *)ep->uris;
    }
    co.username = s->user;
    co.password = ep->password;
    co.context = ep;
    if (ep->v5) {
        co.cleanstart = s->clean_start;
        co.onSuccess5 = on_connect_ok5;
        co.onFailure5 = on_connect_fail5;
        if (!s->clean_start && s->session_expiry > 0) {
            MQTTProperty p = {.identifier = MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL};
            p.value.integer4 = (unsigned)s->session_expiry;
            MQTTProperties_add(&props, &p);
        }
        if (s->receive_maximum > 0) {
            MQTTProperty p = {.identifier = MQTTPROPERTY_CODE_RECEIVE_MAXIMUM};
            p.value.integer2 = (unsigned short)s->receive_maximum;
            MQTTProperties_add(&props, &p);
        }
        co.connectProperties = &props;
    } else {
        co.cleansession = s->clean_start;
        co.MQTTVersion = MQTTVERSION_3_1_1;
        co.onSuccess = on_connect_ok;
        co.onFailure = on_connect_fail;
    }
    if (ep->tls) {
        ssl.trustStore = s->ca_file;
        ssl.keyStore = s->cert_file;
        ssl.privateKey = s->key_file;
        ssl.enableServerCertAuth = s->tls_verify;
        ssl.verify = s->tls_verify;
        ssl.ssl_error_cb = on_tls_error;
        ssl.ssl_error_context = ep;
        co.ssl = &ssl;
    }
    pthread_mutex_lock(&ep->mu);
    ep->tls_err[0] = '\0';
    pthread_mutex_unlock(&ep->mu);
    op_begin(ep);
    rc = MQTTAsync_connect(ep->client, &co);
    MQTTProperties_free(&props);
    if (rc != MQTTASYNC_SUCCESS) {
        pthread_mutex_lock(&ep->mu);
        ep->op = OP_IDLE;
        pthread_mutex_unlock(&ep->mu);
        snprintf(err, errlen, "connect to %s: %s", ep->servers_text, MQTTAsync_strerror(rc));
        client_teardown(ep, false);
        return -1;
    }
    char why[256];
    /* paho's connect timeout applies to each server in turn */
    int64_t connect_wait = (int64_t)co.connectTimeout * 1000 * (int64_t)ep->n_uris + 1000;
    if (op_wait(ep, connect_wait, true, why, sizeof why) != 0) {
        char tls_err[sizeof ep->tls_err];
        pthread_mutex_lock(&ep->mu);
        memcpy(tls_err, ep->tls_err, sizeof tls_err);
        pthread_mutex_unlock(&ep->mu);
        snprintf(err, errlen, "connect to %s as '%s'%s%s: %s%s%s%s%s", ep->servers_text, ep->client_id,
                 s->user ? " user " : "", s->user ? s->user : "",
                 ep->n_uris > 1 ? "every server failed, the last with: " : "", why,
                 tls_err[0] ? " (TLS: " : "", tls_err, tls_err[0] ? ")" : "");
        client_teardown(ep, false);
        return -1;
    }

    char where[sizeof ep->connected];
    pthread_mutex_lock(&ep->mu);
    memcpy(where, ep->connected, sizeof where);
    pthread_mutex_unlock(&ep->mu);
    MQTTAsync_responseOptions r3 = MQTTAsync_responseOptions_initializer;
    MQTTAsync_responseOptions r5 = MQTTAsync_callOptions_initializer;
    MQTTAsync_responseOptions ro = ep->v5 ? r5 : r3;
    ro.context = ep;
    if (ep->v5) {
        ro.onSuccess5 = on_sub_ok5;
        ro.onFailure5 = on_sub_fail5;
    } else {
        ro.onSuccess = on_sub_ok;
        ro.onFailure = on_sub_fail;
    }
    op_begin(ep);
    rc = MQTTAsync_subscribeMany(ep->client, (int)ep->n_filters, ep->filters, ep->qos, &ro);
    if (rc != MQTTASYNC_SUCCESS) {
        pthread_mutex_lock(&ep->mu);
        ep->op = OP_IDLE;
        pthread_mutex_unlock(&ep->mu);
        snprintf(err, errlen, "subscribe on %s: %s", where, MQTTAsync_strerror(rc));
        client_teardown(ep, true);
        return -1;
    }
    if (op_wait(ep, s->connect_timeout_ms, true, why, sizeof why) != 0) {
        snprintf(err, errlen, "subscribe on %s: %s", where, why);
        client_teardown(ep, true);
        return -1;
    }
    return 0;
}

/* ---- the supervisor's hooks (endpoints/source_loop.h) --------------------- */

static int loop_open(void *p, char *err, size_t errlen)
{
    return connect_and_subscribe(p, err, errlen);
}

static void loop_up(void *p, bool first, int64_t down_ms)
{
    struct mqtt_ep *ep = p;
    struct endpoint_host *h = ep->host;
    char where[sizeof ep->connected];
    pthread_mutex_lock(&ep->mu);
    memcpy(where, ep->connected, sizeof where);
    pthread_mutex_unlock(&ep->mu);
    if (h->set_source) h->set_source(h, where);
    char after[64] = "";
    if (!first) snprintf(after, sizeof after, " after %lld ms away", (long long)down_ms);
    log_info(COMPONENT, h->name, "connected to %s as '%s' (MQTT %s), subscribed to %zu filter%s at QoS %lld%s%s",
             where, ep->client_id, ep->v5 ? "5" : "3.1.1", ep->n_filters,
             ep->n_filters == 1 ? "" : "s", (long long)ep->s->qos, after,
             ep->failed_attempts ? " (after failed attempts)" : "");
    ep->failed_attempts = 0;
    /* replay: messages of the outage are missing from this replica's ring
     * (the loop told the gateway); the ids restart their context */
    if (!first && h->replay) replay_idctx_reset(&ep->idctx);
}

/* Until the connection is lost or stop is asked. */
static enum source_end loop_run(void *p, struct source_loop *l, char *err, size_t errlen)
{
    struct mqtt_ep *ep = p;
    struct endpoint_host *h = ep->host;
    pthread_mutex_lock(&ep->mu);
    while (!ep->conn_lost && !source_loop_stopping(l)) pthread_cond_wait(&ep->cv, &ep->mu);
    bool lost = ep->conn_lost;
    snprintf(err, errlen, "%s: %s", ep->connected, ep->op_err[0] ? ep->op_err : "connection lost");
    pthread_mutex_unlock(&ep->mu);
    if (h->set_source) h->set_source(h, "");
    return lost && !source_loop_stopping(l) ? SOURCE_LOST : SOURCE_STOPPED;
}

/* After a lost connection (a failed connect tore its client down itself);
 * at stop, finish does it. */
static void loop_close(void *p)
{
    struct mqtt_ep *ep = p;
    if (source_loop_stopping(&ep->loop) || !ep->client) return;
    /* a message may still wait for its sink on the dead connection */
    pthread_mutex_lock(&ep->mu);
    while (ep->in_callback && !ep->abandoned) pthread_cond_wait(&ep->cv, &ep->mu);
    pthread_mutex_unlock(&ep->mu);
    client_teardown(ep, false);
}

static bool loop_failed(void *p, bool was_up, char *err, size_t errlen)
{
    struct mqtt_ep *ep = p;
    (void)err;
    (void)errlen;
    if (!was_up) ep->failed_attempts++;
    return false;
}

/* The loop ended: stop() released or abandoned the message in flight (if
 * any); then the client goes. */
static void loop_finish(void *p)
{
    struct mqtt_ep *ep = p;
    pthread_mutex_lock(&ep->mu);
    while (ep->in_callback && !ep->abandoned && !ep->release) pthread_cond_wait(&ep->cv, &ep->mu);
    while (ep->in_callback && !ep->abandoned) pthread_cond_wait(&ep->cv, &ep->mu);
    pthread_mutex_unlock(&ep->mu);
    if (ep->client) client_teardown(ep, true);
}

static const struct source_loop_ops mqtt_loop_ops = {
    .open = loop_open,
    .run = loop_run,
    .close = loop_close,
    .up = loop_up,
    .failed = loop_failed,
    .finish = loop_finish,
};

/* ---- lifecycle ----------------------------------------------------------- */

static void *mqtt_create(const void *settings, struct endpoint_host *host, char *err, size_t errlen)
{
    const struct mqtt_settings *s = settings;
    struct mqtt_ep *ep = xcalloc(1, sizeof *ep);
    ep->s = s;
    ep->host = host;
    ep->v5 = s->protocol == PROTO_V5;
    ep->n_uris = s->servers.n ? s->servers.n : 1;
    ep->uris = xcalloc(ep->n_uris, sizeof *ep->uris);
    if (s->servers.n)
        for (size_t i = 0; i < s->servers.n; i++) ep->uris[i] = s->servers.v[i];
    else
        ep->uris[0] = s->server ? s->server : DEFAULT_SERVER;
    if (mqtt_servers_validate(ep->uris, ep->n_uris, &ep->tls, err, errlen) != 0) goto fail;
    ep->servers_text = mqtt_servers_join(ep->uris, ep->n_uris);
    char msg[256];
    if (secret_resolve(s->password_env, s->password_file, &ep->password, msg, sizeof msg) != 0) {
        snprintf(err, errlen, "password: %s", msg);
        goto fail;
    }
    if (ep->password && !s->user) {
        snprintf(err, errlen, "a password is set but no user");
        goto fail;
    }
    char id[1024];
    if (mqtt_client_id_format(s->client_id, host->name, util_hostname(), (long)getpid(), id, sizeof id,
                              msg, sizeof msg) < 0) {
        snprintf(err, errlen, "client_id: %s", msg);
        goto fail;
    }
    ep->client_id = xstrdup(id);
    ep->n_filters = s->topics.n;
    ep->filters = xcalloc(ep->n_filters ? ep->n_filters : 1, sizeof *ep->filters);
    ep->qos = xcalloc(ep->n_filters ? ep->n_filters : 1, sizeof *ep->qos);
    for (size_t i = 0; i < ep->n_filters; i++) {
        ep->filters[i] = s->shared_group ? mqtt_share_compose(s->shared_group, s->topics.v[i])
                                         : xstrdup(s->topics.v[i]);
        ep->qos[i] = (int)s->qos;
    }
    ep->slot = xcalloc(1, sizeof *ep->slot);
    pthread_mutex_init(&ep->slot->mu, NULL);
    /* every timed wait of this file is on CLOCK_MONOTONIC: a wall-clock
     * step must neither stretch nor cut it */
    cond_init_clock(&ep->slot->cv, CLOCK_MONOTONIC);
    pthread_mutex_init(&ep->mu, NULL);
    cond_init_clock(&ep->cv, CLOCK_MONOTONIC);
    envelope_init(&ep->env);
    source_loop_init(&ep->loop, &mqtt_loop_ops, ep, host, COMPONENT, "mqtt", s->reconnect_min_ms,
                     s->reconnect_max_ms);
    return ep;
fail:
    secret_free(ep->password);
    free(ep->servers_text);
    free(ep->uris);
    free(ep);
    return NULL;
}

static int mqtt_start(void *p)
{
    struct mqtt_ep *ep = p;
    if (source_loop_running(&ep->loop)) return 0;
    if (ep->abandoned) return -1; /* paho is parked until exit */
    pthread_mutex_lock(&ep->mu);
    ep->release = false;
    ep->stop_deadline_ms = 0;
    ep->conn_lost = false;
    ep->rt_count = 0;
    ep->rt_sum_us = 0;
    ep->rt_max_us = 0;
    pthread_mutex_unlock(&ep->mu);
    ep->failed_attempts = 0;
    char err[1024];
    if (source_loop_start(&ep->loop, err, sizeof err) < 0) {
        log_error(COMPONENT, ep->host->name, "%s", err);
        return -1;
    }
    return 0;
}

static void mqtt_stop(void *p)
{
    struct mqtt_ep *ep = p;
    if (!source_loop_running(&ep->loop)) return;
    struct endpoint_host *h = ep->host;
    int64_t deadline = clock_mono_ms() + ep->s->stop_timeout_ms;
    pthread_mutex_lock(&ep->mu);
    ep->stop_deadline_ms = deadline;
    source_loop_request_stop(&ep->loop);
    pthread_cond_broadcast(&ep->cv);
    /* Give the message waiting for its sink (if any) the stop timeout,
     * unless its outcome is already final (not leader, shutdown, term ended:
     * nothing can change it, so there is nothing to wait for). */
    while (ep->in_callback && !ep->awaiting_stop && clock_mono_ms() < deadline) {
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, 20);
        pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
    }
    if (!ep->in_callback) {
        ep->release = true; /* a message arriving before the disconnect: no wait */
    } else {
        char why[160];
        if (ep->awaiting_stop)
            snprintf(why, sizeof why, "was not delivered (%s)", msg_outcome_name(ep->final_outcome));
        else
            snprintf(why, sizeof why, "still waits for the sink after %lld ms",
                     (long long)ep->s->stop_timeout_ms);
        if (h->stopping(h)) {
            ep->abandoned = true;
            log_warn(COMPONENT, h->name, "a QoS %lld message %s: leaving it unacknowledged "
                     "(the broker redelivers it to this session)", (long long)ep->s->qos, why);
        } else {
            /* Demotion. paho 1.3 sends the PUBACK/PUBCOMP as the callback
             * returns and has no way to withhold it: only a callback that
             * never returns does, and that parks paho's receive thread,
             * shared by every MQTT client of the process, for good. So the
             * message is acknowledged; an undelivered one was counted as
             * dropped by the gateway (not_leader / term_ended). With a
             * session shared by the replicas (one client_id, clean_start =
             * false), a connection the next leader already took over makes
             * this acknowledgement void and the broker redelivers it. */
            ep->release = true;
            log_warn(COMPONENT, h->name, "a QoS %lld message %s at demotion: acknowledging it "
                     "(paho cannot withhold the acknowledgement without blocking every MQTT "
                     "client of the process)", (long long)ep->s->qos, why);
        }
        pthread_cond_broadcast(&ep->cv);
    }
    pthread_mutex_unlock(&ep->mu);
    source_loop_join(&ep->loop);
    pthread_mutex_lock(&ep->mu);
    uint64_t rt_n = ep->rt_count;
    int64_t rt_sum = ep->rt_sum_us, rt_max = ep->rt_max_us;
    pthread_mutex_unlock(&ep->mu);
    if (rt_n > 0)
        log_info(COMPONENT, h->name, "stopped; ack after_sink: %llu messages, sink round trip "
                 "(emit -> accepted) mean %lld us, max %lld us",
                 (unsigned long long)rt_n, (long long)(rt_sum / (int64_t)rt_n), (long long)rt_max);
    else
        log_info(COMPONENT, h->name, "stopped");
}

static void mqtt_destroy(void *p)
{
    struct mqtt_ep *ep = p;
    if (!ep) return;
    mqtt_stop(ep);
    if (ep->abandoned) {
        /* paho's receive thread is parked in our callback and may still
         * touch ep, its envelope and the slot until the process exits. */
        return;
    }
    for (size_t i = 0; i < ep->n_filters; i++) free(ep->filters[i]);
    free(ep->filters);
    free(ep->qos);
    free(ep->client_id);
    free(ep->servers_text);
    free(ep->uris);
    secret_free(ep->password); /* wiped: memset before free may be optimised away */
    envelope_free(&ep->env);
    source_loop_destroy(&ep->loop);
    pthread_mutex_destroy(&ep->slot->mu);
    pthread_cond_destroy(&ep->slot->cv);
    free(ep->slot);
    pthread_mutex_destroy(&ep->mu);
    pthread_cond_destroy(&ep->cv);
    free(ep);
}

const struct endpoint_ops ep_mqtt_ops = {
    .type = "mqtt",
    .settings = mqtt_defs,
    .settings_size = sizeof(struct mqtt_settings),
    .auto_guard = mqtt_auto_guard,
    .validate = mqtt_validate,
    .replay_check = mqtt_replay_check,
    .create = mqtt_create,
    .start = mqtt_start,
    .stop = mqtt_stop,
    .destroy = mqtt_destroy,
};
