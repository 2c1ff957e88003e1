"""systemd notifications (issue 20, Type=notify): a real baton process told
to notify a datagram socket this test binds (NOTIFY_SOCKET), as systemd does.
Every datagram is recorded with its sender's pid (SO_PASSCRED: the kernel
stamps the credentials, as systemd's NotifyAccess=main checks them).

  1. ready_status_stopping: redis locker behind a fault proxy that delays
     the lease connection's replies by 500 ms until READY=1 (so starting
     the guards takes that long after the ops listener is bound), an ops
     listener, a redis_psub endpoint and a ticking endpoint into an HTTP
     receiver that hangs. READY=1 arrives once, from baton's pid; when it
     arrives (looked at on the receiving thread) the "started" log line is
     written and /healthz answers; a STATUS=starting... precedes it; its
     STATUS= names the endpoints, the locker and the listener; no
     WATCHDOG=1 when not asked for. SIGTERM: STOPPING=1 (with a STATUS=)
     at once, before the drain (the hung request holds the exit for
     drain_timeout_ms), and exit 0.
  2. watchdog_pings: WATCHDOG_USEC=200000, abstract socket ("@..."), no
     locker, no listener: WATCHDOG=1 every ~100 ms (>= 5 within 1.5 s), none
     after STOPPING=1.
  3. watchdog_other_pid: WATCHDOG_PID names another process (the variables
     were inherited): READY=1 but no WATCHDOG=1.
  4. no_notify_socket: NOTIFY_SOCKET unset (WATCHDOG_USEC set anyway): baton
     runs, serves /healthz, exits 0 on SIGTERM and logs nothing about
     notifications.
"""
import os
import signal
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import faultproxy  # noqa: E402

ORDER = ["test_ready_status_stopping", "test_watchdog_pings", "test_watchdog_other_pid",
         "test_no_notify_socket"]

TICK = 'name = "tick"; type = "schedule"; sink = "%s"; cron = "* * * * * *";\n'


class NotifyListener:
    """An AF_UNIX datagram socket standing in for systemd's notify socket.
    path: a file path, or None for an abstract address. Each received
    datagram: (monotonic time, sender pid or None, {key: value}, raw text).
    on_message(fields), if given, runs on the receiving thread as each
    datagram arrives (to look at the world at that very moment)."""

    def __init__(self, t, path=None, on_message=None):
        self.on_message = on_message
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        if path is None:
            name = "baton-notify-%d-%d" % (os.getpid(), time.monotonic_ns())
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.sock.bind(path)
            self.address = path
        self.sock.settimeout(0.1)
        self.messages = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        t.cleanup(self.close)

    def _run(self):
        creds = struct.calcsize("3i")
        while not self.stop:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(4096, socket.CMSG_SPACE(creds))
            except socket.timeout:
                continue
            except OSError:
                return
            now = time.monotonic()
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", cdata[:creds])[0]
            text = data.decode(errors="replace")
            fields = {}
            for line in text.split("\n"):
                if "=" in line:
                    k, v = line.split("=", 1)
                    fields[k] = v
            with self.lock:
                self.messages.append((now, pid, fields, text))
            if self.on_message:
                self.on_message(fields)

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()

    def with_key(self, key, value=None):
        with self.lock:
            return [m for m in self.messages
                    if key in m[2] and (value is None or m[2][key] == value)]

    def first(self, key, value="1", timeout=15):
        got = h.wait_until(lambda: self.with_key(key, value), timeout)
        return got[0] if got else None


def healthz(port, timeout=1.0):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=timeout) as r:
            return r.status
    except (OSError, urllib.error.URLError):
        return None


