"""Integration test harness for baton: real brokers and real baton processes
on 127.0.0.1, in temporary directories, on free ports, always cleaned up.

Stdlib only. A test file looks like:

    import sys, os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
    import harness as h

    def test_something(t):          # t is a harness.TestContext
        redis = t.redis()           # started now, stopped after the test
        b = t.baton(main_cfg(...), {"ep.cfg": "..."})
        ...
        t.check(cond, "message")     # records a failure, keeps going
        t.require(cond, "message")   # records a failure and stops the test
        t.skip("why")                # the test cannot run here: stops it, SKIP

    if __name__ == "__main__":
        h.main(globals())

h.main runs every test_* function (or those named on the command line),
prints one line per test and the closing line "N passed, N failed, N
skipped", and exits 1 on any failure or when nothing ran, else SKIP_EXIT (77,
ctest's SKIP_RETURN_CODE for every Python test) when any test was skipped, so
a file with a skipped test shows as skipped in ctest, never as passed.
"""

import atexit
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import http.client
import http.server
import urllib.error
import urllib.request

BATON_BIN = os.environ.get("BATON_BIN", "")
SOURCE_DIR = os.environ.get(
    "BATON_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
BUILD_DIR = os.environ.get("BATON_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
if not BATON_BIN:
    BATON_BIN = os.path.join(BUILD_DIR, "baton")

_cleanups = []


def _run_cleanups():
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception:  # cleanup must go on
            traceback.print_exc()


atexit.register(_run_cleanups)


def _on_signal(signum, frame):
    _run_cleanups()
    sys.exit(128 + signum)


for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def log(*args):
    print("   ", *args, flush=True)


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_EPHEMERAL_LOW = _ephemeral_low()
# Test ports come from just below the kernel's ephemeral range: bind(0)
# hands out ports from that range, and so does every outgoing connect(), so
# a port read back from bind(0) can be taken as the local end of a
# connection (or handed out again) before the server meant for it binds.
_PORT_LO = max(1024, _EPHEMERAL_LOW - 12000)
_PORT_HI = max(_PORT_LO + 1000, _EPHEMERAL_LOW)
_handed_out = set()
_port_rng = __import__("random").Random(os.getpid() ^ time.time_ns())
_port_lock = threading.Lock()


def _bindable(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))  # no SO_REUSEADDR: TIME_WAIT counts as taken
        except OSError:
            return False
    return not port_open(port)


def free_port():
    """A free TCP port on 127.0.0.1 that this process has not handed out
    before, outside the ephemeral range (see _PORT_LO)."""
    with _port_lock:
        for _ in range(1000):
            port = _port_rng.randrange(_PORT_LO, _PORT_HI)
            if port in _handed_out or not _bindable(port):
                continue
            _handed_out.add(port)
            return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        _handed_out.add(port)
        return port


def wait_until(pred, timeout, interval=0.02, what="condition"):
    """Polls pred() until true or timeout seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def log_time(text, needle):
    """The timestamp (seconds) of the first baton log line containing needle,
    or None."""
    import datetime
    for line in text.splitlines():
        if needle in line:
            ts = line.split(" ", 1)[0].rstrip("Z")
            return datetime.datetime.fromisoformat(ts).timestamp()
    return None


def wait_subscribers(t, port, n, timeout=15, channel="chan.probe"):
    """Requires n subscribers of channel on the Redis at port within timeout
    (PUBLISH answers how many received it)."""
    c = Resp(port)
    try:
        ok = wait_until(lambda: c.cmd("PUBLISH", channel, "probe") == n, timeout, 0.05)
    finally:
        c.close()
    t.require(ok, "expected %d subscribers within %ds" % (n, timeout))


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def stop_process(proc, timeout=5):
    """SIGTERM, wait up to timeout seconds, then SIGKILL. None-safe."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def mktemp(prefix="baton-it-"):
    d = tempfile.mkdtemp(prefix=prefix)
    _cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


_shared = {}


def shared(key, start):
    """A test file's one instance of something slow to start (a broker):
    start() on first use, the same object afterwards; it stops at exit (its
    own cleanups)."""
    if key not in _shared:
        _shared[key] = start()
    return _shared[key]


# --------------------------------------------------------------------------
# Minimal RESP client (enough for tests: commands, pub/sub publishing)

class RedisError(Exception):
    pass


class Resp:
    def __init__(self, port, host="127.0.0.1", timeout=5.0, password=None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        if password:
            self.cmd("AUTH", password)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RedisError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RedisError("bad reply type %r" % t)

    def cmd(self, *args):
        self.sock.sendall(self.encode(*args))
        return self.read()

    def pipeline(self, commands):
        """Sends many commands at once, returns the list of replies."""
        self.sock.sendall(b"".join(self.encode(*c) for c in commands))
        return [self.read() for _ in commands]


# --------------------------------------------------------------------------
# Brokers

def ping_ok(connect):
    """True when connect() gives a Redis connection that answers PING (any
    failure: False), for readiness probes."""
    try:
        c = connect()
        try:
            return c.cmd("PING") == "PONG"
        finally:
            c.close()
    except (OSError, RedisError, ConnectionError):
        return False


class RedisServer:
    def __init__(self, port=None, extra_args=()):
        self.port = port or free_port()
        self.dir = mktemp("baton-redis-")
        self.extra = list(extra_args)
        self.proc = None
        _cleanups.append(self.stop)
        self.start()

    what = "redis-server"

    def _listen_args(self):
        return ["--port", str(self.port)]

    def start(self):
        args = (["redis-server"] + self._listen_args() + ["--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--logfile", os.path.join(self.dir, "redis.log")] + self.extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        ok = wait_until(self._ping, 10, 0.05)
        if not ok:
            raise RuntimeError("%s did not start on port %d" % (self.what, self.port))

    def _connect(self, timeout):
        """A plain connection for the readiness probe (subclasses: password, TLS)."""
        return Resp(self.port, timeout=timeout)

    def _ping(self):
        return ping_ok(lambda: self._connect(0.5))

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self, down_s=0.0):
        self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def client(self, **kw):
        c = Resp(self.port, **kw)
        _cleanups.append(c.close)
        return c


class TlsResp(Resp):
    """Resp over TLS (tls: a tlsfiles.make_tls_files dict: its CA; its client
    certificate too)."""

    def __init__(self, port, tls, timeout=5.0):
        ctx = ssl.create_default_context(cafile=tls["ca"])
        ctx.load_cert_chain(tls["client_cert"], tls["client_key"])
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buf = b""


class TlsRedisServer(RedisServer):
    """redis-server with only a TLS port (self.port): tls is a
    tlsfiles.make_tls_files dict; auth_clients: a client certificate is
    required."""

    what = "redis-server (TLS)"

    def __init__(self, tls, auth_clients=False, port=None):
        self.tls = tls
        self.auth_clients = auth_clients
        super().__init__(port=port)

    def _listen_args(self):
        t = self.tls
        return ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", t["server_cert"],
                "--tls-key-file", t["server_key"], "--tls-ca-cert-file", t["ca"],
                "--tls-auth-clients", "yes" if self.auth_clients else "no"]

    def _connect(self, timeout):
        return TlsResp(self.port, self.tls, timeout=timeout)

    def client(self, timeout=5.0):
        return TlsResp(self.port, self.tls, timeout=timeout)


# --------------------------------------------------------------------------
# baton processes

class ChildProcess:
    """An object that owns one subprocess.Popen, self.proc (None until it is
    first started): a baton process (Baton), an etcd member (etcd.Member)."""

    proc = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self):
        """SIGKILL (a stopped process is continued first) and reap; a no-op
        when it is not running."""
        if self.alive():
            try:
                self.proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.kill()
            self.proc.wait()


