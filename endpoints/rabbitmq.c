/* The rabbitmq endpoint (rabbitmq-c 0.11).
 *
 * private mode (default): on promotion connect, optionally declare the
 * exchange, declare an exclusive auto-delete queue, bind it with every
 * routing key, consume. Only the leader has a queue bound, so only it
 * receives the broadcast; when it stops (or dies) its connection closes and
 * the broker deletes the queue. Messages published while no replica has a
 * queue bound (failover, reconnect) are lost: that is what a private queue
 * means.
 *
 * group mode: one durable queue named for the endpoint, shared by every
 * replica, consumed only by the leader with manual acks after the sink
 * accepted the message; what is published during a failover waits in the
 * queue and unacked deliveries are redelivered to the next leader.
 *
 * Threading: one consumer thread per promotion owns the connection
 * (rabbitmq-c connections are not thread safe). Acks are decided on the
 * forwarder thread (message done callback), queued under a mutex, and sent
 * by the consumer thread between waits. stop() shuts the socket down from
 * the stopping thread to interrupt any blocking read. */
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "endpoints/endpoint.h"
#include "endpoints/source_loop.h"
#include "endpoints/rabbitmq_util.h"
#include "common/envelope.h"
#include "common/log.h"
#include "common/util.h"

#define COMP "rabbitmq"
#define CHANNEL 1
#define DEFAULT_HOST "127.0.0.1"

enum { XT_FANOUT, XT_TOPIC, XT_DIRECT, XT_HEADERS };
enum { MODE_PRIVATE, MODE_GROUP };

static const char *const exchange_types[] = { "fanout", "topic", "direct", "headers", NULL };
static const char *const modes[] = { "private", "group", NULL };
static const char *const matches[] = { "all", "any", NULL };

struct rmq_settings {
    char *host; /* NULL: not given (127.0.0.1 unless hosts is) */
    struct strlist hosts;
    int64_t port;
    char *vhost;
    char *user;
    char *password_env;
    char *password_file;
    int64_t heartbeat;
    int64_t connect_timeout_ms;
    int64_t rpc_timeout_ms;
    bool tls;
    char *ca_file;
    char *cert_file;
    char *key_file;
    bool verify_peer;
    bool verify_hostname;
    char *exchange;
    int exchange_type;
    bool declare_exchange;
    bool exchange_durable;
    struct strlist routing_keys;
    struct strlist bind_headers;
    int bind_match;
    char *queue;
    int64_t prefetch;
    char *ack;
    int mode;
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t ack_drain_ms;
};

#define OFF(f) offsetof(struct rmq_settings, f)
static const struct setting_def defs[] = {
    /* no default in the table: validate must see whether host was given
     * (host and hosts together are an error); create uses 127.0.0.1 */
    { "host", SETTING_STRING, OFF(host),
      .help = "broker host name or address (default 127.0.0.1; or use hosts)" },
    { "hosts", SETTING_STRLIST, OFF(hosts),
      .help = "brokers tried in order on every (re)connect: [\"host:port\", \"[::1]:5672\", ...] "
              "(port defaults to 'port'); replaces host" },
    { "port", SETTING_INT, OFF(port), .def = "5672", .min = 1, .max = 65535,
      .help = "broker TCP port (5671 is usual with tls); default port of the hosts entries" },
    { "vhost", SETTING_STRING, OFF(vhost), .def = "/", .help = "AMQP virtual host" },
    { "user", SETTING_STRING, OFF(user), .def = "guest", .help = "user name of the broker login" },
    { "password_env", SETTING_STRING, OFF(password_env),
      .help = "name of the environment variable holding the password" },
    { "password_file", SETTING_STRING, OFF(password_file),
      .help = "file whose first line is the password" },
    { "heartbeat", SETTING_INT, OFF(heartbeat), .def = "30", .min = 0, .max = 3600,
      .help = "AMQP heartbeat in seconds (0 = off)" },
    { "connect_timeout_ms", SETTING_INT, OFF(connect_timeout_ms), .def = "2000", .min = 1,
      .max = 600000, .help = "TCP/TLS connect timeout" },
    { "rpc_timeout_ms", SETTING_INT, OFF(rpc_timeout_ms), .def = "10000", .min = 1,
      .max = 600000, .help = "timeout of each AMQP request (login, declare, bind...)" },
    { "tls", SETTING_BOOL, OFF(tls), .def = "false", .help = "connect with TLS" },
    { "ca_file", SETTING_STRING, OFF(ca_file), .help = "PEM CA bundle to verify the broker" },
    { "cert_file", SETTING_STRING, OFF(cert_file), .help = "PEM client certificate" },
    { "key_file", SETTING_STRING, OFF(key_file), .help = "PEM client private key" },
    { "verify_peer", SETTING_BOOL, OFF(verify_peer), .def = "true",
      .help = "verify the broker certificate" },
    { "verify_hostname", SETTING_BOOL, OFF(verify_hostname), .def = "true",
      .help = "check the broker certificate names the host" },
    { "exchange", SETTING_STRING, OFF(exchange), .required = true,
      .help = "exchange to bind the queue to" },
    { "exchange_type", SETTING_ENUM, OFF(exchange_type), .def = "fanout",
      .choices = exchange_types, .help = "fanout, topic, direct or headers" },
    { "declare_exchange", SETTING_BOOL, OFF(declare_exchange), .def = "false",
      .help = "declare the exchange (a type mismatch is a clear error)" },
    { "exchange_durable", SETTING_BOOL, OFF(exchange_durable), .def = "true",
      .help = "durable flag used when declaring the exchange" },
    { "routing_keys", SETTING_STRLIST, OFF(routing_keys),
      .help = "binding keys, one binding each (fanout: default one empty key)" },
    { "bind_headers", SETTING_STRLIST, OFF(bind_headers),
      .help = "headers exchange: \"key=value\" pairs the binding matches" },
    { "bind_match", SETTING_ENUM, OFF(bind_match), .def = "all", .choices = matches,
      .help = "headers exchange: x-match all or any" },
    { "queue", SETTING_STRING, OFF(queue),
      .help = "queue name template ({name} {owner} {type} {hostname} {pid}); private "
              "default: server-named; group default: baton.{owner}.{name}" },
    { "prefetch", SETTING_INT, OFF(prefetch), .def = "256", .min = 1, .max = 65535,
      .help = "unacked deliveries in flight with ack = after_sink" },
    { "ack", SETTING_STRING, OFF(ack),
      .help = "\"auto\" (default in private mode) or \"after_sink\" (required in group mode)" },
    { "mode", SETTING_ENUM, OFF(mode), .def = "private", .choices = modes,
      .help = "private (own exclusive queue) or group (shared durable queue)" },
    { "reconnect_min_ms", SETTING_INT, OFF(reconnect_min_ms), .def = "100", .min = 1,
      .max = 600000, .help = "first reconnect backoff" },
    { "reconnect_max_ms", SETTING_INT, OFF(reconnect_max_ms), .def = "5000", .min = 1,
      .max = 600000, .help = "reconnect backoff cap" },
    { "ack_drain_ms", SETTING_INT, OFF(ack_drain_ms), .def = "2000", .min = 0, .max = 600000,
      .help = "after_sink: how long stop waits for in-flight messages to be acked" },
    SETTINGS_END
};
#undef OFF

