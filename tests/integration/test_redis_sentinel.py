"""Redis Sentinel: 3 baton processes whose locker AND redis_psub source reach
Redis through 3 redis-sentinel processes (a master and one replica), a
publisher with unique sequence numbers that also finds the master through the
sentinels (tests/integration/lib/sentinel.py). Each process has a stdout sink
and a metrics listener (/status: role and epoch, sampled every 50 ms).

  1. master SIGKILL under 500 msg/s: the sentinels promote the replica; baton
     follows the new master (the locker's connections and the source); exactly
     one leader within down-after + failover-timeout + ttl (printed with the
     measured figure); never two leaders at once in /status; epochs never go
     down; duplicates counted and printed (expected 0 with stdout sinks);
     messages lost in the gap printed.
  2. the old master restarted: the sentinels make it a replica; then a manual
     SENTINEL FAILOVER back to it demotes the current master under the
     batons' open connections (READONLY, +switch-master): still one leader,
     nobody leads against the demoted server, no duplicates, epochs still
     increasing.

Bounded: about a minute; everything is stopped at the end.
"""
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import rfc3339_ms  # noqa: E402
from sentinel import SentinelCluster, SentinelPublisher, role  # noqa: E402

NAME = "bmaster"
DOWN_AFTER, FAILOVER_TIMEOUT = 1000, 2000
TTL, RENEW, RETRY = 3000, 1000, 250
RATE = 500


def sentinels_cfg(cl):
    return ("sentinels = [ %s ]; master_name = \"%s\";"
            % (", ".join('"%s"' % a for a in cl.sentinel_addrs()), NAME))


def main_cfg(cl, mport):
    return ('locker = { type = "redis"; %s };\n'
            "lease = { ttl_ms = %d; renew_ms = %d; retry_ms = %d; };\n"
            'sinks = ( { name = "out"; type = "stdout"; } );\n'
            'log = { level = "info"; };\n'
            'metrics = { listen = "127.0.0.1:%d"; };\n'
            % (sentinels_cfg(cl), TTL, RENEW, RETRY, mport))


def psub_cfg(cl):
    return ('name = "psub"; type = "redis_psub"; sink = "out"; patterns = ["chan.*"];\n%s\n'
            % sentinels_cfg(cl))


def records(b):
    """[(seq, received_ms, epoch)] forwarded by b."""
    b.poll_records()
    out = []
    for r in b.records:
        try:
            seq = int(r["payload"].split(":", 1)[0])
            out.append((seq, rfc3339_ms(r["received_at"]), int(r.get("epoch", 0))))
        except (KeyError, ValueError, AttributeError, TypeError):
            pass
    return out


class RoleSampler:
    """Samples every process's /status role of "psub" every 50 ms:
    [(monotonic, [leader names], {name: epoch})]."""

    def __init__(self, batons, mports):
        self.batons, self.mports = batons, mports
        self.samples = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        h._cleanups.append(self.stop)

    def _run(self):
        while not self._stop.is_set():
            leaders, epochs = [], {}
            for b, p in zip(self.batons, self.mports):
                e = h.status_endpoints(p, 0.3).get("psub", {})
                if e.get("role") == "leader":
                    leaders.append(b.name)
                    epochs[b.name] = e.get("epoch")
            self.samples.append((time.monotonic(), leaders, epochs))
            time.sleep(0.05)

    def stop(self):
        self._stop.set()
        self._t.join(5)

    def since(self, t0):
        return [s for s in self.samples if s[0] >= t0]


def one_leader_stable_since(samples, t0, hold=1.0):
    """First sample time >= t0 from which exactly one leader (the same one)
    is reported for hold seconds; None if never."""
    ss = [s for s in samples if s[0] >= t0]
    for i, (ti, li, _) in enumerate(ss):
        if len(li) != 1:
            continue
        ok, tj = True, ti
        for tj2, lj, _ in ss[i:]:
            if tj2 - ti > hold:
                break
            tj = tj2
            if lj != li:
                ok = False
                break
        if ok and tj - ti >= hold * 0.8:
            return ti
    return None