class Baton(ChildProcess):
    """One baton process. stdout (the stdout sink) goes to out.jsonl, stderr
    (logs) to err.log, both in the process's own directory."""

    def __init__(self, workdir, main_cfg, endpoint_cfgs, name="baton", env=None,
                 args=(), start=True):
        self.name = name
        self.dir = os.path.join(workdir, name)
        os.makedirs(os.path.join(self.dir, "endpoints.d"), exist_ok=True)
        self.cfg = os.path.join(self.dir, "baton.cfg")
        with open(self.cfg, "w") as f:
            f.write(main_cfg)
        for fname, text in endpoint_cfgs.items():
            with open(os.path.join(self.dir, "endpoints.d", fname), "w") as f:
                f.write(text)
        self.out_path = os.path.join(self.dir, "out.jsonl")
        self.err_path = os.path.join(self.dir, "err.log")
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.args = list(args)
        self.proc = None
        self._off = 0
        self._partial = b""
        self.records = []
        _cleanups.append(self.kill)
        if start:
            self.start()

    def start(self):
        self.out = open(self.out_path, "ab")
        self.err = open(self.err_path, "ab")
        self.proc = subprocess.Popen([BATON_BIN, "-c", self.cfg] + self.args,
                                     stdout=self.out, stderr=self.err, env=self.env,
                                     stdin=subprocess.DEVNULL)
        self.out.close()
        self.err.close()
        return self

    def term(self, timeout=15):
        """SIGTERM and wait; returns the exit status."""
        if not self.proc:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("%s did not exit within %ss of SIGTERM" % (self.name, timeout))

    def wait(self, timeout):
        return self.proc.wait(timeout)

    def poll_records(self):
        """Parses new complete lines of out.jsonl; returns the new records.
        Each record is the parsed envelope with "_t" = time.monotonic() when
        this harness first saw it."""
        new = []
        try:
            with open(self.out_path, "rb") as f:
                f.seek(self._off)
                data = f.read()
        except FileNotFoundError:
            return new
        self._off += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        now = time.monotonic()
        for line in lines:
            if not line.strip():
                continue
            rec = json.loads(line)
            rec["_t"] = now
            new.append(rec)
        self.records.extend(new)
        return new

    def stderr_text(self):
        try:
            with open(self.err_path, "r", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


def run_baton(args, timeout=30, env=None):
    """Runs the baton binary to completion (e.g. --check-config); returns
    (exit status, stdout, stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([BATON_BIN] + list(args), capture_output=True, text=True,
                       timeout=timeout, env=e, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def http_status(port, timeout=1.0):
    """The /status JSON of a replica's metrics listener, or None."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", "/status")
        r = c.getresponse()
        body = r.read()
        c.close()
        return json.loads(body) if r.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None


def http_get(port, path, timeout=1.0):
    """GET http://127.0.0.1:port<path>: (HTTP status, body text), or (None, "")
    when there was no answer in time or the status was not 2xx."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except OSError:
        return None, ""


def readyz(port, timeout=2.0):
    """A replica's /readyz as (HTTP status, body), 503 included; (None, "")
    when it does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def metrics(port, timeout=2.0):
    """A replica's /metrics as {series: value}; {} when it does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=timeout) as r:
            out = {}
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#"):
                    k, v = line.rsplit(" ", 1)
                    out[k] = float(v)
            return out
    except (OSError, ValueError):
        return {}


def status_endpoints(port, timeout=1.0):
    """{endpoint name: its entry} of a replica's /status, {} when it does not
    answer."""
    return {e["name"]: e for e in (http_status(port, timeout) or {}).get("endpoints", [])}


def main_cfg(redis_port=None, extra="", sinks=None, lease=None, log_level="info"):
    """A main config text. redis_port None = no locker (single-process mode)."""
    parts = []
    if redis_port is not None:
        parts.append('locker = { type = "redis"; host = "127.0.0.1"; port = %d; };' % redis_port)
    if lease:
        parts.append("lease = { %s };" % "; ".join("%s = %s" % kv for kv in lease.items()))
    parts.append("sinks = ( %s );" % (sinks or '{ name = "out"; type = "stdout"; }'))
    parts.append('log = { level = "%s"; };' % log_level)
    parts.append(extra)
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------
# A split brain made on purpose (tests of fencing sinks and receivers)

SPLIT_BRAIN_LEASE = {"ttl_ms": 30000, "renew_ms": 10000, "retry_ms": 100}


def split_brain_pair(t, redis_port, sinks, endpoints):
    """Replicas a (the leader) and b (a standby) of the same config, with a
    long lease (SPLIT_BRAIN_LEASE: a would not find out by itself before its
    next renewal, up to 10 s) and a metrics listener each. Returns
    (a, b, {"a": metrics port, "b": ...})."""
    ports, reps = {}, {}
    for name in ("a", "b"):
        ports[name] = free_port()
        main = main_cfg(redis_port, sinks=sinks, lease=SPLIT_BRAIN_LEASE,
                        extra='metrics = { listen = "127.0.0.1:%d"; };' % ports[name])
        reps[name] = t.baton(main, endpoints, name=name)
        if name == "a":
            t.require(wait_until(lambda: "consuming as leader" in reps["a"].stderr_text(), 10), "a leads")
    a, b = reps["a"], reps["b"]
    t.require(wait_until(lambda: "competing for the lease" in b.stderr_text(), 10), "b is a standby")
    return a, b, ports


def split_brain(t, redis, a, b, pub, fenced_needle, key="baton:active:redis_psub:orders"):
    """While a leads and delivers: deletes the lease key by hand and
    announces its release, so b acquires a newer epoch at once while a still
    believes it leads; waits for b to lead, for a to log fenced_needle and to
    stop consuming, then stops pub. Returns the log times (s) of the
    deletion, b leading, a fenced and a stopped: {"del", "b", "fenced",
    "stop"}.

    a's renewals fall on a grid of renew_ms on the boot clock
    (active_guard.c next_renewal): one made just after the deletion would
    end a's term by itself (held with another token) before the sink or
    receiver could fence it. The deletion is made well away from the grid
    instants."""
    import datetime
    renew_ms = SPLIT_BRAIN_LEASE["renew_ms"]
    while not 2000 <= (time.clock_gettime(time.CLOCK_BOOTTIME) * 1000) % renew_ms <= renew_ms - 4000:
        time.sleep(0.05)
    c = redis.client()
    t.require(c.cmd("EXISTS", key) == 1, "the lease key %s exists" % key)
    c.cmd("DEL", key)
    c.cmd("PUBLISH", key + ":released", "released")
    t_del = time.time()
    log("lease key deleted at %s" % datetime.datetime.utcfromtimestamp(t_del).isoformat())
    t.require(wait_until(lambda: "consuming as leader" in b.stderr_text(), 10), "b leads")
    t.require(wait_until(lambda: fenced_needle in a.stderr_text(), 10),
              "a is told it is fenced (%r)" % fenced_needle)
    t.require(wait_until(lambda: "stopped consuming" in a.stderr_text(), 10), "a stops")
    time.sleep(1.0)
    pub.stop()
    time.sleep(1.0)
    ea, eb = a.stderr_text(), b.stderr_text()
    return {"del": t_del, "b": log_time(eb, "consuming as leader"),
            "fenced": log_time(ea, fenced_needle), "stop": log_time(ea, "stopped consuming")}


# --------------------------------------------------------------------------
# A recording HTTP receiver (the http sink's peer)

class HttpReceiver:
    """Records POST bodies. fail_first: the first N requests get fail_status.
    stall_s: sleep before answering. judge: None, or a function of the body
    (bytes) returning the status to answer, or None for the usual one. Each
    record: (monotonic time, path, headers dict, body bytes, status)."""

    def __init__(self, fail_first=0, fail_status=503):
        self.requests = []
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.stall_s = 0.0
        self.down = False
        self.judge = None
        self.lock = threading.Lock()
        recv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                if recv.stall_s:
                    time.sleep(recv.stall_s)
                with recv.lock:
                    status = 200
                    if recv.down:
                        status = 503
                    elif recv.fail_first > 0:
                        recv.fail_first -= 1
                        status = recv.fail_status
                    elif recv.judge is not None:
                        status = recv.judge(body) or 200
                    recv.requests.append((time.monotonic(), self.path,
                                          dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                # a client closing a kept-alive connection is not an error
                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d/ingest" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        _cleanups.append(self.close)

    def accepted(self):
        """Envelopes accepted (status 200), parsed from JSON / NDJSON bodies."""
        out = []
        with self.lock:
            reqs = list(self.requests)
        for (_t, _p, _h, body, status) in reqs:
            if status != 200:
                continue
            for line in body.split(b"\n"):
                if line.strip():
                    out.append(json.loads(line))
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------
# Assertions over recorded envelopes

def payload_bytes(rec):
    p = rec.get("payload")
    if p is None:
        return None
    if rec.get("payload_encoding") == "base64":
        return base64.b64decode(p)
    return p.encode()


def duplicates(keys):
    """Keys that occur more than once, with their counts."""
    seen = {}
    for k in keys:
        seen[k] = seen.get(k, 0) + 1
    return {k: n for k, n in seen.items() if n > 1}


# --------------------------------------------------------------------------
# Test runner

class TestFailure(Exception):
    pass


class TestSkipped(Exception):
    pass


# Exit status of a test file with a skipped test (and no failure): ctest's
# SKIP_RETURN_CODE for the Python tests (tests/CMakeLists.txt).
SKIP_EXIT = 77


class TestContext:
    def __init__(self, name):
        self.name = name
        self.failures = []
        self.skipped = None
        self.workdir = mktemp("baton-%s-" % name)
        self._local_cleanups = []
        self.batons = []

    def check(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            log("CHECK FAILED:", msg)
        return cond

    def require(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            raise TestFailure(msg)

    def skip(self, why):
        """Stops the test as skipped: it could not run here (a missing tool,
        no root). Reported as SKIP and by the file's exit status, never as a
        pass."""
        self.skipped = why
        log("SKIP:", why)
        raise TestSkipped(why)

    def redis(self, **kw):
        r = RedisServer(**kw)
        self._local_cleanups.append(r.stop)
        return r

    def baton(self, main, endpoints, name=None, **kw):
        name = name or "baton%d" % (len(self.batons) + 1)
        b = Baton(self.workdir, main, endpoints, name=name, **kw)
        self.batons.append(b)
        self._local_cleanups.append(b.kill)
        return b

    def cleanup(self, fn):
        self._local_cleanups.append(fn)

    def finish(self):
        while self._local_cleanups:
            fn = self._local_cleanups.pop()
            try:
                fn()
            except Exception:
                traceback.print_exc()

    def dump_logs(self, lines=40):
        for b in self.batons:
            text = b.stderr_text().splitlines()
            log("--- %s stderr (last %d lines) ---" % (b.name, lines))
            for line in text[-lines:]:
                log("  " + line)


def check_sanitizers(t):
    """Sanitizer builds: a report in any baton's log fails the test, even
    when the process was killed or its exit status was not checked."""
    for b in t.batons:
        text = b.stderr_text()
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                       "WARNING: ThreadSanitizer"):
            if marker in text:
                t.failures.append("%s: sanitizer report in its log (%s)" % (b.name, marker))
                break


def main(namespace):
    tests = [(n, f) for n, f in sorted(namespace.items())
             if n.startswith("test_") and callable(f)]
    order = namespace.get("ORDER")
    if order:
        tests.sort(key=lambda nf: order.index(nf[0]) if nf[0] in order else len(order))
    wanted = sys.argv[1:]
    if wanted:
        tests = [(n, f) for n, f in tests if n in wanted]
    if not os.path.exists(BATON_BIN):
        print("baton binary not found at %s (set BATON_BIN)" % BATON_BIN)
        sys.exit(2)
    passed = failed = skipped = 0
    for name, fn in tests:
        t = TestContext(name)
        t0 = time.monotonic()
        print("RUN  %s" % name, flush=True)
        try:
            fn(t)
        except (TestFailure, TestSkipped):
            pass
        except Exception as e:  # an unexpected error fails the test
            traceback.print_exc()
            t.failures.append("exception: %r" % e)
        t.finish()
        check_sanitizers(t)
        if t.failures:
            t.dump_logs()
        dt = time.monotonic() - t0
        if t.failures:
            failed += 1
            print("FAIL %s (%.1fs): %s" % (name, dt, "; ".join(t.failures)), flush=True)
        elif t.skipped is not None:
            skipped += 1
            print("SKIP %s (%.1fs): %s" % (name, dt, t.skipped), flush=True)
        else:
            passed += 1
            print("PASS %s (%.1fs)" % (name, dt), flush=True)
    _run_cleanups()
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped), flush=True)
    if failed or not (passed + failed + skipped):
        sys.exit(1)
    sys.exit(SKIP_EXIT if skipped else 0)
