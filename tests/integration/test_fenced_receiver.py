"""A receiver that fences (issue 37 item 4), end to end: two baton replicas,
a real redis-server, and the reference receiver (examples/receiver/).

A split brain made on purpose: while replica A leads and delivers, the
lease key is deleted by hand and its release announced, so replica B
acquires a newer epoch at once while A still believes it leads (its lease is
long: A would not find out by itself before its next renewal, up to 10 s;
the deletion is timed away from A's renewal instants). The first of B's messages raises the receiver's mark; A's
next request is answered 409; A must end its term at once. Checked: A logs
the fence and stops within 1 s of B's first delivery; A's
baton_fenced_by_sink_total is 1; the receiver stored no message of A's
epoch after the first of B's; every id is stored once.
"""
import os
import subprocess
import sys
import urllib.request
import json

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher  # noqa: E402

ROOT = os.environ.get("BATON_SOURCE_DIR",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RECEIVER = os.path.join(ROOT, "examples", "receiver", "receiver.py")

ENDPOINT = """name = "orders"; type = "redis_psub"; sink = "hook";
host = "127.0.0.1"; port = %d; patterns = [ "orders.*" ];
"""


def start_receiver(t):
    port = h.free_port()
    db = os.path.join(t.workdir, "receiver.db")
    p = subprocess.Popen([sys.executable, RECEIVER, "--port", str(port), "--db", db],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t.cleanup(lambda: (p.terminate(), p.wait(5)))
    line = p.stdout.readline()
    t.require("listening" in line, "reference receiver started: %r" % line)
    return port


def stored(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/messages" % port, timeout=5) as r:
        return json.loads(r.read())


def test_split_brain_fenced_by_the_receiver(t):
    rport = start_receiver(t)
    url = "http://127.0.0.1:%d/ingest" % rport
    redis = t.redis()
    sinks = '{ name = "hook"; type = "http"; url = "%s"; backoff_ms = 50; backoff_max_ms = 500; }' % url
    a, b, ports = h.split_brain_pair(t, redis.port, sinks, {"orders.cfg": ENDPOINT % redis.port})
    pub = Publisher(redis.port, channel="orders.x", rate=200)
    pub.start()
    t.cleanup(pub.stop)
    t.require(h.wait_until(lambda: len(stored(rport)) >= 100, 10), "a delivers")
    ts = h.split_brain(t, redis, a, b, pub, "fenced by the receiver")
    t_del, t_b, t_fenced, t_stop = ts["del"], ts["b"], ts["fenced"], ts["stop"]
    ea = a.stderr_text()
    rows = stored(rport)
    epochs = sorted({r["epoch"] for r in rows})
    first_new = next(i for i, r in enumerate(rows) if r["epoch"] == epochs[-1])
    stale_after = [r for r in rows[first_new:] if r["epoch"] < epochs[-1]]
    ids = [r["id"] for r in rows]
    ma = h.metrics(ports["a"])
    fenced = ma.get('baton_fenced_by_sink_total{endpoint="orders"}')
    print("    lease key deleted; b leads %.2f s later; a fenced %.2f s after b led, stopped %.2f s "
          "after the fence; receiver stored %d rows, epochs %s, %d of the older epoch after the "
          "first of the newer; a's baton_fenced_by_sink_total %s"
          % (t_b - t_del, t_fenced - t_b, t_stop - t_fenced, len(rows), len(epochs),
             len(stale_after), fenced))
    t.check(len(epochs) == 2, "two epochs stored: %s" % epochs)
    t.check(t_fenced - t_b < 1.0, "a fenced within 1 s of b leading: %.2f s" % (t_fenced - t_b))
    t.check(t_stop - t_fenced < 1.0, "a ends its term within 1 s of the fence: %.2f s" % (t_stop - t_fenced))
    t.check(not stale_after, "no message of the older epoch stored after the newer one: %d" % len(stale_after))
    t.check(len(ids) == len(set(ids)), "each id stored once")
    t.check(fenced == 1, "a counted the fence once: %s" % fenced)
    t.check("409" in ea, "a's log shows the 409")


if __name__ == "__main__":
    h.main(globals())
