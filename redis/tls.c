/* TLS for Redis connections: an OpenSSL bridge over a socketpair.
 *
 * Why this design: hiredis 0.14.1 (Debian 12's libhiredis) has no TLS, and
 * hiredis 1.x's hiredis_ssl is not packaged for it. Every Redis connection
 * baton makes is a blocking hiredis context (commands with SO_RCVTIMEO /
 * SO_SNDTIMEO timeouts, pub/sub reads), and hiredis 0.14 cannot take custom
 * read/write functions; but it accepts an already connected descriptor
 * (redisConnectFd). So the TLS session is terminated here and hiredis talks
 * plain RESP over one end of an AF_UNIX socketpair: nothing in the lockers,
 * redis_psub, CDC or `baton status` changes, the command timeouts still
 * apply (they are socket options on hiredis's end), and a broken TLS
 * session is an EOF to hiredis, which every caller already handles as a
 * lost connection. The alternatives were worse: vendoring hiredis 1.x
 * (a second hiredis in the binary next to Debian's), or a stunnel-like
 * helper process per replica (another process to supervise).
 *
 * The caller's thread connects and runs the handshake itself (non-blocking
 * sockets, poll, one deadline for both), so every error (refused, timed
 * out, certificate verify failed, hostname mismatch, not a TLS port) is
 * returned to the caller naming host:port, and nothing is ever sent in
 * plain text. After the handshake the session is handed to ONE bridge
 * thread for the whole process (started on first use): a poll loop over
 * every bridged connection, non-blocking on both sides, SSL_read/SSL_write
 * retried on WANT_READ/WANT_WRITE with the same arguments, one 16 KiB
 * buffer per direction (back-pressure: nothing is read from a side whose
 * buffer is still full). When hiredis closes its end (redisFree), the
 * bridge sends close_notify and frees the session. When the server or the
 * network ends it (a close, a reset, a TLS error: logged), the bridge
 * delivers what the server already sent, frees the TLS session, and shuts
 * down its end for writing, so hiredis reads EOF (a broken connection);
 * it keeps discarding what hiredis still writes until hiredis closes too
 * (closing first would turn hiredis's next write into a SIGPIPE). Cost per connection: ~33 KiB of buffers plus OpenSSL's session
 * state; one thread in all. */
#include "redis/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/glog.h"
#include "base/util.h"

#define BRIDGE_BUF 16384 /* one TLS record of plaintext */
#define BRIDGE_ROUNDS 16 /* pump rounds per connection before polling again */

/* ---- errors ---------------------------------------------------------------- */

/* The reason for the last failed OpenSSL call on this thread: the library's
 * reason string ("certificate verify failed"), with the verification result
 * when that is the cause ("hostname mismatch") and a hint when the peer did
 * not answer in TLS at all. */