/* One queued ack decision, made on the forwarder thread. */
struct ack_item {
    uint64_t seq;
    enum rmq_ack_action action;
};

struct rmq_ep {
    const struct rmq_settings *s;
    struct endpoint_host *host;
    struct net_host *hosts; /* hosts list, or the one host/port */
    size_t nhosts;
    char *password;
    char queue_cfg[256]; /* expanded template, "" = server-named */
    bool group;
    bool after_sink;

    struct source_loop loop; /* the consumer thread (endpoints/source_loop.h) */

    pthread_mutex_t lock; /* sockfd, exited */
    pthread_cond_t cond;
    int sockfd;           /* of the live connection, -1 otherwise */
    bool exited;          /* the consumer loop ended (stop's bounded wait) */

    pthread_mutex_t ack_lock;
    struct ack_item *acks;
    size_t nacks, acks_cap;

    /* consumer thread only */
    amqp_connection_state_t conn;
    unsigned gen;          /* connection generation, 16 bits used */
    uint64_t outstanding;  /* delivered with manual ack, not yet resolved */
    unsigned deferred;     /* emitted deferred since the last flush */
    char queue[256];       /* queue actually bound */
    char where[300];       /* host:port of the live connection */
    struct envelope env;
    char reason[1024];     /* last error (every host's, when all failed) */
    char lost_reason[1024]; /* why the last session broke */
    struct ratelimit rl;
    /* start failures: the guard retries every retry interval; the same
     * reason is logged at most every 5 s, a new reason at once */
    char last_start_error[1024];
    struct ratelimit start_rl;
};

/* ------------------------------------------------------------------ */
/* settings */

static enum guard_kind auto_guard(const void *sv)
{
    (void)sv;
    /* both modes: only the leader consumes (group mode without a guard would
     * be competing consumers, which is legitimate with guard = "none") */
    return GUARD_ACTIVE;
}

