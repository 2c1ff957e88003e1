/* See free_port.h. */
#include "tests/support/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SPAN 12000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char handed_out[65536 / 8];
static unsigned seed;

static int ephemeral_low(void)
{
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &lo) != 1) lo = 32768;
        fclose(f);
    }
    return lo;
}

/* bind without SO_REUSEADDR: a port in TIME_WAIT counts as taken. */
static bool bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static int kernel_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int test_free_port(void)
{
    pthread_mutex_lock(&mu);
    if (!seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (unsigned)getpid() ^ (unsigned)ts.tv_nsec ^ 1u;
    }
    int hi = ephemeral_low();
    int lo = hi - SPAN < 1024 ? 1024 : hi - SPAN;
    if (hi <= lo) hi = lo + 1000;
    int port = -1;
    for (int i = 0; i < 1000 && port < 0; i++) {
        int p = lo + rand_r(&seed) % (hi - lo);
        if (handed_out[p / 8] & (1u << (p % 8)) || !bindable(p)) continue;
        port = p;
    }
    if (port < 0) port = kernel_port();
    if (port > 0) handed_out[port / 8] |= (unsigned char)(1u << (port % 8));
    pthread_mutex_unlock(&mu);
    return port;
}