def test_sentinel_failover(t):
    if not shutil.which("redis-sentinel"):
        h.log("redis-sentinel not installed: skipped")
        return
    cl = SentinelCluster(t, name=NAME, replicas=1, sentinels=3, down_after_ms=DOWN_AFTER,
                         failover_timeout_ms=FAILOVER_TIMEOUT)
    first_master = cl.master_port()
    t.require(first_master == cl.redis[0].port, "sentinels name %r" % first_master)

    mports = [h.free_port() for _ in range(3)]
    batons = [t.baton(main_cfg(cl, mp), {"psub.cfg": psub_cfg(cl)}) for mp in mports]
    sampler = RoleSampler(batons, mports)
    t.require(h.wait_until(lambda: one_leader_stable_since(sampler.samples, 0, 0.5), 20, 0.1),
              "no single leader within 20 s")
    st = h.http_status(mports[0]) or {}
    h.log("locker in /status: %r" % {k: v for k, v in st.items() if "lock" in k})
    pub = SentinelPublisher(cl, channel="chan.x", rate=RATE).start()
    time.sleep(2.0)

    # ---- 1. master SIGKILL ----------------------------------------------------
    bound_ms = DOWN_AFTER + FAILOVER_TIMEOUT + TTL
    t_kill = time.monotonic()
    wall_kill = int(time.time() * 1000)
    cl.redis[0].kill()
    new_master = cl.wait_new_master(first_master, 30)
    t.require(new_master, "the sentinels promoted no replica within 30 s")
    t_switch = (time.monotonic() - t_kill) * 1000
    h.wait_until(lambda: one_leader_stable_since(sampler.samples, t_kill + 0.001, 1.0) and
                 any(r[1] >= wall_kill + t_switch for b in batons for r in records(b)),
                 bound_ms / 1000.0 + 10, 0.1)
    time.sleep(1.5)
    t_one = one_leader_stable_since(sampler.samples, t_kill + t_switch / 1000.0, 1.0)
    # the first record forwarded from the new master
    after = sorted((r[1], b.name) for b in batons for r in records(b)
                   if r[1] > wall_kill + t_switch)
    first_fwd_ms = after[0][0] - wall_kill if after else None
    overlap = [s for s in sampler.since(t_kill) if len(s[1]) > 1]
    one_ms = (t_one - t_kill) * 1000 if t_one else None
    h.log("master SIGKILL: sentinels agreed on the new master after %d ms; exactly one leader "
          "(stable) %s ms after the kill, first message forwarded from the new master %s ms "
          "after it; bound down-after + failover-timeout + ttl = %d + %d + %d = %d ms; "
          "samples with two leaders: %d"
          % (t_switch, "%d" % one_ms if one_ms is not None else "never",
             "%d" % first_fwd_ms if first_fwd_ms is not None else "never",
             DOWN_AFTER, FAILOVER_TIMEOUT, TTL, bound_ms, len(overlap)))
    t.check(one_ms is not None and one_ms <= bound_ms,
            "exactly one leader %s ms after the kill (bound %d ms)" % (one_ms, bound_ms))
    t.check(first_fwd_ms is not None and first_fwd_ms <= bound_ms,
            "first message from the new master %s ms after the kill (bound %d)"
            % (first_fwd_ms, bound_ms))
    t.check(not overlap, "two leaders at once in /status: %r" % overlap[:3])

    # ---- 2. the old master back as a replica, then a manual failover to it --
    cl.redis[0].start()
    t.require(h.wait_until(lambda: role(cl.redis[0].port) == "slave", 20, 0.1),
              "the old master did not become a replica")
    t.require(h.wait_until(lambda: __import__("sentinel").replica_synced(cl.redis[0].port),
                           20, 0.1), "the old master never synced as a replica")
    time.sleep(2.0)
    leaders_on_replica = [s for s in sampler.since(t_kill) if len(s[1]) > 1]
    t.check(not leaders_on_replica, "two leaders after the old master came back")
    t.check(cl.master_port() == new_master, "the sentinels moved the master back by themselves")

    t_fo = time.monotonic()
    wall_fo = int(time.time() * 1000)
    cl.failover()
    back = cl.wait_new_master(new_master, 30)
    t.require(back == first_master, "manual failover: the master is %r" % back)
    t_back = (time.monotonic() - t_fo) * 1000
    h.wait_until(lambda: one_leader_stable_since(sampler.samples, t_fo + t_back / 1000.0, 1.0),
                 15, 0.1)
    time.sleep(2.0)
    pub.stop()
    time.sleep(0.5)
    sampler.stop()
    t_one2 = one_leader_stable_since(sampler.samples, t_fo + t_back / 1000.0, 1.0)
    overlap2 = [s for s in sampler.since(t_fo) if len(s[1]) > 1]
    h.log("manual failover back to the old master: sentinels agreed after %d ms; one stable "
          "leader %s ms after the FAILOVER command; samples with two leaders: %d"
          % (t_back, "%d" % ((t_one2 - t_fo) * 1000) if t_one2 else "never", len(overlap2)))
    t.check(t_one2 is not None, "no single stable leader after the manual failover")
    t.check(not overlap2, "two leaders at once after the manual failover: %r" % overlap2[:3])
    for b in batons:
        t.check(b.alive(), "%s exited" % b.name)
        text = b.stderr_text()
        for needle in ("READONLY", "+switch-master", "switched the master", "is a replica"):
            n = text.count(needle)
            if n:
                h.log("%s log: %d line(s) with %r" % (b.name, n, needle))

    # ---- figures over the whole run ---------------------------------------
    allrecs = [(r, b.name) for b in batons for r in records(b)]
    seqs = [r[0] for r, _ in allrecs]
    dups = h.duplicates(seqs)
    entries = pub.snapshot()
    sent = set(e[0] for e in entries)
    missing = sorted(sent - set(seqs))
    unknown = sum(1 for e in entries if e[2] is None)
    # epochs in stream order (by sequence number) never decrease
    by_seq = sorted((r[0], r[2], n) for r, n in allrecs)
    drops = [(a, b) for a, b in zip(by_seq, by_seq[1:]) if b[1] < a[1]]
    epochs = sorted(set(r[2] for r, _ in allrecs))
    forwarders = sorted(set(n for _, n in allrecs))
    # losses and epochs per phase: before the SIGKILL, up to the manual
    # failover, after it (by publication time)
    sent_at = {e[0]: e[1] for e in entries}
    in_kill = [s for s in missing if wall_kill <= sent_at[s] < wall_fo]
    in_fo = [s for s in missing if sent_at[s] >= wall_fo]
    for label, lo, hi in (("before the SIGKILL", 0, wall_kill), ("SIGKILL -> manual failover",
                          wall_kill, wall_fo), ("after the manual failover", wall_fo, 1 << 62)):
        ph = sorted(set((r[2], n) for r, n in allrecs if lo <= r[1] < hi))
        h.log("epochs %s: %s" % (label, ph))
    unsettled = [s for s in sampler.since(t_kill) if len(s[1]) != 1]
    h.log("/status samples after the SIGKILL with no or several leaders: %d of %d (%.1f s)"
          % (len(unsettled), len(sampler.since(t_kill)), len(unsettled) * 0.05))
    h.log("published %d (%d with unknown outcome: connection broke before the answer), "
          "forwarded %d, duplicates %d, lost %d (%d in the SIGKILL gap, %d in the manual failover), "
          "epochs seen %d (%s), forwarding processes %s, epoch decreases in stream order %d; "
          "publisher masters %s"
          % (len(entries), unknown, len(seqs), len(dups), len(missing), len(in_kill), len(in_fo),
             len(epochs), ", ".join(str(e) for e in epochs[:6]), forwarders, len(drops),
             [p for _, p in pub.masters]))
    t.check(len(dups) == 0, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(not drops, "epoch went down in stream order: %r" % drops[:3])
    t.check(len(missing) < len(entries) // 2, "more than half the messages lost")


if __name__ == "__main__":
    h.main(globals())
