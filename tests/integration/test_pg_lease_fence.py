"""Same-database fencing: the PostgreSQL locker and the postgresql sink on
one real PostgreSQL 15 (lib/postgres.py), sink `lease_fence = true`: every
batch's transaction locks the lease row (FOR KEY SHARE) and commits only
while the row holds the term's token unexpired by the database's clock.
Real redis-server (the redis_psub source) and real baton replicas.

  1. test_lease_stolen: the leader A is SIGSTOPped; the lease row is handed
     to a token nobody holds (a newer epoch, by hand, as a lost or
     superseded term would look to the store) while no other replica has
     written, so the sink's epoch fence row still holds A's epoch: only the
     lease check can refuse A. On SIGCONT, A's next transaction is refused
     ("fenced by the store", counted in baton_fenced_by_sink_total), A's
     term ends within 1 s, and no row of A's epoch is written after the
     steal.
  2. test_paused_mid_write: 2 replicas, ttl 1000; the sink's statement
     takes a shared advisory lock per id, and the test holds that lock for
     1.5 s, so the leader waits inside a transaction, holding the lease row,
     when it is SIGSTOPped (for 3 x ttl). The database aborts that
     transaction (its statement_timeout, the lease left, or
     idle_in_transaction_session_timeout), the standby's acquisition goes
     through and it writes; on SIGCONT the old leader finds its transaction
     failed (an error counted, never a commit) and stops leading: no row of
     the old epoch after the new epoch's first, each id once.
  3. test_chaos_same_db: 3 replicas, redis_psub failover = "replay" at
     1,000 msg/s; the leader SIGKILLed and SIGSTOPped (2 x ttl) alternately
     every 4 s for 40 s (BATON_PG_CHAOS_S), and PostgreSQL itself killed and
     restarted once half-way: every published message has exactly one row,
     and the epoch never decreases along seq (commit order of the inserts).
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
import postgres as pg  # noqa: E402
from publisher import Publisher  # noqa: E402
from test_sink_postgresql import (LEASE, TTL, init_tables, leader, psub_cfg,  # noqa: E402
                                  rows, wait_subscribers)
from test_sink_postgresql_chaos import leader_faults, settle_and_analyse  # noqa: E402

ORDER = ["test_lease_stolen", "test_paused_mid_write", "test_chaos_same_db"]
CHAOS_S = int(os.environ.get("BATON_PG_CHAOS_S", "40"))
KEY = "baton:active:redis_psub:orders"


def own_server(t):
    why = pg.available()
    if why:
        t.skip(why)
    return pg.PgServer()  # its own: test 2 restarts it


def same_db_cluster(t, srv, redis, n, table, lease, statement=None):
    """n replicas, the locker and the sink on srv's database."""
    batons = []
    for i in range(n):
        mport = h.free_port()
        main = "\n".join([
            'locker = { backend = "postgresql"; conninfo = "%s"; };' % srv.conninfo(),
            "lease = { %s };" % "; ".join("%s = %s" % kv for kv in lease.items()),
            'sinks = ( { name = "db"; type = "postgresql"; conninfo = "%s"; table = "%s"; '
            'lease_fence = true;%s } );' % (srv.conninfo(), table,
                                           ' statement = "%s";' % statement if statement else ""),
            'log = { level = "info"; };',
            'metrics = { listen = "127.0.0.1:%d"; };' % mport, ""])
        b = t.baton(main, {"orders.cfg": psub_cfg(redis.port)}, name="r%d" % i, start=False)
        b.mport = mport
        batons.append(b)
    rc, out, err = h.run_baton(["-c", batons[0].cfg, "--init-locker", "--apply"])
    t.require(rc == 0, "--init-locker --apply failed (%d): %s" % (rc, err))
    init_tables(t, batons[0].cfg)
    return batons


