/* baton: single-active consumer gateway.
 *
 *   baton -c FILE [--check-config] [--log-level LEVEL]
 *   baton status -c FILE
 *   baton -c FILE --init-sink NAME [--apply]
 *   baton -c FILE --init-locker [--apply]
 *   baton step-down -c FILE [--hold-ms N] ENDPOINT...|--all
 *   baton drain -c FILE | baton resume -c FILE
 *   baton --print-reference[=markdown|man]
 *   baton --version | --help
 *
 * A bad command line gets one line saying what is wrong and a pointer to
 * --help (exit BATON_EXIT_USAGE); --help prints the whole text.
 *
 * Signals: SIGTERM/SIGINT stop endpoints (leases released and announced),
 * drain queues within shutdown.drain_timeout_ms and exit 0. SIGHUP logs the
 * current role of every endpoint (logging goes to stderr, which has nothing
 * to reopen: the supervisor owns it). SIGPIPE is ignored (a closed stdout is
 * a sink error, counted, not a crash).
 *
 * Under systemd (Type=notify, NOTIFY_SOCKET set; src/notify.h): READY=1 once
 * the endpoints are created and started and the ops listener (if any) is
 * bound, STOPPING=1 as the shutdown begins, STATUS= lines along the way, and
 * WATCHDOG=1 pings from the signal loop when WatchdogSec= asks for them. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/util.h"
#include "src/config.h"
#include "src/control_cmd.h"
#include "src/gateway.h"
#include "src/http_listener.h"
#include "src/notify.h"
#include "src/reference.h"
#include "src/sink.h"
#include "src/status_cmd.h"

/* A bad command line: what is wrong was said on the line before. */
static int usage_error(void)
{
    fprintf(stderr, "baton: try 'baton --help'\n");
    return BATON_EXIT_USAGE;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: baton -c FILE [--check-config] [--log-level LEVEL]\n"
            "       baton status -c FILE\n"
            "       baton -c FILE --init-sink NAME [--apply]\n"
            "       baton -c FILE --init-locker [--apply]\n"
            "       baton step-down -c FILE [--hold-ms N] ENDPOINT...|--all\n"
            "       baton drain -c FILE | baton resume -c FILE\n"
            "       baton --print-reference[=markdown|man]\n"
            "       baton --version | --help\n"
            "\n"
            "  -c, --config FILE     main configuration file (libconfig)\n"
            "      --check-config    validate the configuration and the endpoint files, then exit\n"
            "      --log-level LEVEL error, warn, info or debug (overrides the file)\n"
            "      --init-sink NAME  print what sink NAME needs in its store (postgresql: the\n"
            "                        idempotent DDL of its tables), then exit\n"
            "      --init-locker     print what the locker needs in its store (postgresql: the\n"
            "                        idempotent DDL of its tables), then exit\n"
            "      --apply           with --init-sink or --init-locker: run it instead of printing it\n"
            "      --print-reference[=markdown|man]\n"
            "                        print the reference of every setting (default markdown; man:\n"
            "                        the baton.cfg(5) page), then exit\n"
            "  -V, --version         print the version\n"
            "  -h, --help            this text\n"
            "\n"
            "  status                ask the locker (Redis, etcd, PostgreSQL) who leads each endpoint of FILE\n"
            "  step-down             ask the replica running with FILE (its ops listener) to hand the\n"
            "                        endpoints over gracefully and not compete for them for N ms\n"
            "                        (default 2 x ttl); --all: every endpoint with a lease\n"
            "  drain                 ask it to step down from every endpoint and stay standby\n"
            "  resume                ask it to compete again after a drain or a step-down\n"
            "\n"
            "endpoint types:");
    for (size_t i = 0; endpoint_registry[i]; i++) fprintf(f, " %s", endpoint_registry[i]->type);
    fprintf(f, "\nsink types:");
    for (size_t i = 0; sink_registry[i]; i++) fprintf(f, " %s", sink_registry[i]->type);
    fprintf(f,
            "\n\nexit status: 0 ok, %d usage, %d invalid configuration, %d could not start, %d runtime failure\n",
            BATON_EXIT_USAGE, BATON_EXIT_CONFIG, BATON_EXIT_START, BATON_EXIT_RUNTIME);
}

/* STATUS= for READY=1: "3 endpoints (1 disabled), locker redis 10.0.0.5:6379,
 * ops listener 127.0.0.1:9464". */
