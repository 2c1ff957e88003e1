"""Term-scoped, lease-bounded delivery (issue 12; DESIGN.md "Term-scoped,
lease-bounded delivery"), through real processes: redis-server, real baton
replicas, an HTTP receiver in this process that records (arrival order,
X-Baton-Epoch, message) of every request.

  1. slow_receiver_leader_paused: 3 replicas, redis_psub -> HTTP sink
     (batch_max 1), receiver 40 ms per request, lease ttl 1000 ms; 200 msg/s
     for 30 s with unique sequence numbers; every 3 s the current leader is
     SIGSTOPped for 2 x ttl, then SIGCONTed. Zero requests carrying an epoch
     lower than the highest epoch the receiver had already accepted; zero
     duplicate payloads. Printed: requests, stale count, duplicates, drops
     by reason (/metrics of every replica).
  2. receiver_500_then_200: the same receiver answers 500 for 5 s, then 200
     (no pauses): no stale request, no duplicate, and the ids that never
     reached the receiver are exactly the drops counted in /metrics (all
     reasons, all replicas).
  3. stdout_fifo_stalled_sigterm: one replica, stdout sink into a FIFO nobody
     reads, traffic until the FIFO is full: SIGTERM -> exit 0 within
     shutdown.drain_timeout_ms + 1 s, and a log line says how many messages
     were settled ("settled <n>").
  3b. stdout_fifo_shared_stalled_sigterm: the same with two endpoints
     sharing the FIFO (an endpoint thread that writes its own batch, inline,
     gives up at the drain deadline by itself).
  4. twenty_endpoints_sigterm: 20 redis_psub endpoints led by one process,
     each with a request held by a hung HTTP receiver and more queued:
     SIGTERM -> exit 0 within drain_timeout_ms + 1 s.

Each scenario prints one line "TERM scenario=... result=PASS|FAIL ...".
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import termdelivery as td  # noqa: E402
from publisher import Publisher, parse_payload  # noqa: E402

ORDER = ["test_slow_receiver_leader_paused", "test_receiver_500_then_200",
         "test_stdout_fifo_stalled_sigterm", "test_stdout_fifo_shared_stalled_sigterm",
         "test_twenty_endpoints_sigterm"]

EP = "orders"
TTL = 1000
LEASE = {"ttl_ms": TTL, "retry_ms": 100}


def psub_cfg(port, name=EP, pattern="chan.*", sink="hook", extra=""):
    return ('name = "%s"; type = "redis_psub"; sink = "%s";\n'
            'host = "127.0.0.1"; port = %d; patterns = [ "%s" ];\n%s\n'
            % (name, sink, port, pattern, extra))


def http_sink(url, extra=""):
    return '{ name = "hook"; type = "http"; url = "%s"; batch_max = 1; %s }' % (url, extra)


def seq_key(env):
    """Message identity: the publisher's sequence number, or the probe's
    payload."""
    p = env.get("payload")
    s = parse_payload(p)
    return s[0] if s else p


def cluster(t, redis, rx, n=3, lease=LEASE, sink_extra=""):
    reps = [td.Replica(t, "r%d" % (i + 1), redis.port, http_sink(rx.url, sink_extra),
                       {"orders.cfg": psub_cfg(redis.port)}, lease=lease)
            for i in range(n)]
    return reps


def drops_line(reps, ep=EP):
    parts = []
    total = {}
    for r in reps:
        m = r.metrics()
        d = td.drops(m, ep) if m is not None else None
        parts.append("%s[%s]" % (r.name, "unreachable" if d is None else td.fmt_drops(d)))
        for k, v in (d or {}).items():
            total[k] = total.get(k, 0) + v
    return " ".join(parts), total


# --------------------------------------------------------------------------

def test_slow_receiver_leader_paused(t):
    redis = t.redis()
    rx = td.EpochReceiver(delay_s=0.040, key=seq_key)
    reps = cluster(t, redis, rx)
    probes = td.probe_subscribed(redis.port, "chan.probe")
    t.require(probes and probes[-1][1] == 1, "no single subscriber within 15 s: %r" % probes[-3:])
    t.require(td.wait_leader(reps, EP) is not None, "no single leader")
    pub = Publisher(redis.port, channel="chan.x", rate=200).start()
    t.cleanup(pub.stop)
    pauser = td.LeaderPauser(reps, EP, every_s=3.0, pause_s=2 * TTL / 1000.0).start()
    t.cleanup(pauser.halt)
    t0 = time.monotonic()
    time.sleep(30.0)
    pauser.halt()
    pub.stop()
    run_s = time.monotonic() - t0
    time.sleep(2.0)  # what is in flight lands; the last leader keeps draining
    per_rep, drops_total = drops_line(reps)
    s = rx.summary()
    entries = pub.snapshot()
    multi = sum(1 for e in entries if (e[2] or 0) > 1)
    line = dict(requests=s["requests"], accepted=s["accepted_msgs"], stale=s["stale"],
                stale_seen=s["stale_seen"], stale_max_ms=s["stale_max_ms"],
                duplicates=s["duplicates"], published=len(entries), pauses=len(pauser.events),
                multi_subscriber_publishes=multi, epochs=len(s["epochs"]),
                drops=td.fmt_drops(drops_total), run_s="%.1f" % run_s)
    ok = (s["stale"] == 0 and s["duplicates"] == 0 and len(pauser.events) >= 4
          and s["epoch_mismatch"] == 0)
    td.summary_line("slow_receiver_leader_paused", "PASS" if ok else "FAIL", **line)
    h.log("drops by replica: %s" % per_rep)
    h.log("pauses: %s" % ", ".join("%s(epoch %s)" % (e[2], e[3]) for e in pauser.events))
    h.log("requests per epoch: %s" % sorted(s["epochs"].items(), key=lambda kv: kv[0] or 0))
    if s["stale_examples"]:
        h.log("first stale requests: %r" % s["stale_examples"])
    t.check(len(pauser.events) >= 4, "only %d leader pauses (pauser misses %d)"
            % (len(pauser.events), pauser.misses))
    t.check(s["stale"] == 0, "%d requests carried an epoch lower than one the receiver had "
            "already accepted (up to %d ms after the newer epoch's first request)"
            % (s["stale"], s["stale_max_ms"]))
    t.check(s["duplicates"] == 0, "%d duplicate payloads, e.g. %r" % (s["duplicates"],
                                                                      s["dup_keys"]))
    t.check(s["epoch_mismatch"] == 0, "%d requests whose X-Baton-Epoch differs from the "
            "envelope's epoch" % s["epoch_mismatch"])
    t.check(s["accepted_msgs"] > 0, "nothing delivered")
    for r in reps:
        t.check(r.b.alive(), "%s exited" % r.name)


def test_receiver_500_then_200(t):
    redis = t.redis()
    state = {"fail_from": None, "fail_to": None}

    def status_fn(now):
        f, u = state["fail_from"], state["fail_to"]
        return 500 if f is not None and f <= now < u else 200

    rx = td.EpochReceiver(delay_s=0.040, status_fn=status_fn, key=seq_key)
    reps = cluster(t, redis, rx)
    probes = td.probe_subscribed(redis.port, "chan.probe")
    t.require(probes and probes[-1][1] == 1, "no single subscriber within 15 s")
    ldr = td.wait_leader(reps, EP)
    t.require(ldr is not None, "no single leader")
    rate, secs = 10, 15
    pub = Publisher(redis.port, channel="chan.x", rate=rate, count=rate * secs).start()
    t.cleanup(pub.stop)
    time.sleep(3.0)
    state["fail_to"] = time.monotonic() + 5.0
    state["fail_from"] = time.monotonic()
    pub.wait_done(secs + 10)
    pub.stop()

    # settled: every message the leader received was delivered or dropped
    def settled():
        tot = {"received": 0, "forwarded": 0, "dropped": 0, "queue": 0}
        for r in reps:
            m = r.metrics()
            if m is None:
                return None
            tot["received"] += td.metric(m, "baton_messages_received_total", EP) or 0
            tot["forwarded"] += td.metric(m, "baton_messages_forwarded_total", EP) or 0
            tot["dropped"] += sum(td.drops(m, EP).values())
            tot["queue"] += td.metric(m, "baton_queue_depth", EP) or 0
        done = (tot["queue"] == 0 and tot["received"] == tot["forwarded"] + tot["dropped"]
                and rx.in_flight() == 0)
        return tot if done else None
    tot = h.wait_until(settled, 60, 0.2)
    time.sleep(0.5)
    per_rep, drops_total = drops_line(reps)
    s = rx.summary()
    entries = pub.snapshot()
    published = {e[0] for e in entries if (e[2] or 0) >= 1} | \
        {p for p, n in probes if (n or 0) >= 1}
    unknown = sum(1 for e in entries if e[2] is None)
    got = set(rx.accepted_keys())
    missing = published - got
    extra = got - published
    n500 = sum(1 for r in rx.snapshot() if r.status == 500)
    dropped = sum(drops_total.values())
    ok = (tot is not None and s["stale"] == 0 and s["duplicates"] == 0
          and len(missing) == dropped and not extra and n500 > 0)
    td.summary_line("receiver_500_then_200", "PASS" if ok else "FAIL", requests=s["requests"],
                    answered_500=n500, published=len(published), delivered=len(got),
                    missing=len(missing), dropped_metrics=dropped,
                    drops=td.fmt_drops(drops_total), stale=s["stale"],
                    duplicates=s["duplicates"], unknown_publishes=unknown,
                    settled=tot is not None)
    h.log("drops by replica: %s" % per_rep)
    t.check(tot is not None, "not settled within 60 s (queue not empty or received != "
            "forwarded + dropped)")
    t.check(n500 > 0, "the receiver never answered 500")
    t.check(s["stale"] == 0 and s["stale_seen"] == 0, "stale requests: %d (seen %d)"
            % (s["stale"], s["stale_seen"]))
    t.check(s["duplicates"] == 0, "%d duplicates, e.g. %r" % (s["duplicates"], s["dup_keys"]))
    t.check(not extra, "delivered ids that were never published: %r" % sorted(extra, key=str)[:5])
    t.check(len(missing) == dropped, "%d ids missing at the receiver, %d drops counted in "
            "/metrics (%s); missing e.g. %r" % (len(missing), dropped,
                                                td.fmt_drops(drops_total),
                                                sorted(missing, key=str)[:10]))
    t.check(unknown == 0, "%d publishes with unknown outcome" % unknown)


def test_stdout_fifo_stalled_sigterm(t):
    fifo_stalled_sigterm(t, 1, "stdout_fifo_stalled_sigterm")


def test_stdout_fifo_shared_stalled_sigterm(t):
    """Two endpoints share the stalled FIFO. redis_psub writes a read's
    batch on its own thread when the sink looks ready (inline delivery);
    another endpoint may fill the pipe between that look and the write, and
    stop() joins that very thread: it must give up at the drain deadline by
    itself, like the forwarder."""
    fifo_stalled_sigterm(t, 2, "stdout_fifo_shared_stalled_sigterm")


def fifo_stalled_sigterm(t, n_eps, label):
    drain_ms = 2000
    redis = t.redis()
    eps = {"orders.cfg": psub_cfg(redis.port, sink="out")}
    if n_eps > 1:
        eps["audit.cfg"] = psub_cfg(redis.port, name="audit", pattern="audit.*", sink="out")
    rep = td.Replica(t, "fifo", redis.port, None, eps,
                     main_extra="shutdown = { drain_timeout_ms = %d; };" % drain_ms,
                     baton_cls=td.FifoBaton)
    probes = td.probe_subscribed(redis.port, "chan.probe")
    t.require(probes and probes[-1][1] == 1, "no subscriber within 15 s")
    if n_eps > 1:
        probes = td.probe_subscribed(redis.port, "audit.probe")
        t.require(probes and probes[-1][1] == 1, "endpoint audit: no subscriber within 15 s")
    pub = Publisher(redis.port, channel="chan.x", rate=2000).start()
    t.cleanup(pub.stop)
    if n_eps > 1:
        pub2 = Publisher(redis.port, channel="audit.x", rate=2000).start()
        t.cleanup(pub2.stop)

    # full: the forwarder no longer gets anything out, the queue grows
    def stalled():
        e = rep.endpoint(EP) or {}
        return e if e.get("queue_depth", 0) >= 500 else None
    e_full = h.wait_until(stalled, 20, 0.1)
    time.sleep(0.5)
    e_before = rep.endpoint(EP) or {}
    pub.stop()
    if n_eps > 1:
        pub2.stop()
    rc, took = td.term_and_time(rep.b, drain_ms / 1000.0 + 1.0 + 6.0)
    err = rep.b.stderr_text()
    settled_lines = [l for l in err.splitlines() if re.search(r"settled (\d+)", l)]
    nums = [int(m) for l in settled_lines for m in re.findall(r"settled (\d+)", l)]
    limit = drain_ms / 1000.0 + 1.0
    ok = (e_full is not None and rc == 0 and took is not None and took <= limit
          and bool(nums))
    td.summary_line(label, "PASS" if ok else "FAIL",
                    queue_at_sigterm=e_before.get("queue_depth"),
                    forwarded_at_sigterm=e_before.get("forwarded"),
                    exit=rc, exit_s="%.2f" % took if took is not None else "none(killed)",
                    limit_s="%.1f" % limit, settled=nums[0] if nums else "none")
    for l in settled_lines[:3]:
        h.log("settled line: %s" % l)
    t.check(e_full is not None, "the FIFO never filled (queue depth did not reach 500)")
    t.check(rc == 0 and took is not None,
            "no exit 0 within %.1f s after SIGTERM (exit %r; killed)" % (limit + 6.0, rc))
    t.check(took is None or took <= limit, "exit took %.2f s > drain_timeout_ms + 1 s = %.1f s"
            % (took or -1, limit))
    t.check(bool(nums), "no log line with 'settled <n>' naming the messages settled at exit")


def test_twenty_endpoints_sigterm(t):
    drain_ms = 2000
    n_eps = 20
    redis = t.redis()
    rx = td.EpochReceiver(key=lambda e: e.get("payload"))
    eps = {"ep%02d.cfg" % i: psub_cfg(redis.port, name="ep%02d" % i, pattern="ep%02d.*" % i)
           for i in range(n_eps)}
    lease = {"ttl_ms": 3000, "retry_ms": 100, "balance_step_ms": 5}
    rep = td.Replica(t, "twenty", redis.port, http_sink(rx.url), eps, lease=lease,
                     main_extra="shutdown = { drain_timeout_ms = %d; };" % drain_ms)

    def all_lead():
        st = td.status(rep.mport)
        es = (st or {}).get("endpoints", [])
        return len(es) == n_eps and all(e.get("role") == "leader" for e in es)
    t.require(h.wait_until(all_lead, 30, 0.1), "the process does not lead all %d endpoints"
              % n_eps)
    c = redis.client()
    for i in range(n_eps):
        t.require(h.wait_until(lambda: c.cmd("PUBLISH", "ep%02d.probe" % i, "probe") == 1,
                               10, 0.05), "ep%02d not subscribed" % i)
    # the receiver hangs: every endpoint has one request held and more queued
    rx.stall()
    for k in range(5):
        c.pipeline([("PUBLISH", "ep%02d.x" % i, "m-%02d-%d" % (i, k)) for i in range(n_eps)])
    held = h.wait_until(lambda: rx.in_flight() >= n_eps, 15, 0.05)
    queued = sum((e.get("queue_depth") or 0)
                 for e in (td.status(rep.mport) or {}).get("endpoints", []))
    rc, took = td.term_and_time(rep.b, 30.0)
    rx.release()
    limit = drain_ms / 1000.0 + 1.0
    err = rep.b.stderr_text()
    # the count of the shutdown lines (a demotion line may name the same
    # messages again); any "settled <n>" when there are none
    nums = [int(m) for m in re.findall(r"shutdown: settled (\d+)", err)] or \
        [int(m) for m in re.findall(r"settled (\d+)", err)]
    stopped_eps = len({m for m in re.findall(r"gateway\[(ep\d+)\]: stopped consuming", err)})
    ok = bool(held) and rc == 0 and took is not None and took <= limit
    td.summary_line("twenty_endpoints_sigterm", "PASS" if ok else "FAIL",
                    endpoints=n_eps, requests_held=rx.in_flight() if not held else n_eps,
                    queued_at_sigterm=queued, exit=rc,
                    exit_s="%.2f" % took if took is not None else "none(killed_after_30s)",
                    limit_s="%.1f" % limit, endpoints_stopped=stopped_eps,
                    settled_total=sum(nums) if nums else "none")
    for l in err.splitlines():
        if re.search(r"SIGTERM received|stopped in|main: exit|shutdown: settled", l):
            h.log("timeline: %s" % l)
    t.check(bool(held), "the hung receiver did not hold one request per endpoint (%d)"
            % rx.in_flight())
    t.check(rc == 0 and took is not None, "no exit 0 within 30 s of SIGTERM (exit %r)" % rc)
    t.check(took is None or took <= limit, "exit took %.2f s > drain_timeout_ms + 1 s = %.1f s"
            % (took or -1, limit))


if __name__ == "__main__":
    h.main(globals())