def test_lease_stolen(t):
    srv = own_server(t)
    redis = t.redis()
    lease = {"ttl_ms": 30000, "renew_ms": 10000, "retry_ms": 100}
    a, = same_db_cluster(t, srv, redis, 1, "t_steal", lease)
    a.start()
    wait_subscribers(t, redis.port, 1)
    pub = Publisher(redis.port, rate=500).start()
    t.cleanup(pub.stop)
    t.require(h.wait_until(lambda: leader([a]), 15, 0.1), "a does not lead")
    t.require(h.wait_until(lambda: len(rows(srv, "t_steal")) >= 200, 10, 0.1), "a writes")
    epoch_a = int(srv.sql("SELECT epoch FROM baton_leases WHERE key = '%s'" % KEY)[0][0])
    a.signal(signal.SIGSTOP)
    # the locker's own upsert (its ON CONFLICT DO UPDATE sets the key column,
    # so it takes the row's FOR UPDATE lock; a plain UPDATE of the same
    # values would take FOR NO KEY UPDATE and not wait): the steal waits for
    # a transaction of a's that holds the row (paused inside it: until the
    # server ends it, idle_in_transaction_session_timeout 2 s)
    t0 = time.monotonic()
    stolen = srv.sql("INSERT INTO baton_leases AS l (key, token, holder, epoch, expires_at) "
                     "VALUES ('%s', 'stolen', 'the test', 0, clock_timestamp() + interval '60 s') "
                     "ON CONFLICT (key) DO UPDATE SET key = excluded.key, token = excluded.token, "
                     "holder = excluded.holder, epoch = l.epoch + 1, "
                     "expires_at = excluded.expires_at RETURNING l.epoch" % KEY)
    h.log("lease stolen after waiting %.3f s" % (time.monotonic() - t0))
    t.require(stolen, "the lease row %s exists" % KEY)
    before = len(rows(srv, "t_steal"))
    fence_epoch = int(srv.sql("SELECT epoch FROM baton_fence WHERE endpoint = 'orders'")[0][0])
    t.check(fence_epoch == epoch_a, "the epoch fence holds a's epoch (%d), not %d: the lease "
            "check is the only refusal left" % (epoch_a, fence_epoch))
    t_cont = time.monotonic()
    a.signal(signal.SIGCONT)
    fenced = h.wait_until(lambda: "fenced by the store" in a.stderr_text(), 5, 0.01)
    t_fenced = time.monotonic() - t_cont
    t.check(fenced, "a was never fenced by the lease row")
    t.check("lease row" in a.stderr_text(), "the refusal does not name the lease row")
    down = h.wait_until(lambda: h.status_endpoints(a.mport, 0.5).get("orders", {})
                        .get("role") != "leader", 2.0, 0.01)
    t_down = time.monotonic() - t_cont
    h.log("lease stolen: a fenced %.3f s after SIGCONT, not leading %.3f s after"
          % (t_fenced, t_down))
    print("RESULT pg_lease_fence_term_end_s %.3f" % t_down)
    t.check(down and t_down - t_fenced < 1.0, "a still leads 1 s after the fence")
    time.sleep(1)
    after = rows(srv, "t_steal")
    late = [r for r in after[before:] if r[2] == epoch_a]
    t.check(not late, "%d rows of a's epoch written after the lease was taken, e.g. %r"
            % (len(late), late[:3]))
    m = h.metrics(a.mport)
    fenced_n = m.get('baton_fenced_by_sink_total{endpoint="orders"}', 0)
    h.log("a's baton_fenced_by_sink_total: %s" % fenced_n)
    t.check(float(fenced_n) >= 1, "the fence is not counted: %r" % fenced_n)


