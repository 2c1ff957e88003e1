"""Shared pieces of the concurrent delivery tests (issue 36:
test_concurrent_delivery.py, test_concurrent_failover.py). Stdlib only.

SlowReceiver   an HTTP receiver in a process of its own (its own GIL: the
               test process publishes and samples /metrics meanwhile):
               HTTP/1.1 keep-alive, one thread per connection (hundreds of
               connections), each POST answered after delay_s; with
               max_concurrent, a POST arriving while that many are being
               processed is answered 503 at once. It records, in arrival
               order, what a receiver can see of concurrency and fencing:
                 c      requests being processed at its arrival, itself included
                 ov     a request with the same ordering key (key_mode) was
                        still being processed when it arrived
                 sa     its X-Baton-Epoch is lower than the highest epoch
                        already accepted (answered 2xx) when it arrived
                 sk     the same, checked when it is accepted
                 ai     acceptance order (None: answered 503)
               A counter is released before the answer is written, so a
               request sent after the client read the previous answer never
               counts that one as still in flight.
MultiPublisher Redis PUBLISH at a steady rate over many channels, payload
               "<per-channel seq>:<global seq>", pipelined.
MetricSampler  samples gauges of a replica's /metrics every interval.
parallel_main  like harness.main, but runs the file's tests in parallel
               threads (each its own TestContext, brokers, ports, receiver);
               with test names on the command line they run one after the
               other.
result_line    one "CONCURRENT scenario=... k=v ..." line per scenario.

    rx = SlowReceiver(t, delay_s=0.02, key_mode="channel")
    ... rx.url ...
    recs = rx.records()           # [Rec, ...] in arrival order
    rx.stop()

Run as a script, this file is the receiver itself: it prints its port on
stdout, appends one JSON line per request to --log (flushed every 100 ms)
and exits on SIGTERM after a last flush.
"""

import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
import traceback

# --------------------------------------------------------------------------
# The receiver process (run as a script)


def _key_of(env, mode):
    """The ordering key the receiver tracks for an envelope, or None."""
    if mode == "channel":
        return env.get("channel")
    if mode == "routing_key":
        return env.get("routing_key")
    if mode == "cdc":
        row = env.get("after") if env.get("op") != "delete" else env.get("before")
        if not isinstance(row, dict):
            return None
        return "%s.%s.%s" % (env.get("db"), env.get("table"), row.get("id"))
    return None


