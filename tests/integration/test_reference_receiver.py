"""The reference receiver, examples/receiver/receiver.py (issue 37 item 4),
alone: no baton, no broker. It runs as a subprocess on a free port with its
sqlite file in the test's directory; requests are made as baton makes them
(X-Baton-Endpoint, X-Baton-Epoch, X-Baton-Id, NDJSON batches).

  1. fencing_and_dedup: epoch 5 accepted; epoch 4 answered 409
     {"error":"fenced","epoch":5} and not stored; epoch 6 accepted; a stored
     id again: 200, stored once; an NDJSON batch of 3 lines (one id already
     stored, one line without id): 2 stored; malformed JSON (single and in a
     batch), a missing epoch and an id named by --reject-ids: 400 with a
     body saying why, nothing stored; the marks are per endpoint (another
     endpoint at epoch 1 is accepted).
  2. concurrent_fencing_and_restart: epoch 8 seen, then 20 requests at once
     (threads behind a barrier), epochs 7 and 8 mixed: every 7 answered 409
     and none stored, every 8 answered 200 and stored. The receiver is
     stopped and started again on the same database: the mark persists
     (epoch 7: 409), the rows too.

Run standalone: BATON_BIN=/path/baton python3 tests/integration/test_reference_receiver.py [test_name ...]
(baton itself is not started; the harness only insists that it exists).
"""
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

RECEIVER = os.path.join(h.SOURCE_DIR, "examples", "receiver", "receiver.py")

ORDER = ["test_fencing_and_dedup", "test_concurrent_fencing_and_restart"]