static void ssl_reason(SSL *ssl, int ssl_err, int ret, bool handshake, char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    int lib = ERR_GET_LIB(e), reason = ERR_GET_REASON(e);
    const char *rs = e ? ERR_reason_error_string(e) : NULL;
    if (ssl_err == SSL_ERROR_SSL && lib == ERR_LIB_SSL && reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
        snprintf(buf, len, "certificate verify failed: %s",
                 v != X509_V_OK ? X509_verify_cert_error_string(v) : "unknown reason");
    } else if (ssl_err == SSL_ERROR_SSL && lib == ERR_LIB_SSL &&
               (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
                reason == SSL_R_UNKNOWN_PROTOCOL || reason == SSL_R_HTTP_REQUEST) &&
               handshake) {
        snprintf(buf, len, "%s: the server did not answer in TLS (a plain-text port?)",
                 rs ? rs : "protocol error");
    } else if ((ssl_err == SSL_ERROR_SSL && lib == ERR_LIB_SSL &&
                reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
               (ssl_err == SSL_ERROR_SYSCALL && e == 0 && (ret == 0 || errno == 0))) {
        snprintf(buf, len, "%s",
                 handshake ? "the server closed the connection during the handshake (not a TLS "
                             "port, or it refused the client certificate?)"
                           : "the server closed the connection");
    } else if (ssl_err == SSL_ERROR_SYSCALL && e == 0) {
        snprintf(buf, len, "%s", strerror(errno));
    } else if (ssl_err == SSL_ERROR_ZERO_RETURN) {
        snprintf(buf, len, "the server ended the TLS session");
    } else if (e && lib == ERR_LIB_SYS) {
        snprintf(buf, len, "%s", strerror(reason));
    } else if (rs) {
        snprintf(buf, len, "%s", rs);
    } else if (e) {
        ERR_error_string_n(e, buf, len);
    } else {
        snprintf(buf, len, "TLS error %d", ssl_err);
    }
}

/* ---- the bridge thread ------------------------------------------------------ */

struct bridge_conn {
    struct bridge_conn *next;
    SSL *ssl;
    int net;   /* TCP, non-blocking */
    int local; /* the bridge's end of the socketpair, non-blocking */
    char where[300];
    bool net_done; /* the TLS session ended: flush down, then local_shut */
    bool local_shut; /* SSL and net freed, EOF sent to hiredis (SHUT_WR): what
                      * it still writes is discarded until it closes its end
                      * (closing first would make its next write raise SIGPIPE) */
    bool again;    /* pumped BRIDGE_ROUNDS times with progress: pump again before sleeping */
    int up_want;   /* SSL_ERROR_WANT_READ/WRITE blocking SSL_write, or 0 */
    int down_want; /* the same for SSL_read */
    size_t up_len, up_off;     /* hiredis -> server (plaintext for SSL_write) */
    size_t down_len, down_off; /* server -> hiredis (plaintext from SSL_read) */
    unsigned char up[BRIDGE_BUF];
    unsigned char down[BRIDGE_BUF];
};

static pthread_once_t bridge_once = PTHREAD_ONCE_INIT;
static int bridge_start_err; /* errno of a failed start, 0 = running */
static int wake_fd = -1;      /* eventfd: a new connection is pending */
static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;
static struct bridge_conn *pending;
static atomic_size_t active_count;

static void conn_free(struct bridge_conn *b, bool send_close_notify)
{
    if (b->ssl) {
        if (send_close_notify && !b->net_done) {
            ERR_clear_error();
            (void)SSL_shutdown(b->ssl); /* best effort, non-blocking */
        }
        SSL_free(b->ssl);
    }
    if (b->net >= 0) close(b->net);
    if (b->local >= 0) close(b->local);
    free(b);
    atomic_fetch_sub(&active_count, 1);
}

/* The TLS session ended on the server's or the network's side (ssl_err from
 * SSL_read / SSL_write): log why unless it is a plain close, stop using it. */
static void session_ended(struct bridge_conn *b, int ssl_err, int ret)
{
    int saved = errno;
    unsigned long e = ERR_peek_last_error();
    bool eof = ssl_err == SSL_ERROR_ZERO_RETURN ||
               (ssl_err == SSL_ERROR_SYSCALL && e == 0 && (ret == 0 || saved == 0 || saved == ECONNRESET ||
                                                          saved == EPIPE)) ||
               (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
    char why[256];
    errno = saved;
    ssl_reason(b->ssl, ssl_err, ret, false, why, sizeof why);
    if (eof)
        glog_debug("redis", NULL, "redis %s: TLS: %s", b->where, why);
    else
        glog_warn("redis", NULL, "redis %s: TLS: %s; connection closed", b->where, why);
    ERR_clear_error();
    b->net_done = true;
    b->up_len = b->up_off = 0;
}

/* Moves bytes both ways until nothing moves (or BRIDGE_ROUNDS rounds).
 * false: the connection is over, free it. */
static bool pump(struct bridge_conn *b)
{
    b->again = false;
    for (int round = 0; round < BRIDGE_ROUNDS; round++) {
        bool progress = false;
        if (b->local_shut) {
            unsigned char sink[4096];
            ssize_t n = recv(b->local, sink, sizeof sink, MSG_DONTWAIT);
            if (n > 0 || (n < 0 && errno == EINTR)) continue;
            return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK); /* 0: hiredis closed */
        }

        /* server -> hiredis: flush what was read, then read more */
        if (b->down_off < b->down_len) {
            ssize_t n = send(b->local, b->down + b->down_off, b->down_len - b->down_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                b->down_off += (size_t)n;
                if (b->down_off == b->down_len) b->down_off = b->down_len = 0;
                progress = true;
            } else if (n < 0 && errno == EINTR) {
                progress = true;
            } else if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
                return false; /* hiredis closed its end */
            }
        }
        if (b->net_done) {
            if (b->down_len == 0) { /* delivered: now hiredis reads EOF */
                SSL_free(b->ssl);
                b->ssl = NULL;
                close(b->net);
                b->net = -1;
                shutdown(b->local, SHUT_WR);
                b->local_shut = true;
                continue;
            }
            if (!progress) return true; /* wait for hiredis to read */
            continue;
        }
        if (b->down_len == 0) {
            ERR_clear_error();
            int n = SSL_read(b->ssl, b->down, sizeof b->down);
            if (n > 0) {
                b->down_len = (size_t)n;
                b->down_want = 0;
                progress = true;
            } else {
                int e = SSL_get_error(b->ssl, n);
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                    b->down_want = e;
                } else {
                    session_ended(b, e, n);
                    continue;
                }
            }
        }

        /* hiredis -> server: read a buffer only once the last one is sent
         * (SSL_write after WANT_* is retried with the same bytes) */
        if (b->up_len == 0) {
            ssize_t n = recv(b->local, b->up, sizeof b->up, MSG_DONTWAIT);
            if (n > 0) {
                b->up_len = (size_t)n;
                b->up_off = 0;
                progress = true;
            } else if (n == 0) {
                return false; /* hiredis closed (redisFree): close_notify, free */
            } else if (errno == EINTR) {
                progress = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                return false;
            }
        }
        if (b->up_off < b->up_len) {
            ERR_clear_error();
            int n = SSL_write(b->ssl, b->up + b->up_off, (int)(b->up_len - b->up_off));
            if (n > 0) {
                b->up_off += (size_t)n;
                if (b->up_off == b->up_len) b->up_off = b->up_len = 0;
                b->up_want = 0;
                progress = true;
            } else {
                int e = SSL_get_error(b->ssl, n);
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                    b->up_want = e;
                } else {
                    session_ended(b, e, n);
                    continue;
                }
            }
        }
        if (!progress) return true;
    }
    b->again = true;
    return true;
}