static void ready_status(const struct baton_config *cfg, char *buf, size_t len)
{
    size_t enabled = 0;
    for (size_t i = 0; i < cfg->n_endpoints; i++) enabled += cfg->endpoints[i].enabled;
    char disabled[48] = "", locker[300];
    if (enabled < cfg->n_endpoints) snprintf(disabled, sizeof disabled, " (%zu disabled)", cfg->n_endpoints - enabled);
    if (cfg->has_locker) {
        char where[280];
        config_locker_describe(cfg, where, sizeof where);
        snprintf(locker, sizeof locker, "locker %s", where);
    } else {
        snprintf(locker, sizeof locker, "no locker (single-process mode)");
    }
    snprintf(buf, len, "%zu endpoint%s%s, %s, ops listener %s", enabled, enabled == 1 ? "" : "s", disabled, locker,
             cfg->metrics_listen ? cfg->metrics_listen : "off");
}

/* One watchdog period elapsed on the main thread. What a WATCHDOG=1 vouches
 * for: that the main thread, the one that takes SIGTERM and runs the drain,
 * is looping (so a stop request will be acted on), and that the gateway's
 * observed state, which the ops pages (/readyz, /status) read under the
 * observer's mutex, can still be taken (gateway_ready never waits for a
 * backend: a deadlock there stops the pings). It deliberately does not vouch
 * for the locker or the sinks being reachable (their result is ignored):
 * restarting fixes neither, and a replica restarted during a Redis or sink
 * outage would only lose its standby state and compete again from scratch;
 * /readyz reports that instead. Nor does it vouch for the forwarders'
 * progress: a sink legitimately stalled on retries is not a hang. */
static void watchdog_tick(struct gateway *gw)
{
    char reason[320];
    (void)gateway_ready(gw, reason, sizeof reason);
    notify_watchdog_ping();
}

/* --init-sink NAME [--apply]: the named sink's store set-up, printed or
 * run. */
/* --init-locker [--apply]: the locker's tables (postgresql), printed or
 * created. */
static int init_locker_run(const struct baton_config *cfg, bool apply)
{
    if (!cfg->has_locker || cfg->locker_backend != LOCKER_BACKEND_PG) {
        fprintf(stderr, "baton: --init-locker: the locker of %s is %s, which needs nothing set up\n",
                cfg->path, config_locker_backend(cfg));
        return BATON_EXIT_USAGE;
    }
    if (!apply) {
        fputs(baton_locker_pg_ddl(), stdout);
        return BATON_EXIT_OK;
    }
    char err[BATON_LOCKER_ERR_MAX];
    if (baton_locker_pg_init_schema(&cfg->locker_pg, err) != 0) {
        fprintf(stderr, "baton: --init-locker: %s\n", err);
        return BATON_EXIT_START;
    }
    printf("the locker's tables are in place (postgresql)\n");
    return BATON_EXIT_OK;
}

