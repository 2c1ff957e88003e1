"""Hostile Redis servers (issue 39): a fake Redis or sentinel
(tests/support/fake_redis.py) that trickles its answers, declares a huge
bulk string and streams it, or answers the locker's scripts with the wrong
type. Each case asserts a clear logged error naming the server, never
leadership the server did not grant, SIGTERM obeyed within
drain_timeout_ms + 1 s, and RSS below 64 MiB (above the RSS at start under
ASan, whose shadow memory is counted in RSS).

  a. a sentinel answering "$100000\\r\\n" then one byte every 0.3 s (command
     timeout 500 ms: every single read arrives in time, only the answer as a
     whole does not): the error names the sentinel within ~1 s; then the
     same after a leader's lease connection was killed and the sentinel
     turned hostile: SIGTERM exits within drain_timeout_ms + 1 s.
  b. the locker's Redis, and a sentinel, declaring "$3000000000" and streaming
     data: RSS bounded, the connection closed naming max_reply_bytes.
  c. a redis_psub source doing the same inside a pmessage (real Redis as the
     locker): RSS bounded, the error names the limit (64 MiB); its
     max_reply_bytes setting obeyed; a message trickled in is dropped once
     the command timeout has passed since it began.
  d. lease scripts answered with a bulk "1" or ":99999999999999999999"
     where an integer epoch is expected: no promotion, /status not leader,
     a clear error.
  e. a sentinel port "26400abc": --check-config exits 78 naming it.
  TLS: a trickled answer and a huge bulk through the TLS bridge.

Bounded: about a minute.
"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import harness as h  # noqa: E402
from fake_redis import FakeRedis, NO_REPLY  # noqa: E402

MiB = 1024 * 1024
CMD_TIMEOUT = 500
DRAIN = 1000
LEASE = {"ttl_ms": 1500, "renew_ms": 500, "retry_ms": 250}


def asan_build():
    try:
        out = subprocess.run(["ldd", h.BATON_BIN], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "libasan" in out


ASAN = asan_build()


def rss(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def watch_rss(b, seconds):
    """Largest VmRSS of b over the next seconds (sampled every 50 ms)."""
    peak, end = 0, time.monotonic() + seconds
    while time.monotonic() < end and b.alive():
        peak = max(peak, rss(b.pid))
        time.sleep(0.05)
    return peak


def rss_limit(baseline):
    return baseline + 64 * MiB if ASAN else 64 * MiB


def main_text(locker, mport, extra=""):
    return ('locker = { type = "redis"; %s command_timeout_ms = %d; connect_timeout_ms = 500; };\n'
            "lease = { %s };\n"
            "shutdown = { drain_timeout_ms = %d; };\n"
            'sinks = ( { name = "out"; type = "stdout"; } );\n'
            'log = { level = "info"; };\n'
            'metrics = { listen = "127.0.0.1:%d"; };\n%s'
            % (locker, CMD_TIMEOUT, "; ".join("%s = %s" % kv for kv in LEASE.items()), DRAIN,
               mport, extra))


def psub_text(port, extra=""):
    return ('name = "psub"; type = "redis_psub"; sink = "out"; host = "127.0.0.1"; port = %d; '
            'patterns = ["chan.*"]; command_timeout_ms = %d;\n%s\n' % (port, CMD_TIMEOUT, extra))


def sentinel_locker(port):
    return 'sentinels = [ "127.0.0.1:%d" ]; master_name = "m";' % port


def wait_log(b, pattern, timeout):
    rx = re.compile(pattern)
    ok = h.wait_until(lambda: rx.search(b.stderr_text()), timeout, 0.05, pattern)
    m = rx.search(b.stderr_text())
    return m.group(0) if ok and m else None


def term_time(b):
    t0 = time.monotonic()
    b.signal(signal.SIGTERM)
    try:
        b.wait(DRAIN / 1000.0 + 30)
    except subprocess.TimeoutExpired:
        b.kill()
        return None
    return time.monotonic() - t0


# Under ASan, freed memory waits in a quarantine (256 MiB by default) that
# counts in RSS: a server refused every 250 ms (a 1 MiB buffer grown and
# freed each time) would measure ASan's quarantine, not baton.
ENV = {"ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4").lstrip(":")}


def start(t, main, endpoints):
    return t.baton(main, endpoints, env=ENV)


def fake(t, **handlers):
    f = FakeRedis(handlers)
    t.cleanup(f.close)
    return f


# ---- a. trickled answers ---------------------------------------------------------

def trickle(conn, args):
    return conn.trickle(b"$100000\r\n" + b"x" * 100000, interval=0.3, limit_s=60)


def test_a_sentinel_trickles(t):
    sen = fake(t, SENTINEL=trickle)
    src = t.redis()
    mport = h.free_port()
    t0 = time.monotonic()
    b = start(t, main_text(sentinel_locker(sen.port), mport), {"psub.cfg": psub_text(src.port)})
    line = wait_log(b, r".*127\.0\.0\.1:%d: no (complete )?answer within %d ms.*"
                    % (sen.port, CMD_TIMEOUT), 10)
    took = time.monotonic() - t0
    h.log("trickling sentinel: first error after %.2f s: %s" % (took, line))
    t.check(line is not None, "no error naming the sentinel and the deadline")
    t.check(took < 4 * CMD_TIMEOUT / 1000.0 + 1.5,
            "error after %.2f s (bound: a few command timeouts)" % took)
    time.sleep(1.0)
    t.check("promoted" not in b.stderr_text(), "promoted with no master")
    dt = term_time(b)
    h.log("SIGTERM while the sentinel trickles: exit after %s s" % dt)
    t.check(dt is not None and dt <= DRAIN / 1000.0 + 1.0,
            "exit %s s after SIGTERM (bound drain_timeout_ms + 1 s = %.1f s)"
            % (dt, DRAIN / 1000.0 + 1))


def test_a_leader_lease_killed_then_sentinel_trickles(t):
    """The issue's 56 s: a leader through a sentinel, its connections killed
    while the sentinel now trickles; SIGTERM must still be obeyed in time."""
    red = t.redis()
    state = {"hostile": False}

    def sentinel(conn, args):
        if state["hostile"]:
            return trickle(conn, args)
        return [b"127.0.0.1", str(red.port).encode()]

    sen = fake(t, SENTINEL=sentinel)
    mport = h.free_port()
    b = start(t, main_text(sentinel_locker(sen.port), mport), {"psub.cfg": psub_text(red.port)})
    t.require(wait_log(b, r"promoted to leader", 15), "never promoted through the fake sentinel")
    state["hostile"] = True
    sen.kill_connections()  # the watcher reconnects into the trickle
    red.client().cmd("CLIENT", "KILL", "TYPE", "normal")
    line = wait_log(b, r".*127\.0\.0\.1:%d: no (complete )?answer within %d ms.*"
                    % (sen.port, CMD_TIMEOUT), 8)
    h.log("after the kill: %s" % line)
    t.check(line is not None, "no error naming the trickling sentinel")
    time.sleep(0.3)  # SIGTERM in the middle of the next attempt, as likely as not
    dt = term_time(b)
    h.log("leader, lease connection killed, sentinel trickling: exit %s s after SIGTERM" % dt)
    t.check(dt is not None and dt <= DRAIN / 1000.0 + 1.0,
            "exit %s s after SIGTERM (bound %.1f s)" % (dt, DRAIN / 1000.0 + 1))


def test_a_sentinel_names_itself(t):
    """A sentinel naming itself as the master: it answers PING, then ROLE
    hangs (or says "sentinel"). The error says so, not EAGAIN's text."""
    for role_answer, expect in ((lambda conn, args: conn.hold(30), "ROLE: no answer within %d ms"
                                 % CMD_TIMEOUT),
                                (lambda conn, args: [b"sentinel", [b"m"]], "is a sentinel")):
        sen = fake(t, ROLE=role_answer)
        sen.on("SENTINEL", lambda conn, args, p=sen.port: [b"127.0.0.1", str(p).encode()])
        src = t.redis()
        b = start(t, main_text(sentinel_locker(sen.port), h.free_port()),
                    {"psub.cfg": psub_text(src.port)})
        line = wait_log(b, r".*%s.*" % re.escape(expect), 10)
        h.log("sentinel naming itself: %s" % line)
        t.check(line is not None and "temporarily unavailable" not in b.stderr_text(),
                "no %r (or EAGAIN's text) in the log" % expect)
        t.check("promoted" not in b.stderr_text(), "promoted with a sentinel as master")
        b.kill()


