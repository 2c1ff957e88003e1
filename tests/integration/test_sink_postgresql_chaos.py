"""The postgresql sink under leader faults, against a real PostgreSQL 15
(lib/postgres.py) and redis-server, 3 real baton replicas:

  1. redis_psub failover = "replay" at 1,000 msg/s; the leader SIGKILLed and
     SIGSTOPped (2 x ttl) alternately every 4 s for 40 s (BATON_PG_CHAOS_S,
     shortened for the sanitizer stage): rows = published, 0 duplicates,
     epochs never decrease along seq
  2. split brain on purpose (the lease key deleted by hand while the leader
     is SIGSTOPped): the store refuses the stale replica's writes, which
     ends its term within 1 s; no row of the old epoch after the new one's
     first
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher  # noqa: E402
from test_sink_postgresql import (TTL, analyse, cluster, leader, pg_or_skip,  # noqa: E402
                                  rows, wait_subscribers)

ORDER = ["test_split_brain", "test_chaos"]
CHAOS_S = int(os.environ.get("BATON_PG_CHAOS_S", "40"))


def leader_faults(batons, seconds, other=None):
    """Every 4 s for `seconds`: the leader SIGKILLed (restarted 1.5 x ttl
    later) or SIGSTOPped for 2 x ttl, alternately; other(), when given, is
    asked first at every tick and, returning True, is that tick's fault
    instead. Returns the number of leader faults."""
    faults = 0
    t_end = time.monotonic() + seconds
    next_t = time.monotonic()
    while True:
        next_t += 4
        if next_t > t_end:
            break
        time.sleep(max(0.0, next_t - time.monotonic()))
        if other and other():
            continue
        b = leader(batons)
        if b is None:
            continue
        if faults % 2 == 0:
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait(5)
            # restarted once a standby took over (as test_replay.py): a
            # replica restarted at once may win the lease back itself with
            # a ring younger than the gap, which the replay cannot fill
            time.sleep(1.5 * TTL / 1000.0)
            b.start()
        else:
            b.signal(signal.SIGSTOP)
            time.sleep(2 * TTL / 1000.0)
            b.signal(signal.SIGCONT)
        faults += 1
    return faults


def settle_and_analyse(t, name, srv, table, pub, batons):
    """Stops the publisher, waits for the rows to settle, checks them
    (analyse: none missing, none twice, epochs never decrease along seq) and,
    on a failure, logs the replicas' sink, replay, term and locker lines.
    Returns the rows."""
    time.sleep(1)
    pub.stop()
    published = {e[0] for e in pub.snapshot() if e[2]}
    h.wait_until(lambda: int(srv.sql("SELECT count(*) FROM %s" % table)[0][0]) >= len(published),
                 15, 0.25)
    time.sleep(1)
    got = analyse(t, name, srv, table, pub)
    if t.failures:
        for b in batons:
            for line in b.stderr_text().splitlines():
                if ("sink_postgresql" in line or "replay[" in line or "promoted" in line
                        or "demoted" in line or "locker" in line):
                    h.log("%s: %s" % (b.name, line[:300]))
    return got


def test_chaos(t):
    srv = pg_or_skip(t)
    redis = t.redis()
    batons = cluster(t, srv, redis)
    wait_subscribers(t, redis.port, 3)
    pub = Publisher(redis.port, rate=1000).start()
    t.require(h.wait_until(lambda: leader(batons), 15, 0.1), "no leader")
    faults = leader_faults(batons, CHAOS_S)
    settle_and_analyse(t, "chaos", srv, "t_chaos", pub, batons)
    print("RESULT pg_chaos_faults %d" % faults)
    t.check(faults >= CHAOS_S // 4 - 3, "only %d faults happened" % faults)


def test_split_brain(t):
    """Two replicas on a long lease (ttl 30 s, renew 10 s, as
    test_fenced_receiver.py): the leader A is SIGSTOPped, the lease key
    deleted by hand and its release announced, so B acquires a newer epoch
    at once and writes; A resumes still believing it leads (its next renewal
    is seconds away on the CLOCK_BOOTTIME renew grid: the deletion is timed
    away from its instants). A's next transaction must be refused by the
    fence row, ending its term within 1 s."""
    srv = pg_or_skip(t)
    redis = t.redis()
    lease = {"ttl_ms": 30000, "renew_ms": 10000, "retry_ms": 100}
    batons = cluster(t, srv, redis, n=2, table="t_split", lease=lease)
    wait_subscribers(t, redis.port, 2)
    pub = Publisher(redis.port, rate=1000).start()
    t.cleanup(pub.stop)
    a = h.wait_until(lambda: leader(batons), 15, 0.1)
    t.require(a, "no leader")
    b = [x for x in batons if x is not a][0]
    # /readyz probes the sink (its own connection, kept between probes)
    for x in batons:
        t.check(h.wait_until(lambda: h.readyz(x.mport)[0] == 200, 5, 0.1),
                "%s /readyz: %r" % (x.name, h.readyz(x.mport)))
    t.require(h.wait_until(lambda: len(rows(srv, "t_split")) >= 200, 10, 0.1), "a writes")
    renew_ms = lease["renew_ms"]
    while not 2000 <= (time.clock_gettime(time.CLOCK_BOOTTIME) * 1000) % renew_ms <= renew_ms - 4000:
        time.sleep(0.05)
    c = redis.client()
    key = "baton:active:redis_psub:orders"
    t.require(c.cmd("EXISTS", key) == 1, "the lease key %s exists" % key)
    a.signal(signal.SIGSTOP)
    c.cmd("DEL", key)
    c.cmd("PUBLISH", key + ":released", "released")
    t.require(h.wait_until(lambda: leader([b]), 10, 0.05), "b does not lead")
    new_epoch = max(r[2] for r in rows(srv, "t_split"))
    t.require(h.wait_until(lambda: max(r[2] for r in rows(srv, "t_split")) > new_epoch
                           or new_epoch != min(r[2] for r in rows(srv, "t_split")), 10, 0.05),
              "b wrote nothing")
    new_epoch = max(r[2] for r in rows(srv, "t_split"))
    t_cont = time.monotonic()
    a.signal(signal.SIGCONT)
    fenced = h.wait_until(lambda: "fenced by the store" in a.stderr_text(), 5, 0.01)
    t_fenced = time.monotonic() - t_cont
    t.check(fenced, "the stale replica was never fenced by the store")
    down = h.wait_until(lambda: "stopped consuming" in a.stderr_text()
                        or h.status_endpoints(a.mport, 0.5).get("orders", {}).get("role") != "leader",
                        1.0, 0.01)
    t_down = time.monotonic() - t_cont
    h.log("split brain: a fenced %.3f s after SIGCONT, not leading %.3f s after" % (t_fenced, t_down))
    print("RESULT pg_split_brain_term_end_s %.3f" % t_down)
    t.check(down and t_down - t_fenced < 1.0, "the stale replica still leads 1 s after the fence")
    time.sleep(1)
    pub.stop()
    time.sleep(0.5)
    got = rows(srv, "t_split")
    first_new = next((r[0] for r in got if r[2] >= new_epoch), None)
    late = [r for r in got if first_new is not None and r[0] > first_new and r[2] < new_epoch]
    t.check(not late, "%d rows of an older epoch after the new epoch's first, e.g. %r"
            % (len(late), late[:3]))
    ids = [r[1] for r in got]
    t.check(len(ids) == len(set(ids)), "duplicate ids")
    m = h.metrics(a.mport)
    h.log("a's baton_fenced_by_sink_total: %s" % m.get('baton_fenced_by_sink_total{endpoint="orders"}'))


if __name__ == "__main__":
    h.main(globals())