static short net_events(const struct bridge_conn *b)
{
    short ev = 0;
    if (b->net_done || b->local_shut) return 0;
    if (b->down_len == 0) ev |= b->down_want == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
    if (b->up_off < b->up_len) ev |= b->up_want == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return ev;
}

static short local_events(const struct bridge_conn *b)
{
    short ev = 0;
    if (b->local_shut) return POLLIN;
    if (b->up_len == 0 && !b->net_done) ev |= POLLIN;
    if (b->down_off < b->down_len) ev |= POLLOUT;
    return ev;
}

static void *bridge_main(void *arg)
{
    (void)arg;
    struct bridge_conn *conns = NULL;
    size_t n_conns = 0, cap = 0;
    struct pollfd *pfd = NULL;
    struct bridge_conn **owner = NULL;
    for (;;) {
        /* adopt new connections; pump them once (the handshake may have
         * left application data buffered in OpenSSL) */
        pthread_mutex_lock(&pending_mu);
        struct bridge_conn *fresh = pending;
        pending = NULL;
        pthread_mutex_unlock(&pending_mu);
        while (fresh) {
            struct bridge_conn *b = fresh;
            fresh = fresh->next;
            b->next = conns;
            conns = b;
            n_conns++;
            b->again = true;
        }
        /* pump what asked for it, drop what ended */
        bool busy = false;
        for (struct bridge_conn **pp = &conns; *pp;) {
            struct bridge_conn *b = *pp;
            if (b->again && !pump(b)) {
                *pp = b->next;
                n_conns--;
                conn_free(b, true);
                continue;
            }
            busy = busy || b->again;
            pp = &b->next;
        }
        if (2 * n_conns + 1 > cap) {
            size_t want = 2 * n_conns + 16;
            struct pollfd *npfd = realloc(pfd, want * sizeof *pfd);
            if (npfd) pfd = npfd;
            struct bridge_conn **nowner = npfd ? realloc(owner, want * sizeof *owner) : NULL;
            if (nowner) owner = nowner;
            if (!npfd || !nowner) { /* out of memory: try again shortly */
                poll(NULL, 0, 10);
                continue;
            }
            cap = want;
        }
        size_t np = 0;
        pfd[np] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
        owner[np++] = NULL;
        for (struct bridge_conn *b = conns; b; b = b->next) {
            /* an fd with nothing to wait for is left out: a hang-up on it
             * would otherwise wake the loop over and over; it is seen
             * when the other side lets the pump reach it */
            short le = local_events(b), ne = net_events(b);
            pfd[np] = (struct pollfd){.fd = le ? b->local : -1, .events = le};
            owner[np++] = b;
            pfd[np] = (struct pollfd){.fd = ne ? b->net : -1, .events = ne};
            owner[np++] = b;
        }
        int r = poll(pfd, (nfds_t)np, busy ? 0 : -1);
        if (r < 0) {
            if (errno != EINTR) glog_warn("redis", NULL, "TLS bridge: poll: %s", strerror(errno));
            continue;
        }
        if (pfd[0].revents) {
            uint64_t v;
            ssize_t rd = read(wake_fd, &v, sizeof v);
            (void)rd;
        }
        for (size_t i = 1; i < np; i++)
            if (pfd[i].revents) owner[i]->again = true;
    }
    return NULL;
}

