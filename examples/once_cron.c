/* A cron job that runs once per slot across all its replicas, with
 * libbaton-guard's OnceGuard.
 *
 *   cc once_cron.c $(pkg-config --cflags --libs baton-guard) -o once_cron
 *   ./once_cron [-h host] [-p port] [-e every_s] [-n slots]
 *
 * Start it on several machines (or several times here): every every_s
 * seconds, each replica computes the slot it is due for (from the planned
 * time, never from when it happens to wake up) and asks the guard; exactly
 * one replica per slot is allowed and runs the job, the others skip. Here
 * the job prints "ran slot <unix time>". With -n it stops after that many
 * slots (0 = run until SIGINT/SIGTERM). */
#define _DEFAULT_SOURCE /* getopt, usleep under -std=c11 */
#include <baton/guard.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    struct baton_redis_opts ro = {.host = "127.0.0.1", .port = 6379};
    long every = 1, slots = 0;
    int opt;
    while ((opt = getopt(argc, argv, "h:p:e:n:")) != -1) {
        switch (opt) {
        case 'h': ro.host = optarg; break;
        case 'p': ro.port = atoi(optarg); break;
        case 'e': every = atol(optarg) > 0 ? atol(optarg) : 1; break;
        case 'n': slots = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-h host] [-p port] [-e every_s] [-n slots]\n", argv[0]);
            return 64;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    char err[BATON_LOCKER_ERR_MAX];
    struct baton_locker *locker = baton_locker_redis_create(&ro, err);
    if (!locker) {
        fprintf(stderr, "once_cron: %s\n", err);
        return 1;
    }
    /* The claim outlives the job and any clock skew between replicas; a
     * replica that cannot reach Redis skips the slot (fail_open = false):
     * better a missed run than a double one for most jobs. */
    struct baton_once_guard_options o = {.ttl_ms = 60000, .fail_open = false, .log_name = "report"};
    struct baton_once_guard *guard = baton_once_guard_create(locker, "example:report", &o);
    if (!guard) {
        fprintf(stderr, "once_cron: out of memory\n");
        baton_locker_destroy(locker);
        return 1;
    }

    long done = 0;
    time_t slot = (time(NULL) / every + 1) * every; /* the next planned slot */
    while (!stop && (slots == 0 || done < slots)) {
        while (!stop && time(NULL) < slot) usleep(20000);
        if (stop) break;
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)slot); /* the slot, not "now" */
        if (baton_once_guard_allow(guard, key)) {
            printf("ran slot %lld pid %d\n", (long long)slot, (int)getpid());
            fflush(stdout);
        }
        done++;
        slot += every;
    }
    const struct baton_once_guard_stats *st = baton_once_guard_stats(guard);
    fprintf(stderr, "once_cron: %llu allowed, %llu skipped, %llu backend errors\n",
            (unsigned long long)atomic_load(&st->allowed), (unsigned long long)atomic_load(&st->skipped),
            (unsigned long long)atomic_load(&st->backend_errors));
    baton_once_guard_destroy(guard);
    baton_locker_destroy(locker);
    return 0;
}
