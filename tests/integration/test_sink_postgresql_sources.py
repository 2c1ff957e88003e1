"""The postgresql sink behind the at-least-once sources, with leader kills:
real mariadbd (lib/mariadb.py), RabbitMQ (lib/rabbitmq.py), redis-server
(the locker) and PostgreSQL 15 (lib/postgres.py), 3 real baton replicas.

  1. mysql_cdc -> postgresql with a `statement` that upserts into (or
     deletes from) a mirror table: 5,000 random inserts/updates/deletes
     while the leader is SIGKILLed 5 times; afterwards the mirror equals
     the source table (the CDC's repeats after a failover are skipped by
     id, so the statement runs once per row event)
  2. rabbitmq mode = "group" -> postgresql, 3,000 messages at 500 msg/s
     with message ids, the leader SIGKILLed 3 times: every message exactly
     once in the table (the broker redelivers what was unacked; the sink
     skips the ids already recorded)
"""
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
import mariadb as mdb  # noqa: E402
import rabbitmq as rmq  # noqa: E402
from test_sink_postgresql import LEASE, TTL, init_tables, leader, pg_or_skip, sink_cfg  # noqa: E402

ORDER = ["test_mysql_cdc_mirror", "test_rabbitmq_group"]
CDC_USER, CDC_PW = "cdc", "cdc-pw"
OPS = int(os.environ.get("BATON_PG_CDC_OPS", "5000"))
KILLS = 5

MIRROR_SQL = ("WITH del AS (DELETE FROM mirror WHERE $7->>'op' = 'delete' "
              "AND k = ($7->'before'->>'k')::int RETURNING 1) "
              "INSERT INTO mirror (k, v) SELECT ($7->'after'->>'k')::int, $7->'after'->>'v' "
              "WHERE $7->>'op' IN ('insert', 'update') "
              "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")


def workload(n, seed=38):
    """n random statements on src.m (k 0..399): insert when absent, else
    update or delete; paced to last ~18 s (5 leader kills fit)."""
    rnd = random.Random(seed)
    present = set()
    out = []
    for i in range(n):
        k = rnd.randrange(400)
        if k not in present:
            out.append("INSERT INTO src.m VALUES (%d, 'v%d-%d');" % (k, k, i))
            present.add(k)
        elif rnd.random() < 0.6:
            out.append("UPDATE src.m SET v = 'u%d-%d' WHERE k = %d;" % (k, i, k))
        else:
            out.append("DELETE FROM src.m WHERE k = %d;" % k)
            present.discard(k)
        if i % 25 == 24:
            out.append("DO SLEEP(0.08);")
    return "\n".join(out) + "\n"


def kill_leaders(batons, ep, n, going, every_s):
    """SIGKILLs the leader of ep every every_s, up to n times while going()
    holds; each restarted 1.5 x ttl later, once a standby took over.
    Returns how many were killed."""
    kills = 0
    while kills < n and going():
        time.sleep(every_s)
        b = leader(batons, ep)
        if b is None:
            continue
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(5)
        kills += 1
        time.sleep(1.5 * TTL / 1000.0)
        b.start()
    return kills


