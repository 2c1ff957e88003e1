"""The HTTP sink through the whole daemon: a local receiver that fails the
first requests, then accepts -> retried, delivered once, counted in the
metrics; a receiver that is down for longer than the retries -> every message
is counted as sink_failed and logged with the reason, none silently lost."""
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ENDPOINT = """name = "orders"; type = "redis_psub"; sink = "hook";
host = "127.0.0.1"; port = %d; patterns = [ "orders.*" ];
"""


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def start(t, recv, retries):
    redis = t.redis()
    mport = h.free_port()
    sinks = ('{ name = "hook"; type = "http"; url = "%s"; retries = %d; backoff_ms = 20; '
             'backoff_max_ms = 100; headers = [ "X-Test: yes" ]; }' % (recv.url, retries))
    main = h.main_cfg(redis.port, sinks=sinks, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"orders.cfg": ENDPOINT % redis.port})
    t.require(h.wait_until(lambda: "consuming as leader" in b.stderr_text(), 10), "leader")
    return redis, b, mport


def test_retries_then_delivery(t):
    recv = h.HttpReceiver(fail_first=3, fail_status=503)
    redis, b, mport = start(t, recv, retries=5)
    pub = redis.client()
    for i in range(20):
        pub.cmd("PUBLISH", "orders.new", "order %d" % i)
    t.require(h.wait_until(lambda: len(recv.accepted()) >= 20, 15), "20 delivered, got %d" % len(recv.accepted()))
    time.sleep(0.3)
    got = [r["payload"] for r in recv.accepted()]
    t.check(sorted(got) == sorted("order %d" % i for i in range(20)), "each message delivered")
    t.check(len(got) == len(set(got)), "no duplicates: %d deliveries" % len(got))
    failed = [r for r in recv.requests if r[4] != 200]
    t.check(len(failed) == 3, "3 failed attempts seen by the receiver, got %d" % len(failed))
    hdrs = [r[2] for r in recv.requests if r[4] == 200][0]
    t.check(hdrs.get("X-Baton-Endpoint") == "orders", "X-Baton-Endpoint header: %s" % hdrs)
    t.check(int(hdrs.get("X-Baton-Epoch", "0")) > 0, "X-Baton-Epoch header > 0")
    t.check(hdrs.get("X-Test") == "yes", "static header")
    m = metrics(mport)
    t.check(m.get('baton_sink_errors_total{endpoint="orders"}') == 3, "sink_errors_total 3: %s"
            % m.get('baton_sink_errors_total{endpoint="orders"}'))
    t.check(m.get('baton_messages_forwarded_total{endpoint="orders"}') == 20, "forwarded_total 20")
    h.log("3 x 503 then accepted: 20 delivered once, sink_errors_total=3")


def test_sink_down_counts_every_drop(t):
    recv = h.HttpReceiver()
    recv.down = True
    redis, b, mport = start(t, recv, retries=2)
    pub = redis.client()
    for i in range(5):
        pub.cmd("PUBLISH", "orders.new", "lost %d" % i)
    key = 'baton_messages_dropped_total{endpoint="orders",reason="sink_failed"}'
    t.require(h.wait_until(lambda: metrics(mport).get(key) == 5, 15), "5 counted as sink_failed: %s"
              % metrics(mport).get(key))
    err = b.stderr_text()
    t.check(err.count("sink_failed") >= 1 or err.count("gave up") >= 1, "drops are logged")
    recv.down = False
    pub.cmd("PUBLISH", "orders.new", "after recovery")
    t.check(h.wait_until(lambda: any(r["payload"] == "after recovery" for r in recv.accepted()), 10),
            "delivery resumes after the sink recovers")
    t.check(b.alive(), "process alive")


if __name__ == "__main__":
    h.main(globals())