static int validate(const void *sv, enum guard_kind guard, bool force, char *msg, size_t len)
{
    const struct rmq_settings *s = sv;
    if (s->hosts.n && s->host) {
        snprintf(msg, len, "set either 'host' or 'hosts', not both ('hosts' lists every broker: "
                           "hosts = [\"host:port\", ...])");
        return -1;
    }
    for (size_t i = 0; i < s->hosts.n; i++) {
        struct net_host hp;
        char m[400];
        if (net_host_parse(s->hosts.v[i], (int)s->port, &hp, m, sizeof m) < 0) {
            snprintf(msg, len, "hosts[%zu]: %s", i, m);
            return -1;
        }
    }
    if (!s->exchange || !*s->exchange) {
        snprintf(msg, len, "'exchange' must name an exchange (the default exchange \"\" "
                           "cannot be bound)");
        return -1;
    }
    if ((s->exchange_type == XT_TOPIC || s->exchange_type == XT_DIRECT) && s->routing_keys.n == 0) {
        snprintf(msg, len, "'routing_keys' is required for a %s exchange",
                 exchange_types[s->exchange_type]);
        return -1;
    }
    if (s->exchange_type != XT_HEADERS && s->bind_headers.n) {
        snprintf(msg, len, "'bind_headers' only applies to exchange_type = \"headers\"");
        return -1;
    }
    for (size_t i = 0; i < s->bind_headers.n; i++) {
        const char *eq = strchr(s->bind_headers.v[i], '=');
        if (!eq || eq == s->bind_headers.v[i]) {
            snprintf(msg, len, "'bind_headers' entry \"%s\": expected \"key=value\"",
                     s->bind_headers.v[i]);
            return -1;
        }
    }
    if (s->ack && strcmp(s->ack, "auto") != 0 && strcmp(s->ack, "after_sink") != 0) {
        snprintf(msg, len, "'ack' must be \"auto\" or \"after_sink\", not \"%s\"", s->ack);
        return -1;
    }
    if (s->mode == MODE_GROUP && s->ack && strcmp(s->ack, "auto") == 0) {
        snprintf(msg, len, "mode = \"group\" needs ack = \"after_sink\" (with auto ack a "
                           "failover loses the deliveries in flight)");
        return -1;
    }
    if (s->password_env && s->password_file) {
        snprintf(msg, len, "set only one of 'password_env' and 'password_file'");
        return -1;
    }
    if (!s->password_env && !s->password_file && s->user && strcmp(s->user, "guest") != 0) {
        snprintf(msg, len, "user \"%s\" needs 'password_env' or 'password_file'", s->user);
        return -1;
    }
    if (!s->tls && (s->ca_file || s->cert_file || s->key_file)) {
        snprintf(msg, len, "'ca_file', 'cert_file' and 'key_file' need tls = true");
        return -1;
    }
    if ((s->cert_file != NULL) != (s->key_file != NULL)) {
        snprintf(msg, len, "'cert_file' and 'key_file' go together");
        return -1;
    }
    if (s->tls && s->verify_peer && !s->ca_file) {
        snprintf(msg, len, "tls with verify_peer = true needs 'ca_file'");
        return -1;
    }
    if (s->reconnect_min_ms > s->reconnect_max_ms) {
        snprintf(msg, len, "'reconnect_min_ms' must not exceed 'reconnect_max_ms'");
        return -1;
    }
    if (s->queue && rmq_queue_name_check(s->queue, msg, len) < 0) return -1;
    if (guard == GUARD_NONE && s->mode == MODE_PRIVATE && !force) {
        snprintf(msg, len, "guard = \"none\" with a private queue: every replica binds its own "
                           "queue and forwards every message; use the default guard, mode = "
                           "\"group\", or force_guard = true");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* errors */

static void describe_reply(amqp_rpc_reply_t r, const char *what, char *buf, size_t len)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(buf, len, "%s: ok", what);
        return;
    case AMQP_RESPONSE_NONE:
        snprintf(buf, len, "%s: no reply from the broker", what);
        return;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(buf, len, "%s: %s", what, amqp_error_string2(r.library_error));
        return;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD && r.reply.decoded) {
            const amqp_connection_close_t *c = r.reply.decoded;
            snprintf(buf, len, "%s: broker closed the connection: %u %.*s", what,
                     (unsigned)c->reply_code, (int)c->reply_text.len,
                     (const char *)c->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD && r.reply.decoded) {
            const amqp_channel_close_t *c = r.reply.decoded;
            snprintf(buf, len, "%s: broker closed the channel: %u %.*s", what,
                     (unsigned)c->reply_code, (int)c->reply_text.len,
                     (const char *)c->reply_text.bytes);
        } else {
            snprintf(buf, len, "%s: unexpected broker method 0x%08x", what, (unsigned)r.reply.id);
        }
        return;
    }
    snprintf(buf, len, "%s: unknown reply type %d", what, (int)r.reply_type);
}

static int check_reply(struct rmq_ep *ep, amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL) return 0;
    describe_reply(r, what, ep->reason, sizeof ep->reason);
    return -1;
}

/* ------------------------------------------------------------------ */
/* connection (consumer thread) */

static void session_close(struct rmq_ep *ep, bool graceful)
{
    if (!ep->conn) return;
    if (graceful) {
        amqp_channel_close(ep->conn, CHANNEL, AMQP_REPLY_SUCCESS);
        amqp_connection_close(ep->conn, AMQP_REPLY_SUCCESS);
    }
    pthread_mutex_lock(&ep->lock);
    ep->sockfd = -1;
    pthread_mutex_unlock(&ep->lock);
    amqp_destroy_connection(ep->conn);
    ep->conn = NULL;
}

static amqp_table_t headers_bind_args(const struct rmq_settings *s, amqp_table_entry_t *e)
{
    amqp_table_t t = { 0, e };
    e[0].key = amqp_cstring_bytes("x-match");
    e[0].value.kind = AMQP_FIELD_KIND_UTF8;
    e[0].value.value.bytes = amqp_cstring_bytes(matches[s->bind_match]);
    t.num_entries = 1;
    for (size_t i = 0; i < s->bind_headers.n; i++) {
        const char *kv = s->bind_headers.v[i];
        const char *eq = strchr(kv, '=');
        amqp_table_entry_t *x = &e[t.num_entries++];
        x->key.bytes = (void *)kv;
        x->key.len = (size_t)(eq - kv);
        x->value.kind = AMQP_FIELD_KIND_UTF8;
        x->value.value.bytes = amqp_cstring_bytes(eq + 1);
    }
    return t;
}

/* rabbitmq-c reports every failed TCP connect as "a socket error occurred"
 * (errno is lost inside it). Only then, for the message: one more
 * non-blocking connect to the same address, at most timeout_ms, whose
 * SO_ERROR names the cause ("connection refused"). Returns false when the
 * probe found nothing to report (it connected, or timed out). */
static bool tcp_failure_cause(const char *host, int port, int64_t timeout_ms, char *buf, size_t len)
{
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res) return false;
    int err = 0;
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    res->ai_protocol);
    if (fd >= 0) {
        if (connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
            err = errno;
            if (err == EINPROGRESS) {
                struct pollfd p = { fd, POLLOUT, 0 };
                err = 0;
                if (poll(&p, 1, (int)timeout_ms) == 1) {
                    socklen_t sl = sizeof err;
                    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0) err = 0;
                }
            }
        }
        close(fd);
    }
    freeaddrinfo(res);
    if (err == 0) return false;
    snprintf(buf, len, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z') buf[0] = (char)(buf[0] - 'A' + 'a');
    return true;
}