def test_ready_status_stopping(t):
    redis = t.redis()
    recv = h.HttpReceiver()
    recv.stall_s = 30  # every request hangs: the drain runs to its deadline
    t.cleanup(recv.close)
    mport = h.free_port()
    drain_ms = 1500
    sinks = '{ name = "hook"; type = "http"; url = "%s"; batch_max = 1; }' % recv.url
    proxy = faultproxy.start(t, redis.port)
    proxy.set_delay(500, names={"baton-lease"})  # the guards start slowly
    main = h.main_cfg(proxy.port, sinks=sinks,
                      extra='metrics = { listen = "127.0.0.1:%d"; };\n'
                            'shutdown = { drain_timeout_ms = %d; };' % (mport, drain_ms))
    err_log = os.path.join(t.workdir, "baton1", "err.log")  # harness.Baton's layout
    at_ready = {}

    def on_message(fields):
        if fields.get("READY") == "1" and not at_ready:
            # at once, on the receiving thread: no retry, no wait for the port;
            # published whole, so the main thread never sees half of it
            seen = {"healthz": healthz(mport)}
            try:
                with open(err_log, errors="replace") as f:
                    seen["log"] = f.read()
            except OSError:
                seen["log"] = ""
            at_ready.update(seen)

    n = NotifyListener(t, os.path.join(t.workdir, "notify.sock"), on_message)
    psub = ('name = "%s"; type = "redis_psub"; sink = "hook"; host = "127.0.0.1"; port = %d; '
            'patterns = [ "%s.*" ];\n')
    b = t.baton(main, {"orders.cfg": psub % ("orders", redis.port, "orders"),
                       "tick.cfg": TICK % "hook"}, name="baton1",
                env={"NOTIFY_SOCKET": n.address})
    t_start = time.monotonic()
    ready = n.first("READY")
    proxy.resume()
    t.require(ready is not None, "READY=1 within 15 s")
    h.log("READY=1 %.0f ms after the process started" % ((ready[0] - t_start) * 1000))
    h.wait_until(lambda: at_ready, 5)
    t.check(at_ready.get("healthz") == 200,
            "/healthz answers when READY=1 arrives (got %r)" % at_ready.get("healthz"))
    t.check(" started (pid" in at_ready.get("log", ""),
            "the 'started' log line (endpoints created and started) precedes READY=1")
    t.check(ready[1] == b.pid, "READY=1 sent by baton's main pid %d (got %r)" % (b.pid, ready[1]))
    starting = [m for m in n.with_key("STATUS") if "READY" not in m[2]]
    t.check(starting and starting[0][0] <= ready[0] and "starting" in starting[0][2]["STATUS"],
            "a STATUS=starting... line precedes READY=1 (got %r)" % [m[3] for m in starting])
    status = ready[2].get("STATUS", "")
    h.log("STATUS at READY:", status)
    t.check("2 endpoints" in status, "STATUS counts the endpoints: %r" % status)
    t.check("locker redis 127.0.0.1:%d" % proxy.port in status, "STATUS names the locker: %r" % status)
    t.check("127.0.0.1:%d" % mport in status, "STATUS names the ops listener: %r" % status)

    time.sleep(1.5)  # a tick is sent and hangs in the receiver
    t.check(len(n.with_key("READY")) == 1, "READY=1 sent once")
    t.check(not n.with_key("WATCHDOG"), "no WATCHDOG=1 without WATCHDOG_USEC")
    t.check(not n.with_key("STOPPING"), "no STOPPING=1 before SIGTERM")

    t_term = time.monotonic()
    b.signal(signal.SIGTERM)
    stopping = n.first("STOPPING", timeout=5)
    rc = b.wait(drain_ms / 1000 + 10)
    t_exit = time.monotonic()
    t.require(stopping is not None, "STOPPING=1 after SIGTERM")
    h.log("STOPPING=1 %.0f ms after SIGTERM, exit %.0f ms after SIGTERM; STATUS: %s"
          % ((stopping[0] - t_term) * 1000, (t_exit - t_term) * 1000, stopping[2].get("STATUS")))
    t.check(rc == 0, "exit 0 after SIGTERM (got %r)" % rc)
    t.check(stopping[1] == b.pid, "STOPPING=1 sent by baton's pid (got %r)" % stopping[1])
    t.check(stopping[0] - t_term < 0.5, "STOPPING=1 at once (%.0f ms)" % ((stopping[0] - t_term) * 1000))
    t.check(t_exit - stopping[0] >= drain_ms / 1000 * 0.8,
            "STOPPING=1 precedes the drain: exit %.0f ms after it (drain %d ms)"
            % ((t_exit - stopping[0]) * 1000, drain_ms))
    t.check("stopping" in stopping[2].get("STATUS", ""), "STATUS with STOPPING=1")
    t.check(len(n.with_key("READY")) == 1, "no second READY=1")


