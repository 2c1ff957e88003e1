/* A paced Redis publisher for bench/bench_paced.py: one PUBLISH per
 * message, sent at an even rate (not in bursts), replies read as they come
 * (pipelined, never waited for one by one).
 *
 *   bench_paced_pub HOST PORT CHANNEL RATE COUNT PAYLOAD
 *
 * Message i is due at t0 + i / RATE (CLOCK_MONOTONIC, absolute sleeps with
 * a 1 us timer slack). A publisher that wakes late sends every message
 * already due, so the rate holds on average. Prints one line:
 * "sent N seconds S rate R late_bursts B" (B: wake-ups that found more than
 * one message due). Exits 0 when every PUBLISH was answered. */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Reads every reply that has arrived (timeout_ms: how long to wait for the
 * first). Returns the number read, -1 on a connection error. */
static long long drain_replies(redisContext *c, int timeout_ms)
{
    long long got = 0;
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(c, &r) != REDIS_OK) return -1;
        if (r) {
            freeReplyObject(r);
            got++;
            continue;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int rc = poll(&p, 1, got ? 0 : timeout_ms);
        if (rc <= 0) return got;
        if (redisBufferRead(c) != REDIS_OK) return -1;
        timeout_ms = 0;
    }
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s HOST PORT CHANNEL RATE COUNT PAYLOAD\n", argv[0]);
        return 64;
    }
    const char *channel = argv[3], *payload = argv[6];
    double rate = atof(argv[4]);
    long long count = atoll(argv[5]);
    if (rate <= 0 || count <= 0) {
        fprintf(stderr, "paced_pub: RATE and COUNT must be > 0\n");
        return 64;
    }
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    redisContext *c = redisConnect(argv[1], atoi(argv[2]));
    if (!c || c->err) {
        fprintf(stderr, "paced_pub: connect %s:%s: %s\n", argv[1], argv[2], c ? c->errstr : "oom");
        return 69;
    }
    const double interval_ns = 1e9 / rate;
    long long sent = 0, answered = 0, late = 0;
    int64_t t0 = now_ns();
    while (sent < count) {
        int64_t due = t0 + (int64_t)(sent * interval_ns);
        if (now_ns() < due) {
            struct timespec ts = {.tv_sec = due / 1000000000LL, .tv_nsec = due % 1000000000LL};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
            }
        }
        int64_t now = now_ns();
        long long n = 0;
        while (sent < count && t0 + (int64_t)(sent * interval_ns) <= now) {
            redisAppendCommand(c, "PUBLISH %s %s", channel, payload);
            sent++;
            n++;
        }
        if (n > 1) late++;
        int done = 0;
        while (!done)
            if (redisBufferWrite(c, &done) != REDIS_OK) {
                fprintf(stderr, "paced_pub: write: %s\n", c->errstr);
                return 1;
            }
        long long got = drain_replies(c, 0);
        if (got < 0) {
            fprintf(stderr, "paced_pub: read: %s\n", c->errstr);
            return 1;
        }
        answered += got;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    int64_t give_up = now_ns() + 10000000000LL;
    while (answered < sent && now_ns() < give_up) {
        long long got = drain_replies(c, 100);
        if (got < 0) break;
        answered += got;
    }
    printf("sent %lld seconds %.3f rate %.0f late_bursts %lld\n", sent, secs, sent / secs, late);
    redisFree(c);
    return answered == sent ? 0 : 1;
}