/* TCP (or TLS), login and channel 1 on one broker. 0 with ep->where set, or
 * -1 with ep->reason (naming the broker) and no connection. */
static int connect_host(struct rmq_ep *ep, const struct net_host *hp)
{
    const struct rmq_settings *s = ep->s;
    char hostport[300], where[400];
    net_host_format(hp, hostport, sizeof hostport);
    snprintf(where, sizeof where, "%s vhost \"%s\"", hostport, s->vhost);

    ep->conn = amqp_new_connection();
    if (!ep->conn) {
        snprintf(ep->reason, sizeof ep->reason, "amqp_new_connection: out of memory");
        return -1;
    }
    amqp_socket_t *sock;
    if (s->tls) {
        sock = amqp_ssl_socket_new(ep->conn);
        if (!sock) {
            snprintf(ep->reason, sizeof ep->reason, "TLS socket: cannot create (OpenSSL init)");
            goto fail;
        }
        amqp_ssl_socket_set_verify_peer(sock, s->verify_peer);
        amqp_ssl_socket_set_verify_hostname(sock, s->verify_hostname);
        if (s->ca_file) {
            int rc = amqp_ssl_socket_set_cacert(sock, s->ca_file);
            if (rc != AMQP_STATUS_OK) {
                snprintf(ep->reason, sizeof ep->reason, "TLS ca_file \"%s\": %s", s->ca_file,
                         amqp_error_string2(rc));
                goto fail;
            }
        }
        if (s->cert_file) {
            int rc = amqp_ssl_socket_set_key(sock, s->cert_file, s->key_file);
            if (rc != AMQP_STATUS_OK) {
                snprintf(ep->reason, sizeof ep->reason, "TLS cert_file \"%s\" / key_file \"%s\": %s",
                         s->cert_file, s->key_file, amqp_error_string2(rc));
                goto fail;
            }
        }
    } else {
        sock = amqp_tcp_socket_new(ep->conn);
        if (!sock) {
            snprintf(ep->reason, sizeof ep->reason, "amqp_tcp_socket_new: out of memory");
            goto fail;
        }
    }
    struct timeval ctv = { (time_t)(s->connect_timeout_ms / 1000),
                           (suseconds_t)(s->connect_timeout_ms % 1000) * 1000 };
    struct timeval rtv = { (time_t)(s->rpc_timeout_ms / 1000),
                           (suseconds_t)(s->rpc_timeout_ms % 1000) * 1000 };
    amqp_set_handshake_timeout(ep->conn, &rtv);
    amqp_set_rpc_timeout(ep->conn, &rtv);
    int rc = amqp_socket_open_noblock(sock, hp->host, hp->port, &ctv);
    if (rc != AMQP_STATUS_OK) {
        char cause[128];
        const char *text = amqp_error_string2(rc);
        if (rc == AMQP_STATUS_SOCKET_ERROR &&
            tcp_failure_cause(hp->host, hp->port,
                              s->connect_timeout_ms < 1000 ? s->connect_timeout_ms : 1000, cause,
                              sizeof cause))
            text = cause;
        snprintf(ep->reason, sizeof ep->reason, "connect %s%s: %s", hostport,
                 s->tls ? " (tls)" : "", text);
        goto fail;
    }
    pthread_mutex_lock(&ep->lock);
    ep->sockfd = amqp_get_sockfd(ep->conn);
    pthread_mutex_unlock(&ep->lock);
    if (atomic_load(&ep->loop.stop)) {
        snprintf(ep->reason, sizeof ep->reason, "stopped");
        goto fail;
    }

    char what[600];
    snprintf(what, sizeof what, "login as \"%s\" on %s", s->user, where);
    if (check_reply(ep, amqp_login(ep->conn, s->vhost, 0, AMQP_DEFAULT_FRAME_SIZE,
                                   (int)s->heartbeat, AMQP_SASL_METHOD_PLAIN, s->user,
                                   ep->password ? ep->password : ""),
                    what) < 0)
        goto fail;
    amqp_channel_open(ep->conn, CHANNEL);
    snprintf(what, sizeof what, "channel.open on %s", hostport);
    if (check_reply(ep, amqp_get_rpc_reply(ep->conn), what) < 0) goto fail;
    snprintf(ep->where, sizeof ep->where, "%s", hostport);
    return 0;
fail:
    session_close(ep, false);
    return -1;
}

/* Tries the hosts in order, from the first; the first that connects (TCP,
 * login, channel) is used. 0, or -1 with ep->reason naming every host tried
 * and its error ("connect a:1: connection refused; connect b:2: ..."). */
static int connect_any(struct rmq_ep *ep)
{
    if (ep->nhosts == 1) return connect_host(ep, &ep->hosts[0]);
    char all[sizeof ep->reason];
    size_t o = 0;
    all[0] = '\0';
    for (size_t i = 0; i < ep->nhosts; i++) {
        if (i > 0 && atomic_load(&ep->loop.stop)) break;
        if (connect_host(ep, &ep->hosts[i]) == 0) {
            if (i > 0)
                log_info(COMP, ep->host->name, "connected to %s (hosts[%zu]) after: %s", ep->where,
                         i, all);
            return 0;
        }
        if (o < sizeof all - 1) {
            int n = snprintf(all + o, sizeof all - o, "%s%s", i ? "; " : "", ep->reason);
            if (n > 0) o += (size_t)n;
            if (o > sizeof all - 1) o = sizeof all - 1;
        }
    }
    snprintf(ep->reason, sizeof ep->reason, "%s", all);
    return -1;
}