# ---- b, c. huge declared bulk strings ---------------------------------------------

def huge(conn, args):
    return conn.endless_bulk(3000000000, limit_s=20)


def huge_case(t, b, mport, what, limit_text, server_port, seconds=3.0):
    # the RSS at start: once the metrics listener answers (the fake streams
    # from the first connection on: refused within a read or two)
    h.wait_until(lambda: h.http_status(mport, 0.3) is not None, 10, 0.05, "metrics listener")
    baseline = rss(b.pid)
    line = wait_log(b, r".*127\.0\.0\.1:%d.*max_reply_bytes.*" % server_port, 10)
    peak = watch_rss(b, seconds)
    h.log("%s: RSS at start %.1f MiB, peak %.1f MiB over %.0f s (limit %.1f MiB%s); error: %s"
          % (what, baseline / MiB, peak / MiB, seconds, rss_limit(baseline) / MiB,
             ", ASan build" if ASAN else "", line))
    t.check(line is not None, "%s: no error naming the server and max_reply_bytes" % what)
    t.check(line is None or "max_reply_bytes (%s)" % limit_text in line, "%s: the error does not name the limit %s"
            % (what, limit_text))
    t.check(b.alive(), "%s: baton died" % what)
    t.check(0 < peak < rss_limit(baseline), "%s: RSS peak %.1f MiB" % (what, peak / MiB))
    dt = term_time(b)
    t.check(dt is not None and dt <= DRAIN / 1000.0 + 1.0, "%s: exit %s s after SIGTERM" % (what, dt))


