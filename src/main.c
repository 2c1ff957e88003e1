/* baton: single-active consumer gateway.
 *
 *   baton -c FILE [--check-config] [--log-level LEVEL]
 *   baton status -c FILE
 *   baton --version | --help
 *
 * Signals: SIGTERM/SIGINT stop endpoints (leases released and announced),
 * drain queues within shutdown.drain_timeout_ms and exit 0. SIGHUP logs the
 * current role of every endpoint (logging goes to stderr, which has nothing
 * to reopen: the supervisor owns it). SIGPIPE is ignored (a closed stdout is
 * a sink error, counted, not a crash). */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/common/log.h"
#include "src/common/util.h"
#include "src/config.h"
#include "src/gateway.h"
#include "src/http_listener.h"
#include "src/status_cmd.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: baton -c FILE [--check-config] [--log-level LEVEL]\n"
            "       baton status -c FILE\n"
            "       baton --version | --help\n"
            "\n"
            "  -c, --config FILE     main configuration file (libconfig)\n"
            "      --check-config    validate the configuration and the endpoint files, then exit\n"
            "      --log-level LEVEL error, warn, info or debug (overrides the file)\n"
            "  -V, --version         print the version\n"
            "  -h, --help            this text\n"
            "\n"
            "  status                ask the locker's Redis who leads each endpoint of FILE\n"
            "\n"
            "endpoint types:");
    for (size_t i = 0; endpoint_registry[i]; i++) fprintf(f, " %s", endpoint_registry[i]->type);
    fprintf(f, "\nsink types:");
    for (size_t i = 0; sink_registry[i]; i++) fprintf(f, " %s", sink_registry[i]->type);
    fprintf(f,
            "\n\nexit status: 0 ok, %d usage, %d invalid configuration, %d could not start, %d runtime failure\n",
            BATON_EXIT_USAGE, BATON_EXIT_CONFIG, BATON_EXIT_START, BATON_EXIT_RUNTIME);
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    const char *cli_level = NULL;
    bool check_only = false;
    bool status_cmd = false;

    if (argc > 1 && strcmp(argv[1], "status") == 0) {
        status_cmd = true;
        argv++;
        argc--;
    }
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, 'k'},
        {"log-level", required_argument, NULL, 'l'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "c:Vh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': config_path = optarg; break;
        case 'k': check_only = true; break;
        case 'l': cli_level = optarg; break;
        case 'V': printf("baton %s\n", BATON_VERSION); return BATON_EXIT_OK;
        case 'h': usage(stdout); return BATON_EXIT_OK;
        default: usage(stderr); return BATON_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "baton: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return BATON_EXIT_USAGE;
    }
    if (!config_path) {
        fprintf(stderr, "baton: missing -c FILE\n");
        usage(stderr);
        return BATON_EXIT_USAGE;
    }
    enum log_level level;
    if (cli_level && log_level_parse(cli_level, &level) != 0) {
        fprintf(stderr, "baton: --log-level '%s': expected error, warn, info or debug\n", cli_level);
        return BATON_EXIT_USAGE;
    }

    struct baton_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct config_error cerr;
    memset(&cerr, 0, sizeof cerr);
    if (config_load(config_path, &cfg, &cerr) != 0) {
        char msg[1200];
        config_error_format(&cerr, msg, sizeof msg);
        fprintf(stderr, "baton: configuration error: %s\n", msg);
        config_free(&cfg);
        return BATON_EXIT_CONFIG;
    }
    if (check_only) {
        size_t enabled = 0;
        for (size_t i = 0; i < cfg.n_endpoints; i++) enabled += cfg.endpoints[i].enabled;
        printf("%s: configuration OK (%zu endpoints, %zu enabled, %zu sinks, locker %s)\n", config_path,
               cfg.n_endpoints, enabled, cfg.n_sinks, cfg.has_locker ? "redis" : "none");
        for (size_t i = 0; i < cfg.n_endpoints; i++) {
            const struct endpoint_config *e = &cfg.endpoints[i];
            printf("  %-24s %-11s guard %-6s sink %-12s %s%s\n", e->name, e->type, guard_kind_name(e->guard),
                   e->sink_name, e->file, e->enabled ? "" : " (disabled)");
        }
        config_free(&cfg);
        return BATON_EXIT_OK;
    }
    if (status_cmd) {
        int rc = status_cmd_run(&cfg, stdout);
        config_free(&cfg);
        return rc;
    }

    log_set_level(cli_level ? level : cfg.log_level);

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
        http = http_listener_start(cfg.metrics_listen, gw, err, sizeof err);
        if (!http) {
            log_error("main", NULL, "metrics listener %s: %s", cfg.metrics_listen, err);
            gateway_destroy(gw);
            config_free(&cfg);
            return BATON_EXIT_START;
        }
    }
    if (gateway_start(gw) != 0) {
        log_error("main", NULL, "cannot start threads: %s", strerror(errno));
        gateway_stop(gw);
        http_listener_stop(http);
        gateway_destroy(gw);
        config_free(&cfg);
        return BATON_EXIT_START;
    }
    log_info("main", NULL, "baton %s started (pid %d, %zu endpoints, locker %s)", BATON_VERSION, (int)getpid(),
             cfg.n_endpoints, cfg.has_locker ? "redis" : "none: single-process mode");

    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) continue;
        if (sig == SIGHUP) {
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
    gateway_stop(gw);
    http_listener_stop(http);
    gateway_destroy(gw);
    config_free(&cfg);
    log_info("main", NULL, "exit");
    return BATON_EXIT_OK;
}