static void bridge_start(void)
{
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd < 0) {
        bridge_start_err = errno;
        return;
    }
    /* the bridge takes no signals: they belong to the threads that handle them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t tid;
    int rc = pthread_create(&tid, &attr, bridge_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        bridge_start_err = rc;
        close(wake_fd);
        wake_fd = -1;
        return;
    }
    pthread_setname_np(tid, "redis-tls");
}

size_t redis_tls_active(void)
{
    return atomic_load(&active_count);
}

/* ---- connect + handshake ---------------------------------------------------- */

/* Waits for events on fd until deadline (monotonic ms): >0 ready, 0 timed
 * out, -1 error (errno). */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (r > 0) return r;
        if (r < 0 && errno != EINTR) return -1;
    }
}

static void set_tcp_options(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* what redisEnableKeepAlive does on a plain connection (hiredis cannot
     * on its socketpair end) */
    int idle = 15, intvl = 5, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* Non-blocking TCP connect to host:port before deadline, every address in
 * turn. The socket (non-blocking), or -1 with err set. */
static int tcp_connect(const char *where, const char *host, int port, int64_t deadline,
                       int64_t timeout_ms, char *err, size_t errlen)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        snprintf(err, errlen, "redis %s: connect: %s", where, gai_strerror(g));
        return -1;
    }
    int fd = -1, last = 0;
    bool timed_out = false;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) {
            last = errno;
            continue;
        }
        if (connect(s, a->ai_addr, a->ai_addrlen) == 0) {
            fd = s;
            break;
        }
        if (errno != EINPROGRESS) {
            last = errno;
            close(s);
            continue;
        }
        int w = wait_fd(s, POLLOUT, deadline);
        if (w <= 0) {
            last = w == 0 ? ETIMEDOUT : errno;
            timed_out = w == 0;
            close(s);
            if (timed_out) break;
            continue;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) soerr = errno;
        if (soerr != 0) {
            last = soerr;
            close(s);
            continue;
        }
        fd = s;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (timed_out)
            snprintf(err, errlen, "redis %s: connect: timed out after %lld ms", where, (long long)timeout_ms);
        else
            snprintf(err, errlen, "redis %s: connect: %s", where, strerror(last ? last : ECONNREFUSED));
        return -1;
    }
    set_tcp_options(fd);
    return fd;
}

