"""Helpers of the term-scoped delivery tests (issue 12; DESIGN.md "Term-scoped,
lease-bounded delivery"): an HTTP receiver that records the epoch of every
request in arrival order and flags stale ones, /metrics and /status scraping,
replicas with their own metrics port, a leader pauser (SIGSTOP / SIGCONT),
a baton whose stdout is a FIFO nobody reads. Stdlib only.

    rx = EpochReceiver(delay_s=0.04, key=lambda env: env["payload"])
    rep = Replica(t, "r1", redis.port, sinks, {"ep.cfg": ...}, lease=...)
    pauser = LeaderPauser(reps, "ep", every_s=3.0, pause_s=2.0).start()
    ...
    rx.summary()  -> dict(requests=, stale=, duplicates=, ...)

Stale, as the receiver sees it: a request whose X-Baton-Epoch is lower than
the highest epoch the receiver had already accepted (answered 2xx) when the
request arrived ("stale"), or, stricter, lower than the highest epoch any
earlier request carried ("stale_seen": what a receiver that fences at
arrival would reject).
"""

import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import harness as h


# --------------------------------------------------------------------------
# /metrics and /status

def scrape(port, timeout=2.0):
    """{series: value} from a replica's /metrics, or None when it does not
    answer (stopped, gone)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        c.close()
    except (OSError, http.client.HTTPException):
        return None
    if r.status != 200:
        return None
    out = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        except ValueError:
            continue
    return out


def _labels(series):
    """'name{a="x",b="y"}' -> ('name', {'a': 'x', 'b': 'y'})."""
    if "{" not in series:
        return series, {}
    name, rest = series.split("{", 1)
    rest = rest.rstrip("}")
    labels = {}
    for part in rest.split('",'):
        if "=" not in part:
            continue
        k, v = part.split("=", 1)
        labels[k.strip()] = v.strip().strip('"')
    return name, labels


def drops(m, endpoint=None):
    """{reason: count} of baton_messages_dropped_total (one endpoint, or
    summed over all of them)."""
    out = {}
    for series, v in (m or {}).items():
        name, lab = _labels(series)
        if name != "baton_messages_dropped_total":
            continue
        if endpoint is not None and lab.get("endpoint") != endpoint:
            continue
        r = lab.get("reason", "?")
        out[r] = out.get(r, 0) + int(v)
    return out


def metric(m, name, endpoint=None):
    """Sum of every series of metric name (optionally of one endpoint)."""
    total = 0
    found = False
    for series, v in (m or {}).items():
        n, lab = _labels(series)
        if n != name:
            continue
        if endpoint is not None and lab.get("endpoint") != endpoint:
            continue
        total += v
        found = True
    return int(total) if found else None


status = h.http_status


def counters(port, endpoint):
    """An endpoint's message counters from a replica's /metrics: received,
    forwarded, dropped ({reason: n}), returned, queued; None when it does not
    answer."""
    m = scrape(port)
    if not m or metric(m, "baton_messages_received_total", endpoint) is None:
        return None
    return {"received": metric(m, "baton_messages_received_total", endpoint),
            "forwarded": metric(m, "baton_messages_forwarded_total", endpoint) or 0,
            "dropped": drops(m, endpoint),
            "returned": metric(m, "baton_messages_returned_total", endpoint) or 0,
            "queued": metric(m, "baton_queue_depth", endpoint) or 0}


def fmt_drops(d):
    return ",".join("%s:%d" % kv for kv in sorted(d.items()) if kv[1]) or "none"


# --------------------------------------------------------------------------
# Replicas

class Replica:
    """A baton process (harness.Baton) with its metrics listener on its own
    port. main_extra: more text for the main config (shutdown section...)."""

    def __init__(self, t, name, redis_port, sinks, endpoints, lease=None, main_extra="",
                 log_level="info", baton_cls=None, start=True):
        self.mport = h.free_port()
        # a locker command timeout short enough for a 1 s lease (a renewal
        # that times out must leave time to demote before the key expires)
        locker = ('locker = { type = "redis"; host = "127.0.0.1"; port = %d; '
                  'connect_timeout_ms = 300; command_timeout_ms = 300; };\n' % redis_port
                  if redis_port is not None else "")
        main = locker + h.main_cfg(redis_port=None, lease=lease, log_level=log_level, sinks=sinks,
                                   extra='metrics = { listen = "127.0.0.1:%d"; };\n%s'
                                   % (self.mport, main_extra))
        if baton_cls is None:
            self.b = t.baton(main, endpoints, name=name, start=start)
        else:
            self.b = baton_cls(t.workdir, main, endpoints, name=name, start=start)
            t.batons.append(self.b)
            t.cleanup(self.b.kill)
        self.paused = False

    @property
    def name(self):
        return self.b.name

    def metrics(self):
        return scrape(self.mport)

    def endpoint(self, ep):
        st = status(self.mport)
        for e in (st or {}).get("endpoints", []):
            if e.get("name") == ep:
                return e
        return None

    def role(self, ep):
        e = self.endpoint(ep)
        return e.get("role") if e else None

    def stop(self):
        if self.b.alive():
            self.paused = False
            self.b.signal(signal.SIGSTOP)
            self.paused = True

    def cont(self):
        if self.b.alive():
            self.b.signal(signal.SIGCONT)
        self.paused = False


def leader(reps, ep):
    """The one running (not paused) replica whose /status says leader for
    ep, or None (none, or more than one)."""
    ls = [r for r in reps if r.b.alive() and not r.paused and r.role(ep) == "leader"]
    return ls[0] if len(ls) == 1 else None


def wait_leader(reps, ep, timeout=15):
    return h.wait_until(lambda: leader(reps, ep), timeout, 0.05)


class LeaderPauser(threading.Thread):
    """Every every_s seconds: SIGSTOP the current leader of ep for pause_s
    seconds, then SIGCONT. Records (t_stop_mono, t_cont_mono, name, epoch)."""

    def __init__(self, reps, ep, every_s=3.0, pause_s=2.0):
        super().__init__(daemon=True)
        self.reps, self.ep, self.every_s, self.pause_s = reps, ep, every_s, pause_s
        self.events = []
        self.misses = 0
        self._halt = threading.Event()
        h._cleanups.append(self.halt)

    def run(self):
        while not self._halt.wait(self.every_s):
            r = leader(self.reps, self.ep)
            if r is None:
                self.misses += 1
                continue
            e = r.endpoint(self.ep) or {}
            t0 = time.monotonic()
            r.stop()
            try:
                self._halt.wait(self.pause_s)
            finally:
                r.cont()
            self.events.append((t0, time.monotonic(), r.name, e.get("epoch")))

    def start(self):
        super().start()
        return self

    def halt(self):
        self._halt.set()
        if self.is_alive():
            self.join(10)
        for r in self.reps:
            if r.paused:
                r.cont()


# --------------------------------------------------------------------------
# The recording HTTP receiver

class Req:
    __slots__ = ("idx", "t_arrive", "t_done", "epoch", "body_epochs", "envs", "status",
                 "stale", "stale_seen", "stale_ms", "peer")

    def __repr__(self):
        return ("Req(#%d epoch=%s status=%s stale=%s stale_ms=%s keys=%d)"
                % (self.idx, self.epoch, self.status, self.stale, self.stale_ms, len(self.envs)))


class EpochReceiver:
    """Threaded HTTP server on 127.0.0.1 recording every POST in arrival
    order: (arrival index, X-Baton-Epoch, envelopes, status).

    delay_s     time the receiver takes per request (before answering)
    status_fn   fn(monotonic now) -> HTTP status (default 200)
    stall()     from now on requests are held until release() (or close)
    key         fn(envelope) -> the message's identity (payload by default)
    """

    def __init__(self, delay_s=0.0, status_fn=None, key=None):
        self.delay_s = delay_s
        self.status_fn = status_fn or (lambda now: 200)
        self.key = key or (lambda env: env.get("payload"))
        self.reqs = []
        self.lock = threading.Lock()
        self.max_seen = 0          # highest epoch of any request that arrived
        self.max_accepted = 0      # highest epoch answered 2xx
        self.first_arrival = {}    # epoch -> monotonic time of its first request
        self._stalled = False
        self._release = threading.Event()
        self._closed = False
        recv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                recv._handle(self, body)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, OSError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d/ingest" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        h._cleanups.append(self.close)

    def _handle(self, handler, body):
        now = time.monotonic()
        envs = []
        for line in body.split(b"\n"):
            if line.strip():
                try:
                    envs.append(json.loads(line))
                except ValueError:
                    envs.append({"_unparsable": line[:80].decode(errors="replace")})
        try:
            epoch = int(handler.headers.get("X-Baton-Epoch", ""))
        except ValueError:
            epoch = None
        r = Req()
        r.t_arrive = now
        r.epoch = epoch
        r.body_epochs = [e.get("epoch") for e in envs]
        r.envs = envs
        r.status = None
        r.t_done = None
        r.peer = handler.client_address[1]
        with self.lock:
            r.idx = len(self.reqs)
            e = epoch if epoch is not None else 0
            r.stale = e < self.max_accepted
            r.stale_seen = e < self.max_seen
            r.stale_ms = None
            if r.stale_seen:
                newer = [t for ep, t in self.first_arrival.items() if ep > e]
                r.stale_ms = int((now - min(newer)) * 1000) if newer else None
            if e > self.max_seen:
                self.max_seen = e
            self.first_arrival.setdefault(e, now)
            self.reqs.append(r)
            stalled = self._stalled
        if stalled:
            while not self._release.wait(0.2):
                if self._closed:
                    break
        elif self.delay_s:
            time.sleep(self.delay_s)
        status = self.status_fn(time.monotonic())
        with self.lock:
            r.status = status
            r.t_done = time.monotonic()
            if 200 <= status < 300 and epoch is not None and epoch > self.max_accepted:
                self.max_accepted = epoch
        try:
            handler.send_response(status)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        except OSError:
            pass

    # stalls (a hung receiver)
    def stall(self):
        with self.lock:
            self._release.clear()
            self._stalled = True

    def release(self):
        with self.lock:
            self._stalled = False
        self._release.set()

    def snapshot(self):
        with self.lock:
            return list(self.reqs)

    def in_flight(self):
        with self.lock:
            return sum(1 for r in self.reqs if r.status is None)

    def accepted_keys(self):
        """Identities of every envelope in a 2xx request (with repeats)."""
        out = []
        for r in self.snapshot():
            if r.status is not None and 200 <= r.status < 300:
                out.extend(self.key(e) for e in r.envs)
        return out

    def summary(self):
        reqs = self.snapshot()
        ok = [r for r in reqs if r.status is not None and 200 <= r.status < 300]
        keys = [self.key(e) for r in ok for e in r.envs]
        dups = h.duplicates(keys)
        stale = [r for r in reqs if r.stale]
        stale_seen = [r for r in reqs if r.stale_seen]
        mismatch = [r for r in reqs if any(be != r.epoch for be in r.body_epochs)]
        epochs = {}
        for r in reqs:
            epochs[r.epoch] = epochs.get(r.epoch, 0) + 1
        return {
            "requests": len(reqs),
            "accepted_requests": len(ok),
            "accepted_msgs": len(keys),
            "distinct": len(set(keys)),
            "duplicates": sum(n - 1 for n in dups.values()),
            "dup_keys": sorted(dups, key=str)[:10],
            "stale": len(stale),
            "stale_seen": len(stale_seen),
            "stale_max_ms": max([r.stale_ms for r in stale_seen if r.stale_ms is not None],
                                default=0),
            "stale_examples": stale_seen[:5],
            "epoch_mismatch": len(mismatch),
            "epochs": epochs,
        }

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._release.set()
        try:
            self.server.shutdown()
            self.server.server_close()
        except OSError:
            pass


# --------------------------------------------------------------------------
# Redis: wait until exactly one replica is subscribed, recording the probes

def probe_subscribed(port, channel, timeout=15, want=1):
    """PUBLISHes "probe-<n>" on channel until it reaches `want` subscribers.
    Returns [(payload, receivers)] of every probe sent (they count as
    published messages: the leader receives those with receivers >= 1)."""
    c = h.Resp(port)
    sent = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = "probe-%d" % len(sent)
            n = c.cmd("PUBLISH", channel, p)
            sent.append((p, n))
            if n == want:
                return sent
            time.sleep(0.05)
        return sent
    finally:
        c.close()


# --------------------------------------------------------------------------
# A baton whose stdout is a FIFO that nobody reads

class FifoBaton(h.Baton):
    """stdout is the write end of a FIFO whose read end this process keeps
    open but never reads: once the pipe buffer (64 KiB) is full, every write
    would block."""

    def start(self):
        self.fifo = os.path.join(self.dir, "stdout.fifo")
        if not os.path.exists(self.fifo):
            os.mkfifo(self.fifo)
        self.rfd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        wfd = os.open(self.fifo, os.O_WRONLY)
        self.err = open(self.err_path, "ab")
        self.proc = subprocess.Popen([h.BATON_BIN, "-c", self.cfg] + self.args,
                                     stdout=wfd, stderr=self.err, env=self.env,
                                     stdin=subprocess.DEVNULL)
        os.close(wfd)
        self.err.close()
        h._cleanups.append(self._close_reader)
        return self

    def _close_reader(self):
        if getattr(self, "rfd", None) is not None:
            try:
                os.close(self.rfd)
            except OSError:
                pass
            self.rfd = None


def term_and_time(baton, limit_s):
    """SIGTERM, then waits up to limit_s seconds. Returns (exit status or
    None when still running, seconds until exit or None). A process still
    running after limit_s is SIGKILLed."""
    t0 = time.monotonic()
    baton.signal(signal.SIGTERM)
    try:
        rc = baton.proc.wait(limit_s)
        return rc, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        baton.kill()
        return None, None


def summary_line(scenario, verdict, **kv):
    """The one summary line of a scenario."""
    print("TERM scenario=%s result=%s %s" % (scenario, verdict,
                                              " ".join("%s=%s" % x for x in kv.items())),
          flush=True)


# --------------------------------------------------------------------------
# Steady-rate publishers for the acked sources

class MqttLinePublisher(threading.Thread):
    """One long-lived `mosquitto_pub -l` (QoS qos) fed "<prefix><seq>" lines
    at rate/s for count messages; sent[seq] = monotonic time written."""

    def __init__(self, port, topic, count, rate, qos=1, prefix="m-"):
        super().__init__(daemon=True)
        self.count, self.rate, self.prefix = count, float(rate), prefix
        self.sent = {}
        self.error = None
        self._halt = threading.Event()
        self.proc = subprocess.Popen(
            ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", topic, "-q", str(qos),
             "-l", "-V", "mqttv5", "-i", "td-pub-%d" % os.getpid()],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        h._cleanups.append(self.halt)

    def run(self):
        t0 = time.monotonic()
        try:
            for i in range(self.count):
                if self._halt.is_set():
                    break
                d = t0 + i / self.rate - time.monotonic()
                if d > 0:
                    time.sleep(d)
                self.proc.stdin.write(("%s%d\n" % (self.prefix, i)).encode())
                self.proc.stdin.flush()
                self.sent[i] = time.monotonic()
        except Exception as e:  # reported by the test
            self.error = e

    def finish(self, timeout=30):
        """Waits for every line to be written, closes stdin and waits for
        mosquitto_pub to have sent everything (it exits at EOF). Returns its
        exit status."""
        self.join(self.count / self.rate + 30)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def halt(self):
        self._halt.set()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class AmqpSteadyPublisher(threading.Thread):
    """Publishes {"seq": i} for i in 0..count-1 at rate/s to exchange with
    publisher confirms (message_id "<prefix>-<i>")."""

    def __init__(self, port, exchange, count, rate, prefix="s"):
        import rabbitmq as rmq
        super().__init__(daemon=True)
        self.c = rmq.Amqp(port)
        self.c.confirm_select()
        self.exchange, self.count, self.rate, self.prefix = exchange, count, rate, prefix
        self.sent = {}
        self.error = None

    def run(self):
        try:
            t0 = time.monotonic()
            batch = max(1, int(self.rate // 50))
            i = 0
            while i < self.count:
                d = t0 + i / float(self.rate) - time.monotonic()
                if d > 0:
                    time.sleep(d)
                items = []
                for j in range(i, min(self.count, i + batch)):
                    self.sent[j] = time.monotonic()
                    items.append((self.exchange, "", json.dumps({"seq": j}).encode(),
                                  {"message_id": "%s-%d" % (self.prefix, j)}))
                self.c.publish_many(items)
                i += len(items)
            self.c.wait_confirms(60)
        except Exception as e:  # reported by the test
            self.error = e