class Receiver:
    """receiver.py as a subprocess; stopped by the test's cleanup."""

    def __init__(self, t, db, args=()):
        self.port = h.free_port()
        self.out = os.path.join(t.workdir, "receiver-%d.out" % self.port)
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, RECEIVER, "--port", str(self.port), "--db", db] + list(args),
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        t.cleanup(self.stop)
        ready = h.wait_until(lambda: "listening on 127.0.0.1:%d" % self.port in self.output()
                             or self.proc.poll() is not None, 10)
        t.require(ready and self.proc.poll() is None,
                  "receiver did not start: %s" % self.output())

    def output(self):
        with open(self.out, errors="replace") as f:
            return f.read()

    def stop(self):
        h.stop_process(self.proc)

    def post(self, epoch, body, mid=None, endpoint="orders", ndjson=False):
        """(HTTP status, body text) of one POST as baton sends it."""
        headers = {"X-Baton-Endpoint": endpoint, "Content-Type":
                   "application/x-ndjson" if ndjson else "application/json"}
        if epoch is not None:
            headers["X-Baton-Epoch"] = str(epoch)
        if mid is not None:
            headers["X-Baton-Id"] = mid
        req = urllib.request.Request("http://127.0.0.1:%d/ingest" % self.port,
                                     data=body.encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def send(self, epoch, mid, endpoint="orders"):
        """One envelope with id mid, as baton's http sink posts it."""
        env = {"endpoint": endpoint, "type": "redis_psub", "epoch": epoch, "id": mid,
               "received_at": "2026-12-06T10:00:00.000Z", "payload": "p-" + mid}
        return self.post(epoch, json.dumps(env), mid=mid, endpoint=endpoint)

    def messages(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/messages" % self.port, timeout=5) as r:
            return json.loads(r.read())


def line(epoch, mid=None):
    env = {"endpoint": "orders", "type": "redis_psub", "epoch": epoch, "payload": "x"}
    if mid is not None:
        env["id"] = mid
    return json.dumps(env) + "\n"


def test_fencing_and_dedup(t):
    r = Receiver(t, os.path.join(t.workdir, "recv.db"), ["--reject-ids", "poison,other"])
    t.check(h.http_get(r.port, "/health")[0] == 200, "GET /health is not 200")

    st, body = r.send(5, "m1")
    t.check(st == 200, "epoch 5 (first seen): %s %s" % (st, body))
    st, body = r.send(4, "m2")
    t.check(st == 409, "epoch 4 after 5: expected 409, got %s %s" % (st, body))
    t.check(st != 409 or json.loads(body) == {"error": "fenced", "epoch": 5},
            "409 body: %s" % body)
    st, body = r.send(6, "m3")
    t.check(st == 200, "epoch 6: %s %s" % (st, body))
    st, body = r.send(5, "m4")
    t.check(st == 409, "epoch 5 after 6: expected 409, got %s %s" % (st, body))
    st, body = r.send(6, "m1")
    t.check(st == 200, "duplicate id m1: expected 200, got %s %s" % (st, body))

    batch = line(6, "m3") + line(6, "b1") + line(6)  # m3 stored already; one without id
    st, body = r.post(6, batch, mid="m3", ndjson=True)
    t.check(st == 200, "batch: %s %s" % (st, body))
    t.check(st != 200 or json.loads(body) == {"applied": 2, "duplicates": 1},
            "batch answer: %s" % body)

    answers = {}
    for what, args, kw in [
            ("malformed JSON", (6, '{"id": "bad1", "payload": '), {"mid": "bad1"}),
            ("malformed line 2 of a batch", (6, line(6, "bad2") + '{"id": "bad3"\n'),
             {"ndjson": True}),
            ("no X-Baton-Epoch", (None, line(6, "bad4")), {"mid": "bad4"}),
            ("a --reject-ids id", (6, line(6, "poison")), {"mid": "poison"})]:
        st, body = answers[what] = r.post(*args, **kw)
        t.check(st == 400, "%s: expected 400, got %s %s" % (what, st, body))
        t.check(body.strip() != "", "%s: 400 with an empty body" % what)
    t.check("malformed JSON" in answers["malformed JSON"][1],
            "malformed JSON, the body: %r" % answers["malformed JSON"][1])
    t.check("line 2" in answers["malformed line 2 of a batch"][1],
            "a malformed batch line is not named: %r" % answers["malformed line 2 of a batch"][1])
    t.check(answers["a --reject-ids id"][1] == "rejected by --reject-ids",
            "--reject-ids body: %r" % answers["a --reject-ids id"][1])

    st, body = r.send(1, "p1", endpoint="payments")
    t.check(st == 200, "another endpoint at epoch 1: %s %s" % (st, body))

    rows = r.messages()
    got = [(m["endpoint"], m["id"], m["epoch"]) for m in rows]
    want = [("orders", "m1", 5), ("orders", "m3", 6), ("orders", "b1", 6), ("orders", None, 6),
            ("payments", "p1", 1)]
    t.check(got == want, "stored rows: %r, expected %r" % (got, want))


def test_concurrent_fencing_and_restart(t):
    db = os.path.join(t.workdir, "recv.db")
    r = Receiver(t, db)
    st, body = r.send(8, "first8")
    t.require(st == 200, "epoch 8: %s %s" % (st, body))

    n = 20
    barrier = threading.Barrier(n)
    results = [None] * n

    def one(i):
        epoch = 7 if i % 2 else 8
        barrier.wait(5)
        try:
            results[i] = (epoch, "c%d" % i) + r.send(epoch, "c%d" % i)
        except Exception as e:  # recorded, checked below
            results[i] = (epoch, "c%d" % i, None, repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(15)
    for res in results:
        t.require(res is not None, "a request thread did not finish")
        epoch, mid, st, body = res
        want = 409 if epoch == 7 else 200
        t.check(st == want, "%s at epoch %d: expected %d, got %s %s" % (mid, epoch, want, st, body))
    rows = r.messages()
    t.check(not [m for m in rows if m["epoch"] == 7],
            "epoch-7 rows stored: %r" % [m for m in rows if m["epoch"] == 7])
    stored = sorted(m["id"] for m in rows)
    want = sorted(["first8"] + ["c%d" % i for i in range(0, n, 2)])
    t.check(stored == want, "stored ids %r, expected %r" % (stored, want))

    r.stop()
    r2 = Receiver(t, db)
    st, body = r2.send(7, "after-restart")
    t.check(st == 409, "epoch 7 after a restart: expected 409, got %s %s" % (st, body))
    st, body = r2.send(8, "c0")
    t.check(st == 200 and json.loads(body).get("duplicates") == 1,
            "stored id c0 after a restart: %s %s" % (st, body))
    t.check(sorted(m["id"] for m in r2.messages()) == want, "rows after a restart: %r"
            % r2.messages())


if __name__ == "__main__":
    h.main(globals())