def test_b_locker_huge_bulk(t):
    lk = fake(t, PING=huge)
    src = t.redis()
    mport = h.free_port()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, mport),
                {"psub.cfg": psub_text(src.port)})
    huge_case(t, b, mport, "locker declaring $3000000000", "1048576", lk.port)
    t.check("promoted" not in b.stderr_text(), "promoted by a locker that never answered")


def test_b_locker_endless_status_line(t):
    """No length to refuse up front: "+xxxx..." without an end of line is
    refused once what is unparsed exceeds the limit."""
    lk = fake(t, PING=lambda conn, args: conn.endless_bulk(None, head=b"+", limit_s=20))
    src = t.redis()
    mport = h.free_port()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, mport),
                {"psub.cfg": psub_text(src.port)})
    huge_case(t, b, mport, "locker sending an endless status line", "1048576", lk.port)


def test_b_sentinel_huge_bulk(t):
    sen = fake(t, SENTINEL=huge)
    src = t.redis()
    mport = h.free_port()
    b = start(t, main_text(sentinel_locker(sen.port), mport),
                {"psub.cfg": psub_text(src.port)})
    huge_case(t, b, mport, "sentinel declaring $3000000000", "1048576", sen.port)


def test_c_psub_source_huge_message(t):
    def psubscribe(conn, args):
        conn.subscribed = True
        conn.send([b"psubscribe", args[1], 1])
        head = b"*4\r\n$8\r\npmessage\r\n$%d\r\n%s\r\n$6\r\nchan.x\r\n" % (len(args[1]), args[1])
        return conn.endless_bulk(3000000000, head=head, limit_s=20)

    srcf = fake(t, PSUBSCRIBE=psubscribe)
    lk = t.redis()
    mport = h.free_port()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, mport),
                {"psub.cfg": psub_text(srcf.port)})
    t.require(wait_log(b, r"promoted to leader", 15), "never promoted (real Redis locker)")
    huge_case(t, b, mport, "redis_psub source pmessage declaring $3000000000", str(64 * MiB), srcf.port)


def test_c_psub_max_reply_bytes_setting(t):
    """max_reply_bytes in the endpoint's file is the limit: a 5000-byte
    message under max_reply_bytes = 4096 is refused naming 4096; a 3000-byte
    one goes through."""
    def psubscribe(conn, args):
        conn.subscribed = True
        conn.send([b"psubscribe", args[1], 1])
        for n in (3000, 5000):
            conn.send([b"pmessage", args[1], b"chan.x", b"p" * n])
        return NO_REPLY

    srcf = fake(t, PSUBSCRIBE=psubscribe)
    lk = t.redis()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, h.free_port()),
              {"psub.cfg": psub_text(srcf.port, "max_reply_bytes = 4096;")})
    line = wait_log(b, r".*127\.0\.0\.1:%d.*over max_reply_bytes \(4096\).*" % srcf.port, 15)
    h.log("redis_psub, max_reply_bytes = 4096: %s" % line)
    t.check(line is not None, "no refusal naming the configured limit")
    t.check(h.wait_until(lambda: any(len(r.get("payload", "")) == 3000
                                     for r in (b.poll_records() or b.records)), 5, 0.1),
            "the 3000-byte message was not forwarded")
    b.term()
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 0, "--check-config with max_reply_bytes = 4096: exit %d %s" % (rc, err[-200:]))
    with open(os.path.join(b.dir, "endpoints.d", "psub.cfg"), "w") as f:
        f.write(psub_text(srcf.port, "max_reply_bytes = -1;"))
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 78 and "max_reply_bytes" in out + err,
            "max_reply_bytes = -1: exit %d %r" % (rc, (out + err)[-200:]))


