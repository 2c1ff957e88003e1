#!/usr/bin/env python3
"""Benchmark: failover times of an ActiveGuard endpoint with 3 replicas,
with traffic in flight.

    bench/bench_failover.py [BUILD_DIR] [--locker redis|etcd]
                                            (default: $BATON_BUILD_DIR or ./build; redis)

One redis-server (locker and source), three baton processes with one
redis_psub endpoint (pattern chan.*) and the default lease (ttl 3000, renew
1000, retry 250), each with its metrics listener on its own loopback port.

Traffic: a publisher thread (tests/integration/lib/publisher.py, a raw RESP
socket) PUBLISHes RATE (default 1500) msg/s to chan.x for the whole run, in
pipelines of PUB_BATCH (default 3) every PUB_BATCH / RATE s, payload
"<seq>:<sent ms>" with unique sequence numbers. The sink of every replica is
an HTTP sink (batch_max SINK_BATCH, default 100) to one local receiver in
this process that answers each POST after SINK_DELAY_MS (default 15) ms:
the leader's forwarder takes what is queued, sends it and waits for the
answer, so the queue fills again while each request is in flight (up to
about RATE x SINK_DELAY_MS / 1000 messages) and is empty only between the
answer and the next PUBLISH batch. The receiver records the arrival time,
the epoch and the sequence numbers of every POST.

--locker etcd: the lease is held in a single etcd member on loopback
(tests/integration/lib/etcd.py, data directory in a temporary directory)
instead: `locker = { backend = "etcd"; endpoints = [ "http://127.0.0.1:P" ]; }`,
lease ttl 2000 (etcd leases are whole seconds, at least 2 s), renew 666
(ttl / 3), retry 250; redis-server stays the source. The member revokes
expired leases on its own check, about every 500 ms, so the crash target is
ttl + 500 + retry + 100 ms; the figures are named "... etcd locker ...".

- crash: TRIALS (default 20) times: once the leader is forwarding, SIGKILL
  it at a random phase of the renewal schedule (0..renew ms later), then
  poll /status of the two others every POLL_MS (default 5) until one
  reports role "leader"; the takeover time is signal -> that answer. The
  killed replica is started again and waited for as a standby before the
  next trial.
- graceful: TRIALS times the same with SIGTERM (drain, release, announce);
  the old leader must exit 0.

Just before each signal the leader's baton_queue_depth is read from its
/metrics (how often it was > 0 is a figure: the queue must not be empty for
the graceful figure to mean a handover with traffic in flight). After the
trials the publisher stops and the receiver's records give, per trial: the
delivery gap (arrival of the old epoch's last message -> the new epoch's
first), duplicates (a sequence number received more than once) and lost
messages, split into those published while no replica was subscribed
(PUBLISH answered 0: the pub/sub gap, by design) and those a replica had
received (PUBLISH answered 1) but that never reached the sink.

Each takeover must also advance the fencing epoch. Prints every trial, then
p50/p99 and the contract lines of bench/run (RESULT {json}). Targets: crash
p99 <= ttl + retry + 100 ms; graceful p99 <= 100 ms; no duplicates in the
graceful trials; the rest is informational. Bounded: about 5 s per crash
trial, 1.5 s per graceful trial.
"""
import argparse
import http.client
import json
import os
import random
import signal
import sys
import threading
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
_ap = argparse.ArgumentParser(description="failover times of an ActiveGuard endpoint")
_ap.add_argument("build_dir", nargs="?")
_ap.add_argument("--locker", choices=("redis", "etcd"), default="redis")
ARGS = _ap.parse_args()
if ARGS.build_dir:
    os.environ["BATON_BUILD_DIR"] = os.path.abspath(ARGS.build_dir)
os.environ.setdefault("BATON_BUILD_DIR", os.path.join(SRC, "build"))
os.environ.setdefault("BATON_BIN", os.path.join(os.environ["BATON_BUILD_DIR"], "baton"))
os.environ.setdefault("BATON_SOURCE_DIR", SRC)
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "lib"))
import harness as h  # noqa: E402
import publisher  # noqa: E402  (tests/integration/lib/publisher.py)
import termdelivery as td  # noqa: E402  (its /metrics scrape)

