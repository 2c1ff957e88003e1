"""redis_psub with 3 real baton processes on one real redis-server (locker and
source), a publisher with unique sequence numbers at a steady rate, and each
process's stdout sink recorded.

  1. steady state: 20,000 messages, each forwarded exactly once, by one process
  2. leader SIGKILL: no duplicates; a standby leads within ttl + retry + 500 ms;
     losses only inside the measured gap
  3. leader SIGTERM: handover (last message of the old leader to the first of
     the new) under 200 ms with the default lease settings; no duplicates

Default lease settings throughout (ttl 3000, renew 1000, retry 250).
Faults 4-6 are in test_redis_psub_faults.py.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, all_seqs, failover, forwarded, wait_subscribed  # noqa: E402

TTL, RETRY = 3000, 250
ORDER = ["test_config_check", "test_steady_state", "test_leader_sigkill", "test_leader_sigterm"]


def psub_cfg(port, extra=""):
    return ('name = "psub"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n%s\n' % (port, extra))


def start_cluster(t, locker_port, source_port, n=3, lease=None, extra=""):
    main = h.main_cfg(redis_port=locker_port, lease=lease)
    return [t.baton(main, {"psub.cfg": psub_cfg(source_port, extra)}) for _ in range(n)]


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p / 100.0))]


# --------------------------------------------------------------------------

def test_config_check(t):
    """The example file passes --check-config; bad settings fail with exit 78
    and a message naming the file and the problem."""
    d = h.mktemp()
    os.makedirs(os.path.join(d, "endpoints.d"))
    main = os.path.join(d, "baton.cfg")
    with open(main, "w") as f:
        f.write(h.main_cfg(redis_port=6379))
    ep = os.path.join(d, "endpoints.d", "psub.cfg")
    with open(os.path.join(h.SOURCE_DIR, "config", "endpoints.d", "redis_psub.cfg")) as f:
        example = f.read()
    cases = [
        (example, 0, "configuration OK"),
        (psub_cfg(6379).replace('patterns = ["chan.*"];', ""), 78, "nothing to subscribe to"),
        (psub_cfg(6379, 'guard = "once";'), 78, "no id"),
        (psub_cfg(6379, 'guard = "none";'), 78, "force_guard"),
        (psub_cfg(6379, 'guard = "none"; force_guard = true;'), 0, "configuration OK"),
        (psub_cfg(6379, 'channels = ["a", "a"];'), 78, "twice"),
        (psub_cfg(6379, "port = 0;").replace("port = 6379;", ""), 78, "port"),
        (psub_cfg(6379, "ping_interval = 5;"), 78, "ping_interval"),
    ]
    for text, want, needle in cases:
        with open(ep, "w") as f:
            f.write(text)
        rc, out, err = h.run_baton(["-c", main, "--check-config"])
        ok = rc == want and needle in (out + err) and (want == 0 or "psub.cfg" in err)
        t.check(ok, "check-config: expected %d with %r, got %d: %s" % (want, needle, rc,
                                                                       (out + err).strip()[:300]))


def test_steady_state(t):
    redis = t.redis()
    batons = start_cluster(t, redis.port, redis.port)
    wait_subscribed(t, redis.port)
    total = 20000
    pub = Publisher(redis.port, rate=5000, count=total)
    t0 = time.monotonic()
    pub.start()
    t.require(pub.wait_done(60), "publisher did not finish within 60 s")
    t_pub = time.monotonic() - t0
    got = h.wait_until(lambda: len(all_seqs(batons)) >= total, 20, 0.1)
    seqs = all_seqs(batons)
    per = {b.name: len(forwarded(b)) for b in batons}
    dups = h.duplicates(seqs)
    entries = pub.snapshot()
    receivers = {}
    for (_s, _t, r) in entries:
        receivers[r] = receivers.get(r, 0) + 1
    lat = [r[2] - r[1] for b in batons for r in forwarded(b)]
    h.log("published %d in %.2f s; forwarded %d; per process %s; duplicates %d; "
          "PUBLISH receiver counts %s; latency p50 %d ms p99 %d ms"
          % (len(entries), t_pub, len(seqs), per, len(dups), receivers,
             pct(lat, 50), pct(lat, 99)))
    t.check(got, "not all %d messages forwarded within 20 s (got %d)" % (total, len(seqs)))
    t.check(len(dups) == 0, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(set(seqs) == set(range(1, total + 1)),
            "forwarded set differs: missing %d, unexpected %d"
            % (len(set(range(1, total + 1)) - set(seqs)), len(set(seqs) - set(range(1, total + 1)))))
    t.check(sum(1 for n in per.values() if n) == 1,
            "expected exactly one forwarding process, got %s" % per)
    t.check(receivers == {1: total},
            "every PUBLISH should reach exactly one subscriber, got %s" % receivers)
    for b in batons:
        t.check(b.alive(), "%s exited" % b.name)


def _failover(t, how):
    redis = t.redis()
    batons = start_cluster(t, redis.port, redis.port)
    return failover(t, batons, redis.port, how, TTL)


def test_leader_sigkill(t):
    takeover = _failover(t, "kill").takeover
    bound = TTL + RETRY + 500
    t.check(takeover <= bound, "takeover took %d ms > ttl + retry + 500 = %d ms" % (takeover, bound))


def test_leader_sigterm(t):
    r = _failover(t, "term")
    t.check(r.status == 0, "old leader exited with %r after SIGTERM" % r.status)
    t.check(r.gap < 200, "graceful handover took %d ms (>= 200 ms)" % r.gap)


if __name__ == "__main__":
    h.main(globals())