def test_watchdog_pings(t):
    n = NotifyListener(t)  # abstract address "@..."
    b = t.baton(h.main_cfg(None), {"tick.cfg": TICK % "out"},
                env={"NOTIFY_SOCKET": n.address, "WATCHDOG_USEC": "200000"})
    ready = n.first("READY")
    t.require(ready is not None, "READY=1 on an abstract socket")
    status = ready[2].get("STATUS", "")
    t.check("no locker" in status and "ops listener off" in status,
            "STATUS says single-process mode and no listener: %r" % status)
    t0 = time.monotonic()
    time.sleep(1.5)
    pings = [m for m in n.with_key("WATCHDOG", "1") if t0 <= m[0] <= t0 + 1.5]
    times = [m[0] for m in pings]
    gaps = [round((b2 - a) * 1000) for a, b2 in zip(times, times[1:])]
    h.log("%d WATCHDOG=1 in 1.5 s, gaps (ms): %s" % (len(pings), gaps))
    t.check(len(pings) >= 5, ">= 5 WATCHDOG=1 within 1.5 s at WATCHDOG_USEC=200000 (got %d)" % len(pings))
    t.check(all(m[1] == b.pid for m in pings), "pings come from baton's pid")
    if gaps:
        gaps.sort()
        median = gaps[len(gaps) // 2]
        t.check(60 <= median <= 160, "pings every half timeout (~100 ms), median gap %d ms" % median)
    t.check("systemd watchdog 200 ms" in b.stderr_text(), "the watchdog period is logged")

    rc = b.term()
    t.check(rc == 0, "exit 0 (got %r)" % rc)
    stopping = n.first("STOPPING", timeout=2)
    t.require(stopping is not None, "STOPPING=1 after SIGTERM")
    late = [m for m in n.with_key("WATCHDOG") if m[0] > stopping[0]]
    t.check(not late, "no WATCHDOG=1 after STOPPING=1 (got %d)" % len(late))


def test_watchdog_other_pid(t):
    n = NotifyListener(t, os.path.join(t.workdir, "notify.sock"))
    b = t.baton(h.main_cfg(None), {"tick.cfg": TICK % "out"},
                env={"NOTIFY_SOCKET": n.address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
    t.require(n.first("READY") is not None, "READY=1")
    time.sleep(1.0)
    t.check(not n.with_key("WATCHDOG"), "no WATCHDOG=1 when WATCHDOG_PID is another process")
    t.check(b.term() == 0, "exit 0")
    t.check(n.first("STOPPING", timeout=2) is not None, "STOPPING=1")


def test_no_notify_socket(t):
    n = NotifyListener(t, os.path.join(t.workdir, "notify.sock"))  # bound, never named
    mport = h.free_port()
    b = t.baton(h.main_cfg(None, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport),
                {"tick.cfg": TICK % "out"}, env={"WATCHDOG_USEC": "200000"}, start=False)
    b.env.pop("NOTIFY_SOCKET", None)  # in case this test itself runs under systemd
    b.start()
    t.require(h.wait_until(lambda: healthz(mport, 0.3) == 200, 10), "/healthz answers")
    time.sleep(0.5)
    t.check(b.alive(), "runs")
    t.check(b.term() == 0, "exit 0 on SIGTERM")
    t.check(not n.messages, "nothing received")
    text = b.stderr_text()
    t.check("notify" not in text and "watchdog" not in text,
            "no notification log lines without NOTIFY_SOCKET")


if __name__ == "__main__":
    h.main(globals())