/* Connects, declares, binds and starts consuming. 0, or -1 with ep->reason. */
static int session_open(struct rmq_ep *ep)
{
    const struct rmq_settings *s = ep->s;
    char what[600];
    if (connect_any(ep) < 0) return -1;

    if (s->declare_exchange) {
        snprintf(what, sizeof what, "declare %s exchange \"%s\"", exchange_types[s->exchange_type],
                 s->exchange);
        amqp_exchange_declare(ep->conn, CHANNEL, amqp_cstring_bytes(s->exchange),
                              amqp_cstring_bytes(exchange_types[s->exchange_type]), 0,
                              s->exchange_durable, 0, 0, amqp_empty_table);
        if (check_reply(ep, amqp_get_rpc_reply(ep->conn), what) < 0) goto fail;
    }

    /* private: exclusive + auto-delete (gone with the connection);
     * group: durable, shared, survives leaders */
    snprintf(what, sizeof what, "declare %s queue \"%s\"", ep->group ? "group" : "private",
             ep->queue_cfg);
    amqp_queue_declare_ok_t *qok = amqp_queue_declare(
        ep->conn, CHANNEL, amqp_cstring_bytes(ep->queue_cfg), 0, ep->group ? 1 : 0,
        ep->group ? 0 : 1, ep->group ? 0 : 1, amqp_empty_table);
    if (check_reply(ep, amqp_get_rpc_reply(ep->conn), what) < 0 || !qok) goto fail;
    size_t qn = qok->queue.len < sizeof ep->queue - 1 ? qok->queue.len : sizeof ep->queue - 1;
    memcpy(ep->queue, qok->queue.bytes, qn);
    ep->queue[qn] = '\0';

    amqp_table_entry_t hdr_entries[1 + 64];
    amqp_table_t bind_args = amqp_empty_table;
    if (s->exchange_type == XT_HEADERS) {
        if (s->bind_headers.n > 64) {
            snprintf(ep->reason, sizeof ep->reason, "bind_headers: at most 64 entries");
            goto fail;
        }
        bind_args = headers_bind_args(s, hdr_entries);
    }
    size_t nkeys = s->routing_keys.n ? s->routing_keys.n : 1;
    for (size_t i = 0; i < nkeys; i++) {
        const char *key = s->routing_keys.n ? s->routing_keys.v[i] : "";
        snprintf(what, sizeof what, "bind queue \"%s\" to exchange \"%s\" with key \"%s\"",
                 ep->queue, s->exchange, key);
        amqp_queue_bind(ep->conn, CHANNEL, amqp_cstring_bytes(ep->queue),
                        amqp_cstring_bytes(s->exchange), amqp_cstring_bytes(key), bind_args);
        if (check_reply(ep, amqp_get_rpc_reply(ep->conn), what) < 0) goto fail;
    }
    if (ep->after_sink) {
        amqp_basic_qos(ep->conn, CHANNEL, 0, (uint16_t)s->prefetch, 0);
        if (check_reply(ep, amqp_get_rpc_reply(ep->conn), "basic.qos") < 0) goto fail;
    }
    snprintf(what, sizeof what, "consume from queue \"%s\"", ep->queue);
    amqp_basic_consume(ep->conn, CHANNEL, amqp_cstring_bytes(ep->queue), amqp_empty_bytes, 0,
                       ep->after_sink ? 0 : 1, 0, amqp_empty_table);
    if (check_reply(ep, amqp_get_rpc_reply(ep->conn), what) < 0) goto fail;

    ep->gen = (ep->gen + 1) & 0xFFFFu;
    ep->outstanding = 0;
    return 0;
fail:
    session_close(ep, false);
    return -1;
}

/* ------------------------------------------------------------------ */
/* acks */

static void on_message_done(void *arg, const struct message *m, enum msg_outcome o)
{
    struct rmq_ep *ep = arg;
    struct ack_item it = { m->seq, rmq_ack_action_for(o, ep->group) };
    pthread_mutex_lock(&ep->ack_lock);
    if (ep->nacks == ep->acks_cap) {
        ep->acks_cap = ep->acks_cap ? ep->acks_cap * 2 : 256;
        ep->acks = xrealloc(ep->acks, ep->acks_cap * sizeof *ep->acks);
    }
    ep->acks[ep->nacks++] = it;
    pthread_mutex_unlock(&ep->ack_lock);
}

/* Sends the queued decisions for the live connection. 0, or -1 when the
 * connection failed (ep->reason). Decisions of older connections are
 * dropped: their deliveries were requeued by the broker when it closed. */
