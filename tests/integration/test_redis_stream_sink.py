"""The redis_stream sink (issue 38): a real redis-server, real baton processes.

  1. config: bad settings refused at start with file:line (--check-config, 78)
  2. 3 replicas, redis_psub with failover = "replay" at 1,000 msg/s ->
     redis_stream; the leader SIGKILLed and SIGSTOPped (2 x ttl) alternately
     every 4 s for BATON_STREAM_FAULT_S (default 40) s: every published
     message exactly once in the stream, epochs non-decreasing along it
  3. split brain on purpose (the lease key deleted by hand, as
     test_fenced_receiver.py does): the stale leader's batch is refused by
     the store's fence, it ends its term within 1 s; no entry of the old
     epoch after the new one's first
  4. hash_tag: every key of the stream named {<stream>}..., one Cluster slot;
     two endpoints sharing one stream: each fenced by its own epoch (the
     fence is a hash, one field per endpoint)
  5. bad input: WRONGTYPE at the stream key -> dead-lettered, counted; Redis
     unreachable -> retried, then delivered once; SCRIPT FLUSH -> NOSCRIPT
     handled (reloaded), delivered once
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, parse_payload  # noqa: E402

ORDER = ["test_config", "test_hash_tag", "test_shared_stream", "test_bad_input", "test_split_brain", "test_fault_loop"]

FAULT_S = int(os.environ.get("BATON_STREAM_FAULT_S", "40"))
TTL = 1000
LEASE = {"ttl_ms": TTL, "renew_ms": 300, "retry_ms": 100}
STREAM = "baton:orders"


def sink_cfg(port, extra=""):
    return ('{ name = "rs"; type = "redis_stream"; host = "127.0.0.1"; port = %d; '
            'backoff_ms = 20; backoff_max_ms = 200; %s }' % (port, extra))


def endpoint_cfg(port, extra=""):
    return ('name = "orders"; type = "redis_psub"; sink = "rs";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n%s\n' % (port, extra))


def entries(c, key=STREAM):
    """[(id, epoch, source dict, payload bytes)] along the stream."""
    out = []
    for _sid, fields in c.cmd("XRANGE", key, "-", "+"):
        f = {fields[i].decode(): fields[i + 1] for i in range(0, len(fields), 2)}
        out.append((f["id"].decode(), int(f["epoch"]), json.loads(f["source"]), f["payload"]))
    return out


def seqs(es):
    out = []
    for e in es:
        p = parse_payload(e[3].decode(errors="replace"))
        if p:
            out.append(p[0])
    return out


wait_subscribers = h.wait_subscribers


# --------------------------------------------------------------------------

def test_config(t):
    d = h.mktemp()
    os.makedirs(os.path.join(d, "endpoints.d"))
    main = os.path.join(d, "baton.cfg")
    with open(os.path.join(d, "endpoints.d", "orders.cfg"), "w") as f:
        f.write(endpoint_cfg(6379))
    cases = [
        ("", 0, "configuration OK"),
        ('stream = "";', 78, "'stream' must not be empty"),
        ("maxlen = 0;", 78, "maxlen"),
        ('sentinels = [ "127.0.0.1:26379" ];', 78, "master_name"),
        ('password_env = "BATON_TEST_NO_SUCH_VAR";', 78, "BATON_TEST_NO_SUCH_VAR"),
        ("dedup_windw_ms = 5;", 78, "dedup_windw_ms"),
        ('tls = { ca_file = "/nonexistent/ca.pem"; };', 78, "/nonexistent/ca.pem"),
    ]
    for extra, want, needle in cases:
        with open(main, "w") as f:
            f.write(h.main_cfg(redis_port=6379, lease=LEASE, sinks=sink_cfg(6379, extra)))
        rc, out, err = h.run_baton(["-c", main, "--check-config"])
        ok = rc == want and needle in (out + err) and (want == 0 or "baton.cfg:" in err)
        t.check(ok, "check-config %r: expected %d with %r, got %d: %s"
                % (extra, want, needle, rc, (out + err).strip()[:300]))


def test_hash_tag(t):
    redis = t.redis()
    c = redis.client()
    main = h.main_cfg(redis_port=redis.port, lease=LEASE,
                      sinks=sink_cfg(redis.port, 'hash_tag = true; dedup_window_ms = 60000;'))
    b = t.baton(main, {"orders.cfg": endpoint_cfg(redis.port)}, name="a")
    wait_subscribers(t, redis.port, 1)
    for i in range(3):
        c.cmd("PUBLISH", "chan.x", "%d:0" % i)
    key = "{%s}" % STREAM
    t.require(h.wait_until(lambda: c.cmd("XLEN", key) >= 3, 5), "3 entries in %s" % key)
    seen = c.cmd("KEYS", key + ":seen:orders:*")
    t.check(c.cmd("TYPE", key + ":fence") in (b"hash", "hash"), "the fence is the hash %s:fence" % key)
    t.check(len(seen) >= 3, "the seen keys are %s:seen:orders:<id>: %r" % (key, seen[:3]))
    ttl = c.cmd("PTTL", seen[0])
    t.check(0 < ttl <= 60000, "a seen key expires within dedup_window_ms: %r" % ttl)
    t.check(c.cmd("EXISTS", STREAM) == 0, "nothing under the untagged name")
    rc = b.term()
    t.check(rc == 0, "clean exit (no leak report under ASan): %r" % rc)


def test_shared_stream(t):
    """Two guarded endpoints, leases (and epochs) of their own, one stream:
    the later lease's higher epoch must not fence the other endpoint."""
    redis = t.redis()
    c = redis.client()
    mport = h.free_port()
    main = h.main_cfg(redis_port=redis.port, lease=LEASE,
                      sinks=sink_cfg(redis.port, 'stream = "shared";'),
                      extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    eps = {"orders.cfg": endpoint_cfg(redis.port),
           "events.cfg": endpoint_cfg(redis.port).replace('"orders"', '"events"')
                                                   .replace('"chan.*"', '"evt.*"')}
    b = t.baton(main, eps, name="a")
    wait_subscribers(t, redis.port, 1)
    wait_subscribers(t, redis.port, 1, channel="evt.probe")
    for r in range(3):
        for i in range(5):
            c.cmd("PUBLISH", "chan.x", "%d:0" % (r * 5 + i))
            c.cmd("PUBLISH", "evt.x", "%d:0" % (r * 5 + i))
        time.sleep(0.2)
    def numbered():
        return len(seqs(entries(c, "shared")))  # the probes' entries are not numbered
    t.require(h.wait_until(lambda: numbered() >= 30, 5),
              "30 numbered entries in the shared stream: %r" % numbered())
    fence = {k.decode(): int(v) for k, v in zip(*[iter(c.cmd("HGETALL", "shared:fence"))] * 2)}
    m = h.metrics(mport)
    fenced = sum(v for k, v in m.items() if k.startswith("baton_fenced_by_sink_total"))
    print("    fence %r; fenced %r" % (fence, fenced))
    t.check(sorted(fence) == ["events", "orders"], "one fence field per endpoint: %r" % fence)
    t.check(fence["orders"] != fence["events"], "the endpoints' epochs differ: %r" % fence)
    time.sleep(0.5)
    t.check(numbered() == 30, "every message of both endpoints written once "
            "(nothing fenced by the other endpoint's epoch): %r" % numbered())
    t.check(not fenced, "no fence counted: %r" % fenced)
    rc = b.term()
    t.check(rc == 0, "clean exit: %r" % rc)


def test_bad_input(t):
    src = t.redis()    # locker and source
    store = t.redis()  # the sink's: made unreachable without touching the lease
    c = store.client()
    dl = os.path.join(t.workdir, "dead.jsonl")
    mport = h.free_port()
    sinks = sink_cfg(store.port, 'dead_letter = "dl";') + \
        ', { name = "dl"; type = "file"; path = "%s"; }' % dl
    main = h.main_cfg(redis_port=src.port, lease=LEASE, sinks=sinks,
                      extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"orders.cfg": endpoint_cfg(src.port)}, name="a")
    wait_subscribers(t, src.port, 1)
    t.require(h.wait_until(lambda: h.readyz(mport)[0] == 200, 10), "/readyz 200 (PING)")
    pc = src.client()

    # WRONGTYPE: a string where the stream should be -> dead-lettered
    c.cmd("SET", STREAM, "not a stream")
    for i in range(5):
        pc.cmd("PUBLISH", "chan.x", "%d:0" % i)

    def dead():
        return [json.loads(x) for x in open(dl).read().splitlines()] if os.path.exists(dl) else []
    t.require(h.wait_until(lambda: sum(r.get("channel") == "chan.x" for r in dead()) >= 5, 10),
              "5 dead-lettered")
    rows = dead()
    t.check(all(r["dead_letter"]["reason"] == "rejected" for r in rows), "reason rejected: %r" % rows[:1])
    t.check("WRONGTYPE" in rows[0]["dead_letter"].get("body", ""), "Redis's message kept: %r" % rows[0])
    m = h.metrics(mport)
    dlc = m.get('baton_messages_dead_lettered_total{endpoint="orders",reason="rejected"}')
    t.check(dlc == len(rows), "dead-lettered counted: %r for %d" % (dlc, len(rows)))
    t.check("WRONGTYPE" in b.stderr_text(), "the log says WRONGTYPE")
    c.cmd("DEL", STREAM)

    # SCRIPT FLUSH: NOSCRIPT, reloaded, delivered once
    pc.cmd("PUBLISH", "chan.x", "100:0")
    t.require(h.wait_until(lambda: c.cmd("XLEN", STREAM) == 1, 5), "delivered before the flush")
    c.cmd("SCRIPT", "FLUSH")
    pc.cmd("PUBLISH", "chan.x", "101:0")
    t.require(h.wait_until(lambda: c.cmd("XLEN", STREAM) == 2, 5), "delivered after SCRIPT FLUSH")
    t.check("NOSCRIPT" in b.stderr_text(), "NOSCRIPT noticed")
    es = entries(c)
    t.check(seqs(es) == [100, 101], "each once, in order: %r" % seqs(es))
    e = es[-1]
    t.check(e[2].get("type") == "redis_psub" and e[2].get("channel") == "chan.x",
            "source fields: %r" % (e[2],))
    t.check(e[0] and e[1] > 0, "id and epoch: %r" % (e[:2],))

    # the sink's Redis down for 1.5 s (it comes back empty: no persistence):
    # retried, then delivered once
    store.stop()
    t_down = time.monotonic()
    pc.cmd("PUBLISH", "chan.x", "102:0")
    pc.cmd("PUBLISH", "chan.x", "103:0")
    time.sleep(1.5)
    t.check(h.readyz(mport)[0] == 503, "/readyz 503 while the sink's Redis is down")
    store.start()
    c = store.client()
    t.require(h.wait_until(lambda: c.cmd("XLEN", STREAM) >= 2, 10), "delivered after Redis came back")
    time.sleep(0.5)
    got = seqs(entries(c))
    print("    WRONGTYPE: %d dead-lettered; after SCRIPT FLUSH and %.1f s down: %r"
          % (len(rows), time.monotonic() - t_down, got))
    t.check(got == [102, 103], "each once, in order: %r" % got)
    m = h.metrics(mport)
    errs = m.get('baton_sink_errors_total{endpoint="orders"}') or 0
    t.check(errs > 0, "failed attempts counted: %r" % errs)
    rc = b.term()
    t.check(rc == 0, "clean exit (no leak report under ASan): %r" % rc)


