"""Rolling restarts with `baton drain` (issue 42), real processes: 3 replicas
on a real redis-server (locker and source) and rabbitmq-server, stdout sinks
recorded. Each replica in turn: `baton drain` (returns once handed over),
SIGTERM, started again, `baton resume`; twice around.

  1. redis_psub with failover = "replay" at 2,000 msg/s and rabbitmq group
     at 500 msg/s: 0 lost, every duplicate marked replayed (redis) or
     redelivered (rabbitmq); each restart moves each endpoint's leadership
     at most twice (new terms <= 2 per restart)
  2. the same redis_psub with failover = "gap": the loss per handover is
     printed and at most rate x 50 ms
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import rabbitmq as rmq  # noqa: E402
from publisher import Publisher, sequenced  # noqa: E402
from test_rabbitmq import SteadyPublisher, seq_of  # noqa: E402

ORDER = ["test_rolling_replay", "test_rolling_gap"]

LEASE = {"ttl_ms": 1000, "renew_ms": 300, "retry_ms": 100}
RATE = 2000
ROUNDS = 2


def psub_cfg(port, failover):
    return ('name = "orders"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["orders.*"];\n'
            'failover = "%s";\n' % (port, failover))


def grp_cfg(port):
    return ('name = "grp"; type = "rabbitmq"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; exchange = "roll"; mode = "group"; prefetch = 50;\n' % port)


def cluster(t, redis_port, eps):
    out = []
    for i in range(3):
        mport = h.free_port()
        main = h.main_cfg(redis_port=redis_port, lease=LEASE,
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
        b = t.baton(main, eps, name="r%d" % i)
        b.mport = mport
        out.append(b)
    return out


def subscribed(redis_port, n):
    c = h.Resp(redis_port)
    try:
        return h.wait_until(lambda: c.cmd("PUBLISH", "orders.probe", "x") == n, 15, 0.05)
    finally:
        c.close()


def ready(b):
    st, _ = h.readyz(b.mport)
    return st == 200 and all(e["role"] in ("leader", "standby") for e in h.status_endpoints(b.mport).values())


def roll(t, batons, redis_port):
    """Drain, stop, start, resume each replica in turn, ROUNDS times."""
    restarts = 0
    for _ in range(ROUNDS):
        for b in batons:
            t0 = time.monotonic()
            rc, out, err = h.run_baton(["drain", "-c", b.cfg])
            t.require(rc == 0, "%s: baton drain: exit %d: %s %s" % (b.name, rc, out, err))
            drained = time.monotonic() - t0
            t.check(b.term() == 0, "%s: exit status after the drain and SIGTERM" % b.name)
            b.start()
            t.require(h.wait_until(lambda: ready(b), 15, 0.05), "%s not ready after its restart" % b.name)
            t.require(subscribed(redis_port, 3), "not every replica subscribed after %s's restart" % b.name)
            rc, out, err = h.run_baton(["resume", "-c", b.cfg])
            t.check(rc == 0, "%s: baton resume: exit %d: %s %s" % (b.name, rc, out, err))
            restarts += 1
            h.log("%s: drained in %.0f ms, restarted and ready in %.1f s"
                  % (b.name, drained * 1000, time.monotonic() - t0))
            time.sleep(0.5)
    return restarts


def psub_copies(batons):
    copies = {}
    for b in batons:
        for seq, r in sequenced(b, "orders.x"):
            copies.setdefault(seq, []).append((r["epoch"], bool(r.get("replayed"))))
    return copies


def test_rolling_replay(t):
    redis = t.redis()
    srv = rmq.RabbitServer()
    t.cleanup(srv.stop)
    c = rmq.Amqp(srv.port)
    c.exchange_declare("roll", "fanout")
    c.close()
    batons = cluster(t, redis.port, {"orders.cfg": psub_cfg(redis.port, "replay"), "grp.cfg": grp_cfg(srv.port)})
    t.require(subscribed(redis.port, 3), "every replica subscribed")
    t.require(h.wait_until(lambda: all(ready(b) for b in batons), 20, 0.1), "replicas ready")
    pub = Publisher(redis.port, channel="orders.x", rate=RATE).start()
    total = 500 * 60
    rpub = SteadyPublisher(srv.port, "roll", count=total, rate=500, prefix="r")
    rpub.start()
    time.sleep(1.0)
    restarts = roll(t, batons, redis.port)
    time.sleep(1.0)
    pub.stop()
    rpub.stop_flag = True
    rpub.join(30)
    sent_r = len(rpub.sent_at)
    time.sleep(2.0)
    # redis_psub, replay
    published = [e[0] for e in pub.snapshot() if e[2]]
    copies = psub_copies(batons)
    missing = [s for s in published if s not in copies]
    dups = {s: v for s, v in copies.items() if len(v) > 1}
    unmarked = {s: v for s, v in dups.items() if sum(1 for x in v if not x[1]) > 1}
    terms = {x[0] for v in copies.values() for x in v}
    h.log("redis_psub replay: %d restarts, published %d, missing %d, duplicates %d (unmarked %d), "
          "terms %d" % (restarts, len(published), len(missing), len(dups), len(unmarked), len(terms)))
    print("RESULT rolling_replay_missing %d" % len(missing))
    print("RESULT rolling_replay_duplicates %d" % len(dups))
    t.check(not missing, "redis_psub: %d lost, e.g. %r" % (len(missing), missing[:10]))
    t.check(not unmarked, "redis_psub: duplicates not marked replayed: %r" % list(unmarked.items())[:3])
    t.check(len(terms) <= 1 + 2 * restarts, "redis_psub: %d terms for %d restarts" % (len(terms), restarts))
    # rabbitmq group
    t.require(rpub.error is None, "rabbitmq publisher: %r" % rpub.error)
    def rabbit_records():
        for b in batons:
            b.poll_records()
        return [r for b in batons for r in b.records if r.get("type") == "rabbitmq"]

    got = h.wait_until(lambda: len({seq_of(r) for r in rabbit_records()}) >= sent_r, 20, 0.2)
    allr = rabbit_records()
    seqs = [seq_of(r) for r in allr]
    rmissing = set(range(sent_r)) - set(seqs)
    rdups = h.duplicates(seqs)
    not_redelivered = {s for s in rdups if not any(r.get("redelivered") for r in allr if seq_of(r) == s)}
    rterms = {r["epoch"] for r in allr}
    h.log("rabbitmq group: sent %d, lost %d, duplicates %d (not redelivered %d), terms %d"
          % (sent_r, len(rmissing), len(rdups), len(not_redelivered), len(rterms)))
    print("RESULT rolling_rabbitmq_missing %d" % len(rmissing))
    t.check(got and not rmissing, "rabbitmq group: %d lost, e.g. %r" % (len(rmissing), sorted(rmissing)[:10]))
    t.check(not not_redelivered, "rabbitmq group: duplicates not redelivered: %r" % sorted(not_redelivered)[:10])
    t.check(len(rterms) <= 1 + 2 * restarts, "rabbitmq: %d terms for %d restarts" % (len(rterms), restarts))


def test_rolling_gap(t):
    redis = t.redis()
    batons = cluster(t, redis.port, {"orders.cfg": psub_cfg(redis.port, "gap")})
    t.require(subscribed(redis.port, 1), "the leader subscribed")
    t.require(h.wait_until(lambda: all(ready(b) for b in batons), 20, 0.1), "replicas ready")
    pub = Publisher(redis.port, channel="orders.x", rate=RATE).start()
    time.sleep(1.0)
    restarts = 0
    handovers = 0
    for _ in range(ROUNDS):
        for b in batons:
            leads = h.status_endpoints(b.mport).get("orders", {}).get("role") == "leader"
            t0 = time.monotonic()
            rc, out, err = h.run_baton(["drain", "-c", b.cfg])
            t.require(rc == 0, "%s: baton drain: exit %d: %s %s" % (b.name, rc, out, err))
            handovers += leads
            t.check(b.term() == 0, "%s: exit status" % b.name)
            b.start()
            t.require(h.wait_until(lambda: ready(b), 15, 0.05), "%s not ready after its restart" % b.name)
            restarts += 1
            h.log("%s (%s): drained, restarted, ready in %.1f s" % (b.name, "leader" if leads else "standby",
                                                                    time.monotonic() - t0))
            time.sleep(0.5)
    time.sleep(1.0)
    pub.stop()
    time.sleep(1.5)
    published = [e[0] for e in pub.snapshot() if e[2] is not None]
    copies = psub_copies(batons)
    missing = [s for s in published if s not in copies]
    dups = [s for s, v in copies.items() if len(v) > 1]
    per = len(missing) / float(handovers or 1)
    bound = RATE * 50 // 1000
    h.log("redis_psub gap: %d restarts, %d handovers, published %d, lost %d (%.1f per handover, bound %d), "
          "duplicates %d" % (restarts, handovers, len(published), len(missing), per, bound, len(dups)))
    print("RESULT rolling_gap_lost_per_handover %.1f" % per)
    t.check(handovers >= ROUNDS, "only %d handovers" % handovers)
    t.check(per <= bound, "lost %.1f messages per handover (bound %d)" % (per, bound))
    t.check(not dups, "gap mode repeated %d messages" % len(dups))


if __name__ == "__main__":
    h.main(globals())