def _serve(argv):
    import argparse
    import http.server
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--max-concurrent", type=int, default=0)
    ap.add_argument("--key", default="none")
    ap.add_argument("--log", required=True)
    ap.add_argument("--parent", type=int, default=0)
    a = ap.parse_args(argv)

    lock = threading.Lock()
    state = {"i": 0, "ai": 0, "busy": 0, "active": 0, "max_acc": 0}
    per_key = {}
    pending = []
    out = open(a.log, "a")

    def flush():
        with lock:
            lines = pending[:]
            del pending[:]
        if lines:
            out.write("".join(lines))
            out.flush()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n)
            if len(body) != n:
                return  # the client went away mid-request: not a request
            ta = time.monotonic()
            try:
                epoch = int(self.headers.get("X-Baton-Epoch", "0"))
            except ValueError:
                epoch = -1
            text = body.decode("utf-8", "replace")
            keys = []
            for line in text.split("\n"):
                if line.strip():
                    try:
                        k = _key_of(json.loads(line), a.key)
                    except ValueError:
                        k = None
                    if k is not None:
                        keys.append(k)
            with lock:
                i = state["i"]
                state["i"] += 1
                state["busy"] += 1
                c = state["busy"]
                ov = False
                for k in keys:
                    if per_key.get(k, 0) > 0:
                        ov = True
                    per_key[k] = per_key.get(k, 0) + 1
                sa = epoch < state["max_acc"]
                refuse = a.max_concurrent > 0 and state["active"] >= a.max_concurrent
                if not refuse:
                    state["active"] += 1
            if not refuse and a.delay > 0:
                time.sleep(a.delay)
            with lock:
                state["busy"] -= 1
                for k in keys:
                    per_key[k] -= 1
                if refuse:
                    status, ai, sk = 503, None, None
                else:
                    state["active"] -= 1
                    status = 200
                    ai = state["ai"]
                    state["ai"] += 1
                    sk = epoch < state["max_acc"]
                    if epoch > state["max_acc"]:
                        state["max_acc"] = epoch
                td = time.monotonic()
                pending.append(json.dumps({
                    "i": i, "ta": ta, "td": td, "ep": epoch, "st": status, "c": c, "ov": ov,
                    "sa": sa, "sk": sk, "ai": ai, "id": self.headers.get("X-Baton-Id"),
                    "b": text}) + "\n")
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

        def handle_error(self, request, client_address):
            # a client closing a kept-alive connection, a reset: not an error
            if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                traceback.print_exc()

    srv = Server(("127.0.0.1", 0), Handler)
    done = threading.Event()

    def flusher():
        while not done.wait(0.1):
            flush()

    def on_term(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    threading.Thread(target=flusher, daemon=True).start()
    sys.stdout.write("%d\n" % srv.server_address[1])
    sys.stdout.flush()
    while not done.wait(1.0):
        if a.parent and os.getppid() != a.parent:  # the test process died without stopping us
            break
    flush()
    out.close()
    os._exit(0)


if __name__ == "__main__":
    _serve(sys.argv[1:])

# --------------------------------------------------------------------------
# The test side

import harness as h  # noqa: E402


class Rec:
    """One request as the receiver saw it (see the module's docstring);
    envs: its envelopes, parsed."""
    __slots__ = ("i", "ta", "td", "ep", "st", "c", "ov", "sa", "sk", "ai", "id", "envs")

    def __init__(self, d):
        for k in ("i", "ta", "td", "ep", "st", "c", "ov", "sa", "sk", "ai", "id"):
            setattr(self, k, d.get(k))
        self.envs = []
        for line in d.get("b", "").split("\n"):
            if line.strip():
                try:
                    self.envs.append(json.loads(line))
                except ValueError:
                    self.envs.append({"_unparsable": line[:80]})

    @property
    def ok(self):
        return self.st is not None and 200 <= self.st < 300

    def __repr__(self):
        return ("Rec(#%d epoch=%s status=%s c=%s ov=%s sa=%s sk=%s envs=%r)"
                % (self.i, self.ep, self.st, self.c, self.ov, self.sa, self.sk,
                   [e.get("payload", e.get("id")) for e in self.envs][:3]))


class SlowReceiver:
    def __init__(self, t=None, delay_s=0.02, max_concurrent=0, key_mode="none", name="rx"):
        self.dir = h.mktemp("baton-slowrx-")
        self.log_path = os.path.join(self.dir, "%s.jsonl" % name)
        self.err_path = os.path.join(self.dir, "%s.err" % name)
        self._off = 0
        self._partial = b""
        self._recs = []
        self._lock = threading.Lock()
        with open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--delay", str(delay_s),
                 "--max-concurrent", str(max_concurrent), "--key", key_mode,
                 "--log", self.log_path, "--parent", str(os.getpid())],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        h._cleanups.append(self.stop)
        if t is not None:
            t.cleanup(self.stop)
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline() if ready else b""
        if not line.strip():
            self.stop()
            raise RuntimeError("the receiver did not start: %s" % self.stderr_text()[-500:])
        self.port = int(line)
        self.url = "http://127.0.0.1:%d/ingest" % self.port

    def stderr_text(self):
        try:
            with open(self.err_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def records(self):
        """Every request recorded so far, in arrival order (as flushed: at
        most 100 ms behind)."""
        with self._lock:
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(self._off)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self._off += len(data)
            data = self._partial + data
            lines = data.split(b"\n")
            self._partial = lines.pop()
            new = [Rec(json.loads(x)) for x in lines if x.strip()]
            if new:
                self._recs.extend(new)
                self._recs.sort(key=lambda r: r.i)
            return list(self._recs)

    def stop(self):
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            p.stdout.close()
        except OSError:
            pass
        self.records()
        self.proc = None


def accepted_in_order(recs):
    """[(rec, envelope)] of every accepted envelope, in acceptance order."""
    ok = sorted((r for r in recs if r.ok), key=lambda r: r.ai)
    return [(r, e) for r in ok for e in r.envs]


def order_violations(items):
    """items: (group, seq) in delivery order. The places where a group's
    seq did not increase: [(group, previous seq, seq)]."""
    last = {}
    bad = []
    for g, s in items:
        if g in last and s <= last[g]:
            bad.append((g, last[g], s))
        last[g] = s
    return bad


def concurrency_profile(recs):
    """(max, mean) requests being processed at the receiver at the arrival
    of each request (itself included)."""
    cs = [r.c for r in recs if r.c is not None]
    return (max(cs) if cs else 0, (sum(cs) / float(len(cs))) if cs else 0.0)


# --------------------------------------------------------------------------
# Publishing

def parse_payload(p):
    """(per-channel seq, global seq) of a MultiPublisher payload, or None."""
    try:
        a, b = p.split(":", 1)
        return int(a), int(b)
    except (AttributeError, ValueError):
        return None


class MultiPublisher:
    """PUBLISHes count messages at rate/s, each on a channel picked at
    random (seeded) from channels, payload "<seq on its channel>:<global
    seq>" (both from 1). One pipeline of `batch` messages per tick.
    entries: [(global seq, channel, channel seq, receivers or None)]."""

    def __init__(self, port, channels, rate, count, batch=None, seed=36):
        self.port, self.channels, self.rate, self.count = port, list(channels), float(rate), count
        self.batch = batch or max(1, int(self.rate / 200))
        self.rng = random.Random(seed)
        self.entries = []
        self.error = None
        self.t_start = self.t_end = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        h._cleanups.append(self.stop)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        conn = None
        try:
            conn = h.Resp(self.port, timeout=10)
            chseq = {}
            g = 0
            self.t_start = time.monotonic()
            next_t = self.t_start
            while g < self.count and not self._halt.is_set():
                n = min(self.batch, self.count - g)
                cmds, meta = [], []
                for _ in range(n):
                    g += 1
                    ch = self.rng.choice(self.channels)
                    chseq[ch] = chseq.get(ch, 0) + 1
                    cmds.append(("PUBLISH", ch, "%d:%d" % (chseq[ch], g)))
                    meta.append((g, ch, chseq[ch]))
                replies = conn.pipeline(cmds)
                self.entries.extend((m[0], m[1], m[2], r if isinstance(r, int) else None)
                                    for m, r in zip(meta, replies))
                next_t += n / self.rate
                d = next_t - time.monotonic()
                if d > 0:
                    time.sleep(d)
            self.t_end = time.monotonic()
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            if conn is not None:
                conn.close()

    def join(self, timeout):
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self):
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(10)