def test_split_brain(t):
    redis = t.redis()
    a, b, mports = h.split_brain_pair(t, redis.port, sink_cfg(redis.port),
                                      {"orders.cfg": endpoint_cfg(redis.port)})
    c = redis.client()
    pub = Publisher(redis.port, channel="chan.x", rate=200)
    pub.start()
    t.cleanup(pub.stop)
    t.require(h.wait_until(lambda: (c.cmd("XLEN", STREAM) or 0) >= 100, 10), "a writes")
    ts = h.split_brain(t, redis, a, b, pub, "fenced by the store")
    t_del, t_b, t_fenced, t_stop = ts["del"], ts["b"], ts["fenced"], ts["stop"]
    es = entries(c)
    epochs = sorted({e[1] for e in es})
    first_new = next(i for i, e in enumerate(es) if e[1] == epochs[-1])
    stale_after = [e for e in es[first_new:] if e[1] < epochs[-1]]
    ids = [e[0] for e in es]
    print("    lease key deleted; b leads %.2f s later; a fenced %.2f s after b led, stopped "
          "%.2f s after the fence; %d entries, epochs %s, %d of the older epoch after the newer's first"
          % (t_b - t_del, t_fenced - t_b, t_stop - t_fenced, len(es), len(epochs), len(stale_after)))
    t.check(len(epochs) == 2, "two epochs in the stream: %s" % epochs)
    t.check(t_stop - t_b < 1.0, "a ends its term within 1 s of b leading: %.2f s" % (t_stop - t_b))
    t.check(t_stop - t_fenced < 1.0, "a ends its term within 1 s of the fence: %.2f s" % (t_stop - t_fenced))
    t.check(not stale_after, "no entry of the older epoch after the newer's first: %d" % len(stale_after))
    t.check(len(ids) == len(set(ids)), "each id once")
    fenced = h.metrics(mports["a"]).get('baton_fenced_by_sink_total{endpoint="orders"}')
    t.check(fenced == 1, "a counted the fence once: %r" % fenced)