def test_mysql_cdc_mirror(t):
    srv = pg_or_skip(t)
    redis = t.redis()
    maria = mdb.MariaServer()
    maria.create_user(CDC_USER, CDC_PW)
    maria.sql("CREATE DATABASE src; CREATE TABLE src.m (k INT PRIMARY KEY, v VARCHAR(32));")
    srv.sql("DROP TABLE IF EXISTS mirror; CREATE TABLE mirror (k int PRIMARY KEY, v text)")
    ep = ('name = "cdc"; type = "mysql_cdc"; sink = "db"; host = "127.0.0.1"; port = %d;\n'
          'user = "%s"; password_env = "CDC_PW"; server_id = 4243; tables = [ "src.m" ];\n'
          % (maria.port, CDC_USER))
    batons = []
    for i in range(3):
        mport = h.free_port()
        main = h.main_cfg(redis_port=redis.port, lease=LEASE,
                          sinks=sink_cfg(srv, table="t_cdc", statement=MIRROR_SQL),
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
        b = t.baton(main, {"cdc.cfg": ep}, name="c%d" % i, env={"CDC_PW": CDC_PW}, start=False)
        b.mport = mport
        batons.append(b)
    init_tables(t, batons[0].cfg)
    for b in batons:
        b.start()
    t.require(h.wait_until(lambda: leader(batons, "cdc"), 20, 0.1), "no leader")
    time.sleep(0.5)
    t0 = time.monotonic()
    p = maria.sql_background(workload(OPS))
    kills = kill_leaders(batons, "cdc", KILLS, lambda: p.poll() is None, 1.5)
    t.require(p.wait(120) == 0, "the workload failed: %s" % p.stderr.read()[-500:])
    t_load = time.monotonic() - t0
    want = maria.sql("SELECT k, v FROM src.m ORDER BY k")

    def mirror():
        return [tuple(r) for r in srv.sql("SELECT k, v FROM mirror ORDER BY k")]

    same = h.wait_until(lambda: mirror() == [tuple(r) for r in want], 30, 0.5)
    got = mirror()
    events = int(srv.sql("SELECT count(*) FROM t_cdc")[0][0])
    h.log("cdc: %d statements in %.1f s, %d leader kills, %d row events recorded, source %d rows, "
          "mirror %d rows" % (OPS, t_load, kills, events, len(want), len(got)))
    print("RESULT pg_cdc_row_events %d" % events)
    t.check(kills == KILLS, "only %d leader kills happened during the workload" % kills)
    if not same:
        w = dict(tuple(r) for r in want)
        g = dict(got)
        diff = [(k, w.get(k), g.get(k)) for k in sorted(set(w) | set(g)) if w.get(k) != g.get(k)]
        t.check(False, "the mirror differs from the source in %d keys, e.g. %r" % (len(diff), diff[:5]))
    t.check(events == OPS, "%d row events recorded for %d statements" % (events, OPS))


def test_rabbitmq_group(t):
    from test_rabbitmq import SteadyPublisher
    srv = pg_or_skip(t)
    redis = t.redis()
    broker = rmq.shared_server()
    c = rmq.Amqp(broker.port)
    c.exchange_declare("pgfan", "fanout")
    ep = ('name = "grp"; type = "rabbitmq"; sink = "db"; host = "127.0.0.1"; port = %d;\n'
          'exchange = "pgfan"; mode = "group"; prefetch = 50;\n' % broker.port)
    batons = []
    for i in range(3):
        mport = h.free_port()
        main = h.main_cfg(redis_port=redis.port, lease=LEASE, sinks=sink_cfg(srv, table="t_rmq"),
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
        b = t.baton(main, {"g.cfg": ep}, name="g%d" % i, start=False)
        b.mport = mport
        batons.append(b)
    init_tables(t, batons[0].cfg)
    for b in batons:
        b.start()
    t.require(h.wait_until(lambda: leader(batons, "grp"), 20, 0.1), "no leader")
    time.sleep(1.0)  # the group queue is declared and bound
    total = 3000
    pub = SteadyPublisher(broker.port, "pgfan", count=total, rate=500, prefix="pg")
    pub.start()
    kills = kill_leaders(batons, "grp", 3, pub.is_alive, 1.2)
    pub.join(60)
    t.require(pub.error is None, "publisher: %r" % pub.error)

    def count():
        return int(srv.sql("SELECT count(*) FROM t_rmq WHERE endpoint = 'grp'")[0][0])

    h.wait_until(lambda: count() >= total, 30, 0.25)
    time.sleep(1.0)
    got = srv.sql("SELECT (payload #>> '{}')::jsonb->>'seq' FROM t_rmq WHERE endpoint = 'grp'")
    seqs = [int(r[0]) for r in got]
    missing = set(range(total)) - set(seqs)
    dups = h.duplicates(seqs)
    h.log("rabbitmq group: %d published, %d rows, %d missing, %d duplicated, %d leader kills"
          % (total, len(seqs), len(missing), len(dups), kills))
    print("RESULT pg_rabbitmq_missing %d" % len(missing))
    print("RESULT pg_rabbitmq_duplicates %d" % len(dups))
    t.check(kills == 3, "only %d leader kills happened while publishing" % kills)
    t.check(not missing, "%d messages missing, e.g. %r" % (len(missing), sorted(missing)[:10]))
    t.check(not dups, "%d messages twice, e.g. %r" % (len(dups), sorted(dups)[:10]))
    c.close()


if __name__ == "__main__":
    h.main(globals())