LOCKER = ARGS.locker
if LOCKER == "etcd":
    import etcd  # noqa: E402  (tests/integration/lib/etcd.py)
    TTL, RENEW, RETRY = 2000, 666, 250
    EXPIRY_CHECK = 500  # etcd's lessor revokes expired leases on a 500 ms tick
else:
    TTL, RENEW, RETRY = 3000, 1000, 250
    EXPIRY_CHECK = 0
TRIALS = int(os.environ.get("TRIALS", "20"))
POLL_S = float(os.environ.get("POLL_MS", "5")) / 1000.0
RATE = float(os.environ.get("RATE", "1500"))
PUB_BATCH = int(os.environ.get("PUB_BATCH", "3"))
SINK_DELAY_S = float(os.environ.get("SINK_DELAY_MS", "15")) / 1000.0
SINK_BATCH = int(os.environ.get("SINK_BATCH", "100"))
CHANNEL = "chan.x"


def status(port):
    """(role, epoch) of the first endpoint from GET /status, or (None, None)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        c.request("GET", "/status")
        r = c.getresponse()
        body = r.read()
        c.close()
        if r.status != 200:
            return None, None
        ep = json.loads(body)["endpoints"][0]
        return ep.get("role"), ep.get("epoch")
    except (OSError, ValueError, KeyError, IndexError, http.client.HTTPException):
        return None, None


def queue_depth(port):
    """baton_queue_depth of the endpoint from GET /metrics, or None."""
    return td.metric(td.scrape(port, timeout=0.5), "baton_queue_depth", "psub")


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p / 100.0)))]


class Receiver:
    """The HTTP sink's peer, shared by the three replicas: the tests'
    recording receiver (harness.HttpReceiver, answering 200 after delay_s),
    read as (time.monotonic() of the answer, epoch, [seq]) per POST."""

    def __init__(self, delay_s):
        self.rx = h.HttpReceiver()
        self.rx.stall_s = delay_s
        self.url = self.rx.url
        self.bad = 0
        self._parsed = []   # (t, epoch, seqs) of rx.requests[:len(_parsed)]
        self._lock = threading.Lock()

    def _post(self, req):
        t, _path, headers, body, _status = req
        epoch, seqs = None, []
        for line in body.split(b"\n"):
            if not line.strip():
                continue
            try:
                env = json.loads(line)
            except ValueError:
                self.bad += 1
                continue
            epoch = env.get("epoch", epoch)
            if env.get("channel") == CHANNEL:
                p = publisher.parse_payload(env.get("payload"))
                if p:
                    seqs.append(p[0])
        if epoch is None:
            try:
                epoch = int(headers.get("X-Baton-Epoch", ""))
            except ValueError:
                pass
        return (t, epoch, seqs)

    def snapshot(self):
        with self.rx.lock:
            reqs = list(self.rx.requests)
        with self._lock:
            self._parsed += [self._post(r) for r in reqs[len(self._parsed):]]
            return list(self._parsed)

    def count(self):
        return sum(len(p[2]) for p in self.snapshot())

    def seen_epoch_after(self, epoch, t):
        for p in reversed(self.snapshot()):
            if p[0] <= t:
                return False
            if p[1] == epoch and p[2]:
                return True
        return False


class Replica:
    def __init__(self, work, redis_port, name, sink_url, etcd_url=None):
        self.mport = h.free_port()
        metrics = 'metrics = { listen = "127.0.0.1:%d"; };' % self.mport
        sinks = ('{ name = "out"; type = "http"; url = "%s"; batch_max = %d; timeout_ms = 5000; '
                 'retries = 5; backoff_ms = 20; }' % (sink_url, SINK_BATCH))
        if etcd_url is None:
            main = h.main_cfg(redis_port=redis_port, extra=metrics, sinks=sinks,
                              log_level="warn")
        else:
            locker = 'locker = { backend = "etcd"; endpoints = [ "%s" ]; };' % etcd_url
            main = h.main_cfg(redis_port=None, extra=locker + "\n" + metrics, sinks=sinks,
                              log_level="warn",
                              lease={"ttl_ms": TTL, "renew_ms": RENEW, "retry_ms": RETRY})
        ep = ('name = "psub"; type = "redis_psub"; sink = "out";\n'
              'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n' % redis_port)
        self.b = h.Baton(work, main, {"psub.cfg": ep}, name=name)

    def status(self):
        return status(self.mport)


def wait_role(rep, role, timeout):
    return h.wait_until(lambda: rep.status()[0] == role, timeout, 0.02)


def find_leader(reps, timeout=10):
    def one():
        ls = [r for r in reps if r.status()[0] == "leader"]
        return ls[0] if len(ls) == 1 else None
    return h.wait_until(one, timeout, 0.02)


def trial(reps, how, rx, pub):
    """One fault on the current leader, with traffic in flight; returns a
    dict: took (ms), e0/e1 (old/new epoch), depth (the leader's queue depth
    just before the signal), end_seq (last sequence number published when
    the trial ended), new (the new leader's name)."""
    leader = find_leader(reps)
    if leader is None:
        raise RuntimeError("no single leader: %r" % [r.status() for r in reps])
    others = [r for r in reps if r is not leader]
    for r in others:
        if not wait_role(r, "standby", 10):
            raise RuntimeError("%s is not a standby: %r" % (r.b.name, r.status()))
    old_epoch = leader.status()[1]
    # the leader must be forwarding the stream before the fault
    since = time.monotonic()
    if not h.wait_until(lambda: rx.seen_epoch_after(old_epoch, since), 10, 0.01):
        raise RuntimeError("%s (epoch %s) forwards nothing to the receiver"
                           % (leader.b.name, old_epoch))
    # a random phase against the renewal schedule (a kill just after a
    # renewal is the worst case for the crash figure)
    time.sleep(random.uniform(0, RENEW / 1000.0))
    depth = queue_depth(leader.mport)
    t0 = time.monotonic()
    if how == "crash":
        leader.b.proc.send_signal(signal.SIGKILL)
    else:
        leader.b.proc.send_signal(signal.SIGTERM)
    new = None
    deadline = t0 + (TTL + EXPIRY_CHECK + RETRY) / 1000.0 + 5
    while new is None and time.monotonic() < deadline:
        for r in others:
            role, epoch = r.status()
            if role == "leader":
                new = (r, epoch)
                break
        else:
            time.sleep(POLL_S)
    took = (time.monotonic() - t0) * 1000.0
    rc = leader.b.proc.wait(15)
    if new is None:
        raise RuntimeError("no standby became leader within %d ms of the %s"
                           % (TTL + EXPIRY_CHECK + RETRY + 5000, how))
    if how == "graceful" and rc != 0:
        raise RuntimeError("%s exited with %r after SIGTERM" % (leader.b.name, rc))
    # the new leader forwards the stream
    if not h.wait_until(lambda: rx.seen_epoch_after(new[1], t0), 10, 0.01):
        raise RuntimeError("new leader %s (epoch %s) forwards nothing within 10 s"
                           % (new[0].b.name, new[1]))
    # back to three replicas: the old one rejoins as a standby
    leader.b.start()
    if not wait_role(leader, "standby", 10):
        raise RuntimeError("%s did not rejoin as a standby: %r" % (leader.b.name, leader.status()))
    return {"took": took, "e0": old_epoch, "e1": new[1], "depth": depth,
            "end_seq": pub.last_seq(), "old": leader.b.name, "new": new[0].b.name}


def run(how, reps, rx, pub):
    out = []
    for i in range(TRIALS):
        r = trial(reps, how, rx, pub)
        ok = r["e0"] is not None and r["e1"] is not None and r["e1"] > r["e0"]
        r["epoch_ok"] = ok
        out.append(r)
        h.log("%s trial %2d: takeover %7.1f ms (%s -> %s, epoch %s -> %s%s), leader's queue "
              "depth at the signal %s"
              % (how, i + 1, r["took"], r["old"], r["new"], r["e0"], r["e1"],
                 "" if ok else ", NOT INCREASING", r["depth"]))
    return out


def settle(rx, quiet_s=0.5, timeout=10):
    """Waits until the receiver got nothing new for quiet_s (bounded)."""
    deadline = time.monotonic() + timeout
    last, since = rx.count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        n = rx.count()
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return


def account(trials, start_seq, posts, entries):
    """Fills each trial's gap_ms, dups, lost_nosub, lost_sub, lost_unknown
    from the receiver's posts and the publisher's entries; the trial's
    sequence window is (previous trial's end_seq, its end_seq]."""
    count = {}
    first_t, last_t = {}, {}
    for t, epoch, seqs in posts:
        for s in seqs:
            count[s] = count.get(s, 0) + 1
        if seqs:
            if epoch not in first_t:
                first_t[epoch] = t
            last_t[epoch] = t
    receivers = {e[0]: e[2] for e in entries}
    lo = start_seq
    for r in trials:
        hi = r["end_seq"]
        dups = nosub = sub = unknown = 0
        for s in range(lo + 1, hi + 1):
            c = count.get(s, 0)
            if c > 1:
                dups += c - 1
            elif c == 0:
                n = receivers.get(s)
                if n is None:
                    unknown += 1
                elif n == 0:
                    nosub += 1
                else:
                    sub += 1
        r.update(published=hi - lo, dups=dups, lost_nosub=nosub, lost_sub=sub,
                 lost_unknown=unknown)
        a, b = last_t.get(r["e0"]), first_t.get(r["e1"])
        r["gap_ms"] = (b - a) * 1000.0 if a is not None and b is not None else None
        lo = hi


def main():
    if not os.path.exists(h.BATON_BIN):
        print("missing %s (build baton)" % h.BATON_BIN, file=sys.stderr)
        return 2
    work = h.mktemp("baton-bench-failover-")
    redis = h.RedisServer()
    etcd_url = None
    if LOCKER == "etcd":
        cluster = etcd.EtcdCluster(None, members=1)
        etcd_url = cluster.urls[0]
    rx = Receiver(SINK_DELAY_S)
    reps = [Replica(work, redis.port, "r%d" % i, rx.url, etcd_url) for i in range(3)]
    if find_leader(reps, 15) is None:
        print("no leader within 15 s", file=sys.stderr)
        for r in reps:
            print(r.b.stderr_text()[-2000:], file=sys.stderr)
        return 1
    pub = publisher.Publisher(redis.port, channel=CHANNEL, rate=RATE, batch=PUB_BATCH).start()
    print("failover benchmark: 3 replicas, redis_psub, %s locker%s, lease ttl %d renew %d retry "
          "%d ms, %d trials each, /status polled every %.0f ms; traffic in flight: %.0f msg/s "
          "PUBLISHed to %s, HTTP sink (batch_max %d) to a receiver answering after %.0f ms"
          % (LOCKER, " (%s)" % etcd_url if etcd_url else "", TTL, RENEW, RETRY, TRIALS,
             POLL_S * 1000, RATE, CHANNEL, SINK_BATCH, SINK_DELAY_S * 1000), flush=True)
    # the stream reaches the sink before the first trial
    t_start = time.monotonic()
    if not h.wait_until(lambda: any(p[0] > t_start and p[2] for p in rx.snapshot()[-50:]),
                        10, 0.05):
        print("the receiver got nothing within 10 s of the publisher's start", file=sys.stderr)
        for r in reps:
            print("--- %s stderr ---\n%s" % (r.b.name, r.b.stderr_text()[-3000:]),
                  file=sys.stderr)
        return 1
    start_seq = pub.last_seq()
    phases = []
    failed = False
    for how in ("crash", "graceful"):
        try:
            phases.append((how, run(how, reps, rx, pub)))
        except (RuntimeError, OSError) as e:
            print("%s: %s" % (how, e), file=sys.stderr)
            for r in reps:
                print("--- %s stderr ---\n%s" % (r.b.name, r.b.stderr_text()[-3000:]),
                      file=sys.stderr)
            failed = True
            break
    pub.stop()
    settle(rx)
    posts, entries = rx.snapshot(), pub.snapshot()
    print("  published %d messages (%d PUBLISH errors); the receiver got %d in %d POSTs%s"
          % (len(entries), pub.errors, sum(len(p[2]) for p in posts), len(posts),
             "; %d unparsable lines" % rx.bad if rx.bad else ""))

    results = []
    prefix = "etcd " if LOCKER == "etcd" else ""
    lease_desc = ("3 replicas, ttl %d renew %d" % (TTL, RENEW) if LOCKER == "etcd"
                  else "3 replicas, default lease")
    inflight = "traffic in flight, %.0f msg/s" % RATE
    seq0 = start_seq
    for how, trials in phases:
        account(trials, seq0, posts, entries)
        seq0 = trials[-1]["end_seq"]
        target = TTL + EXPIRY_CHECK + RETRY + 100 if how == "crash" else 100
        for i, r in enumerate(trials):
            h.log("%s trial %2d: delivery gap %s ms; published %d, duplicates %d, lost %d "
                  "(%d while no replica subscribed, %d received by a replica, %d unknown)"
                  % (how, i + 1, "%.1f" % r["gap_ms"] if r["gap_ms"] is not None else "?",
                     r["published"], r["dups"], r["lost_nosub"] + r["lost_sub"] + r["lost_unknown"],
                     r["lost_nosub"], r["lost_sub"], r["lost_unknown"]))
        times = [r["took"] for r in trials]
        bad = sum(1 for r in trials if not r["epoch_ok"])
        gaps = [r["gap_ms"] for r in trials if r["gap_ms"] is not None]
        depths = [r["depth"] for r in trials]
        nonempty = sum(1 for d in depths if d)
        dups = sum(r["dups"] for r in trials)
        lost_nosub = sum(r["lost_nosub"] for r in trials)
        lost_sub = sum(r["lost_sub"] for r in trials)
        p50, p99, mx = pct(times, 50), pct(times, 99), max(times)
        print("  %s: takeover p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f ms; epoch not "
              "advanced %d; delivery gap p50 %s ms, p99 %s ms; queue non-empty at the signal "
              "in %d of %d trials (depths %s); duplicates %d; lost %d while no replica was "
              "subscribed, %d received by a replica but not delivered"
              % (how, p50, p99, mx, min(times), bad,
                 "%.1f" % pct(gaps, 50) if gaps else "?", "%.1f" % pct(gaps, 99) if gaps else "?",
                 nonempty, len(trials), depths, dups, lost_nosub, lost_sub))
        label = "SIGKILL takeover" if how == "crash" else "SIGTERM handover"
        sig = "SIGKILL" if how == "crash" else "SIGTERM"
        results.append({"workload": "failover %s%s p50 (%s, %s)" % (prefix, label, lease_desc,
                                                                   inflight),
                        "baton": round(p50, 1), "baseline": None, "unit": "ms",
                        "ratio": None, "target": None, "pass": None})
        results.append({"workload": "failover %s%s p99 (%d trials, traffic in flight)"
                                    % (prefix, label, len(trials)),
                        "baton": round(p99, 1), "baseline": None, "unit": "ms",
                        "ratio": None, "target": "<= %d" % target,
                        "pass": p99 <= target and bad == 0})
        if how != "graceful":
            continue
        n = len(trials)
        results.append({"workload": "failover %s%s: delivery gap p50 (old leader's last "
                                    "message -> new leader's first, at the sink)" % (prefix, sig),
                        "baton": round(pct(gaps, 50), 1) if gaps else None, "baseline": None,
                        "unit": "ms", "ratio": None, "target": None, "pass": None})
        results.append({"workload": "failover %s%s: delivery gap p99 (%d trials)"
                                    % (prefix, sig, n),
                        "baton": round(pct(gaps, 99), 1) if gaps else None, "baseline": None,
                        "unit": "ms", "ratio": None, "target": None, "pass": None})
        results.append({"workload": "failover %s%s: queue non-empty at SIGTERM (leader's "
                                    "baton_queue_depth > 0 just before the signal)"
                                    % (prefix, sig),
                        "baton": nonempty, "baseline": None, "unit": "of %d trials" % n,
                        "ratio": None, "target": None, "pass": None})
        results.append({"workload": "failover %s%s: duplicates at the sink (%d trials)"
                                    % (prefix, sig, n),
                        "baton": dups, "baseline": None, "unit": "messages",
                        "ratio": None, "target": "== 0", "pass": dups == 0})
        results.append({"workload": "failover %s%s: lost, received by a replica but never "
                                    "delivered (%d trials)" % (prefix, sig, n),
                        "baton": lost_sub, "baseline": None, "unit": "messages",
                        "ratio": None, "target": None, "pass": None})
        results.append({"workload": "failover %s%s: lost, published while no replica was "
                                    "subscribed (pub/sub gap, %d trials)" % (prefix, sig, n),
                        "baton": lost_nosub, "baseline": None, "unit": "messages",
                        "ratio": None, "target": None, "pass": None})
    for r in results:
        print("RESULT " + json.dumps(r))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        h._run_cleanups()
    sys.exit(rc)
