/* Bare paho.mqtt.c (MQTTAsync) subscriber: the ceiling of the client library
 * baton's mqtt endpoint is built on. Persistent MQTT 5 session, one filter,
 * each payload written to stdout as a line, acknowledged on return from the
 * callback; exits after N messages and prints the rate to stderr.
 *
 *   bench_mqtt_baseline URI TOPIC_FILTER QOS N CLIENT_ID   (N = 0: subscribe, wait 1 s, exit) */
#include <MQTTAsync.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_long count;
static atomic_int subscribed;
static MQTTAsync client;
static const char *filter;
static int qos;

static int on_message(void *ctx, char *topic, int topic_len, MQTTAsync_message *m)
{
    (void)ctx;
    (void)topic_len;
    fwrite(m->payload, 1, (size_t)m->payloadlen, stdout);
    fputc('\n', stdout);
    MQTTAsync_freeMessage(&m);
    MQTTAsync_free(topic);
    atomic_fetch_add(&count, 1);
    return 1;
}

static void on_sub(void *ctx, MQTTAsync_successData5 *r)
{
    (void)ctx;
    (void)r;
    atomic_store(&subscribed, 1);
}

static void on_connect(void *ctx, MQTTAsync_successData5 *r)
{
    (void)ctx;
    (void)r;
    MQTTAsync_responseOptions o = MQTTAsync_callOptions_initializer;
    o.onSuccess5 = on_sub;
    MQTTAsync_subscribe(client, filter, qos, &o);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s URI TOPIC_FILTER QOS N CLIENT_ID\n", argv[0]);
        return 64;
    }
    filter = argv[2];
    qos = atoi(argv[3]);
    long n = atol(argv[4]);
    /* as baton does: no per-packet protocol trace formatting (see endpoints/mqtt.c) */
    MQTTAsync_setTraceLevel(MQTTASYNC_TRACE_ERROR);
    MQTTAsync_createOptions co = MQTTAsync_createOptions_initializer5;
    if (MQTTAsync_createWithOptions(&client, argv[1], argv[5], MQTTCLIENT_PERSISTENCE_NONE, NULL, &co) !=
        MQTTASYNC_SUCCESS)
        return 1;
    MQTTAsync_setCallbacks(client, NULL, NULL, on_message, NULL);
    MQTTAsync_connectOptions o = MQTTAsync_connectOptions_initializer5;
    MQTTProperties props = MQTTProperties_initializer;
    MQTTProperty p = {.identifier = MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL};
    p.value.integer4 = 3600;
    MQTTProperties_add(&props, &p);
    o.cleanstart = 0;
    o.connectProperties = &props;
    o.onSuccess5 = on_connect;
    double t0 = now_s();
    if (MQTTAsync_connect(client, &o) != MQTTASYNC_SUCCESS) return 1;
    if (n == 0) {
        for (int i = 0; i < 1000 && !atomic_load(&subscribed); i++) usleep(10000);
        usleep(200000);
        fflush(stdout);
        _exit(atomic_load(&subscribed) ? 0 : 1);
    }
    while (atomic_load(&count) < n && now_s() - t0 < 120) usleep(1000);
    double dt = now_s() - t0;
    fflush(stdout);
    fprintf(stderr, "%ld messages in %.3f s = %.0f msg/s\n", (long)atomic_load(&count), dt,
            (double)atomic_load(&count) / dt);
    _exit(atomic_load(&count) >= n ? 0 : 1);
}