static bool is_ip_literal(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* The context for t: verification on, TLS 1.2 at least, the CA store and
 * the client certificate loaded. NULL with err set. */
static SSL_CTX *make_ctx(const struct baton_redis_tls_opts *t, const char *where, char *err, size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    char why[256];
    if (ctx == NULL) {
        ssl_reason(NULL, SSL_ERROR_SSL, 0, false, why, sizeof why);
        snprintf(err, errlen, "redis %s: TLS: cannot create a context: %s", where, why);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    const char *what = NULL, *file = NULL;
    if (t->ca_file && t->ca_file[0]) {
        if (SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) != 1) {
            what = "cannot load the CA file";
            file = t->ca_file;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        what = "cannot load the system's CA store";
        file = "";
    }
    if (!what && t->cert_file && t->cert_file[0]) {
        const char *key = t->key_file && t->key_file[0] ? t->key_file : t->cert_file;
        if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
            what = "cannot load the client certificate", file = t->cert_file;
        } else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
            what = "cannot load the client key", file = key;
        } else if (SSL_CTX_check_private_key(ctx) != 1) {
            what = "the client key does not match the certificate", file = key;
        }
    } else if (!what && t->key_file && t->key_file[0]) {
        what = "key_file without cert_file", file = t->key_file;
    }
    if (what) {
        unsigned long e = ERR_peek_last_error(), q;
        while ((q = ERR_get_error()) != 0)
            if (ERR_GET_LIB(q) == ERR_LIB_SYS) e = q; /* errno: "No such file or directory" */
        const char *rs = e ? ERR_reason_error_string(e) : NULL;
        if (e && ERR_GET_LIB(e) == ERR_LIB_SYS) snprintf(why, sizeof why, "%s", strerror(ERR_GET_REASON(e)));
        else if (rs) snprintf(why, sizeof why, "%s", rs);
        else if (e) ERR_error_string_n(e, why, sizeof why);
        else snprintf(why, sizeof why, "%s", strerror(errno));
        snprintf(err, errlen, "redis %s: TLS: %s%s%s: %s", where, what, file[0] ? " " : "", file, why);
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

int redis_tls_connect(const struct baton_redis_tls_opts *t, const char *host, int port, int64_t timeout_ms,
                      char *err, size_t errlen)
{
    static const struct baton_redis_tls_opts none = {.enabled = true};
    if (t == NULL) t = &none;
    if (timeout_ms <= 0) timeout_ms = 1000;
    char where[300];
    snprintf(where, sizeof where, "%s:%d", host, port);
    if (err && errlen) err[0] = '\0';
    int64_t deadline = clock_mono_ms() + timeout_ms;

    pthread_once(&bridge_once, bridge_start);
    if (bridge_start_err) {
        snprintf(err, errlen, "redis %s: TLS: cannot start the bridge thread: %s", where,
                 strerror(bridge_start_err));
        return -1;
    }
    SSL_CTX *ctx = make_ctx(t, where, err, errlen);
    if (ctx == NULL) return -1;
    int fd = tcp_connect(where, host, port, deadline, timeout_ms, err, errlen);
    if (fd < 0) {
        SSL_CTX_free(ctx);
        return -1;
    }

    char why[256];
    SSL *ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the session holds its own reference */
    if (ssl == NULL) {
        ssl_reason(NULL, SSL_ERROR_SSL, 0, false, why, sizeof why);
        snprintf(err, errlen, "redis %s: TLS: %s", where, why);
        close(fd);
        return -1;
    }
    const char *name = t->server_name && t->server_name[0] ? t->server_name : host;
    bool ok;
    if (is_ip_literal(name)) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else {
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = SSL_set1_host(ssl, name) == 1 && SSL_set_tlsext_host_name(ssl, name) == 1;
    }
    if (!ok || SSL_set_fd(ssl, fd) != 1) {
        snprintf(err, errlen, "redis %s: TLS: cannot set the server name '%s'", where, name);
        SSL_free(ssl);
        close(fd);
        return -1;
    }

    for (;;) {
        ERR_clear_error();
        int r = SSL_connect(ssl);
        if (r == 1) break;
        int e = SSL_get_error(ssl, r);
        int w = -2;
        if (e == SSL_ERROR_WANT_READ) w = wait_fd(fd, POLLIN, deadline);
        else if (e == SSL_ERROR_WANT_WRITE) w = wait_fd(fd, POLLOUT, deadline);
        if (w > 0) continue;
        if (w == 0) {
            snprintf(err, errlen,
                     "redis %s: TLS: handshake timed out after %lld ms (is it a TLS port?)", where,
                     (long long)timeout_ms);
        } else if (w == -1) {
            snprintf(err, errlen, "redis %s: TLS: handshake: %s", where, strerror(errno));
        } else {
            ssl_reason(ssl, e, r, true, why, sizeof why);
            snprintf(err, errlen, "redis %s: TLS: %s", where, why);
        }
        ERR_clear_error();
        SSL_free(ssl);
        close(fd);
        return -1;
    }

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "redis %s: TLS: socketpair: %s", where, strerror(errno));
        SSL_free(ssl);
        close(fd);
        return -1;
    }
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    glog_debug("redis", NULL, "redis %s: TLS: %s, %s", where, SSL_get_version(ssl), SSL_get_cipher(ssl));
    struct bridge_conn *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "redis %s: TLS: out of memory", where);
        SSL_free(ssl);
        close(fd);
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    b->ssl = ssl;
    b->net = fd;
    b->local = sv[1];
    snprintf(b->where, sizeof b->where, "%s", where);
    atomic_fetch_add(&active_count, 1);
    pthread_mutex_lock(&pending_mu);
    b->next = pending;
    pending = b;
    pthread_mutex_unlock(&pending_mu);
    uint64_t one = 1;
    ssize_t wr = write(wake_fd, &one, sizeof one);
    (void)wr;
    return sv[0];
}