# --------------------------------------------------------------------------
# /metrics sampling

class MetricSampler(threading.Thread):
    """Every interval s, the gauges `names` of one endpoint from a replica's
    /metrics: samples = [(monotonic time, {name: value or None})]."""

    def __init__(self, mport, endpoint, names, interval=0.5):
        super().__init__(daemon=True)
        self.mport, self.endpoint, self.names, self.interval = mport, endpoint, names, interval
        self.samples = []
        self._halt = threading.Event()
        h._cleanups.append(self.halt)

    def run(self):
        import termdelivery as td
        while not self._halt.is_set():
            m = td.scrape(self.mport)
            now = time.monotonic()
            if m is not None:
                self.samples.append((now, {n: _gauge(m, n, self.endpoint) for n in self.names}))
            self._halt.wait(self.interval)

    def start(self):
        super().start()
        return self

    def halt(self):
        self._halt.set()
        if self.is_alive():
            self.join(5)


def _gauge(m, name, endpoint):
    """A float gauge of one endpoint (termdelivery.metric rounds to int)."""
    return m.get('%s{endpoint="%s"}' % (name, endpoint))


def sink_gauge(mport, name, endpoint):
    import termdelivery as td
    return _gauge(td.scrape(mport) or {}, name, endpoint)


# --------------------------------------------------------------------------
# Reporting and running

_print_lock = threading.Lock()


def result_line(scenario, verdict, **kv):
    """The one summary line of a scenario (the log keeps it)."""
    with _print_lock:
        print("CONCURRENT scenario=%s result=%s %s"
              % (scenario, verdict, " ".join("%s=%s" % x for x in kv.items())), flush=True)


def say(scenario, text):
    with _print_lock:
        print("    [%s] %s" % (scenario, text), flush=True)


def parallel_main(namespace, limit_s=400):
    """harness.main, with the tests in parallel threads: each has its own
    TestContext (and its own brokers, ports and receiver: nothing shared),
    so the file takes as long as its longest test. Names on the command line:
    those tests only, one after the other (harness.main). A test still
    running after limit_s fails the file (every process is then killed by
    the harness's cleanups)."""
    if sys.argv[1:]:
        h.main(namespace)
        return
    tests = [(n, f) for n, f in sorted(namespace.items())
             if n.startswith("test_") and callable(f)]
    if not os.path.exists(h.BATON_BIN):
        print("baton binary not found at %s (set BATON_BIN)" % h.BATON_BIN)
        sys.exit(2)
    results = {}

    def run(name, fn):
        t = h.TestContext(name)
        t0 = time.monotonic()
        with _print_lock:
            print("RUN  %s" % name, flush=True)
        try:
            fn(t)
        except (h.TestFailure, h.TestSkipped):
            pass
        except Exception as e:  # an unexpected error fails the test
            with _print_lock:
                traceback.print_exc()
            t.failures.append("exception: %r" % e)
        t.finish()
        h.check_sanitizers(t)
        dt = time.monotonic() - t0
        with _print_lock:
            if t.failures:
                t.dump_logs()
                print("FAIL %s (%.1fs): %s" % (name, dt, "; ".join(t.failures)), flush=True)
                results[name] = "fail"
            elif t.skipped is not None:
                print("SKIP %s (%.1fs): %s" % (name, dt, t.skipped), flush=True)
                results[name] = "skip"
            else:
                print("PASS %s (%.1fs)" % (name, dt), flush=True)
                results[name] = "pass"

    threads = [threading.Thread(target=run, args=nf, daemon=True, name=nf[0]) for nf in tests]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.0, limit_s - (time.monotonic() - t0)))
    for th in threads:
        if th.is_alive():
            print("FAIL %s: still running after %d s" % (th.name, limit_s), flush=True)
            results[th.name] = "fail"
    h._run_cleanups()
    passed = sum(1 for v in results.values() if v == "pass")
    failed = sum(1 for v in results.values() if v == "fail")
    skipped = sum(1 for v in results.values() if v == "skip")
    print("%d passed, %d failed, %d skipped (in parallel, %.1fs)"
          % (passed, failed, skipped, time.monotonic() - t0), flush=True)
    if failed or not (passed + failed + skipped):
        sys.exit(1)
    sys.exit(h.SKIP_EXIT if skipped else 0)
