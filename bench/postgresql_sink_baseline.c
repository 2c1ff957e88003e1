/* Baseline for bench_postgresql_sink.py: a bare libpq loop doing the
 * postgresql sink's transaction per batch, as fast as it goes.
 *
 *   bench_postgresql_sink_baseline CONNINFO TABLE N BATCH ENVELOPE
 *
 * One connection, statements prepared once, then N/BATCH transactions:
 * BEGIN + SET LOCAL timeouts + the fence upsert (one simple query, one
 * round trip, as the sink sends them), the INSERT ... SELECT FROM
 * jsonb_array_elements of BATCH envelopes (ENVELOPE with "id" made unique
 * per message), COMMIT; the same SQL as src/sink_postgresql.c. Blocking
 * libpq calls (PQexec*): no lease, no poll loop. Prints the elapsed time
 * and its CPU on stderr ("secs S cpu_us U"). */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void die(PGconn *c, PGresult *r, const char *what)
{
    fprintf(stderr, "%s: %s", what, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
    exit(1);
}

static void ok(PGconn *c, PGresult *r, const char *what)
{
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) die(c, r, what);
    PQclear(r);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s CONNINFO TABLE N BATCH ENVELOPE\n", argv[0]);
        return 2;
    }
    const char *table = argv[2];
    long n = atol(argv[3]), batch = atol(argv[4]);
    const char *env = argv[5];
    const char *idk = strstr(env, "\"id\":\"");
    if (!idk || batch < 1) {
        fprintf(stderr, "ENVELOPE needs an \"id\" member; BATCH >= 1\n");
        return 2;
    }
    size_t head = (size_t)(idk - env) + 6; /* up to the id's first character */
    const char *rest = strchr(env + head, '"');
    PGconn *c = PQconnectdb(argv[1]);
    if (PQstatus(c) != CONNECTION_OK) die(c, NULL, "connect");
    char sql[1024];
    Oid types[3] = {25, 20, 25};
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (endpoint, id, epoch, received_at, source, payload) "
             "SELECT $1, e->>'id', $2, (e->>'received_at')::timestamptz, e->>'type', "
             "e->'payload' FROM jsonb_array_elements($3::jsonb) AS e "
             "ON CONFLICT (endpoint, id) DO NOTHING", table);
    ok(c, PQprepare(c, "insert", sql, 3, types), "prepare insert");

    size_t cap = (size_t)batch * (strlen(env) + 32) + 16;
    char *buf = malloc(cap);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long done = 0;
    while (done < n) {
        long m = n - done < batch ? n - done : batch;
        size_t len = 0;
        buf[len++] = '[';
        for (long i = 0; i < m; i++) {
            if (i) buf[len++] = ',';
            memcpy(buf + len, env, head);
            len += head;
            len += (size_t)sprintf(buf + len, "base-%ld", done + i);
            size_t tail = strlen(rest);
            memcpy(buf + len, rest, tail);
            len += tail;
        }
        buf[len++] = ']';
        buf[len] = '\0';
        /* BEGIN, the timeouts and the fence in one round trip, as the sink */
        PGresult *r = PQexec(c, "BEGIN; SET LOCAL statement_timeout = 1000; "
                                "SET LOCAL idle_in_transaction_session_timeout = 1000; "
                                "INSERT INTO baton_fence AS f (endpoint, epoch) VALUES "
                                "('bench-base', 1) ON CONFLICT (endpoint) DO UPDATE SET epoch = "
                                "EXCLUDED.epoch WHERE f.epoch <= EXCLUDED.epoch RETURNING f.epoch");
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) die(c, r, "fence");
        PQclear(r);
        const char *p[3] = {"bench-base", "1", buf};
        ok(c, PQexecPrepared(c, "insert", 3, p, NULL, NULL, 0), "insert");
        ok(c, PQexec(c, "COMMIT"), "commit");
        done += m;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    long long cpu = (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
                    (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
    fprintf(stderr, "secs %.6f cpu_us %lld\n", secs, cpu);
    free(buf);
    PQfinish(c);
    return 0;
}
