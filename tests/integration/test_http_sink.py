"""The HTTP sink through the whole daemon: a local receiver that fails the
first requests, then accepts -> retried, delivered once, counted in the
metrics; a receiver that is down for longer than the retries -> every message
is counted as sink_failed and logged with the reason, none silently lost."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ENDPOINT = """name = "orders"; type = "redis_psub"; sink = "hook";
host = "127.0.0.1"; port = %d; patterns = [ "orders.*" ];
"""


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
    m = h.metrics(mport)
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
    t.require(h.wait_until(lambda: h.metrics(mport).get(key) == 5, 15), "5 counted as sink_failed: %s"
              % h.metrics(mport).get(key))
    err = b.stderr_text()
    t.check(err.count("sink_failed") >= 1 or err.count("gave up") >= 1, "drops are logged")
    recv.down = False
    pub.cmd("PUBLISH", "orders.new", "after recovery")
    t.check(h.wait_until(lambda: any(r["payload"] == "after recovery" for r in recv.accepted()), 10),
            "delivery resumes after the sink recovers")
    t.check(b.alive(), "process alive")



TICK = 'name = "tick"; type = "schedule"; sink = "%s"; cron = "* * * * * *";\n'


def maps_libcurl(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libcurl" in f.read()


def test_libcurl_loaded_only_for_http_sinks(t):
    """libcurl is dlopen'ed by the first HTTP sink: a replica with stdout
    sinks only never maps it; one with an HTTP sink does and delivers; when
    it cannot be loaded, baton refuses to start and says which endpoint,
    which sink and which library."""
    recv = h.HttpReceiver()
    t.cleanup(recv.close)
    hook = '{ name = "hook"; type = "http"; url = "%s"; }' % recv.url
    plain = t.baton(h.main_cfg(None), {"tick.cfg": TICK % "out"}, name="plain")
    t.require(h.wait_until(lambda: "started" in plain.stderr_text(), 10), "stdout-only replica starts")
    t.check(not maps_libcurl(plain.pid), "a replica without an HTTP sink does not map libcurl")
    withhttp = t.baton(h.main_cfg(None, sinks=hook), {"tick.cfg": TICK % "hook"}, name="withhttp")
    t.require(h.wait_until(lambda: len(recv.accepted()) >= 1, 10), "the HTTP sink delivers a tick")
    t.check(maps_libcurl(withhttp.pid), "a replica with an HTTP sink maps libcurl")

    main = os.path.join(t.workdir, "missing.cfg")
    os.makedirs(os.path.join(t.workdir, "missing.d"))
    with open(os.path.join(t.workdir, "missing.d", "tick.cfg"), "w") as f:
        f.write(TICK % "hook")
    with open(main, "w") as f:
        f.write(h.main_cfg(None, sinks=hook, extra='endpoints_dir = "missing.d";'))
    rc, _, err = h.run_baton(["-c", main], timeout=10,
                             env={"BATON_LIBCURL": "/nonexistent/libcurl.so.4"})
    t.check(rc not in (0, None) and "endpoint 'tick'" in err and "sink 'hook'" in err
            and "libcurl" in err and "/nonexistent/libcurl.so.4" in err,
            "libcurl missing: a clear refusal (%r, %r)" % (rc, err[-400:]))
    print("    libcurl missing: exit %d: %s" % (rc, err.strip().splitlines()[-1] if err.strip() else ""))

if __name__ == "__main__":
    h.main(globals())
