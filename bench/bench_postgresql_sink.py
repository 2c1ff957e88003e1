#!/usr/bin/env python3
"""Benchmark: redis_psub -> postgresql sink, against a bare libpq loop.

    bench/bench_postgresql_sink.py [BUILD_DIR]    (default: $BATON_BUILD_DIR or ./build)

One PostgreSQL 15 on loopback (tests/integration/lib/postgres.py: fsync
off, as every run here), one after the other, never at the same time:
- baton: one replica (a Redis locker), redis_psub endpoint with
  queue_batch_max = 64 -> postgresql sink (one transaction per batch of up
  to 64: the fence upsert and one INSERT ... SELECT FROM
  jsonb_array_elements); N messages published with redis-benchmark (-c 4
  -P 32); time from the first PUBLISH until the table holds N rows more;
- baseline: bench_postgresql_sink_baseline, a bare libpq loop doing the
  same transaction (the same SQL, prepared once, blocking calls) per batch
  of 64 envelopes shaped like baton's, N messages.
Both measured the same way, by the server's clock: rows per second between
the first and the last transaction's start (written_at = now()).
ROUNDS (default 3) rounds taking turns, the best of each compared. Target
(issue 38): baton / baseline >= 0.9. Prints RESULT {json} lines.
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

h = benchlib.harness()
import postgres as pg  # noqa: E402

BUILD = os.environ["BATON_BUILD_DIR"]
BASELINE = os.path.join(BUILD, "bench", "bench_postgresql_sink_baseline")
N = int(os.environ.get("N", "100000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
BATCH = 64
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "120"))
PAYLOAD = "payload-30-bytes-0123456789abc"
# what baton's redis_psub envelope looks like (the baseline inserts it)
ENVELOPE = ('{"endpoint":"bench","type":"redis_psub","epoch":1796641420676461,'
            '"id":"g0123456789abcdef-1","received_at":"2026-12-07T11:00:00.000Z",'
            '"channel":"chan.x","pattern":"chan.*","payload":"%s"}' % PAYLOAD)


def rows(srv, table):
    return int(srv.sql("SELECT count(*) FROM %s" % table)[0][0])


def server_rate(srv, table, after_seq):
    """Rows per second between the first and the last transaction of the
    rows past after_seq, by the server's clock (written_at = now(), the
    transaction's start): the same measure for both, no polling inside it.
    Also the mean rows per transaction."""
    r = srv.sql("SELECT count(*), extract(epoch FROM max(written_at) - min(written_at)), "
                "count(DISTINCT written_at) FROM %s WHERE seq > %d" % (table, after_seq))[0]
    n, secs, txns = int(r[0]), float(r[1]), int(r[2])
    last = int(srv.sql("SELECT count(*) FROM %s WHERE seq > %d AND written_at = "
                       "(SELECT max(written_at) FROM %s WHERE seq > %d)"
                       % (table, after_seq, table, after_seq))[0][0])
    return (n - last) / secs, n / float(txns)


def max_seq(srv, table):
    return int(srv.sql("SELECT coalesce(max(seq), 0) FROM %s" % table)[0][0])


def run_baton(work, srv, source, locker, n, tag):
    sink = '{ name = "db"; type = "postgresql"; conninfo = "%s"; table = "b_sink"; }' % srv.conninfo()
    main = h.main_cfg(redis_port=locker.port, sinks=sink, log_level="warn")
    ep = ('name = "bench"; type = "redis_psub"; sink = "db"; host = "127.0.0.1"; port = %d; '
          'patterns = [ "chan.*" ]; queue_size = 1000000; queue_batch_max = %d;\n'
          % (source.port, BATCH))
    b = h.Baton(work, main, {"psub.cfg": ep}, name="baton-%s" % tag, start=False)
    rc = subprocess.run([h.BATON_BIN, "-c", b.cfg, "--init-sink", "db", "--apply"],
                        capture_output=True, text=True)
    if rc.returncode != 0:
        raise RuntimeError("--init-sink failed: %s" % rc.stderr)
    b.start()
    try:
        if not h.wait_until(lambda: source.client().cmd("PUBSUB", "NUMPAT") == 1, 15):
            raise RuntimeError("baton did not subscribe: %s" % b.stderr_text()[-1500:])
        time.sleep(0.5)  # the lease and the first connection
        base = rows(srv, "b_sink")
        seq0 = max_seq(srv, "b_sink")
        t0 = time.monotonic()
        pub = subprocess.Popen(["redis-benchmark", "-p", str(source.port), "-c", "4", "-P", "32",
                                "-n", str(n), "-q", "PUBLISH", "chan.x", PAYLOAD],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done = h.wait_until(lambda: rows(srv, "b_sink") >= base + n, TIMEOUT_S, 0.25)
        pub.wait(30)
        if not done:
            raise RuntimeError("baton: %d of %d rows in %.0f s: %s" % (
                rows(srv, "b_sink") - base, n, TIMEOUT_S, b.stderr_text()[-1000:]))
        return server_rate(srv, "b_sink", seq0)
    finally:
        b.term()


def run_baseline(srv, n):
    srv.sql("TRUNCATE b_base")
    p = subprocess.run([BASELINE, srv.conninfo(), "b_base", str(n), str(BATCH), ENVELOPE],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError("baseline failed (rc %d): %s" % (p.returncode, p.stderr[-500:]))
    if rows(srv, "b_base") != n:
        raise RuntimeError("baseline wrote %d rows of %d" % (rows(srv, "b_base"), n))
    return server_rate(srv, "b_base", 0)


def main():
    why = pg.available()
    if why:
        print("SKIP: %s" % why)
        return 0
    work = h.mktemp("baton-bench-pg-")
    srv = pg.PgServer()
    srv.sql("CREATE TABLE IF NOT EXISTS baton_fence (endpoint text PRIMARY KEY, epoch bigint NOT NULL);"
            "CREATE TABLE b_base (seq bigserial PRIMARY KEY, endpoint text NOT NULL, id text NOT NULL, "
            "epoch bigint NOT NULL, received_at timestamptz, source text, payload jsonb, "
            "written_at timestamptz NOT NULL DEFAULT now(), UNIQUE (endpoint, id))")
    locker = h.RedisServer()
    source = h.RedisServer()
    best_b = best_l = 0.0
    try:
        for r in range(ROUNDS):
            order = ("baton", "baseline") if r % 2 == 0 else ("baseline", "baton")
            for who in order:
                if who == "baton":
                    v, per = run_baton(work, srv, source, locker, N, "r%d" % r)
                    best_b = max(best_b, v)
                else:
                    v, per = run_baseline(srv, N)
                    best_l = max(best_l, v)
                print("round %d %s: %.0f rows/s, %.1f rows per transaction" % (r + 1, who, v, per),
                      flush=True)
    finally:
        locker.stop()
        source.stop()
        srv.stop()
    ratio = best_b / best_l if best_l else 0.0
    print("RESULT " + json.dumps({
        "workload": "redis_psub -> postgresql sink, transactions of 64 (fence + one INSERT ... "
                    "jsonb_array_elements) vs a bare libpq loop",
        "baton": round(best_b), "baseline": round(best_l), "unit": "rows/s",
        "ratio": round(ratio, 3), "target": ">= 0.9", "pass": ratio >= 0.9}))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    benchlib.run(main)
