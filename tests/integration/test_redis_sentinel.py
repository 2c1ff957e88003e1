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
  3. a failover to a replica that never received the lease (issue 17), forced
     with real processes and measured, up to 3 times on fresh deployments:
     the replica is stopped (SIGSTOP) and the master drops its replication
     link (CLIENT KILL TYPE replica: a stopped replica would otherwise still
     read the lease from its socket buffer when continued); baton B acquires
     on the master only, baton C waits as standby; SIGKILL the master, SIGCONT
     the replica: the sentinels promote it without the lease key; B, which
     noticed the break and holds its batch, is paused until C is granted
     there (left running, B usually gets to the new master first and simply
     re-acquires), then continued: it verifies its token on the new master,
     finds it gone and demotes. Printed per run (one
     OVERLAP line): the lease-term overlap by the logs, messages B forwarded
     (B's epoch) received after C's first forwarded message, both epochs,
     duplicates. Asserted: C's epoch > B's (the TIME floor), no such late
     message from B, no duplicates.

Bounded: about a minute and a half; everything is stopped at the end.
"""
import os
import re
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import log_events, rfc3339_ms  # noqa: E402
from sentinel import SentinelCluster, SentinelPublisher, role  # noqa: E402

NAME = "bmaster"
DOWN_AFTER, FAILOVER_TIMEOUT = 1000, 2000
TTL, RENEW, RETRY = 3000, 1000, 250
RATE = 500


def sentinels_cfg(cl):
    return ("sentinels = [ %s ]; master_name = \"%s\";"
            % (", ".join('"%s"' % a for a in cl.sentinel_addrs()), NAME))


def main_cfg(cl, mport, ttl=TTL, renew=RENEW, retry=RETRY):
    return ('locker = { type = "redis"; %s };\n'
            "lease = { ttl_ms = %d; renew_ms = %d; retry_ms = %d; };\n"
            'sinks = ( { name = "out"; type = "stdout"; } );\n'
            'log = { level = "info"; };\n'
            'metrics = { listen = "127.0.0.1:%d"; };\n'
            % (sentinels_cfg(cl), ttl, renew, retry, mport))


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
        t.skip("redis-sentinel is not installed")
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


# ---- 3. failover to a replica that never received the lease ------------------
# down-after: well above the time the replica stays stopped while B starts
# and takes the lease (≈ 0.15 s, checked), so the sentinels never mark it down
# and it is the replica they promote; ttl: long enough that B's term is still
# live when the new master answers (kill -> new master ≈ down-after + election
# + promotion ≈ 2.5 s; B's deadline is at least ttl - renew - margin = 7.5 s
# after the kill), so B demotes by verifying its token there, not by its
# deadline.
NL_DOWN_AFTER, NL_FAILOVER_TIMEOUT = 1000, 2000
NL_TTL, NL_RENEW, NL_RETRY = 10000, 2000, 250
# Runs of the scenario (BATON_SENTINEL_OVERLAP_RUNS; each ~11 s, CI's time
# budget keeps the default at 2), within a budget.
NL_RUNS = int(os.environ.get("BATON_SENTINEL_OVERLAP_RUNS", "2"))
NL_BUDGET_S, NL_SLOW_RUN_S = 55.0, 20.0
PROMOTED_RX = re.compile(r"promoted to leader of (\S+) \(epoch (\d+)\)")
DEMOTED_RX = re.compile(r"demoted from leader of (\S+) \(epoch (\d+)\): (.*)$")


def lease_keys(port):
    """Keys of baton's leases (and their epoch/holder keys) on a
    redis-server, or None when it does not answer."""
    try:
        c = h.Resp(port, timeout=1.0)
    except OSError:
        return None
    try:
        return sorted(k.decode() for k in c.cmd("KEYS", "*:active:*"))
    except (OSError, ConnectionError, h.RedisError):
        return None
    finally:
        c.close()


def no_lease_run(t, n):
    """One forced failover to a replica without the lease; returns the figures."""
    cl = SentinelCluster(t, name=NAME, replicas=1, sentinels=3, down_after_ms=NL_DOWN_AFTER,
                         failover_timeout_ms=NL_FAILOVER_TIMEOUT)
    master, replica = cl.redis[0], cl.redis[1]
    t.require(cl.master_port() == master.port, "sentinels name %r" % cl.master_port())
    pub = SentinelPublisher(cl, channel="chan.x", rate=RATE).start()
    mb, mc = h.free_port(), h.free_port()

    def cfg(mp):
        return main_cfg(cl, mp, NL_TTL, NL_RENEW, NL_RETRY)

    # The replica stops receiving the replication stream: stopped, and its
    # link dropped by the master (what the master writes to a stopped
    # replica's socket would otherwise be read when it is continued).
    t_stop = time.monotonic()
    replica.proc.send_signal(signal.SIGSTOP)
    sampler = None
    try:
        c0 = h.Resp(master.port)
        try:
            dropped = c0.cmd("CLIENT", "KILL", "TYPE", "replica")
        finally:
            c0.close()
        t.require(dropped == 1, "CLIENT KILL TYPE replica dropped %r links" % dropped)
        b = t.baton(cfg(mb), {"psub.cfg": psub_cfg(cl)}, name="run%d-B" % n)
        t.require(h.wait_until(lambda: h.status_endpoints(mb, 0.3).get("psub", {})
                               .get("role") == "leader", 10, 0.05), "B did not lead within 10 s")
        c = t.baton(cfg(mc), {"psub.cfg": psub_cfg(cl)}, name="run%d-C" % n)
        t.require(h.wait_until(lambda: h.status_endpoints(mc, 0.3).get("psub", {})
                               .get("role") == "standby", 10, 0.05),
                  "C did not report standby within 10 s")
        sampler = RoleSampler([b, c], [mb, mc])
        t.require(h.wait_until(lambda: len(records(b)) >= 20, 5, 0.05),
                  "B forwarded fewer than 20 messages in 5 s")
        on_master = lease_keys(master.port)
        t.require(on_master and any(k.endswith("psub") for k in on_master),
                  "B's lease not on the master: %r" % on_master)
        wall_kill = int(time.time() * 1000)
        master.kill()
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    stopped_ms = (time.monotonic() - t_stop) * 1000
    t.check(stopped_ms < NL_DOWN_AFTER / 2, "the replica was stopped %d ms (down-after %d)"
            % (stopped_ms, NL_DOWN_AFTER))
    time.sleep(0.1)
    on_replica = lease_keys(replica.port)
    t.require(on_replica == [], "the replica holds lease keys after SIGCONT: %r" % on_replica)

    # B noticed the break (its subscriber saw the EOF: unsure, holding, not
    # "leader" in /status) but its term is live. Left running, B usually
    # reaches the new master first (7 of 8 unpaused trials: it retries its
    # verification every 100 ms, finds its token gone and re-acquires at
    # once, so nobody else is granted). To force C's grant while B's term is
    # live, B is paused from here until C leads, then continued: B then
    # takes the path under test (verify on the new master, token gone,
    # demote). The lease-term overlap printed is therefore the test's pause
    # past C's grant plus B's own time to notice once running (also printed).
    t.require(h.wait_until(lambda: h.status_endpoints(mb, 0.3).get("psub", {})
                           .get("role") == "standby", 3, 0.01),
              "B still reports leader 3 s after the kill")
    t.require(not log_events(b, DEMOTED_RX), "B demoted before the switch: %r"
              % [m.group(3) for _, m in log_events(b, DEMOTED_RX)])
    b.signal(signal.SIGSTOP)
    try:
        new_master = cl.wait_new_master(master.port, 20)
        t.require(new_master == replica.port, "new master %r, not the replica %d"
                  % (new_master, replica.port))
        switch_ms = int(time.time() * 1000) - wall_kill
        t.require(h.wait_until(lambda: h.status_endpoints(mc, 0.3).get("psub", {})
                               .get("role") == "leader", 10, 0.01),
                  "C did not lead within 10 s of the switch")
    finally:
        wall_resume = int(time.time() * 1000)
        b.signal(signal.SIGCONT)

    def settled():
        return (log_events(c, PROMOTED_RX) and log_events(b, DEMOTED_RX) and
                any(r[1] > wall_kill for r in records(c)))
    t.require(h.wait_until(settled, 15, 0.05),
              "within 15 s of the switch: C promoted %r, B demoted %r, C forwarded %d"
              % (bool(log_events(c, PROMOTED_RX)), bool(log_events(b, DEMOTED_RX)),
                 len(records(c))))
    time.sleep(1.0)
    pub.stop()
    sampler.stop()

    t_pb, mb_prom = log_events(b, PROMOTED_RX)[0]
    epoch_b = int(mb_prom.group(2))
    dem = [(tm, m) for tm, m in log_events(b, DEMOTED_RX) if int(m.group(2)) == epoch_b]
    t.require(dem, "no demotion of B's term (epoch %d) in its log" % epoch_b)
    t_b, why_b = dem[0][0], dem[0][1].group(3)
    t_c, mc_prom = log_events(c, PROMOTED_RX)[0]
    epoch_c = int(mc_prom.group(2))
    recs_b, recs_c = records(b), records(c)
    c_first = min((r[1] for r in recs_c if r[2] == epoch_c), default=None)
    late_b = [r for r in recs_b if r[2] == epoch_b and c_first is not None and r[1] > c_first]
    b_after_kill = [r for r in recs_b if r[1] > wall_kill]
    seqs = [r[0] for r in recs_b + recs_c]
    dups = h.duplicates(seqs)
    both = [s for s in sampler.samples if len(s[1]) > 1]
    f = {"lease_overlap_ms": max(0, t_b - t_c), "delivery_overlap_msgs": len(late_b),
         "epoch_b": epoch_b, "epoch_c": epoch_c, "duplicates": len(dups)}
    h.log("OVERLAP run=%d lease_overlap_ms=%d delivery_overlap_msgs=%d epoch_b=%d epoch_c=%d "
          "duplicates=%d" % (n, f["lease_overlap_ms"], f["delivery_overlap_msgs"], epoch_b,
                             epoch_c, f["duplicates"]))
    h.log("  run %d: replica stopped %d ms (down-after %d); after the kill: sentinels agreed "
          "%d ms, C promoted %d ms, B continued %d ms, B demoted %d ms (%d ms after it was "
          "continued: %s), C's first forwarded message received "
          "%s ms; B forwarded %d (%d received after the kill), C %d; /status samples with both "
          "leaders %d of %d; epoch_c - epoch_b = %.3f s"
          % (n, stopped_ms, NL_DOWN_AFTER, switch_ms, t_c - wall_kill, wall_resume - wall_kill,
             t_b - wall_kill, t_b - wall_resume, why_b,
             "%d" % (c_first - wall_kill) if c_first is not None else "never", len(recs_b),
             len(b_after_kill), len(recs_c), len(both), len(sampler.samples),
             (epoch_c - epoch_b) / 1e6))
    t.check(epoch_c > epoch_b, "run %d: C's epoch %d is not above B's %d" % (n, epoch_c, epoch_b))
    t.check(not late_b, "run %d: B forwarded %d message(s) (epoch %d) received after C's first "
            "(%r), e.g. %r" % (n, len(late_b), epoch_b, c_first, late_b[:3]))
    t.check(not dups, "run %d: duplicates %d, e.g. %r" % (n, len(dups), list(dups.items())[:5]))
    # found gone by the verification after the reconnect, or by a renewal
    # that came due while B was paused (the same token check): not by the
    # deadline
    t.check(any(w in why_b for w in ("lost while the connection was down",
                                     "held with another token", "not held")),
            "run %d: B's term did not end by finding its token gone: %s" % (n, why_b))
    t.check(not both, "run %d: both leaders in /status: %r" % (n, both[:3]))
    for x in (b, c):
        t.check(x.alive(), "%s exited" % x.name)
        x.kill()
    cl.stop()
    return f


def test_failover_to_replica_without_the_lease(t):
    if not shutil.which("redis-sentinel"):
        t.skip("redis-sentinel is not installed")
    t0 = time.monotonic()
    runs = []
    for n in range(1, NL_RUNS + 1):
        t_run = time.monotonic()
        runs.append(no_lease_run(t, n))
        took = time.monotonic() - t_run
        left = NL_BUDGET_S - (time.monotonic() - t0)
        if took > NL_SLOW_RUN_S or left < took * 1.2:
            break
    h.log("%d run(s) in %.1f s: lease-term overlap %s ms, delivery overlap %s messages, "
          "duplicates %s"
          % (len(runs), time.monotonic() - t0, [r["lease_overlap_ms"] for r in runs],
             [r["delivery_overlap_msgs"] for r in runs], [r["duplicates"] for r in runs]))


if __name__ == "__main__":
    h.main(globals())