static int init_sink_run(const struct baton_config *cfg, const char *name, bool apply)
{
    const struct sink_config *sc = NULL;
    for (size_t i = 0; i < cfg->n_sinks; i++)
        if (strcmp(cfg->sinks[i].name, name) == 0) sc = &cfg->sinks[i];
    if (!sc) {
        fprintf(stderr, "baton: --init-sink: %s declares no sink named '%s'\n", cfg->path, name);
        return BATON_EXIT_CONFIG;
    }
    if (!sc->ops->init) {
        fprintf(stderr, "baton: --init-sink: sink '%s' (%s:%d) is of type %s, which needs nothing set up\n",
                name, sc->file, sc->line, sc->type);
        return BATON_EXIT_USAGE;
    }
    char err[1024] = "";
    if (sc->ops->init(sc->name, sc->settings, apply, stdout, err, sizeof err) != 0) {
        fprintf(stderr, "baton: --init-sink: %s\n", err);
        return BATON_EXIT_START;
    }
    return BATON_EXIT_OK;
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    const char *cli_level = NULL;
    bool check_only = false;
    bool status_cmd = false;
    int control = -1; /* enum control_action of a control subcommand */
    bool all = false;
    int64_t hold_ms = 0;

    const char *reference = NULL; /* the format asked for; NULL: not asked */
    const char *init_sink = NULL;  /* --init-sink NAME */
    bool init_locker = false;      /* --init-locker */
    bool apply = false;

    if (argc > 1 && strcmp(argv[1], "step-down") == 0) control = CONTROL_STEP_DOWN;
    if (argc > 1 && strcmp(argv[1], "drain") == 0) control = CONTROL_DRAIN;
    if (argc > 1 && strcmp(argv[1], "resume") == 0) control = CONTROL_RESUME;
    if (argc > 1 && (strcmp(argv[1], "status") == 0 || control >= 0)) {
        status_cmd = control < 0;
        argv[1] = argv[0]; /* getopt's messages name the program, not the subcommand */
        argv++;
        argc--;
    }
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, 'k'},
        {"log-level", required_argument, NULL, 'l'},
        {"print-reference", optional_argument, NULL, 'r'},
        {"init-sink", required_argument, NULL, 'i'},
        {"init-locker", no_argument, NULL, 'L'},
        {"apply", no_argument, NULL, 'a'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {"all", no_argument, NULL, 'A'},
        {"hold-ms", required_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "c:Vh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': config_path = optarg; break;
        case 'k': check_only = true; break;
        case 'l': cli_level = optarg; break;
        case 'r': reference = optarg ? optarg : "markdown"; break;
        case 'i': init_sink = optarg; break;
        case 'L': init_locker = true; break;
        case 'a': apply = true; break;
        case 'V': printf("baton %s\n", BATON_VERSION); return BATON_EXIT_OK;
        case 'h': usage(stdout); return BATON_EXIT_OK;
        case 'A':
        case 'H':
            if (control != CONTROL_STEP_DOWN) {
                fprintf(stderr, "baton: --%s is an option of 'baton step-down'\n", opt == 'A' ? "all" : "hold-ms");
                return usage_error();
            }
            if (opt == 'A') {
                all = true;
            } else {
                char *end = NULL;
                long long v = strtoll(optarg, &end, 10);
                if (!end || *end || v <= 0 || v > 86400000LL * 7) {
                    fprintf(stderr, "baton: --hold-ms '%s': expected milliseconds, 1 to 604800000\n", optarg);
                    return usage_error();
                }
                hold_ms = v;
            }
            break;
        default: return usage_error(); /* getopt said what is wrong */
        }
    }
    if (control == CONTROL_STEP_DOWN) {
        if ((optind < argc) == all) {
            fprintf(stderr, "baton step-down: name the endpoints, or --all (not both)\n");
            return usage_error();
        }
    } else if (optind < argc) {
        fprintf(stderr, "baton: unexpected argument '%s'\n", argv[optind]);
        return usage_error();
    }
    if (reference) {
        enum reference_format fmt;
        if (reference_format_parse(reference, &fmt) != 0) {
            fprintf(stderr, "baton: --print-reference=%s: expected markdown or man\n", reference);
            return usage_error();
        }
        if (reference_write(stdout, fmt) != 0) {
            fprintf(stderr, "baton: --print-reference: cannot write: %s\n", strerror(errno));
            return BATON_EXIT_RUNTIME;
        }
        return BATON_EXIT_OK;
    }
    if (!config_path) {
        fprintf(stderr, "baton: missing -c FILE\n");
        return usage_error();
    }
    if (apply && !init_sink && !init_locker) {
        fprintf(stderr, "baton: --apply goes with --init-sink NAME or --init-locker\n");
        return usage_error();
    }
    if (init_sink && init_locker) {
        fprintf(stderr, "baton: --init-sink and --init-locker: one at a time\n");
        return usage_error();
    }
    enum log_level level;
    if (cli_level && log_level_parse(cli_level, &level) != 0) {
        fprintf(stderr, "baton: --log-level '%s': expected error, warn, info or debug\n", cli_level);
        return usage_error();
    }

    /* From here on the guard library logs through log_write (which masks a
     * URL's password) instead of its own stderr default: `baton status`
     * creates a locker before the configured level applies. Warnings and
     * errors, as that default. */
    log_set_level(cli_level ? level : LOG_WARN);

    struct baton_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct config_error cerr;
    memset(&cerr, 0, sizeof cerr);
    if (config_load(config_path, &cfg, &cerr) != 0) {
        char msg[1200], shown[1300];
        config_error_format(&cerr, msg, sizeof msg);
        /* a URL quoted in the message keeps its password out of the output */
        fprintf(stderr, "baton: configuration error: %s\n", redact_urls(msg, shown, sizeof shown));
        config_free(&cfg);
        return BATON_EXIT_CONFIG;
    }
    if (init_locker) {
        int rc = init_locker_run(&cfg, apply);
        config_free(&cfg);
        return rc;
    }
    if (init_sink) {
        int rc = init_sink_run(&cfg, init_sink, apply);
        config_free(&cfg);
        return rc;
    }
    if (check_only) {
        size_t enabled = 0;
        for (size_t i = 0; i < cfg.n_endpoints; i++) enabled += cfg.endpoints[i].enabled;
        printf("%s: configuration OK (%zu endpoint%s, %zu enabled, %zu sink%s, locker %s)\n", config_path,
               cfg.n_endpoints, cfg.n_endpoints == 1 ? "" : "s", enabled, cfg.n_sinks,
               cfg.n_sinks == 1 ? "" : "s", config_locker_backend(&cfg));
        for (size_t i = 0; i < cfg.n_endpoints; i++) {
            const struct endpoint_config *e = &cfg.endpoints[i];
            printf("  %-24s %-11s guard %-6s sink %-12s %s%s\n", e->name, e->type, guard_kind_name(e->guard),
                   e->sink_name, e->file, e->enabled ? "" : " (disabled)");
        }
        config_free(&cfg);
        return BATON_EXIT_OK;
    }
    if (control >= 0) {
        int rc = control_cmd_run(&cfg, (enum control_action)control, argv + optind, argc - optind, all, hold_ms,
                                 stdout);
        config_free(&cfg);
        return rc;
    }
    if (status_cmd) {
        int rc = status_cmd_run(&cfg, stdout);
        config_free(&cfg);
        return rc;
    }

    log_set_level(cli_level ? level : cfg.log_level);
    log_set_format(cfg.log_format);
    if (cfg.n_endpoints == 0)
        log_warn("config", NULL, "no endpoint files (*.cfg) in %s: nothing to run", cfg.endpoints_dir);

    /* Signals are taken synchronously by the main thread only: block them
     * before any thread exists so every thread inherits the mask. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    char err[1024] = "";
    struct gateway *gw = gateway_create(&cfg, err, sizeof err);
    if (!gw) {
        log_error("main", NULL, "cannot start: %s", err);
        config_free(&cfg);
        return BATON_EXIT_START;
    }
    struct http_listener *http = NULL;
    if (cfg.metrics_listen) {
        http = http_listener_start(cfg.metrics_listen, gw, cfg.admin_token, err, sizeof err);
        if (!http) {
            log_error("main", NULL, "metrics listener %s: %s", cfg.metrics_listen, err);
            gateway_destroy(gw);
            config_free(&cfg);
            return BATON_EXIT_START;
        }
    }
    /* Starting can take a while (each guard's first lease attempt, delayed
     * by leader balancing): say so in `systemctl status` meanwhile. */
    notify_status("starting: endpoints created, making the first lease attempts");
    if (gateway_start(gw) != 0) {
        log_error("main", NULL, "cannot start threads: %s", strerror(errno));
        gateway_stop(gw);
        http_listener_stop(http);
        gateway_destroy(gw);
        config_free(&cfg);
        return BATON_EXIT_START;
    }
    log_info("main", NULL, "baton %s started (pid %d, %zu endpoint%s, locker %s)", BATON_VERSION, (int)getpid(),
             cfg.n_endpoints, cfg.n_endpoints == 1 ? "" : "s", cfg.has_locker ? config_locker_backend(&cfg) : "none: single-process mode");
    /* Here, not earlier: the endpoints exist and run, and the ops listener is
     * bound (it answers from now on), so units ordered After= baton see it
     * serving. */
    char status[512];
    ready_status(&cfg, status, sizeof status);
    notify_ready(status);

    /* With a watchdog, the signal wait wakes up every period to ping
     * (watchdog_tick says what a ping vouches for). */
    int64_t wd_ms = notify_watchdog_start();
    int64_t next_ping = clock_mono_ms();
    for (;;) {
        int sig = 0;
        if (wd_ms > 0) {
            int64_t now = clock_mono_ms();
            if (now >= next_ping) {
                watchdog_tick(gw);
                next_ping = now + wd_ms;
            }
            int64_t d = next_ping - now;
            struct timespec ts = {.tv_sec = d / 1000, .tv_nsec = (d % 1000) * 1000000L};
            sig = sigtimedwait(&set, NULL, &ts);
            if (sig < 0) continue; /* EAGAIN: the period elapsed; EINTR */
        } else if (sigwait(&set, &sig) != 0) {
            continue;
        }
        if (sig == SIGHUP) {
            sinks_reopen_request(); /* file sinks reopen their files (logrotate) */
            struct jbuf b;
            jbuf_init(&b, 1024);
            gateway_render_status(gw, &b);
            log_info("main", NULL, "SIGHUP: status %.*s", (int)b.len, b.data);
            jbuf_free(&b);
            continue;
        }
        log_info("main", NULL, "%s received: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
    }
    /* Before the drain: systemd stops enforcing the watchdog once the unit
     * is stopping, and TimeoutStopSec= bounds what follows. */
    notify_watchdog_stop();
    snprintf(status, sizeof status, "stopping: releasing leases, draining queues (at most %lld ms)",
             (long long)cfg.drain_timeout_ms);
    notify_stopping(status);
    gateway_stop(gw);
    http_listener_stop(http);
    gateway_destroy(gw);
    config_free(&cfg);
    log_info("main", NULL, "exit");
    return BATON_EXIT_OK;
}
