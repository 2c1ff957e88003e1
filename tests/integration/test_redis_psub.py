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
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, forwarded, now_ms  # noqa: E402

TTL, RETRY = 3000, 250
ORDER = ["test_config_check", "test_steady_state", "test_leader_sigkill", "test_leader_sigterm"]


def psub_cfg(port, extra=""):
    return ('name = "psub"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n%s\n' % (port, extra))


def start_cluster(t, locker_port, source_port, n=3, lease=None, extra=""):
    main = h.main_cfg(redis_port=locker_port, lease=lease)
    return [t.baton(main, {"psub.cfg": psub_cfg(source_port, extra)}) for _ in range(n)]


def wait_subscribed(t, redis_port, timeout=15):
    """Waits until exactly one subscriber receives a probe PUBLISH."""
    c = h.Resp(redis_port)
    try:
        n = h.wait_until(lambda: c.cmd("PUBLISH", "chan.probe", "probe") == 1, timeout, 0.05)
    finally:
        c.close()
    t.require(n, "no baton subscribed within %ds" % timeout)


def leaders_since(batons, since_ms):
    """The batons that forwarded something received at or after since_ms."""
    return [b for b in batons if any(r[2] >= since_ms for r in forwarded(b))]


def wait_single_leader(t, batons, timeout=10):
    since = now_ms()
    ls = h.wait_until(lambda: leaders_since(batons, since), timeout, 0.05)
    t.require(ls and len(ls) == 1, "expected one forwarding process, got %r"
              % [b.name for b in (ls or [])])
    return ls[0]


def all_seqs(batons):
    return [r[0] for b in batons for r in forwarded(b)]


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
    wait_subscribed(t, redis.port)
    pub = Publisher(redis.port, rate=1000).start()
    time.sleep(0.5)
    old = wait_single_leader(t, batons)
    time.sleep(1.0)
    others = [b for b in batons if b is not old]

    t_fault = now_ms()
    status = None
    if how == "kill":
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait(5)
    else:
        status = old.term(15)
    new_ls = h.wait_until(lambda: leaders_since(others, t_fault), TTL / 1000.0 + 5, 0.05)
    t.require(new_ls, "no standby forwarded anything within %d ms after the %s"
              % (TTL + 5000, how))
    time.sleep(1.0)
    pub.stop()
    time.sleep(0.5)  # let the last batch through the sink

    old_recs = forwarded(old)
    new_recs = sorted((r for b in others for r in forwarded(b)), key=lambda r: r[0])
    forwarders = [b.name for b in others if forwarded(b)]
    seqs = [r[0] for r in old_recs] + [r[0] for r in new_recs]
    dups = h.duplicates(seqs)
    entries = pub.snapshot()
    published = [e[0] for e in entries]
    missing = sorted(set(published) - set(seqs))
    t.require(old_recs and new_recs, "old or new leader forwarded nothing")
    old_last = max(old_recs, key=lambda r: r[0])
    new_first = min(new_recs, key=lambda r: r[0])
    takeover = new_first[2] - t_fault
    gap = new_first[2] - old_last[2]
    outside = [s for s in missing if not (old_last[0] < s < new_first[0])]
    max_recv = max((e[2] or 0) for e in entries)
    h.log("%s: old leader %s forwarded %d (last seq %d), new leader %s forwarded %d "
          "(first seq %d); takeover %d ms after the signal; gap (last old -> first new) "
          "%d ms; lost %d (all inside the gap: %s); duplicates %d; max PUBLISH receivers %d"
          % (how, old.name, len(old_recs), old_last[0], forwarders, len(new_recs),
             new_first[0], takeover, gap, len(missing), not outside, len(dups), max_recv))
    t.check(len(dups) == 0, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(not outside, "%d messages lost outside the gap, e.g. %r" % (len(outside), outside[:10]))
    t.check(len(forwarders) == 1, "expected one new leader, got %r" % forwarders)
    t.check(max_recv <= 1, "a PUBLISH reached %d subscribers" % max_recv)
    for b in others:
        t.check(b.alive(), "%s exited" % b.name)
    return takeover, gap, status


def test_leader_sigkill(t):
    takeover, gap, _ = _failover(t, "kill")
    bound = TTL + RETRY + 500
    t.check(takeover <= bound, "takeover took %d ms > ttl + retry + 500 = %d ms" % (takeover, bound))


def test_leader_sigterm(t):
    takeover, gap, status = _failover(t, "term")
    t.check(status == 0, "old leader exited with %r after SIGTERM" % status)
    t.check(gap < 200, "graceful handover took %d ms (>= 200 ms)" % gap)


if __name__ == "__main__":
    h.main(globals())