static int flush_acks(struct rmq_ep *ep)
{
    struct ack_item local[256];
    for (;;) {
        size_t n;
        pthread_mutex_lock(&ep->ack_lock);
        n = ep->nacks < 256 ? ep->nacks : 256;
        if (n == 0) {
            pthread_mutex_unlock(&ep->ack_lock);
            return 0;
        }
        memcpy(local, ep->acks, n * sizeof *local);
        memmove(ep->acks, ep->acks + n, (ep->nacks - n) * sizeof *local);
        ep->nacks -= n;
        pthread_mutex_unlock(&ep->ack_lock);
        for (size_t i = 0; i < n; i++) {
            if (rmq_seq_gen(local[i].seq) != ep->gen || !ep->conn) continue;
            if (ep->outstanding) ep->outstanding--;
            uint64_t tag = rmq_seq_tag(local[i].seq);
            int rc = AMQP_STATUS_OK;
            switch (local[i].action) {
            case RMQ_ACK: rc = amqp_basic_ack(ep->conn, CHANNEL, tag, 0); break;
            case RMQ_NACK_REQUEUE: rc = amqp_basic_nack(ep->conn, CHANNEL, tag, 0, 1); break;
            case RMQ_NACK_DROP: rc = amqp_basic_nack(ep->conn, CHANNEL, tag, 0, 0); break;
            case RMQ_LEAVE: break;
            }
            if (rc != AMQP_STATUS_OK) {
                snprintf(ep->reason, sizeof ep->reason, "basic.ack: %s", amqp_error_string2(rc));
                return -1;
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* deliveries */

static void forward(struct rmq_ep *ep, const amqp_envelope_t *d)
{
    struct endpoint_host *h = ep->host;
    struct envelope *e = &ep->env;
    const char *queue = ep->s->mode == MODE_GROUP || ep->queue_cfg[0] ? ep->queue : NULL;
    if (rmq_envelope(e, h->name, h->type, h->epoch(h), clock_wall_ms(), d, queue) > 0) {
        atomic_fetch_add_explicit(&h->stats->malformed, 1, memory_order_relaxed);
        if (ratelimit_ok(&ep->rl, 5000, NULL))
            log_warn(COMP, h->name, "delivery %llu: header values too deeply nested were "
                                    "written as null", (unsigned long long)d->delivery_tag);
    }
    struct message *m = envelope_finish(e);
    if (ep->after_sink) {
        m->done = on_message_done;
        m->done_arg = ep;
        m->seq = rmq_seq_pack(ep->gen, d->delivery_tag);
        ep->outstanding++;
    }
    /* deferred: the deliveries of one read go out together at the flush
     * after it, on this thread when the forwarder is idle and the sink takes
     * them at once (src/gateway.c host_flush), instead of a forwarder
     * wake-up per delivery. Dropped messages are counted and finished by
     * the host. */
    if (h->emit_deferred) {
        h->emit_deferred(h, m);
        ep->deferred++;
    } else {
        h->emit(h, m);
    }
}

/* Emitted deferred since the last flush: out now. */
static void flush_deferred(struct rmq_ep *ep)
{
    if (ep->deferred) {
        ep->deferred = 0;
        ep->host->flush(ep->host);
    }
}

/* Before a read that may block: when nothing is left in rabbitmq-c's
 * buffer, or a burst has gathered FLUSH_EVERY (a frame cut at the end of
 * the buffer keeps it non-empty). */
#define FLUSH_EVERY 64
static void flush_before_read(struct rmq_ep *ep)
{
    if (ep->deferred && (ep->deferred >= FLUSH_EVERY || (!amqp_data_in_buffer(ep->conn) &&
                                                         !amqp_frames_enqueued(ep->conn))))
        flush_deferred(ep);
}

/* A frame other than basic.deliver arrived. Returns 0 to keep consuming,
 * -1 when the session is over (ep->reason). */
static int handle_other_frame(struct rmq_ep *ep)
{
    amqp_frame_t f;
    int rc = amqp_simple_wait_frame(ep->conn, &f);
    if (rc != AMQP_STATUS_OK) {
        snprintf(ep->reason, sizeof ep->reason, "read: %s", amqp_error_string2(rc));
        return -1;
    }
    if (f.frame_type != AMQP_FRAME_METHOD) return 0; /* stray content frame */
    switch (f.payload.method.id) {
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *c = f.payload.method.decoded;
        snprintf(ep->reason, sizeof ep->reason, "broker closed the channel: %u %.*s",
                 (unsigned)c->reply_code, (int)c->reply_text.len, (const char *)c->reply_text.bytes);
        amqp_channel_close_ok_t ok = { 0 };
        amqp_send_method(ep->conn, CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        return -1;
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *c = f.payload.method.decoded;
        snprintf(ep->reason, sizeof ep->reason, "broker closed the connection: %u %.*s",
                 (unsigned)c->reply_code, (int)c->reply_text.len, (const char *)c->reply_text.bytes);
        amqp_connection_close_ok_t ok = { 0 };
        amqp_send_method(ep->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return -1;
    }
    case AMQP_BASIC_CANCEL_METHOD:
        snprintf(ep->reason, sizeof ep->reason,
                 "broker cancelled the consumer (queue \"%s\" deleted?)", ep->queue);
        return -1;
    default:
        return 0;
    }
}

/* Consumes until stop or connection loss. Returns 0 on stop, -1 on loss. */
static int consume_loop(struct rmq_ep *ep)
{
    const struct timeval idle = { 0, 250 * 1000 }, busy = { 0, 2 * 1000 };
    /* deliveries still deferred (the buffer ends in a cut frame, whose rest
     * is on its way): wait at most 1 ms for it before they go out anyway */
    const struct timeval pending = { 0, 1000 };
    int rc = 0;
    while (!atomic_load_explicit(&ep->loop.stop, memory_order_relaxed)) {
        flush_before_read(ep); /* first: what it delivers inline is acked just below */
        if (ep->after_sink && flush_acks(ep) < 0) {
            rc = -1;
            break;
        }
        amqp_envelope_t d;
        amqp_maybe_release_buffers(ep->conn);
        /* with deliveries awaiting their ack decision, wake up often to send
         * the acks (the broker stops delivering at the prefetch limit) */
        struct timeval tv = ep->deferred ? pending : (ep->after_sink && ep->outstanding) ? busy : idle;
        amqp_rpc_reply_t r = amqp_consume_message(ep->conn, &d, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            forward(ep, &d);
            amqp_destroy_envelope(&d);
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
            if (r.library_error == AMQP_STATUS_TIMEOUT) {
                flush_deferred(ep);
                continue;
            }
            if (r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
                flush_deferred(ep); /* it may block */
                if (handle_other_frame(ep) < 0) {
                    rc = -1;
                    break;
                }
                continue;
            }
        }
        if (atomic_load(&ep->loop.stop)) break;
        describe_reply(r, "consume", ep->reason, sizeof ep->reason);
        rc = -1;
        break;
    }
    flush_deferred(ep); /* nothing emitted stays unannounced to the forwarder */
    return rc;
}

/* after_sink: stop new deliveries and give the forwarder a bounded time to
 * finish what is in flight, so a graceful handover acks it instead of
 * leaving it to be redelivered. */
static void drain_acks(struct rmq_ep *ep)
{
    if (!ep->after_sink || !ep->conn || ep->s->ack_drain_ms <= 0) return;
    int64_t deadline = clock_mono_ms() + ep->s->ack_drain_ms;
    /* nacks is written by the forwarder thread (on_message_done): read it
     * under its lock */
    pthread_mutex_lock(&ep->ack_lock);
    size_t queued = ep->nacks;
    pthread_mutex_unlock(&ep->ack_lock);
    if (ep->outstanding == 0 && queued == 0) return;
    /* no basic.cancel: it is a round trip that may interleave deliveries;
     * anything delivered but not emitted is requeued when we close */
    while (clock_mono_ms() < deadline) {
        if (flush_acks(ep) < 0) return;
        if (ep->outstanding == 0) break;
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (ep->outstanding)
        log_info(COMP, ep->host->name,
                 "stopping with %llu deliveries unacked: the broker requeues them",
                 (unsigned long long)ep->outstanding);
}

/* ------------------------------------------------------------------ */
/* consumer thread */

/* The supervisor's hooks (endpoints/source_loop.h). */

static int loop_open(void *p, char *err, size_t errlen)
{
    struct rmq_ep *ep = p;
    if (session_open(ep) == 0) return 0;
    snprintf(err, errlen, "%s", ep->reason);
    return -1;
}

static void loop_up(void *p, bool first, int64_t down_ms)
{
    struct rmq_ep *ep = p;
    struct endpoint_host *h = ep->host;
    const struct rmq_settings *s = ep->s;
    if (h->set_source) h->set_source(h, ep->where);
    if (first) {
        log_info(COMP, h->name, "consuming from %s queue \"%s\" bound to %s exchange \"%s\" "
                                "(%zu binding%s, ack %s) on %s",
                 ep->group ? "group" : "private", ep->queue, exchange_types[s->exchange_type],
                 s->exchange, s->routing_keys.n ? s->routing_keys.n : 1,
                 s->routing_keys.n > 1 ? "s" : "", ep->after_sink ? "after_sink" : "auto",
                 ep->where);
    } else {
        log_info(COMP, h->name, "reconnected to %s: consuming from queue \"%s\" again; %s for "
                                "%lld ms (%s)",
                 ep->where, ep->queue,
                 ep->group ? "deliveries waited in the group queue"
                           : "no private queue was bound",
                 (long long)down_ms, ep->lost_reason);
    }
    ep->last_start_error[0] = '\0';
}

static enum source_end loop_run(void *p, struct source_loop *l, char *err, size_t errlen)
{
    struct rmq_ep *ep = p;
    struct endpoint_host *h = ep->host;
    int rc = consume_loop(ep);
    if (h->set_source) h->set_source(h, "");
    if (rc == 0 || source_loop_stopping(l)) {
        drain_acks(ep);
        return SOURCE_STOPPED;
    }
    snprintf(ep->lost_reason, sizeof ep->lost_reason, "%s", ep->reason);
    snprintf(err, errlen, "%s: %s", ep->where, ep->reason);
    return SOURCE_LOST;
}

static void loop_close(void *p)
{
    session_close(p, false); /* the socket may already be shut down */
}

/* stop() waits for this with a monotonic bound and then joins at once
 * (pthread_clockjoin_np did that, but ThreadSanitizer does not see its
 * synchronisation). */
static void loop_finish(void *p)
{
    struct rmq_ep *ep = p;
    pthread_mutex_lock(&ep->lock);
    ep->exited = true;
    pthread_cond_broadcast(&ep->cond);
    pthread_mutex_unlock(&ep->lock);
}

static const struct source_loop_ops rmq_loop_ops = {
    .open = loop_open,
    .run = loop_run,
    .close = loop_close,
    .up = loop_up,
    .finish = loop_finish,
};

/* ------------------------------------------------------------------ */
/* ops */

static void *create(const void *sv, struct endpoint_host *host, char *err, size_t errlen)
{
    const struct rmq_settings *s = sv;
    char msg[512];
    if (validate(sv, host->guard, true, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "%s", msg);
        return NULL;
    }
    struct rmq_ep *ep = xcalloc(1, sizeof *ep);
    ep->s = s;
    ep->host = host;
    ep->nhosts = s->hosts.n ? s->hosts.n : 1;
    ep->hosts = xcalloc(ep->nhosts, sizeof *ep->hosts);
    if (s->hosts.n) {
        for (size_t i = 0; i < s->hosts.n; i++)
            (void)net_host_parse(s->hosts.v[i], (int)s->port, &ep->hosts[i], msg, sizeof msg);
    } else {
        /* the single host is a name or an address as given (no ":port") */
        snprintf(ep->hosts[0].host, sizeof ep->hosts[0].host, "%s",
                 s->host ? s->host : DEFAULT_HOST);
        ep->hosts[0].port = (int)s->port;
    }
    ep->group = s->mode == MODE_GROUP;
    host->source_redelivers = ep->group;
    ep->after_sink = ep->group || (s->ack && strcmp(s->ack, "after_sink") == 0);
    ep->sockfd = -1;
    if (s->password_env || s->password_file) {
        if (secret_resolve(s->password_env, s->password_file, &ep->password, msg, sizeof msg) < 0) {
            snprintf(err, errlen, "password: %s", msg);
            free(ep->hosts);
            free(ep);
            return NULL;
        }
    } else {
        ep->password = xstrdup("guest"); /* validate allows this only for user guest */
    }
    const char *tmpl = s->queue;
    char deftmpl[64];
    if (!tmpl && ep->group) {
        snprintf(deftmpl, sizeof deftmpl, "%s", host->owner && *host->owner
                                                    ? "baton.{owner}.{name}" : "baton.{name}");
        tmpl = deftmpl;
    }
    if (tmpl) {
        struct rmq_name_vars v = { host->name, host->owner, host->type, util_hostname(),
                                   (long)getpid() };
        if (rmq_queue_name_expand(tmpl, &v, ep->queue_cfg, sizeof ep->queue_cfg, msg,
                                  sizeof msg) < 0) {
            snprintf(err, errlen, "%s", msg);
            secret_free(ep->password);
            free(ep->hosts);
            free(ep);
            return NULL;
        }
    }
    pthread_mutex_init(&ep->lock, NULL);
    cond_init_clock(&ep->cond, CLOCK_MONOTONIC);
    pthread_mutex_init(&ep->ack_lock, NULL);
    envelope_init(&ep->env);
    source_loop_init(&ep->loop, &rmq_loop_ops, ep, host, COMP, "amqp", s->reconnect_min_ms,
                     s->reconnect_max_ms);
    if (errlen) err[0] = '\0';
    return ep;
}

static void shutdown_socket(struct rmq_ep *ep)
{
    pthread_mutex_lock(&ep->lock);
    if (ep->sockfd >= 0) shutdown(ep->sockfd, SHUT_RDWR);
    pthread_mutex_unlock(&ep->lock);
}

static int start(void *p)
{
    struct rmq_ep *ep = p;
    if (source_loop_running(&ep->loop)) return 0;
    pthread_mutex_lock(&ep->lock);
    ep->exited = false;
    pthread_mutex_unlock(&ep->lock);
    pthread_mutex_lock(&ep->ack_lock);
    ep->nacks = 0; /* decisions for older connections are void */
    pthread_mutex_unlock(&ep->ack_lock);
    char err[sizeof ep->last_start_error];
    if (source_loop_start(&ep->loop, err, sizeof err) == 0) {
        ep->last_start_error[0] = '\0';
        return 0;
    }
    /* the guard retries every retry interval: the same reason is logged at
     * most every 5 s, a new one at once */
    long long supp = 0;
    if (strcmp(err, ep->last_start_error) != 0) {
        snprintf(ep->last_start_error, sizeof ep->last_start_error, "%s", err);
        ep->start_rl.next_ms = 0;
        ep->start_rl.suppressed = 0;
    }
    if (ratelimit_ok(&ep->start_rl, 5000, &supp)) {
        if (supp)
            log_error(COMP, ep->host->name, "cannot start: %s (%lld more times since the "
                      "last report)", err, supp);
        else
            log_error(COMP, ep->host->name, "cannot start: %s", err);
    }
    return -1;
}

static void stop(void *p)
{
    struct rmq_ep *ep = p;
    if (!source_loop_running(&ep->loop)) return;
    source_loop_request_stop(&ep->loop);
    if (ep->after_sink && ep->s->ack_drain_ms > 0) {
        /* let the consumer ack what the forwarder finishes meanwhile; the
         * bound is on CLOCK_MONOTONIC (a wall-clock step must not stretch
         * or cut it) */
        struct timespec ts = clock_deadline(CLOCK_MONOTONIC, ep->s->ack_drain_ms + 500);
        pthread_mutex_lock(&ep->lock);
        while (!ep->exited && pthread_cond_timedwait(&ep->cond, &ep->lock, &ts) == 0) {
        }
        bool exited = ep->exited;
        pthread_mutex_unlock(&ep->lock);
        if (exited) {
            source_loop_join(&ep->loop);
            return;
        }
    }
    shutdown_socket(ep);
    source_loop_join(&ep->loop);
}

static void destroy(void *p)
{
    struct rmq_ep *ep = p;
    if (!ep) return;
    stop(ep);
    envelope_free(&ep->env);
    free(ep->acks);
    free(ep->hosts);
    secret_free(ep->password); /* wiped: memset before free may be optimised away */
    source_loop_destroy(&ep->loop);
    pthread_mutex_destroy(&ep->lock);
    pthread_cond_destroy(&ep->cond);
    pthread_mutex_destroy(&ep->ack_lock);
    free(ep);
}

const struct endpoint_ops ep_rabbitmq_ops = {
    .type = "rabbitmq",
    .settings = defs,
    .settings_size = sizeof(struct rmq_settings),
    .auto_guard = auto_guard,
    .validate = validate,
    .create = create,
    .start = start,
    .stop = stop,
    .destroy = destroy,
};
