"""Fault suite, redis_psub: 3 real baton replicas, a sequenced publisher at
500 msg/s, one fault per scenario, one CHAOS summary line each.

What the design promises for redis_psub (README, "What each endpoint
loses"): never a duplicate; loss only for messages published while no
leader consumes (the failover gap) or, for a sink failure, drops that are
counted and logged. So every scenario asserts: zero duplicates, no loss
outside the fault window (fault start - 300 ms .. fault end + ttl + 1 s), no
surviving process exited, and one leader afterwards.

Scenarios (each ~10 s):
  leader_sigkill, leader_sigstop (2 x ttl), standby_sigstop (no loss at all),
  locker_restart (lease Redis restarted, data lost), locker_unreachable
  (lease Redis SIGSTOPped for 2 x ttl), source_restart (source Redis restarted),
  sink_http_500 (HTTP sink answered 500 for 2 s: retried, no loss),
  sink_http_stall (one 5 s stall: queued, no loss), stdout_disk_full (stdout
  on a 64 KiB tmpfs: drops counted, forwarding resumes when space returns),
  stdout_closed_pipe (every message dropped and counted, process stays up).
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import chaos as c  # noqa: E402
from chaos import h  # noqa: E402

RATE = 500
ORDER = ["test_leader_sigkill", "test_leader_sigstop", "test_standby_sigstop",
         "test_locker_restart", "test_locker_unreachable", "test_source_restart",
         "test_sink_http_500", "test_sink_http_stall", "test_stdout_disk_full",
         "test_stdout_closed_pipe"]


class Cluster:
    def __init__(self, t, n=3, sinks=None, separate_source=True, start=True):
        self.t = t
        self.locker = t.redis()
        self.source = t.redis() if separate_source else self.locker
        self.sinks = sinks
        self.reps = []
        for i in range(n):
            self.add("r%d" % (i + 1), start=start)

    def add(self, name, start=True):
        r = c.Replica(self.t, self.sinks, {"psub.cfg": c.psub_endpoint(self.source.port)},
                      name, self.locker.port, start=start)
        self.reps.append(r)
        return r

    def leader(self, timeout=15):
        return c.wait_leader(self.reps, "psub", timeout)


def settle(t, cl, receiver=None, min_sent_ms=None):
    """Waits until a message sent after min_sent_ms is forwarded; returns its
    sink-side receive time (ms) or None."""
    def got():
        recs = c.http_records(receiver) if receiver else c.stdout_records(cl.reps)
        after = [r[2] for r in recs if r[1] >= min_sent_ms]
        return min(after) if after else None
    return h.wait_until(got, 20, 0.1)


def run(t, name, fault, sinks=None, receiver=None, expect_no_loss=False, killed=()):
    """Generic scenario: fault(cl, leader) performs the fault and returns
    (t_from_ms, t_to_ms, extra dict)."""
    cl = Cluster(t, sinks=sinks)
    t.require(c.wait_subscribed(cl.source.port), "no replica subscribed within 15 s")
    pub = c.Publisher(cl.source.port, rate=RATE).start()
    time.sleep(1.0)
    leader = cl.leader()
    t.require(leader is not None, "no single leader")
    t_from, t_to, extra = fault(cl, leader)
    recovered = settle(t, cl, receiver, t_to + 100)
    time.sleep(1.5)
    pub.stop()
    time.sleep(0.8)
    recs = c.http_records(receiver) if receiver else c.stdout_records(cl.reps)
    o = c.Outcome(pub.snapshot(), recs, t_from, t_to)
    gone = set(killed)
    survivors = [r for r in cl.reps if r.name not in gone]
    c.verdict(t, name, o, survivors, "psub",
              recovered_ms=(recovered - t_to) if recovered else None,
              expect_no_loss=expect_no_loss, **extra)
    return cl, o


# --------------------------------------------------------------------------

def test_leader_sigkill(t):
    killed = []

    def fault(cl, leader):
        t0 = c.now_ms()
        leader.b.proc.send_signal(signal.SIGKILL)
        leader.b.proc.wait(5)
        killed.append(leader.name)
        return t0, t0, {"killed": leader.name}
    run(t, "redis_psub.leader_sigkill", fault, killed=killed)


def test_leader_sigstop(t):
    state = {}

    def fault(cl, leader):
        t0 = c.now_ms()
        leader.b.signal(signal.SIGSTOP)
        time.sleep(2 * c.TTL / 1000.0)
        leader.b.signal(signal.SIGCONT)
        state["old"] = leader
        return t0, c.now_ms(), {"stopped_ms": 2 * c.TTL}
    cl, o = run(t, "redis_psub.leader_sigstop", fault)
    old = state["old"]
    # the resumed process rejoins as a standby (someone else took over)
    t.check(h.wait_until(lambda: old.role("psub") == "standby", 10, 0.1),
            "the resumed leader is not a standby: %r" % old.role("psub"))


def test_standby_sigstop(t):
    def fault(cl, leader):
        standby = [r for r in cl.reps if r is not leader][0]
        t0 = c.now_ms()
        standby.b.signal(signal.SIGSTOP)
        time.sleep(2 * c.TTL / 1000.0)
        standby.b.signal(signal.SIGCONT)
        return t0, c.now_ms(), {"stopped": standby.name}
    run(t, "redis_psub.standby_sigstop", fault, expect_no_loss=True)


def test_locker_restart(t):
    def fault(cl, leader):
        return c.restart_redis(cl.locker)
    run(t, "redis_psub.locker_restart", fault)


def test_locker_unreachable(t):
    def fault(cl, leader):
        return c.pause_redis(cl.locker)
    run(t, "redis_psub.locker_unreachable", fault)


def test_source_restart(t):
    def fault(cl, leader):
        return c.restart_redis(cl.source)
    run(t, "redis_psub.source_restart", fault)


def test_sink_http_500(t):
    rx = h.HttpReceiver(fail_status=500)

    def fault(cl, leader):
        return c.sink_http_500(rx)
    run(t, "redis_psub.sink_http_500", fault, sinks=c.http_sink(rx), receiver=rx,
        expect_no_loss=True)


def test_sink_http_stall(t):
    rx = h.HttpReceiver()

    def fault(cl, leader):
        t0 = c.now_ms()
        rx.stall_s = 5.0
        time.sleep(0.3)  # the request in flight now stalls for 5 s
        rx.stall_s = 0.0
        time.sleep(5.0)
        return t0, c.now_ms(), {"stall_ms": 5000}
    cl, o = run(t, "redis_psub.sink_http_stall", fault, sinks=c.http_sink(rx, timeout_ms=10000),
                receiver=rx, expect_no_loss=True)
    t.check(o.gap_ms is not None and o.gap_ms >= 4000,
            "expected a ~5 s gap at the sink during the stall, measured %r" % o.gap_ms)


# --------------------------------------------------------------------------
# stdout that cannot be written

def tolerant_records(path, name, channel="chan.x", verbose=False):
    """Records from a stdout file that may hold cut lines: ([(seq, sent,
    received, name)], bad line count)."""
    out, bad = [], 0
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return out, bad
    import json
    for line in data.split(b"\n"):
        line = line.strip(b"\0").strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            if verbose:
                h.log("unparsable stdout line (%d bytes): %r ... %r" % (len(line), line[:80], line[-120:]))
            continue
        if rec.get("channel") != channel:
            continue
        p = c.parse_payload(rec.get("payload"))
        if p:
            out.append((p[0], p[1], c.rfc3339_ms(rec["received_at"]), name))
    return out, bad


def dropped(rep):
    e = rep.endpoint("psub")
    return e.get("dropped") if e else None


def test_stdout_disk_full(t):
    if os.geteuid() != 0:
        c.summary("redis_psub.stdout_disk_full", 0, 0, 0, None, skipped="not_root")
        t.skip("stdout on a full disk needs root (a tmpfs mount)")
    mnt = h.mktemp("baton-chaos-tmpfs-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt],
                       capture_output=True, text=True)
    if p.returncode != 0:
        c.summary("redis_psub.stdout_disk_full", 0, 0, 0, None, skipped="mount_failed")
        t.skip("mounting a 64 KiB tmpfs failed: %s" % p.stderr.strip())
    t.cleanup(lambda: subprocess.run(["umount", "-l", mnt], capture_output=True))
    cl = Cluster(t, n=0)
    first = cl.add("r1", start=False)
    first.b.out_path = os.path.join(mnt, "out.jsonl")
    first.b.start()
    t.require(c.wait_leader(cl.reps, "psub", 15) is first, "r1 did not lead")
    cl.add("r2")
    cl.add("r3")
    t.require(c.wait_subscribed(cl.source.port), "no subscriber")
    pub = c.Publisher(cl.source.port, rate=RATE).start()
    # 64 KiB at ~150 bytes a line: full after ~450 messages (~1 s)
    full = h.wait_until(lambda: (dropped(first) or 0) > 0, 15, 0.1)
    t_full = c.now_ms()
    time.sleep(1.0)
    drops_full = dropped(first)
    err_lines = [l for l in first.b.stderr_text().splitlines()
                 if "No space left" in l or "ENOSPC" in l or "errno 28" in l]
    subprocess.run(["mount", "-o", "remount,size=16m", mnt], check=False)
    t_space = c.now_ms()

    def resumed():
        recs, _ = tolerant_records(first.b.out_path, "r1")
        return any(r[1] >= t_space + 100 for r in recs)
    ok_resume = h.wait_until(resumed, 10, 0.1)
    time.sleep(1.0)
    pub.stop()
    time.sleep(0.8)
    recs, bad = tolerant_records(first.b.out_path, "r1", verbose=True)
    recs += c.stdout_records(cl.reps[1:])
    o = c.Outcome(pub.snapshot(), recs, t_full - 2000, t_space)
    drops_end = dropped(first)
    c.summary("redis_psub.stdout_disk_full", o.forwarded, o.duplicates, o.lost, o.gap_ms,
              dropped_counted=drops_end, cut_lines=bad, enospc_log_lines=len(err_lines),
              resumed=bool(ok_resume), lost_outside_window=len(o.lost_outside))
    t.check(bool(full), "no drop counted although stdout is full")
    t.check(err_lines, "no log line names the full disk (ENOSPC)")
    t.check(first.b.alive(), "the replica with the full stdout exited")
    t.check(bool(ok_resume), "forwarding did not resume after space came back")
    t.check(o.duplicates == 0, "%d duplicates" % o.duplicates)
    t.check(drops_end is not None and drops_end >= len(o.lost_seqs),
            "dropped counter %r < messages lost %d: a loss not counted (a cut line that "
            "could not be terminated while the disk was full glues onto the next line, "
            "which was counted as delivered)" % (drops_end, len(o.lost_seqs)))
    t.check(not o.lost_outside, "%d lost outside the disk-full window" % len(o.lost_outside))
    h.log("drops counted while full: %r; first ENOSPC log line: %s"
          % (drops_full, err_lines[0] if err_lines else "-"))


class PipeBaton(h.Baton):
    """A baton whose stdout is a pipe whose reading end is already closed."""

    def start(self):
        r, w = os.pipe()
        os.close(r)
        self.err = open(self.err_path, "ab")
        self.proc = subprocess.Popen([h.BATON_BIN, "-c", self.cfg] + self.args,
                                     stdout=w, stderr=self.err, env=self.env,
                                     stdin=subprocess.DEVNULL)
        os.close(w)
        self.err.close()
        return self


def test_stdout_closed_pipe(t):
    locker = t.redis()
    rep = c.Replica(t, None, {"psub.cfg": c.psub_endpoint(locker.port)}, "pipe",
                    locker.port, start=False)
    b = PipeBaton(t.workdir, open(rep.b.cfg).read(),
                  {"psub.cfg": c.psub_endpoint(locker.port)}, name="pipe2", start=True)
    t.batons.append(b)
    t.cleanup(b.kill)
    rep.b = b
    t.require(c.wait_subscribed(locker.port), "no subscriber")
    total = 1000
    pub = c.Publisher(locker.port, rate=RATE, count=total).start()
    pub.wait_done(20)
    h.wait_until(lambda: (rep.endpoint("psub") or {}).get("dropped", 0) >= total, 10, 0.1)
    e = rep.endpoint("psub") or {}
    epipe = [l for l in b.stderr_text().splitlines() if "Broken pipe" in l or "EPIPE" in l
             or "errno 32" in l]
    c.summary("redis_psub.stdout_closed_pipe", e.get("forwarded", 0), 0,
              total - e.get("forwarded", 0), None, received=e.get("received"),
              dropped_counted=e.get("dropped"), epipe_log_lines=len(epipe))
    t.check(b.alive(), "baton exited when its stdout pipe was closed")
    # received also counts the subscription probe
    t.check(e.get("forwarded") == 0 and e.get("received", 0) >= total
            and e.get("dropped") == e.get("received"),
            "expected >= %d received, all dropped (counted), none forwarded, got %r" % (total, e))
    t.check(epipe, "no log line names the broken pipe")


if __name__ == "__main__":
    h.main(globals())