def leader_of(batons):
    for b in batons:
        if not b.alive():
            continue
        st = h.status_endpoints(b.metrics_port, timeout=0.3)
        if st.get("orders", {}).get("role") == "leader":
            return b
    return None


def test_fault_loop(t):
    redis = t.redis()
    batons = []
    for i in range(3):
        mport = h.free_port()
        main = h.main_cfg(redis_port=redis.port, lease=LEASE, sinks=sink_cfg(redis.port),
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
        b = t.baton(main, {"orders.cfg": endpoint_cfg(redis.port, 'failover = "replay";')},
                    name="r%d" % i)
        b.metrics_port = mport
        batons.append(b)
    wait_subscribers(t, redis.port, 3)
    c = redis.client()
    pub = Publisher(redis.port, rate=1000).start()
    t.require(h.wait_until(lambda: (c.cmd("XLEN", STREAM) or 0) > 0, 10), "a leader writes")
    faults = {"kill": 0, "stop": 0}
    t_end = time.monotonic() + FAULT_S
    n = 0
    while time.monotonic() < t_end:
        time.sleep(4)
        lead = leader_of(batons)
        if lead is None:
            continue
        if n % 2 == 0:
            lead.proc.send_signal(signal.SIGKILL)
            lead.proc.wait(5)
            faults["kill"] += 1
            time.sleep(1.0)
            lead.start()
        else:
            lead.signal(signal.SIGSTOP)
            time.sleep(2 * TTL / 1000.0)
            lead.signal(signal.SIGCONT)
            faults["stop"] += 1
        n += 1
    time.sleep(1.0)
    pub.stop()
    time.sleep(2 * TTL / 1000.0 + 2)
    published = [e[0] for e in pub.snapshot() if e[2]]
    es = entries(c)
    got = seqs(es)
    counts = {}
    for s in got:
        counts[s] = counts.get(s, 0) + 1
    missing = [s for s in published if s not in counts]
    dups = [s for s, k in counts.items() if k > 1]
    breaks = [i for i in range(1, len(es)) if es[i][1] < es[i - 1][1]]
    epochs = len({e[1] for e in es})
    h.log("fault loop: %d s, %d SIGKILL, %d SIGSTOP, published %d, entries %d, missing %d, "
          "duplicates %d, epochs %d, epoch decreases %d"
          % (FAULT_S, faults["kill"], faults["stop"], len(published), len(es), len(missing),
             len(dups), epochs, len(breaks)))
    print("RESULT redis_stream_fault_missing %d" % len(missing))
    print("RESULT redis_stream_fault_duplicates %d" % len(dups))
    t.check(not missing, "%d missing, e.g. %r" % (len(missing), missing[:10]))
    t.check(not dups, "%d duplicated, e.g. %r" % (len(dups), dups[:10]))
    t.check(not breaks, "epoch decreases along the stream at %r" % breaks[:5])
    t.check(sum(faults.values()) >= FAULT_S // 4 - 2, "only %r faults" % faults)


if __name__ == "__main__":
    h.main(globals())
