"""The queue between an endpoint and its sink, in the running daemon: a real
redis-server (source and locker), real baton processes, an HTTP receiver that
answers slowly so the queue fills.

- queue_policy = "drop_oldest": the oldest queued messages make room for new
  ones; every drop is counted (baton_messages_dropped_total{reason=
  "queue_full"}) and logged, what arrives is in order without duplicates and
  ends with the newest message, and received = forwarded + dropped.
- queue_policy = "block" (the default): the subscriber waits for room instead
  of dropping; every message arrives, in order, none dropped, and the queue
  depth reached queue_size meanwhile.
- a producer blocked on a full queue does not hold a demotion: the lease is
  taken away in Redis while the sink stalls (10 s per request) and the
  subscriber waits at the full queue; the leader is demoted within 5 s,
  everything it did not forward is counted (not_leader / term_ended /
  shutdown), its counters add up, and one replica leads afterwards.

The endpoint-level batch size is set as queue_batch_max in test_block and by
its old name batch_max (accepted with a deprecation warning) in the others.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
import termdelivery as td  # noqa: E402

ORDER = ["test_drop_oldest", "test_block", "test_blocked_producer_gives_up_on_demotion"]

N = 300          # messages published in one burst
QUEUE = 20       # queue_size
BATCH = 5        # queue_batch_max (formerly batch_max): messages per sink send
STALL_S = 0.2    # the receiver's answer time per request while stalled
LEASE = {"ttl_ms": 1500, "renew_ms": 500, "retry_ms": 100}


def endpoint(port, policy, batch_key="batch_max"):
    return ('name = "q"; type = "redis_psub"; sink = "out"; host = "127.0.0.1"; port = %d;\n'
            'channels = [ "q.in" ]; queue_size = %d; queue_policy = "%s"; %s = %d;\n'
            % (port, QUEUE, policy, batch_key, BATCH))


DEPRECATED = "'batch_max' is deprecated: it is now called 'queue_batch_max'"


def sink(rx, timeout_ms=5000):
    return ('{ name = "out"; type = "http"; url = "%s"; timeout_ms = %d; retries = 3; '
            'backoff_ms = 50; }' % (rx.url, timeout_ms))


def counters(mport):
    return td.counters(mport, "q")


def settled(mport, received_at_least):
    """Counters once everything received has been forwarded or dropped and two
    reads 0.3 s apart agree, else None."""
    a = counters(mport)
    time.sleep(0.3)
    b = counters(mport)
    if not a or a != b or b["received"] < received_at_least or b["queued"]:
        return None
    if b["received"] != b["forwarded"] + sum(b["dropped"].values()) + b["returned"]:
        return None
    return b


def start(t, policy, n_batons=1, sink_timeout_ms=5000, batch_key="batch_max"):
    redis = t.redis()
    rx = h.HttpReceiver()
    rx.stall_s = STALL_S
    ports, batons = [], []
    for i in range(n_batons):
        mport = h.free_port()
        ports.append(mport)
        batons.append(t.baton(h.main_cfg(redis.port, sinks=sink(rx, sink_timeout_ms), lease=LEASE,
                                         extra='metrics = { listen = "127.0.0.1:%d"; };' % mport),
                              {"q.cfg": endpoint(redis.port, policy, batch_key)}))
        if i == 0:  # the first one leads
            t.require(h.wait_until(lambda: h.status_endpoints(mport).get("q", {}).get("role")
                                   == "leader", 15), "baton1 leads")
    cl = redis.client()
    t.require(h.wait_until(lambda: cl.cmd("PUBSUB", "NUMSUB", "q.in")[1] >= 1, 10),
              "the leader subscribed to q.in")
    return redis, rx, ports, batons, cl


def publish_burst(cl):
    cl.pipeline([("PUBLISH", "q.in", "m%04d" % i) for i in range(N)])


def seqs(rx):
    return [int(r["payload"][1:]) for r in rx.accepted() if r.get("channel") == "q.in"]


def max_depth_while(mport, seconds):
    depth = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        c = counters(mport)
        if c:
            depth = max(depth, c["queued"])
        time.sleep(0.05)
    return depth


def burst_through_stall(t, policy, settle_s, batch_key="batch_max"):
    """One baton with the given policy: a burst of N while the receiver
    stalls, the queue depth watched for 1 s, then the receiver fast again
    until every counter settles. Returns (batons, ports, counters, delivered
    seqs, max depth seen)."""
    redis, rx, ports, batons, cl = start(t, policy, batch_key=batch_key)
    publish_burst(cl)
    depth = max_depth_while(ports[0], 1.0)
    rx.stall_s = 0
    cnt = h.wait_until(lambda: settled(ports[0], N), settle_s, 0.1)
    got = seqs(rx)
    h.log("%s: %d published, %d delivered, max queue depth seen %d, counters %r"
          % (policy, N, len(got), depth, cnt))
    t.require(cnt is not None, "counters did not settle with received >= %d: %r"
              % (N, counters(ports[0])))
    return batons, ports, cnt, got, depth


def test_drop_oldest(t):
    batons, ports, cnt, got, depth = burst_through_stall(t, "drop_oldest", 20)
    full = cnt["dropped"].get("queue_full", 0)
    t.check(full > 0, "the burst overflowed the queue, yet nothing was dropped: %r" % cnt)
    t.check(full == N - len(got), "dropped (queue_full) %d != published %d - delivered %d"
            % (full, N, len(got)))
    t.check(sum(cnt["dropped"].values()) == full, "drops other than queue_full: %r" % cnt)
    t.check(not h.duplicates(got), "duplicates: %r" % h.duplicates(got))
    t.check(got == sorted(got), "delivered out of order: %r" % got[:40])
    t.check(got and got[-1] == N - 1, "the newest message (m%04d) was not delivered: last %r"
            % (N - 1, got[-1:]))
    t.check(depth <= QUEUE, "queue depth %d above queue_size %d" % (depth, QUEUE))
    logged = [ln for ln in batons[0].stderr_text().splitlines()
              if "dropped message" in ln and "queue_full" in ln]
    t.check(logged, "no log line names the queue_full drops")
    t.check(DEPRECATED in batons[0].stderr_text(), "no deprecation warning for batch_max")
    t.check(batons[0].term() == 0, "exit 0")


def test_block(t):
    batons, ports, cnt, got, depth = burst_through_stall(t, "block", 30, "queue_batch_max")
    t.check(DEPRECATED not in batons[0].stderr_text(), "a deprecation warning for queue_batch_max")
    t.check(sum(cnt["dropped"].values()) == 0, "block dropped messages: %r" % cnt)
    t.check(got == list(range(N)), "not every message arrived once, in order: %d of %d, "
            "first differences %r" % (len(got), N, [(i, s) for i, s in enumerate(got) if s != i][:5]))
    # the producer waited at a full queue (depth seen at queue_size, or one
    # batch below it while the forwarder held a batch)
    t.check(QUEUE - BATCH <= depth <= QUEUE, "queue depth while stalled %d, expected about "
            "queue_size %d" % (depth, QUEUE))
    t.check(batons[0].term() == 0, "exit 0")


def test_blocked_producer_gives_up_on_demotion(t):
    # the stalled request would take 10 s; the lease is 1.5 s
    redis, rx, ports, batons, cl = start(t, "block", n_batons=2, sink_timeout_ms=15000)
    rx.stall_s = 10.0
    publish_burst(cl)
    full = h.wait_until(lambda: (counters(ports[0]) or {}).get("queued", 0) >= QUEUE - BATCH, 5, 0.05)
    t.require(full, "the leader's queue did not fill: %r" % counters(ports[0]))
    time.sleep(0.5)
    before = counters(ports[0])
    h.log("baton1 before its lease is taken away: %r" % before)
    # the producer is blocked: it has not taken the whole burst from the socket
    t.require(before and before["received"] < N,
              "baton1's producer is not blocked on its full queue: %r" % before)
    keys = [k.decode() for k in cl.cmd("KEYS", "baton:active:*")]
    # the lease itself, not what is kept beside it (<key>:epoch, :holder, ...)
    lease = [k for k in keys if not any(k.startswith(o + ":") for o in keys if o != k)]
    t.require(len(lease) == 1, "one lease key: %r" % keys)
    t0 = time.monotonic()
    cl.cmd("DEL", lease[0])
    demoted = h.wait_until(lambda: "demoted from leader" in batons[0].stderr_text(), 8, 0.02)
    took = time.monotonic() - t0
    h.log("baton1 demoted %.2f s after its lease was deleted (its sink stalls 10 s per request)"
          % took)
    t.check(demoted and took < 5.0, "baton1 not demoted within 5 s of losing its lease (a stalled "
            "sink or a blocked producer held it): %.1f s" % took)
    t.check(h.wait_until(lambda: sum(1 for p in ports if h.status_endpoints(p).get("q", {})
                                     .get("role") == "leader") == 1, 8, 0.1),
            "not exactly one leader after the demotion")
    rx.stall_s = 0
    cnt = h.wait_until(lambda: settled(ports[0], N), 15, 0.2)
    h.log("baton1 counters after the demotion: %r" % cnt)
    t.require(cnt is not None, "baton1's counters do not add up / settle with all %d received: %r"
              % (N, counters(ports[0])))
    # what the old term had not delivered is counted, by reason
    term = sum(cnt["dropped"].get(r, 0) for r in ("not_leader", "term_ended", "shutdown"))
    t.check(term == N - cnt["forwarded"], "baton1: %d not forwarded, %d counted as not_leader / "
            "term_ended / shutdown: %r" % (N - cnt["forwarded"], term, cnt))
    t.check(cnt["forwarded"] < N, "baton1 forwarded everything: %r" % cnt)
    logged = [ln for ln in batons[0].stderr_text().splitlines() if "dropped message" in ln]
    t.check(logged, "baton1 logged no drop")
    for b in batons:
        t.check(b.alive(), "%s exited" % b.name)
        t.check(b.term() == 0, "%s: exit 0" % b.name)


if __name__ == "__main__":
    h.main(globals())