def test_c_psub_trickled_message(t):
    """A message that has begun must be complete within the command
    timeout: a source trickling one at a byte per 0.2 s is dropped."""
    def psubscribe(conn, args):
        conn.subscribed = True
        conn.send([b"psubscribe", args[1], 1])
        msg = b"*4\r\n$8\r\npmessage\r\n$6\r\nchan.*\r\n$6\r\nchan.x\r\n$100\r\n" + b"t" * 100
        return conn.trickle(msg, interval=0.2, limit_s=30)

    srcf = fake(t, PSUBSCRIBE=psubscribe)
    lk = t.redis()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, h.free_port()),
              {"psub.cfg": psub_text(srcf.port)})
    line = wait_log(b, r".*127\.0\.0\.1:%d.*no complete message within %d ms.*"
                    % (srcf.port, CMD_TIMEOUT), 15)
    h.log("redis_psub, trickled message: %s" % line)
    t.check(line is not None, "the trickled message was not dropped with its deadline")
    dt = term_time(b)
    t.check(dt is not None and dt <= DRAIN / 1000.0 + 1.0, "exit %s s after SIGTERM" % dt)


def test_tls_trickle_and_huge_bulk(t):
    """The same through the TLS bridge (redis/tls.c): the deadline and
    the limit hold on hiredis's side of it, and SIGTERM is not held up."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
    from tlsfiles import make_tls_files
    tls = make_tls_files(h.mktemp())
    group = 'tls = { ca_file = "%s"; server_name = "localhost"; };' % tls["ca"]
    src = t.redis()
    for what, handler, pattern in (
            ("trickled PING answer", lambda conn, args: conn.trickle(
                b"$100000\r\n" + b"x" * 100000, interval=0.3, limit_s=30),
             r"PING: no complete answer within %d ms" % CMD_TIMEOUT),
            ("$3000000000 PING answer", huge, r"max_reply_bytes \(1048576\)")):
        lk = FakeRedis({"PING": handler}, tls=(tls["server_cert"], tls["server_key"]))
        t.cleanup(lk.close)
        mport = h.free_port()
        b = start(t, main_text('host = "127.0.0.1"; port = %d; %s' % (lk.port, group), mport),
                  {"psub.cfg": psub_text(src.port)})
        h.wait_until(lambda: h.http_status(mport, 0.3) is not None, 10, 0.05, "metrics")
        baseline = rss(b.pid)
        line = wait_log(b, r".*127\.0\.0\.1:%d.*%s.*" % (lk.port, pattern), 10)
        peak = watch_rss(b, 1.5)
        dt = term_time(b)
        h.log("TLS, %s: %s; RSS peak %.1f MiB; exit %s s after SIGTERM" % (what, line, peak / MiB, dt))
        t.check(line is not None, "TLS, %s: no error naming the server" % what)
        t.check(dt is not None and dt <= DRAIN / 1000.0 + 1.0, "TLS, %s: exit %s s" % (what, dt))
        t.check(peak < rss_limit(baseline), "TLS, %s: RSS %.1f MiB (start %.1f)"
                % (what, peak / MiB, baseline / MiB))


# ---- d. locker script answers of the wrong type ---------------------------------

def script_answer_case(t, answer, expect):
    def evalsha(conn, args):
        return conn.send(answer) and NO_REPLY

    lk = fake(t, EVALSHA=evalsha, EVAL=evalsha)
    src = t.redis()
    mport = h.free_port()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, mport),
                {"psub.cfg": psub_text(src.port)})
    line = wait_log(b, r".*127\.0\.0\.1:%d.*%s.*" % (lk.port, expect), 10)
    time.sleep(1.0)
    st = h.status_endpoints(mport).get("psub", {})
    h.log("acquire answered %r: role %r; error: %s" % (answer, st.get("role"), line))
    t.check(line is not None, "no error naming the server for the answer %r" % answer)
    t.check("promoted" not in b.stderr_text(), "promoted on the answer %r" % answer)
    t.check(st.get("role") not in ("leader", None), "/status role %r" % st.get("role"))
    t.check(len(lk.seen("EVALSHA")) + len(lk.seen("EVAL")) > 0, "no script was run")
    b.term()


def test_d_script_answer_string(t):
    script_answer_case(t, b"$1\r\n1\r\n", "the script answered a string, not an integer")


def test_d_script_answer_overflow(t):
    # hiredis 0.14.1 says "Bad integer value"; baton's own check the other
    script_answer_case(t, b":99999999999999999999\r\n",
                       "(Bad integer value|integer reply not a 64-bit)")


def test_d_script_answer_other_types(t):
    for answer, expect in ((b"$-1\r\n", "the script answered nil"),
                           (b"*1\r\n:1\r\n", "the script answered an array"),
                           (b"+OK\r\n", "the script answered a status"),
                           (b":-1\r\n", "bad epoch -1")):
        script_answer_case(t, answer, re.escape(expect))


def test_d_renew_answered_with_a_string(t):
    """A lease the server did grant (acquire :<epoch>), then renewals answered
    "1" as a string: never taken as renewed; the leader steps down by the
    lease deadline."""
    from fake_redis import script_kind

    def evalsha(conn, args):
        if b"redis.call('TIME')" in script_kind(lk, args):
            return 1800000000000000
        return b"1"

    lk = fake(t, EVALSHA=evalsha, EVAL=evalsha)
    src = t.redis()
    mport = h.free_port()
    b = start(t, main_text('host = "127.0.0.1"; port = %d;' % lk.port, mport),
              {"psub.cfg": psub_text(src.port)})
    t.require(wait_log(b, r"promoted to leader", 10), "the granted lease was not taken")
    t0 = time.monotonic()
    line = wait_log(b, r".*demoted from leader.*", 3 * int(LEASE["ttl_ms"]) / 1000.0)
    took = time.monotonic() - t0
    err = re.search(r".*127\.0\.0\.1:%d: (renew|check)[^\n]*the script answered a string.*"
                    % lk.port, b.stderr_text())
    h.log("renew answered \"1\": demoted %.2f s after the promotion was seen (ttl %d ms): %s; %s"
          % (took, LEASE["ttl_ms"], line, err.group(0) if err else None))
    t.check(line is not None, "still leader with every renewal answered by a string")
    t.check(err is not None, "no error naming the server and the answer")
    # (the fake grants every acquisition: baton may lead again right after)
    t.check(took <= LEASE["ttl_ms"] / 1000.0 + 0.5,
            "led %.2f s on renewals answered by a string (ttl %d ms)" % (took, LEASE["ttl_ms"]))
    b.term()


# ---- e. a sentinel port with junk ---------------------------------------------------

def test_e_sentinel_port_junk(t):
    d = h.mktemp()
    cfg = os.path.join(d, "baton.cfg")
    os.makedirs(os.path.join(d, "endpoints.d"))
    with open(cfg, "w") as f:
        f.write(main_text('sentinels = [ "127.0.0.1:26400abc" ]; master_name = "m";', 9999))
    rc, out, err = h.run_baton(["-c", cfg, "--check-config"])
    h.log("sentinel port 26400abc: exit %d: %s" % (rc, (out + err).strip().splitlines()[-1:]))
    t.check(rc == 78, "exit %d, expected 78" % rc)
    t.check("26400abc" in out + err, "the value is not named: %r" % (out + err))

    with open(cfg, "w") as f:
        f.write(main_text('host = "127.0.0.1"; port = 6379;', 9999))
    with open(os.path.join(d, "endpoints.d", "p.cfg"), "w") as f:
        f.write('name = "p"; type = "redis_psub"; sink = "out"; patterns = ["a"]; '
                'sentinels = [ "127.0.0.1:26400abc" ]; master_name = "m";\n')
    rc, out, err = h.run_baton(["-c", cfg, "--check-config"])
    t.check(rc == 78 and "26400abc" in out + err,
            "redis_psub sentinel: exit %d: %r" % (rc, (out + err)[-300:]))


if __name__ == "__main__":
    h.main(globals())