def test_paused_mid_write(t):
    srv = own_server(t)
    redis = t.redis()
    batons = same_db_cluster(t, srv, redis, 2, "t_pause", LEASE,
                             statement="SELECT pg_advisory_xact_lock_shared(41)")
    for b in batons:
        b.start()
    wait_subscribers(t, redis.port, 2)
    pub = Publisher(redis.port, rate=200).start()
    t.cleanup(pub.stop)
    a = h.wait_until(lambda: leader(batons), 15, 0.1)
    t.require(a, "no leader")
    b = [x for x in batons if x is not a][0]
    t.require(h.wait_until(lambda: len(rows(srv, "t_pause")) >= 100, 15, 0.1), "a writes")
    epoch_a = int(srv.sql("SELECT epoch FROM baton_leases WHERE key = '%s'" % KEY)[0][0])
    # the gate: the test takes the lock exclusively for 1.5 s, a's next
    # transaction waits on it inside (after its lease check): stopped there
    gate = threading.Thread(target=lambda: srv.sql(
        "SELECT pg_advisory_lock(41), pg_sleep(1.5)", timeout=30), daemon=True)
    gate.start()
    waiting = h.wait_until(lambda: srv.sql(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = 'baton' "
        "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"), 10, 0.01)
    t.require(waiting, "a's transaction never waited at the gate")
    a.signal(signal.SIGSTOP)
    log_at = os.path.getsize(srv.log)
    t_stop = time.monotonic()
    took_over = h.wait_until(lambda: leader([b]), 6 * TTL / 1000.0, 0.05)
    t_b = time.monotonic() - t_stop
    time.sleep(max(0.0, 3 * TTL / 1000.0 - (time.monotonic() - t_stop)))
    gate.join(10)
    t.check(took_over, "b did not lead while a was paused")
    epoch_b = int(srv.sql("SELECT epoch FROM baton_leases WHERE key = '%s'" % KEY)[0][0])
    with open(srv.log, errors="replace") as f:
        f.seek(log_at)
        text = f.read()
    # its statement_timeout (the lease left) while it waits, or its
    # idle_in_transaction_session_timeout once the statement is through
    aborted = (text.count("canceling statement due to statement timeout") +
               text.count("terminating connection due to idle-in-transaction timeout"))
    h.log("paused mid-write: a (epoch %d) stopped inside a transaction; b (epoch %d) led %.2f s "
          "later; %d transaction(s) aborted by the database meanwhile"
          % (epoch_a, epoch_b, t_b, aborted))
    t.check(epoch_b > epoch_a, "the epoch did not move: %d -> %d" % (epoch_a, epoch_b))
    t.check(aborted >= 1, "no transaction of the paused leader was aborted by the database: "
            "it was not inside one (the test did not test what it says)")
    a.signal(signal.SIGCONT)
    t.check(h.wait_until(lambda: h.status_endpoints(a.mport, 0.5).get("orders", {})
                         .get("role") != "leader", 2.0, 0.02), "a still leads 2 s after SIGCONT")
    t.check(h.wait_until(lambda: any(r[2] >= epoch_b for r in rows(srv, "t_pause")), 10, 0.1),
            "b wrote nothing within 10 s")
    pub.stop()
    time.sleep(0.5)
    text = a.stderr_text()
    refused = [l for l in text.splitlines()
               if "sink_postgresql" in l and ("attempt failed" in l or "fenced by the store" in l
                                              or "not written" in l)]
    h.log("a after SIGCONT: %d sink line(s) of failure; first: %s"
          % (len(refused), refused[0][:300] if refused else "-"))
    t.check(refused, "a's stale transaction left no trace of failing")
    got = rows(srv, "t_pause")
    first_b = next((r[0] for r in got if r[2] >= epoch_b), None)
    t.check(first_b is not None, "b wrote nothing")
    late = [r for r in got if first_b is not None and r[0] > first_b and r[2] < epoch_b]
    t.check(not late, "%d rows of an older epoch after the new epoch's first, e.g. %r"
            % (len(late), late[:3]))
    ids = [r[1] for r in got]
    t.check(len(ids) == len(set(ids)), "duplicate ids")


def test_chaos_same_db(t):
    srv = own_server(t)
    redis = t.redis()
    batons = same_db_cluster(t, srv, redis, 3, "t_chaos", LEASE)
    for b in batons:
        b.start()
    wait_subscribers(t, redis.port, 3)
    pub = Publisher(redis.port, rate=1000).start()
    t.cleanup(pub.stop)
    t.require(h.wait_until(lambda: leader(batons), 15, 0.1), "no leader")
    restarted = []
    t_db = time.monotonic() + CHAOS_S / 2

    def restart_db():
        if restarted or time.monotonic() < t_db:
            return False
        srv.kill()
        time.sleep(1.0)
        srv.start()
        restarted.append(True)
        h.log("chaos: PostgreSQL killed and restarted")
        return True
    faults = leader_faults(batons, CHAOS_S, restart_db)
    t.require(h.wait_until(lambda: leader(batons), 15, 0.1), "no leader after the faults")
    got = settle_and_analyse(t, "same_db_chaos", srv, "t_chaos", pub, batons)
    epochs = sorted({r[2] for r in got})
    print("RESULT pg_same_db_chaos_faults %d" % faults)
    print("RESULT pg_same_db_chaos_terms %d" % len(epochs))
    t.check(restarted, "PostgreSQL was never restarted")
    t.check(faults >= CHAOS_S // 4 - 4, "only %d faults happened" % faults)


if __name__ == "__main__":
    h.main(globals())
